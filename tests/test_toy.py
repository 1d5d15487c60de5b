"""The exact Bernoulli toy (``rloo_demo.toy``) against figures computed here another way, and the gradient-variance
meter measured on it: ``python -m pytest tests/test_toy.py`` (pure Python and a little torch, about 20 s).

- For K = 2 and 4 the toy's multiset sums are checked against a brute force over all 8^K ordered draws written out
  below; for K = 8 (16.7M ordered draws) against closed forms: REINFORCE's mean of K independent r·s terms, RLOO as a
  U-statistic of order 2 (as in ``tests/engine/test_variance.py``), and the identities (unbiased RLOO and REINFORCE, Dr.
  GRPO's mean (K−1)/K of RLOO's).
- Under an offset C, REINFORCE's variance is a parabola in C with curvature Var(Σ s)/K, and every baselined
  estimator's does not move.
- The meter's own code path (``ReplicatePlan``, ``GradientAccumulator``, ``meter_statistics``, ``summary_rows``)
  on sampled toy draws, 5 replicates a measurement as on a run, lands within its own 99% interval of the exact figure.
"""

import itertools
import math

import pytest
import torch

from rloo_demo.advantages import ESTIMATORS
from rloo_demo.cli import main
from rloo_demo.engine.variance import GradientAccumulator, ReplicatePlan, meter_statistics, summary_rows
from rloo_demo.errors import InputError
from rloo_demo.toy import (
    P0,
    STATES,
    check_inputs,
    closed_form_gradient,
    cost,
    draw_gradients,
    exact_moments,
    exact_table,
    reward,
    sample_draws,
    score,
    sigmoid,
    state_probabilities,
    true_gradient,
    variance_curves,
    variance_standard_error,
)

ETAS = (0.0, -4.0)
OFFSETS = (0.0, 1.0)


def brute_force(eta, k, offset):
    """Mean and variance of every estimator's (1/K) Σ A_j s_j over all 8^K ordered draws, weighted by their
    probability: written without multisets, state by state."""
    p = sigmoid(eta)
    prob = {z: math.prod(p if b else 1 - p for b in z) for z in STATES}
    first = dict.fromkeys(ESTIMATORS, 0.0)
    second = dict.fromkeys(ESTIMATORS, 0.0)
    total = 0.0
    for draw in itertools.product(STATES, repeat=k):
        w = math.prod(prob[z] for z in draw)
        total += w
        rewards = [sum((b - t) ** 2 for b, t in zip(z, P0, strict=True)) + offset for z in draw]
        scores = [sum(b - p for b in z) for z in draw]
        for name, fn in ESTIMATORS.items():
            g = sum(a * s for a, s in zip(fn(rewards, k), scores, strict=True)) / k
            first[name] += w * g
            second[name] += w * g * g
    assert total == pytest.approx(1.0, abs=1e-12)
    return {name: (first[name], second[name] - first[name] ** 2) for name in ESTIMATORS}


@pytest.mark.parametrize("eta", ETAS)
@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("k", [2, 4])
def test_multisets_match_a_brute_force_over_every_ordered_draw(eta, k, offset):
    exact = exact_moments(eta, k, offset)
    brute = brute_force(eta, k, offset)
    assert set(brute) == set(exact) and len(brute) == 6  # every estimator compared, none skipped
    for name, (mean, variance) in brute.items():
        assert exact[name]["mean"] == pytest.approx(mean, abs=1e-9), name
        assert exact[name]["variance"] == pytest.approx(variance, abs=1e-9, rel=1e-6), name


