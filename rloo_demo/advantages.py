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

A completion that no reward function scored is *unscorable*: its reward is NaN (``rloo_demo.task.rewards.
combine_scores``), and TRL keeps it out of the arithmetic rather than counting it as 0. Here too: a NaN reward is
left out of its siblings' baselines (the mean is over the scorable siblings, K_s - 1 of them), its own baseline and
raw advantage are NaN, and its advantage is 0, as TRL's ``nan_to_num`` makes it. A scorable completion with no
scorable sibling has no baseline either (TRL divides 0 by 0) and so advantage 0 as well. Normalisation uses the
mean and standard deviation of the defined advantages only. The what-if estimators below treat a NaN reward alike:
left out of every mean and deviation, advantage 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NORMALIZE_EPS = 1e-4  # TRL adds this to the standard deviation when it normalises advantages
# RunConfig.reward_offset, the what-if table's and the toy's offset: a constant far beyond the rewards' own scale
# teaches nothing more, and in float32 (TRL's rewards) a larger one starts to drown the scores' last digits.
MAX_REWARD_OFFSET = 100.0


def is_scored(value) -> bool:
    """Whether a reward function gave this completion a score: ``None`` (the function does not apply, as a user's
    module may answer) and NaN (what TRL turns ``None`` into) are the two spellings of "no score"."""
    return value is not None and not math.isnan(value)


def combine_scores(
    columns: Sequence[Sequence[float | None]],
    weights: Sequence[float],
    clip_range: Sequence[float] | None = None,
    offset: float = 0.0,
) -> list[float]:
    """The reward of each completion, combined from every function's score exactly as TRL 1.16's ``RLOOTrainer``
    (and ``GRPOTrainer``) combine them. ``columns[f][i]`` is function f's score of completion i (one list per
    function, as the functions return them); ``weights[f]`` is its weight.

    - A missing score (``None`` or NaN, see ``is_scored``) adds nothing: TRL turns ``None`` into NaN and sums the
      weighted scores with ``nansum``.
    - A completion that no function scored is *unscorable*: NaN, not 0. TRL marks that row NaN so that it stays out
      of its siblings' leave-one-out baseline and gets advantage 0 (the estimators here do the same with the
      NaN); a 0 would count as a real, and probably bad, reward.
    - ``offset`` (``RunConfig.reward_offset``) is added to the sum of every scorable completion, before the clip:
      the trainer hands TRL the offset as one more score column of weight 1, present wherever any function scored
      (``rloo_demo.engine.capture``), so TRL sums it with the scores. An unscorable completion stays NaN.
    - ``clip_range`` (TRL's ``reward_clip_range``, (min, max)) clamps the sum; an unscorable NaN stays NaN.

    This is the one definition of a completion's reward: training's record (``rloo_demo.engine.capture``), the
    gradient-variance meter, Compare and Evaluate (``WeightedReward``) all call it, so none can score a completion
    differently from the trainer. Pure Python (no torch), in double precision where TRL sums in float32."""
    if len(columns) != len(weights):
        raise ValueError(f"{len(columns)} score lists but {len(weights)} weights; give one weight per function")
    if not columns:
        return []
    n = len(columns[0])
    if any(len(c) != n for c in columns):
        raise ValueError("every reward function must score every completion (score lists of different lengths)")
    out = []
    for i in range(n):
        scored = [float(w) * float(c[i]) for w, c in zip(weights, columns, strict=True) if is_scored(c[i])]
        if not scored:
            out.append(math.nan)
            continue
        total = math.fsum([*scored, float(offset)])
        if clip_range:  # TRL's test is the same truthiness: ``if self.reward_clip_range:``
            total = min(max(total, float(clip_range[0])), float(clip_range[1]))
        out.append(total)
    return out


def weighted_reward(
    scores: dict[str, Sequence[float | None]],
    weights: dict[str, float],
    clip_range: Sequence[float] | None = None,
) -> list[float]:
    """Per completion, the weighted sum of every reward function's score, as TRL forms it: the one definition,
    ``combine_scores`` (a missing score adds nothing; NaN where no function scored)."""
    names = list(scores)
    return combine_scores([scores[name] for name in names], [weights[name] for name in names], clip_range)


def shaped_rewards(rewards: Sequence[float], sequence_kl: Sequence[float] | None, beta: float) -> list[float]:
    """Reward minus ``beta`` times the sequence KL (the sum over a completion's tokens of logp - logp_ref). An
    unscorable (NaN) reward stays NaN: a KL penalty does not make a completion scorable."""
    if not beta or sequence_kl is None:
        return [float(r) for r in rewards]
    return [float(r) - beta * float(k) for r, k in zip(rewards, sequence_kl, strict=True)]


def zeroed(values: Sequence[float]) -> list[float]:
    """NaN (no advantage: an unscorable completion, or one without a scorable sibling) as 0, as TRL's
    ``torch.nan_to_num(advantages, nan=0.0)``: such a completion must not move the policy."""
    return [float(v) if is_scored(v) else 0.0 for v in values]


