"""Figure builders: ``python -m pytest tests/ui/test_plots.py``. Pure functions, no server, well under a second.

The builders return plain dicts and never import plotly; these tests may, to check the dicts against its schema.
"""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from rloo_demo.ui import plots
from rloo_demo.ui.plots import (
    NEGATIVE,
    NEUTRAL,
    POSITIVE,
    cosine_figure,
    eval_histogram,
    group_figure,
    judges_figure,
    kl_estimators_figure,
    kl_figure,
    kl_heatmap,
    overlay_figure,
    reward_figure,
    secondary_figures,
    smooth,
    step_dtick,
    variance_figure,
    zero_signal_figure,
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
            "frac_raw_score_zero_std": 0.5,
            "grad_norm": 20.0 - step,
            "judges/distinct_2": 0.9,
            "judges/repetition": 0.02,
        }
        if kl:
            r.update(kl_k1=0.5 * step, kl_k2=0.4 * step, kl_k3=0.45 * step)
        if step % 5 == 1:  # the meter measures every 5 steps
            for i, e in enumerate(plots.ESTIMATOR_ORDER):
                r[f"variance/{e}"] = 10.0 ** (i - 2)
                r[f"cosine/{e}"] = 0.5 - 0.1 * i
        if kl:
            r["kl"] = 0.01 * step
        for name in names:
            r[f"rewards/{name}/mean"] = 0.05 * step
            r[f"rewards/{name}/std"] = 0.1
        records.append(r)
    return records


def annotations(fig):
    return [a["text"] for a in fig["layout"].get("annotations", [])]


def names(fig):
    return [t["name"] for t in fig["data"]]


def assert_styled(fig):
    assert isinstance(fig, dict) and set(fig) == {"data", "layout"}
    layout = fig["layout"]
    assert layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"]
    assert layout["paper_bgcolor"] == "rgba(0,0,0,0)" and layout["plot_bgcolor"] == "rgba(0,0,0,0)"
    assert layout["uirevision"] is not None
    assert layout["height"]
    assert all(t["type"] in ("scatter", "bar", "histogram", "heatmap") for t in fig["data"])


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


def test_smooth_weight_is_clamped():
    values = [0.0, 1.0, 0.0, 1.0]
    assert smooth(values, 5.0) == smooth(values, 0.999)  # 1 or more would freeze the curve at its first value
    assert smooth(values, -1.0) == values


def test_step_dtick_is_a_round_spacing_with_at_most_eight_ticks():
    expected = {1: 1, 8: 1, 9: 2, 16: 2, 17: 5, 24: 5, 40: 5, 41: 10, 80: 10, 81: 20, 150: 20, 400: 50, 401: 100}
    assert {last: step_dtick(last) for last in expected} == expected


def test_every_reward_function_gets_a_colour_other_than_the_total():
    names = [f"reward_{i}" for i in range(8)]
    fig = reward_figure(make_records(names=names))
    colours = [t["line"]["color"] for t in fig["data"] if t["name"] in names]
    assert colours == [plots.PALETTE[1 + i % (len(plots.PALETTE) - 1)] for i in range(8)]  # cycles, skipping #0
    assert plots.PALETTE[0] not in colours


def test_smooth_skips_none_and_nan_in_place():
    out = smooth([1.0, None, float("nan"), 3.0], 0.5)
    assert len(out) == 4
    assert out[0] == pytest.approx(1.0) and out[1] is None and math.isnan(out[2])
    assert out[3] == pytest.approx(smooth([1.0, 3.0], 0.5)[1])  # the gaps did not count as zeros


# --- reward -------------------------------------------------------------------------------------------------------


def test_reward_figure_traces_band_and_reward_functions():
    fig = reward_figure(make_records())
    assert_styled(fig)
    assert names(fig) == ["±1 std", "total reward", "vader_compound", "length_penalty"]
    band = fig["data"][0]
    assert band["fill"] == "toself" and band["x"] == list(range(1, 13)) + list(range(12, 0, -1))
    rewards = [r["reward"] for r in make_records()]
    # the upper edge left to right, then the lower edge right to left: both edges, each at reward +- std
    assert band["y"] == pytest.approx([r + 0.3 for r in rewards] + [r - 0.3 for r in reversed(rewards)])
    layout = fig["layout"]
    assert "step" in layout["xaxis"]["title"]["text"] and "[-1, 1]" in layout["yaxis"]["title"]["text"]
    assert layout["xaxis"]["dtick"] == 2  # whole steps, from step_dtick(12)


