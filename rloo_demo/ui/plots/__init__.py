"""Plotly figure builders for the live training view, the rollout explorer and the evaluation, one module per tab.

Every function is pure: it takes the plain records the trainer logs (one dict per optimisation step), a captured
rollout group, or an evaluation result, and returns a fresh plotly figure as a plain JSON-ready dict,
``{"data": [trace, ...], "layout": {...}}``, ready for ``json.dumps`` and plotly.js. Nothing here imports gradio or
touches files, so the builders can be tested and reused without a server.

The dicts are written out by hand instead of through ``plotly.graph_objects``: its property validation costs time
on every figure, and the live page rebuilds six figures on every training step in the training process, where that
time holds the GIL and slows training. Nothing here imports plotly at all; the tests check every builder's output
against plotly's schema with ``go.Figure(fig)`` instead. Only plain Python numbers, strings, lists and dicts go in,
so ``json.dumps`` needs no encoder.

Metric keys can be missing (TRL does not log ``kl`` when beta = 0); a builder then returns an empty figure with an
annotation that says why, instead of raising, because a live page redraws on every step and must never break. A
run with no record yet says so (``NO_STEPS``), and a page with no run says that none has started (``no_run``)."""

from __future__ import annotations

from rloo_demo.ui.plots.base import (
    AXIS_TEXT,
    ESTIMATOR_ORDER,
    GRID,
    LABELS,
    NEGATIVE,
    NEUTRAL,
    NO_RUN,
    NO_STEPS,
    PALETTE,
    POSITIVE,
    TRANSPARENT,
    UIREVISION,
    ZERO_ADVANTAGE,
    Figure,
    _annotate,
    _figure,
    _finite,
    _fmt,
    _line,
    _note,
    _number,
    _series,
    _shorten,
    _template,
    no_run,
    smooth,
    step_dtick,
)
from rloo_demo.ui.plots.compare import eval_histogram, overlay_figure
from rloo_demo.ui.plots.rollouts import _hover_text, group_figure, kl_heatmap
from rloo_demo.ui.plots.toy import TOY_NONE, toy_variance_figure
from rloo_demo.ui.plots.train import (
    LOSS_NOTE,
    METER_OFF,
    _meter_line,
    _metric_figure,
    cosine_figure,
    entropy_figure,
    grad_norm_figure,
    judges_figure,
    kl_estimators_figure,
    kl_figure,
    length_figure,
    metric_plot,
    reward_figure,
    reward_names,
    secondary_figures,
    variance_figure,
    zero_signal_figure,
)

__all__ = [
    "AXIS_TEXT",
    "ESTIMATOR_ORDER",
    "Figure",
    "GRID",
    "LABELS",
    "LOSS_NOTE",
    "METER_OFF",
    "NEGATIVE",
    "NEUTRAL",
    "NO_RUN",
    "NO_STEPS",
    "PALETTE",
    "POSITIVE",
    "TOY_NONE",
    "TRANSPARENT",
    "UIREVISION",
    "ZERO_ADVANTAGE",
    "_annotate",
    "_figure",
    "_finite",
    "_fmt",
    "_hover_text",
    "_line",
    "_meter_line",
    "_metric_figure",
    "_note",
    "_number",
    "_series",
    "_shorten",
    "_template",
    "cosine_figure",
    "entropy_figure",
    "eval_histogram",
    "grad_norm_figure",
    "group_figure",
    "judges_figure",
    "kl_estimators_figure",
    "kl_figure",
    "kl_heatmap",
    "length_figure",
    "metric_plot",
    "no_run",
    "overlay_figure",
    "reward_figure",
    "reward_names",
    "secondary_figures",
    "smooth",
    "step_dtick",
    "toy_variance_figure",
    "variance_figure",
    "zero_signal_figure",
]
