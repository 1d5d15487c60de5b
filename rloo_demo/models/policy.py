"""Load a policy by name: the embedded model, a local folder or a cached hub id, ready for generation."""

from __future__ import annotations

from pathlib import Path

from rloo_demo.errors import NotFound
from rloo_demo.i18n import Message
from rloo_demo.models.hub import resolve_model


def load_policy(name: str):
    """``(model, tokenizer)`` for a policy name, with left padding and a pad token, ready for generation. A folder
    whose files cannot be read (a truncated or corrupt weights file, a broken tokenizer) is ``NotFound`` saying so,
    not the loader's own error: a run's ``model/`` is "this run's model cannot be read"."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # torch loads with the first policy, not at import

    folder = resolve_model(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    except Exception as exc:  # SafetensorError, OSError, ValueError, json's errors, ...: the files are the problem
        reason = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
        what = Message("policy.run_model") if Path(folder).name == "model" else Message("policy.model", name=repr(name))
        raise NotFound(
            Message("policy.unreadable", what=what, detail=type(exc).__name__ + (": " + reason if reason else ""))
        ) from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