def test_reward_smoothing_changes_values_keeps_raw_faint():
    records = make_records()
    raw = reward_figure(records)
    smoothed = reward_figure(records, smoothing=0.8)
    solid_raw = next(t for t in raw["data"] if t["name"] == "total reward")
    solid = next(t for t in smoothed["data"] if t["name"] == "total reward")
    faint = next(t for t in smoothed["data"] if t["name"] == "total reward (raw)")
    assert len(solid["y"]) == len(solid_raw["y"]) == 12
    assert list(solid["y"]) != pytest.approx(list(solid_raw["y"]))
    assert list(faint["y"]) == pytest.approx(list(solid_raw["y"]))
    assert faint["opacity"] < 1 and faint["showlegend"] is False


def ema(values, weight):
    """TensorBoard's debiased exponential moving average, written out again for the test."""
    out, last = [], 0.0
    for n, v in enumerate(values, 1):
        last = weight * last + (1 - weight) * v
        out.append(last / (1 - weight**n))
    return out


def test_reward_band_follows_the_smoothed_line_and_smoothed_std():
    records = make_records()
    for i, r in enumerate(records):
        r["reward_std"] = 0.1 + 0.4 * (i % 3 == 0)  # a spread that jumps, so smoothing it changes it
    fig = reward_figure(records, smoothing=0.7)
    band = next(t for t in fig["data"] if t["name"] == "±1 std")
    solid = next(t for t in fig["data"] if t["name"] == "total reward")
    upper, lower = band["y"][:12], band["y"][12:][::-1]
    centre = [(u + lo) / 2 for u, lo in zip(upper, lower, strict=True)]
    half_width = [(u - lo) / 2 for u, lo in zip(upper, lower, strict=True)]
    assert centre == pytest.approx(solid["y"])  # the band sits on the smoothed line, not on the raw points
    assert centre == pytest.approx(ema([r["reward"] for r in records], 0.7))
    assert half_width == pytest.approx(ema([r["reward_std"] for r in records], 0.7))
    assert half_width != pytest.approx([r["reward_std"] for r in records])  # so an unsmoothed band would show


def test_reward_figure_without_data_shows_annotation():
    for records in ([], [{"step": 1, "loss": 0.1}], [{"step": 1, "reward": None}]):
        fig = reward_figure(records)
        assert_styled(fig)
        assert annotations(fig), records
        assert fig["data"] == [] and fig["layout"]["xaxis"]["showticklabels"] is False


# --- kl and secondary ---------------------------------------------------------------------------------------------


def test_kl_figure_and_missing_kl():
    fig = kl_figure(make_records())
    assert_styled(fig)
    assert list(fig["data"][0]["y"]) == pytest.approx([0.01 * s for s in range(1, 13)])
    assert "nats" in fig["layout"]["yaxis"]["title"]["text"]
    empty = kl_figure(make_records(kl=False), smoothing=0.5)
    assert len(empty["data"]) == 0
    assert any("beta" in text for text in annotations(empty))


def test_secondary_figures_keys_units_and_missing_keys():
    figs = secondary_figures(make_records(), smoothing=0.3)
    assert set(figs) == {"grad_norm", "entropy", "completion_length", "frac_reward_zero_std"}
    for name, fig in figs.items():
        assert_styled(fig)
        assert len(fig["data"]) == (4 if name == "frac_reward_zero_std" else 2)  # faint raw + smoothed per line
    assert "nats/token" in figs["entropy"]["layout"]["yaxis"]["title"]["text"]
    assert "tokens" in figs["completion_length"]["layout"]["yaxis"]["title"]["text"]
    assert "0..1" in figs["frac_reward_zero_std"]["layout"]["yaxis"]["title"]["text"]
    assert figs["frac_reward_zero_std"]["layout"]["yaxis"]["range"] == [-0.02, 1.02]
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
    bars = next(t for t in fig["data"] if t["type"] == "bar")
    baseline = next(t for t in fig["data"] if t["type"] == "scatter")
    assert list(bars["x"]) == ["#1", "#2", "#3", "#4"]
    assert list(bars["y"]) == [c["shaped_reward"] for c in group["completions"]]
    assert list(baseline["y"]) == pytest.approx([c["baseline"] for c in group["completions"]])
    # #1 beats its siblings, #2 and #3 fall below theirs, #4 was zeroed by hand
    assert list(bars["marker"]["color"]) == [POSITIVE, NEGATIVE, NEGATIVE, NEUTRAL]
    title = fig["layout"]["title"]["text"]
    assert "This movie was" in title and "…" in title
    assert len(title) < 80


