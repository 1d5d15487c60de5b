"""The expected-update path and sampled trajectories from the same start, and the numbers the lesson reports.

- The expected-update path: θ ← θ + lr·E[ĝ](θ), E[ĝ] exact (``moments.expected_update``). No noise at all.
- Sampled trajectories: θ ← θ + lr·ĝ with K actions really drawn at each step, one trajectory per seed (all seeds
  at once, as rows of one array). Every estimator sees the same uniform draws (common random numbers), so their
  differences are theirs, not the draws'.

The mean of the sampled trajectories is *not* the expected-update path. One sampled step from θ moves on average by
lr·E[ĝ](θ), but the next step starts from a random θ and E[ĝ] is not linear in θ, so the noise of each step bends the
mean path: E[f(θ)] ≠ f(E[θ]). Over a fixed stretch of "time" lr·steps the gap is of order lr·(the covariance of ĝ),
and vanishes only as lr → 0 (tests/exact/test_paths.py measures it shrink). The two paths share only their start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rloo_demo.errors import InputError
from rloo_demo.exact.bandit import ACTIONS, REF_LOGITS, REWARDS, expected_reward, kl, optimum_logits, softmax
from rloo_demo.exact.moments import ESTIMATORS, K_RANGE, expected_update, sample_counts, updates
from rloo_demo.i18n import Message

BETA_RANGE = (0.0, 10.0)  # past 10 the optimum is within 1% of π_ref: the reward no longer matters
STEPS_RANGE = (1, 10_000)
LR_RANGE = (1e-6, 100.0)
SEEDS_RANGE = (1, 1000)


@dataclass(frozen=True)
class Settings:
    """One trajectory lesson: ``python -m rloo_demo trajectory``'s flags."""

    k: int = 4  # actions sampled per step (the group)
    beta: float = 0.1  # KL coefficient of the shaped reward
    steps: int = 200  # updates along each path
    lr: float = 2.0  # step size of θ ← θ + lr·ĝ (plain gradient ascent on the logits, no optimiser state)
    seeds: int = 20  # sampled trajectories per estimator
    seed: int = 0  # the first sampled trajectory's seed; the uniform draws come from one generator per estimator


def _number(name: str, value, lo: float, hi: float, whole: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(Message("value.finite", name=name, value=f"{value!r:.40}"))
    if whole and not float(value).is_integer():
        raise InputError(Message("value.whole", name=name, value=repr(value)))
    if not lo <= value <= hi:
        raise InputError(Message("value.between", name=name, lo=f"{lo:g}", hi=f"{hi:g}", value=repr(value)))
    return value


def check_settings(settings: Settings) -> Settings:
    """The settings as numbers in range (counts as ints: a caller's 4.0 is K = 4), or an ``InputError`` that names
    the bad one (K < 2, β < 0, steps ≤ 0, ...)."""
    return Settings(
        k=int(_number("--k", settings.k, *K_RANGE, whole=True)),
        beta=float(_number("--beta", settings.beta, *BETA_RANGE)),
        steps=int(_number("--steps", settings.steps, *STEPS_RANGE, whole=True)),
        lr=float(_number("--lr", settings.lr, *LR_RANGE)),
        seeds=int(_number("--seeds", settings.seeds, *SEEDS_RANGE, whole=True)),
        seed=int(_number("--seed", settings.seed, 0, 2**32 - 1, whole=True)),
    )


def expected_path(name: str, settings: Settings, theta0: np.ndarray = REF_LOGITS) -> np.ndarray:
    """θ at every step of the expected-update path, steps + 1 rows (the start included)."""
    thetas = np.empty((settings.steps + 1, ACTIONS))
    thetas[0] = theta0
    for t in range(settings.steps):
        thetas[t + 1] = thetas[t] + settings.lr * expected_update(name, thetas[t], settings.beta, settings.k)
    return thetas


def sampled_paths(name: str, settings: Settings, theta0: np.ndarray = REF_LOGITS) -> np.ndarray:
    """θ of every sampled trajectory at every step: an array (steps + 1, seeds, ACTIONS)."""
    rng = np.random.default_rng(settings.seed)
    thetas = np.empty((settings.steps + 1, settings.seeds, ACTIONS))
    thetas[0] = theta0
    for t in range(settings.steps):
        counts = sample_counts(rng, softmax(thetas[t]), settings.k)
        thetas[t + 1] = thetas[t] + settings.lr * updates(name, counts, thetas[t], settings.beta)
    return thetas


def mean_and_error(values: np.ndarray) -> tuple[float, float]:
    """The mean over seeds (the last axis) and its standard error (sample std / √n; 0 for one seed)."""
    n = values.shape[-1]
    error = values.std(axis=-1, ddof=1) / math.sqrt(n) if n > 1 else np.zeros_like(values.mean(axis=-1))
    return values.mean(axis=-1), error


def trajectory(settings: Settings) -> dict:
    """Every estimator's expected-update path and sampled trajectories for ``settings``: per estimator the expected
    reward along the exact path, along each seed and their mean ± standard error, and where β > 0 the KL to π*_β.
    What the CLI prints, the figure draws and assets/lessons/trajectory.json holds."""
    settings = check_settings(settings)
    optimum = optimum_logits(settings.beta) if settings.beta > 0 else None
    out = {"settings": vars(settings).copy(), "estimators": {}}
    out["optimum_reward"] = float(expected_reward(optimum)) if optimum is not None else None
    out["best_reward"] = float(REWARDS.max())
    for name in ESTIMATORS:
        exact = expected_path(name, settings)
        sampled = sampled_paths(name, settings)
        rewards = expected_reward(sampled)  # (steps + 1, seeds)
        mean, error = mean_and_error(rewards)
        row = {
            "exact_reward": expected_reward(exact).tolist(),
            "sampled_rewards": rewards.T.tolist(),
            "sampled_mean": mean.tolist(),
            "sampled_error": error.tolist(),
            "exact_final_policy": softmax(exact[-1]).tolist(),
        }
        if optimum is not None:
            row["exact_kl_to_optimum"] = kl(exact, optimum).tolist()
            final_kl = kl(sampled[-1], optimum)
            kl_mean, kl_error = mean_and_error(final_kl)
            row["sampled_final_kl"], row["sampled_final_kl_error"] = float(kl_mean), float(kl_error)
        out["estimators"][name] = row
    return out
