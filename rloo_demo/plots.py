"""Plotly figure builders for the live training view, the rollout explorer and the evaluation.

Every function is pure: it takes the plain records the trainer logs (one dict per optimisation step), a captured
rollout group, or an evaluation result, and returns a fresh plotly figure as a plain JSON-ready dict,
``{"data": [trace, ...], "layout": {...}}``, ready for ``json.dumps`` and plotly.js. Nothing here imports gradio or
touches files, so the builders can be tested and reused without a server.

The dicts are written out by hand instead of through ``plotly.graph_objects``: its property validation costs about
20 ms per figure, and the live page rebuilds six figures on every training step in the training process, where that
time holds the GIL and slows training several times over. Nothing here imports plotly at all; the tests check every
builder's output against plotly's schema with ``go.Figure(fig)`` instead. Only plain Python numbers, strings, lists
and dicts go in, so ``json.dumps`` needs no encoder.

Metric keys can be missing (TRL does not log ``kl`` when beta = 0); a builder then returns an empty figure with an
annotation that says why, instead of raising, because a live page redraws on every step and must never break.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rloo_demo.advantages import ESTIMATORS
from rloo_demo.judges import DISTINCT_2_MIN, REPETITION_MAX

ESTIMATOR_ORDER = tuple(ESTIMATORS)

Figure = dict[str, Any]  # {"data": [trace dicts], "layout": {...}}, as plotly.js and go.Figure(...) take it

# Mid-luminance, colourblind-friendly colours: legible on a white page and on a near-black one alike.
PALETTE = ["#4C9BE8", "#E8A33D", "#3DBE8B", "#D9534F", "#9B7BD8", "#5BC0C8", "#C97FB0"]
POSITIVE, NEGATIVE, NEUTRAL = "#3DBE8B", "#D9534F", "#9A9A9A"
GRID = "rgba(128,128,128,0.25)"
AXIS_TEXT = "#888"
UIREVISION = "rloo-demo"  # constant, so a zoom or pan survives the redraw on each new step
ZERO_ADVANTAGE = 1e-6  # up to this an advantage pushes the policy neither way (float noise), as in the table
TRANSPARENT = "rgba(0,0,0,0)"


def _template() -> dict:
    """The parts of plotly.py's default "plotly" template that apply to these figures (2-D axes; scatter, bar,
    histogram and heatmap traces; the heatmap brings its own colour scale). ``go.Figure`` embedded the whole template
    in every figure; plotly.js has no default template of its own, so without this the axes would lose their wider
    zero line, automargin and title standoff, the hover label its left alignment and the bars their thin outline. The
    tests check it still matches plotly.py's template.
    """
    pattern = {"fillmode": "overlay", "size": 10, "solidity": 0.2}
    axis = {
        "automargin": True,
        "gridcolor": "white",
        "linecolor": "white",
        "ticks": "",
        "zerolinecolor": "white",
        "zerolinewidth": 2,
    }
    return {
        "data": {
            "scatter": [{"fillpattern": dict(pattern), "type": "scatter"}],
            "bar": [
                {
                    "error_x": {"color": "#2a3f5f"},
                    "error_y": {"color": "#2a3f5f"},
                    "marker": {"line": {"color": "#E5ECF6", "width": 0.5}, "pattern": dict(pattern)},
                    "type": "bar",
                }
            ],
            "histogram": [{"marker": {"pattern": dict(pattern)}, "type": "histogram"}],
            "heatmap": [{"colorbar": {"outlinewidth": 0, "ticks": ""}, "type": "heatmap"}],
        },
        "layout": {
            "annotationdefaults": {"arrowcolor": "#2a3f5f", "arrowhead": 0, "arrowwidth": 1},
            "autotypenumbers": "strict",
            "colorway": ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A"]
            + ["#19d3f3", "#FF6692", "#B6E880", "#FF97FF", "#FECB52"],
            "font": {"color": "#2a3f5f"},
            "hoverlabel": {"align": "left"},
            "hovermode": "closest",
            "paper_bgcolor": "white",
            "plot_bgcolor": "#E5ECF6",
            "shapedefaults": {"line": {"color": "#2a3f5f"}},
            "title": {"x": 0.05},
            "xaxis": dict(axis, title={"standoff": 15}),
            "yaxis": dict(axis, title={"standoff": 15}),
        },
    }


# Axis labels with units for the metrics TRL logs; used by the overlay, which can plot any of them.
LABELS = {
    "reward": "reward (score in [-1, 1] per completion)",
    "reward_std": "reward std within a group",
    "kl": "KL to reference (nats/token)",
    "entropy": "entropy (nats/token)",
    "loss": "loss (≈ 0 by construction, see note)",
    "grad_norm": "gradient norm before clipping at 1",
    "completions/mean_length": "completion length (tokens)",
    "frac_reward_zero_std": "fraction of groups (0..1)",
    "learning_rate": "learning rate",
    "step_time": "time per step (s)",
    "frac_raw_score_zero_std": "fraction of groups (0..1)",
    "kl_k1": "KL k1 (nats per completion)",
    "kl_k2": "KL k2 (nats per completion)",
    "kl_k3": "KL k3 (nats per completion)",
    "judges/distinct_2": "distinct-2 (0..1)",
    "judges/repetition": "repeated bigrams (0..1)",
}
LABELS.update({f"variance/{e}": f"gradient variance, {e}" for e in ESTIMATOR_ORDER})
LABELS.update({f"cosine/{e}": f"cosine to reference, {e}" for e in ESTIMATOR_ORDER})

# With one optimisation step per batch the surrogate loss is zero up to rounding: each group's advantages sum to zero
# and the importance ratio is 1. Its plot is float noise around 1e-8; the gradient it produces is not zero.
LOSS_NOTE = (
    "RLOO's loss is 0 by construction (advantages sum to zero in each group, ratio = 1); "
    "its gradient is not: this plot shows the gradient's norm."
)


def smooth(values: Sequence[float | None], weight: float) -> list[float | None]:
    """TensorBoard's debiased exponential moving average; ``weight`` 0 returns the values unchanged.

    Debiasing divides by ``1 - weight**n`` so the first points are not dragged towards zero by the empty start.
    That is pandas' ``ewm(alpha=1 - weight, adjust=True)``: the mean of the points so far weighted by
    ``weight**age``. None and NaN pass through at their position and do not disturb the average (``ignore_na``: a
    gap is not an age step), so the length never changes. ``weight`` is clamped to [0, 0.999]: 1 would freeze the
    curve at its first value. (pandas is imported on the first call; gradio has imported it already in the app.)
    """
    weight = min(max(float(weight), 0.0), 0.999)
    if not len(values):
        return []
    import numpy as np
    import pandas as pd

    raw = np.array(values, dtype=np.float64)  # None becomes NaN
    ok = np.isfinite(raw)
    averaged = (
        raw
        if weight == 0.0
        else pd.Series(np.where(ok, raw, np.nan)).ewm(alpha=1.0 - weight, adjust=True, ignore_na=True).mean().to_numpy()
    )
    out = averaged.tolist()
    for i in np.flatnonzero(~ok).tolist():  # gaps keep what they were (None, NaN, inf)
        out[i] = values[i]
    return out


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _series(records: Sequence[dict], *keys: str) -> tuple[list, ...]:
    """Steps and values of the records where every key holds a finite number; the step falls back to position."""
    rows = [(r.get("step", i), r) for i, r in enumerate(records) if all(_finite(r.get(k)) for k in keys)]
    return ([step for step, _ in rows], *([float(r[k]) for _, r in rows] for k in keys))


def _figure(title: str, x_title: str, y_title: str, height: int = 220, legend: bool = False, top: int = 40) -> Figure:
    def axis(text: str) -> dict:
        return {
            "gridcolor": GRID,
            "zerolinecolor": GRID,
            "linecolor": GRID,
            "color": AXIS_TEXT,
            "title": {"text": text, "font": {"size": 12}},
            "exponentformat": "e",  # 4e-08, not plotly's SI "40n", which reads as forty
        }

    layout = {
        "template": _template(),
        "title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 14}},
        "height": height,
        "margin": {"l": 50, "r": 10, "t": top, "b": 40},
        "paper_bgcolor": TRANSPARENT,
        "plot_bgcolor": TRANSPARENT,
        "font": {"color": AXIS_TEXT, "size": 12},
        "colorway": list(PALETTE),
        "showlegend": legend,
        "legend": {
            "orientation": "h",
            "x": 1,
            "xanchor": "right",
            "y": 1.0,
            "yanchor": "bottom",
            "bgcolor": TRANSPARENT,
        },
        "hovermode": "x unified",
        "uirevision": UIREVISION,
        "xaxis": axis(x_title),
        "yaxis": axis(y_title),
    }
    return {"data": [], "layout": layout}


def _annotate(fig: Figure, **annotation) -> None:
    fig["layout"].setdefault("annotations", []).append(annotation)


def _note(fig: Figure, text: str) -> Figure:
    """Mark a figure as empty on purpose, so a blank plot reads as 'nothing to show' rather than 'broken'."""
    _annotate(fig, text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 13})
    fig["layout"]["xaxis"]["showticklabels"] = False
    fig["layout"]["yaxis"]["showticklabels"] = False
    return fig


def _line(fig: Figure, x, y, name: str, color: str, smoothing: float, dash: str = "solid", legend=True) -> None:
    """A metric line; with smoothing the raw points stay visible but faint, so noise is not hidden."""
    if smoothing > 0:
        fig["data"].append(
            {
                "type": "scatter",
                "x": x,
                "y": y,
                "mode": "lines",
                "line": {"color": color, "width": 1, "dash": dash},
                "opacity": 0.3,
                "name": f"{name} (raw)",
                "legendgroup": name,
                "showlegend": False,
                "hoverinfo": "skip",
            }
        )
        y = smooth(y, smoothing)
    fig["data"].append(
        {
            "type": "scatter",
            "x": x,
            "y": y,
            "mode": "lines",
            "line": {"color": color, "width": 2, "dash": dash},
            "name": name,
            "legendgroup": name,
            "showlegend": legend,
        }
    )
    if x:
        fig["layout"]["xaxis"]["dtick"] = step_dtick(max(x))


def step_dtick(last_step: float) -> int:
    """A whole-number tick spacing (1, 2, 5, 10, 20, ...) giving at most about 8 ticks: steps are integers."""
    raw = max(1.0, last_step / 8)
    magnitude = 10 ** math.floor(math.log10(raw))
    return int(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw))


def reward_names(records: Sequence[dict]) -> list[str]:
    """Reward function names, from the ``rewards/<name>/mean`` keys, in first-seen order."""
    names: dict[str, None] = {}
    for r in records:
        for key in r:
            if key.startswith("rewards/") and key.endswith("/mean"):
                names.setdefault(key[len("rewards/") : -len("/mean")], None)
    return list(names)


def reward_figure(records: Sequence[dict], smoothing: float = 0.0) -> Figure:
    """Total reward per step with a ±1 std band (spread within groups), plus each reward function's mean."""
    fig = _figure("Reward", "optimisation step", LABELS["reward"], height=320, legend=True, top=60)
    steps, mean = _series(records, "reward")
    if not steps:
        return _note(fig, "No reward logged yet: the first point appears after the first optimisation step.")
    band_steps, band_mean, band_std = _series(records, "reward", "reward_std")
    if band_steps:
        # The band follows the solid line, so it is smoothed with the same weight as the mean.
        centre, spread = smooth(band_mean, smoothing), smooth(band_std, smoothing)
        upper = [c + s for c, s in zip(centre, spread, strict=True)]
        lower = [c - s for c, s in zip(centre, spread, strict=True)]
        fig["data"].append(
            {
                "type": "scatter",
                "x": band_steps + band_steps[::-1],
                "y": upper + lower[::-1],
                "fill": "toself",
                "mode": "lines",
                "line": {"width": 0},
                "fillcolor": "rgba(76,155,232,0.18)",
                "name": "±1 std",
                "hoverinfo": "skip",
            }
        )
    _line(fig, steps, mean, "total reward", PALETTE[0], smoothing)
    for i, name in enumerate(reward_names(records)):
        x, y = _series(records, f"rewards/{name}/mean")
        # Dashed and unweighted: the total is the weighted sum of these, so they need not add up to it visually.
        _line(fig, x, y, name, PALETTE[1 + i % (len(PALETTE) - 1)], smoothing, dash="dot")
    return fig


