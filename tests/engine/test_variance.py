"""The gradient-variance meter on a toy problem with exact answers: ``python -m pytest tests/engine/test_variance.py``.

The toy policy is a softmax over A arms with fixed rewards r_a. A sampled arm's score-function gradient is
``g(a) = e_a - pi``, and the policy gradient is ``grad J = sum_a pi_a r_a g(a)``. With K draws:

- no baseline: ``g_hat = (1/K) sum_i r_i g_i`` has trace-variance ``(E[r^2 ||g||^2] - ||grad J||^2) / K``;
- leave-one-out: ``g_hat = (1/(K(K-1))) sum_{i<j} (r_i - r_j)(g_i - g_j)`` is a U-statistic of order 2 with kernel
  ``h(x, y) = (r_x - r_y)(g_x - g_y) / 2``, so its trace-variance is ``(2 / (K(K-1))) * (2(K-2) zeta_1 + zeta_2)``
  with ``zeta_1 = tr Var(E[h(X, Y) | X])`` and ``zeta_2 = tr Var(h(X, Y))``.

Both are checked against brute-force enumeration of all A^K draws, then the meter's replicate estimate is checked
against them.
"""

import itertools
import math

import numpy as np
import pytest
import torch

from rloo_demo.advantages import ESTIMATORS, leave_one_out_advantages
from rloo_demo.engine import variance
from rloo_demo.engine.meter import score_gradient
from rloo_demo.engine.variance import (
    GradientAccumulator,
    ReplicatePlan,
    fits_in_memory,
    is_measured,
    markdown_table,
    measurements,
    meter_statistics,
    metrics_record,
    summary_rows,
)

PI_LOGITS = np.array([0.4, -0.3, 0.0])
ARM_REWARDS = np.array([2.0, 0.5, 1.2])  # all positive: a baseline has an offset to remove
K = 4


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


PI = softmax(PI_LOGITS)
A = len(PI)


def g(a):
    return np.eye(A)[a] - PI


def true_gradient():
    return sum(PI[a] * ARM_REWARDS[a] * g(a) for a in range(A))


def exact_reinforce_variance(k=K):
    second = sum(PI[a] * ARM_REWARDS[a] ** 2 * g(a) @ g(a) for a in range(A))
    mu = true_gradient()
    return (second - mu @ mu) / k


def exact_rloo_variance(k=K):
    def h(x, y):
        return 0.5 * (ARM_REWARDS[x] - ARM_REWARDS[y]) * (g(x) - g(y))

    mu = true_gradient()
    h1 = {x: sum(PI[y] * h(x, y) for y in range(A)) for x in range(A)}
    zeta1 = sum(PI[x] * (h1[x] - mu) @ (h1[x] - mu) for x in range(A))
    zeta2 = sum(PI[x] * PI[y] * (h(x, y) - mu) @ (h(x, y) - mu) for x in range(A) for y in range(A))
    return 2 / (k * (k - 1)) * (2 * (k - 2) * zeta1 + zeta2)


def enumerated_variance(estimator, k=K):
    """Trace-variance of g_hat by summing over every one of the A^K draws."""
    mean, second = np.zeros(A), 0.0
    for arms in itertools.product(range(A), repeat=k):
        p = math.prod(PI[a] for a in arms)
        adv = ESTIMATORS[estimator]([ARM_REWARDS[a] for a in arms], k)
        est = sum(ad * g(a) for ad, a in zip(adv, arms, strict=True)) / k
        mean += p * est
        second += p * est @ est
    return second - mean @ mean, mean


def test_closed_forms_match_enumeration():
    var_reinforce, mean_reinforce = enumerated_variance("reinforce")
    var_rloo, mean_rloo = enumerated_variance("rloo")
    assert var_reinforce == pytest.approx(exact_reinforce_variance(), rel=1e-12)
    assert var_rloo == pytest.approx(exact_rloo_variance(), rel=1e-12)
    # both are unbiased for the policy gradient; the baseline only removes noise
    assert mean_reinforce == pytest.approx(true_gradient(), abs=1e-12)
    assert mean_rloo == pytest.approx(true_gradient(), abs=1e-12)
    assert var_rloo < var_reinforce / 2  # (with rewards near zero, no baseline can win at small K)


