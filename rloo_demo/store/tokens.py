"""Token by token: the arithmetic on a completion's per-token record, shared by the capture, the views and the plots.

RLOO scores a whole completion as one action with one advantage, yet the update moves the probability of every
token in it. So every captured completion in ``rollouts.jsonl`` carries parallel lists, one entry per completion
token (``TOKEN_KEYS``):

    token_texts       the decoded piece of each token (the end-of-text token included: it has a probability too)
    token_logp        log π_old(y_t): the policy before the update, as TRL scored it
    token_ref_logp    log π_ref(y_t): the frozen reference (absent when β = 0: TRL then scores no reference)
    token_entropy     the policy's entropy at t, over the whole vocabulary (nats)
    token_logp_after  log π(y_t) under the weights right after this step's optimiser update

From them: Δ log π_t = token_logp_after − token_logp (what the update did to each token), and the per-token KL
estimators k1 = log π − log π_ref (the one TRL sums into the reward: Σ k1 is the completion's ``kl``) and
k3 = r − 1 − log r with r = π_ref/π (Schulman's, never negative, the same expectation).

Numbers are stored rounded to ``DECIMALS`` places so the file stays small, by carrying each value's rounding error
into the next one: every stored prefix sum is the true prefix sum rounded, so Σ token_logp − Σ token_ref_logp
matches ``kl`` to 1e-4 however long the completion is. Pure: no torch, no files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DECIMALS = 4
TOKEN_KEYS = ("token_texts", "token_logp", "token_ref_logp", "token_entropy", "token_logp_after")
KL_ESTIMATORS = ("k1", "k3")


def round_keeping_sum(values: Sequence[float], decimals: int = DECIMALS) -> list[float | None]:
    """``values`` rounded to ``decimals`` places so that every prefix sum of the result is the rounded prefix sum of
    the input (each value is within one unit of the last place; the total within half a unit). A non-finite value
    (not JSON) becomes None and is left out of the carried sum."""
    scale = 10**decimals
    out: list[float | None] = []
    total, previous = 0.0, 0
    for v in values:
        if not math.isfinite(v):
            out.append(None)
            continue
        total += v
        q = round(total * scale)
        out.append((q - previous) / scale)
        previous = q
    return out


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def has_tokens(completion: dict) -> bool:
    """Whether a completion carries a usable per-token record (texts and the policy's log-probabilities)."""
    texts, logp = completion.get("token_texts"), completion.get("token_logp")
    return isinstance(texts, list) and isinstance(logp, list) and len(texts) == len(logp)


def column(completion: dict, key: str) -> list[float | None]:
    """One list of a completion's record, as long as its texts; missing or malformed entries are None."""
    n = len(completion.get("token_texts") or [])
    values = completion.get(key)
    if not isinstance(values, list) or len(values) != n:
        return [None] * n
    return [float(v) if _finite(v) else None for v in values]


def _pairwise(a, b, fn) -> list[float | None]:
    return [fn(x, y) if x is not None and y is not None else None for x, y in zip(a, b, strict=True)]


def delta_logp(completion: dict) -> list[float | None]:
    """Δ log π per token: log-probability after the update minus before (None where either is missing)."""
    return _pairwise(column(completion, "token_logp_after"), column(completion, "token_logp"), lambda a, b: a - b)


def k1(logp: float, ref: float) -> float:
    return logp - ref


def k3(logp: float, ref: float) -> float:
    log_ratio = min(ref - logp, 700.0)  # log(π_ref / π); exp overflows a float past ~709
    return math.expm1(log_ratio) - log_ratio


def token_kl(completion: dict, estimator: str = "k1") -> list[float | None]:
    """Per-token KL to the reference by ``estimator`` (``k1`` or ``k3``); all None when the run had β = 0."""
    fn = k3 if estimator == "k3" else k1
    return _pairwise(column(completion, "token_logp"), column(completion, "token_ref_logp"), fn)


def entropy(completion: dict) -> list[float | None]:
    return column(completion, "token_entropy")


def values_for(completion: dict, measure: str) -> list[float | None]:
    """The per-token values a view colours by: ``delta``, ``k1``, ``k3`` or ``entropy``."""
    if measure in KL_ESTIMATORS:
        return token_kl(completion, measure)
    if measure == "entropy":
        return entropy(completion)
    return delta_logp(completion)


def total(values: Sequence[float | None]) -> float | None:
    """The sum of the known values, or None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def kl_matrix(groups: Sequence[dict], estimator: str = "k1") -> tuple[list[str], list[list[float | None]]]:
    """Per-token KL of every completion of a step: row labels ("P1 #2": prompt 1, completion 2) and rows padded
    with None to the longest completion, for a completions × position heatmap."""
    labels, rows = [], []
    for g in groups:
        for i, c in enumerate(g.get("completions") or [], 1):
            if has_tokens(c):
                labels.append(f"P{g.get('group', 0) + 1} #{i}")
                rows.append(token_kl(c, estimator))
    width = max((len(r) for r in rows), default=0)
    return labels, [r + [None] * (width - len(r)) for r in rows]


def kl_location(rows: Sequence[Sequence[float | None]]) -> dict | None:
    """Where the KL of a batch lives: the share of Σ|k1| in the first and last quarter of each completion's tokens,
    and in the top 10% of tokens by |k1|. None when there is no KL (β = 0, or no token record)."""
    magnitudes = [[abs(v) for v in row if v is not None] for row in rows]
    magnitudes = [m for m in magnitudes if m]
    grand = sum(sum(m) for m in magnitudes)
    if not magnitudes or grand <= 0:
        return None
    start = end = 0.0
    for m in magnitudes:
        quarter = max(1, len(m) // 4)
        start += sum(m[:quarter])
        end += sum(m[-quarter:]) if len(m) > quarter else 0.0
    flat = sorted((v for m in magnitudes for v in m), reverse=True)
    top = max(1, len(flat) // 10)
    return {
        "start_share": start / grand,
        "end_share": end / grand,
        "top_share": sum(flat[:top]) / grand,
        "top_tokens": top,
        "tokens": len(flat),
    }


__all__ = [
    "DECIMALS",
    "KL_ESTIMATORS",
    "TOKEN_KEYS",
    "delta_logp",
    "column",
    "entropy",
    "has_tokens",
    "k1",
    "k3",
    "kl_location",
    "kl_matrix",
    "round_keeping_sum",
    "token_kl",
    "total",
    "values_for",
]