def _metric_figure(records, key: str, title: str, smoothing: float, missing: str, y_range=None, height=220):
    fig = _figure(title, "optimisation step", LABELS[key], height=height)
    steps, values = _series(records, key)
    if not steps:
        return _note(fig, missing)
    _line(fig, steps, values, title, PALETTE[0], smoothing, legend=False)
    if y_range:
        fig["layout"]["yaxis"]["range"] = list(y_range)
    return fig


def kl_figure(records: Sequence[dict], smoothing: float = 0.0) -> Figure:
    """KL divergence of the policy from the frozen reference model, in nats per token."""
    missing = "No KL logged: with beta = 0 there is no KL penalty, so TRL does not compute it."
    return _metric_figure(records, "kl", "KL to reference", smoothing, missing, height=260)


def secondary_figures(records: Sequence[dict], smoothing: float = 0.0) -> dict[str, Figure]:
    """Small diagnostics: the gradient norm (in place of the loss, which is zero by construction), entropy,
    completion length and the share of groups with no learning signal."""
    specs = {
        "grad_norm": ("grad_norm", "Gradient norm", None),
        "entropy": ("entropy", "Entropy", None),
        "completion_length": ("completions/mean_length", "Completion length", None),
    }
    figs = {
        name: _metric_figure(records, key, title, smoothing, f"'{key}' was not logged in this run.", y_range)
        for name, (key, title, y_range) in specs.items()
    }
    if _series(records, "grad_norm")[0]:
        _annotate(
            figs["grad_norm"],
            text=LOSS_NOTE,
            x=0,
            y=-0.32,
            xref="paper",
            yref="paper",
            showarrow=False,
            xanchor="left",
            font={"size": 10},
        )
        figs["grad_norm"]["layout"]["margin"]["b"] = 60
    figs["frac_reward_zero_std"] = zero_signal_figure(records, smoothing)
    return figs


