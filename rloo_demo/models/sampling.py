"""Seeded sampling from a causal LM, independent of torch's global random state.

``model.generate`` draws from torch's global generator, which a training thread in the same process also draws
from; two samplers would then change each other's results. This sampler owns a ``torch.Generator``, so the same
seed gives the same completions for the base and the trained model, even while a run trains next door.

All samples of one prompt are decoded as one batch of identical rows, so no padding (and no position-id
bookkeeping) is needed.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from rloo_demo.errors import InputError
from rloo_demo.i18n import Message
from rloo_demo.models.templates import encode_prompt


def _filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    cumulative = sorted_logits.softmax(-1).cumsum(-1)
    drop = cumulative - sorted_logits.softmax(-1) > top_p  # keep the smallest set whose mass reaches top_p
    sorted_logits[drop] = float("-inf")
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def context_length(config) -> int:
    """Tokens a model reads at most (prompt and completion together), from its config."""
    for key in ("n_positions", "max_position_embeddings"):
        value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def prompt_ids_that_fit(tokenizer, prompt, max_new_tokens: int, max_ctx: int) -> list[int]:
    """The prompt's token ids, or ``InputError`` naming the prompt and its token count when it and
    ``max_new_tokens`` do not fit the context. A character cap does not bound tokens: 500 emoji are over 1,000
    byte-level tokens, past the embedded policy's 256 positions (its position table would be indexed out of range)."""
    if isinstance(prompt, str):
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(
                Message("value.bad_text", name="prompt", problem=Message("cfg.surrogate", at=exc.start))
            ) from None
    if max_new_tokens >= max_ctx:
        raise InputError(Message("sampling.no_room", tokens=max_new_tokens, context=max_ctx))
    ids = encode_prompt(tokenizer, prompt) or [tokenizer.bos_token_id or tokenizer.eos_token_id]
    room = max_ctx - max_new_tokens
    if len(ids) > room:
        raise InputError(
            Message("sampling.too_long", had=f"{len(ids):,}", context=max_ctx, tokens=max_new_tokens, room=f"{room:,}")
        )
    return list(ids)


def cut_to_fit(tokenizer, text: str, max_new_tokens: int, max_ctx: int, render=None) -> tuple[str, int, int]:
    """``(text, tokens dropped, tokens it had)``: a prompt too long for the context, with its start cut until the
    model's input, ``render(text)`` (the text itself, or a chat's messages around it), and ``max_new_tokens`` fit.
    The end is kept because the completion continues it (for a chat, the question is usually last). The cut is at a
    character, found by bisection: cutting token ids could split a character's bytes (a Georgian letter is three
    byte-level tokens), and the decoded debris would re-tokenise longer. ``InputError`` when nothing can fit: the
    new tokens alone fill the context, or the template around the text does."""
    render = render or (lambda t: t)
    if max_new_tokens >= max_ctx:
        raise InputError(Message("sampling.no_room", tokens=max_new_tokens, context=max_ctx))
    room = max_ctx - max_new_tokens

    def fits(start: int) -> bool:
        return len(encode_prompt(tokenizer, render(text[start:]))) <= room

    had = len(encode_prompt(tokenizer, render(text)))
    if had <= room:
        return text, 0, had
    if not fits(len(text)):
        raise InputError(Message("sampling.template_full", had=f"{had:,}", context=max_ctx, tokens=max_new_tokens))
    lo, hi = 0, len(text)  # text[lo:] does not fit, text[hi:] does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    cut = text[hi:]
    dropped = len(tokenizer(text).input_ids) - len(tokenizer(cut).input_ids)
    return cut, max(dropped, 1), had