def closed_forms(eta, k, offset):
    """REINFORCE: the mean of k independent r·s. RLOO: (1/(k(k−1))) Σ_{i<j} (r_i − r_j)(s_i − s_j), a U-statistic
    with kernel h(x, y) = (r_x − r_y)(s_x − s_y)/2 and variance (2/(k(k−1)))·(2(k−2)ζ1 + ζ2)."""
    probs = dict(zip(STATES, state_probabilities(eta), strict=True))
    r = {z: reward(z, offset) for z in STATES}
    s = {z: score(z, eta) for z in STATES}
    mu = sum(q * r[z] * s[z] for z, q in probs.items())
    reinforce_var = (sum(q * (r[z] * s[z]) ** 2 for z, q in probs.items()) - mu**2) / k

    def h(x, y):
        return 0.5 * (r[x] - r[y]) * (s[x] - s[y])

    h1 = {x: sum(probs[y] * h(x, y) for y in STATES) for x in STATES}
    zeta1 = sum(probs[x] * (h1[x] - mu) ** 2 for x in STATES)
    zeta2 = sum(probs[x] * probs[y] * (h(x, y) - mu) ** 2 for x in STATES for y in STATES)
    rloo_var = 2 / (k * (k - 1)) * (2 * (k - 2) * zeta1 + zeta2)
    return mu, reinforce_var, rloo_var


@pytest.mark.parametrize("eta", ETAS)
@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("k", [2, 4, 8])
def test_exact_figures_match_the_closed_forms_and_identities(eta, k, offset):
    exact = exact_moments(eta, k, offset)
    mu, reinforce_var, rloo_var = closed_forms(eta, k, offset)
    truth = true_gradient(eta, offset)
    assert truth == pytest.approx(mu, abs=1e-12)
    assert truth == pytest.approx(closed_form_gradient(eta), abs=1e-12)  # and the offset does not move it
    # RLOO and REINFORCE are unbiased; their variances are the closed forms
    for name in ("rloo", "reinforce"):
        assert exact[name]["mean"] == pytest.approx(truth, abs=1e-9), name
    assert exact["reinforce"]["variance"] == pytest.approx(reinforce_var, rel=1e-6, abs=1e-12)
    assert exact["rloo"]["variance"] == pytest.approx(rloo_var, rel=1e-6, abs=1e-12)
    # Dr. GRPO is RLOO shrunk by (K−1)/K: biased by exactly that factor
    assert exact["dr_grpo"]["mean"] == pytest.approx((k - 1) / k * exact["rloo"]["mean"], abs=1e-9)
    assert exact["dr_grpo"]["variance"] == pytest.approx(((k - 1) / k) ** 2 * exact["rloo"]["variance"], rel=1e-6)
    # one group per draw: the batch-level estimators are their group-level twins
    for batch, group in (("batch_mean", "dr_grpo"), ("reinforce_pp", "grpo")):
        assert exact[batch]["mean"] == pytest.approx(exact[group]["mean"], abs=1e-9)
        assert exact[batch]["variance"] == pytest.approx(exact[group]["variance"], rel=1e-6, abs=1e-15)


@pytest.mark.parametrize("eta", ETAS)
@pytest.mark.parametrize("k", [2, 4, 8])
def test_an_offset_grows_reinforces_variance_and_leaves_the_baselines_alone(eta, k):
    by_offset = {c: exact_moments(eta, k, c) for c in (0.0, 1.0, 2.0)}
    reinforce = [by_offset[c]["reinforce"]["variance"] for c in (0.0, 1.0, 2.0)]
    assert reinforce[0] < reinforce[1] < reinforce[2]
    # ĝ(C) = ĝ(0) + C·(1/K) Σ s_j: a parabola in C whose curvature is Var(Σ s)/K = 3σ(1−σ)/K
    p = sigmoid(eta)
    assert (reinforce[2] - 2 * reinforce[1] + reinforce[0]) / 2 == pytest.approx(3 * p * (1 - p) / k, rel=1e-6)
    for name in ("rloo", "grpo", "dr_grpo", "reinforce_pp", "batch_mean"):
        for c in (1.0, 2.0):
            for key in ("mean", "variance"):
                assert by_offset[c][name][key] == pytest.approx(by_offset[0.0][name][key], rel=1e-6, abs=1e-12), (
                    name,
                    c,
                    key,
                )