def zero_signal_figure(records: Sequence[dict], smoothing: float = 0.0) -> Figure:
    """Groups with no learning signal: TRL's ``frac_reward_zero_std`` (on KL-shaped rewards) beside the same test on
    the raw scores. A group whose K scores are all equal teaches nothing about the task; with beta > 0 the KL term
    makes its shaped rewards differ, so TRL's number under-reports such groups."""
    fig = _figure("Groups with no signal", "optimisation step", LABELS["frac_reward_zero_std"], legend=True, top=50)
    lines = (
        ("frac_raw_score_zero_std", "raw scores all equal", PALETTE[1]),
        ("frac_reward_zero_std", "TRL: shaped rewards all equal", PALETTE[0]),
    )
    for key, name, colour in lines:
        x, y = _series(records, key)
        if x:
            _line(fig, x, y, name, colour, smoothing)
    if not fig["data"]:
        return _note(fig, "'frac_reward_zero_std' was not logged in this run.")
    fig["layout"]["yaxis"]["range"] = [-0.02, 1.02]
    return fig


def kl_estimators_figure(records: Sequence[dict], smoothing: float = 0.0) -> Figure:
    """The three KL estimators per completion (batch means): k1 shapes RLOO's reward; k2 and k3 are never negative."""
    fig = _figure(
        "KL per completion: k1 (shapes the reward), k2, k3",
        "optimisation step",
        "nats per completion",
        legend=True,
        top=50,
    )
    for i, (key, name) in enumerate((("kl_k1", "k1 (TRL's, in the reward)"), ("kl_k2", "k2"), ("kl_k3", "k3"))):
        x, y = _series(records, key)
        if x:
            _line(fig, x, y, name, PALETTE[i], smoothing, dash="solid" if i == 0 else "dot")
    if not fig["data"]:
        return _note(fig, "No KL estimators: with beta = 0 there is no reference model to compare with.")
    return fig


