"""The Rollouts tab without a browser: a zero advantage drawn neutral, the selected row
outlined, the run picker and the Runs tab's rows opening a run, a selection that stays pinned while ticks bring new
steps, and the primer at the top. Each expectation is computed here from the run's own folder or numbers.

``python -m pytest tests/ui/test_rollouts.py`` (a few seconds, no model).
"""

import json
import re
from types import SimpleNamespace

import gradio as gr
import pytest
from apputil import value
from factories import group

from rloo_demo.config import RunConfig
from rloo_demo.i18n import LOCALES, load
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.plots import NEGATIVE, NEUTRAL, POSITIVE, group_figure
from rloo_demo.ui.views import arithmetic_markdown, group_label, groups_html, token_spans_html, whatif_markdown

NEW_KEYS = ("rollouts.run", "rollouts.run_info", "rollouts.follow_info", "rollouts.primer_summary")
NEW_KEYS += ("rollouts.primer_more", "groups.no_signal")


def expected_class(advantage: float) -> str:
    """The table prints round(a, 4) with 3 decimals: its colour is the sign of that printed number."""
    printed = float(f"{round(advantage, 4):+.3f}")
    return "rloo-pos" if printed > 0 else "rloo-neg" if printed < 0 else "rloo-zero"


def test_a_zero_advantage_is_neutral_in_the_table_and_the_chart():
    tiny = [0.0004, -0.0001, -0.0003, 0.0]  # prints +0.000, -0.000, -0.000, +0.000
    real = [0.3, -0.1, -0.2, 0.0]
    groups = [group(1, 0, tiny), group(1, 1, real)]
    page = groups_html(groups)
    rows = re.findall(r"<tr class='(rloo-\w+)'", page)
    assert rows == [expected_class(a) for a in tiny + real]
    assert rows[:4] == ["rloo-zero"] * 4 and rows[4:] == ["rloo-pos", "rloo-neg", "rloo-neg", "rloo-zero"]
    # the no-signal group says so, once, in its own heading
    assert page.count(load("en")["groups.no_signal"]) == 1
    assert page.index(load("en")["groups.no_signal"]) < page.index("prompt 1 of step 1")
    colour = {"rloo-pos": POSITIVE, "rloo-neg": NEGATIVE, "rloo-zero": NEUTRAL}
    for g, classes in ((groups[0], rows[:4]), (groups[1], rows[4:])):
        bars = next(t for t in group_figure(g)["data"] if t["type"] == "bar")["marker"]["color"]
        assert bars == [colour[c] for c in classes]


def test_the_selected_completion_is_the_one_row_outlined():
    groups = [group(4, 0, [0.1, -0.1, 0.2, -0.2]), group(4, 1, [0.3, -0.3, 0.1, -0.1])]
    page = groups_html(groups, selected=(1, 2))
    marked = re.findall(
        r"<tr class='rloo-\w+' data-selected='1'[^>]*><td class='rloo-idx'>(\d+)</td><td class='rloo-text'>([^<]*)",
        page,
    )
    assert marked == [("3", "r s4 g1 c2")]
    assert "data-selected" not in groups_html(groups)


def rows_of(page: str) -> list[dict]:
    """Each row of the groups tables: its data-pick, its colour's alpha (None: no colour of its own), its class."""
    out = []
    for attrs in re.findall(r"<tr ([^>]*)>", page):
        if "data-pick" not in attrs:
            continue
        colour = re.search(r"background-color: rgba\((\d+), (\d+), (\d+), ([\d.]+)\)", attrs)
        out.append(
            {
                "pick": re.search(r"data-pick='([^']*)'", attrs).group(1),
                "class": re.search(r"class='([^']*)'", attrs).group(1),
                "rgb": tuple(int(x) for x in colour.groups()[:3]) if colour else None,
                "alpha": float(colour.group(4)) if colour else None,
            }
        )
    return out


