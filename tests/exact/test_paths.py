"""The expected-update path and the sampled trajectories (``rloo_demo.exact.paths``):
``python -m pytest tests/exact/test_paths.py`` (numpy, a few seconds).

- The path's steps are the exact expected updates: its first step is lr times the closed-form gradient, RLOO's and
  REINFORCE's paths are one path, Dr. GRPO's first step (K−1)/K of it.
- With β > 0 RLOO's path climbs J_β at every step and reaches π*_β.
- The mean of 2,000 sampled trajectories approaches the path as the learning rate shrinks, over the same stretch of
  lr·steps: the gap is of order lr, not a constant.
- The sampler draws each action as often as π says, and every estimator sees the same draws.
"""

import math

import numpy as np
import pytest

from rloo_demo.errors import InputError
from rloo_demo.exact.bandit import ACTIONS, REF_LOGITS, expected_reward, kl, objective, optimum_logits, policy_gradient
from rloo_demo.exact.moments import sample_counts
from rloo_demo.exact.paths import (
    Settings,
    check_settings,
    expected_path,
    mean_and_error,
    sampled_paths,
    trajectory,
)


def test_the_paths_steps_are_the_exact_expected_updates():
    s = Settings(k=4, beta=0.1, steps=30, lr=0.5)
    rloo = expected_path("rloo", s)
    np.testing.assert_allclose(rloo[1] - rloo[0], 0.5 * policy_gradient(REF_LOGITS, 0.1), atol=1e-12)
    np.testing.assert_allclose(expected_path("reinforce", s), rloo, atol=1e-10)  # both unbiased: one path
    dr = expected_path("dr_grpo", s)
    np.testing.assert_allclose(dr[1] - dr[0], 0.75 * (rloo[1] - rloo[0]), atol=1e-12)
    assert not np.allclose(expected_path("grpo", s)[-1], rloo[-1], atol=0.05)


def test_with_a_kl_term_the_rloo_path_reaches_the_regularised_optimum():
    beta = 0.1
    path = expected_path("rloo", Settings(k=4, beta=beta, steps=4000, lr=2.0))
    climb = objective(path, beta)
    assert (np.diff(climb) > 0).all()  # J_β rises at every step
    distance = kl(path, optimum_logits(beta))
    assert distance[0] > 3.0  # π_ref is far from π*_β ...
    assert (np.diff(distance) < 0).all()  # ... the path closes in at every step ...
    assert distance[200] < 0.05 and distance[-1] < 1e-3  # ... slowly (about 2.4/steps) but all the way
    assert objective(optimum_logits(beta), beta) - climb[-1] == pytest.approx(beta * distance[-1], rel=1e-6)


def _gap(lr: float, horizon: float = 40.0) -> tuple[float, float]:
    """E[r] of the mean of 2,000 sampled RLOO trajectories minus the expected-update path's, after lr·steps =
    ``horizon``, with its standard error."""
    s = Settings(k=4, beta=0.0, lr=lr, steps=round(horizon / lr), seeds=2000, seed=7)
    exact = expected_reward(expected_path("rloo", s)[-1])
    mean, error = mean_and_error(expected_reward(sampled_paths("rloo", s)[-1]))
    return float(mean - exact), float(error)


def test_the_sampled_mean_approaches_the_exact_path_as_the_learning_rate_shrinks():
    large, large_error = _gap(2.0)
    small, small_error = _gap(0.25)
    assert abs(large) > 5 * large_error  # at lr 2 the gap is real (about −0.045 ± 0.002) ...
    assert abs(small) + 3 * small_error < abs(large) - 3 * large_error  # ... at lr 0.25 surely smaller ...
    assert abs(small) < abs(large) / 2  # ... and by much (about −0.008 ± 0.001: shrinking with lr, roughly)


def test_the_sampler_draws_each_action_as_often_as_pi_says():
    pi = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.03, 0.02, 0.0])
    n, k = 5000, 4
    counts = sample_counts(np.random.default_rng(5), np.tile(pi, (n, 1)), k)
    assert (counts.sum(axis=1) == k).all()
    frequency = counts.sum(axis=0) / (n * k)
    error = np.sqrt(pi * (1 - pi) / (n * k))
    assert (np.abs(frequency - pi) <= 3 * error + 1e-12).all(), (frequency - pi) / np.maximum(error, 1e-12)
    assert frequency[-1] == 0.0  # an action of probability 0 is never drawn