def judges_figure(records: Sequence[dict], smoothing: float = 0.0) -> Figure:
    """Judges of the step's completions, with the thresholds of the collapse warning (dashed)."""
    fig = _figure("Judges of the text", "optimisation step", "share (0..1)", legend=True, top=50)
    specs = (
        ("judges/distinct_2", "distinct-2", PALETTE[2], DISTINCT_2_MIN),
        ("judges/repetition", "repetition", PALETTE[3], REPETITION_MAX),
    )
    for key, name, colour, threshold in specs:
        x, y = _series(records, key)
        if x:
            _line(fig, x, y, name, colour, smoothing)
            fig["layout"].setdefault("shapes", []).append(
                {
                    "type": "line",
                    "x0": 0,
                    "x1": 1,
                    "xref": "paper",
                    "y0": threshold,
                    "y1": threshold,
                    "yref": "y",
                    "line": {"color": colour, "dash": "dash", "width": 1},
                }
            )
    if not fig["data"]:
        return _note(fig, "No judges logged in this run.")
    fig["layout"]["yaxis"]["range"] = [-0.02, 1.02]
    return fig


METER_OFF = "The gradient-variance meter is off: set 'variance meter every N steps' before Start."


def variance_figure(records: Sequence[dict]) -> Figure:
    """The meter's trace of the gradient covariance per estimator, on a log scale (one point per measured step)."""
    fig = _figure(
        "Gradient variance (log scale)", "optimisation step", "trace of Cov(g_hat)", height=300, legend=True, top=60
    )
    for i, name in enumerate(ESTIMATOR_ORDER):
        x, y = _series(records, f"variance/{name}")
        pairs = [(a, b) for a, b in zip(x, y, strict=True) if b > 0]  # a log axis cannot show 0
        if pairs:
            _meter_line(fig, pairs, name, PALETTE[i % len(PALETTE)])
    if not fig["data"]:
        return _note(fig, METER_OFF)
    fig["layout"]["yaxis"]["type"] = "log"
    return fig


