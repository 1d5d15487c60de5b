"""The page's own handlers for what issue 24 left (items 3, 5, 7, 8, 9): a long prompt in Compare and the probe
gets a note or a refusal in the page's language; the Runs tab offers rename and delete only for a run the visitor
may manage; a language switch writes the Runs and Compare tables again; a warning's button opens the step it fired
at on the Rollouts tab; an empty plot's note is broken into lines that fit a phone.

Each handler is the one gradio calls (``demo.fns``), called directly, with what a browser sends.

``python -m pytest tests/test_page_followups.py`` (about half a minute: it samples from the embedded policy).
"""

import json
from dataclasses import replace

import gradio as gr
import pytest
from test_input_refusals import LONG, expected_cut, finished_run
from test_rollouts_views import group, value
from test_run_summary import records

from rloo_demo import i18n
from rloo_demo.config import RunConfig
from rloo_demo.server.gates import owner_digest
from rloo_demo.server.limits import LOCAL, PUBLIC
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.plots.base import NOTE_CHARS

LIMITS = replace(LOCAL, sampling_per_minute=None)
HUGE = "This movie was " + "x" * (25_000 - len("This movie was "))  # the 25,000 characters


def app_for(root, limits=LIMITS):
    from rloo_demo.ui.app import build_app

    controller = Controller(Runner(str(root), watchdog=False, limits=limits))
    demo = build_app(controller)
    handler = {fn.api_name: fn.fn for fn in demo.fns.values() if fn.api_name}
    component = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    return controller, demo, handler, component


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    finished_run(root)
    controller, demo, handler, component = app_for(root)
    yield controller, demo, handler, component
    controller.close()


def cut_note(locale, tokens, dropped) -> str:
    return i18n.t(locale, "prompt.cut", tokens=f"{tokens:,}", context="256", dropped=f"{dropped:,}")


def refusal(locale, chars) -> str:
    return i18n.t(locale, "prompt.too_long", chars=f"{chars:,}", limit=f"{LIMITS.max_prompt_chars:,}")


# ----------------------------------------------------------------------------- a long prompt


@pytest.mark.parametrize("locale", ["en", "ru"])
def test_compare_says_in_the_pages_language_how_many_tokens_of_a_long_prompt_it_dropped(served, locale):
    _, _, handler, component = served
    out = handler["compare_sample"]("cid", "done", LONG, 2, 8, 1.0, 1.0, 0, locale)
    summary = out[component["compare-summary"]]
    dropped = expected_cut(LONG, 8)
    # re-tokenising the cut text may merge a token at its start (test_input_refusals): one of three counts
    notes = [cut_note(locale, 256 - 8 + d, d) for d in (dropped - 1, dropped, dropped + 1)]
    assert any(note in summary for note in notes), summary
    assert out[component["base-samples"]].count("<tbody>") == 2  # and the samples are there


@pytest.mark.parametrize("locale", ["en", "ru"])
def test_compare_refuses_25000_characters_naming_the_limit_in_the_pages_language(served, locale):
    _, _, handler, component = served
    out = handler["compare_sample"]("cid", "done", HUGE, 2, 8, 1.0, 1.0, 0, locale)
    assert refusal(locale, len(HUGE)) in out[component["compare-summary"]]
    assert out[component["base-samples"]] == ""


def test_compare_sends_a_pasted_prompt_whole_to_the_server(served):
    """The browser cut a prompt at ``max_length`` without a word; the server's refusal names the limit instead."""
    _, _, _, component = served
    assert component["compare-prompt"].max_length is None


def test_the_probe_says_it_cut_a_long_prompt_and_refuses_25000_characters(served):
    _, _, handler, component = served
    out = handler["rollouts_probe"]("cid", "done", LONG, 1, 0, "ru", None)
    dropped = expected_cut(LONG, 24)  # the run's own 24 new tokens
    view = out[component["probe-view"]]
    assert any(cut_note("ru", 256 - 24 + d, d) in view for d in (dropped - 1, dropped, dropped + 1)), view
    out = handler["rollouts_probe"]("cid", "done", HUGE, 1, 0, "ru", None)
    assert refusal("ru", len(HUGE)) in out[component["probe-note"]]
    assert out[component["probe-view"]] == ""


# ----------------------------------------------------------------------------- the Runs tab's buttons