def leave_one_out_baselines(group: Sequence[float]) -> list[float]:
    """For each reward in a group of K >= 2, the mean of the other scorable rewards: ``(sum of the scorable rewards
    - r_i) / (K_s - 1)``, as TRL's ``nansum`` over ``scorable_counts - 1``. NaN for an unscorable reward, and for
    the only scorable one of its group (no sibling to compare it with)."""
    k = len(group)
    if k < 2:
        raise ValueError("a leave-one-out baseline needs at least 2 completions per prompt")
    scored = [float(r) for r in group if is_scored(r)]
    total, n = math.fsum(scored), len(scored)
    return [(total - r) / (n - 1) if is_scored(r) and n > 1 else math.nan for r in group]


def leave_one_out_advantages(group: Sequence[float]) -> list[float]:
    """``r_i - mean(scorable others)`` for each reward in a group, 0 where that is undefined (see
    ``leave_one_out_baselines``); the result sums to zero."""
    return zeroed([r - b for r, b in zip(group, leave_one_out_baselines(group), strict=True)])


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n - 1; 0 for fewer than two) of the values that are not NaN, as
    TRL's ``nanmean`` and ``nanstd``; NaN mean when there are none."""
    kept = [float(v) for v in values if is_scored(v)]
    n = len(kept)
    if not n:
        return math.nan, 0.0
    mean = math.fsum(kept) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in kept) / (n - 1)) if n > 1 else 0.0
    return mean, std


def normalize(values: Sequence[float], eps: float = NORMALIZE_EPS) -> list[float]:
    """``(x - mean) / (std + eps)`` with the sample standard deviation (n - 1), as TRL does. NaN entries are left
    out of the mean and the std and come out as 0 (TRL normalises with ``nanmean``/``nanstd``, then zeroes NaN)."""
    mean, std = mean_and_std(values)
    return [(v - mean) / (std + eps) if is_scored(v) else 0.0 for v in values]


def final_advantages(raw: Sequence[float], normalize_advantages: bool = False) -> list[float]:
    """The advantages TRL feeds its loss from the raw ones: normalised over the batch if asked, NaN as 0."""
    return normalize(raw) if normalize_advantages else zeroed(raw)


def group(values: Sequence[float], k: int) -> list[list[float]]:
    """Split a flat batch (prompt-major, K completions per prompt) into groups of K."""
    if len(values) % k:
        raise ValueError(f"a batch of {len(values)} completions does not split into groups of {k}")
    return [list(values[i : i + k]) for i in range(0, len(values), k)]


def batch_advantages(rewards: Sequence[float], k: int, normalize_advantages: bool = False) -> dict[str, list[float]]:
    """Baselines, raw advantages and final advantages for a flat, prompt-major batch of shaped rewards (NaN
    baselines and raw advantages where TRL's are NaN; the final ones are always numbers)."""
    baselines = [b for g in group(rewards, k) for b in leave_one_out_baselines(g)]
    raw = [r - b for r, b in zip(rewards, baselines, strict=True)]
    return {"baselines": baselines, "raw_advantages": raw, "advantages": final_advantages(raw, normalize_advantages)}


# ----------------------------------------------------------------------------- what if: other baselines

# Why leave-one-out? The same rewards, turned into advantages by the estimators RLOO is usually compared with. Each
# function takes a flat, prompt-major batch of rewards and the group size K, and returns one advantage per
# completion. ``rloo_demo.engine.variance`` weights each completion's score-function gradient by these numbers, so the
# what-if table and the gradient-variance meter share one definition of every estimator.


def group_means(rewards: Sequence[float], k: int) -> list[float]:
    """For each completion, the mean reward of its whole group (itself included; scorable rewards only, NaN when
    the group has none)."""
    return [mean_and_std(g)[0] for g in group(rewards, k) for _ in g]


def rloo_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """RLOO: ``r_i`` minus the mean of its K-1 siblings (what this app's trainer uses)."""
    return [a for g in group(rewards, k) for a in leave_one_out_advantages(g)]


def grpo_advantages(rewards: Sequence[float], k: int, eps: float = NORMALIZE_EPS) -> list[float]:
    """GRPO: ``(r_i - group mean) / (group std + eps)``, as TRL's ``GRPOConfig(scale_rewards="group")``."""
    out = []
    for g in group(rewards, k):
        mean, std = mean_and_std(g)
        out += zeroed([(r - mean) / (std + eps) for r in g])
    return out


def dr_grpo_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """Dr. GRPO: ``r_i - group mean``, no division by the std (TRL's ``scale_rewards="none"``). The mean includes
    ``r_i`` itself, so this is exactly ``(K-1)/K`` times the leave-one-out advantage."""
    return zeroed([r - m for r, m in zip(rewards, group_means(rewards, k), strict=True)])


def reinforce_pp_advantages(rewards: Sequence[float], k: int, eps: float = NORMALIZE_EPS) -> list[float]:
    """REINFORCE++: the rewards normalised over the whole batch, ``(r_i - batch mean) / (batch std + eps)``; the
    arithmetic of TRL's ``normalize_advantages=True``, applied to the rewards instead of to RLOO's advantages."""
    return normalize(rewards, eps)


def batch_mean_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """A batch-mean baseline: ``r_i - mean of every reward in the batch``, whatever the prompt."""
    mean = mean_and_std(rewards)[0]
    return zeroed([r - mean for r in rewards])


def reinforce_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """Plain REINFORCE: no baseline, ``A_i = r_i`` (0 for an unscorable completion, as every estimator)."""
    return zeroed(rewards)


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
