"""Seeded sampling from a causal LM, independent of torch's global random state.

``model.generate`` draws from torch's global generator, which a training thread in the same process also draws
from; two samplers would then change each other's results. This sampler owns a ``torch.Generator``, so the same
seed gives the same completions for the base and the trained model, even while a run trains next door.

All samples of one prompt are decoded as one batch of identical rows, so no padding (and no position-id
bookkeeping) is needed.
"""

from __future__ import annotations

import torch

from rloo_demo.errors import InputError
from rloo_demo.models.templates import encode_prompt


def _filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    cumulative = sorted_logits.softmax(-1).cumsum(-1)
    drop = cumulative - sorted_logits.softmax(-1) > top_p  # keep the smallest set whose mass reaches top_p
    sorted_logits[drop] = float("-inf")
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


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
    ids = torch.tensor([encode_prompt(tokenizer, prompt)], dtype=torch.long)
    if ids.size(1) == 0:
        ids = torch.tensor([[tokenizer.bos_token_id or tokenizer.eos_token_id]])
    max_ctx = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 2048)
    if max_new_tokens >= max_ctx:
        raise InputError(f"{max_new_tokens} new tokens do not fit this model's context of {max_ctx} tokens")
    prompt_ids = ids[0, -(max_ctx - max_new_tokens) :].tolist()
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
    prompt_ids = encode_prompt(tokenizer, prompt)
    ids = torch.tensor([prompt_ids + completion_ids], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logps = logits.log_softmax(-1).gather(-1, torch.tensor(completion_ids, device=device)[:, None])
    return float(logps.sum())