def cosine_figure(records: Sequence[dict]) -> Figure:
    """The meter's cosine of each estimator's gradient to the held-out 4x reference (1: the same direction)."""
    fig = _figure(
        "Cosine to a 4× reference gradient", "optimisation step", "cosine similarity", height=300, legend=True, top=60
    )
    for i, name in enumerate(ESTIMATOR_ORDER):
        x, y = _series(records, f"cosine/{name}")
        if x:
            _meter_line(fig, list(zip(x, y, strict=True)), name, PALETTE[i % len(PALETTE)])
    if not fig["data"]:
        return _note(fig, METER_OFF)
    fig["layout"]["yaxis"]["range"] = [-1.02, 1.02]
    return fig


def _meter_line(fig: Figure, pairs: list, name: str, color: str) -> None:
    """Lines with markers: the meter measures every N steps, so its points are sparse."""
    fig["data"].append(
        {
            "type": "scatter",
            "x": [a for a, _ in pairs],
            "y": [b for _, b in pairs],
            "mode": "lines+markers",
            "line": {"color": color, "width": 2, "dash": "solid" if name == "rloo" else "dot"},
            "marker": {"size": 6},
            "name": name,
        }
    )
    fig["layout"]["xaxis"]["dtick"] = step_dtick(max(a for a, _ in pairs))


def _number(v):
    """A finite number as is, anything else as None: NaN is not JSON, and plotly.js draws None as a gap."""
    return v if _finite(v) else None


def _fmt(v, spec: str) -> str:
    return format(v, spec) if _finite(v) else "?"


