"""The Compare and Runs figures: runs overlaid on one metric, and the evaluation's histogram."""

from __future__ import annotations

from collections.abc import Sequence

from rloo_demo.ui.plots.base import LABELS, PALETTE, Figure, _annotate, _figure, _finite, _line, _note, _series
from rloo_demo.ui.plots.train import LOSS_NOTE


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
