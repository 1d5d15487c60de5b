"""The Train tab's figures: reward, KL, the secondary metrics, the zero-signal share, KL estimators, judges and the
gradient-variance meter.
"""

from __future__ import annotations

from collections.abc import Sequence

from rloo_demo.eval.judges import DISTINCT_2_MIN, REPETITION_MAX
from rloo_demo.ui.plots.base import (
    ESTIMATOR_ORDER,
    LABELS,
    NO_STEPS,
    PALETTE,
    Figure,
    _annotate,
    _figure,
    _line,
    _note,
    _series,
    smooth,
    step_dtick,
)

# With one optimisation step per batch the surrogate loss is zero up to rounding: each group's advantages sum to zero
# and the importance ratio is 1. Its plot is float noise around 1e-8; the gradient it produces is not zero.
LOSS_NOTE = (
    "RLOO's loss is 0 by construction (advantages sum to zero in each group, ratio = 1); "
    "its gradient is not: this plot shows the gradient's norm."
)


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
        return _note(fig, NO_STEPS)
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
        return _note(fig, missing if records else NO_STEPS)
    _line(fig, steps, values, title, PALETTE[0], smoothing, legend=False)
    if y_range:
        fig["layout"]["yaxis"]["range"] = list(y_range)
    return fig


def kl_figure(records: Sequence[dict], smoothing: float = 0.0) -> Figure:
    """KL divergence of the policy from the frozen reference model, in nats per token."""
    missing = "No KL logged: with beta = 0 there is no KL penalty, so TRL does not compute it."
    return _metric_figure(records, "kl", "KL to reference", smoothing, missing, height=260)


def grad_norm_figure(records: Sequence[dict], smoothing: float = 0.0) -> Figure:
    """The gradient's norm before clipping, in place of the loss (zero by construction: ``LOSS_NOTE`` under it)."""
    fig = _metric_figure(records, "grad_norm", "Gradient norm", smoothing, "'grad_norm' was not logged in this run.")
    if _series(records, "grad_norm")[0]:
        _annotate(
            fig,
            text=LOSS_NOTE,
            x=0,
            y=-0.32,
            xref="paper",
            yref="paper",
            showarrow=False,
            xanchor="left",
            font={"size": 10},
        )
        fig["layout"]["margin"]["b"] = 60
    return fig


def metric_plot(key: str, title: str):
    """A builder ``(records, smoothing) -> figure`` of one logged metric over the steps (its axis label from
    ``LABELS``): what a Train plot of a metric TRL already logs needs (``ui.tabs.train_plots.TRAIN_PLOTS``)."""

    def figure(records: Sequence[dict], smoothing: float = 0.0) -> Figure:
        return _metric_figure(records, key, title, smoothing, f"'{key}' was not logged in this run.")

    return figure


entropy_figure = metric_plot("entropy", "Entropy")
length_figure = metric_plot("completions/mean_length", "Completion length")


def secondary_figures(records: Sequence[dict], smoothing: float = 0.0) -> dict[str, Figure]:
    """Small diagnostics: the gradient norm (in place of the loss, which is zero by construction), entropy,
    completion length and the share of groups with no learning signal."""
    return {
        "grad_norm": grad_norm_figure(records, smoothing),
        "entropy": entropy_figure(records, smoothing),
        "completion_length": length_figure(records, smoothing),
        "frac_reward_zero_std": zero_signal_figure(records, smoothing),
    }


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
        return _note(fig, "'frac_reward_zero_std' was not logged in this run." if records else NO_STEPS)
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
        missing = "No KL estimators: with beta = 0 there is no reference model to compare with."
        return _note(fig, missing if records else NO_STEPS)
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
        return _note(fig, "No judges logged in this run." if records else NO_STEPS)
    fig["layout"]["yaxis"]["range"] = [-0.02, 1.02]
    return fig


METER_OFF = "The gradient-variance meter was off: set 'Gradient-variance meter every N steps' above 0 before Start."


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
        return _note(fig, METER_OFF if records else NO_STEPS)
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
        return _note(fig, METER_OFF if records else NO_STEPS)
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


ALERT_COLOR = "#E8A33D"  # the callout's amber: the marker and the box above the plots read as one warning


def mark_steps(fig: Figure, marks: Sequence[tuple[int, str]]) -> Figure:
    """A dashed vertical line at each ``(step, label)`` with its label at the top: where a warning fired, on the
    plot whose curve it is about. The label is drawn as given (already in the page's language)."""
    for step, label in marks:
        fig["layout"].setdefault("shapes", []).append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": step,
                "x1": step,
                "y0": 0,
                "y1": 1,
                "line": {"color": ALERT_COLOR, "width": 2, "dash": "dash"},
            }
        )
        _annotate(
            fig,
            text=f"⚠ {label}",
            x=step,
            y=1,
            xref="x",
            yref="paper",
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font={"size": 11, "color": ALERT_COLOR},
            name="alert",
        )
    return fig
