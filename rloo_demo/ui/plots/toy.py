"""The estimator lab's exact toy (``rloo_demo.toy``): every estimator's exact gradient variance against K."""

from __future__ import annotations

from rloo_demo.ui.plots.base import ESTIMATOR_ORDER, GRID, PALETTE, Figure, _figure, _finite, _note

TOY_NONE = "No variance to show."


def toy_variance_figure(curves: dict, selected_k: int | None = None) -> Figure:
    """One line per estimator: its exact Var[ĝ] at each K (``rloo_demo.toy.variance_curves``), on a log axis, since
    the estimators differ by orders of magnitude and each falls about as 1/K; a dashed line marks the K whose table
    is shown. A variance that is not a positive number (a log axis cannot show 0) leaves a gap."""
    fig = _figure(
        "Exact gradient variance against K (log scale)",
        "K (samples per draw)",
        "Var[ĝ] (exact)",
        height=320,
        legend=True,
        top=70,
    )
    ks = [k for k in curves.get("k", []) if _finite(k)]
    variances = curves.get("variance", {})
    for i, name in enumerate(ESTIMATOR_ORDER):
        values = variances.get(name) or []
        y = [v if _finite(v) and v > 0 else None for v in values[: len(ks)]]
        if not any(v is not None for v in y):
            continue
        fig["data"].append(
            {
                "type": "scatter",
                "x": list(ks),
                "y": y,
                "mode": "lines+markers",
                "name": name,
                "line": {"color": PALETTE[i % len(PALETTE)], "width": 2, "dash": "solid" if name == "rloo" else "dot"},
                "marker": {"size": 6},
                "hovertemplate": f"{name}<br>K=%{{x}}<br>Var=%{{y:.4g}}<extra></extra>",
            }
        )
    if not fig["data"]:
        return _note(fig, TOY_NONE)
    fig["layout"]["yaxis"]["type"] = "log"
    fig["layout"]["xaxis"]["dtick"] = 1
    fig["layout"]["hovermode"] = "closest"
    if _finite(selected_k):
        fig["layout"]["shapes"] = [
            {
                "type": "line",
                "x0": selected_k,
                "x1": selected_k,
                "xref": "x",
                "y0": 0,
                "y1": 1,
                "yref": "y domain",
                "line": {"color": GRID, "dash": "dash", "width": 2},
            }
        ]
    return fig
