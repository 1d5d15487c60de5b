"""The leave-one-out arithmetic of RLOO, as pure functions on plain lists.

For one prompt the policy samples K completions y_1..y_K with rewards r_1..r_K. Completion i is judged against the
mean reward of its K-1 siblings:

    baseline_i  = (sum_j r_j - r_i) / (K - 1)
    advantage_i = r_i - baseline_i

The baseline does not depend on y_i itself, so the policy gradient stays unbiased, and it needs no value network.
In a group the advantages sum to zero: what one completion gains, its siblings lose.

In TRL 1.16 the reward r_i that enters the baseline is already KL-shaped: ``r_i = sum_f w_f * score_f(y_i) -
beta * sum_t (log pi(y_t) - log pi_ref(y_t))``. Optionally all advantages of the batch are then normalised to
zero mean and unit standard deviation. These functions mirror that order exactly, so the rollout explorer can show
the arithmetic, and a parity test checks them against the tensor the trainer fed to its loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NORMALIZE_EPS = 1e-4  # TRL adds this to the standard deviation when it normalises advantages


def weighted_reward(scores: dict[str, Sequence[float]], weights: dict[str, float]) -> list[float]:
    """Per completion, the weighted sum of every reward function's score."""
    names = list(scores)
    n = len(scores[names[0]])
    return [sum(weights[name] * scores[name][i] for name in names) for i in range(n)]


def shaped_rewards(rewards: Sequence[float], sequence_kl: Sequence[float] | None, beta: float) -> list[float]:
    """Reward minus ``beta`` times the sequence KL (the sum over a completion's tokens of logp - logp_ref)."""
    if not beta or sequence_kl is None:
        return [float(r) for r in rewards]
    return [float(r) - beta * float(k) for r, k in zip(rewards, sequence_kl, strict=True)]


def leave_one_out_baselines(group: Sequence[float]) -> list[float]:
    """For each reward in a group of K >= 2, the mean of the other K-1 rewards."""
    k = len(group)
    if k < 2:
        raise ValueError("a leave-one-out baseline needs at least 2 completions per prompt")
    total = math.fsum(group)
    return [(total - r) / (k - 1) for r in group]


def leave_one_out_advantages(group: Sequence[float]) -> list[float]:
    """``r_i - mean(others)`` for each reward in a group; the result sums to zero."""
    return [r - b for r, b in zip(group, leave_one_out_baselines(group), strict=True)]


def normalize(values: Sequence[float], eps: float = NORMALIZE_EPS) -> list[float]:
    """``(x - mean) / (std + eps)`` with the sample standard deviation (n - 1), as TRL does."""
    n = len(values)
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return [(v - mean) / (std + eps) for v in values]


def group(values: Sequence[float], k: int) -> list[list[float]]:
    """Split a flat batch (prompt-major, K completions per prompt) into groups of K."""
    if len(values) % k:
        raise ValueError(f"a batch of {len(values)} completions does not split into groups of {k}")
    return [list(values[i : i + k]) for i in range(0, len(values), k)]


def batch_advantages(rewards: Sequence[float], k: int, normalize_advantages: bool = False) -> dict[str, list[float]]:
    """Baselines, raw advantages and final advantages for a flat, prompt-major batch of shaped rewards."""
    baselines = [b for g in group(rewards, k) for b in leave_one_out_baselines(g)]
    raw = [r - b for r, b in zip(rewards, baselines, strict=True)]
    final = normalize(raw) if normalize_advantages else raw
    return {"baselines": baselines, "raw_advantages": raw, "advantages": final}


# ----------------------------------------------------------------------------- what if: other baselines

# Why leave-one-out? The same rewards, turned into advantages by the estimators RLOO is usually compared with. Each
# function takes a flat, prompt-major batch of rewards and the group size K, and returns one advantage per
# completion. ``rloo_demo.engine.variance`` weights each completion's score-function gradient by these numbers, so the
# what-if table and the gradient-variance meter share one definition of every estimator.


def group_means(rewards: Sequence[float], k: int) -> list[float]:
    """For each completion, the mean reward of its whole group (itself included)."""
    return [math.fsum(g) / len(g) for g in group(rewards, k) for _ in g]


def _sample_std(values: Sequence[float]) -> float:
    """The standard deviation with Bessel's correction (n - 1), as TRL's ``nanstd``."""
    n = len(values)
    mean = math.fsum(values) / n
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0


def rloo_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """RLOO: ``r_i`` minus the mean of its K-1 siblings (what this app's trainer uses)."""
    return [a for g in group(rewards, k) for a in leave_one_out_advantages(g)]


def grpo_advantages(rewards: Sequence[float], k: int, eps: float = NORMALIZE_EPS) -> list[float]:
    """GRPO: ``(r_i - group mean) / (group std + eps)``, as TRL's ``GRPOConfig(scale_rewards="group")``."""
    out = []
    for g in group(rewards, k):
        mean, std = math.fsum(g) / len(g), _sample_std(g)
        out += [(r - mean) / (std + eps) for r in g]
    return out


def dr_grpo_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """Dr. GRPO: ``r_i - group mean``, no division by the std (TRL's ``scale_rewards="none"``). The mean includes
    ``r_i`` itself, so this is exactly ``(K-1)/K`` times the leave-one-out advantage."""
    return [r - m for r, m in zip(rewards, group_means(rewards, k), strict=True)]


def reinforce_pp_advantages(rewards: Sequence[float], k: int, eps: float = NORMALIZE_EPS) -> list[float]:
    """REINFORCE++: the rewards normalised over the whole batch, ``(r_i - batch mean) / (batch std + eps)``; the
    arithmetic of TRL's ``normalize_advantages=True``, applied to the rewards instead of to RLOO's advantages."""
    return normalize(rewards, eps)


def batch_mean_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """A batch-mean baseline: ``r_i - mean of every reward in the batch``, whatever the prompt."""
    mean = math.fsum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def reinforce_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """Plain REINFORCE: no baseline, ``A_i = r_i``."""
    return [float(r) for r in rewards]


ESTIMATORS = {
    "rloo": rloo_advantages,
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
    "batch_mean": batch_mean_advantages,
    "reinforce": reinforce_advantages,
}

ESTIMATOR_NOTES = {
    "rloo": "r − mean of the K−1 siblings (what the trainer used)",
    "grpo": "(r − group mean) / group std (TRL GRPO, scale_rewards='group')",
    "dr_grpo": "r − group mean, no std (scale_rewards='none')",
    "reinforce_pp": "(r − batch mean) / batch std (REINFORCE++)",
    "batch_mean": "r − mean of the whole batch",
    "reinforce": "r, no baseline",
}


def what_if(rewards: Sequence[float], k: int) -> dict[str, list[float]]:
    """Every estimator's advantages for the same flat, prompt-major batch of rewards."""
    return {name: fn(rewards, k) for name, fn in ESTIMATORS.items()}
