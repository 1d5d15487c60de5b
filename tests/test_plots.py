"""Figure builders: ``python -m pytest tests/test_plots.py``. Pure functions, no server, well under a second."""

import math

import plotly.graph_objects as go
import pytest

from rloo_demo.plots import (
    NEGATIVE,
    NEUTRAL,
    POSITIVE,
    eval_histogram,
    group_figure,
    kl_figure,
    overlay_figure,
    reward_figure,
    secondary_figures,
    smooth,
)


def make_records(n=12, kl=True, names=("vader_compound", "length_penalty")):
    records = []
    for step in range(1, n + 1):
        r = {
            "step": step,
            "reward": 0.1 * step + (0.2 if step % 2 else -0.2),  # zig-zag so smoothing has something to change
            "reward_std": 0.3,
            "entropy": 5.0 - 0.1 * step,
            "loss": 0.01 * (-1) ** step,
            "completions/mean_length": 20 + step,
            "frac_reward_zero_std": 0.25,
        }
        if kl:
            r["kl"] = 0.01 * step
        for name in names:
            r[f"rewards/{name}/mean"] = 0.05 * step
            r[f"rewards/{name}/std"] = 0.1
        records.append(r)
    return records


def annotations(fig):
    return [a.text for a in fig.layout.annotations]


def assert_styled(fig):
    assert isinstance(fig, go.Figure)
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    assert fig.layout.paper_bgcolor == "rgba(0,0,0,0)" and fig.layout.plot_bgcolor == "rgba(0,0,0,0)"
    assert fig.layout.uirevision is not None
    assert fig.layout.height


# --- smooth -------------------------------------------------------------------------------------------------------


def test_smooth_empty_and_identity():
    assert smooth([], 0.6) == []
    assert smooth([1.0, -2.0, 3.0], 0.0) == [1.0, -2.0, 3.0]


def test_smooth_is_debiased_and_keeps_length():
    out = smooth([1.0, 1.0, 1.0], 0.9)
    # debiasing: a constant input stays constant instead of creeping up from zero
    assert out == pytest.approx([1.0, 1.0, 1.0])
    zigzag = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    smoothed = smooth(zigzag, 0.6)
    assert len(smoothed) == len(zigzag)
    assert smoothed != zigzag
    assert max(smoothed[2:]) - min(smoothed[2:]) < 1.0  # swings shrink


def test_smooth_skips_none_and_nan_in_place():
    out = smooth([1.0, None, float("nan"), 3.0], 0.5)
    assert len(out) == 4
    assert out[0] == pytest.approx(1.0) and out[1] is None and math.isnan(out[2])
    assert out[3] == pytest.approx(smooth([1.0, 3.0], 0.5)[1])  # the gaps did not count as zeros


# --- reward -------------------------------------------------------------------------------------------------------


def test_reward_figure_traces_band_and_reward_functions():
    fig = reward_figure(make_records())
    assert_styled(fig)
    names = [t.name for t in fig.data]
    assert names == ["±1 std", "total reward", "vader_compound", "length_penalty"]
    band = fig.data[0]
    assert band.fill == "toself" and len(band.x) == 2 * 12
    assert max(band.y) == pytest.approx(max(r["reward"] for r in make_records()) + 0.3)
    assert "step" in fig.layout.xaxis.title.text and "[-1, 1]" in fig.layout.yaxis.title.text


def test_reward_smoothing_changes_values_keeps_raw_faint():
    records = make_records()
    raw = reward_figure(records)
    smoothed = reward_figure(records, smoothing=0.8)
    solid_raw = next(t for t in raw.data if t.name == "total reward")
    solid = next(t for t in smoothed.data if t.name == "total reward")
    faint = next(t for t in smoothed.data if t.name == "total reward (raw)")
    assert len(solid.y) == len(solid_raw.y) == 12
    assert list(solid.y) != pytest.approx(list(solid_raw.y))
    assert list(faint.y) == pytest.approx(list(solid_raw.y))
    assert faint.opacity < 1 and faint.showlegend is False


def test_reward_figure_without_data_shows_annotation():
    for records in ([], [{"step": 1, "loss": 0.1}], [{"step": 1, "reward": None}]):
        fig = reward_figure(records)
        assert_styled(fig)
        assert annotations(fig), records


# --- kl and secondary ---------------------------------------------------------------------------------------------


def test_kl_figure_and_missing_kl():
    fig = kl_figure(make_records())
    assert_styled(fig)
    assert list(fig.data[0].y) == pytest.approx([0.01 * s for s in range(1, 13)])
    assert "nats" in fig.layout.yaxis.title.text
    empty = kl_figure(make_records(kl=False), smoothing=0.5)
    assert len(empty.data) == 0
    assert any("beta" in text for text in annotations(empty))


