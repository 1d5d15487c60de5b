"""Token by token, the views: coloured token spans, their notes with the real numbers, the probe's
history table and the batch KL heatmap, all pure and without a server. Token texts are hostile input: a model can
emit any text, so every piece must come out as text, never as markup.

``python -m pytest tests/ui/test_token_views.py`` (well under a second).
"""

import html
import json
import re

import plotly.graph_objects as go
import pytest
from factories import AFTER, BEFORE, EVIL, PIECES, REF, completion

from rloo_demo.store import tokens
from rloo_demo.ui.plots import kl_heatmap
from rloo_demo.ui.views import (
    MEASURES,
    kl_heatmap_note,
    probe_html,
    probe_note,
    token_colour,
    token_note_markdown,
    token_spans_html,
)


def group(*completions, beta=0.1, step=7):
    return {"step": step, "group": 1, "prompt": "This movie was", "beta": beta, "completions": list(completions)}


@pytest.fixture
def g():
    return group(completion(PIECES, BEFORE, AFTER, REF, [3.0, 5.0, 0.2, 4.0, 1.0]))


def spans(page: str) -> list[tuple[str, str]]:
    """(style, inner text) of each token span."""
    return re.findall(r"<span class='rloo-tok' style='([^']*)' title='[^']*'>(.*?)</span>", page)


@pytest.mark.parametrize("measure", list(MEASURES))
def test_token_text_is_escaped_never_markup(g, measure):
    page = token_spans_html(g, 0, measure)
    assert "<img" not in page and "onerror=alert(1)>" not in page
    assert html.escape(EVIL, quote=True) in page  # shown as text: &lt;img src=x onerror=alert(1)&gt;
    assert "{{" not in page and "${" not in page  # no template syntax reaches gradio's HTML component
    assert "<|endoftext|>" not in page and "&lt;|endoftext|&gt;" in page
    found = spans(page)
    assert len(found) == len(PIECES)
    assert html.unescape(found[1][1]) == EVIL  # the span reads exactly the token's text
    note = token_note_markdown(g, 0, measure)
    assert "<img" not in note


def test_delta_colours_reinforced_green_suppressed_red(g):
    found = spans(token_spans_html(g, 0, "delta"))
    colours = [style.removeprefix("background:") for style, _ in found]
    assert colours[0].startswith("rgba(61,190,139,")  # -2.0 -> -1.5: reinforced
    assert colours[1].startswith("rgba(217,83,79,")  # -5.0 -> -5.2: suppressed
    assert colours[3] == "rgba(61,190,139,0.70)"  # the largest |Δ| (1.0) gets full colour
    alpha = [float(c.rsplit(",", 1)[1].rstrip(")")) for c in colours]
    assert alpha[0] > alpha[2] > alpha[4]  # |Δ| 0.5 > 0.1 > 0


def test_kl_and_entropy_colours(g):
    k1 = [s for s, _ in spans(token_spans_html(g, 0, "k1"))]
    assert k1[0].startswith("background:rgba(232,163,61,")  # log π > log π_ref: orange
    assert k1[1].startswith("background:rgba(76,155,232,")  # log π < log π_ref: blue
    k3 = [s for s, _ in spans(token_spans_html(g, 0, "k3"))]
    assert all(s.startswith("background:rgba(232,163,61,") for s in k3)  # never negative: one hue
    ent = [s for s, _ in spans(token_spans_html(g, 0, "entropy"))]
    assert ent[1].endswith("0.70)") and ent[2] < ent[0]  # entropy 5.0 is full colour, 0.2 faint
    assert token_colour(None, "delta", 1.0) == "rgba(128,128,128,0.10)"


def test_hover_and_table_give_the_numbers(g):
    page = token_spans_html(g, 0, "delta")
    titles = re.findall(r"title='([^']*)'", page)
    assert "Δ log π +0.5000" in html.unescape(titles[0]) and "log π_ref -2.5000" in html.unescape(titles[0])
    assert "<details>" in page and page.count("<tr>") == 1 + len(PIECES)
    assert "␣great" in page  # the leading space of a token is shown in the table


def test_notes_use_the_completions_own_numbers(g):
    note = token_note_markdown(g, 0, "delta")
    assert "+0.5000" in note  # its advantage
    assert "Σ Δ log π = +1.4000" in note  # 0.5 - 0.2 + 0.1 + 1.0 + 0
    assert "3 went up, 1 went down" in note  # the last token did not move: it went neither way
    kl = token_note_markdown(g, 0, "k1")
    assert f"{g['completions'][0]['kl']:+.4f}" in kl and "β = 0.1" in kl
    ent = token_note_markdown(g, 0, "entropy")
    assert "mean **2.640**" in ent and "0.200" in ent


