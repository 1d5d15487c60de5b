"""What the Rollouts tab draws for a view (``ui/tabs/rollouts_view.py``), on a controller stand-in that holds three
steps of two groups each: every component's new value against the pure views called here on the group the test
picks itself, so a view of the wrong step, group, run or completion, or a lost outline, differs.

``python -m pytest tests/ui/test_rollouts_view.py``
"""

import json
from types import SimpleNamespace

import pytest
from factories import group

from rloo_demo import i18n
from rloo_demo.ui.tabs import rollouts_view as rv
from rloo_demo.ui.views import (
    arithmetic_markdown,
    group_label,
    group_rows,
    groups_html,
    kl_heatmap_note,
    shown_rows,
    token_note_markdown,
    token_spans_html,
    whatif_markdown,
)

UI = SimpleNamespace(
    **{
        name: name
        for name in (
            "run",
            "step",
            "groups",
            "group",
            "shown",
            "shown_run",
            "heatmap",
            "heatmap_note",
            "group_plot",
            "table",
            "whatif",
            "selected",
            "arithmetic",
            "tokens",
            "token_note",
            "follow",
        )
    }
)
STEPS = [3, 6, 9]


class Runs:
    """Rollouts of run "r" at steps 3, 6, 9: two groups a step, K = 3 then 4, advantages that differ by step."""

    def __init__(self, steps=STEPS):
        self.steps = list(steps)
        self.groups = {s: [group(s, 0, [0.5 * s, -0.2, -0.3]), group(s, 1, [0.1, 0.4, -0.1, -s / 10])] for s in steps}
        self.asked = []

    def rollout_steps(self, name):
        return list(self.steps) if name == "r" else []

    def rollouts(self, name, step):
        self.asked.append((name, step))
        if name != "r" or not self.steps:
            return []
        return self.groups.get(step if step is not None else self.steps[-1], [])

    def list_runs(self):
        return [{"name": "r", "label": "baseline"}, {"name": "q", "label": ""}, {"name": "p"}]


def label_of(g, locale="en"):
    return group_label(g, locale)


def test_a_step_view_draws_the_chosen_group_of_that_step():
    runs = Runs()
    groups = runs.groups[6]
    chosen = groups[1]
    out = rv.step_view(UI, runs, "r", 6, label_of(chosen, "ru"), locale="ru")
    assert out["run"].choices == [("baseline · r", "r"), ("q", "q"), ("p", "p")] and out["run"].value == "r"
    assert (out["step"].minimum, out["step"].maximum, out["step"].value) == (3, 9, 6)
    assert out["groups"] == groups_html(groups, "ru", selected=None)
    assert out["group"].choices == [(label_of(g, "ru"), label_of(g, "ru")) for g in groups]
    assert out["group"].value == label_of(chosen, "ru")
    assert (out["shown"], out["shown_run"]) == (6, "r")
    assert out["heatmap_note"] == kl_heatmap_note(groups, "ru")
    headers, rows = group_rows(chosen, text_chars=rv.SIDE_TEXT_CHARS, locale="ru")
    # the numbers as the groups tables print them (sign, 3 decimals), not the 4 raw decimals of the rows
    assert out["table"].value == {"headers": headers, "data": shown_rows(rows), "metadata": None}
    assert out["table"].value["data"][0][2:] == [f"{v:+.3f}" for v in rows[0][2:]]
    assert out["whatif"] == whatif_markdown(groups, 1, "ru")
    plotted = json.loads(out["group_plot"].plot)
    assert plotted["data"] and "prompt 1 of step 6" in json.dumps(plotted)


def test_an_unknown_group_label_shows_the_first_group_and_an_outline_needs_the_same_step():
    runs = Runs()
    groups = runs.groups[3]
    selected = {"step": 3, "index": 2, "name": "r"}
    out = rv.step_view(UI, runs, "r", 3, "no such label", selected=selected)
    assert out["group"].value == label_of(groups[0])
    assert out["groups"] == groups_html(groups, "en", selected=(0, 2)) != groups_html(groups, "en")
    other = rv.step_view(UI, runs, "r", 3, None, selected={"step": 6, "index": 2})
    assert other["groups"] == groups_html(groups, "en")  # a completion of another step: no outline
    assert rv.step_view(UI, runs, "r", 3, None, selected="x")["groups"] == groups_html(groups, "en")


