"""One step's exact expected update E[ĝ] and covariance Cov[ĝ] for each estimator, by enumeration over multisets.

A step draws K actions a_1..a_K from π and forms ĝ = (1/K) Σ_i A_i ∇θ log π(a_i) = (1/K) Σ_i A_i (e_{a_i} − π),
where the advantages A_i come from the shaped rewards s(a_i) (``bandit.shaped_rewards``):

- ``rloo``: s_i − mean of the K−1 others = K/(K−1)·(s_i − group mean);
- ``grpo``: (s_i − group mean) / (group std + 1e-4), the sample std (divisor K−1), as TRL's ``scale_rewards="group"``;
- ``dr_grpo``: s_i − group mean (the mean includes s_i itself, so (K−1)/K of RLOO's);
- ``reinforce``: s_i, no baseline.

The same arithmetic as ``rloo_demo.advantages`` (tests/exact/test_moments.py holds them equal), written for whole
arrays of groups at once so that 200 steps of 24,310 groups take a second rather than minutes.

Exactness: every estimator is symmetric in its K samples and gives equal samples equal advantages, so ĝ depends only
on how many times each action was drawn, the counts c (a multiset): ĝ = (1/K) Σ_a c_a A_a (e_a − π). There are
C(K+9, 9) multisets of K out of 10 actions (715 for K = 4, 24,310 for K = 8), each of multinomial probability
K!/Π_a c_a! · Π_a π_a^{c_a}. Summing over them gives E[ĝ] and Cov[ĝ] to rounding. Sampled draws go through the very
same function, as the counts of what was drawn.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from rloo_demo.advantages import NORMALIZE_EPS
from rloo_demo.exact.bandit import ACTIONS, log_softmax, shaped_rewards

ESTIMATORS = ("rloo", "grpo", "dr_grpo", "reinforce")
K_RANGE = (2, 8)  # K = 1 has no leave-one-out baseline; K = 8 is C(17, 8) = 24,310 multisets a step


@functools.cache
def multisets(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every multiset of k actions out of ``ACTIONS``, as counts (one row each, summing to k) and the log of its
    multinomial coefficient k!/Π c_a!. Cached and read-only: every step of every path asks for the same ones."""
    combos = np.array(list(itertools.combinations_with_replacement(range(ACTIONS), k)))
    counts = np.zeros((len(combos), ACTIONS))
    np.add.at(counts, (np.arange(len(combos))[:, None], combos), 1.0)
    log_factorials = np.array([math.lgamma(n + 1) for n in range(k + 1)])  # log n! for n = 0..k
    log_coefficients = log_factorials[k] - log_factorials[counts.astype(int)].sum(axis=1)
    counts.setflags(write=False)
    log_coefficients.setflags(write=False)
    return counts, log_coefficients


def _group_size(counts: np.ndarray) -> float:
    """K: every row of counts sums to it (one group, or many of the same size)."""
    return counts.reshape(-1, counts.shape[-1])[0].sum()


def advantages(name: str, counts: np.ndarray, shaped: np.ndarray) -> np.ndarray:
    """Each action's advantage in each group (rows of ``counts``, each summing to K), given each action's shaped
    reward (``shaped``: one row for all groups, or one row per group). An action not drawn gets a number too; its
    count 0 drops it from ĝ."""
    k = _group_size(counts)
    mean = (counts * shaped).sum(axis=-1, keepdims=True) / k
    deviation = shaped - mean
    if name == "rloo":
        # s_i minus the mean of the K−1 others: (K·mean − s_i)/(K − 1), which is K/(K−1)·(s_i − mean)
        return deviation * (k / (k - 1))
    if name == "dr_grpo":
        return deviation
    if name == "grpo":
        std = np.sqrt((counts * deviation**2).sum(axis=-1, keepdims=True) / (k - 1))
        return deviation / (std + NORMALIZE_EPS)
    if name == "reinforce":
        return np.broadcast_to(shaped, counts.shape)
    raise ValueError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}")


def _weights(name: str, counts: np.ndarray, theta: np.ndarray, beta: float) -> np.ndarray:
    """w_a = c_a·A_a / K for each group: ĝ = Σ_a w_a (e_a − π) = w − (Σ_a w_a)·π."""
    k = _group_size(counts)
    return counts * advantages(name, counts, shaped_rewards(theta, beta)) * (1.0 / k)


def updates(name: str, counts: np.ndarray, theta: np.ndarray, beta: float) -> np.ndarray:
    """ĝ = (1/K) Σ_a c_a A_a (e_a − π) for each group of counts, at logits θ (one θ for all groups, or one row of θ
    per group, as in a batch of sampled trajectories)."""
    weights = _weights(name, counts, theta, beta)
    return weights - weights.sum(axis=-1, keepdims=True) * np.exp(log_softmax(theta))


def draw_probabilities(theta: np.ndarray, k: int) -> np.ndarray:
    """The multinomial probability of each multiset of k actions under π = softmax(θ) (they sum to 1)."""
    counts, log_coefficients = multisets(k)
    return np.exp(log_coefficients + counts @ log_softmax(theta))


def expected_update(name: str, theta: np.ndarray, beta: float, k: int) -> np.ndarray:
    """E[ĝ] at θ: the exact mean over every draw of k actions. ĝ is linear in w, so E[ĝ] = E[w] − (Σ_a E[w_a])·π;
    the expected-update path asks for this 200 times per estimator, and it skips the per-draw ĝ."""
    counts, _ = multisets(k)
    expected_weights = draw_probabilities(theta, k) @ _weights(name, counts, theta, beta)
    return expected_weights - expected_weights.sum() * np.exp(log_softmax(theta))


def exact_moments(name: str, theta: np.ndarray, beta: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(E[ĝ], Cov[ĝ]) at θ over every draw of k actions: a vector of ``ACTIONS`` and an ``ACTIONS``² matrix."""
    counts, _ = multisets(k)
    probabilities = draw_probabilities(theta, k)
    g = updates(name, counts, theta, beta)
    mean = probabilities @ g
    centred = g - mean
    return mean, (centred * probabilities[:, None]).T @ centred


def sample_counts(rng: np.random.Generator, pi: np.ndarray, k: int) -> np.ndarray:
    """K actions drawn from each row of π (one row per trajectory), as counts per action: inverse-CDF sampling."""
    cdf = np.cumsum(pi, axis=-1)
    u = rng.random((pi.shape[0], k)) * cdf[:, -1:]  # scaled by the last cdf entry, which rounding may leave below 1
    actions = (u[:, :, None] >= cdf[:, None, :]).sum(axis=-1)
    return (actions[:, :, None] == np.arange(pi.shape[-1])).sum(axis=1).astype(float)