def test_every_estimator_sees_the_same_draws_and_a_seed_repeats_its_runs():
    s = Settings(k=4, beta=0.0, steps=1, seeds=50, seed=3)
    rloo, dr = sampled_paths("rloo", s), sampled_paths("dr_grpo", s)
    # the same draws: Dr. GRPO's first step is (K−1)/K of RLOO's, run by run
    np.testing.assert_allclose(dr[1] - dr[0], 0.75 * (rloo[1] - rloo[0]), atol=1e-12)
    np.testing.assert_array_equal(sampled_paths("rloo", s), rloo)
    other = sampled_paths("rloo", Settings(k=4, beta=0.0, steps=1, seeds=50, seed=4))
    assert not np.allclose(other, rloo)


def test_mean_and_error_by_hand():
    mean, error = mean_and_error(np.array([1.0, 2.0, 6.0]))
    assert mean == 3.0 and error == pytest.approx(math.sqrt(7 / 3))  # sample variance 7, over 3 seeds
    assert mean_and_error(np.array([[5.0]]))[1].tolist() == [0.0]


def test_the_trajectory_holds_each_estimators_paths_and_their_distance_to_the_optimum():
    s = Settings(k=3, beta=0.1, steps=15, lr=1.0, seeds=6, seed=9)
    result = trajectory(s)
    assert list(result["estimators"]) == ["rloo", "grpo", "dr_grpo", "reinforce"]
    assert result["optimum_reward"] == pytest.approx(expected_reward(optimum_logits(0.1)))
    for name, row in result["estimators"].items():
        exact = expected_path(name, s)
        sampled = sampled_paths(name, s)
        np.testing.assert_allclose(row["exact_reward"], expected_reward(exact))
        assert np.array(row["sampled_rewards"]).shape == (6, 16)
        np.testing.assert_allclose(row["sampled_mean"], expected_reward(sampled).mean(axis=1))
        np.testing.assert_allclose(row["exact_kl_to_optimum"], kl(exact, optimum_logits(0.1)))
        assert row["sampled_final_kl"] == pytest.approx(kl(sampled[-1], optimum_logits(0.1)).mean())
    without = trajectory(Settings(k=3, beta=0.0, steps=5, seeds=2))
    assert without["optimum_reward"] is None
    assert "exact_kl_to_optimum" not in without["estimators"]["rloo"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"k": 1}, "--k must be between 2 and 8, not 1"),
        ({"k": 9}, "--k must be between 2 and 8"),
        ({"k": 2.5}, "--k must be a whole number"),
        ({"beta": -0.1}, "--beta must be between 0 and 10, not -0.1"),
        ({"beta": math.nan}, "--beta must be a finite number"),
        ({"steps": 0}, "--steps must be between 1 and 10000, not 0"),
        ({"lr": 0.0}, "--lr must be between"),
        ({"seeds": 0}, "--seeds must be between 1 and 1000"),
        ({"seed": -1}, "--seed must be between 0"),
        ({"steps": True}, "--steps must be a finite number"),
    ],
)
def test_bad_settings_are_refused_with_the_flags_name(change, needle):
    bad = Settings(**{**vars(Settings()), **change})
    with pytest.raises(InputError, match=None) as caught:
        check_settings(bad)
    assert needle in str(caught.value)
    with pytest.raises(InputError):
        trajectory(bad)  # before any work


def test_the_defaults_are_in_range_and_whole_floats_are_counts():
    assert check_settings(Settings()) == Settings()
    checked = check_settings(Settings(k=3.0, steps=5.0, seeds=2.0, seed=1.0, beta=0, lr=1))
    assert checked == Settings(k=3, steps=5, seeds=2, seed=1, beta=0.0, lr=1.0)
    assert [type(v) for v in vars(checked).values()] == [int, float, int, float, int, int]
    assert len(trajectory(Settings(k=3.0, steps=2, seeds=2))["estimators"]["rloo"]["exact_reward"]) == 3
    assert ACTIONS == 10