def _shorten(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def group_figure(group: dict) -> Figure:
    """One prompt's K completions: shaped reward bars against each one's leave-one-out baseline.

    A bar above its baseline marker beat the mean of its siblings; bar colour is the sign of the advantage that
    entered the loss (green pushed up, red pushed down, grey left alone).
    """
    title = f"“{_shorten(group.get('prompt', ''), 40)}” (step {group.get('step', '?')})"
    fig = _figure(title, "completion", "shaped reward (score − β·KL)", legend=True)
    completions = group.get("completions") or []
    if not completions:
        return _note(fig, "No completions captured for this group.")
    labels = [f"#{i + 1}" for i in range(len(completions))]
    advantages = [c.get("advantage") for c in completions]
    colours = [
        NEUTRAL if not _finite(a) or abs(a) <= ZERO_ADVANTAGE else POSITIVE if a > 0 else NEGATIVE for a in advantages
    ]
    hover = [
        f"{_shorten(c.get('text', ''), 80)}<br>advantage {_fmt(c.get('advantage'), '+.3f')}"
        f" · KL {_fmt(c.get('kl'), '.3f')} nats (whole completion) · {c.get('num_tokens', '?')} tokens"
        for c in completions
    ]
    fig["data"].append(
        {
            "type": "bar",
            "x": labels,
            "y": [_number(c.get("shaped_reward")) for c in completions],
            "marker": {"color": colours},
            "name": "shaped reward",
            "hovertext": hover,
            "hoverinfo": "text+y",
        }
    )
    fig["data"].append(
        {
            "type": "scatter",
            "x": list(labels),
            "y": [_number(c.get("baseline")) for c in completions],
            "mode": "markers",
            "name": "leave-one-out baseline",
            "marker": {"symbol": "line-ew-open", "size": 28, "line": {"width": 3, "color": PALETTE[4]}},
        }
    )
    fig["layout"].update(hovermode="closest", bargap=0.35)
    return fig


def overlay_figure(runs: dict[str, Sequence[dict]], metric: str, smoothing: float = 0.0) -> Figure:
    """One line per run for the same metric, to compare runs (e.g. different beta or K) on one axis."""
    fig = _figure(
        f"{metric} across runs", "optimisation step", LABELS.get(metric, metric), height=320, legend=True, top=60
    )
    plotted = 0
    for i, (run, records) in enumerate(runs.items()):
        steps, values = _series(records, metric)
        if steps:
            _line(fig, steps, values, run, PALETTE[i % len(PALETTE)], smoothing)
            plotted += 1
    if not plotted:
        return _note(fig, f"No run logged '{metric}'.")
    if metric == "loss":
        _annotate(
            fig,
            text=LOSS_NOTE.split(";")[0] + ".",
            x=0,
            y=1.0,
            xref="paper",
            yref="paper",
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font={"size": 10},
        )
    return fig


def eval_histogram(result: dict) -> Figure:
    """Base vs trained reward distributions on the same prompts, with each mean and the difference's 95% CI."""
    base = [v for v in result.get("base_rewards", []) if _finite(v)]
    trained = [v for v in result.get("trained_rewards", []) if _finite(v)]
    means = {}
    for label, values, key in (("base", base, "base_mean_reward"), ("trained", trained, "trained_mean_reward")):
        mean = result.get(key)
        means[label] = mean if _finite(mean) else (sum(values) / len(values) if values else None)
    title = "Reward: base vs trained"
    if means["base"] is not None and means["trained"] is not None:
        title += f" — difference {means['trained'] - means['base']:+.3f}"
        ci = result.get("difference_ci95")
        if ci and len(ci) == 2 and all(_finite(v) for v in ci):
            title += f" (95% CI [{ci[0]:+.3f}, {ci[1]:+.3f}])"
    fig = _figure(title, "reward per completion (score)", "completions (count)", height=320, legend=True, top=60)
    # Shared bins, otherwise the two overlaid histograms pick different edges and cannot be compared bar by bar.
    pooled = base + trained
    lo, hi = (min(pooled), max(pooled)) if pooled else (-1.0, 1.0)
    bins = {"start": lo, "end": hi + 1e-9, "size": (hi - lo) / 20 if hi > lo else 0.1}
    for label, values, colour in (("base", base, PALETTE[1]), ("trained", trained, PALETTE[0])):
        fig["data"].append(
            {
                "type": "histogram",
                "x": values,
                "name": label,
                "marker": {"color": colour},
                "opacity": 0.6,
                "xbins": dict(bins),
            }
        )
        mean = means[label]
        if mean is not None:
            # What go.Figure.add_vline made: a full-height line at the mean, labelled at its top right.
            fig["layout"].setdefault("shapes", []).append(
                {
                    "type": "line",
                    "x0": mean,
                    "x1": mean,
                    "xref": "x",
                    "y0": 0,
                    "y1": 1,
                    "yref": "y domain",
                    "line": {"color": colour, "dash": "dash", "width": 2},
                }
            )
            _annotate(
                fig,
                text=f"{label} mean {mean:+.3f}",
                x=mean,
                xref="x",
                xanchor="left",
                y=1,
                yref="y domain",
                yanchor="top",
                showarrow=False,
                font={"color": colour},
            )
    fig["layout"].update(barmode="overlay", hovermode="closest")
    if not pooled:
        _note(fig, "No evaluation rewards to show.")
    return fig


def kl_heatmap(groups: Sequence[dict]) -> Figure:
    """Where the KL of a step lives: per-token k1 = log π − log π_ref, one row per completion (``P1 #2``: prompt 1,
    completion 2), one column per token position. Diverging around 0: orange where the policy likes a token more
    than the reference, blue where it likes it less; blank past a completion's end. Hover shows the token."""
    from rloo_demo.tokens import kl_matrix

    labels, rows = kl_matrix(groups, "k1")
    height = min(640, 120 + 14 * len(rows))
    fig = _figure("Per-token KL over the batch (k1)", "token position", "completion", height=max(height, 220))
    if not rows or all(v is None for row in rows for v in row):
        return _note(fig, "No per-token KL: β = 0, or the run did not record tokens.")
    pieces = []
    for g in groups:
        for c in g.get("completions") or []:
            texts = c.get("token_texts")
            if isinstance(texts, list) and isinstance(c.get("token_logp"), list) and len(texts) == len(c["token_logp"]):
                pieces.append([_hover_text(t) for t in texts])
    width = len(rows[0])
    pieces = [p + [""] * (width - len(p)) for p in pieces]
    zmax = max(abs(v) for row in rows for v in row if v is not None) or 1.0
    fig["data"].append(
        {
            "type": "heatmap",
            "z": [[_number(v) for v in row] for row in rows],
            "x": list(range(1, width + 1)),
            "y": labels,
            "customdata": pieces,
            "colorscale": [[0.0, PALETTE[0]], [0.5, "rgba(128,128,128,0.08)"], [1.0, PALETTE[1]]],
            "zmin": -zmax,
            "zmax": zmax,
            "zmid": 0,
            "hoverongaps": False,
            "hovertemplate": "%{y}, token %{x}: %{customdata}<br>k1 %{z:+.3f} nats<extra></extra>",
            "colorbar": {"title": {"text": "k1"}, "thickness": 12},
        }
    )
    fig["layout"]["yaxis"].update(autorange="reversed", showgrid=False)
    if len(rows) <= 24:
        fig["layout"]["yaxis"]["dtick"] = 1  # every row labelled while the labels fit
    fig["layout"]["xaxis"].update(showgrid=False, dtick=step_dtick(width))
    fig["layout"].update(hovermode="closest", margin={"l": 60, "r": 10, "t": 40, "b": 40})
    return fig


def _hover_text(piece) -> str:
    """A token for a plotly hover label: plotly.js reads a few tags (<b>, <br>, ...) in it, so < > & are escaped."""
    text = str(piece).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace(" ", "␣").replace("\n", "↵") or "∅"
