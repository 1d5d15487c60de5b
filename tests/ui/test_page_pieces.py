"""Small pieces of the page, each against what the test expects by hand: a refusal's lines, the labels a reward
problem is put under, gradio's per-session configs built on demand, an event's kind without an app, the tab labels
sent on a language switch, the arena picker's first choice and whole numbers from gradio's number boxes.

The page's own handlers: a long prompt in Compare and the probe
gets a note or a refusal in the page's language; the Runs tab offers rename and delete only for a run the visitor
may manage; a language switch writes the Runs and Compare tables again; a warning's button opens the step it fired
at on the Rollouts tab; an empty plot's note is broken into lines that fit a phone.

Each handler is the one gradio calls (``demo.fns``), called directly, with what a browser sends.

``python -m pytest tests/ui/test_page_pieces.py`` (about half a minute: it samples from the embedded policy)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest
from apputil import app_for, value
from factories import LONG, expected_cut, finished_run, group, records

from rloo_demo import i18n
from rloo_demo.config import RunConfig
from rloo_demo.errors import ConfigError
from rloo_demo.public.gates import owner_digest
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui import gradio_internals as gi
from rloo_demo.ui import locale_switch
from rloo_demo.ui.common import form_refusal
from rloo_demo.ui.forms import config_from_form, defaults, field_label, form_settings, labelled_problems
from rloo_demo.ui.plots.base import NOTE_CHARS

# ----------------------------------------------------------------------------- page pieces


class _Redacting:
    def redact(self, text):
        return text.replace("/srv/runs", "<runs>")

    def error_text(self, exc, locale="en", names=None):
        return f"error: {exc}"


def test_a_refusal_is_one_line_per_field_under_its_label_in_the_pages_language_with_paths_redacted():
    values = defaults() | {"rewards": ["vader_compound"], "extra_reward": "length_target:x"}
    problems = {"num_generations": "must be at least 2", "rewards": "unknown reward 'length_target:x' in /srv/runs"}
    text = form_refusal(_Redacting(), ConfigError(problems), values, "ka")
    assert text == (
        f"- **{field_label('num_generations', 'ka')}**: must be at least 2\n"
        f"- **{field_label('extra_reward', 'ka')}**: unknown reward &#x27;length_target:x&#x27; in <runs>"
    )
    assert form_refusal(_Redacting(), ValueError("x"), values, "ka") == "error: x"
    assert form_refusal(_Redacting(), ConfigError(problems), "not a form", "ka") == (
        "error: " + str(ConfigError(problems))
    )


def test_a_reward_problem_is_put_under_the_box_its_message_quotes():
    values = defaults() | {"rewards": ["vader_compound"], "extra_reward": "keyword:x", "reward_module": "a.py:f"}
    rows = labelled_problems({"rewards": "'module:a.py:f' is not allowed here"}, values, "ru")
    assert rows == [(field_label("reward_module", "ru"), "'module:a.py:f' is not allowed here")]


class _Source:
    def __init__(self, blocks):
        self.blocks, self.built = blocks, []

    def config_for_block(self, key, deps, block):
        self.built.append((key, list(deps) if deps is not None else None, block))
        return {"id": key, "of": block}


def test_per_session_configs_are_built_when_read_in_gradios_order_and_only_for_its_blocks():
    source = _Source({1: "b1", 2: "b2", 3: "b3"})
    configs = gi._LazyConfigs(source, [3, 1, 2, 9])  # 9: a key gradio lists that has no block now
    assert source.built == []
    assert 1 in configs and 9 in configs and 5 not in configs
    assert configs[1] == {"id": 1, "of": "b1"} and source.built == [(1, [], "b1")]
    assert configs[1] == {"id": 1, "of": "b1"} and len(source.built) == 1  # built once
    with pytest.raises(KeyError) as e:
        configs[5]
    assert e.value.args == (5,)
    configs[7] = {"id": 7}  # an event's update: stored as it is
    assert 7 in configs and configs[7] == {"id": 7}
    assert list(configs) == [3, 1, 2, 7] == configs.keys() and len(configs) == 4
    assert configs.items()[0] == (3, {"id": 3, "of": "b3"}) and configs.values()[-1] == {"id": 7}


def test_an_events_kind_needs_an_app_with_functions():
    assert gi.event_kind(None, 0, None) is None
    assert gi.event_kind(SimpleNamespace(get_blocks=lambda: SimpleNamespace()), 0, "compare") is None
    fns = {
        0: SimpleNamespace(api_name="compare", concurrency_id="sampling", fn=print),
        4: SimpleNamespace(api_name="tick", concurrency_id=12, fn=print),
        5: SimpleNamespace(api_name="js_fn", concurrency_id=13, fn=None),  # a step the browser runs itself
    }
    app = SimpleNamespace(get_blocks=lambda: SimpleNamespace(fns=fns))
    assert gi.event_kind(app, 4, "compare") == "12"  # by index first
    assert gi.event_kind(app, None, "compare") == "sampling" and gi.event_kind(app, None, "x") is None
    assert gi.event_kind(app, 5, None) is None and gi.event_kind(app, None, "js_fn") is None


def test_a_language_switch_sends_each_tab_its_own_label_key():
    tabs = {"tab.train": gr.Tab("x", render=False), "tab.compare": gr.Tab("y", render=False)}
    sent = locale_switch.tab_labels(tabs)
    assert list(sent) == [tabs["tab.train"], tabs["tab.compare"]]
    assert [update.label.key for update in sent.values()] == ["tab.train", "tab.compare"]


def test_whole_numbers_from_number_boxes_are_ints_and_other_values_pass_for_the_config_to_refuse():
    settings = form_settings(defaults() | {"num_generations": 6.0, "max_steps": 12.0, "seed": 2.5})
    assert type(settings["num_generations"]) is int and settings["num_generations"] == 6
    assert type(settings["max_steps"]) is int and settings["seed"] == 2.5
    config = config_from_form(defaults() | {"max_steps": 3.0})
    assert config.output_dir == "runs" == RunConfig().output_dir and config.max_steps == 3
    assert config_from_form(defaults(), "elsewhere").output_dir == "elsewhere"


def test_the_probe_is_about_the_run_shown_else_the_watched_one():
    from rloo_demo.ui.tabs.probe_panel import shown_run

    assert shown_run("shown", "watched") == "shown"
    assert [shown_run(x, "watched") for x in ("", None, 5, ["a"])] == ["watched"] * 4


def test_the_runs_table_words_its_rows_in_the_pages_language():
    from rloo_demo.ui.tabs.runs import run_table
    from rloo_demo.ui.views.runs import run_headers, run_rows

    summaries = [{"name": "r1", "status": "finished", "steps": 10, "label": "", "note": "", "has_model": True}]
    table = run_table(summaries, "ka")
    assert table.value["data"] == run_rows(summaries, "ka") and table.value["headers"] == run_headers("ka")
    assert run_rows(summaries, "ka") != run_rows(summaries, "en")


def test_the_page_load_gives_each_tab_its_own_label_the_visitor_its_id_and_the_language_it_asked_for(tmp_path):
    """What a new page is sent: every tab its own label again (gradio then translates it in the page's language),
    the client id it keeps or a new one for an id that is no text or too long, the language it asked for."""
    from gradio.i18n import I18nData

    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(str(tmp_path / "runs"), watchdog=False))
    try:
        demo = build_app(controller)
        load = next(f for f in demo.fns.values() if f.api_name == "page_load")
        tabs = {b.id: b for b in demo.blocks.values() if isinstance(b, gr.Tab)}
        assert sorted(tabs) == ["compare", "lessons", "rollouts", "runs", "train"]
        out = load.fn(None, "visitor-1", "ru-RU")  # no request: a call outside gradio
        labels = {
            tab_id: out[tab].label.to_dict()["key"] if isinstance(out[tab].label, I18nData) else out[tab].label
            for tab_id, tab in tabs.items()
        }
        assert labels == {tab_id: f"tab.{tab_id}" for tab_id in tabs}
        by_value = list(out.values())
        assert "visitor-1" in by_value and "ru" in by_value
        for bad in (None, 7, "", "x" * 201):
            fresh = load.fn(None, bad, "en")
            ids = [v for v in fresh.values() if isinstance(v, str) and len(v) == 32]
            assert ids and all(i != bad for i in ids)
    finally:
        controller.close()


# ----------------------------------------------------------------------------- page followups


LIMITS = replace(LOCAL, sampling_per_minute=None)
HUGE = "This movie was " + "x" * (25_000 - len("This movie was "))  # the 25,000 characters


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


def switch_language(demo, locale: str, states: dict | None = None) -> dict:
    """The language selector's one event, sent as a page sends it: every input as the page holds it (its
    component's value), ``states`` (a component -> its value) for the states an earlier answer set."""
    switch = next(fn for fn in demo.fns.values() if fn.api_name == "page_language")
    states = states or {}
    values = [states[c] if c in states else getattr(c, "value", None) for c in switch.inputs[1:]]
    return switch.fn(locale, *values)


def test_a_language_switch_writes_the_runs_and_compare_tables_again(served):
    _, demo, handler, component = served
    runs = switch_language(demo, "ru")  # the runs table is written again, in the new language
    headers = runs[component["runs-table"]].value["headers"]
    assert headers[:2] == [i18n.t("ru", "runs.col_run"), i18n.t("ru", "runs.col_label")], headers
    result = handler["compare_sample"]("cid", "done", "This movie was", 2, 8, 1.0, 1.0, 0, "en")
    state = result[component["compare-summary"]]
    assert i18n.t("en", "compare.base") in result[component["base-samples"]]
    answer_state, answer = next((k, v) for k, v in result.items() if isinstance(k, gr.State))
    out = switch_language(demo, "ru", {answer_state: answer})  # Compare's last answer, written again in Russian
    assert i18n.t("ru", "compare.base") in out[component["base-samples"]]
    assert out[component["compare-summary"]] != state and "Mean reward" not in out[component["compare-summary"]]
    assert out[answer_state] == answer  # the state is sent back as it is


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
        out = tick(None, "cid", "ended", -1, 0.6, -1, True, None, "train", "ru")  # no request: a test's call
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
    from rloo_demo.ui.tabs.train import figures

    reward = json.loads(figures([], None, locale)[0].plot)
    note = next(a for a in reward["layout"]["annotations"] if a.get("name") == "rloo-note")
    lines = note["text"].split("<br>")
    assert " ".join(lines) == i18n.t(locale, "plot.no_run")  # no run at all: it says none has started
    assert len(lines) > 1 and max(len(line) for line in lines) <= NOTE_CHARS, lines
