"""An exact toy with ground truth: every estimator's expected gradient, bias and variance, with no sampling error.

The estimator lab measures the estimators on a language model, where nothing is known exactly and every figure comes
with noise. This is the toy of Kool, van Hoof & Welling ("Buy 4 REINFORCE samples, get a baseline for free!", 2019),
where everything is known:

- three binary variables z_i ~ Bernoulli(σ(η)) that share one logit η, so a draw is one of 8 states z ∈ {0, 1}^3;
- the cost f(z) = Σ_i (z_i − p0_i)² with p0 = (0.6, 0.51, 0.48), and the reward r(z) = f(z) + C, C the reward
  offset (``RunConfig.reward_offset``'s twin). The sign: every estimator estimates ∇η E[r], the gradient of the
  expectation of what it is handed, so handing it f makes its estimate the paper's own, ∇η E[f], bias and variance
  alike; the paper's optimiser minimises f by stepping along −ĝ, as a trainer maximising −f would. Nothing here takes
  a step, so only the estimate matters. With f itself (between 0.64 and 0.89, never 0) the rewards already carry an
  offset of their own, E[f] = 0.76 at η = 0, which a baseline removes and REINFORCE does not; C > 0 adds to it.
- the score function ∇η log p(z) = Σ_i (z_i − σ(η)).

A draw is K samples z_1..z_K; an estimator (``rloo_demo.advantages.ESTIMATORS``, the very functions the trainer
and the meter use, GRPO's group std included) turns their rewards into advantages A_j, and the draw's gradient
estimate is ĝ = (1/K) Σ_j A_j ∇η log p(z_j). The draw is one prompt's group, so the batch-level estimators see one
group: ``batch_mean`` equals ``dr_grpo`` here, and ``reinforce_pp`` equals ``grpo``.

Exactness by enumeration: every estimator is a symmetric function of the K samples (permuting them permutes the
advantages with them, and ĝ sums over them), so ĝ depends only on the multiset of sampled states. There are
C(K+7, 7) multisets of K out of 8 states (6,435 for K = 8, against 8^8 = 16.7M ordered draws), each weighted by its
multinomial probability K!/Π c_s! · Π p(s)^c_s. Summing over them gives E[ĝ], Var[ĝ] (and its fourth central moment,
for the confidence interval of a sampled variance) to rounding. The true gradient d/dη E[r] is the exact sum over
the 8 states Σ_z p(z) r(z) ∇η log p(z); in closed form σ(η)(1 − σ(η)) Σ_i (1 − 2 p0_i), whatever C is.

What it shows: RLOO and REINFORCE are unbiased, Dr. GRPO's mean is exactly (K−1)/K of RLOO's (its mean includes the
sample itself), GRPO's division by the group std biases it; and under an offset C REINFORCE's variance grows with
C² while every baselined estimator's stays put. ``python -m rloo_demo toy --eta 0 --k 4 --offset 1`` prints the
table; the Rollouts tab has the same numbers as a panel. Pure Python, no torch: it runs anywhere.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Sequence

from rloo_demo.advantages import ESTIMATORS, MAX_REWARD_OFFSET, what_if
from rloo_demo.errors import InputError
from rloo_demo.i18n import Message

P0 = (0.6, 0.51, 0.48)  # the cost's targets (Kool et al. 2019)
STATES = tuple(itertools.product((0, 1), repeat=len(P0)))  # the 8 states, (0, 0, 0) .. (1, 1, 1)
ETA_RANGE = (-10.0, 10.0)  # beyond, σ(η) is within 5e-5 of 0 or 1 and every variance is 0 to print precision
K_RANGE = (2, 8)  # K = 1 has no leave-one-out baseline; K = 8 is 6,435 multisets to sum over
COLUMNS = ("mean", "bias", "variance", "variance_vs_rloo")


def sigmoid(eta: float) -> float:
    return 1.0 / (1.0 + math.exp(-eta)) if eta >= 0 else math.exp(eta) / (1.0 + math.exp(eta))


def check_inputs(eta, k, offset) -> tuple[float, int, float]:
    """The toy's inputs as numbers in range, or an ``InputError`` naming the bad one (any client may send any
    value: a bool, NaN, text or a huge K is refused before any work)."""

    def number(name, value, lo, hi):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InputError(Message("value.finite", name=name, value=f"{value!r:.40}"))
        if not lo <= value <= hi:
            raise InputError(Message("value.between", name=name, lo=f"{lo:g}", hi=f"{hi:g}", value=repr(value)))
        return float(value)

    eta = number("eta", eta, *ETA_RANGE)
    k_value = number("K", k, *K_RANGE)
    if not k_value.is_integer():
        raise InputError(Message("value.whole", name="K", value=repr(k)))
    return eta, int(k_value), number("offset", offset, -MAX_REWARD_OFFSET, MAX_REWARD_OFFSET)


def cost(z: Sequence[int]) -> float:
    """Kool et al.'s f(z) = Σ_i (z_i − p0_i)²."""
    return math.fsum((zi - p) ** 2 for zi, p in zip(z, P0, strict=True))