def fit_prompt(folder: str, text: str, max_new_tokens: int, render=None) -> tuple[str, int, int, int | None]:
    """``cut_to_fit`` with the tokenizer and context of the policy in ``folder``, read before any model loads
    (its tokenizer and ``config.json`` alone), and that context; a folder without a readable config is left to the
    model's load."""
    if isinstance(text, str):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(
                Message("value.bad_text", name="prompt", problem=Message("cfg.surrogate", at=exc.start))
            ) from None
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return text, 0, 0, None
    max_ctx = context_length(config)
    return (*cut_to_fit(_tokenizer(str(folder)), text, max_new_tokens, max_ctx, render), max_ctx)


@functools.lru_cache(maxsize=8)
def _tokenizer(folder: str):
    from transformers import AutoTokenizer  # heavy: loaded with the first check, as load_policy does

    return AutoTokenizer.from_pretrained(folder)


def check_prompt_fits(folder: str, prompt, max_new_tokens: int) -> None:
    """Before any model loads: ``InputError`` when ``prompt`` (a text or a chat's messages) and ``max_new_tokens``
    do not fit the context of the policy in ``folder``, from its tokenizer and ``config.json`` alone."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # the model's own load says what is wrong with it
    prompt_ids_that_fit(_tokenizer(str(folder)), prompt, max_new_tokens, context_length(config))


@torch.no_grad()
def sample_token_ids(
    model,
    prompt_ids: list[int],
    num_samples: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    eos_token_id: int | None,
) -> list[list[int]]:
    """``num_samples`` completions (token ids) of one tokenised prompt, drawn with ``generator``. A completion that
    ends keeps its EOS token, as TRL's completions do (it is part of the action); nothing after it is kept."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids], dtype=torch.long).repeat(num_samples, 1).to(device)
    done = torch.zeros(num_samples, dtype=torch.bool)
    out = torch.empty(num_samples, 0, dtype=torch.long)
    past, step_input = None, ids
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_new_tokens):
            result = model(input_ids=step_input, past_key_values=past, use_cache=True)
            past = result.past_key_values
            logits = result.logits[:, -1, :].float().cpu() / max(temperature, 1e-6)
            probs = _filter_top_p(logits, top_p).softmax(-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            token[done] = eos_token_id if eos_token_id is not None else token[done]
            out = torch.cat([out, token[:, None]], dim=1)
            if eos_token_id is not None:
                done |= token == eos_token_id
                if bool(done.all()):
                    break
            step_input = token[:, None].to(device)
    finally:
        model.train(was_training)
    rows = out.tolist()
    if eos_token_id is not None:
        rows = [row[: row.index(eos_token_id) + 1] if eos_token_id in row else row for row in rows]
    return rows


@torch.no_grad()
def sample(
    model,
    tokenizer,
    prompt,
    num_samples: int = 1,
    max_new_tokens: int = 24,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> list[dict]:
    """``num_samples`` completions of ``prompt``: ``[{"text", "token_ids"}]``, stopping each at EOS (not kept).
    ``prompt`` is a text, or a chat's messages (tokenized through the chat template, as TRL does; the text is then
    the reply)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    prompt_ids = prompt_ids_that_fit(tokenizer, prompt, max_new_tokens, context_length(model.config))
    eos = tokenizer.eos_token_id
    samples = []
    for row in sample_token_ids(model, prompt_ids, num_samples, max_new_tokens, temperature, top_p, gen, eos):
        if eos is not None and row and row[-1] == eos:
            row = row[:-1]
        samples.append({"text": tokenizer.decode(row, skip_special_tokens=True), "token_ids": row})
    return samples


@torch.no_grad()
def sequence_logprob(model, tokenizer, prompt, completion_ids: list[int]) -> float:
    """Sum over the completion's tokens of log p(token | prompt, earlier tokens) under ``model`` (``prompt``: a text
    or a chat's messages)."""
    if not completion_ids:
        return 0.0
    device = next(model.parameters()).device
    prompt_ids = prompt_ids_that_fit(tokenizer, prompt, len(completion_ids), context_length(model.config))
    ids = torch.tensor([prompt_ids + completion_ids], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logps = logits.log_softmax(-1).gather(-1, torch.tensor(completion_ids, device=device)[:, None])
    return float(logps.sum())
