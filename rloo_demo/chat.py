"""The chat format: TRL's conversational prompts for instruct models, and the text a person reads of them.

A ``chat`` run's prompts are lists of messages (``[{"role": "system", ...}, {"role": "user", ...}]``). TRL applies
the policy tokenizer's chat template when it tokenizes them (``rloo_demo.models.templates``) and decodes each
completion into one assistant message, so an instruct model sees the markers it was tuned on. Everything a person
reads (Rollouts, Compare, ``evaluate``, ``infer``) and every reward function works on plain text instead: the user
turn (``prompt_text``) and the reply (``completion_text``), never the template's markers.

This module is a leaf: it imports nothing of the package, so every layer can use it.
"""

from __future__ import annotations

import json

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


def completion_text(completion) -> str:
    """The text of a completion: a string, or TRL's conversational form (a list of messages)."""
    if isinstance(completion, list):
        return " ".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    return str(completion)