def test_secondary_figures_keys_units_and_missing_keys():
    figs = secondary_figures(make_records(), smoothing=0.3)
    assert set(figs) == {"loss", "entropy", "completion_length", "frac_reward_zero_std"}
    for fig in figs.values():
        assert_styled(fig)
        assert len(fig.data) == 2  # faint raw + smoothed
    assert "nats/token" in figs["entropy"].layout.yaxis.title.text
    assert "tokens" in figs["completion_length"].layout.yaxis.title.text
    assert "0..1" in figs["frac_reward_zero_std"].layout.yaxis.title.text
    for fig in secondary_figures([{"step": 1}]).values():
        assert_styled(fig)
        assert annotations(fig)


# --- group --------------------------------------------------------------------------------------------------------


def make_group():
    shaped = [0.9, -0.5, 0.1, 0.3]
    completions = []
    for i, r in enumerate(shaped):
        baseline = (sum(shaped) - r) / 3
        adv = r - baseline
        completions.append(
            {
                "text": f" completion {i}",
                "num_tokens": 8,
                "scores": {"vader_compound": r},
                "weighted_reward": r,
                "kl": 0.0,
                "kl_penalty": 0.0,
                "shaped_reward": r,
                "baseline": baseline,
                "raw_advantage": adv,
                "advantage": adv,
            }
        )
    completions[3]["advantage"] = 0.0  # a group member the loss leaves alone
    return {
        "step": 3,
        "group": 0,
        "prompt": "This movie was " + "really " * 20 + "long",
        "k": 4,
        "beta": 0.0,
        "normalize_advantages": False,
        "weights": {"vader_compound": 1.0},
        "completions": completions,
    }


def test_group_figure_colours_follow_advantage_sign():
    group = make_group()
    fig = group_figure(group)
    assert_styled(fig)
    bars = next(t for t in fig.data if t.type == "bar")
    baseline = next(t for t in fig.data if t.type == "scatter")
    assert list(bars.x) == ["#1", "#2", "#3", "#4"]
    assert list(bars.y) == [c["shaped_reward"] for c in group["completions"]]
    assert list(baseline.y) == pytest.approx([c["baseline"] for c in group["completions"]])
    # #1 beats its siblings, #2 and #3 fall below theirs, #4 was zeroed by hand
    assert list(bars.marker.color) == [POSITIVE, NEGATIVE, NEGATIVE, NEUTRAL]
    assert "This movie was" in fig.layout.title.text and "…" in fig.layout.title.text
    assert len(fig.layout.title.text) < 80


def test_group_figure_copes_with_missing_fields():
    assert annotations(group_figure({}))
    fig = group_figure({"prompt": "x", "completions": [{"text": "a"}, {"advantage": None, "shaped_reward": 0.1}]})
    assert list(fig.data[0].marker.color) == [NEUTRAL, NEUTRAL]


# --- overlay and evaluation ---------------------------------------------------------------------------------------


def test_overlay_one_trace_per_run():
    runs = {"beta=0": make_records(kl=False), "beta=0.05": make_records(), "K=8": make_records(n=5)}
    fig = overlay_figure(runs, "reward")
    assert_styled(fig)
    assert [t.name for t in fig.data] == list(runs)
    assert len(fig.data[2].x) == 5
    # kl is missing in one run: that run is left out, the others stay
    assert [t.name for t in overlay_figure(runs, "kl").data] == ["beta=0.05", "K=8"]
    smoothed = overlay_figure(runs, "reward", smoothing=0.5)
    assert [t.name for t in smoothed.data if t.showlegend is not False] == list(runs)
    assert annotations(overlay_figure(runs, "no/such/metric"))
    assert annotations(overlay_figure({}, "reward"))


def test_eval_histogram():
    result = {
        "base_rewards": [-0.5, 0.0, 0.1, 0.2],
        "trained_rewards": [0.3, 0.5, 0.9, 0.7],
        "base_mean_reward": -0.05,
        "trained_mean_reward": 0.6,
        "difference_ci95": [0.3, 0.9],
    }
    fig = eval_histogram(result)
    assert_styled(fig)
    hists = [t for t in fig.data if t.type == "histogram"]
    assert [t.name for t in hists] == ["base", "trained"]
    assert hists[0].xbins == hists[1].xbins  # shared bins, comparable bar by bar
    assert len(fig.layout.shapes) == 2  # one vertical line per mean
    assert sorted(s.x0 for s in fig.layout.shapes) == pytest.approx([-0.05, 0.6])
    title = fig.layout.title.text
    assert "+0.650" in title and "[+0.300, +0.900]" in title


def test_eval_histogram_partial_results():
    fig = eval_histogram({"base_rewards": [0.1, 0.3], "trained_rewards": [0.5]})
    assert "+0.300" in fig.layout.title.text and "CI" not in fig.layout.title.text
    empty = eval_histogram({})
    assert_styled(empty)
    assert len([t for t in empty.data if t.type == "histogram"]) == 2
    assert annotations(empty)