def reward(z: Sequence[int], offset: float = 0.0) -> float:
    """r(z) = f(z) + C: the estimators estimate ∇η E[r], the paper's ∇η E[f] (see the module docstring)."""
    return cost(z) + offset


def score(z: Sequence[int], eta: float) -> float:
    """∇η log p(z) = Σ_i (z_i − σ(η)): the three variables share the logit."""
    p = sigmoid(eta)
    return math.fsum(zi - p for zi in z)


def state_probabilities(eta: float) -> list[float]:
    """p(z) for each of the 8 states, in ``STATES`` order."""
    p = sigmoid(eta)
    return [math.prod(p if zi else 1.0 - p for zi in z) for z in STATES]


def true_gradient(eta: float, offset: float = 0.0) -> float:
    """d/dη E[r], summed exactly over the 8 states: Σ_z p(z) r(z) ∇η log p(z) (the offset adds C·E[∇ log p] = 0)."""
    probs = state_probabilities(eta)
    return math.fsum(q * reward(z, offset) * score(z, eta) for q, z in zip(probs, STATES, strict=True))


def closed_form_gradient(eta: float) -> float:
    """The same in closed form: E[r] = Σ_i [σ (1 − p0_i)² + (1 − σ) p0_i²] + C, so
    d/dη E[r] = σ(1 − σ) Σ_i (1 − 2 p0_i)."""
    p = sigmoid(eta)
    return p * (1.0 - p) * math.fsum(1 - 2 * q for q in P0)


@functools.cache
def multisets(k: int) -> tuple[tuple[tuple[int, ...], float], ...]:
    """Every multiset of k states out of 8, as (the sorted state indices, its multinomial coefficient k!/Π c_s!)."""
    out = []
    for combo in itertools.combinations_with_replacement(range(len(STATES)), k):
        counts = [combo.count(s) for s in set(combo)]
        out.append((combo, math.factorial(k) / math.prod(math.factorial(c) for c in counts)))
    return tuple(out)


def draw_gradients(indices: Sequence[int], eta: float, offset: float = 0.0) -> dict[str, float]:
    """ĝ = (1/K) Σ_j A_j ∇η log p(z_j) of one draw (state indices), for every estimator of ``ESTIMATORS``."""
    k = len(indices)
    rewards = [reward(STATES[i], offset) for i in indices]
    scores = [score(STATES[i], eta) for i in indices]
    return {
        name: math.fsum(a * s for a, s in zip(adv, scores, strict=True)) / k
        for name, adv in what_if(rewards, k).items()
    }


@functools.lru_cache(maxsize=256)
def exact_moments(eta: float, k: int, offset: float = 0.0) -> dict[str, dict[str, float]]:
    """Per estimator, the exact ``mean`` (E[ĝ]), ``variance`` (Var[ĝ]) and ``fourth`` (E[(ĝ − E ĝ)^4]) over every
    draw of k samples, from the multisets (see the module docstring). Cached: the page asks for the same ones again."""
    eta, k, offset = check_inputs(eta, k, offset)
    probs = state_probabilities(eta)
    weights, values = [], {name: [] for name in ESTIMATORS}
    for indices, coefficient in multisets(k):
        weights.append(coefficient * math.prod(probs[i] for i in indices))
        for name, g in draw_gradients(indices, eta, offset).items():
            values[name].append(g)
    out = {}
    for name, gs in values.items():
        mean = math.fsum(w * g for w, g in zip(weights, gs, strict=True))
        central = [g - mean for g in gs]
        out[name] = {
            "mean": mean,
            "variance": math.fsum(w * d * d for w, d in zip(weights, central, strict=True)),
            "fourth": math.fsum(w * d**4 for w, d in zip(weights, central, strict=True)),
        }
    return out