def test_the_table_has_every_estimator_and_its_bias():
    result = exact_table(0.0, 4, 1.0)
    assert [r["estimator"] for r in result["rows"]] == list(ESTIMATORS)
    rows = {r["estimator"]: r for r in result["rows"]}
    assert result["true_gradient"] == pytest.approx(0.25 * sum(1 - 2 * q for q in P0))
    assert rows["rloo"]["variance_vs_rloo"] == 1.0
    assert rows["rloo"]["bias"] == pytest.approx(0.0, abs=1e-12)
    assert rows["dr_grpo"]["bias"] == pytest.approx(-result["true_gradient"] / 4)
    assert rows["reinforce"]["variance_vs_rloo"] > 100  # f sits near 0.76 already, and the offset adds 1
    curves = variance_curves(0.0, 1.0)
    assert curves["k"] == list(range(2, 9))
    assert curves["variance"]["rloo"][2] == rows["rloo"]["variance"]
    assert all(a > b for a, b in itertools.pairwise(curves["variance"]["reinforce"]))  # 1/K


def test_cli_prints_the_table_and_the_true_gradient(capsys):
    assert main(["toy", "--eta", "0", "--k", "4", "--offset", "1"]) == 0
    out = capsys.readouterr().out
    assert "true gradient d/deta E[reward] = -0.045000" in out
    assert "| estimator | mean | bias | variance | variance_vs_rloo |" in out
    for name in ESTIMATORS:
        assert f"| {name} | " in out
    assert main(["toy", "--k", "9"]) == 2
    assert "K must be between 2 and 8" in capsys.readouterr().err


@pytest.mark.parametrize(
    "eta, k, offset",
    [(math.nan, 4, 0), (0, 1, 0), (0, 4.5, 0), (0, True, 0), ("0", 4, 0), (0, 4, math.inf), (0, 4, 101), (11, 4, 0)],
)
def test_the_toy_refuses_what_it_cannot_compute(eta, k, offset):
    with pytest.raises(InputError):
        check_inputs(eta, k, offset)
    with pytest.raises(InputError):
        exact_table(eta, k, offset)


def meter_on_the_toy(eta, k, offset, measurements, seed=0):
    """The meter's code path on toy draws: each measurement draws 5 replicate batches of one 'prompt' with K
    samples, as the meter does on a run, and the summary averages the measurements' variances."""
    replicates = 5
    draws = sample_draws(eta, k, replicates * measurements, seed)
    per_step = []
    for m in range(measurements):
        batch = draws[m * replicates : (m + 1) * replicates]
        rewards = [[reward(STATES[i], offset) for i in draw] for draw in batch]
        plan = ReplicatePlan.from_rewards(rewards, k, with_references=False)
        acc = GradientAccumulator(plan, 1, dtype=torch.float64)
        for j, draw in enumerate(batch):
            acc.add_replicate(j, torch.tensor([[score(STATES[i], eta)] for i in draw], dtype=torch.float64))
        per_step.append(meter_statistics(acc.estimates, acc.references, plan.estimators))
    return per_step, summary_rows(per_step)


@pytest.mark.parametrize("offset", OFFSETS)
def test_the_meter_lands_within_its_own_interval_of_the_exact_variance(offset):
    eta, k, measurements = 0.0, 4, 3000
    per_step, rows = meter_on_the_toy(eta, k, offset, measurements)
    exact = exact_moments(eta, k, offset)
    by_name = {r["estimator"]: r for r in rows}
    for name in ("rloo", "reinforce", "dr_grpo", "grpo"):
        values = [s[name]["variance"] for s in per_step]
        mean = sum(values) / len(values)
        assert by_name[name]["variance"] == pytest.approx(mean, rel=1e-12)  # what the meter reports
        # the meter's own 99% interval, from the spread of its measurements
        spread = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))
        half = 2.576 * spread
        assert abs(mean - exact[name]["variance"]) <= half, (name, mean, exact[name]["variance"], half)
        assert half < 0.06 * exact[name]["variance"], name  # an interval that says something
        # and the spread is what the exact fourth moment predicts for 5 replicates a measurement
        predicted = variance_standard_error(exact[name], 5) / math.sqrt(measurements)
        assert spread == pytest.approx(predicted, rel=0.25), name
    ratio = by_name["reinforce"]["variance_vs_rloo"]
    assert ratio == pytest.approx(exact["reinforce"]["variance"] / exact["rloo"]["variance"], rel=0.1)


