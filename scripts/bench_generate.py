"""What makes the RLOO step's generation faster on a CPU? (issue 11; measures only, changes nothing)

    python scripts/bench_generate.py              # the embedded policy, 16 completions x 24 tokens, 1 thread
    python scripts/bench_generate.py --threads 2 --repeats 15

Generation is about 40% of a default step. This times, for one batch the size of a default step's (the same
prompt 16 times, exactly 24 new tokens, sampling at T = 1), the median over ``--repeats`` of:

1. ``model.generate`` as TRL calls it (dynamic KV cache);
2. the same with ``cache_implementation="static"`` (issue 11 asked whether a static cache pays on a CPU);
3. a plain KV-cache loop over the same Hugging Face forward (``rloo_demo.models.sampling.sample_token_ids``): what
   ``generate``'s own machinery (logits processors, stopping criteria, cache bookkeeping) costs;
4. the engine's GPT-2 decode (``rloo_demo.fast.lean_decode.lean_generate``) drawing as ``generate`` does
   (``torch.multinomial``), checked to give ``generate``'s tokens for the same seed;
5. the same decode with the engine's draw (one uniform per row, ``inverse_cdf_draw``): ``torch.multinomial``
   draws an exponential variate for each of the 16 x 4,096 probabilities at every step, about 1.8 ms of a 7 ms
   decode step here (torch's profiler).

A forward of this 4-layer model is thousands of tiny ops, so the time is mostly dispatch: a decode that skips
``generate``'s machinery saves a part of it, not all.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import GenerationConfig

from rloo_demo.fast.lean_decode import inverse_cdf_draw, lean_generate, lean_plan, multinomial_draw
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import sample_token_ids


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
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        eos_token_id=[],  # no end: every completion is new_tokens long
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        disable_compile=True,
    )
    config = GenerationConfig(**settings)
    mask = torch.ones_like(ids)
    gen = torch.Generator().manual_seed(0)
    plan = lean_plan(model, config, ids.size(1))
    if isinstance(plan, str):
        raise SystemExit(f"the lean decode does not apply: {plan}")
    with torch.no_grad():
        torch.manual_seed(0)
        expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        torch.manual_seed(0)
        same = torch.equal(lean_generate(model, ids, mask, plan, multinomial_draw), expected)
        runs = {
            "generate, dynamic cache (TRL's call)": lambda: model.generate(
                input_ids=ids, attention_mask=mask, generation_config=config
            ),
            "generate, static cache": lambda: model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=GenerationConfig(**settings, cache_implementation="static"),
            ),
            "plain KV-cache loop, HF forward": lambda: sample_token_ids(
                model, prompt, args.completions, args.new_tokens, 1.0, 1.0, gen, None
            ),
            "lean decode, generate's draws": lambda: lean_generate(model, ids, mask, plan, multinomial_draw),
            "lean decode, inverse-CDF draws (engine)": lambda: lean_generate(model, ids, mask, plan, inverse_cdf_draw),
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
    print(f"  lean decode with generate's draws gives generate's tokens for the same seed: {same}")
    print(json.dumps({"seconds": out, "threads": args.threads, "lean_tokens_equal_generate": same}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
