"""Sampling from a GPT-2 policy without ``generate``'s machinery, for the RLOO step.

Generation is the largest part of a default step on a CPU: 24 decode steps of a 4-layer model, each thousands of
tiny ops, where ``generate`` adds its own per-step work (mask building, cache bookkeeping, input preparation,
stopping criteria) on top of the model's. ``lean_generate`` runs the same GPT-2 arithmetic written out over the
model's own modules and weights (the same ``addmm``, layer norms, activation and scaled-dot-product attention as
Hugging Face's GPT-2), applies Hugging Face's own logits processors and pads finished rows, as ``generate`` does.

Each token is then drawn by ``draw``. The engine's is ``inverse_cdf_draw``: one uniform per row from torch's global
generator, where ``torch.multinomial`` (``multinomial_draw``, what ``generate`` uses) draws an exponential variate
for every entry of the vocabulary; same distribution, other draws. With ``multinomial_draw`` the decode gives
``generate``'s tokens for the same seed (``tests/fast/test_lean_decode.py``), which is how its forward is checked.
``scripts/bench_generate.py`` times both against ``generate`` (docs/internals.md, "The step").

``lean_plan`` says when this applies: a plain ``GPT2LMHeadModel`` with nothing that changes its forward (dropout
while training, cross-attention, reordered attention), and generation settings whose only logits processors are
temperature, top-k, top-p and min-p. Anything else returns the reason, and the caller uses ``generate``.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, LogitsProcessorList
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

_SAMPLING_PROCESSORS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper)


@dataclasses.dataclass
class LeanPlan:
    """What ``lean_generate`` needs besides the model and the prompts."""

    processors: LogitsProcessorList
    max_new_tokens: int
    eos_token_ids: list[int]
    pad_token_id: int


def _plain_gpt2(model) -> str | None:
    """Why ``model``'s forward is not the one ``lean_generate`` writes out, or None if it is."""
    from transformers import GPT2LMHeadModel

    if type(model) is not GPT2LMHeadModel:
        return f"{type(model).__name__} is not a plain GPT2LMHeadModel"
    cfg = model.config
    if cfg.add_cross_attention or cfg.scale_attn_by_inverse_layer_idx or not cfg.scale_attn_weights:
        return "its GPT-2 config changes the attention"
    if cfg.reorder_and_upcast_attn:
        return "reorder_and_upcast_attn is set"
    if model.training and any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        return "dropout is active"
    if getattr(model, "hf_quantizer", None) is not None:
        return "the model is quantized"
    return None


def lean_plan(model, generation_config: GenerationConfig, prompt_length: int) -> LeanPlan | str:
    """A plan for sampling from ``model`` as ``model.generate(generation_config=...)`` would, or why there is none.

    Uses ``generate``'s own preparation of the settings (the model's defaults merged in) and its own logits
    processors, so what is applied is what ``generate`` applies; only their set is checked here."""
    reason = _plain_gpt2(model)
    if reason:
        return reason
    device = next(model.parameters()).device
    try:
        config, _ = model._prepare_generation_config(generation_config)
        # the special-token tensors that some processors read (min-length ones read the EOS tensor)
        model._prepare_special_tokens(config, kwargs_has_attention_mask=True, device=device)
        processors = model._get_logits_processor(
            generation_config=config,
            input_ids_seq_length=prompt_length,
            encoder_input_ids=torch.zeros(1, prompt_length, dtype=torch.long, device=device),
            prefix_allowed_tokens_fn=None,
            logits_processor=LogitsProcessorList(),
            device=device,
            model_kwargs={},
        )
    except Exception as error:  # a transformers version whose private helpers differ: generate is always right
        return f"transformers' generation helpers changed ({type(error).__name__}: {error})"
    unsupported = [type(p).__name__ for p in processors if not isinstance(p, _SAMPLING_PROCESSORS)]
    if unsupported:
        return "logits processors other than temperature/top-k/top-p/min-p: " + ", ".join(unsupported)
    if not config.do_sample or (config.num_beams or 1) != 1 or (config.num_return_sequences or 1) != 1:
        return "not plain sampling"
    if config.stop_strings or config.max_time is not None or config.cache_implementation is not None:
        return "stop strings, a time limit or a cache implementation are set"
    if config.output_scores or config.output_logits or config.return_dict_in_generate:
        return "scores or a dict output were asked for"
    if config.max_new_tokens is None or config.pad_token_id is None:
        return "max_new_tokens and pad_token_id must be set"
    if prompt_length + config.max_new_tokens > model.config.n_positions:
        return "prompt and completion are longer than the model's context"
    eos = config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    return LeanPlan(processors, int(config.max_new_tokens), [int(e) for e in eos], int(config.pad_token_id))


