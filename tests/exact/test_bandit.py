"""The softmax bandit (``rloo_demo.exact.bandit``): its closed-form gradient, its KL-regularised optimum and its
shaped reward, each against a computation of its own here. ``python -m pytest tests/exact/test_bandit.py`` (a second).
"""

import numpy as np
import pytest

from rloo_demo.advantages import shaped_rewards as project_shaping
from rloo_demo.exact.bandit import (
    ACTIONS,
    REWARDS,
    expected_reward,
    kl,
    objective,
    optimum_logits,
    policy_gradient,
    shaped_rewards,
    softmax,
)

THETA = np.array([0.8, -0.3, 0.5, 0.0, -1.0, 0.2, 0.4, -0.6, 0.1, -0.2])


def by_hand_objective(theta, beta):
    """E_π[r] − β Σ_a π_a log(π_a / (1/10)), written out action by action."""
    z = sum(np.exp(t) for t in theta)
    pi = [np.exp(t) / z for t in theta]
    return sum(p * r for p, r in zip(pi, REWARDS, strict=True)) - beta * sum(p * np.log(p * ACTIONS) for p in pi)


@pytest.mark.parametrize("beta", [0.0, 0.1, 1.0])
def test_the_closed_form_gradient_is_the_objectives_finite_difference(beta):
    h = 1e-6
    numeric = [
        (by_hand_objective(THETA + h * e, beta) - by_hand_objective(THETA - h * e, beta)) / (2 * h) for e in np.eye(10)
    ]
    np.testing.assert_allclose(policy_gradient(THETA, beta), numeric, atol=1e-8)
    assert objective(THETA, beta) == pytest.approx(by_hand_objective(THETA, beta), abs=1e-12)


@pytest.mark.parametrize("beta", [0.05, 0.1, 0.5])
def test_the_optimum_is_where_the_shaped_rewards_are_equal_and_its_kl_is_the_regret(beta):
    star = optimum_logits(beta)
    pi = softmax(star)
    # π*(a) / π*(b) = exp((r_a − r_b) / β) with π_ref uniform
    assert pi[0] / pi[9] == pytest.approx(np.exp((REWARDS[0] - REWARDS[9]) / beta), rel=1e-9)
    s = shaped_rewards(star, beta)
    assert np.ptp(s) < 1e-12  # every action as good as another once the KL is paid: no estimator moves
    np.testing.assert_allclose(policy_gradient(star, beta), 0.0, atol=1e-12)
    rng = np.random.default_rng(3)
    for theta in [THETA, *rng.normal(scale=2.0, size=(5, ACTIONS))]:
        regret = objective(star, beta) - objective(theta, beta)
        assert regret == pytest.approx(beta * kl(theta, star), rel=1e-9, abs=1e-12)
        assert regret > 0


def test_no_optimum_without_a_kl_term():
    with pytest.raises(ValueError, match="beta > 0"):
        optimum_logits(0.0)


def test_the_shaped_reward_is_the_projects_shaping_with_a_one_token_kl():
    pi = softmax(THETA)
    kl_per_action = np.log(pi) - np.log(1 / ACTIONS)  # log π(a) − log π_ref(a): the k1 term of its single token
    np.testing.assert_allclose(shaped_rewards(THETA, 0.1), project_shaping(REWARDS, kl_per_action, 0.1), atol=1e-12)
    np.testing.assert_allclose(shaped_rewards(THETA, 0.0), REWARDS)
    batch = np.stack([THETA, np.zeros(ACTIONS)])  # one row per trajectory
    np.testing.assert_allclose(shaped_rewards(batch, 0.1)[1], REWARDS, atol=1e-12)  # at π_ref the KL term is 0
    assert expected_reward(np.zeros(ACTIONS)) == pytest.approx(REWARDS.mean())
