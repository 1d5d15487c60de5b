"""Measure how readable a policy's text is: real-word rate of its samples and per-word held-out perplexity.

    python scripts/eval_policy.py                                  # the embedded policy against the old asset
    python scripts/eval_policy.py --policy runs/x/model --baseline none
    python scripts/eval_policy.py --baseline git:b534667           # any commit's assets/tiny-imdb-gpt2

Two figures, each printed for the policy, the baseline and real text:

- **real-word rate**: the share of alphabetic words (runs of letters, with inner apostrophes: ``don't``,
  ``movie's``) in sampled continuations that Debian's ``wamerican`` list (``/usr/share/dict/words``) holds,
  ignoring case. Prompts are the first 6 words of held-out Rotten Tomatoes sentences; one continuation each, 24
  new tokens, T = 1, top-p 1, seed = prompt index. "Real text" is the rest of the same sentences. The word list
  is installed by ``scripts/test.sh`` (``apt-get install wamerican``); this script installs nothing.
  Two samplers: the whole distribution (what RLOO trains on and the app shows), and ``model.generate``'s
  default, which quietly adds ``top_k = 50``. Issue 11's 0.950 for the old policy is the second; the first,
  for the same policy and prompts, is 0.863.
- **per-word perplexity**: exp(total NLL / words) over held-out IMDB reviews, with words counted by whitespace,
  so that policies with different tokenizers compare fairly. Each review is scored from an EOS token on, in
  windows of ``--context`` tokens (128) with half-window overlap, so every token after the first window sees at
  least 64 tokens of history. (The old policy says ``n_positions = 256`` but never trained positions beyond 128;
  a 256 window gives it 1,833 per word, 1,217 with 128.) Per-token perplexity is printed too; it depends on the
  tokenizer. (Issue 11's 1,540 per word for the old policy left each review's first token unscored and used a
  256 window.)
- **classifier confidence**: the embedded sentiment classifier's mean probability for its label on the samples,
  to see whether the reward model is less sure of the new policy's text.

Held-out means ``rloo_demo.task.data.is_heldout``: never used for pretraining, RLOO prompts or the reward model.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from rloo_demo.models.sampling import sample
from rloo_demo.task.data import load_embedded, split

WORDS_FILE = "/usr/share/dict/words"
OLD_ASSET = "git:b534667"  # the 4-layer, 1.35M-parameter policy that issue 11 replaced
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")


def load_word_list(path: str = WORDS_FILE) -> set[str]:
    """The lower-cased entries of a word list, one word per line."""
    if not Path(path).is_file():
        sys.exit(
            f"{path} is missing: install Debian's word list with `apt-get install wamerican` (scripts/test.sh does)"
        )
    with open(path, encoding="utf-8", errors="ignore") as f:
        return {line.strip().lower() for line in f if line.strip()}


def alphabetic_words(text: str) -> list[str]:
    """Runs of letters, keeping inner apostrophes: "it's a 10/10 B-movie" -> ["it's", "a", "B", "movie"]."""
    return _WORD.findall(text)


def real_word_rate(texts: Iterable[str], words: set[str]) -> tuple[float, int]:
    """``(share of alphabetic words found in words, ignoring case; number of alphabetic words)``."""
    found = [w.lower() in words for t in texts for w in alphabetic_words(t)]
    return (sum(found) / len(found) if found else float("nan")), len(found)


def rt_prompts(n: int, prompt_words: int = 6) -> tuple[list[str], list[str]]:
    """``(prompts, real continuations)``: the first ``prompt_words`` words of the first ``n`` held-out Rotten
    Tomatoes sentences that are longer than that, and the rest of each sentence."""
    prompts, rest = [], []
    for text in split(load_embedded("rotten_tomatoes"), "heldout")["text"]:
        w = text.split()
        if len(w) > prompt_words:
            prompts.append(" ".join(w[:prompt_words]))
            rest.append(" ".join(w[prompt_words:]))
        if len(prompts) == n:
            break
    return prompts, rest


def continuations(
    model, tokenizer, prompts: Sequence[str], max_new_tokens: int = 24, seed: int = 0, top_k: int = 0
) -> list[str]:
    """One sampled continuation per prompt (T = 1, top-p 1), prompt i with seed ``seed + i``.

    ``top_k = 0`` samples from the whole distribution, as RLOO training and the app do (``rloo_demo.models.sampling``).
    ``top_k > 0`` goes through ``model.generate``, whose default ``top_k`` is 50 when none is given."""
    if not top_k:
        return [
            sample(model, tokenizer, p, 1, max_new_tokens, 1.0, 1.0, seed + i)[0]["text"] for i, p in enumerate(prompts)
        ]
    out = []
    for i, p in enumerate(prompts):
        torch.manual_seed(seed + i)
        enc = tokenizer(p, return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(
                **enc, do_sample=True, top_k=top_k, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id
            )
        out.append(tokenizer.decode(ids[0, enc.input_ids.size(1) :], skip_special_tokens=True))
    return out


def classifier_confidence(texts: Sequence[str]) -> float:
    """Mean probability the embedded sentiment classifier gives its chosen label (0.5: no idea, 1: certain)."""
    from rloo_demo.task.rewards import sentiment_pipeline

    results = sentiment_pipeline()(list(texts), truncation=True, max_length=256, batch_size=64)
    return sum(r["score"] for r in results) / len(results)


@torch.no_grad()
def heldout_nll(model, tokenizer, texts: Sequence[str], context: int | None = None) -> tuple[float, int, int]:
    """``(total NLL in nats, scored tokens, whitespace words)`` over ``texts`` (see the module docstring), in
    windows of ``context`` tokens (default: the model's ``n_positions``)."""
    model.eval()
    ctx = min(context or getattr(model.config, "n_positions", 1024), 1024)
    stride = ctx // 2
    eos = tokenizer.eos_token_id
    total, n_tokens, n_words = 0.0, 0, 0
    for text in texts:
        ids = torch.tensor([eos, *tokenizer(text).input_ids])
        n_words += len(text.split())
        scored = 1  # position 0 (EOS) is context only
        start = 0
        while scored < len(ids):
            end = min(start + ctx, len(ids))
            logits = model(input_ids=ids[None, start:end]).logits[0].float()
            logps = logits[:-1].log_softmax(-1).gather(-1, ids[start + 1 : end, None])[:, 0]
            new = logps[scored - start - 1 :]  # only tokens no earlier window scored
            total -= float(new.sum())
            n_tokens += new.numel()
            scored = end
            start = max(end - ctx + stride, start + 1) if end < len(ids) else end
    return total, n_tokens, n_words


def resolve(spec: str, tmp: Path) -> str | None:
    """A model folder for ``spec``: a folder, ``embedded:<asset>``, ``git:<commit>[:<path>]`` or ``none``."""
    if spec in ("", "none"):
        return None
    if spec.startswith("git:"):
        commit, _, path = spec[4:].partition(":")
        path = path or "assets/tiny-imdb-gpt2"
        try:
            data = subprocess.run(["git", "archive", commit, path], check=True, capture_output=True).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"baseline {spec}: git archive failed ({exc}); skipped")
            return None
        dest = tmp / commit
        archive = tmp / f"{commit}.tar"
        archive.write_bytes(data)
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
        return str(dest / path)
    from rloo_demo.models.hub import resolve_model

    return resolve_model(spec)


