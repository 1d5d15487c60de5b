"""The Rollouts tab's figures: one group's completions and the per-token KL heat map."""

from __future__ import annotations

from collections.abc import Sequence

from rloo_demo.store.tokens import kl_matrix
from rloo_demo.ui.plots.base import (
    NEGATIVE,
    NEUTRAL,
    PALETTE,
    POSITIVE,
    Figure,
    _figure,
    _fmt,
    _note,
    _number,
    _shorten,
    step_dtick,
)
from rloo_demo.ui.views.common import NEG, POS
from rloo_demo.ui.views.rollouts import advantage_class


def group_figure(group: dict) -> Figure:
    """One prompt's K completions: shaped reward bars against each one's leave-one-out baseline.

    A bar above its baseline marker beat the mean of its siblings; bar colour is the sign of the advantage that
    entered the loss (green pushed up, red pushed down, grey left alone, or pushed by less than the ±0.000 the
    table beside it prints: the bar and its row are coloured by one rule, ``views.rollouts.advantage_class``).
    """
    title = f"“{_shorten(group.get('prompt', ''), 40)}” (step {group.get('step', '?')})"
    fig = _figure(title, "completion", "shaped reward (score − β·KL)", legend=True)
    completions = group.get("completions") or []
    if not completions:
        return _note(fig, "No completions captured for this group.")
    labels = [f"#{i + 1}" for i in range(len(completions))]
    advantages = [c.get("advantage") for c in completions]
    colours = [{POS: POSITIVE, NEG: NEGATIVE}.get(advantage_class(a), NEUTRAL) for a in advantages]
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


def kl_heatmap(groups: Sequence[dict]) -> Figure:
    """Where the KL of a step lives: per-token k1 = log π − log π_ref, one row per completion (``P1 #2``: prompt 1,
    completion 2), one column per token position. Diverging around 0: orange where the policy likes a token more
    than the reference, blue where it likes it less; blank past a completion's end. Hover shows the token."""

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