def simulate_meter(replicates=4000, prompts=1, seed=0):
    rng = np.random.default_rng(seed)
    arms = rng.choice(A, size=(replicates, prompts * K), p=PI)
    rewards = [[float(ARM_REWARDS[a]) for a in row] for row in arms]
    plan = ReplicatePlan.from_rewards(rewards, K, with_references=False)
    acc = GradientAccumulator(plan, A, dtype=torch.float64)
    for j, row in enumerate(arms):
        acc.add_replicate(j, torch.tensor(np.stack([g(a) for a in row])))
    return meter_statistics(acc.estimates, acc.references, plan.estimators)


def test_meter_recovers_the_exact_variances():
    stats = simulate_meter()
    assert stats["reinforce"]["variance"] == pytest.approx(exact_reinforce_variance(), rel=0.08)
    assert stats["rloo"]["variance"] == pytest.approx(exact_rloo_variance(), rel=0.08)
    ratio = stats["reinforce"]["variance"] / stats["rloo"]["variance"]
    assert ratio == pytest.approx(exact_reinforce_variance() / exact_rloo_variance(), rel=0.12)
    # Dr. GRPO's advantages are (K-1)/K times RLOO's: the same replicates give exactly ((K-1)/K)^2 the variance,
    # and the same noise-to-signal ratio
    assert stats["dr_grpo"]["variance"] == pytest.approx(stats["rloo"]["variance"] * ((K - 1) / K) ** 2, rel=1e-9)
    assert stats["dr_grpo"]["noise_to_signal"] == pytest.approx(stats["rloo"]["noise_to_signal"], rel=1e-9)


def test_references_pool_the_other_replicates_leave_one_out():
    rewards = [[0.1, 0.5, -0.2, 0.9, 0.0, 0.3], [0.4, 0.4, 0.1, -0.6, 0.2, 0.8], [1.0, -1.0, 0.5, 0.5, 0.0, 0.1]]
    k, n, r = 3, 6, 3
    plan = ReplicatePlan.from_rewards(rewards, k)
    for j in range(r):
        others = [j2 for j2 in range(r) if j2 != j]
        assert plan.references[j, j].abs().sum() == 0  # a batch is never part of its own reference
        for p in range(n // k):
            pooled = [rewards[j2][p * k + c] for j2 in others for c in range(k)]
            expected = leave_one_out_advantages(pooled)
            got = [float(plan.references[j, j2, p * k + c]) * len(others) * n for j2 in others for c in range(k)]
            assert got == pytest.approx(expected, abs=1e-12)
    for e, name in enumerate(plan.estimators):
        assert plan.estimates[e, 1].tolist() == pytest.approx([a / n for a in ESTIMATORS[name](rewards[1], k)])


def test_cosine_to_reference_is_high_for_a_large_sample():
    """With many completions per replicate every unbiased estimate points along the true gradient; so does the
    reference built from the other replicates."""
    rng = np.random.default_rng(1)
    k, r = 400, 5
    arms = rng.choice(A, size=(r, k), p=PI)
    plan = ReplicatePlan.from_rewards([[float(ARM_REWARDS[a]) for a in row] for row in arms], k)
    acc = GradientAccumulator(plan, A, dtype=torch.float64)
    for j, row in enumerate(arms):
        acc.add_replicate(j, torch.tensor(np.stack([g(a) for a in row])))
    stats = meter_statistics(acc.estimates, acc.references, plan.estimators)
    truth = torch.tensor(true_gradient())
    for j in range(r):
        assert torch.nn.functional.cosine_similarity(acc.references[j], truth, dim=0) > 0.95
    assert stats["rloo"]["cosine"] > 0.9
    assert stats["rloo"]["cosine"] > stats["reinforce"]["cosine"]


class ArmPolicy(torch.nn.Module):
    """A 'language model' whose next-token logits are theta whatever the input: the toy softmax policy."""

    def __init__(self, logits):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor(logits, dtype=torch.float64))

    def forward(self, input_ids, attention_mask=None):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.theta.expand(*input_ids.shape, -1))