def test_a_completion_without_a_record_says_so():
    bare = group({"text": "x", "advantage": 0.1, "kl": 0.0, "kl_penalty": 0.0})
    assert "record_tokens" in token_spans_html(bare, 0, "delta")
    assert token_note_markdown(bare, 0, "delta") == ""


def test_beta_zero_has_no_kl_but_keeps_the_rest():
    c = completion([" a", " b"], [-1.0, -2.0], [-0.5, -2.5])
    page = token_spans_html(group(c, beta=0.0), 0, "k1")
    assert "β = 0" in page and len(spans(page)) == 2
    assert "β = 0" in token_note_markdown(group(c, beta=0.0), 0, "k3")
    assert tokens.token_kl(c) == [None, None]


def test_unknown_measure_falls_back_to_delta(g):
    assert token_spans_html(g, 0, "<script>") == token_spans_html(g, 0, "delta")


def test_k3_is_never_negative_and_k1_sums_to_kl(g):
    c = g["completions"][0]
    assert all(v >= 0 for v in tokens.token_kl(c, "k3"))
    assert tokens.total(tokens.token_kl(c, "k1")) == pytest.approx(c["kl"])
    assert tokens.k3(-1.0, -1.0) == 0.0 and tokens.k3(0.0, -800.0) > 0  # no overflow far from the reference


def test_per_token_k3_is_schulmans_with_the_ratio_ref_over_pi(g):
    """k3 = r - 1 - log r with r = pi_ref / pi, i.e. exp(x) - 1 - x for x = log pi_ref - log pi, worked out here per
    token; the inverted ratio (x = log pi - log pi_ref) is also never negative, so only the values tell them apart."""
    import math

    from rloo_demo.engine.diagnostics import kl_estimates

    c = g["completions"][0]
    expected = [math.exp(ref - logp) - 1 - (ref - logp) for logp, ref in zip(BEFORE, REF, strict=True)]
    inverted = [math.exp(logp - ref) - 1 - (logp - ref) for logp, ref in zip(BEFORE, REF, strict=True)]
    assert len(expected) == 5
    assert all(
        abs(e - i) > 1e-3 for e, i in zip(expected, inverted, strict=True) if e > 0
    )  # the input tells them apart
    assert tokens.token_kl(c, "k3") == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert tokens.values_for(c, "k3") == pytest.approx(expected, rel=1e-12, abs=1e-15)
    # by hand: log pi = -2, log pi_ref = -2.5 give x = -0.5, e^-0.5 - 0.5 = 0.10653;
    # log pi = -5, log pi_ref = -4 give x = 1, e - 2 (inverted: 0.14872 and 1/e)
    assert tokens.k3(-2.0, -2.5) == pytest.approx(0.1065306597126334, rel=1e-12)
    assert tokens.k3(-5.0, -4.0) == pytest.approx(math.e - 2, rel=1e-12)
    # the per-token values sum to the completion's k3 as the diagnostics compute it from log pi - log pi_ref
    assert tokens.total(tokens.token_kl(c, "k3")) == pytest.approx(
        kl_estimates([b - r for b, r in zip(BEFORE, REF, strict=True)])["k3"], rel=1e-12
    )


# ----------------------------------------------------------------------------- the batch heatmap


def test_heatmap_rows_are_completions_and_columns_positions():
    a = completion([" a", " b", " c"], [-1.0, -1.0, -1.0], [-1.0] * 3, [-2.0, -1.0, -0.5])
    b = completion([EVIL], [-1.0], [-1.0], [-1.0])
    fig = kl_heatmap([group(a, b)])
    trace = fig["data"][0]
    assert trace["type"] == "heatmap" and trace["y"] == ["P2 #1", "P2 #2"] and trace["x"] == [1, 2, 3]
    assert trace["z"] == [[1.0, 0.0, -0.5], [0.0, None, None]]  # k1 per token, blank past the end
    assert trace["zmid"] == 0 and trace["zmin"] == -trace["zmax"]
    assert "<img" not in json.dumps(trace["customdata"])  # plotly reads a few tags in hover text: escaped
    go.Figure(fig)  # valid for plotly's schema
    assert json.loads(json.dumps(fig, allow_nan=False)) == fig


def test_heatmap_without_kl_says_why():
    c = completion([" a"], [-1.0], [-1.0])
    fig = kl_heatmap([group(c, beta=0.0)])
    assert not fig["data"] and "β = 0" in fig["layout"]["annotations"][0]["text"]
    assert "β = 0" in kl_heatmap_note([group(c, beta=0.0)])


def test_heatmap_note_says_where_the_kl_lives():
    start = completion([" a", " b", " c", " d"], [-1.0] * 4, [-1.0] * 4, [-3.0, -1.0, -1.0, -1.0])
    note = kl_heatmap_note([group(start)])
    assert "**100%** sits in the first quarter" in note and "**0%** in the last quarter" in note