def multinomial_draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row as ``generate`` draws it: ``torch.multinomial``, which on a CPU draws an exponential
    variate for every entry of ``probs`` (16 rows of a 4,096-token vocabulary: 65,536 draws a token)."""
    return torch.multinomial(probs, num_samples=1).squeeze(1)


def inverse_cdf_draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row from the same distribution with one uniform variate per row (torch's global generator,
    as ``generate``): the first token whose cumulative probability exceeds it. In float64, ``u * total`` stays below
    ``total`` for every ``u < 1``, and a token of probability 0 adds nothing to the cumulative sum, so no token of
    probability 0 is ever the first to exceed it, at either end of the vocabulary. Probabilities that are not
    finite (a run whose weights diverged) raise what ``torch.multinomial`` raises, not an index past the vocabulary."""
    cdf = probs.double().cumsum(-1)
    if not bool(torch.isfinite(cdf[:, -1]).all()) or bool((probs < 0).any()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if bool((cdf[:, -1] <= 0).any()):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    target = torch.rand(probs.shape[0], 1, dtype=torch.float64, device=probs.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, target, right=True).squeeze(1)


def _attend(block, x, mask, cache, layer):
    """One GPT-2 block on new positions ``x`` (batch, new, dim), extending ``cache[layer]``: Hugging Face's GPT-2
    (modeling_gpt2) with its modules called directly. ``mask`` None: causal, as Hugging Face's SDPA path runs
    when nothing is padded."""
    attn, mlp = block.attn, block.mlp
    batch, new, dim = x.shape
    heads = attn.num_heads
    q, k, v = attn.c_attn(block.ln_1(x)).split(dim, dim=2)
    q = q.view(batch, new, heads, -1).transpose(1, 2)
    k = k.view(batch, new, heads, -1).transpose(1, 2)
    v = v.view(batch, new, heads, -1).transpose(1, 2)
    if layer < len(cache):
        k = torch.cat([cache[layer][0], k], dim=2)
        v = torch.cat([cache[layer][1], v], dim=2)
        cache[layer] = (k, v)
    else:
        cache.append((k, v))
    causal = mask is None and new > 1
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=attn.scaling)
    x = x + attn.c_proj(a.transpose(1, 2).reshape(batch, new, dim))
    return x + mlp.c_proj(mlp.act(mlp.c_fc(block.ln_2(x))))


@torch.no_grad()
def lean_generate(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, plan: LeanPlan, draw=inverse_cdf_draw
) -> torch.Tensor:
    """Prompt and completion ids, (batch, prompt + new), as ``generate`` returns them for left-padded prompts.

    Positions count real tokens only (``attention_mask.cumsum - 1``, as ``generate`` makes them); a padding
    position may attend to itself only, so its (unused) state stays finite and never reaches a real token."""
    tr = model.transformer
    batch, length = input_ids.shape
    device = input_ids.device
    real = attention_mask.bool()
    padded = not bool(real.all())
    position = (attention_mask.long().cumsum(-1) - 1).masked_fill(~real, 0)
    mask = None
    if padded:
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        mask = ((causal[None] & real[:, None, :]) | torch.eye(length, dtype=torch.bool, device=device)[None])[:, None]
    keys = real  # which cached positions a new token may attend to
    x = tr.wte(input_ids) + tr.wpe(position)
    next_position = position[:, -1:] + 1
    cache: list = []
    ids = input_ids
    unfinished = torch.ones(batch, dtype=torch.long, device=device)
    eos = torch.tensor(plan.eos_token_ids, dtype=torch.long, device=device)
    for step in range(plan.max_new_tokens):
        for layer, block in enumerate(tr.h):
            x = _attend(block, x, mask, cache, layer)
        logits = model.lm_head(tr.ln_f(x[:, -1:]))[:, -1].to(copy=True, dtype=torch.float32)
        scores = plan.processors(ids, logits)
        token = draw(F.softmax(scores, dim=-1))
        token = token * unfinished + plan.pad_token_id * (1 - unfinished)
        ids = torch.cat([ids, token[:, None]], dim=-1)
        if len(eos):
            unfinished = unfinished & ~torch.isin(token, eos)
        if step + 1 == plan.max_new_tokens or unfinished.max() == 0:
            break
        # the new token attends to every real prompt position and every token generated so far
        if padded:
            keys = torch.cat([keys, torch.ones(batch, 1, dtype=torch.bool, device=device)], dim=1)
            mask = keys[:, None, None, :]
        x = tr.wte(token[:, None]) + tr.wpe(next_position)
        next_position = next_position + 1
    return ids