def test_a_step_without_groups_empties_the_groups_boxes_and_the_slider_stays_usable():
    runs = Runs(steps=[4])
    runs.groups = {}
    out = rv.step_view(UI, runs, "r", 4, None)
    assert (out["group_plot"], out["table"], out["whatif"]) == (None, None, "")
    assert out["group"].choices == [] and out["group"].value is None
    assert (out["step"].minimum, out["step"].maximum) == (4, 5)  # one step: gradio needs a maximum above it
    none = rv.step_view(UI, Runs(steps=[]), "gone", None, None)
    assert (none["step"].minimum, none["step"].maximum, none["step"].value) == (1, 2, 1)  # gradio's: the minimum
    assert none["run"].choices[0] == ("gone", "gone")  # a run not listed yet is kept in the picker


def test_the_run_picker_keeps_a_current_run_it_does_not_list_first():
    runs = Runs()
    assert rv.run_choices(runs) == [("baseline · r", "r"), ("q", "q"), ("p", "p")]
    assert rv.run_choices(runs, "q") == rv.run_choices(runs)
    assert rv.run_choices(runs, "new")[0] == ("new", "new")
    assert rv.run_choices(runs, "") == rv.run_choices(runs, 7) == rv.run_choices(runs)


def test_the_latest_view_is_the_newest_step_with_nothing_selected():
    runs = Runs()
    out = rv.latest_view(UI, runs, "r", locale="ru")
    assert out["shown"] == 9 and out["groups"] == groups_html(runs.groups[9], "ru")
    assert out["selected"] is None and out["arithmetic"] == i18n.t("ru", "common.select_row")
    assert out["tokens"] == rv.no_token_selection("ru") and out["token_note"] == ""
    assert rv.no_token_selection("ru") == f"<p class='rloo-empty'>{i18n.t('ru', 'rollouts.no_token_selection')}</p>"
    empty = rv.latest_view(UI, Runs(steps=[]), "r")
    assert empty["shown"] == -1 and (empty["step"].minimum, empty["step"].maximum) == (1, 2)


def test_a_tick_draws_the_newest_step_only_when_following_and_not_yet_shown():
    runs = Runs()
    assert rv.render_latest(UI, runs, "r", None, True, 9) == {}
    assert rv.render_latest(UI, runs, "r", None, False, 6) == {}
    assert rv.render_latest(UI, Runs(steps=[]), "r", None, True, -1) == {}
    out = rv.render_latest(UI, runs, "r", None, True, 6, "ru")
    assert out["shown"] == 9 and out["groups"] == groups_html(runs.groups[9], "ru") and "selected" not in out


@pytest.mark.parametrize("index", [None, True, -1, 3, "1", 1.0])
def test_a_selection_that_names_no_completion_is_no_selection(index):
    runs = Runs()
    g = runs.groups[6][0]  # K = 3
    selected = {"name": "r", "step": 6, "label": label_of(g), "index": index}
    assert rv.completion_of(runs, "r", 6, label_of(g), index) == (None, None)
    assert rv.token_view(runs, selected, "delta") == (rv.no_token_selection(), "")
    assert rv.selected_view(UI, runs, selected, "delta") == rv.unselected(UI)


def test_the_selected_completion_is_drawn_outlined_with_its_arithmetic_and_tokens():
    runs = Runs()
    g = runs.groups[6][1]
    selected = {"name": "r", "step": 6, "label": label_of(g, "ru"), "index": 3}
    assert rv.completion_of(runs, "r", 6, label_of(g, "ru"), 3, "ru") == (g, 3)
    out = rv.selected_view(UI, runs, selected, "kl", "ru")
    assert out["arithmetic"] == arithmetic_markdown(g, 3, "ru")
    assert out["tokens"] == token_spans_html(g, 3, "kl", "ru")
    assert out["token_note"] == token_note_markdown(g, 3, "kl", "ru")
    assert out["follow"] is False and out["shown"] == 6 and out["group"].value == label_of(g, "ru")
    assert out["groups"] == groups_html(runs.groups[6], "ru", selected=(1, 3))
    assert rv.token_view(runs, "not a dict", "kl", "ru") == (rv.no_token_selection("ru"), "")
    assert rv.token_view(runs, selected, "kl", "ru") == (out["tokens"], out["token_note"])


