"""What could make the RLOO step's generation faster on a CPU? (issue 11; measures only, changes nothing)

    python scripts/bench_generate.py              # the embedded policy, 16 completions x 24 tokens, 1 thread
    python scripts/bench_generate.py --threads 2 --repeats 15

Generation is about 40% of a default step. This times, for one batch the size of a default step's (the same
prompt 16 times, exactly 24 new tokens, sampling at T = 1), the median over ``--repeats`` of:

1. ``model.generate`` as TRL calls it (dynamic KV cache);
2. the same with ``cache_implementation="static"`` (issue 11 asked whether a static cache pays on a CPU);
3. a plain KV-cache loop over the same Hugging Face forward (``rloo_demo.sampling.sample_token_ids``): what
   ``generate``'s own machinery (logits processors, stopping criteria, cache bookkeeping) costs;
4. a hand-written GPT-2 decode over the model's own weights (``lean_decode`` below): what the modules' Python
   costs. Its first-step logits are checked against the model's.

A forward of this 4-layer model is thousands of tiny ops, so the time is mostly dispatch: a decode that skips the
modules saves a part of it, not all.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import GenerationConfig

from rloo_demo.hub import EMBEDDED_POLICY
from rloo_demo.sampling import sample_token_ids
from rloo_demo.training import load_policy


def lean_decode(model, ids: torch.Tensor, new_tokens: int, generator: torch.Generator) -> tuple[torch.Tensor, list]:
    """GPT-2 sampling at T = 1 written out with torch functions over ``model``'s weights (no padding: every row
    has the same prompt length). Returns the new tokens and the logits of each step."""
    cfg, tr = model.config, model.transformer
    heads, dim = cfg.n_head, cfg.n_embd // cfg.n_head
    gelu = lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))  # noqa: E731
    batch, length = ids.shape
    x = tr.wte(ids) + tr.wpe(torch.arange(length)[None])
    keys, values, tokens, all_logits = [], [], [], []
    for step in range(new_tokens):
        n = x.shape[1]
        for i, block in enumerate(tr.h):
            h = F.layer_norm(x, (cfg.n_embd,), block.ln_1.weight, block.ln_1.bias, cfg.layer_norm_epsilon)
            qkv = torch.addmm(block.attn.c_attn.bias, h.reshape(-1, cfg.n_embd), block.attn.c_attn.weight)
            q, k, v = qkv.view(batch, n, 3, heads, dim).unbind(2)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            if step == 0:
                keys.append(k)
                values.append(v)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                keys[i], values[i] = torch.cat([keys[i], k], 2), torch.cat([values[i], v], 2)
                a = F.scaled_dot_product_attention(q, keys[i], values[i])
            a = a.transpose(1, 2).reshape(batch * n, -1)
            x = x + torch.addmm(block.attn.c_proj.bias, a, block.attn.c_proj.weight).view(batch, n, -1)
            h = F.layer_norm(x, (cfg.n_embd,), block.ln_2.weight, block.ln_2.bias, cfg.layer_norm_epsilon)
            up = gelu(torch.addmm(block.mlp.c_fc.bias, h.reshape(batch * n, -1), block.mlp.c_fc.weight))
            x = x + torch.addmm(block.mlp.c_proj.bias, up, block.mlp.c_proj.weight).view(batch, n, -1)
        h = F.layer_norm(x[:, -1], (cfg.n_embd,), tr.ln_f.weight, tr.ln_f.bias, cfg.layer_norm_epsilon)
        logits = h @ tr.wte.weight.T
        all_logits.append(logits)
        token = torch.multinomial(logits.softmax(-1), 1, generator=generator)
        tokens.append(token)
        x = tr.wte(token) + tr.wpe(torch.full_like(token, length + step))
    return torch.cat(tokens, 1), all_logits


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--completions", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_policy(EMBEDDED_POLICY)
    model.eval()
    prompt = tok("This movie was really one of the").input_ids
    ids = torch.tensor([prompt] * args.completions)
    settings = dict(
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        disable_compile=True,
    )
    mask = torch.ones_like(ids)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        reference = model(input_ids=ids).logits[:, -1]
        _, first = lean_decode(model, ids, 1, gen)
        runs = {
            "generate, dynamic cache (TRL's call)": lambda: model.generate(
                input_ids=ids, attention_mask=mask, generation_config=GenerationConfig(**settings)
            ),
            "generate, static cache": lambda: model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=GenerationConfig(**settings, cache_implementation="static"),
            ),
            "plain KV-cache loop, HF forward": lambda: sample_token_ids(
                model, prompt, args.completions, args.new_tokens, 1.0, 1.0, gen, None
            ),
            "hand-written GPT-2 decode": lambda: lean_decode(model, ids, args.new_tokens, gen),
        }
        for fn in runs.values():  # warm-up
            fn()
        out = {name: median_seconds(fn, args.repeats) for name, fn in runs.items()}
    ref = out["generate, dynamic cache (TRL's call)"]
    print(
        f"{args.completions} completions x {args.new_tokens} tokens, {args.threads} thread(s), median of {args.repeats}"
    )
    for name, seconds in out.items():
        print(f"  {name:40} {seconds * 1000:7.0f} ms  {seconds / ref:5.2f}x")
    diff = (reference - first[0]).abs().max().item()
    print(f"  hand-written decode vs the model, first-step logits: max |difference| {diff:.2e}")
    print(json.dumps({"seconds": out, "threads": args.threads, "first_step_logit_max_diff": diff}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