def test_the_cli_table_word_for_word_on_a_result_written_here():
    from rloo_demo.toy import P0, markdown_table, sigmoid

    result = {
        "eta": -1.5,
        "k": 3,
        "offset": 0.25,
        "true_gradient": -0.0421,
        "rows": [
            {"estimator": "rloo", "mean": -0.0421, "bias": -4e-7, "variance": 0.00123456789, "variance_vs_rloo": 1.0},
            {
                "estimator": "reinforce",
                "mean": float("inf"),
                "bias": 0.5,
                "variance": 12.5,
                "variance_vs_rloo": float("nan"),
            },
        ],
    }
    assert markdown_table(result).split("\n") == [
        f"Bernoulli toy (Kool et al. 2019): eta = -1.5 (sigma = {sigmoid(-1.5):.4f}), K = 3, offset = 0.25; "
        f"reward = sum_i (z_i - p0_i)^2 + offset, p0 = {P0}; exact over every draw of K samples.",
        "",
        "true gradient d/deta E[reward] = -0.042100",
        "",
        "| estimator | mean | bias | variance | variance_vs_rloo |",
        "|---|---|---|---|---|",
        "| rloo | -0.042100 | +0.000000 | 0.00123457 | 1.0000 |",  # a bias under 5e-7 shows as 0, signed +
        "| reinforce | – | +0.500000 | 12.5 | – |",
    ]


def test_the_curves_against_k_are_the_exact_tables_at_each_k_with_the_offset():
    from rloo_demo.advantages import ESTIMATORS
    from rloo_demo.toy import exact_table, variance_curves

    curves = variance_curves(-0.5, offset=1.0, ks=(2, 5))
    tables = [exact_table(-0.5, k, 1.0) for k in (2, 5)]
    assert curves["k"] == [2, 5] and list(curves["variance"]) == list(ESTIMATORS)
    for e, name in enumerate(ESTIMATORS):
        assert curves["variance"][name] == [t["rows"][e]["variance"] for t in tables]
        assert curves["bias"][name] == [t["rows"][e]["bias"] for t in tables]
    assert curves["variance"]["reinforce"] != variance_curves(-0.5, offset=0.0, ks=(2, 5))["variance"]["reinforce"]
    table = exact_table(-0.5, 4, 1.0)
    assert table["true_gradient"] == pytest.approx(exact_table(-0.5, 4, 0.0)["true_gradient"], abs=1e-12)  # no move
    rloo = table["rows"][0]
    assert rloo["estimator"] == "rloo" and rloo["variance_vs_rloo"] == 1.0
    assert all(r["bias"] == r["mean"] - table["true_gradient"] for r in table["rows"])


def test_the_toys_sigmoid_and_state_probabilities_by_hand():
    from rloo_demo.toy import STATES, sigmoid, state_probabilities

    assert sigmoid(0.0) == 0.5
    assert sigmoid(2.0) == pytest.approx(1 / (1 + math.exp(-2.0)), rel=1e-15)  # 0.8808
    assert sigmoid(0.5) == pytest.approx(0.6224593312018546, rel=1e-15)
    assert sigmoid(-2.0) == pytest.approx(0.11920292202211755, rel=1e-15)
    assert sigmoid(800.0) == 1.0 and sigmoid(-800.0) == 0.0  # no overflow either side
    probs = state_probabilities(1.0)
    p = 1 / (1 + math.exp(-1.0))
    assert probs == pytest.approx([p ** sum(z) * (1 - p) ** (3 - sum(z)) for z in STATES], rel=1e-12)
    assert math.fsum(probs) == pytest.approx(1.0)


