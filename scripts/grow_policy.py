"""Issue 11's attempt at a stronger embedded policy: grow the shipped one and pretrain it further.

    python scripts/grow_policy.py --out policy-v2 --time-budget 5700 --save-every 250   # the attempt (see below)
    python scripts/eval_policy.py --policy policy-v2                                    # readability against the asset
    python scripts/grow_policy.py --steps 5 --out /tmp/p                                # a smoke run

It was not made the default: after 5,600 s of further pretraining (5.6M tokens) on a shared 2-core machine the
6-layer model's perplexity per word fell 23% (1,217 -> 936) but its samples were no more readable (real-word rate
0.865 at T = 1, as before), and the default RLOO run on it gained less (+0.27 held-out against +0.4 or more). The
figures are in ``assets/tiny-imdb-gpt2/README.md``; ``scripts/build_policy.py`` rebuilds the shipped asset.

By default it does not start from scratch: it grows the previous embedded policy (commit b534667: 4 layers,
d = 128, 4,096 tokens, 6.1M tokens of pretraining) to ``--n-layer`` layers and trains on. The new blocks start as
the identity (their two output projections are zero, so the residual stream passes through unchanged): the grown
model computes exactly what the old one did, and no pretraining already paid for is thrown away. On a 2-core CPU
that is worth more than a bigger width trained from scratch in the same time. The tokenizer, width and heads are
the old model's.

The text is the train part (``rloo_demo.task.data.is_heldout``) of the embedded IMDB reviews and of the Rotten Tomatoes
sentences; the RT sentences are repeated ``--rt-repeat`` times, as they are few but are the style of the prompts
that ``scripts/eval_policy.py`` measures readability with. Held-out reviews and sentences are never seen; the
held-out perplexity printed at the end is per token of this tokenizer (``scripts/eval_policy.py`` gives the
per-word figure that compares across tokenizers).

``--time-budget`` ends training after so many seconds of wall time; the cosine schedule then follows the larger
of the step and the time fractions, so the model is annealed whenever it stops (on a shared machine the number
of steps it reaches varies; it is recorded in ``training_stats.json``).

Most steps use ``--block``-token windows; every 4th step uses windows of the full context (``n_positions``) with
as many tokens in all, so that every position embedding the model can be asked to use is trained.

Dropout is 0 in the saved config: RLOO's sequence-level importance ratio must be computed without dropout noise,
and a model this small does not need it during pretraining either. Weights are stored in fp16 (half the size;
``load_policy`` loads them as fp32). With ``--save-every`` a usable checkpoint is written every so many steps.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import tempfile
import time
from pathlib import Path

import torch
from build_policy import gpt2_config, perplexity, pretraining_texts, token_stream, train_tokenizer
from eval_policy import resolve
from transformers import AutoTokenizer, GPT2LMHeadModel

from rloo_demo.task.data import load_embedded, split

OLD_POLICY = "git:b534667"  # the embedded policy before issue 11, the default starting point

EOS, PAD = "<|endoftext|>", "<|pad|>"


def grow(source: GPT2LMHeadModel, n_layer: int) -> GPT2LMHeadModel:
    """``source`` with identity blocks appended up to ``n_layer`` blocks: same outputs, more capacity."""
    if n_layer < source.config.n_layer:
        raise SystemExit(f"--n-layer {n_layer} is smaller than the starting model's {source.config.n_layer} layers")
    config = copy.deepcopy(source.config)
    config.n_layer = n_layer
    model = GPT2LMHeadModel(config)
    missing, unexpected = model.load_state_dict(source.state_dict(), strict=False)
    new_blocks = tuple(f"transformer.h.{i}." for i in range(source.config.n_layer, n_layer))
    assert not unexpected and all(k.startswith(new_blocks) for k in missing), (missing, unexpected)
    with torch.no_grad():
        for block in model.transformer.h[source.config.n_layer :]:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                proj.weight.zero_()
                proj.bias.zero_()
    return model


def save(model, tokenizer, out: Path, stats: dict, fp16: bool) -> None:
    """The model (fp16 on disk unless asked otherwise), tokenizer and training figures, written to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (copy.deepcopy(model).half() if fp16 else model).save_pretrained(out, safe_serialization=True)
    config = json.loads((out / "config.json").read_text())
    config["dtype"] = "float32"  # fp16 on disk, but from_pretrained (dtype "auto") loads fp32: CPUs compute in fp32
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(out)
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    for key in ("is_local", "local_files_only"):  # where the tokenizer was loaded from, not a setting to ship
        tok_config.pop(key, None)
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    (out / "training_stats.json").write_text(json.dumps(stats, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (overwritten)")
    ap.add_argument(
        "--init-from",
        default=OLD_POLICY,
        help="model to grow and train on: a folder, git:<commit> (its assets/tiny-imdb-gpt2) or none (from scratch)",
    )
    ap.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary size (from scratch only)")
    ap.add_argument("--n-embd", type=int, default=128, help="hidden size (from scratch only)")
    ap.add_argument("--n-layer", type=int, default=6, help="transformer blocks")
    ap.add_argument("--n-head", type=int, default=4, help="attention heads (from scratch only)")
    ap.add_argument("--n-positions", type=int, default=256, help="context length (from scratch only)")
    ap.add_argument("--block", type=int, default=128, help="pretraining window in tokens (every 4th step: n_positions)")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step (of --block tokens)")
    ap.add_argument("--steps", type=int, default=6000, help="optimisation steps (at most)")
    ap.add_argument("--time-budget", type=float, default=None, help="stop after this many seconds of training")
    ap.add_argument("--lr", type=float, default=1.5e-3, help="peak learning rate (warm-up, cosine decay to 10%%)")
    ap.add_argument("--rt-repeat", type=int, default=3, help="times the Rotten Tomatoes train sentences are repeated")
    ap.add_argument("--max-texts", type=int, default=None, help="use only this many reviews and sentences (smoke runs)")
    ap.add_argument("--save-every", type=int, default=0, help="also write a checkpoint to --out every N steps")
    ap.add_argument("--fp32", action="store_true", help="store fp32 weights (default: fp16, loaded as fp32)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--seed", type=int, default=0, help="seed for init, batching and the tokenizer's data order")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    t0 = time.time()
    imdb, rt = load_embedded("imdb"), load_embedded("rotten_tomatoes")
    train_texts = split(imdb, "train")["text"][: args.max_texts]
    rt_texts = split(rt, "train")["text"][: args.max_texts]
    texts = pretraining_texts(train_texts, rt_texts, args.rt_repeat, args.seed)
    heldout_texts = split(imdb, "heldout")["text"][: args.max_texts]

    with tempfile.TemporaryDirectory() as tmp:
        source = resolve(args.init_from, Path(tmp))
        if source is not None:
            tokenizer = AutoTokenizer.from_pretrained(source)
            old = GPT2LMHeadModel.from_pretrained(source, dtype=torch.float32)
            model = grow(old, args.n_layer)
            print(f"grown from {args.init_from}: {old.config.n_layer} -> {model.config.n_layer} layers")
    if source is None:
        tokenizer = train_tokenizer(train_texts + rt_texts, args.vocab_size)
        model = GPT2LMHeadModel(gpt2_config(tokenizer, args.n_positions, args.n_embd, args.n_layer, args.n_head))
    config = model.config
    train_ids = token_stream(tokenizer, texts)
    heldout_ids = token_stream(tokenizer, heldout_texts)
    print(
        f"tokenizer: {len(tokenizer)} tokens; train stream {len(train_ids):,} tokens ({len(train_texts):,} IMDB "
        f"reviews + {len(rt_texts):,} RT sentences x {args.rt_repeat}; {time.time() - t0:.0f}s)"
    )
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_step = args.batch * args.block
    print(f"model: {n_params / 1e6:.2f}M parameters; up to {args.steps} steps x {tokens_per_step:,} tokens")
    print(
        f"held-out perplexity at the start: {perplexity(model, heldout_ids, args.block, max_blocks=60):.1f} per token"
    )
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    warmup = min(200, args.steps // 10 + 1)
    budget = args.time_budget or float("inf")
    t_train, c_train = time.time(), time.process_time()

    def progress(step: int) -> float:
        return max(step / args.steps, (time.time() - t_train) / budget)

    def lr_at(step: int) -> float:
        return (
            args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress(step)))))
        )

    def stats(steps: int, loss: float, ppl: float, final: bool) -> dict:
        return {
            "parameters": n_params,
            "n_layer": config.n_layer,
            "n_embd": config.n_embd,
            "n_head": config.n_head,
            "vocab_size": config.vocab_size,
            "init_from": args.init_from,
            "steps": steps,
            "final": final,
            "batch": args.batch,
            "block": args.block,
            "tokens_seen": steps * tokens_per_step,
            "train_tokens": len(train_ids),
            "rt_repeat": args.rt_repeat,
            "lr": args.lr,
            "time_budget": args.time_budget,
            "seed": args.seed,
            "train_seconds": round(time.time() - t_train, 1),
            "train_cpu_seconds": round(time.process_time() - c_train, 1),
            "torch_threads": torch.get_num_threads(),
            "final_train_loss": round(loss, 3),
            "heldout_perplexity_per_token": round(ppl, 2),
        }

    gen = torch.Generator().manual_seed(args.seed)
    long_rows = max(1, tokens_per_step // config.n_positions)
    step = 0
    while step < args.steps and progress(step) < 1.0:
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        if step % 4 == 3:  # full-context windows: trains the position embeddings beyond --block
            length, rows = config.n_positions, long_rows
        else:
            length, rows = args.block, args.batch
        starts = torch.randint(0, len(train_ids) - length - 1, (rows,), generator=gen)
        batch = torch.stack([train_ids[s : s + length] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 200 == 1:
            print(
                f"step {step:5d}  loss {loss.item():.3f}  lr {lr_at(step):.2e}  {time.time() - t_train:.0f}s",
                flush=True,
            )
        if args.save_every and step % args.save_every == 0:
            ppl = perplexity(model, heldout_ids, args.block, max_blocks=60)
            save(model, tokenizer, out := Path(args.out), stats(step, loss.item(), ppl, False), not args.fp32)
            print(
                f"checkpoint at step {step} in {out}: held-out perplexity {ppl:.1f} per token (60 blocks)", flush=True
            )
    train_stats = stats(step, loss.item(), 0.0, True)

    ppl = perplexity(model, heldout_ids, args.block)
    train_stats["heldout_perplexity_per_token"] = round(ppl, 2)
    model.eval()
    sample_ids = model.generate(
        **tokenizer("This movie was", return_tensors="pt"),
        max_new_tokens=30,
        do_sample=True,
        top_k=0,
        pad_token_id=tokenizer.pad_token_id,
    )
    train_stats["sample"] = tokenizer.decode(sample_ids[0], skip_special_tokens=True)
    save(model, tokenizer, Path(args.out), train_stats, not args.fp32)
    print(f"held-out perplexity {ppl:.1f} per token (200 blocks); sample (T = 1): {train_stats['sample']!r}")
    print(
        f"training time: {train_stats['train_seconds']:.0f} s wall, {train_stats['train_cpu_seconds']:.0f} s CPU, "
        f"{step} steps ({torch.get_num_threads()} threads)"
    )
    print(json.dumps(train_stats, indent=2))


if __name__ == "__main__":
    main()