def measure(
    folder: str, prompts: Sequence[str], reviews: Sequence[str], words: set[str], max_new_tokens: int, context: int
) -> dict:
    from rloo_demo.models.policy import load_policy

    model, tok = load_policy(folder)
    samples = continuations(model, tok, prompts, max_new_tokens)
    rate, n = real_word_rate(samples, words)
    rate_top50, _ = real_word_rate(continuations(model, tok, prompts, max_new_tokens, top_k=50), words)
    nll, n_tokens, n_words = heldout_nll(model, tok, reviews, context)
    c = model.config
    return {
        "policy": folder,
        "layers": c.n_layer,
        "d_model": c.n_embd,
        "vocab": c.vocab_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "real_word_rate": round(rate, 4),
        "real_word_rate_top_k_50": round(rate_top50, 4),
        "alphabetic_words": n,
        "classifier_confidence": round(classifier_confidence(samples), 4),
        "perplexity_per_word": round(math.exp(nll / n_words), 1),
        "perplexity_per_token": round(math.exp(nll / n_tokens), 1),
        "tokens_per_word": round(n_tokens / n_words, 3),
        "samples": samples[:3],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="embedded:tiny-imdb-gpt2", help="policy to measure (folder or embedded:)")
    ap.add_argument(
        "--baseline", default=OLD_ASSET, help="policy to print beside it: folder, embedded:, git:<commit>, or none"
    )
    ap.add_argument("--num-prompts", type=int, default=128, help="held-out Rotten Tomatoes prompts (one sample each)")
    ap.add_argument("--num-reviews", type=int, default=300, help="held-out IMDB reviews for the perplexity")
    ap.add_argument(
        "--context",
        type=int,
        default=128,
        help="perplexity window in tokens (0: each model's n_positions); 128 is what both policies pretrained on "
        "most, and more than an RLOO prompt and completion use",
    )
    ap.add_argument("--max-new-tokens", type=int, default=24, help="tokens per sampled continuation")
    ap.add_argument("--words", default=WORDS_FILE, help="word list, one word per line")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core machine)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    words = load_word_list(args.words)
    prompts, real_rest = rt_prompts(args.num_prompts)
    reviews = split(load_embedded("imdb"), "heldout")["text"][: args.num_reviews]
    real_rate, real_n = real_word_rate(real_rest, words)
    results = {"real_text": {"real_word_rate": round(real_rate, 4), "alphabetic_words": real_n}}
    with tempfile.TemporaryDirectory() as tmp:
        for label, spec in (("policy", args.policy), ("baseline", args.baseline)):
            folder = resolve(spec, Path(tmp))
            if folder is not None:
                results[label] = {
                    "spec": spec,
                    **measure(folder, prompts, reviews, words, args.max_new_tokens, args.context),
                }

    print(
        f"{len(prompts)} held-out RT prompts x 1 sample x {args.max_new_tokens} tokens; {len(reviews)} held-out reviews"
    )
    print(
        f"{'':10} {'shape':>14} {'params':>7} {'real-word rate':>15} {'(top-k 50)':>11} {'ppl/word':>9} "
        f"{'ppl/token':>10} {'clf. conf.':>10}"
    )
    for label in ("policy", "baseline"):
        if label in results:
            r = results[label]
            shape = f"{r['layers']}L d{r['d_model']} v{r['vocab']}"
            print(
                f"{label:10} {shape:>14} {r['parameters'] / 1e6:6.2f}M {r['real_word_rate']:>15.3f} "
                f"{r['real_word_rate_top_k_50']:>11.3f} {r['perplexity_per_word']:>9.0f} "
                f"{r['perplexity_per_token']:>10.1f} {r['classifier_confidence']:>10.3f}   ({r['spec']})"
            )
    print(f"{'real text':10} {'':>14} {'':>7} {real_rate:>15.3f}   (the rest of the same RT sentences)")
    print(
        "real-word rate: T = 1 over the whole distribution, as in training and the app; (top-k 50): the same through "
        "model.generate's default top_k = 50.\nclf. conf.: the embedded sentiment classifier's mean probability for "
        "its label on the samples."
    )
    for label in ("policy", "baseline"):
        for p, s in zip(prompts, results.get(label, {}).get("samples", []), strict=False):
            print(f"  {label:8} | {p} | {s}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
