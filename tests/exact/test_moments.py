"""One step's exact moments on the softmax bandit (``rloo_demo.exact.moments``) against figures computed here another
way: ``python -m pytest tests/exact/test_moments.py`` (numpy, a few seconds).

- The multiset sums against a brute force over every ordered draw (10^K of them for K = 2, 3), with the project's
  own advantage functions (``rloo_demo.advantages.ESTIMATORS``) and its own KL shaping on each draw.
- The exact mean and covariance against 10,000 sampled updates drawn with numpy's ``choice`` and turned into
  ĝ sample by sample, again with ``ESTIMATORS``: each coordinate within 3 standard errors.
- The exact RLOO (and REINFORCE) mean is the policy gradient, computed here by finite differences of E[r] (and of
  the KL-regularised objective); Dr. GRPO's is (K−1)/K of it; GRPO's points elsewhere.
"""

import itertools
import math

import numpy as np
import pytest

from rloo_demo.advantages import ESTIMATORS as REFERENCE
from rloo_demo.advantages import shaped_rewards
from rloo_demo.exact.bandit import (
    ACTIONS,
    REF_LOGITS,
    REWARDS,
    expected_reward,
    kl,
    log_softmax,
    objective,
    optimum_logits,
    softmax,
)
from rloo_demo.exact.moments import (
    ESTIMATORS,
    draw_probabilities,
    exact_moments,
    expected_update,
    multisets,
    updates,
)

THETA = np.array([0.8, -0.3, 0.5, 0.0, -1.0, 0.2, 0.4, -0.6, 0.1, -0.2])  # non-uniform; action 0 not yet dominant


def reference_updates(actions: np.ndarray, theta: np.ndarray, beta: float, name: str) -> np.ndarray:
    """ĝ = (1/K) Σ_i A_i (e_{a_i} − π) for each row of sampled actions, the advantages from the project's own
    estimator on the KL-shaped rewards (``advantages.shaped_rewards`` with the one-token KL log π − log π_ref)."""
    log_pi, log_ref = log_softmax(theta), log_softmax(REF_LOGITS)
    pi = np.exp(log_pi)
    n, k = actions.shape
    adv = np.empty((n, k))
    for row, draw in enumerate(actions.tolist()):
        rewards = shaped_rewards([REWARDS[a] for a in draw], [log_pi[a] - log_ref[a] for a in draw], beta)
        adv[row] = REFERENCE[name](rewards, k)
    one_hot = actions[:, :, None] == np.arange(ACTIONS)
    return (one_hot * adv[:, :, None]).sum(axis=1) / k - (adv.sum(axis=1) / k)[:, None] * pi


