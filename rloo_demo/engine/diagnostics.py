"""Per-step diagnostics that the trainer does not log: three KL estimators, and how many groups carry no signal.

KL estimators. For a completion y sampled from the policy, with per-token log-ratios ``d_t = log pi(y_t) -
log pi_ref(y_t)``, three Monte-Carlo estimates of KL(pi || pi_ref) over the completion (Schulman, "Approximating KL
divergence", 2020):

- ``k1 = sum_t d_t``: unbiased, but single samples can be negative. This is TRL's; RLOO subtracts ``beta * k1``
  from the reward, so k1 is the one that shapes the reward.
- ``k2 = sum_t d_t**2 / 2``: always >= 0, biased, low variance when the policies are close.
- ``k3 = sum_t (exp(-d_t) - 1 + d_t)``: always >= 0 and unbiased (GRPO puts its per-token form in the loss).

Groups with no learning signal. A group whose K scores are all equal has zero leave-one-out advantages: it teaches
nothing about the task. TRL's ``frac_reward_zero_std`` tests the KL-*shaped* rewards, which differ by their KL term
even when the scores are equal, so with beta > 0 it under-reports such groups. ``zero_signal_fraction`` applies
TRL's test (group std within 1e-8 of zero) to the weighted scores before the KL term.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rloo_demo.eval.judges import judge_texts

ZERO_STD_ATOL = 1e-8  # torch.isclose(std, 0)'s default absolute tolerance, TRL's test for a zero-std group


def kl_estimators(log_ratio, mask):
    """``(k1, k2, k3)`` per completion from per-token ``log pi - log pi_ref`` tensors of shape (B, T) and the
    completion mask (1 for a token of the completion, 0 for padding); each result has shape (B,)."""
    mask = mask.to(log_ratio.dtype)
    k1 = (log_ratio * mask).sum(-1)
    k2 = (0.5 * log_ratio**2 * mask).sum(-1)
    k3 = ((log_ratio.neg().exp() - 1 + log_ratio) * mask).sum(-1)
    return k1, k2, k3


def kl_estimates(log_ratios: Sequence[float]) -> dict[str, float]:
    """The three estimates for one completion's per-token log-ratios, in plain Python (for views and tests)."""
    return {
        "k1": math.fsum(log_ratios),
        "k2": math.fsum(0.5 * d * d for d in log_ratios),
        "k3": math.fsum(math.exp(-d) - 1 + d for d in log_ratios),
    }


def _std(values: Sequence[float]) -> float:
    n = len(values)
    mean = math.fsum(values) / n
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0


def zero_signal_fraction(values: Sequence[float], k: int) -> float:
    """The fraction of groups of ``k`` (a flat, prompt-major batch) whose values are all equal, by TRL's test."""
    groups = [values[i : i + k] for i in range(0, len(values), k)]
    if not groups:
        return 0.0
    return sum(_std(g) <= ZERO_STD_ATOL for g in groups) / len(groups)


def step_diagnostics(groups: list[dict]) -> dict[str, float]:
    """The step-metric keys from a step's captured groups: ``frac_raw_score_zero_std`` (next to TRL's
    ``frac_reward_zero_std``), the batch means ``kl_k1``/``kl_k2``/``kl_k3`` (nats per completion; only when the
    completions carry k2 and k3, i.e. beta > 0) and the live judges ``judges/distinct_2``, ``judges/repetition``."""

    completions = [c for g in groups for c in g["completions"]]
    if not completions:
        return {}
    out: dict[str, float] = {}
    k = len(groups[0]["completions"])
    out["frac_raw_score_zero_std"] = zero_signal_fraction([c["weighted_reward"] for c in completions], k)
    if all("kl_k2" in c for c in completions):
        n = len(completions)
        out["kl_k1"] = math.fsum(c["kl"] for c in completions) / n
        out["kl_k2"] = math.fsum(c["kl_k2"] for c in completions) / n
        out["kl_k3"] = math.fsum(c["kl_k3"] for c in completions) / n
    for key, value in judge_texts([c["text"] for c in completions]).items():
        if value is not None:
            out[f"judges/{key}"] = value
    return out
