"""Load a policy by name: the embedded model, a local folder or a cached hub id, ready for generation."""

from __future__ import annotations

from rloo_demo.models.hub import resolve_model


def load_policy(name: str):
    """``(model, tokenizer)`` for a policy name, with left padding and a pad token, ready for generation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # torch loads with the first policy, not at import

    folder = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    return model, tokenizer