def test_rename_and_delete_are_offered_only_for_a_run_the_visitor_may_manage(tmp_path):
    for name, owner in (("alices", "alice"), ("bobs", "bob")):
        run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=name))
        run.set_status("finished", owner=owner_digest(owner))
    controller, _, handler, component = app_for(tmp_path, PUBLIC)
    try:
        buttons = [component[k] for k in ("run-label", "run-note", "run-save", "run-delete")]
        for name, allowed in (("alices", True), ("bobs", False)):
            out = handler["runs_notes"]("alice", name, "ru")
            assert [out[b].interactive for b in buttons] == [allowed] * 4, name
            message = out[component["runs-manage-message"]]
            assert (message == i18n.t("ru", "runs.not_manageable")) is not allowed, message
    finally:
        controller.close()


# ----------------------------------------------------------------------------- the language switch


def after_language(demo) -> dict:
    """The handlers the language selector's event runs after its own, by api name."""
    switch = next(fn for fn in demo.fns.values() if fn.api_name == "page_language")
    return {fn.api_name: fn.fn for fn in demo.fns.values() if fn.trigger_after == switch._id}


def test_a_language_switch_writes_the_runs_and_compare_tables_again(served):
    _, demo, handler, component = served
    then = {fn.__name__: fn for fn in after_language(demo).values()}
    assert {"runs_again", "compare_again"} <= set(then), then  # the switch is followed by the tables' redraws
    runs = then["runs_again"]("ru")
    headers = runs[component["runs-table"]].value["headers"]
    assert headers[:2] == [i18n.t("ru", "runs.col_run"), i18n.t("ru", "runs.col_label")], headers
    result = handler["compare_sample"]("cid", "done", "This movie was", 2, 8, 1.0, 1.0, 0, "en")
    state = result[component["compare-summary"]]
    assert i18n.t("en", "compare.base") in result[component["base-samples"]]
    compare = then["compare_again"]
    answer = next(v for k, v in result.items() if isinstance(k, gr.State))
    out = compare("ru", answer, None)
    assert i18n.t("ru", "compare.base") in out[component["base-samples"]]
    assert out[component["compare-summary"]] != state and "Mean reward" not in out[component["compare-summary"]]


# ----------------------------------------------------------------------------- a warning opens its step


def test_a_warnings_button_opens_the_step_it_fired_at_on_the_rollouts_tab(tmp_path):
    metrics = records(30, collapse_from=21)  # the collapse warning fires at step 24 (test_run_summary)
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="ended"))
    with open(run.path / "metrics.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in metrics)
    for step in (10, 20, 25, 30):  # rollouts kept for some steps only
        run.append_rollouts(step, [group(step, 0, [0.2, -0.1, 0.3, -0.4], "ended")])
    run.set_status("finished", step=30)
    controller, demo, handler, component = app_for(tmp_path)
    try:
        from rloo_demo.ui.views.train import run_alerts

        fired = run_alerts(metrics)[0]["step"]
        tick = next(fn.fn for fn in demo.fns.values() if fn.fn is not None and fn.fn.__name__ == "tick")
        out = tick("cid", "ended", -1, 0.6, -1, True, None, "train", "ru")
        button = out[component["alert-open"]]
        assert button.visible and button.value == i18n.t("ru", "alert.open", step=fired), button
        opened = handler["rollouts_open_step"]("ended", fired, "ru")
        nearest = min((10, 20, 25, 30), key=lambda s: abs(s - fired))
        assert value(opened[component["rollout-step"]]) == nearest
        assert f"ended s{nearest} g0 c0" in opened[component["rollout-groups"]]
    finally:
        controller.close()


# ----------------------------------------------------------------------------- an empty plot's note


@pytest.mark.parametrize("locale", i18n.LOCALES)
def test_an_empty_plots_note_is_broken_into_lines_that_fit_a_phone(locale):
    from rloo_demo.ui.train_tab import figures

    reward = json.loads(figures([], None, locale)[0].plot)
    note = next(a for a in reward["layout"]["annotations"] if a.get("name") == "rloo-note")
    lines = note["text"].split("<br>")
    assert " ".join(lines) == i18n.t(locale, "plot.no_reward")
    assert len(lines) > 1 and max(len(line) for line in lines) <= NOTE_CHARS, lines