def test_score_gradient_is_e_a_minus_pi():
    model = ArmPolicy(PI_LOGITS)
    params = [model.theta]
    for a in range(A):
        got = score_gradient(model, params, [0], [a])
        assert got.tolist() == pytest.approx(g(a).tolist(), abs=1e-6)  # logits in float32, as TRL
        assert model.theta.grad is None  # the trainer's .grad is never touched
    # two tokens: the gradient of the sum of both log-probabilities
    assert score_gradient(model, params, [0], [0, 2]).tolist() == pytest.approx((g(0) + g(2)).tolist(), abs=1e-6)


def test_summary_table_has_every_estimator_and_the_columns():
    stats = simulate_meter(replicates=50)
    rows = summary_rows([stats, stats])
    assert [r["estimator"] for r in rows] == list(ESTIMATORS)
    assert rows[0]["variance_vs_rloo"] == pytest.approx(1.0)
    table = markdown_table(rows)
    assert "variance_vs_rloo" in table and "cosine_to_reference" in table
    record = metrics_record(stats, 1.5, 80)
    assert record["variance/seconds"] == 1.5 and set(f"variance/{e}" for e in ESTIMATORS) <= set(record)


def test_meter_statistics_by_hand_with_two_and_three_replicates():
    """Few replicates, numbers worked out by hand: the trace of the sample covariance divides by R - 1 (R = 2: by 1,
    where dividing by R would halve it), the cosine is averaged over the replicates with a non-zero estimate, and the
    noise-to-signal is the variance over the squared norm of the mean."""
    estimates = torch.tensor(
        [
            [[1.0, 0.0], [3.0, 0.0]],  # mean (2, 0); deviations (-1, 0), (1, 0): trace 2, over R - 1 = 1
            [[0.0, 2.0], [0.0, -2.0]],  # mean (0, 0); deviations (0, 2), (0, -2): trace 8; no signal
        ],
        dtype=torch.float64,
    )
    references = torch.tensor([[1.0, 1.0], [0.0, 2.0]], dtype=torch.float64)
    stats = meter_statistics(estimates, references, ["a", "b"])
    assert list(stats) == ["a", "b"]
    assert stats["a"]["variance"] == pytest.approx(2.0, rel=1e-12)
    assert stats["a"]["noise_to_signal"] == pytest.approx(2.0 / 4.0, rel=1e-12)
    # cosines: (1, 0) to (1, 1) is 1/sqrt(2); (3, 0) to (0, 2) is 0
    assert stats["a"]["cosine"] == pytest.approx((1 / math.sqrt(2) + 0.0) / 2, rel=1e-12)
    assert stats["b"]["variance"] == pytest.approx(8.0, rel=1e-12)
    assert math.isnan(stats["b"]["noise_to_signal"])
    # (0, 2) to (1, 1) is 1/sqrt(2); (0, -2) to (0, 2) is -1
    assert stats["b"]["cosine"] == pytest.approx((1 / math.sqrt(2) - 1.0) / 2, rel=1e-12)

    three = torch.tensor([[[0.0, 0.0], [1.0, 2.0], [2.0, 4.0]]], dtype=torch.float64)
    # mean (1, 2); squared deviations 5, 0, 5: trace 10 over R - 1 = 2 (over R it would be 3.33)
    stats = meter_statistics(three, None, ["rloo"])
    assert stats["rloo"]["variance"] == pytest.approx(5.0, rel=1e-12)
    assert stats["rloo"]["noise_to_signal"] == pytest.approx(5.0 / 5.0, rel=1e-12)
    assert math.isnan(stats["rloo"]["cosine"])  # no references
    refs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 4.0]], dtype=torch.float64)
    # replicate 0's estimate is zero (left out); (1, 2) to (0, 1) is 2/sqrt(5); (2, 4) to (2, 4) is 1
    cosine = meter_statistics(three, refs, ["rloo"])["rloo"]["cosine"]
    assert cosine == pytest.approx((2 / math.sqrt(5) + 1.0) / 2, rel=1e-12)


