"""The policy's chat template: which prompt template a run uses, and prompts encoded as TRL encodes them.

The template ``auto`` (the default) means ``chat`` when the policy's tokenizer has a chat template and
``continuation`` otherwise; it is resolved when the policy is known (``effective_template``), so the embedded model,
which has none, keeps its continuation prompts.
"""

from __future__ import annotations

import json
from pathlib import Path

from rloo_demo.chat import AUTO, CHAT
from rloo_demo.errors import ConfigError
from rloo_demo.i18n import Message
from rloo_demo.models.hub import resolve_model


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
        folder = resolve_model(config.policy)
    return CHAT if has_chat_template(folder) else "continuation"


def check_template(config, folder: str | Path | None = None) -> str:
    """The run's template, or ``ConfigError`` where the policy cannot take it: chat prompts need a tokenizer with a
    chat template, and only chat prompts have a system message."""
    if folder is None:
        folder = resolve_model(config.policy)
    template = effective_template(config, folder)
    if template == CHAT and not has_chat_template(folder):
        raise ConfigError({"prompt_template": Message("template.no_chat", policy=repr(config.policy))})
    if config.system_prompt and template != CHAT:
        raise ConfigError(
            {"system_prompt": Message("template.no_system", template=repr(template), policy=repr(config.policy))}
        )
    return template


def encode_prompt(tokenizer, prompt) -> list[int]:
    """Token ids of a prompt as TRL builds them: plain text through the tokenizer, messages through the chat
    template with the assistant's turn opened (``add_generation_prompt``)."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt).input_ids)
    encoded = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])