def test_a_rows_colour_is_as_strong_as_its_advantage_against_its_groups_largest():
    """The alpha is 0.35·|A|/max|A| of the row's own group (two groups with different largest |A|: a step-wide
    scale would differ), a -0.001 beside a -0.7 is pale, not full pink; a row printed ±0.000 has no colour of its
    own (the stylesheet's grey); the hue is the sign's."""
    first, second = [0.5, -0.25, 0.1, -0.35], [0.7, -0.001, 0.0004, -0.6996]
    rows = rows_of(groups_html([group(3, 0, first), group(3, 1, second)]))
    assert [r["pick"] for r in rows] == [f"3:{g}:{i}" for g in (0, 1) for i in range(4)]
    for row, a, largest in zip(rows, first + second, [0.5] * 4 + [0.7] * 4, strict=True):
        if f"{round(a, 4):+.3f}" in ("+0.000", "-0.000"):
            assert row["alpha"] is None and row["class"] == "rloo-zero", row
            continue
        assert row["alpha"] == pytest.approx(0.35 * abs(a) / largest, abs=5e-4), (row, a)
        assert row["rgb"] == ((61, 190, 139) if a > 0 else (217, 83, 79)), row
    assert rows[5]["alpha"] <= 0.001 and rows[5]["class"] == "rloo-neg"  # -0.001: red, and as pale as can be
    assert rows[0]["alpha"] == rows[4]["alpha"] == 0.35  # each group's largest at full strength


def test_each_number_cell_carries_its_columns_name_for_the_phones_cards_and_headers_break_at_underscores():
    g = group(2, 0, [0.2, -0.2])
    g["weights"] = {"vader_compound": 1.0, "length_penalty": 0.5}
    for c in g["completions"]:
        c["scores"]["length_penalty"] = -0.1
    page = groups_html([g], "ru")
    headers = [h for h in re.findall(r"<th>(.*?)</th>", page)]
    assert headers[2:4] == ["vader_<wbr>compound", "length_<wbr>penalty"]  # a narrow column breaks after the _
    captions = re.findall(r"<span class='rloo-cap'>(.*?)</span><span class='rloo-val'>([^<]*)</span>", page)
    names = ["vader_compound", "length_penalty", "−β·KL"] + [load("ru")[f"col.{k}"] for k in ADVANTAGE_COLUMNS]
    assert [c for c, _ in captions] == names * 2
    assert [v for _, v in captions][:6] == ["+0.200", "-0.100", "+0.000", "+0.200", "+0.000", "+0.200"]
    assert page.count("class='rloo-num rloo-adv'") == 2  # the advantage cell: the card's first line on a phone


ADVANTAGE_COLUMNS = ("shaped_reward", "baseline", "advantage")


def test_the_side_tables_rows_print_their_numbers_as_the_groups_tables_do():
    from rloo_demo.ui.views import group_rows, shown_rows

    g = group(2, 0, [0.123456, -0.5, 0.0004])
    _, rows = group_rows(g)
    shown = shown_rows(rows)
    page = groups_html([g])
    printed = re.findall(r"<span class='rloo-val'>([^<]*)</span>", page)
    assert [v for row in shown for v in row[2:]] == printed
    assert shown[0][:2] == [1, "r s2 g0 c0"] and shown[0][-1] == "+0.123" and shown[2][-1] == "+0.000"


@pytest.mark.parametrize(
    "data, picked",
    [
        ({"pick": "30:1:2"}, (30, 1, 2)),
        ({"pick": "1:0:0"}, (1, 0, 0)),
        ({"pick": "0:1:2"}, None),  # step 0 is not a step
        ({"pick": "30:1"}, None),
        ({"pick": "30:1:2:4"}, None),
        ({"pick": "-1:0:0"}, None),
        ({"pick": "3:0:99999"}, None),
        ({"pick": " 3:0:1"}, None),
        ({"pick": 3}, None),
        ({"pick": ["3", "0", "1"]}, None),
        ({"index": [1, 0]}, None),
        ("30:1:2", None),
        (None, None),
    ],
)
def test_a_clicked_row_is_read_only_from_its_step_group_and_index(data, picked):
    from rloo_demo.ui.tabs.rollouts_view import picked_row

    assert picked_row(data) == picked