def test_which_steps_the_meter_measures_and_what_fits_its_accumulators():
    from rloo_demo.advantages import ESTIMATORS
    from rloo_demo.engine.variance import MAX_METER_FLOATS, REPLICATES, fits_in_memory, is_measured, measurements

    assert [s for s in range(1, 31) if is_measured(s, 10)] == [10, 20, 30]
    assert not is_measured(10, 0) and not is_measured(0, -1)
    assert measurements(150, 50) == 3 and measurements(149, 50) == 2 and measurements(150, 0) == 0
    assert measurements(0, 5) == 0
    per_param = (len(ESTIMATORS) + 1) * REPLICATES
    edge = MAX_METER_FLOATS // per_param
    assert fits_in_memory(edge) and not fits_in_memory(edge + 1)  # the cap itself still fits
    assert fits_in_memory(edge * REPLICATES, replicates=1)


def test_the_plan_needs_two_replicates_of_one_size():
    from rloo_demo.engine.variance import ReplicatePlan

    for rewards in ([[0.1, 0.2]], [[0.1, 0.2], [0.3]]):
        with pytest.raises(ValueError, match="^the meter needs at least 2 replicates of the same size$"):
            ReplicatePlan.from_rewards(rewards, k=2)
    plan = ReplicatePlan.from_rewards([[0.0, 1.0], [1.0, 1.0]], k=2, estimators=["rloo"], with_references=False)
    assert plan.references is None and plan.estimates.tolist() == [[[-0.5, 0.5], [0.0, 0.0]]]  # A/N: (∓1)/2


def test_the_accumulator_sums_every_gradient_folded_in():
    from rloo_demo.engine.variance import GradientAccumulator, ReplicatePlan

    plan = ReplicatePlan.from_rewards([[0.0, 1.0], [1.0, 3.0]], k=2, estimators=["rloo"])
    acc = GradientAccumulator(plan, num_params=1, dtype=torch.float64)
    acc.add_replicate(0, torch.tensor([[2.0], [4.0]], dtype=torch.float32))
    acc.add_replicate(0, torch.tensor([[1.0], [1.0]], dtype=torch.float32))  # a second pass adds, it does not replace
    # rloo weights of replicate 0: A = (-1, +1), over N = 2: (-0.5, 0.5); 0.5 * (4 - 2) + 0.5 * (1 - 1) = 1.0
    assert acc.estimates[0, 0].tolist() == [1.0] and acc.estimates.dtype == torch.float64
    assert acc.references is not None and acc.references.dtype == torch.float64


