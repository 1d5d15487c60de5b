"""Long runs drawn with a bounded number of points: a trace of more than ``MAX_POINTS`` is cut to every k-th point
(the last one always kept), so a page's figures cost the same to send at step 5,000 as at step 400.

At 400 steps the Train tab's ten figures came to 285 kB; every page receives them at every new step, and a client
that asks for every plot at every tick gets them each time. 400 points is more than a plot's width on a phone and
about half of it on a laptop, so the curves look the same; the figures' own smoothing runs on every point before.
"""

from __future__ import annotations

MAX_POINTS = 400


def thinned(fig: dict, max_points: int = MAX_POINTS) -> dict:
    """``fig`` with each of its traces of more than ``max_points`` points thinned, as a shallow copy (``fig``, which
    a cache may hold, is left as it is). Only ``x``/``y`` (and ``customdata``/``text`` lists of the same length)."""
    data = fig.get("data") or []
    if not any(_length(t) > max_points for t in data):
        return fig
    return {**fig, "data": [_thin(t, max_points) for t in data]}


def _length(trace) -> int:
    x = trace.get("x") if isinstance(trace, dict) else None
    return len(x) if isinstance(x, list | tuple) else 0


def _thin(trace: dict, max_points: int) -> dict:
    n = _length(trace)
    if n <= max_points:
        return trace
    stride = -(-n // max_points)  # ceil: at most max_points points
    keep = list(range(0, n, stride))
    if keep[-1] != n - 1:
        keep[-1] = n - 1  # the newest point is the one a learner looks at
    out = dict(trace)
    for key in ("x", "y", "customdata", "text"):
        values = trace.get(key)
        if isinstance(values, list | tuple) and len(values) == n:
            out[key] = [values[i] for i in keep]
    return out