@pytest.fixture
def tab(tmp_path):
    """The Rollouts tab built alone, on two runs written by hand: 'older' (steps 1–2) and 'newer' (steps 1–3)."""
    from rloo_demo.ui.common import Page
    from rloo_demo.ui.tabs import rollouts as rollouts_tab

    for name, steps in (("older", 2), ("newer", 3)):
        run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=name))
        for step in range(1, steps + 1):
            run.append_rollouts(step, [group(step, 0, [0.2, -0.1, 0.3, -0.4], name), group(step, 1, [0.1] * 4, name)])
        run.set_status("finished")
    controller = Controller(Runner(str(tmp_path), watchdog=False))
    with gr.Blocks() as demo:
        page = Page(controller, gr.BrowserState(""), gr.State(None), gr.State("rollouts"), gr.State("en"))
        runs_table = gr.Dataframe()
        with gr.Tabs():
            built = rollouts_tab.build(page)
        ui, tab_el = built.ui, built.element
        rollouts_tab.wire_open_run(page, ui, runs_table)
    handlers = {fn.fn.__name__: fn.fn for fn in demo.fns.values() if fn.fn is not None}
    yield SimpleNamespace(ui=ui, controller=controller, fn=handlers, folder=tmp_path, demo=demo, tab=tab_el)
    controller.close()


def on_disk(folder, name) -> dict[int, list[dict]]:
    """A run's prompt groups by step, read from its rollouts.jsonl."""
    by_step: dict[int, list[dict]] = {}
    for line in (folder / name / "rollouts.jsonl").read_text(encoding="utf-8").splitlines():
        g = json.loads(line)
        by_step.setdefault(g["step"], []).append(g)
    return by_step


def select(index, row_value=None):
    return gr.SelectData(None, {"index": [index, 0], "value": "x", "row_value": row_value})


def test_a_click_then_a_tick_from_before_it_keeps_the_clicked_completion(tab):
    """Following, the page shows step 2 of 'newer'; a completion is clicked; a tick sent before the click draws
    step 3. The pin draws step 2 again: the outlined row, the arithmetic and the token view name the clicked one."""
    ui, fn = tab.ui, tab.fn
    steps = on_disk(tab.folder, "newer")
    g = steps[2][0]
    label = group_label(g)
    out = fn["pick_completion"]("newer", 2, label, "delta", "en", "newer", evt=select(2))
    selected = out[ui.selected]
    assert selected == {"name": "newer", "step": 2, "label": label, "index": 2}
    assert out[ui.arithmetic] == arithmetic_markdown(g, 2)
    from rloo_demo.ui.tabs.rollouts import render_latest  # the Rollouts part of app.py's tick

    moved = render_latest(ui, tab.controller, "newer", label, True, 2)
    assert moved[ui.shown] == 3  # the tick's step 3 lands after the click's answer
    pinned = fn["pin_view"](selected, "newer", 3, 3, label, False, "delta", "en", "newer")
    assert pinned[ui.shown] == 2 and value(pinned[ui.step]) == 2 and pinned[ui.follow] is False
    assert pinned[ui.arithmetic] == arithmetic_markdown(g, 2) and "(step 2)" in pinned[ui.arithmetic]
    assert pinned[ui.groups] == groups_html(steps[2], selected=(0, 2))
    table = value(pinned[ui.table])
    assert table["data"][2][1] == g["completions"][2]["text"]  # the side table's row 3 is the clicked completion
    assert pinned[ui.tokens] == token_spans_html(g, 2, "delta")
    # the selection shown where it was drawn: only its row is outlined, nothing else moves
    again = fn["pin_view"](selected, "newer", 2, 2, label, False, "delta", "en", "newer")
    assert set(again) == {ui.groups} and again[ui.groups] == groups_html(steps[2], selected=(0, 2))
    # nothing selected and nothing to redraw: an answer that changes nothing
    idle = fn["pin_view"](None, "newer", 3, 3, label, True, "delta", "en", "newer")
    assert list(idle) == [ui.shown] and value(idle[ui.shown]) is None