def test_bar_colours_agree_with_the_rollouts_table_rows():
    """The chart and the table beside it colour a completion alike, also at the threshold of 'no push': an
    advantage the table prints as ±0.000 is grey in both."""
    from rloo_demo.ui.views import groups_html

    group = make_group()
    advantages = [1e-6, -1e-6, 6e-4, 4e-4]
    for c, a in zip(group["completions"], advantages, strict=True):
        c["advantage"] = a
    bars = next(t for t in group_figure(group)["data"] if t["type"] == "bar")["marker"]["color"]
    rows = re.findall(r"<tr class='(rloo-\w+)'", groups_html([group]))
    by_class = {"rloo-pos": POSITIVE, "rloo-neg": NEGATIVE, "rloo-zero": NEUTRAL}
    assert rows == ["rloo-zero", "rloo-zero", "rloo-pos", "rloo-zero"]
    assert bars == [by_class[r] for r in rows]


def test_group_figure_copes_with_missing_fields():
    assert annotations(group_figure({}))
    fig = group_figure({"prompt": "x", "completions": [{"text": "a"}, {"advantage": None, "shaped_reward": 0.1}]})
    assert list(fig["data"][0]["marker"]["color"]) == [NEUTRAL, NEUTRAL]
    # a NaN reward becomes a gap (None), never a bare NaN that a browser's JSON.parse rejects
    fig = group_figure({"completions": [{"shaped_reward": float("nan"), "baseline": float("inf")}]})
    assert fig["data"][0]["y"] == [None] and fig["data"][1]["y"] == [None]
    json.dumps(fig, allow_nan=False)


# --- overlay and evaluation ---------------------------------------------------------------------------------------


def test_overlay_one_trace_per_run():
    runs = {"beta=0": make_records(kl=False), "beta=0.05": make_records(), "K=8": make_records(n=5)}
    fig = overlay_figure(runs, "reward")
    assert_styled(fig)
    assert names(fig) == list(runs)
    assert len(fig["data"][2]["x"]) == 5
    # kl is missing in one run: that run is left out, the others stay
    assert names(overlay_figure(runs, "kl")) == ["beta=0.05", "K=8"]
    smoothed = overlay_figure(runs, "reward", smoothing=0.5)
    assert [t["name"] for t in smoothed["data"] if t.get("showlegend") is not False] == list(runs)
    colours = [t["line"]["color"] for t in fig["data"]]
    assert len(set(colours)) == len(runs)  # one colour per run
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
    hists = [t for t in fig["data"] if t["type"] == "histogram"]
    assert [t["name"] for t in hists] == ["base", "trained"]
    assert hists[0]["xbins"] == hists[1]["xbins"]  # shared bins, comparable bar by bar
    shapes = fig["layout"]["shapes"]
    assert len(shapes) == 2  # one vertical line per mean, full height
    assert sorted(s["x0"] for s in shapes) == pytest.approx([-0.05, 0.6])
    assert all(s["x0"] == s["x1"] and (s["y0"], s["y1"]) == (0, 1) for s in shapes)
    assert annotations(fig) == ["base mean -0.050", "trained mean +0.600"]
    title = fig["layout"]["title"]["text"]
    assert "+0.650" in title and "[+0.300, +0.900]" in title


def test_eval_histogram_partial_results():
    fig = eval_histogram({"base_rewards": [0.1, 0.3], "trained_rewards": [0.5]})
    assert "+0.300" in fig["layout"]["title"]["text"] and "CI" not in fig["layout"]["title"]["text"]
    empty = eval_histogram({})
    assert_styled(empty)
    assert len([t for t in empty["data"] if t["type"] == "histogram"]) == 2
    assert annotations(empty) == ["No evaluation rewards to show."]
    assert "shapes" not in empty["layout"]