# ----------------------------------------------------------------------------- the probe


def probe_result():
    samples = lambda *rs: [{"text": f"{EVIL} {r}", "reward": r} for r in rs]  # noqa: E731
    return {
        "prompt": "This <b>movie</b> was",
        "seed": 3,
        "num_samples": 2,
        "snapshot_every": 25,
        "kept": 8,
        "steps": [
            {"step": 0, "label": "base policy (step 0)", "samples": samples(-0.5, 0.1), "mean_reward": -0.2},
            {"step": 25, "label": "step 25", "samples": samples(0.3, 0.5), "mean_reward": 0.4},
            {"step": 50, "label": "final (step 50)", "samples": samples(0.6, 0.9), "mean_reward": 0.75},
        ],
    }


def test_probe_lays_the_steps_side_by_side():
    page = probe_html(probe_result())
    headers = re.findall(r"<th>(.*?)</th>", page)
    assert headers[0] == "#" and headers[1].startswith("base policy (step 0)") and "mean reward +0.750" in headers[3]
    rows = re.findall(r"<tr>(.*?)</tr>", page)[1:]
    assert len(rows) == 2 and all(r.count("<td") == 4 for r in rows)
    assert "<img" not in page and "<b>movie" not in page and "&lt;b&gt;movie" in page
    assert "rloo-neg" in rows[0] and "rloo-pos" in rows[1]  # tinted by each sample's reward
    note = probe_note(probe_result())
    assert "seed 3" in note and "**-0.200**" in note and "**+0.750**" in note and "25 here" in note


# ----------------------------------------------------------------------------- store/tokens against hand values


def test_a_column_keeps_finite_numbers_only_and_a_record_needs_both_lists():
    c = {"token_texts": ["a", "b", "c", "d", "e"], "token_logp": [-1, True, "x", float("nan"), -0.5]}
    assert tokens.column(c, "token_logp") == [-1.0, None, None, None, -0.5]
    assert tokens.column(c, "token_entropy") == [None] * 5  # missing: as long as the texts, all unknown
    assert tokens.has_tokens(c)
    assert not tokens.has_tokens({"token_texts": ["a"], "token_logp": None})
    assert not tokens.has_tokens({"token_texts": "a", "token_logp": [-1.0]})
    assert not tokens.has_tokens({"token_texts": ["a", "b"], "token_logp": [-1.0]})


def test_k3_clamps_its_log_ratio_at_700_and_a_sum_of_nothing_is_unknown():
    assert tokens.k3(-1000.0, 0.0) == tokens.k3(-700.0, 0.0) == pytest.approx(__import__("math").expm1(700) - 700)
    assert tokens.total([None, None]) is None and tokens.total([]) is None
    assert tokens.total([None, 0.0, -2.5]) == -2.5


def test_kl_matrix_labels_default_group_and_uses_the_estimator_asked():
    c = completion([" a", " b"], [-1.0, -2.0], [-1.0, -2.0], ref=[-1.5, -1.0])
    labels, rows = tokens.kl_matrix([{"completions": [c, {"text": "no record"}, c]}], "k3")
    assert labels == ["P1 #1", "P1 #3"]  # no 'group': the first prompt; the completion without a record is left out
    assert rows == [[tokens.k3(-1.0, -1.5), tokens.k3(-2.0, -1.0)]] * 2
    assert rows[0] != tokens.token_kl(c, "k1")
    assert tokens.kl_matrix([]) == ([], [])


def test_kl_location_against_shares_worked_by_hand():
    # |k1| of three completions: 8 tokens (quarter 2), 2 tokens (quarter 1), 1 token (quarter 1: no last quarter)
    rows = [[1, -2, 3, 4, 5, 6, 7, -8], [0.5, None, -0.5], [2.0]]
    where = tokens.kl_location(rows)
    grand = 36 + 1 + 2
    assert where == {
        "start_share": pytest.approx((1 + 2 + 0.5 + 2) / grand),
        "end_share": pytest.approx((7 + 8 + 0.5) / grand),
        "top_share": pytest.approx(8 / grand),  # 11 tokens: the top 10% is one token
        "top_tokens": 1,
        "tokens": 11,
    }
    twenty = tokens.kl_location([[float(v) for v in range(1, 21)]])
    assert twenty["top_tokens"] == 2 and twenty["top_share"] == pytest.approx((20 + 19) / 210)
    assert tokens.kl_location([[0.0, 0.0]]) is None and tokens.kl_location([[None]]) is None
    assert tokens.kl_location([[0.25, 0.5]])["tokens"] == 2  # a total under 1 is still a KL