def test_every_choice_stops_following_and_ticking_follow_goes_back_to_the_latest(tab):
    ui, fn = tab.ui, tab.fn
    steps = on_disk(tab.folder, "newer")
    out = fn["pick_step"]("newer", 1, None, "en", "newer")
    assert out[ui.follow] is False and out[ui.shown] == 1 and out[ui.selected] is None
    assert out[ui.groups] == groups_html(steps[1])
    for trigger in ("input", "select"):  # the group list and the table untick Follow in the browser, at once
        unfollow = [
            d
            for d in tab.demo.config["dependencies"]
            if d["js"] == "() => false" and d["outputs"] == [ui.follow._id] and d["targets"][0][1] == trigger
        ]
        assert unfollow, trigger
    back = fn["follow_again"](True, "newer", None, "en")
    assert back[ui.follow] is True and back[ui.shown] == 3 and back[ui.selected] is None
    assert back[ui.groups] == groups_html(steps[3]) and back[ui.arithmetic] == load("en")["common.select_row"]
    assert fn["follow_again"](False, "newer", None, "en") == {ui.follow: False}


def test_the_run_picker_shows_the_chosen_runs_rollouts(tab):
    ui, fn = tab.ui, tab.fn
    choices = fn["refresh_runs"](None, None, "newer", "en")[ui.run]
    assert value(choices) == "newer" and [c[1] for c in choices.choices] == ["newer", "older"]  # newest first
    older = on_disk(tab.folder, "older")
    out = fn["pick_run"]("older", "newer", True, "en")
    assert out[ui.groups] == groups_html(older[2]) and "older s2 g0 c0" in out[ui.groups]
    assert out[ui.shown] == 2 and out[ui.shown_run] == "older" and value(out[ui.run]) == "older"
    assert out[ui.follow] is False  # another run than the watched one: the tick must not take the view back
    assert fn["pick_run"]("newer", "newer", True, "en")[ui.follow] is True
    for bad in ("../etc", "<b>x</b>", None, 3):
        refused = fn["pick_run"](bad, "newer", True, "en")
        assert ui.groups not in refused and ui.arithmetic in refused, bad
    # the next events read the run shown: a completion of 'older' is explained from 'older'
    g = older[2][0]
    clicked = fn["pick_completion"]("older", 2, group_label(g), "delta", "en", "newer", evt=select(1))
    assert clicked[ui.arithmetic] == arithmetic_markdown(g, 1)


def test_a_row_of_the_runs_table_opens_that_run(tab):
    ui, fn = tab.ui, tab.fn
    older = on_disk(tab.folder, "older")
    out = fn["open_run"]("newer", True, "en", evt=select(1, ["older", "finished", "2/2"]))
    assert out[ui.groups] == groups_html(older[2]) and out[ui.shown_run] == "older" and out[ui.follow] is False
    refused = fn["open_run"]("newer", True, "en", evt=select(0, ["../../etc/passwd"]))
    assert ui.groups not in refused
    switch = [d for d in tab.demo.config["dependencies"] if d["js"] and "data-tab-id" in d["js"]]
    assert len(switch) == 1 and '"rollouts"' in switch[0]["js"]  # then the browser shows the Rollouts tab