def exact_table(eta, k, offset=0.0) -> dict:
    """What ``python -m rloo_demo toy`` prints and the Rollouts tab's toy panel shows: the inputs, the true gradient
    and one row per estimator with ``mean``, ``bias`` (mean − true gradient), ``variance`` and ``variance_vs_rloo``."""
    eta, k, offset = check_inputs(eta, k, offset)
    moments = exact_moments(eta, k, offset)
    truth = true_gradient(eta, offset)
    rloo = moments["rloo"]["variance"]
    rows = [
        {
            "estimator": name,
            "mean": m["mean"],
            "bias": m["mean"] - truth,
            "variance": m["variance"],
            "variance_vs_rloo": m["variance"] / rloo if rloo > 0 else math.nan,
        }
        for name, m in moments.items()
    ]
    return {"eta": eta, "k": k, "offset": offset, "true_gradient": truth, "rows": rows}


def variance_curves(eta, offset=0.0, ks: Sequence[int] = tuple(range(K_RANGE[0], K_RANGE[1] + 1))) -> dict:
    """Each estimator's exact variance and bias for every K in ``ks``: ``{"k": [...], "variance": {estimator:
    [...]}, "bias": {estimator: [...]}}``, the panel's plot against K."""
    tables = [exact_table(eta, k, offset) for k in ks]
    return {
        "k": list(ks),
        "variance": {name: [t["rows"][e]["variance"] for t in tables] for e, name in enumerate(ESTIMATORS)},
        "bias": {name: [t["rows"][e]["bias"] for t in tables] for e, name in enumerate(ESTIMATORS)},
    }


def variance_standard_error(moments: dict[str, float], replicates: int) -> float:
    """The standard deviation of the sample variance (divisor R − 1) of ``replicates`` independent draws, from the
    exact moments: sqrt((μ4 − σ⁴ (R − 3)/(R − 1)) / R). What a Monte-Carlo measurement of the variance (the
    gradient-variance meter's) may miss the exact figure by, one standard error."""
    r = replicates
    return math.sqrt(max(moments["fourth"] - moments["variance"] ** 2 * (r - 3) / (r - 1), 0.0) / r)


def sample_draws(eta: float, k: int, replicates: int, seed: int = 0) -> list[list[int]]:
    """``replicates`` draws of k states (indices into ``STATES``), each variable Bernoulli(σ(η)): the toy's
    replicate batches, for the meter to measure."""
    rng = random.Random(seed)
    p = sigmoid(eta)
    # a state's index in STATES is its bits read as a binary number (itertools.product's order)
    return [
        [sum((rng.random() < p) << (len(P0) - 1 - i) for i in range(len(P0))) for _ in range(k)]
        for _ in range(replicates)
    ]


def _g(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    return f"{value if abs(value) >= 5e-7 else 0.0:+.6f}"  # no "-0.000000" for a bias that is 0 up to rounding


def markdown_table(result: dict) -> str:
    """The CLI's table: the settings and the true gradient on their own lines, then one row per estimator."""
    lines = [
        f"Bernoulli toy (Kool et al. 2019): eta = {result['eta']:g} (sigma = {sigmoid(result['eta']):.4f}), "
        f"K = {result['k']}, offset = {result['offset']:g}; reward = sum_i (z_i - p0_i)^2 + offset, "
        f"p0 = {P0}; exact over every draw of K samples.",
        "",
        f"true gradient d/deta E[reward] = {result['true_gradient']:+.6f}",
        "",
        "| estimator | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for row in result["rows"]:
        ratio = f"{row['variance_vs_rloo']:.4f}" if math.isfinite(row["variance_vs_rloo"]) else "–"
        lines.append(
            f"| {row['estimator']} | {_g(row['mean'])} | {_g(row['bias'])} | {row['variance']:.6g} | {ratio} |"
        )
    return "\n".join(lines)
