"""Chat prompts: TRL's conversational format for instruct models, and readable text for everything else.

A ``chat`` run's prompts are lists of messages (``[{"role": "system", ...}, {"role": "user", ...}]``). TRL applies
the policy tokenizer's chat template when it tokenizes them and decodes each completion into one assistant message,
so an instruct model sees the markers it was tuned on. Everything a person reads (Rollouts, Compare, ``evaluate``,
``infer``) and every reward function works on plain text instead: the user turn (``prompt_text``) and the reply
(``rewards.completion_text``), never the template's markers.

The template ``auto`` (the default) means ``chat`` when the policy's tokenizer has a chat template and
``continuation`` otherwise; it is resolved when the policy is known (``effective_template``), so the embedded model,
which has none, keeps its continuation prompts.
"""

from __future__ import annotations

import json
from pathlib import Path

AUTO, CHAT = "auto", "chat"
ROLES = ("system", "user", "assistant")


def is_messages(prompt) -> bool:
    """Whether ``prompt`` is a list of ``{"role", "content"}`` messages with text content."""
    return (
        isinstance(prompt, list)
        and bool(prompt)
        and all(isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in prompt)
    )


def to_messages(prompt, system_prompt: str | None = None) -> list[dict]:
    """A prompt (text, or messages) as TRL's conversational prompt, with ``system_prompt`` first unless the messages
    already have a system message. Messages keep only ``role`` and ``content``."""
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def prompt_text(prompt) -> str:
    """What a person reads of a prompt: the text itself, or a conversation's user turn (the system message left out;
    a multi-turn conversation reads as ``role: content`` lines)."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list):
        return str(prompt)
    turns = [m for m in prompt if isinstance(m, dict) and m.get("role") != "system"]
    if len(turns) == 1:
        return str(turns[0].get("content", ""))
    return "\n".join(f"{m.get('role')}: {m.get('content', '')}" for m in turns)


def prompt_key(prompt) -> str:
    """A stable text for hashing and de-duplicating a prompt of either kind."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False)


# ----------------------------------------------------------------------------- the policy's chat template


def chat_template_of(folder: str | Path) -> str | None:
    """The chat template saved with a tokenizer folder, read from its files (nothing loads): transformers 5 writes
    ``chat_template.jinja``; older saves keep it in ``chat_template.json`` or ``tokenizer_config.json``."""
    folder = Path(folder)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8") or None
    for name in ("chat_template.json", "tokenizer_config.json"):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        template = data.get("chat_template") if isinstance(data, dict) else None
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if isinstance(template, str) and template:
            return template
    return None


def has_chat_template(folder: str | Path) -> bool:
    return chat_template_of(folder) is not None


def effective_template(config, folder: str | Path | None = None) -> str:
    """The prompt template a run uses: ``auto`` resolved against the policy's tokenizer (``folder``, or the policy
    resolved by name), any other template as it is."""
    if config.prompt_template != AUTO:
        return config.prompt_template
    if folder is None:
        from rloo_demo.hub import resolve_model

        folder = resolve_model(config.policy)
    return CHAT if has_chat_template(folder) else "continuation"


def check_template(config, folder: str | Path | None = None) -> str:
    """The run's template, or ``ConfigError`` where the policy cannot take it: chat prompts need a tokenizer with a
    chat template, and only chat prompts have a system message."""
    from rloo_demo.config import ConfigError

    if folder is None:
        from rloo_demo.hub import resolve_model

        folder = resolve_model(config.policy)
    template = effective_template(config, folder)
    if template == CHAT and not has_chat_template(folder):
        raise ConfigError(
            {
                "prompt_template": f"chat prompts need a tokenizer with a chat template, and {config.policy!r} has "
                "none; use continuation or instruction, or an instruct model"
            }
        )
    if config.system_prompt and template != CHAT:
        raise ConfigError(
            {
                "system_prompt": f"only chat prompts have a system message, and this run's prompts are {template!r} "
                f"(the policy {config.policy!r} has no chat template); leave it empty"
            }
        )
    return template


def run_prompts(config, part: str = "train", limit: int | None = None, folder: str | Path | None = None):
    """The ``prompt`` dataset of a run (``part``: train or heldout), in the run's effective template."""
    from rloo_demo.data import prompt_dataset

    return prompt_dataset(
        config.data_source,
        part,
        effective_template(config, folder),
        config.prompt_words,
        limit,
        config.text_column,
        system_prompt=config.system_prompt,
    )


def as_run_prompt(config, text: str, folder: str | Path | None = None):
    """A typed prompt as the run's policy saw its prompts: the user turn of a chat (with the run's system prompt),
    or the text itself."""
    if effective_template(config, folder) == CHAT:
        return to_messages(text, config.system_prompt)
    return text


def encode_prompt(tokenizer, prompt) -> list[int]:
    """Token ids of a prompt as TRL builds them: plain text through the tokenizer, messages through the chat
    template with the assistant's turn opened (``add_generation_prompt``)."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt).input_ids)
    encoded = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])
