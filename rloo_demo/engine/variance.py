"""The gradient-variance meter: how noisy is each estimator's policy gradient, measured on the run's own policy?

Every estimator in ``rloo_demo.advantages.ESTIMATORS`` turns a batch of rewards into advantages ``A_i``; the
policy-gradient estimate is then

    g_hat = (1/N) * sum_i A_i * g_i,    g_i = grad_theta sum_t log pi(y_t | x, y_<t)

with ``g_i`` the score-function gradient of completion i (one backward pass per completion). With one optimisation
step per batch and the importance ratio at 1, this is the gradient of TRL's surrogate loss up to its sign.

The meter draws ``REPLICATES - 1`` more batches of K completions for the same prompts from the same policy (the
step's own batch is the first replicate), so it holds ``REPLICATES`` independent estimates of each estimator on the
same prompts. For every estimator it reports:

- ``variance``: the trace of the covariance of g_hat, ``sum_j ||g_hat_j - mean||^2 / (R - 1)`` over the replicates.
  The prompts are held fixed, so this is the noise that the choice of baseline controls; the spread due to which
  prompts were drawn is the same for every unbiased estimator and is left out.
- ``cosine``: the cosine similarity of g_hat_j to a reference gradient, the leave-one-out estimate pooled over the
  *other* R - 1 replicates ((R-1)·K completions per prompt, 4x the step's batch with R = 5), averaged over j. The
  reference never contains the batch it is compared with, so a noisy estimate cannot look good by overlap.
- ``noise_to_signal``: variance / ||mean of g_hat||^2. Scaling an estimator's advantages by c scales its variance by
  c^2 but not its direction: Dr. GRPO's advantages are exactly (K-1)/K times RLOO's, so its raw variance is lower
  while its direction is the same. This ratio does not depend on scale.

Cost: the extra generation and one backward pass per completion, (R·N of them). The meter runs every
``RunConfig.variance_every`` steps, on the training thread between two optimiser steps (so never during one), with
its own random generator, so training draws exactly what it would draw without it. It runs on single-process runs
only: in a data-parallel run each rank holds only its slice of the batch, and the meter is skipped there.

This module is the meter's pure core (``meter_statistics``, ``ReplicatePlan``), tested against a toy softmax policy
whose variances are known exactly (``tests/engine/test_variance.py``); ``rloo_demo.engine.meter`` runs it on a policy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rloo_demo.advantages import ESTIMATORS, leave_one_out_advantages

REPLICATES = 5  # the step's batch and 4 fresh ones: the reference for each is 4x the step's completions
# One measurement costs about this many training steps of the same run: 4 extra batches to sample and score, and one
# backward pass per completion of all 5 (scripts/bench_engine.py --variance-every 10 --max-steps 30 --no-eval: 7.75 on
# the default run). Every N steps the meter so adds about METER_COST_STEPS / N to the training time: N >= 55 keeps it
# under 15% (the public limit, rloo_demo.public.limits).
METER_COST_STEPS = 8.0
MAX_METER_FLOATS = 2**28  # accumulators of (estimators + 1) x R x parameters floats: 1 GiB; beyond, the meter skips
METRIC_PREFIXES = ("variance/", "cosine/", "noise_to_signal/")


# ----------------------------------------------------------------------------- the pure core


@dataclass
class ReplicatePlan:
    """The weight of every completion's gradient in every estimate, decided from the rewards before any backward.

    ``estimates[e, j, i]``: weight of completion i of replicate j in estimator e's g_hat_j (``A_i / N``).
    ``references[j, j2, i]``: weight of completion i of replicate j2 in the reference for replicate j (zero when
    j2 == j): the leave-one-out advantage within the pooled group of the other replicates, over their count.
    A completion that no reward function scored has a NaN reward (``rloo_demo.advantages.combine_scores``): the
    estimators leave it out of their baselines and weight its gradient by 0, as TRL's loss does.
    """

    estimators: list[str]
    estimates: torch.Tensor  # (E, R, N)
    references: torch.Tensor | None  # (R, R, N); None when not asked for

    @classmethod
    def from_rewards(
        cls,
        rewards: Sequence[Sequence[float]],
        k: int,
        estimators: Sequence[str] | None = None,
        with_references: bool = True,
    ) -> ReplicatePlan:
        """``rewards[j]``: replicate j's rewards, flat and prompt-major (the same prompts in the same order)."""
        names = list(estimators or ESTIMATORS)
        r, n = len(rewards), len(rewards[0])
        if r < 2 or any(len(x) != n for x in rewards):
            raise ValueError("the meter needs at least 2 replicates of the same size")
        estimates = torch.zeros(len(names), r, n, dtype=torch.float64)
        for e, name in enumerate(names):
            for j in range(r):
                estimates[e, j] = torch.tensor(ESTIMATORS[name](rewards[j], k), dtype=torch.float64) / n
        if not with_references:
            return cls(names, estimates, None)
        references = torch.zeros(r, r, n, dtype=torch.float64)
        for j in range(r):
            others = [j2 for j2 in range(r) if j2 != j]
            for p in range(n // k):
                pooled = [rewards[j2][p * k + c] for j2 in others for c in range(k)]
                advantages = leave_one_out_advantages(pooled)
                for slot, (j2, c) in enumerate((j2, c) for j2 in others for c in range(k)):
                    references[j, j2, p * k + c] = advantages[slot] / (len(others) * n)
        return cls(names, estimates, references)


class GradientAccumulator:
    """Sums the completions' gradients, weighted by the plan, into every estimate and reference. Gradients arrive
    one replicate at a time (N x P) and are folded in with two matrix products, so only one replicate's gradients
    are held at once, plus (E + 1) x R parameter vectors."""

    def __init__(self, plan: ReplicatePlan, num_params: int, dtype=torch.float32):
        self.plan = plan
        e, r, _ = plan.estimates.shape
        self.estimates = torch.zeros(e, r, num_params, dtype=dtype)
        self.references = torch.zeros(r, num_params, dtype=dtype) if plan.references is not None else None
        self._est = plan.estimates.to(dtype)
        self._ref = plan.references.to(dtype) if plan.references is not None else None

    def add_replicate(self, replicate: int, gradients: torch.Tensor) -> None:
        """Fold in the score-function gradients (N x P, in batch order) of every completion of one replicate."""
        g = gradients.to(self.estimates.dtype)
        self.estimates[:, replicate] += self._est[:, replicate] @ g
        if self.references is not None:
            self.references += self._ref[:, replicate] @ g


def meter_statistics(estimates: torch.Tensor, references: torch.Tensor | None, estimators: Sequence[str]) -> dict:
    """Per estimator, ``variance`` (trace of the covariance over replicates), ``cosine`` (to the held-out reference,
    averaged over replicates; NaN without references) and ``noise_to_signal``, from estimates (E, R, P) and
    references (R, P), in the accumulators' precision (float32 for a model; the sums are BLAS matrix products)."""
    r = estimates.shape[1]
    ref_norms = torch.linalg.vector_norm(references, dim=1) if references is not None else None
    out = {}
    for e, name in enumerate(estimators):
        mean = estimates[e].mean(0)
        deviations = estimates[e] - mean
        variance = float((deviations @ deviations.T).diagonal().sum()) / (r - 1)  # matmul: fast and well summed
        cosines = []
        if references is not None:
            dots = (estimates[e] @ references.T).diagonal()
            norms = torch.linalg.vector_norm(estimates[e], dim=1) * ref_norms
            cosines = [float(dots[j] / norms[j]) for j in range(r) if norms[j] > 0]
        signal = float(mean @ mean)
        out[name] = {
            "variance": variance,
            "cosine": sum(cosines) / len(cosines) if cosines else math.nan,
            "noise_to_signal": variance / signal if signal > 0 else math.nan,
        }
    return out


def is_measured(step: int, every: int) -> bool:
    """The meter measures steps every, 2·every, ... (so a run's share of meter time never exceeds the average)."""
    return every > 0 and step % every == 0


def measurements(max_steps: int, every: int) -> int:
    """How many steps of a run the meter measures."""
    return max_steps // every if every > 0 and max_steps > 0 else 0


def metrics_record(stats: dict, seconds: float, samples: int) -> dict[str, float]:
    """The step-metric keys the meter logs: ``variance/<e>``, ``cosine/<e>``, ``noise_to_signal/<e>``, and its
    cost (``variance/seconds``) and sample count."""
    record = {"variance/seconds": seconds, "variance/samples": float(samples)}
    for name, s in stats.items():
        record[f"variance/{name}"] = s["variance"]
        record[f"cosine/{name}"] = s["cosine"]
        record[f"noise_to_signal/{name}"] = s["noise_to_signal"]
    return record


def summary_rows(stats_per_step: Sequence[dict]) -> list[dict]:
    """One row per estimator over several measured steps: variance relative to RLOO's (ratio of the mean variances),
    mean cosine to the reference, and noise-to-signal relative to RLOO's."""
    names = list(stats_per_step[0])

    def mean(name, key):
        values = [s[name][key] for s in stats_per_step if math.isfinite(s[name][key])]
        return sum(values) / len(values) if values else math.nan

    rloo_var, rloo_nts = mean("rloo", "variance"), mean("rloo", "noise_to_signal")
    return [
        {
            "estimator": name,
            "variance_vs_rloo": mean(name, "variance") / rloo_var if rloo_var > 0 else math.nan,
            "cosine_to_reference": mean(name, "cosine"),
            "noise_to_signal_vs_rloo": mean(name, "noise_to_signal") / rloo_nts if rloo_nts > 0 else math.nan,
            "variance": mean(name, "variance"),
        }
        for name in names
    ]


def markdown_table(rows: Sequence[dict]) -> str:
    """The CLI's table: one row per estimator."""
    lines = [
        "| estimator | variance_vs_rloo | cosine_to_reference | noise_to_signal_vs_rloo | variance |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['estimator']} | {row['variance_vs_rloo']:.3f} | {row['cosine_to_reference']:.3f} | "
            f"{row['noise_to_signal_vs_rloo']:.3f} | {row['variance']:.4g} |"
        )
    return "\n".join(lines)


def fits_in_memory(num_params: int, replicates: int = REPLICATES) -> bool:
    """Whether the accumulators of a policy with ``num_params`` trainable parameters stay under the meter's cap."""
    return (len(ESTIMATORS) + 1) * replicates * num_params <= MAX_METER_FLOATS