def test_the_meters_metrics_and_its_summary_over_steps_by_hand():
    from rloo_demo.engine.variance import metrics_record, summary_rows

    step1 = {
        "rloo": {"variance": 2.0, "cosine": 0.5, "noise_to_signal": 4.0},
        "reinforce": {"variance": 6.0, "cosine": math.nan, "noise_to_signal": 10.0},
    }
    step2 = {
        "rloo": {"variance": 4.0, "cosine": 0.7, "noise_to_signal": 2.0},
        "reinforce": {"variance": 12.0, "cosine": 0.1, "noise_to_signal": math.nan},
    }
    record = metrics_record(step1, 1.5, 40)
    assert math.isnan(record.pop("cosine/reinforce"))
    assert record == {
        "variance/seconds": 1.5,
        "variance/samples": 40.0,
        "variance/rloo": 2.0,
        "cosine/rloo": 0.5,
        "noise_to_signal/rloo": 4.0,
        "variance/reinforce": 6.0,
        "noise_to_signal/reinforce": 10.0,
    }
    rows = {r["estimator"]: r for r in summary_rows([step1, step2])}
    assert rows["reinforce"]["variance_vs_rloo"] == pytest.approx(9.0 / 3.0)  # means 9 and 3
    assert rows["reinforce"]["cosine_to_reference"] == pytest.approx(0.1)  # the NaN left out
    assert rows["reinforce"]["noise_to_signal_vs_rloo"] == pytest.approx(10.0 / 3.0)
    assert rows["rloo"]["variance"] == 3.0 and rows["rloo"]["variance_vs_rloo"] == 1.0
    one = summary_rows([step1])  # one measured step
    assert [r["estimator"] for r in one] == ["rloo", "reinforce"] and one[1]["noise_to_signal_vs_rloo"] == 2.5
    flat = summary_rows(
        [
            {
                "rloo": {"variance": 0.0, "cosine": 1.0, "noise_to_signal": 0.0},
                "reinforce": {"variance": 1.0, "cosine": 1.0, "noise_to_signal": 1.0},
            }
        ]
    )
    assert math.isnan(flat[1]["variance_vs_rloo"]) and math.isnan(flat[1]["noise_to_signal_vs_rloo"])


def test_the_meters_schedule_counts_and_cap_at_their_edges(monkeypatch):
    assert [s for s in range(1, 5) if is_measured(s, 1)] == [1, 2, 3, 4]  # every step
    assert [s for s in range(1, 8) if is_measured(s, 3)] == [3, 6]
    assert not any(is_measured(s, 0) for s in range(1, 5))  # 0: the meter is off
    assert (measurements(1, 1), measurements(7, 3), measurements(0, 1), measurements(5, 0)) == (1, 2, 0, 0)
    per_param = (len(ESTIMATORS) + 1) * 4  # the accumulators' floats per parameter at R = 4
    monkeypatch.setattr(variance, "MAX_METER_FLOATS", per_param * 1000)  # a cap that a policy can reach exactly
    assert fits_in_memory(1000, replicates=4) and not fits_in_memory(1001, replicates=4)
    assert fits_in_memory(2000, replicates=2) and not fits_in_memory(2001, replicates=2)  # R counts


def test_summary_rows_divide_by_rloos_means_even_when_they_are_below_one_and_the_table_is_the_clis():
    def stats(rloo, other):
        return {"rloo": rloo, "grpo": other}

    steps = [
        stats(
            {"variance": 0.2, "cosine": 0.9, "noise_to_signal": 0.4},
            {"variance": 0.6, "cosine": 0.5, "noise_to_signal": 0.2},
        ),
        stats(
            {"variance": 0.4, "cosine": 0.7, "noise_to_signal": 0.6},
            {"variance": float("nan"), "cosine": 0.3, "noise_to_signal": 0.3},
        ),  # a NaN is left out of the mean
    ]
    rloo, grpo = summary_rows(steps)
    assert rloo == {
        "estimator": "rloo",
        "variance_vs_rloo": 1.0,
        "cosine_to_reference": pytest.approx(0.8),
        "noise_to_signal_vs_rloo": 1.0,
        "variance": pytest.approx(0.3),
    }
    assert grpo == {
        "estimator": "grpo",
        "variance_vs_rloo": pytest.approx(0.6 / 0.3),
        "cosine_to_reference": pytest.approx(0.4),
        "noise_to_signal_vs_rloo": pytest.approx(0.25 / 0.5),
        "variance": pytest.approx(0.6),
    }
    assert markdown_table([rloo, grpo]) == (
        "| estimator | variance_vs_rloo | cosine_to_reference | noise_to_signal_vs_rloo | variance |\n"
        "|---|---|---|---|---|\n"
        "| rloo | 1.000 | 0.800 | 1.000 | 0.3 |\n"
        "| grpo | 2.000 | 0.400 | 0.500 | 0.6 |"
    )