def test_group_of_picks_by_label_and_says_when_there_is_none():
    runs = Runs()
    groups = runs.groups[3]
    labels = [label_of(g) for g in groups]
    assert rv.group_of(groups, labels[1]) == (groups[1], labels, labels[1])
    assert rv.group_of(groups, "x") == (groups[0], labels, labels[0])
    assert rv.group_of([], labels[0]) == (None, [], None)


# ------------------------------------------------------------------ the page's language and the table's cut


class CountingRuns(Runs):
    """``Runs`` that counts its step lists: each is a read the visitor's rate pays for."""

    def __init__(self, steps=STEPS):
        super().__init__(steps)
        self.listed = 0

    def rollout_steps(self, name):
        self.listed += 1
        return super().rollout_steps(name)


def test_the_step_views_figures_texts_and_table_are_in_the_pages_language_and_the_table_cuts_long_texts():
    from rloo_demo.i18n import localize_figure
    from rloo_demo.ui import plots
    from rloo_demo.ui.common import as_plot

    runs = Runs()
    runs.groups[6] = groups = [group(6, 0, [0.5, -0.2, -0.3]), group(6, 1, [0.1, 0.4, -0.5])]  # one K: a what-if
    chosen = groups[1]
    chosen["completions"][0]["text"] = "a long completion " * 10  # longer than the side table shows
    out = rv.step_view(UI, runs, "r", 6, label_of(chosen, "ka"), locale="ka")
    figures = (("heatmap", lambda: plots.kl_heatmap(groups)), ("group_plot", lambda: plots.group_figure(chosen)))
    for key, figure in figures:
        assert out[key].plot == as_plot(localize_figure(figure(), "ka")).plot  # localized in place: a fresh one each
        assert out[key].plot != as_plot(localize_figure(figure(), "en")).plot, key
    headers, rows = group_rows(chosen, text_chars=rv.SIDE_TEXT_CHARS, locale="ka")
    assert out["table"].value["data"] == shown_rows(rows) and out["table"].value["headers"] == headers
    assert rows != group_rows(chosen, locale="ka")[1]  # the whole text would not fit the narrow table
    assert out["whatif"] == whatif_markdown(groups, 1, "ka") != whatif_markdown(groups, 1, "en")


def test_a_step_view_takes_the_steps_it_is_given_and_the_latest_views_list_them_once():
    runs = CountingRuns()
    out = rv.step_view(UI, runs, "r", 6, None, steps=[2, 6, 12])
    assert (out["step"].minimum, out["step"].maximum) == (2, 12) and runs.listed == 0
    g = runs.groups[9][1]
    latest = rv.latest_view(UI, runs, "r", label_of(g, "ka"), "ka")
    assert latest["group"].value == label_of(g, "ka") and runs.listed == 1
    tick = rv.render_latest(UI, runs, "r", label_of(g, "ka"), True, 6, "ka")
    assert tick["group"].value == label_of(g, "ka") and runs.listed == 2


def test_the_first_completion_of_a_group_can_be_selected_and_its_tokens_follow_the_measure():
    from factories import AFTER, BEFORE, PIECES, REF, completion

    runs = Runs()
    g = runs.groups[6][0]
    g["completions"][0].update(completion(PIECES, BEFORE, AFTER, REF, [3.0, 5.0, 0.2, 4.0, 1.0]))
    selected = {"name": "r", "step": 6, "label": label_of(g, "ka"), "index": 0}
    assert rv.completion_of(runs, "r", 6, label_of(g, "ka"), 0, "ka") == (g, 0)
    for measure in ("k3", "entropy"):
        spans, note = rv.token_view(runs, selected, measure, "ka")
        assert spans == token_spans_html(g, 0, measure, "ka") != token_spans_html(g, 0, "delta", "ka")
        assert note == token_note_markdown(g, 0, measure, "ka") != token_note_markdown(g, 0, measure, "en")
    missing = {"name": "r", "step": 6, "label": label_of(g, "ka"), "index": 7}
    assert rv.token_view(runs, missing, "k3", "ka") == (rv.no_token_selection("ka"), "")
    assert rv.no_token_selection("ka") != rv.no_token_selection("en")
    assert rv.selected_view(UI, runs, missing, "k3", "ka") == rv.unselected(UI, "ka") != rv.unselected(UI, "en")