def finite_difference_gradient(f, theta: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """Central differences of a scalar function of θ: a gradient computed without the softmax's calculus."""
    out = np.empty_like(theta)
    for j in range(len(theta)):
        step = np.zeros_like(theta)
        step[j] = h
        out[j] = (f(theta + step) - f(theta - step)) / (2 * h)
    return out


@pytest.mark.parametrize("k", [2, 4, 8])
def test_multisets_are_every_draw_once_with_the_multinomial_weight(k):
    counts, log_coefficients = multisets(k)
    assert len(counts) == math.comb(k + ACTIONS - 1, ACTIONS - 1)  # 55, 715, 24,310
    assert (counts.sum(axis=1) == k).all()
    assert len({tuple(row) for row in counts.tolist()}) == len(counts)
    # the coefficients count the ordered draws: 10^K of them in all
    assert np.exp(log_coefficients).sum() == pytest.approx(ACTIONS**k, rel=1e-9)
    assert draw_probabilities(THETA, k).sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("beta", [0.0, 0.1])
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_multiset_sums_match_a_brute_force_over_every_ordered_draw(name, k, beta):
    draws = np.array(list(itertools.product(range(ACTIONS), repeat=k)))
    pi = softmax(THETA)
    weights = np.prod(pi[draws], axis=1)
    g = reference_updates(draws, THETA, beta, name)
    mean = weights @ g
    cov = (g - mean).T @ ((g - mean) * weights[:, None])
    exact_mean, exact_cov = exact_moments(name, THETA, beta, k)
    np.testing.assert_allclose(exact_mean, mean, atol=1e-12)
    np.testing.assert_allclose(exact_cov, cov, atol=1e-12)
    np.testing.assert_allclose(expected_update(name, THETA, beta, k), mean, atol=1e-12)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_updates_of_counts_are_the_projects_estimators_on_the_draws(name):
    """The vectorised arithmetic of one draw's ĝ, on its counts and with one θ per row, against the reference."""
    rng = np.random.default_rng(11)
    actions = rng.integers(0, ACTIONS, size=(50, 5))
    actions[0] = 3  # a group of equal rewards: GRPO's 0 / (0 + eps)
    thetas = THETA + rng.normal(size=(50, ACTIONS))
    counts = (actions[:, :, None] == np.arange(ACTIONS)).sum(axis=1).astype(float)
    got = updates(name, counts, thetas, 0.1)
    want = np.stack([reference_updates(actions[i : i + 1], thetas[i], 0.1, name)[0] for i in range(50)])
    np.testing.assert_allclose(got, want, atol=1e-10)


@pytest.mark.parametrize(("k", "beta"), [(4, 0.1), (3, 0.0)])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_exact_mean_and_covariance_hold_against_10000_sampled_updates(name, k, beta):
    """Each coordinate of the mean and each variance within 3 standard errors of the sampled figure; the 45
    covariances off the diagonal within 4 (with 8 cases × 55 entries, 3 would fail about once by chance alone)."""
    n = 10_000
    rng = np.random.default_rng(20261206)
    actions = rng.choice(ACTIONS, size=(n, k), p=softmax(THETA))
    g = reference_updates(actions, THETA, beta, name)
    mean, cov = exact_moments(name, THETA, beta, k)

    mean_error = np.sqrt(np.diag(cov) / n)
    assert (np.abs(g.mean(axis=0) - mean) <= 3 * mean_error).all(), (g.mean(axis=0) - mean) / mean_error

    centred = g - mean  # about the exact mean: each product's average is an unbiased estimate of Cov
    products = centred[:, :, None] * centred[:, None, :]
    sampled_cov = products.mean(axis=0)
    cov_error = products.std(axis=0, ddof=1) / math.sqrt(n)
    z = np.abs(sampled_cov - cov) / cov_error
    assert (np.diag(z) <= 3).all(), np.diag(z)
    assert (z[~np.eye(ACTIONS, dtype=bool)] <= 4).all(), z.max()
    assert np.trace(cov) > 0.01  # a real spread, not two zeros agreeing


@pytest.mark.parametrize("k", [2, 4])
def test_rloo_and_reinforce_are_unbiased_dr_grpo_is_scaled_and_grpo_is_not_the_gradient(k):
    truth = finite_difference_gradient(expected_reward, THETA)
    assert np.linalg.norm(truth) > 0.05
    np.testing.assert_allclose(expected_update("rloo", THETA, 0.0, k), truth, atol=1e-9)
    np.testing.assert_allclose(expected_update("reinforce", THETA, 0.0, k), truth, atol=1e-9)
    np.testing.assert_allclose(expected_update("dr_grpo", THETA, 0.0, k), (k - 1) / k * truth, atol=1e-9)
    grpo = expected_update("grpo", THETA, 0.0, k)
    assert np.linalg.norm(grpo - truth) > 0.1 * np.linalg.norm(truth)  # biased: 1.2x (K = 2) to 2.1x (K = 4) longer
    # and not a multiple of it either (which a smaller step size would undo): the best multiple leaves 4-6% of
    # GRPO's norm, 10^7 times what rounding leaves of RLOO's
    scale = grpo @ truth / (truth @ truth)
    assert np.linalg.norm(grpo - scale * truth) > 0.02 * np.linalg.norm(grpo)


def test_with_a_kl_term_rloo_is_unbiased_for_the_regularised_objective():
    beta = 0.1
    truth = finite_difference_gradient(lambda t: objective(t, beta), THETA)
    np.testing.assert_allclose(expected_update("rloo", THETA, beta, 4), truth, atol=1e-9)
    # and not for E[r] alone: the KL term is in the update
    assert np.linalg.norm(truth - finite_difference_gradient(expected_reward, THETA)) > 0.01


def test_near_the_optimum_rloo_goes_quiet_and_grpo_does_not():
    """Within KL 2e-6 of π*_β the shaped rewards of a group differ by little: RLOO's update and its noise shrink with
    them, GRPO's division by their std scales them back up to unit size (until they differ by less than its 1e-4)."""
    star = optimum_logits(0.1)
    theta = star + 0.01 * np.random.default_rng(0).normal(size=ACTIONS)
    assert kl(theta, star) < 1e-5
    rloo_mean, rloo_cov = exact_moments("rloo", theta, 0.1, 4)
    grpo_mean, grpo_cov = exact_moments("grpo", theta, 0.1, 4)
    assert np.linalg.norm(rloo_mean) < 1e-3 and np.trace(rloo_cov) < 1e-6
    assert np.linalg.norm(grpo_mean) > 0.05 and np.trace(grpo_cov) > 0.01
