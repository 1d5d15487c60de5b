"""The bootstrap interval and the plots' smoothing, vectorised (numpy resampling, pandas ``ewm``) with the results of
the loops they replaced. ``python -m pytest tests/eval/test_stats.py``"""

import math
import random

import numpy as np
import pytest

from rloo_demo.eval.evaluation import bootstrap_interval
from rloo_demo.ui.plots import smooth


def loop_bootstrap(diffs, n_resamples=2000, seed=0):
    """The same resampling one draw at a time: numpy's generator, one row of n indices per resample."""
    rng = np.random.default_rng(seed)
    n = len(diffs)
    means = []
    for _ in range(n_resamples):
        row = rng.integers(0, n, size=n)
        means.append(sum(diffs[i] for i in row) / n)
    means.sort()
    return means[int(0.025 * n_resamples)], means[int(0.975 * n_resamples) - 1]


def loop_smooth(values, weight):
    """TensorBoard's debiased EMA as the hand-written loop had it."""
    weight = min(max(float(weight), 0.0), 0.999)
    out, last, n = [], 0.0, 0
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        n += 1
        out.append(last / (1 - weight**n))
    return out


def test_bootstrap_is_the_loop_at_once_and_pinned():
    diffs = [0.3, -0.1, 0.25, 0.5, 0.05, -0.2, 0.4, 0.1]
    lo, hi = bootstrap_interval(diffs, seed=3)
    assert (lo, hi) == pytest.approx(loop_bootstrap(diffs, seed=3), abs=1e-12)
    assert (lo, hi) == pytest.approx((0.0, 0.3125), abs=1e-9)  # pinned: a change of method must show here
    assert lo < sum(diffs) / len(diffs) < hi
    assert bootstrap_interval(diffs, seed=3) == (lo, hi) and isinstance(lo, float)
    assert bootstrap_interval([0.2] * 5) == (pytest.approx(0.2), pytest.approx(0.2))


def test_bootstrap_covers_the_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    hits = 0
    for trial in range(200):
        sample = rng.normal(0.3, 1.0, size=40).tolist()
        lo, hi = bootstrap_interval(sample, n_resamples=500, seed=trial)
        hits += lo <= 0.3 <= hi
    assert 0.88 <= hits / 200 <= 0.99


def test_smooth_matches_the_loop_with_gaps_and_extreme_weights():
    rng = random.Random(0)
    for _ in range(200):
        values = [
            rng.choice([None, float("nan"), float("inf"), rng.uniform(-5, 5), rng.uniform(-5, 5), rng.uniform(-5, 5)])
            for _ in range(rng.randrange(0, 120))
        ]
        weight = rng.choice([0, 0.3, 0.6, 0.9, 0.999, 1.0, 1.5, -1])
        expected, got = loop_smooth(values, weight), smooth(values, weight)
        assert len(got) == len(expected)
        for e, g in zip(expected, got, strict=True):
            if e is None or (isinstance(e, float) and not math.isfinite(e)):
                assert g is e or (math.isnan(e) and math.isnan(g))
            else:
                assert g == pytest.approx(e, rel=1e-9, abs=1e-12)


def test_smooth_pinned_values():
    assert smooth([0.0, 1.0, 0.0, 1.0], 0.5) == pytest.approx([0.0, 2 / 3, 2 / 7, 2 / 3])
    assert smooth([2.0, None, 4.0], 0.5)[1] is None
    assert smooth([2.0, None, 4.0], 0.5)[2] == pytest.approx((0.5 * 2.0 + 4.0) / 1.5)