# --- plain, valid, JSON-ready dicts -------------------------------------------------------------------------------


def token_group():
    """A group whose completions carry the per-token record, of different lengths."""
    g = make_group()
    for i, c in enumerate(g["completions"]):
        n = 3 + i
        c.update(
            token_texts=[f" t{j}" for j in range(n)],
            token_logp=[-1.0 - 0.1 * j for j in range(n)],
            token_ref_logp=[-1.2 + 0.1 * i for _ in range(n)],
        )
    return g


def all_figures():
    """Every builder, on full, smoothed, partial and empty input."""
    records = make_records()
    runs = {"beta=0": make_records(kl=False), "beta=0.05": make_records(), "K=8": make_records(n=5)}
    result = {"base_rewards": [-0.5, 0.0, 0.1], "trained_rewards": [0.3, 0.9], "difference_ci95": [0.1, 0.9]}
    figs = {
        "reward": reward_figure(records),
        "reward smoothed": reward_figure(records, smoothing=0.6),
        "reward empty": reward_figure([]),
        "kl": kl_figure(records, smoothing=0.6),
        "kl missing": kl_figure(make_records(kl=False)),
        "group": group_figure(make_group()),
        "group empty": group_figure({}),
        "kl heatmap": kl_heatmap([token_group()]),
        "kl heatmap empty": kl_heatmap([make_group()]),
        "overlay": overlay_figure(runs, "reward", smoothing=0.5),
        "overlay empty": overlay_figure({}, "reward"),
        "eval": eval_histogram(result),
        "eval empty": eval_histogram({}),
        "zero signal": zero_signal_figure(records, smoothing=0.3),
        "kl estimators": kl_estimators_figure(records),
        "kl estimators empty": kl_estimators_figure(make_records(kl=False)),
        "judges": judges_figure(records),
        "judges empty": judges_figure([{"step": 1}]),
        "variance": variance_figure(records),
        "variance off": variance_figure([{"step": 1, "reward": 0.1}]),
        "cosine": cosine_figure(records),
        "cosine off": cosine_figure([]),
        "overlay loss": overlay_figure(runs, "loss"),
    }
    figs.update({f"secondary {k}": f for k, f in secondary_figures(records, smoothing=0.6).items()})
    figs.update({f"secondary empty {k}": f for k, f in secondary_figures([{"step": 1}]).items()})
    return figs


GOLDEN = Path(__file__).parent.parent / "golden" / "figures.json"


def golden_figures():
    """All of ``all_figures`` plus the builders' defaults and the long inputs that get shortened."""
    records = make_records()
    long_group = make_group()
    long_group["completions"][0]["text"] = "word " * 40
    long_group["completions"][1]["text"] = "x" * 80  # exactly as long as a hover line may be
    long_group["prompt"] = "p" * 40  # exactly as long as a title's prompt may be
    figs = all_figures()
    figs.update(
        {
            "kl default": kl_figure(records),
            "group long": group_figure(long_group),
            "eval full": eval_histogram(
                {
                    "base_rewards": [-0.5, 0.0, 0.1, 0.2],
                    "trained_rewards": [0.3, 0.5, 0.9, 0.7],
                    "base_mean_reward": -0.05,
                    "trained_mean_reward": 0.6,
                    "difference_ci95": [0.3, 0.9],
                }
            ),
            "eval one value": eval_histogram({"base_rewards": [0.2], "trained_rewards": [0.2]}),
            # the reported means win over the means of the (finite) values shown
            "eval reported means": eval_histogram(
                {
                    "base_rewards": [0.1, 0.3],
                    "trained_rewards": [0.5],
                    "base_mean_reward": 0.25,
                    "trained_mean_reward": 0.4,
                }
            ),
            "eval trained only": eval_histogram({"trained_rewards": [0.5, 0.7]}),
            "group missing fields": group_figure(
                {"prompt": "x", "completions": [{"text": "a"}, {"advantage": None, "shaped_reward": 0.1}]}
            ),
            "overlay default": overlay_figure({"a": records}, "kl"),
            "overlay unlabelled metric": overlay_figure({"a": records}, "rewards/vader_compound/mean"),
            "overlay missing metric": overlay_figure({"a": records}, "no/such/metric"),
            "reward without steps": reward_figure([{"reward": 0.1, "reward_std": 0.2}, {"reward": 0.3}]),
            # the toy's curves written here (its own numbers are tests/test_toy.py's): a K that is no number, an
            # estimator with no positive variance before others (left out, the rest still drawn), gaps, a longer list
            "toy": plots.toy_variance_figure(
                {
                    "k": [2, 3, float("nan"), 4],
                    "variance": {
                        "rloo": [0.5, 0.25, 0.125],
                        "grpo": [0.0, -1.0, float("inf")],
                        "dr_grpo": [0.4, None, 0.2, 9.0],
                        "reinforce": [2.0, float("nan"), 0.5],
                    },
                },
                selected_k=3,
            ),
            "toy unmarked": plots.toy_variance_figure({"k": [2, 3], "variance": {"grpo": [1.0, 0.5]}}),
            "toy empty": plots.toy_variance_figure({}),
        }
    )
    figs.update({f"secondary default {k}": f for k, f in secondary_figures(records).items()})
    return figs