def test_the_primer_is_the_first_thing_on_the_tab(tab):
    first = tab.tab.children[0]
    assert first.elem_id == "rollouts-primer"
    summary = first.children[0]
    assert summary.elem_id == "rollouts-primer-summary" and str(summary.value) and summary.visible is not False
    for locale in LOCALES:
        text = load(locale)
        assert all(text.get(k) for k in NEW_KEYS), locale
        assert text["rollouts.explanation"].split("\n")[0].removeprefix("#### ") in text["rollouts.primer_summary"]


def test_a_tick_that_drew_the_watched_run_over_a_picked_one_is_undone(tab):
    """The race the browser test met: a tick sent (following) before the visitor picked another run came back after
    the pick and drew the watched run's newest step over it. The pin draws the picked run back; a pick of the
    watched run while following, and ticking Follow again, clear what was picked."""
    ui, fn = tab.ui, tab.fn
    picked = fn["pick_run"]("older", "newer", True, "en")
    assert picked[ui.picked] == "older" and picked[ui.follow] is False
    # the stale tick's view: 'newer' step 3 shown, nothing selected, not following, 'older' still picked
    undone = fn["pin_view"](None, "newer", 3, 3, None, False, "delta", "en", "newer", "older")
    assert undone[ui.shown_run] == "older" and undone[ui.shown] == 2 and undone[ui.follow] is False
    assert undone[ui.groups] == groups_html(on_disk(tab.folder, "older")[2])
    # nothing to undo when the picked run is the one shown, or when the page follows
    assert fn["pin_view"](None, "older", 2, 2, None, False, "delta", "en", "newer", "older") == {ui.shown: gr.skip()}
    assert ui.shown_run not in fn["pin_view"](None, "newer", 3, 3, None, True, "delta", "en", "newer", None)
    assert fn["pick_run"]("newer", "newer", True, "en")[ui.picked] is None
    assert fn["follow_again"](True, "newer", None, "en")[ui.picked] is None


def test_a_click_on_a_row_of_the_groups_tables_selects_that_completion_and_shows_its_group(tmp_path):
    """The click event's data names (step, group, index): that completion's arithmetic, the selection the page
    keeps, and its group beside it (the group picker, the side table, the what-if table), whatever group the picker
    showed; anything else a client sends selects nothing."""
    from apputil import app_for

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="clicked"))
    for step in (2, 3):
        run.append_rollouts(step, [group(step, 0, [0.2, -0.2, 0.1, -0.1]), group(step, 1, [0.3, -0.1, 0.4, -0.6])])
    run.set_status("finished")
    controller, demo, handler, component = app_for(tmp_path)
    try:
        pick = handler["rollouts_row"]
        out = pick("clicked", "delta", "ru", None, evt=gr.EventData(None, {"pick": "2:1:3"}))
        by_id = {getattr(k, "elem_id", None): v for k, v in out.items()}
        step2 = controller.rollouts("clicked", 2)
        assert by_id["arithmetic"] == arithmetic_markdown(step2[1], 3, "ru")
        selected = next(v for k, v in out.items() if isinstance(v, dict) and "index" in v)
        assert selected == {"name": "clicked", "step": 2, "label": group_label(step2[1], "ru"), "index": 3}
        assert by_id["group-table"].value["data"][3][-1] == f"{step2[1]['completions'][3]['advantage']:+.3f}"
        groups_picker = next(v for k, v in out.items() if isinstance(v, gr.Dropdown))
        assert groups_picker.value == group_label(step2[1], "ru")
        assert by_id["whatif"] == whatif_markdown(step2, 1, "ru") != whatif_markdown(step2, 0, "ru")
        select_row = load("ru")["common.select_row"]
        for data in ({"pick": "9:0:0"}, {"pick": "2:5:0"}, {"pick": "2:1:4"}, {"pick": "x"}, {}, None):
            out = pick("clicked", "delta", "ru", None, evt=gr.EventData(None, data))
            assert list(out.values()) == [select_row], data  # the arithmetic says to pick one; nothing else moves
        assert list(pick("elsewhere", "delta", "ru", None, evt=None).values()) == [select_row]
    finally:
        controller.close()
