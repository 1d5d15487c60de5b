"""What every figure shares: the template, the palette, smoothing, and the small builders of axes, lines and notes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rloo_demo.advantages import ESTIMATORS

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


NOTE = "rloo-note"  # the name of an empty figure's note: broken into lines once it is translated (``wrapped_notes``)
# What an empty plot says when it has no record at all: a run that has not logged its first step (its KL is not
# "off", whatever beta is), or, on a page with no run, that none has started (``no_run``)
NO_STEPS = "No step logged yet: the first point appears after the first optimisation step."
NO_RUN = "No run yet: press Start, and this plot fills in as the run trains."
NOTE_CHARS = 34  # a note's longest line: at 13 px, about 260 px (a phone's plot is about 330 px wide)


def _note(fig: Figure, text: str) -> Figure:
    """Mark a figure as empty on purpose, so a blank plot reads as 'nothing to show' rather than 'broken'. The
    text stays one line here (the translations look it up whole); ``wrapped_notes`` breaks it for the page."""
    _annotate(fig, text=text, name=NOTE, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 13})
    fig["layout"]["xaxis"]["showticklabels"] = False
    fig["layout"]["yaxis"]["showticklabels"] = False
    return fig


def no_run(fig: Figure) -> Figure:
    """``fig`` as a page with no run shows it: its axes and title, no data, and a note that no run has started
    (never one about a setting, or about "this run")."""
    fig["data"] = []
    fig["layout"]["annotations"] = [n for n in fig["layout"].get("annotations") or [] if n.get("name") != NOTE]
    fig["layout"].pop("shapes", None)
    return _note(fig, NO_RUN)


def wrap_line(text: str, width: int = NOTE_CHARS) -> str:
    """``text`` in lines of at most ``width`` characters (a longer word alone on its line), broken at spaces with
    plotly's ``<br>``: plotly never wraps an annotation, and a note on one line ran past a phone's plot."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "<br>".join(lines)


def wrapped_notes(fig: Figure) -> Figure:
    """``fig`` with its notes (``_note``) broken into lines, as a shallow copy: ``fig``, which a cache may hold in
    another language, is left as it is."""
    notes = fig.get("layout", {}).get("annotations") or []

    def wrap(note):
        ours = isinstance(note, dict) and note.get("name") == NOTE and isinstance(note.get("text"), str)
        return {**note, "text": wrap_line(note["text"])} if ours else note

    if not any(wrap(n) is not n for n in notes):
        return fig
    return {**fig, "layout": {**fig["layout"], "annotations": [wrap(n) for n in notes]}}


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


def _number(v):
    """A finite number as is, anything else as None: NaN is not JSON, and plotly.js draws None as a gap."""
    return v if _finite(v) else None


def _fmt(v, spec: str) -> str:
    return format(v, spec) if _finite(v) else "?"


def _shorten(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