def test_figures_match_the_reviewed_golden_file():
    """Every figure, value for value, as it was last looked at; after a deliberate change to a builder, look at the
    figures again (``scripts/screenshots.py``) and rewrite the file with
    ``UPDATE_GOLDEN=1 pytest tests/ui/test_plots.py``.
    The shared template is stored once."""
    figs = json.loads(json.dumps(golden_figures()))
    template = figs["reward"]["layout"]["template"]
    for fig in figs.values():
        assert fig["layout"].pop("template") == template
    current = {"template": template, "figures": figs}
    if os.environ.get("UPDATE_GOLDEN"):  # rewrite the file and compare nothing: a file is not checked against itself
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"UPDATE_GOLDEN: rewrote {GOLDEN.name} ({len(figs)} figures); look at the diff, then run again")
    golden = json.loads(GOLDEN.read_text())
    assert current["template"] == golden["template"]
    assert sorted(current["figures"]) == sorted(golden["figures"])
    for name, fig in current["figures"].items():
        # floats to 1e-9: the smoothing's last bits differ between numpy/pandas builds, not the figure
        assert same_figure(fig, golden["figures"][name]), f"figure {name!r} changed"


def same_figure(a, b) -> bool:
    """Equal structure and text, floats equal to 1e-9 (relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_figure(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_figure(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, int | float)
            and isinstance(b, int | float)
            and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        )
    return a == b


def plain(value):
    """Only the types json.dumps writes as they are: no numpy, no tuples, no plotly objects."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or type(value) in (str, int, bool)


@pytest.mark.parametrize("name, fig", all_figures().items())
def test_figures_are_valid_plotly_and_json(name, fig):
    assert_styled(fig)
    assert plain(fig), name
    text = json.dumps(fig, allow_nan=False)  # strict JSON: a browser's JSON.parse rejects NaN
    assert json.loads(text) == fig
    # plotly's own validators raise ValueError on any property, value or trace type the schema does not know
    validated = go.Figure(fig)
    # and the figure comes back unchanged: nothing plotly.py would have rewritten, such as a magic-underscore key
    # ("title_font_size") that it expands but plotly.js would ignore
    assert json.loads(validated.to_json()) == fig


def subset(small, big, path="template"):
    """Every key and value of ``small`` is in ``big`` (lists of dicts compared item by item)."""
    if isinstance(small, dict):
        for key, value in small.items():
            assert key in big, f"{path}.{key}"
            subset(value, big[key], f"{path}.{key}")
    elif isinstance(small, list) and small and isinstance(small[0], dict):
        assert len(small) == len(big), path
        for a, b in zip(small, big, strict=True):
            subset(a, b, path)
    else:
        assert small == big, path


def test_embedded_template_matches_plotly_default():
    """go.Figure used to embed plotly.py's default template; the dicts carry the part of it that applies to them."""
    assert pio.templates.default == "plotly"
    full = json.loads(json.dumps(pio.templates["plotly"].to_plotly_json()))
    template = reward_figure(make_records())["layout"]["template"]
    subset(template, full)
    trace_types = {t["type"] for fig in all_figures().values() for t in fig["data"]}
    assert trace_types <= set(template["data"])
    # what is left out only applies to maps, 3-D, polar and ternary plots and colour scales
    assert set(full["layout"]) - set(template["layout"]) <= {
        "coloraxis",
        "colorscale",
        "geo",
        "mapbox",
        "polar",
        "scene",
        "ternary",
    }