def test_the_standard_error_of_a_sample_variance_by_hand():
    from rloo_demo.toy import variance_standard_error

    # sqrt((mu4 - sigma^4 (R - 3) / (R - 1)) / R) with sigma^2 = 2, mu4 = 20, R = 5: sqrt((20 - 4 * 2 / 4) / 5)
    assert variance_standard_error({"variance": 2.0, "fourth": 20.0}, 5) == pytest.approx(math.sqrt(18 / 5))
    assert variance_standard_error({"variance": 3.0, "fourth": 10.0}, 11) == pytest.approx(
        math.sqrt((10 - 9 * 8 / 10) / 11)
    )
    assert variance_standard_error({"variance": 2.0, "fourth": 1.0}, 5) == 0.0  # clamped, never NaN


def test_the_toys_draws_are_seeded_and_each_bit_is_its_own_coin():
    from rloo_demo.toy import sample_draws, sigmoid

    a, b = sample_draws(0.3, 4, 500, seed=3), sample_draws(0.3, 4, 500, seed=3)
    assert a == b and a != sample_draws(0.3, 4, 500, seed=4)
    assert sample_draws(0.3, 4, 2) == sample_draws(0.3, 4, 2, 0)  # the default seed is 0
    assert len(a) == 500 and all(len(d) == 4 and all(0 <= i < 8 for i in d) for d in a)
    ones = sum(bin(i).count("1") for d in a for i in d) / (500 * 4 * 3)
    assert ones == pytest.approx(sigmoid(0.3), abs=0.03)  # 6,000 coins of p = 0.574


def test_the_toys_refusals_name_the_input_and_what_it_was_word_for_word():
    cases = [
        ((float("nan"), 4, 0.0), "eta must be a finite number, not nan"),
        ((True, 4, 0.0), "eta must be a finite number, not True"),
        ((10.5, 4, 0.0), "eta must be between -10 and 10, not 10.5"),
        ((0.0, "4", 0.0), "K must be a finite number, not '4'"),
        ((0.0, 3.5, 0.0), "K must be a whole number, not 3.5"),
        ((0.0, 4, float("inf")), "offset must be a finite number, not inf"),
        ((0.0, 4, "1" * 60), "offset must be a finite number, not '" + "1" * 39),  # cut at 40 characters
    ]
    for args, message in cases:
        with pytest.raises(InputError) as caught:
            check_inputs(*args)
        assert str(caught.value) == message, args
    assert check_inputs(-1.5, 6.0, 2) == (-1.5, 6, 2.0)


def test_the_toys_offset_is_zero_unless_given_and_changes_what_it_reaches():
    """Every function of the toy takes C = 0 by default; with C the reward moves by C and so do the estimators that
    have no baseline of their own (REINFORCE), while the true gradient does not (E[C ∇ log p] = 0)."""
    z = STATES[5]
    assert reward(z) == cost(z) and reward(z, 1.5) == cost(z) + 1.5
    assert true_gradient(0.3) == true_gradient(0.3, 0.0)
    assert true_gradient(0.3, 2.0) == pytest.approx(true_gradient(0.3, 0.0), abs=1e-12)
    draw = [1, 6, 6, 3]
    assert draw_gradients(draw, 0.3) == draw_gradients(draw, 0.3, 0.0)
    assert draw_gradients(draw, 0.3, 2.0)["reinforce"] != pytest.approx(draw_gradients(draw, 0.3)["reinforce"])
    assert draw_gradients(draw, 0.3, 2.0)["rloo"] == pytest.approx(draw_gradients(draw, 0.3)["rloo"])
    assert exact_table(0.3, 3) == exact_table(0.3, 3, 0.0)
    plain, shifted = exact_table(0.3, 3)["rows"], exact_table(0.3, 3, 2.0)["rows"]
    (r,) = [i for i, row in enumerate(plain) if row["estimator"] == "reinforce"]
    assert shifted[r]["variance"] > plain[r]["variance"] and shifted[r]["estimator"] == "reinforce"
    assert variance_curves(0.3, ks=(2, 3)) == variance_curves(0.3, 0.0, ks=(2, 3))
    assert variance_curves(0.3, 2.0, ks=(2, 3)) != variance_curves(0.3, ks=(2, 3))