def test_plots_module_does_not_import_plotly():
    code = "import sys, rloo_demo.ui.plots; print(any(m == 'plotly' or m.startswith('plotly.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert "plotly" not in plots.__dict__


def test_figures_are_fresh():
    """Each call builds new dicts, so a caller editing one figure cannot change the next."""
    a, b = reward_figure(make_records()), reward_figure(make_records())
    a["layout"]["xaxis"]["title"]["text"] = "changed"
    a["layout"]["template"]["layout"]["font"]["color"] = "red"
    assert b["layout"]["xaxis"]["title"]["text"] != "changed"
    assert reward_figure(make_records())["layout"]["template"]["layout"]["font"]["color"] != "red"


# --- plots that teach ------------------------------------------------------------------------------------------------


def test_gradient_norm_replaces_the_flat_loss_with_a_note():
    fig = secondary_figures(make_records())["grad_norm"]
    assert fig["data"][-1]["y"][0] == 19.0
    assert any("0 by construction" in a for a in annotations(fig))
    # no SI prefixes on any axis: a loss of 4e-8 must not read "40n"
    assert fig["layout"]["yaxis"]["exponentformat"] == "e"
    loss = overlay_figure({"a": make_records()}, "loss")
    assert loss["layout"]["yaxis"]["exponentformat"] == "e" and any("by construction" in a for a in annotations(loss))


def test_zero_signal_figure_shows_trls_and_the_raw_fraction():
    fig = zero_signal_figure(make_records())
    assert names(fig) == ["raw scores all equal", "TRL: shaped rewards all equal"]
    assert fig["data"][0]["y"][0] == 0.5 and fig["data"][1]["y"][0] == 0.25


def test_variance_figure_is_log_scale_with_one_line_per_estimator():
    fig = variance_figure(make_records())
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert names(fig) == list(plots.ESTIMATOR_ORDER)
    assert fig["data"][0]["x"] == [1, 6, 11] and fig["data"][0]["mode"] == "lines+markers"
    assert any("meter was off" in a for a in annotations(variance_figure([{"step": 1}])))
    cos = cosine_figure(make_records())
    assert names(cos) == list(plots.ESTIMATOR_ORDER) and cos["layout"]["yaxis"]["range"] == [-1.02, 1.02]


def test_judges_and_kl_estimator_figures():
    fig = judges_figure(make_records())
    assert names(fig) == ["distinct-2", "repetition"]
    thresholds = sorted(shape["y0"] for shape in fig["layout"]["shapes"])
    from rloo_demo.eval.judges import DISTINCT_2_MIN, REPETITION_MAX

    assert thresholds == sorted([DISTINCT_2_MIN, REPETITION_MAX])
    kl = kl_estimators_figure(make_records())
    assert names(kl)[0].startswith("k1") and "reward" in names(kl)[0] and len(kl["data"]) == 3
    assert any("beta = 0" in a for a in annotations(kl_estimators_figure(make_records(kl=False))))


def test_toy_figure_is_valid_plotly_on_a_log_axis_with_the_chosen_k_marked():
    """The estimator lab's exact toy: one line per estimator against K, log scale; not in the golden file (its
    numbers come from ``rloo_demo.toy``, tested in tests/test_toy.py), but checked against plotly's schema alike."""
    from rloo_demo.toy import variance_curves

    curves = variance_curves(0.0, 1.0)
    fig = plots.toy_variance_figure(curves, selected_k=4)
    empty = plots.toy_variance_figure({"k": [2, 3], "variance": {"rloo": [0.0, float("nan")]}})
    for f in (fig, empty):
        assert_styled(f)
        assert plain(f)
        assert json.loads(go.Figure(f).to_json()) == f
    assert names(fig) == list(plots.ESTIMATOR_ORDER)
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert fig["data"][0]["x"] == list(range(2, 9)) and fig["data"][0]["y"] == curves["variance"]["rloo"]
    assert [s["x0"] for s in fig["layout"]["shapes"]] == [4]
    assert annotations(empty) == [plots.TOY_NONE] and not empty["data"]
