"""The Train tab's handlers and the helpers under them, in-process (no server): each refusal, note and option
against the words and values written out here. The same handlers are called over HTTP by test_input_refusals and
test_hostile_inputs (a live server each); these tests read what those cannot without starting one: which field a
refusal names, the line's wait in words, the app's launch options, its SIGTERM path and its entry point.

``python -m pytest tests/ui/test_train.py``

The Train tab's figures, shared builds and texts on records the test writes: every figure gets the page's
smoothing (records that log every plotted metric, so an unsmoothed figure differs), a cache entry is a run's
step *and* its time (the same number of records with another last step is a new build), and the status line says
the phase and why a run stopped in the page's language."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import zipfile
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest
import yaml
from apputil import TickReads as _Ticks
from apputil import app_for, value
from apputil import train_tab_stub as _tab
from factories import finished_run

from rloo_demo import i18n
from rloo_demo.config import MAX_REWARD_WEIGHT, RunConfig
from rloo_demo.errors import ConfigError, InputError, NotFound
from rloo_demo.models.hub import ASSETS_DIR
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.server.cache import SharedBuilds
from rloo_demo.server.readers import RunView
from rloo_demo.server.runner import DEFAULT_RUN_SECONDS, ActiveRun, Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui import app as app_module
from rloo_demo.ui import forms, plots
from rloo_demo.ui.common import form_refusal
from rloo_demo.ui.controller import Controller, _minutes
from rloo_demo.ui.forms import FORM_FIELDS, defaults, field_label, labelled_problems, problem_fields, reward_sources
from rloo_demo.ui.tabs import compare as compare_tab
from rloo_demo.ui.tabs import train as train_tab
from rloo_demo.ui.tabs import train_plots
from rloo_demo.ui.views import status_line
from rloo_demo.ui.views.train import phase_line

# ----------------------------------------------------------------------------- ui handlers


LIMITS = replace(LOCAL, sampling_per_minute=None)


def label(name, locale="en") -> str:
    return i18n.t(locale, forms.FIELD[name].label)


# ----------------------------------------------------------------------------- which field a problem names


def test_reward_sources_name_the_box_each_reward_came_from_in_the_forms_order():
    values = defaults() | {
        "rewards": ["length_penalty", "nonsense", "vader_compound"],  # the form's order, not the ticked one
        "custom_classifier": "  ",  # blank: no box
        "extra_reward": "keyword:great",
        "reward_module": "mine.py:score",
    }
    assert reward_sources(values) == ["vader_compound", "length_penalty", "extra_reward", "reward_module"]
    assert reward_sources({"rewards": "vader_compound"}) == []  # not a list: nothing ticked


def test_a_bad_weight_names_its_own_box_and_no_other():
    values = defaults() | {
        "rewards": ["vader_compound", "length_penalty"],
        "w_vader_compound": 1.0,
        "w_length_penalty": float("nan"),
        "custom_classifier": "my/model",
        "w_custom": MAX_REWARD_WEIGHT + 1,
        "extra_reward": "keyword:x",
        "w_extra": -MAX_REWARD_WEIGHT,  # at the bound: allowed
        "reward_module": "m.py:f",
        "w_module": True,  # a boolean is no weight
    }
    assert problem_fields("reward_weights", "any", values) == ["w_length_penalty", "w_custom", "w_module"]
    # every weight fine (the problem is their count, say): the rewards box
    fine = defaults() | {"rewards": ["vader_compound"], "w_vader_compound": -MAX_REWARD_WEIGHT}
    assert problem_fields("reward_weights", "any", fine) == ["rewards"]


def test_a_reward_problem_names_the_box_whose_text_it_quotes():
    values = defaults() | {"rewards": ["vader_compound"], "extra_reward": "length_target:x", "reward_module": "a.py:f"}
    assert problem_fields("rewards", "unknown reward 'length_target:x'", values) == ["extra_reward"]
    assert problem_fields("rewards", "'module:a.py:f' is not allowed", values) == ["reward_module"]
    assert problem_fields("rewards", "no reward chosen", values) == ["rewards"]
    # a problem with the form's key, one with another name, one the form has no field for
    assert problem_fields("num_generations", "x", values) == ["num_generations"]
    assert problem_fields("generation_batch_size", "x", values) == ["prompts_per_step"]
    assert problem_fields("gradient_checkpointing", "x", values) == []


def test_problems_are_labelled_as_the_page_shows_the_fields(monkeypatch):
    values = defaults() | {"rewards": ["vader_compound"], "extra_reward": "keyword:x", "w_extra": float("inf")}
    problems = {"reward_weights": "must be finite", "num_generations": "too many", "warmup_steps": "too long"}
    for locale in ("en", "ru"):
        extra = f"{label('w_extra', locale)} ({label('extra_reward', locale)})"
        assert field_label("w_extra", locale) == extra
        assert field_label("num_generations", locale) == label("num_generations", locale)
        assert labelled_problems(problems, values, locale) == [
            (extra, "must be finite"),
            (label("num_generations", locale), "too many"),
            ("warmup_steps", "too long"),  # no field for it: its key
        ]
    assert field_label("w_extra", "ru") != field_label("w_extra", "en")
    both = defaults() | {
        "rewards": ["vader_compound", "length_penalty"],
        "w_vader_compound": None,
        "w_length_penalty": "x",
    }
    assert labelled_problems({"reward_weights": "bad"}, both) == [
        (f"{label('w_vader_compound')}, {label('w_length_penalty')}", "bad")
    ]


# ----------------------------------------------------------------------------- the Train tab's handlers


@pytest.fixture()
def page(tmp_path):
    finished_run(tmp_path)
    controller, demo, handler, component = app_for(tmp_path)
    yield SimpleNamespace(controller=controller, handler=handler, component=component, root=tmp_path)
    controller.close()


def form(**changes) -> list:
    values = defaults() | changes
    return [values[name] for name in FORM_FIELDS]


def by_id(out: dict) -> dict:
    return {getattr(c, "elem_id", None): v for c, v in out.items()}


@pytest.mark.parametrize("locale", ["en", "ru"])
def test_start_refuses_a_bad_weight_naming_its_box_by_its_label_in_the_pages_language(page, locale):
    out = by_id(page.handler["train_start"](None, "client-a", *form(w_vader_compound=float("nan")), locale))
    error = out["form-error"]
    head, body = error.split("\n\n", 1)
    assert head == i18n.t(locale, "train.not_started")
    assert body.startswith(f"- **{label('w_vader_compound', locale)}**: ")
    assert "nan" in body and "reward_weights" not in body
    assert page.controller.runner.active() == []  # refused before anything started


def test_start_hands_the_controller_the_form_and_the_visitor_from_the_connection_and_shows_its_place(page, monkeypatch):
    """The Start event's caller is the client id it sent and the address of its connection (never a name the
    caller gives itself); a run that starts is watched with its plots drawn afresh and Start disabled; a visitor
    that has to wait sees its place in the line, in the page's language, where the run's status goes."""
    from rloo_demo.errors import Waiting
    from rloo_demo.public.gates import Caller

    asked, answers = [], iter(["rloo-run-7", Waiting("in line", place=3)])

    def start_from_form(values, caller):
        asked.append((values, caller))
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(page.controller, "start_from_form", start_from_form)
    request = SimpleNamespace(client=SimpleNamespace(host="127.0.0.5"), headers={}, state=None)
    out = page.handler["train_start"](request, "client-b", *form(num_generations=5), "ru")
    ((values, caller),) = asked
    assert caller == Caller("client-b", "127.0.0.5", False)
    assert values == dict(zip(FORM_FIELDS, form(num_generations=5), strict=True))
    assert by_id(out)["form-error"] == "" and by_id(out)["start-btn"].interactive is False
    assert "rloo-run-7" in out.values() and -1 in out.values()  # the run watched, nothing drawn of it yet
    out = by_id(page.handler["train_start"](request, "client-c", *form(), "ru"))
    assert asked[1][1] == Caller("client-c", "127.0.0.5", False)
    assert out == {"form-error": "", "run-status": page.controller.line_text(3, "ru")}
    assert "3" in out["run-status"] and out["run-status"] != page.controller.line_text(3, "en")


def test_start_without_a_client_id_is_refused_in_words(page):
    out = by_id(page.handler["train_start"](None, "", *form(), "en"))
    assert out["form-error"].startswith(i18n.t("en", "train.not_started") + "\n\n")
    assert "client id (1 to 200 characters)" in out["form-error"]


def test_a_refusal_that_is_no_config_problem_is_the_controllers_words(page):
    exc = InputError("the form values must be a mapping of field names to values")
    assert form_refusal(page.controller, exc, {}) == page.controller.error_text(exc)
    problems = ConfigError({"num_generations": "<b>1000</b> is too many"})
    # a config problem with values that are no dict: the controller's words as well
    assert form_refusal(page.controller, problems, None) == page.controller.error_text(problems)
    escaped = form_refusal(page.controller, problems, defaults(), "ru")
    assert escaped == f"- **{label('num_generations', 'ru')}**: &lt;b&gt;1000&lt;/b&gt; is too many"


def test_the_estimate_refuses_like_start_and_otherwise_is_the_controllers_estimate(page):
    """A refusal goes to the form's one error box (where Start's goes), not beside the estimate as well."""
    bad = by_id(page.handler["train_estimate"](*form(w_vader_compound=float("inf")), "ru"))
    assert bad["run-estimate"] == ""
    assert bad["form-error"].startswith(i18n.t("ru", "train.form_refused") + "\n\n")
    assert f"\n- **{label('w_vader_compound', 'ru')}**: " in bad["form-error"]
    good = by_id(page.handler["train_estimate"](*form(max_steps=7), "en"))
    assert good["form-error"] == ""  # a form that is fine again clears the refusal
    assert good["run-estimate"] == page.controller.estimate(defaults() | {"max_steps": 7}, "en")
    assert good["run-estimate"] != page.controller.estimate(defaults() | {"max_steps": 70}, "en")


def test_stop_says_what_it_did_in_the_pages_language(page):
    stop = page.handler["train_stop"]
    assert by_id(stop("client-a", None, "ru")) == {"form-error": i18n.t("ru", "train.nothing_to_stop")}
    assert by_id(stop("client-a", "", "en")) == {"form-error": i18n.t("en", "train.nothing_to_stop")}
    # a finished run, or a name that is no run: nothing trains, so nothing to stop, in the page's language
    assert by_id(stop("client-a", "done", "ka")) == {"form-error": i18n.t("ka", "train.not_training", name="done")}
    assert by_id(stop("client-a", "gone", "ro")) == {"form-error": i18n.t("ro", "train.not_training", name="gone")}
    assert by_id(stop("client-a", "../x", "ru")) == {"form-error": i18n.t("ru", "train.nothing_to_stop")}  # no echo
    job = SimpleNamespace(
        stopped=[], stop=lambda reason: job.stopped.append(reason), run=SimpleNamespace(name="r"), done=False
    )
    page.controller.runner._active["r"] = ActiveRun(job=job, owner="client-a", started=0.0)
    assert by_id(stop("client-b", "r", "en"))["form-error"].endswith(
        "only the browser session that started this run can stop it"
    )
    assert job.stopped == []
    assert by_id(stop("client-a", "r", "ru")) == {"form-error": i18n.t("ru", "train.stop_requested", name="r")}
    assert job.stopped == ["its starter asked it to stop"]


# ----------------------------------------------------------------------------- the controller's words


def test_a_wait_reads_in_seconds_under_a_minute_and_whole_minutes_after():
    assert [_minutes(s) for s in (0, 0.4, 12.6, 59.4, 60, 89, 91, 3600)] == [
        "1 s",
        "1 s",
        "13 s",
        "59 s",
        "1 min",
        "1 min",
        "2 min",
        "60 min",
    ]


def test_the_line_text_gives_the_place_and_the_runners_wait(tmp_path, monkeypatch):
    controller = Controller(Runner(str(tmp_path), watchdog=False, limits=LIMITS))
    try:
        asked = []
        monkeypatch.setattr(controller.runner, "wait_estimate", lambda place: asked.append(place) or 150.0)
        assert controller.line_text(3, "ru") == i18n.t("ru", "train.waiting", place=3, wait="2 min")
        assert asked == [3]
    finally:
        controller.close()


def test_the_wait_is_what_the_runs_ahead_have_left_then_a_budget_a_place(tmp_path, monkeypatch):
    runner = Runner(str(tmp_path), watchdog=False, max_concurrent=2, limits=replace(LIMITS, max_run_seconds=600))
    try:
        now = 10_000.0
        monkeypatch.setattr("rloo_demo.server.runner.time.monotonic", lambda: now)

        def training(name, started):
            runner._active[name] = ActiveRun(
                job=SimpleNamespace(run=SimpleNamespace(name=name), done=False),
                owner="o",
                started=0.0,
                started_clock=started,
            )

        assert runner.wait_estimate(1) == 0.0  # a free slot: no wait
        training("a", now - 100)
        assert runner.wait_estimate(3) == 0.0 + 2 * 600 / 2  # one slot still free
        training("b", now - 450)
        assert runner.wait_estimate(1) == 150.0  # the sooner of 500 s and 150 s left
        assert runner.wait_estimate(4) == 150.0 + 3 * 300.0
        training("c", now - 900)  # over its budget: nothing left, not a negative wait
        assert runner.wait_estimate(1) == 0.0
        runner.limits = replace(runner.limits, max_run_seconds=None)
        runner._active.pop("c")
        # no budget: a default run's length (a's 20 s left and b's none, both slots taken: none to wait for first)
        assert runner.wait_estimate(2) == 0.0 + 1 * DEFAULT_RUN_SECONDS / 2
    finally:
        runner._active.clear()
        runner.close()


def test_run_details_hand_over_the_files_the_command_and_the_config(page):
    files, command, config_text = page.controller.run_details("done")
    assert config_text == (page.root / "done" / "config.yaml").read_text()
    assert yaml.safe_load(config_text)["max_steps"] == 2
    assert command.startswith("python -m rloo_demo train") and "--max-steps 2" in command
    names = sorted(os.path.basename(f) for f in files)
    assert names == ["done-config.yaml", "done-metrics.csv", "done-model.zip"]  # named by the run: downloads mix
    assert all(os.path.isfile(f) for f in files)
    (page.root / "broken").mkdir()
    (page.root / "broken" / "config.yaml").write_text("{not yaml")
    with pytest.raises(NotFound, match="run 'broken' is unreadable"):
        page.controller.run_details("broken")


def test_the_runs_tab_offers_a_finished_run_as_a_trl_project_built_once_and_none_for_a_run_in_training(page):
    """The "Download as a TRL project" button (its own event beside the details): a finished run's zip, built once
    per run and content as the other downloads, with no path of the server in it; hidden for a run in training."""
    button = by_id(page.handler["runs_trl_project"]("done", "en"))["run-trl-project"]
    served = value(button)  # gradio's copy of the file, in its cache
    # what the update sets is what it was given (gradio sends an update's constructor arguments, not its defaults)
    assert button.constructor_args["visible"] is True and served["orig_name"] == "done-trl-project.zip"
    with zipfile.ZipFile(served["path"]) as z:
        names = z.namelist()
        assert {"done-trl/config.yaml", "done-trl/rewards.py", "done-trl/prompts.jsonl", "done-trl/README.md"} <= set(
            names
        )
        assert yaml.safe_load(z.read("done-trl/config.yaml"))["max_steps"] == 2
        texts = [z.read(n).decode() for n in names if n.endswith((".yaml", ".py", ".md", ".jsonl"))]
    assert not [t for t in texts if str(page.root) in t or str(ASSETS_DIR) in t]
    built = page.controller.trl_project("done")
    stamp = os.stat(built).st_mtime_ns
    page.handler["runs_trl_project"]("done", "en")
    assert page.controller.trl_project("done") == built and os.stat(built).st_mtime_ns == stamp  # not built again
    live = RunFolder.create(RunConfig(output_dir=str(page.root), run_name="live"))
    assert live.status()["status"] == "running"
    hidden = by_id(page.handler["runs_trl_project"]("live", "en"))["run-trl-project"]
    assert hidden.constructor_args == {"value": None, "visible": False, "render": False}


def test_the_config_viewer_numbers_every_line_and_shows_it_as_text(page):
    """Every line of config.yaml numbered, 1 to the last, each line's text escaped (a system prompt is anyone's
    text); the Runs tab's details hand it over this way."""
    from rloo_demo.ui.views import config_html

    text = "\n".join([f"key_{i}: {i}" for i in range(1, 50)] + ["system_prompt: <b onclick=x>hi</b>"]) + "\n"
    shown = config_html(text)
    numbers = re.findall(r"<span class='rloo-cfg-no'>(\d+)</span>", shown)
    assert numbers == [str(i) for i in range(1, 51)]
    lines = re.findall(r"<span class='rloo-cfg-text'>([^<]*)</span>", shown)
    assert lines[:2] == ["key_1: 1", "key_2: 2"] and lines[-1] == "system_prompt: &lt;b onclick=x&gt;hi&lt;/b&gt;"
    assert config_html("") == ""
    out = page.handler["runs_details"]("done", "en")
    config = next(v for k, v in out.items() if getattr(k, "elem_id", None) == "run-config")
    assert config == config_html((page.root / "done" / "config.yaml").read_text())


def test_a_run_phase_is_none_for_a_name_that_trains_nowhere(page):
    assert [page.controller.run_phase(n) for n in (None, "", 5, "done", "nowhere")] == [None] * 5


# ----------------------------------------------------------------------------- a run in training, as the page sees it


class _Channel(list):
    def snapshot(self, start=0):
        return list(self[start:])


def test_an_active_run_reports_its_status_steps_and_rollouts(monkeypatch):
    monkeypatch.setattr("rloo_demo.server.runner.time.time", lambda: 160.0)
    state = SimpleNamespace(
        status="pending",
        error=None,
        stop_reason=None,
        started=None,
        finished=None,
        rollout_steps=[],
        rollouts={},
        channel=_Channel(),
    )
    written = []
    run = SimpleNamespace(name="r", set_status=lambda status, reason: written.append((status, reason)))
    active = ActiveRun(job=SimpleNamespace(state=state, run=run), owner="o", started=40.0)
    # loading counts as running; its time from the ActiveRun's own start while the job has none
    assert active.status() == {"status": "running", "error": None, "reason": None, "elapsed": 120.0}
    assert active.rollouts(None) == [] and active.latest_step() == 0
    state.status, state.started, state.finished, state.error, state.stop_reason = "failed", 100.0, 130.0, "E", "R"
    assert active.status() == {"status": "failed", "error": "E", "reason": "R", "elapsed": 30.0}
    state.channel.extend([{"step": 1}, {"step": 2}, {"step": 5}])
    assert active.latest_step() == 5
    state.channel.append({"no": "step"})
    assert active.latest_step() == 0
    state.rollout_steps, state.rollouts = [2, 4], {2: [{"g": 2}], 4: [{"g": 4}, {"g": 5}]}
    assert active.rollouts(None) == [{"g": 4}, {"g": 5}] and active.rollouts(2) == [{"g": 2}]
    assert active.rollouts(3) is None  # not kept in memory: read from the folder
    assert active.rollouts(4) is not state.rollouts[4]  # a copy: the trainer appends to its own
    active.mark_stopped("why")
    assert written == [("stopped", "why")]

    def full(status, reason):
        raise OSError(28, "No space left on device")

    run.set_status = full
    active.mark_stopped("disk full")  # let be: the process is exiting
    ActiveRun(job=SimpleNamespace(state=state, run=None), owner="o", started=0.0).mark_stopped("no folder")


# ----------------------------------------------------------------------------- the app's launch


def test_launch_options_for_a_local_and_a_public_server(monkeypatch):
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    local = app_module.launch_options(LOCAL)
    assert (local["server_name"], local["server_port"]) == ("127.0.0.1", 7860)
    assert local["max_file_size"] == 1 and local["show_error"] is True and local["ssr_mode"] is False
    # the page's own CSS, then each tab's, in the tabs' order
    from rloo_demo.ui.style import PAGE_CSS
    from rloo_demo.ui.tabs import lessons, rollouts, runs

    tabs_css = train_tab.CSS + rollouts.ROLLOUTS_CSS + compare_tab.COMPARE_CSS + runs.RUNS_CSS + lessons.CSS
    assert local["css"] == PAGE_CSS + tabs_css
    assert local["head"] == app_module.locale_switch.HEAD
    assert isinstance(local["theme"], gr.themes.Soft) and isinstance(local["i18n"], gr.I18n)
    assert not {"enable_monitoring", "run_history", "state_session_capacity"} & set(local)
    (admission,) = local["app_kwargs"]["middleware"]
    assert admission.kwargs["limits"] is LOCAL and admission.kwargs["events"] is None
    assert callable(local["app_kwargs"]["lifespan"])
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7861")
    events = object()
    public = app_module.launch_options(PUBLIC, events)
    assert (public["server_name"], public["server_port"]) == ("0.0.0.0", 7861)
    assert public["enable_monitoring"] is False and public["run_history"] is False
    assert public["state_session_capacity"] == app_module.PUBLIC_SESSIONS
    assert public["app_kwargs"]["middleware"][0].kwargs["events"] is events


def test_the_translations_given_to_gradio_name_this_servers_meter_spacing():
    few = app_module.launch_options(replace(LOCAL, min_variance_every=3))["i18n"]
    many = app_module.launch_options(replace(LOCAL, min_variance_every=25))["i18n"]
    assert few.translations != many.translations
    assert (
        few.translations == gr.I18n(**app_module.page_translations(replace(LOCAL, min_variance_every=3))).translations
    )
    assert "3" in few.translations["ru"]["train.variance_info_min"]


def test_the_reward_help_lists_each_built_in_reward_with_its_own_text_in_every_language():
    """The reward help under the own-rewards fold is put together from the rewards table: each built-in reward's
    name and its help key's text, in the page's language, then the rewards with a parameter."""
    sent = app_module.launch_options(LOCAL)["i18n"].translations
    for locale in i18n.LOCALES:
        text = sent[locale]["train.reward_help"]
        assert "{" not in text
        for name in ("vader_compound", "sentiment_classifier", "length_penalty"):
            assert f"**{name}**: {i18n.t(locale, f'reward.help.{name}')}" in text, (locale, name)
        assert text.index("**length_penalty**") < text.index("**keyword:")
    assert sent["ru"]["train.reward_help"].startswith("**vader_compound**: тональность по словарю, в [-1, 1] · ")


def test_sigterm_stops_the_runs_marks_the_unfinished_closes_and_exits(monkeypatch):
    events = []
    handlers = {}
    monkeypatch.setattr(signal, "signal", lambda sig, fn: handlers.__setitem__(sig, fn))

    def job(name, done):
        return SimpleNamespace(done=done, join=lambda timeout: events.append(("join", name, timeout)))

    runs = [
        SimpleNamespace(job=job("a", True), mark_stopped=lambda why: events.append(("mark", "a", why))),
        SimpleNamespace(job=job("b", False), mark_stopped=lambda why: events.append(("mark", "b", why))),
    ]
    runner = SimpleNamespace(
        stop_all=lambda why: events.append(("stop_all", why)) or runs, close=lambda: events.append(("runner.close",))
    )

    class Exited(Exception):
        pass

    def exit_(code):
        events.append(("exit", code))
        raise Exited

    monkeypatch.setattr(app_module.os, "_exit", exit_)
    app_module.install_sigterm(runner, close=lambda: events.append(("close",)))
    with pytest.raises(Exited):
        handlers[signal.SIGTERM](signal.SIGTERM, None)
    reason = "the server shut down (SIGTERM)"
    assert [e[:2] for e in events] == [
        ("stop_all", reason),
        ("join", "a"),
        ("join", "b"),
        ("mark", "b"),
        ("runner.close",),
        ("close",),
        ("exit", 0),
    ]
    waits = [e[2] for e in events if e[0] == "join"]
    assert 0 < waits[1] <= waits[0] <= app_module.SHUTDOWN_SECONDS and waits[0] > app_module.SHUTDOWN_SECONDS - 2
    assert events[3][2] == reason + ", before the step ended; no model saved"
    events.clear()
    app_module.install_sigterm(SimpleNamespace(stop_all=lambda why: [], close=lambda: events.append("closed")))
    with pytest.raises(Exited):
        handlers[signal.SIGTERM](signal.SIGTERM, None)
    assert events == ["closed", ("exit", 0)]  # no close given: none called


def test_main_builds_the_app_from_the_environment_and_launches_it(tmp_path, monkeypatch, caplog):
    import logging

    seen = {}
    monkeypatch.setenv("RLOO_RUNS_DIR", str(tmp_path / "served"))
    monkeypatch.setenv("RLOO_MAX_CONCURRENT_RUNS", "3")
    monkeypatch.setenv("RLOO_BACKEND", "thread")
    monkeypatch.setenv("RLOO_NUM_PROCESSES", "4")
    monkeypatch.setenv("RLOO_TRUST_FORWARDED", "Yes")
    monkeypatch.setenv("RLOO_PUBLIC", "1")
    monkeypatch.setattr(app_module, "bound_arenas", lambda: seen.setdefault("arenas", True))
    monkeypatch.setattr(app_module, "install_sigterm", lambda runner, close: seen.update(runner=runner, close=close))

    def launch(self, **options):
        seen["options"] = options
        seen["queued"] = self._queue is not None

    monkeypatch.setattr(gr.Blocks, "launch", launch)
    caplog.set_level(logging.INFO, logger="rloo_demo.ui.app")
    app_module.main()
    runner = seen["runner"]
    assert seen["arenas"] and seen["queued"]
    assert str(runner.runs_dir) == str(tmp_path / "served") and runner.max_concurrent == 3
    assert runner.num_processes == 4 and runner.backend == "thread" and runner.limits.public
    assert seen["options"]["enable_monitoring"] is False  # public: launched with the public options
    assert seen["options"]["app_kwargs"]["middleware"][0].kwargs["events"] is not None
    messages = [r.getMessage() for r in caplog.records]
    assert any("RLOO_TRUST_FORWARDED=1 is ignored" in m for m in messages)
    assert f"rloo-demo in public mode, runs in {runner.runs_dir}" in messages


# ----------------------------------------------------------------------------- the Compare tab's boxes


def test_an_evaluation_is_shown_with_a_note_only_when_it_was_not_saved():
    from rloo_demo.i18n import localize_figure
    from rloo_demo.ui import plots
    from rloo_demo.ui.common import as_plot
    from rloo_demo.ui.views.compare import eval_report_html

    ui = SimpleNamespace(eval_report="report", eval_plot="plot")
    result = {"base_rewards": [0.1, 0.3], "trained_rewards": [0.5, 0.9], "saved": True}
    saved = compare_tab.evaluation_shown(ui, result, "ru")
    assert saved["report"] == eval_report_html(result, "ru")
    figure = localize_figure(plots.eval_histogram(result), "ru")
    assert saved["plot"] == as_plot(figure) and json.loads(saved["plot"].plot)["data"]
    unsaved = compare_tab.evaluation_shown(ui, result | {"saved": False}, "ru")
    note = f"<p class='rloo-small'>{i18n.t('ru', 'compare.not_saved')}</p>"
    assert unsaved["report"] == eval_report_html(result | {"saved": False}, "ru") + note


def test_a_compare_error_reads_as_the_pages_error_head_without_its_stars():
    assert compare_tab._error_html("it broke", "en") == "<div class='rloo-error'><p><b>Error:</b> it broke</p></div>"
    ru = compare_tab._error_html("x", "ru")
    assert ru == f"<div class='rloo-error'><p><b>{i18n.t('ru', 'common.error').strip('*')}</b> x</p></div>"
    assert "*" not in ru


# ----------------------------------------------------------------------------- the form's values as settings


def test_every_form_value_becomes_its_setting():
    values = {
        "policy": "  embedded:tiny-imdb-gpt2 ",
        "rewards": ["length_penalty", "sentiment_classifier", "vader_compound", "other"],
        "w_vader_compound": 0.25,
        "w_sentiment_classifier": 2.0,
        "w_length_penalty": -0.5,
        "custom_classifier": " classifier:my/model ",
        "w_custom": 3.0,
        "extra_reward": " keyword:great ",
        "w_extra": 4.0,
        "reward_module": " module:mine.py:score ",
        "w_module": 5.0,
        "reward_offset": -0.3,
        "data_source": " local.csv ",
        "prompt_template": "chat",
        "system_prompt": " Be kind. ",
        "num_generations": 6.0,
        "prompts_per_step": 3.0,
        "max_steps": 11.5,
        "learning_rate": 2e-5,
        "beta": 0.07,
        "max_new_tokens": 17.0,
        "temperature": 0.9,
        "seed": 42.0,
        "normalize_advantages": True,
        "use_lora": True,
        "lora_r": 8.0,
        "variance_every": 5.0,
        "bf16": True,
        "use_vllm": True,
        "report_to": " tensorboard ",
    }
    assert forms.form_settings(values) == {
        "policy": "embedded:tiny-imdb-gpt2",
        "rewards": [
            "vader_compound",
            "sentiment_classifier",
            "length_penalty",
            "classifier:my/model",
            "keyword:great",
            "module:mine.py:score",
        ],
        "reward_weights": [0.25, 2.0, -0.5, 3.0, 4.0, 5.0],
        "data_source": "local.csv",
        "prompt_template": "chat",
        "system_prompt": "Be kind.",
        "normalize_advantages": True,
        "use_lora": True,
        "bf16": True,
        "use_vllm": True,
        "num_generations": 6,
        "prompts_per_step": 3,
        "max_steps": 11.5,
        "max_new_tokens": 17,
        "seed": 42,
        "lora_r": 8,
        "variance_every": 5,
        "learning_rate": 2e-5,
        "beta": 0.07,
        "temperature": 0.9,
        "reward_offset": -0.3,
        "report_to": "tensorboard",
    }
    # the prefixes added where the user left them out
    short = forms.form_settings(
        {"custom_classifier": "my/model", "w_custom": 1, "reward_module": "m.py:f", "w_module": 2}
    )
    assert short["rewards"] == ["classifier:my/model", "module:m.py:f"] and short["reward_weights"] == [1, 2]


def test_a_form_without_its_fields_reads_as_the_settings_defaults():
    """A field the form did not send (a page older than the box) reads as its setting's default."""
    assert forms.form_settings({}) == {
        "policy": "embedded:tiny-imdb-gpt2",
        "rewards": [],
        "reward_weights": [],
        "data_source": "embedded:imdb",
        "prompt_template": "auto",
        "system_prompt": None,
        "normalize_advantages": False,
        "use_lora": False,
        "bf16": False,
        "use_vllm": False,
        "num_generations": 4,
        "prompts_per_step": 4,
        "max_steps": 150,
        "max_new_tokens": 24,
        "seed": 42,
        "lora_r": 8,
        "variance_every": 0,
        "learning_rate": 5e-4,
        "beta": 0.05,
        "temperature": 1.0,
        "reward_offset": 0.0,
        "report_to": "none",
    }
    blank = forms.form_settings(
        {
            "data_source": "  ",
            "prompt_template": "",
            "system_prompt": "   ",
            "rewards": "vader_compound",
            "extra_reward": "",
        }
    )
    # an emptied Prompts field stays empty (the form refuses it: forms.form_problems), never the embedded data
    assert (blank["data_source"], blank["prompt_template"], blank["system_prompt"]) == ("", "auto", None)
    assert blank["rewards"] == []
    with pytest.raises(InputError) as refused:
        forms.form_settings(["not", "a", "mapping"])
    assert str(refused.value) == "the form values must be a mapping of field names to values"


def test_a_new_pages_weights_are_the_configs_or_each_rewards_own_default():
    values = defaults()
    assert (values["w_vader_compound"], values["w_sentiment_classifier"], values["w_length_penalty"]) == (1.0, 1.0, 0.5)
    assert (values["w_custom"], values["w_extra"], values["w_module"]) == (1.0, 1.0, 1.0)
    from rloo_demo.config import RunConfig

    config = RunConfig(rewards=["length_penalty", "vader_compound"], reward_weights=[0.2, 3.0])
    weights = {f.name: f.default(config) for f in forms.FIELDS if f.name.startswith("w_")}
    assert weights == {
        "w_vader_compound": 3.0,
        "w_sentiment_classifier": 1.0,
        "w_length_penalty": 0.2,
        "w_custom": 1.0,
        "w_extra": 1.0,
        "w_module": 1.0,
    }


# ----------------------------------------------------------------------------- a tick's update of the Train tab


def _records(n):
    from factories import collapsing_records as eight

    return eight()[:n]


def test_a_tick_draws_the_status_the_warnings_and_the_plots_of_a_new_step(monkeypatch):
    from rloo_demo.server.readers import RunView
    from rloo_demo.ui.views import status_line
    from rloo_demo.ui.views.train import alerts_html, run_alerts

    records = _records(6)
    alerts = run_alerts(records, "ru")
    assert [a["kind"] for a in alerts] == ["collapse", "no_signal"]
    first = alerts[0]["step"]
    ticks = _Ticks()
    view = RunView("tick-run-a", "running", None, records, 20, 12.0, None, True)
    out = train_tab.render(_tab(ticks), view, 0.3, 5, "ru", caller="visitor")
    assert out["status"] == status_line("running", records, 20, 12.0, "tick-run-a", None, "ru")
    assert out["run_error"] == "" and out["alerts"] == alerts_html(alerts, "ru") and out["summary"] == ""
    assert out["alert_step"] == first and out["alert_open"].visible is True
    assert out["alert_open"].value == i18n.t("ru", "alert.open", step=first)
    assert out["start"].interactive is True  # the caller trains nothing: Start stays enabled
    assert out["drawn"] == 6 and all(f"plot{i}" in out for i in range(len(train_plots.TRAIN_PLOTS)))
    assert ("run_phase", "tick-run-a") not in ticks.calls  # steps are logged: no phase to ask for
    again = train_tab.render(_tab(ticks), view, 0.3, 6, "ru")  # this step drawn already: no plots, no caller
    assert "drawn" not in again and "plot0" not in again and "start" not in again


def test_an_ended_run_shows_its_saved_summary_and_warnings_not_ones_worked_out_again(monkeypatch):
    from rloo_demo.server.readers import RunView
    from rloo_demo.store.summary import summarize
    from rloo_demo.ui.views.train import alerts_html, summary_markdown

    records = _records(8)
    summary = summarize(records)
    saved = [{"kind": "no_signal", "step": 7, "text": "saved words"}]
    ticks = _Ticks(summary=(summary, saved))
    view = RunView("tick-run-d", "finished", None, records, 8, 30.0, None, False)
    out = train_tab.render(_tab(ticks), view, 0.6, 8, "ru")
    assert out["summary"] == summary_markdown(summary, saved, "ru") and out["summary"]
    assert out["alerts"] == alerts_html(saved, "ru") and out["alert_step"] == 7
    assert ticks.calls == [("run_summary", "tick-run-d", "ru")]
    train_tab.render(_tab(ticks), view, 0.6, 8, "ru")
    assert len(ticks.calls) == 1  # built once for this step and status
    train_tab.render(_tab(ticks), view, 0.6, 8, "en")
    assert ticks.calls[-1] == ("run_summary", "tick-run-d", "en")  # another language: built again


def test_a_run_that_has_not_logged_a_step_shows_its_phase_and_a_failed_one_its_error():
    from rloo_demo.server.readers import RunView
    from rloo_demo.ui.views.train import failure_markdown, phase_line

    ticks = _Ticks(phase="loading", mine=True)
    view = RunView("tick-run-b", "running", None, [], 30, 4.0, None, True)
    out = train_tab.render(_tab(ticks), view, 0.6, 0, "en", caller="me")
    assert out["status"] == phase_line("loading", 4.0, 30, "en") and ("run_phase", "tick-run-b") in ticks.calls
    assert out["start"].interactive is False  # the caller's own run trains
    assert out["alert_open"].visible is False and out["alert_open"].value == "" and out["alert_step"] is None
    failed = RunView("tick-run-c", "failed", "Traceback\n  line 1\nValueError: x", _records(2), 30, 9.0, None, False)
    out = train_tab.render(_tab(_Ticks(summary=({"steps": 2}, []))), failed, 0.6, 0, "ru")
    assert out["run_error"] == failure_markdown("Traceback\n  line 1\nValueError: x", "ru")
    failed.error = None
    assert train_tab.render(_tab(_Ticks()), failed, 0.6, 0, "ru")["run_error"] == ""
    stand_in = SimpleNamespace(**{k: v for k, v in vars(_tab(None)).items() if k != "controller"})
    bare = train_tab.render(stand_in, view, 0.6, 0, "en", caller="me")  # a tab built without a page
    assert set(bare) >= {"status", "run_error"} and not {"alerts", "summary", "start"} & set(bare)


# ----------------------------------------------------------------------------- an ended run's summary


def test_an_ended_runs_summary_is_worked_out_once_saved_and_read_back(tmp_path):
    import json as json_

    from factories import records, written_run

    from rloo_demo.store.summary import summarize
    from rloo_demo.ui.views.train import run_alerts

    metrics = records(30, collapse_from=21)
    for status in ("finished", "stopped", "failed"):
        written_run(tmp_path / status, metrics, status=status)
    written_run(tmp_path / "running", metrics, status="running")
    written_run(tmp_path / "empty", [], status="finished")
    for status in ("finished", "stopped", "failed", "running", "empty"):
        controller = Controller(Runner(str(tmp_path / status), limits=LOCAL, watchdog=False))
        try:
            (name,) = [s["name"] for s in controller.list_runs()]
            got = controller.run_summary(name, "ru")
            if status in ("running", "empty"):
                assert got is None, status
                assert not (tmp_path / status / name / "summary.json").exists()
                continue
            summary, alerts = got
            kinds = [{"kind": a["kind"], "step": a["step"]} for a in run_alerts(metrics)]  # English: saved once
            want = summarize(metrics) | {"alerts": kinds}
            assert summary == want and alerts == run_alerts(metrics, "ru") and alerts
            saved = tmp_path / status / name / "summary.json"
            assert json_.loads(saved.read_text()) == want
            saved.write_text(json_.dumps({"steps": 99}))
            assert controller.run_summary(name, "en") == ({"steps": 99}, run_alerts(metrics, "en"))  # read, not redone
            assert controller.run_summary("no-such-run") is None
        finally:
            controller.close()


def test_the_runs_listing_keeps_the_picks_that_still_exist():
    from rloo_demo.ui.tabs import runs as runs_tab

    row = {"status": "finished", "has_model": True, "kl_last": 0.01, "steps": 5, "max_steps": 5}
    summaries = [row | {"name": "c", "label": "best"}, row | {"name": "b", "label": ""}, row | {"name": "a"}]
    stand_in = SimpleNamespace(list_runs=lambda: summaries, arenas=lambda: ["arena-2", "arena-1"])
    ui = SimpleNamespace(table="table", overlay_runs="overlay", run="run", arena="arena", message="message")
    out = runs_tab._listing(ui, stand_in, ["a", "gone"], "b", "ru")
    assert out["table"].value == runs_tab.run_table(summaries, "ru").value
    assert out["overlay"].choices == [(n, n) for n in ("c", "b", "a")] and out["overlay"].value == ["a"]
    assert out["run"].choices == [("best · c", "c"), ("b", "b"), ("a", "a")] and out["run"].value == "b"
    assert out["arena"].choices == [("arena-2", "arena-2"), ("arena-1", "arena-1")] and out["arena"].value == "arena-2"
    assert out["message"] == ""
    fresh = runs_tab._listing(ui, stand_in, "not a list", "gone", "en")
    assert fresh["overlay"].value == ["c", "b"] and fresh["run"].value == "c"  # the two newest; the newest
    nothing = SimpleNamespace(list_runs=lambda: [], arenas=lambda: [])
    empty = runs_tab._listing(ui, nothing, ["a"], "a", "en")
    assert empty["overlay"].value == [] and empty["run"].value is None and empty["arena"].value is None


def test_the_latest_active_run_is_the_last_started_and_an_odd_owner_id_still_compares(tmp_path):
    runner = Runner(str(tmp_path), watchdog=False, limits=LIMITS)
    try:
        assert runner.latest_active() is None
        stopped = []
        for name, started, owner in (("early", 5.0, "a"), ("late", 9.0, "\ud800b"), ("middle", 7.0, "c")):
            job = SimpleNamespace(
                run=SimpleNamespace(name=name),
                done=False,
                stop=lambda reason, name=name: stopped.append((name, reason)),
            )
            runner._active[name] = ActiveRun(job=job, owner=owner, started=started)
        assert runner.latest_active().name == "late"
        runner.stop("late", "\ud800b")  # a lone surrogate (JSON allows one) compares as itself, no encoding error
        assert stopped == [("late", "its starter asked it to stop")]
        with pytest.raises(Exception, match="only the browser session that started this run can stop it"):
            runner.stop("late", "\ud800c")
    finally:
        runner._active.clear()
        runner.close()


def test_main_reads_its_defaults_where_the_environment_sets_nothing(tmp_path, monkeypatch, caplog):
    import logging

    for name in (
        "RLOO_RUNS_DIR",
        "RLOO_MAX_CONCURRENT_RUNS",
        "RLOO_BACKEND",
        "RLOO_NUM_PROCESSES",
        "RLOO_TRUST_FORWARDED",
        "RLOO_PUBLIC",
        "SPACE_ID",
        "RLOO_TRUSTED_PROXIES",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    seen = {}
    monkeypatch.setattr(app_module, "bound_arenas", lambda: None)
    monkeypatch.setattr(app_module, "install_sigterm", lambda runner, close: seen.update(runner=runner, close=close))
    monkeypatch.setattr(app_module.logging, "basicConfig", lambda **kw: seen.update(logging=kw))
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **options: seen.update(options=options))
    caplog.set_level(logging.INFO, logger="rloo_demo.ui.app")
    app_module.main()
    runner = seen["runner"]
    assert str(runner.runs_dir) in ("runs", str(tmp_path / "runs")) and runner.max_concurrent == 1
    assert (runner.backend, runner.num_processes, runner.limits.public) == ("thread", 2, False)
    assert seen["logging"] == {"level": logging.INFO, "format": "%(asctime)s %(name)s %(levelname)s %(message)s"}
    assert seen["close"].__self__.runner is runner and seen["close"].__name__ == "close"
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [f"rloo-demo in local mode, runs in {runner.runs_dir}"]  # no proxy warning
    assert "enable_monitoring" not in seen["options"]


@pytest.mark.parametrize("word", ["1", "true", " YES ", "On"])
def test_main_warns_that_trusting_every_forwarded_address_is_ignored(word, tmp_path, monkeypatch, caplog):
    import logging

    monkeypatch.setenv("RLOO_TRUST_FORWARDED", word)
    monkeypatch.setenv("RLOO_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("RLOO_TRUSTED_PROXIES", "10.0.0.1,10.0.0.2")
    monkeypatch.delenv("RLOO_PUBLIC", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setattr(app_module, "bound_arenas", lambda: None)
    monkeypatch.setattr(app_module, "install_sigterm", lambda runner, close: None)
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **options: None)
    caplog.set_level(logging.INFO, logger="rloo_demo.ui.app")
    app_module.main()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.name for r in warned] == ["rloo_demo.ui.app"]
    assert warned[0].getMessage() == (
        "RLOO_TRUST_FORWARDED=1 is ignored: name the proxies whose X-Forwarded-For to believe in "
        "RLOO_TRUSTED_PROXIES (now: 10.0.0.1, 10.0.0.2)"
    )


def test_a_runs_phase_is_what_its_trainers_callback_says_until_steps_are_logged(tmp_path):
    from rloo_demo.engine.callbacks import LiveMetricsCallback

    controller = Controller(Runner(str(tmp_path), watchdog=False, limits=LIMITS))
    try:
        callback = LiveMetricsCallback.__new__(LiveMetricsCallback)
        trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[object(), callback]))
        state = SimpleNamespace(trainer=None, channel=_Channel())
        job = SimpleNamespace(state=state, run=SimpleNamespace(name="r"), done=False)
        controller.runner._active["r"] = ActiveRun(job=job, owner="o", started=0.0)
        assert controller.run_phase("r") == "loading"  # no trainer yet
        state.trainer = trainer
        for phase in ("preparing", "first_step"):
            callback.phase = phase
            assert controller.run_phase("r") == phase
        callback.phase = "training"
        assert controller.run_phase("r") is None  # "training" is said by the steps themselves
        callback.phase = "preparing"
        state.channel.append({"step": 1})
        assert controller.run_phase("r") is None  # steps are logged
        state.channel.clear()
        job.state = SimpleNamespace(channel=_Channel())  # a subprocess job's state has no trainer: it is loading
        assert controller.run_phase("r") == "loading"
        assert controller.run_phase("other") is None
    finally:
        controller.runner._active.clear()
        controller.close()


def test_malloc_is_asked_for_its_arena_bound_and_a_libc_without_it_is_no_error(monkeypatch):
    from rloo_demo.public import malloc

    calls = []

    class Libc:
        def __init__(self, answer):
            self.answer = answer

        def mallopt(self, option, value):
            calls.append((option, value))
            return self.answer

    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda name: Libc(1))
    assert malloc.bound_arenas() is True and calls == [(-8, malloc.MALLOC_ARENAS)]
    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda name: Libc(0))
    assert malloc.bound_arenas(5) is False and calls[-1] == (-8, 5)

    def no_libc(name):
        raise OSError("not found")

    monkeypatch.setattr(malloc.ctypes, "CDLL", no_libc)
    assert malloc.bound_arenas() is False
    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda name: object())  # a libc without mallopt
    assert malloc.bound_arenas() is False


def test_an_error_reads_with_the_pages_head_on_its_line_or_above_a_block():
    from rloo_demo.ui.common import error_markdown

    head = i18n.t("ru", "common.error")
    assert error_markdown("it broke", "ru") == f"{head} it broke"
    assert error_markdown("line one\nline two", "ru") == f"{head}\n\nline one\nline two"
    assert error_markdown("x") == f"{i18n.t('en', 'common.error')} x" != error_markdown("x", "ru")


@pytest.mark.parametrize(("idle", "every"), [(100.0, 25.0), (1000.0, 60.0), (0.1, 0.05)])
def test_the_session_sweep_runs_every_quarter_of_the_idle_time_and_skips_busy_sessions(
    idle, every, monkeypatch, caplog
):
    import asyncio
    import logging

    from rloo_demo.ui import gradio_internals as gi

    calls = []
    real_sleep = asyncio.sleep

    async def sleep(seconds):
        calls.append(("sleep", seconds))
        if sum(c[0] == "sleep" for c in calls) > 1:
            await asyncio.Event().wait()  # the second wait lasts until the lifespan ends

    monkeypatch.setattr(gi.asyncio, "sleep", sleep)
    monkeypatch.setattr(gi, "lazy_sessions", lambda holder: calls.append(("lazy", holder)))
    monkeypatch.setattr(
        gi, "drop_idle_sessions", lambda holder, seconds, busy: calls.append(("drop", holder, seconds, busy)) or 2
    )
    holder = SimpleNamespace(session_data={"a": 1, "b": 2, "c": 3})
    queue = SimpleNamespace(pending_event_ids_session={"s1": ["e"], "s2": ["f"]})
    app = SimpleNamespace(state_holder=holder, get_blocks=lambda: SimpleNamespace(_queue=queue))
    caplog.set_level(logging.INFO, logger=gi.log.name)

    async def serve():
        async with gi.session_lifespan(idle)(app):
            for _ in range(50):
                if any(c[0] == "drop" for c in calls):
                    break
                await real_sleep(0)

    asyncio.run(serve())
    assert calls[:3] == [("lazy", holder), ("sleep", every), ("drop", holder, idle, frozenset({"s1", "s2"}))]
    assert "dropped 2 idle sessions, 3 kept" in [r.getMessage() for r in caplog.records]


def test_without_an_idle_time_sessions_are_only_made_lazy(monkeypatch):
    import asyncio

    from rloo_demo.ui import gradio_internals as gi

    calls = []
    monkeypatch.setattr(gi, "lazy_sessions", lambda holder: calls.append("lazy"))
    monkeypatch.setattr(gi, "drop_idle_sessions", lambda *args: calls.append("drop"))

    async def serve():
        async with gi.session_lifespan(None)(SimpleNamespace(state_holder=None)):
            await asyncio.sleep(0)

    asyncio.run(serve())
    assert calls == ["lazy"]


# ----------------------------------------------------------------------------- the Train tab's figures


def _plot(p):
    return json.loads(p.plot)


def test_the_train_figures_take_the_pages_smoothing_and_mark_the_warnings_in_its_language():
    from rloo_demo.ui import plots

    records = _records(8)
    default = [_plot(p) for p in train_tab.figures(records, 0.6, "ru")]
    for odd in (True, None, "0.3", [0.3]):
        assert [_plot(p) for p in train_tab.figures(records, odd, "ru")] == default, odd  # not a number: 0.6
    smoothed = [_plot(p) for p in train_tab.figures(records, 0.3, "ru")]
    assert smoothed[0] != default[0]
    # the smoothed builders each get the page's smoothing
    for index, builder in ((1, plots.kl_figure), (6, plots.kl_estimators_figure), (7, plots.judges_figure)):
        want = json.loads(json.dumps(i18n.localize_figure(builder(records, 0.3), "ru")))
        shapes = smoothed[index]["layout"].pop("shapes", None)
        for layout in (smoothed[index]["layout"], want["layout"]):
            layout.pop("annotations", None)
        want["layout"].pop("shapes", None)
        assert smoothed[index]["data"] == want["data"], index
        assert index != 1 or shapes  # the KL plot carries the warnings' marks
    titles = [a["text"] for a in default[0]["layout"].get("annotations", [])]
    assert any(i18n.t("ru", "alert.collapse_title") in t for t in titles)


def test_shared_figures_are_built_once_a_step_and_three_other_smoothings_a_step_at_most(monkeypatch):
    from rloo_demo.server.readers import RunView

    shared = SharedBuilds()
    built = []
    real = train_plots.figures
    monkeypatch.setattr(
        train_plots,
        "figures",
        lambda records, smoothing, locale, started=None: (
            built.append((smoothing, locale)) or real(records, smoothing, locale, started)
        ),
    )
    records = _records(4)
    view = RunView("shared", "running", None, records, 10, 1.0, None, True)
    first = train_plots.shared_figures(shared, view, 0.6, "ru")
    assert train_plots.shared_figures(shared, view, 0.6, "ru") is first and built == [(0.6, "ru")]
    for s in (0.1, 0.2, 0.33):
        assert train_plots.shared_figures(shared, view, s, "ru") is not None
    assert built[1:] == [(0.1, "ru"), (0.2, "ru"), (0.35, "ru")]  # to the slider's steps of 0.05
    assert train_plots.shared_figures(shared, view, 0.4, "ru") is None  # this step's builds are spent
    assert train_plots.shared_figures(shared, view, 0.6, "en") is not None  # the default is always built
    assert train_plots.shared_figures(shared, view, None, "ru") is not None and built[-1] == (None, "ru")
    # a new record (the same step number, logged again) is a new step for the cache
    later = RunView("shared", "running", None, records[:-1] + [records[-1] | {"logged_at": 99.0}], 10, 1.0, None, True)
    assert train_plots.shared_figures(shared, later, 0.6, "ru") is not first
    # a new step has its own allowance; any number is cut to the slider's range, any language to one of the four
    assert train_plots.shared_figures(shared, later, 2.0, "xx") is not None and built[-1] == (0.95, "en")
    assert train_plots.shared_figures(shared, view, 0.95, "en") is None  # the old step's allowance is still spent


def _compare_result():
    base = [{"text": "b <i>", "reward": -0.25, "scores": {"vader_compound": -0.5}}]
    trained = [{"text": "t", "reward": 0.75, "scores": {"vader_compound": 0.5}}]
    return {
        "trained_on": ["vader_compound"],
        "seed": 3,
        "base": base,
        "trained": trained,
        "judges": {"base": {"distinct_2": 0.9, "repetition": 0.1}, "trained": {"distinct_2": 0.8, "repetition": 0.2}},
    }


def test_compare_writes_each_side_under_its_own_heading_in_the_pages_language():
    from rloo_demo.ui.views.compare import compare_html, compare_summary

    ui = SimpleNamespace(summary="summary", base="base", trained="trained", eval_report="report", eval_plot="plot")
    result = _compare_result()
    shown = compare_tab.samples_shown(ui, result, "ru")
    assert shown == {
        "summary": compare_summary(result, "ru"),
        "base": compare_html(result["base"], i18n.t("ru", "compare.base"), "ru"),
        "trained": compare_html(result["trained"], i18n.t("ru", "compare.trained"), "ru"),
    }
    assert shown["base"] != compare_html(result["base"], i18n.t("ru", "compare.base"), "en")
    evaluation = {"base_rewards": [0.1], "trained_rewards": [0.4], "saved": True}
    again = compare_tab.relocalized(ui, result, evaluation, "ru")
    assert again == shown | compare_tab.evaluation_shown(ui, evaluation, "ru")
    assert compare_tab.relocalized(ui, None, evaluation, "ru") == compare_tab.evaluation_shown(ui, evaluation, "ru")
    assert compare_tab.relocalized(ui, result, "an error", "ru") == shown
    assert compare_tab.relocalized(ui, None, None, "ru") == {}


def test_the_toy_view_is_its_figure_and_table_for_the_inputs_in_the_pages_language():
    from rloo_demo.i18n import localize_figure
    from rloo_demo.toy import exact_table, variance_curves
    from rloo_demo.ui import plots
    from rloo_demo.ui.common import as_plot
    from rloo_demo.ui.tabs import toy_panel
    from rloo_demo.ui.views.toy import toy_markdown

    ui = SimpleNamespace(plot="plot", table="table")
    out = toy_panel.toy_view(ui, 0.4, 5, 0.25, "ru")
    figure = plots.toy_variance_figure(variance_curves(0.4, 0.25), selected_k=5)
    assert out == {
        "plot": as_plot(localize_figure(figure, "ru")),
        "table": toy_markdown(exact_table(0.4, 5, 0.25), "ru"),
    }
    assert out != toy_panel.toy_view(ui, 0.4, 5, 0.25, "en")
    assert out["plot"] != toy_panel.toy_view(ui, 0.4, 5, 0.0, "ru")["plot"]  # the offset reaches the curves
    assert out["plot"] != toy_panel.toy_view(ui, 0.4, 3, 0.25, "ru")["plot"]  # the chosen K is marked


# ----------------------------------------------------------------------------- train tab units


def records(n, shift=0.0, start=1):
    """Steps with every metric the Train tab plots, wavy so that smoothing changes each curve."""
    out = []
    for i in range(n):
        step, w = start + i, math.sin(i * 1.7 + shift)
        out.append(
            {
                "step": step,
                "logged_at": 1000.0 + step,
                "reward": 0.1 * i + w,
                "reward_std": 0.2 + 0.1 * abs(w),
                "kl": 0.01 * i + 0.005 * w,
                "grad_norm": 1.0 + w,
                "entropy": 2.0 - 0.3 * w,
                "completions/mean_length": 20 + 5 * w,
                "frac_reward_zero_std": 0.5 + 0.4 * w / 2,
                "frac_raw_score_zero_std": 0.4 + 0.3 * w / 2,
                "kl_k1": 0.02 + 0.01 * w,
                "kl_k2": 0.01 + 0.004 * w,
                "kl_k3": 0.015 + 0.005 * abs(w),
            }
        )
    return out


def _data(figure):
    return json.loads(json.dumps(i18n.localize_figure(figure, "ka")))["data"]


def test_every_smoothed_figure_of_the_train_tab_gets_the_pages_smoothing():
    recs = records(12)
    drawn = [json.loads(p.plot) for p in train_tab.figures(recs, 0.3, "ka")]
    secondary = plots.secondary_figures(recs, 0.3)
    expected = {
        2: secondary["grad_norm"],
        3: secondary["entropy"],
        4: secondary["completion_length"],
        5: secondary["frac_reward_zero_std"],
        6: plots.kl_estimators_figure(recs, 0.3),
    }
    unsmoothed = plots.secondary_figures(recs, 0.0)
    for index, figure in expected.items():
        assert drawn[index]["data"] == _data(figure), index
    assert _data(unsmoothed["grad_norm"]) != _data(secondary["grad_norm"])  # the records tell smoothings apart
    assert _data(plots.kl_estimators_figure(recs, 0.0)) != _data(plots.kl_estimators_figure(recs, 0.3))
    assert _data(plots.secondary_figures(recs)["entropy"]) != drawn[3]["data"]  # the builder's default is not 0.3


def _view(name, recs, status="running", reason=None):
    return RunView(name, status, None, recs, 30, 12.0, None, status == "running", reason=reason)


def test_the_same_number_of_records_with_another_last_step_or_time_is_a_new_build():
    shared = SharedBuilds()
    first = train_plots.shared_figures(shared, _view("same", records(5)), 0.6, "ka")
    moved = records(5, start=2)  # five records ending at step 6, logged at the same time as step 6 would be
    moved[-1]["logged_at"] = records(5)[-1]["logged_at"]
    assert train_plots.shared_figures(shared, _view("same", moved), 0.6, "ka") is not first
    relogged = records(5)
    relogged[-1]["logged_at"] += 50.0  # the same step logged again (a run of the same name, restarted)
    assert train_plots.shared_figures(shared, _view("same", relogged), 0.6, "ka") is not first
    assert train_plots.shared_figures(shared, _view("same", records(5)), 0.6, "ka") is first
    assert train_plots.shared_figures(shared, _view("empty", []), 0.6, "ka") is not None  # no records yet: still drawn


def test_the_warnings_are_built_again_when_the_last_record_changes_not_only_the_count():
    ticks = _Ticks()
    tab = _tab(ticks)
    base = records(6)
    train_tab._alerts_and_summary(tab, _view("texts", base), "ka")
    calls = len(ticks.calls)
    assert train_tab._alerts_and_summary(tab, _view("texts", records(6)), "ka") and len(ticks.calls) == calls
    for change in ({"step": 60}, {"logged_at": 5.0}):
        changed = records(6)
        changed[-1] = changed[-1] | change  # the records before the last one are the same
        train_tab._alerts_and_summary(tab, _view("texts", changed), "ka")
        assert len(ticks.calls) == calls + 1, change
        calls += 1
    train_tab._alerts_and_summary(tab, _view("none", []), "ka")  # a run with no records: built, not an error


@pytest.mark.parametrize("locale", ["ka", "ru"])
def test_the_status_line_gives_the_phase_and_a_stopped_runs_reason_in_the_pages_language(locale):
    loading = train_tab.render(_tab(_Ticks(phase="loading")), _view("p", []), 0.6, 0, locale)
    assert loading["status"] == phase_line("loading", 12.0, 30, locale) != phase_line("loading", 12.0, 30, "en")
    reason = "its page was gone for more than 60 s (abandoned)"
    stopped = train_tab.render(_tab(_Ticks()), _view("s", records(3), "stopped", reason), 0.6, 3, locale)
    assert stopped["status"] == status_line("stopped", records(3), 30, 12.0, "s", reason, locale)
    assert stopped["status"] != status_line("stopped", records(3), 30, 12.0, "s", None, locale)


def test_a_run_that_said_finished_before_it_left_the_runner_gets_its_summary_once_it_has():
    """A run's status is "finished" a moment before its thread ends: a tick then sees it finished and still live,
    and the controller has no summary for a live run yet. The next tick, the run ended, with the same records and
    status, must build the texts again and show the summary (the browser test that waited for it failed once)."""
    from rloo_demo.store.summary import summarize
    from rloo_demo.ui.views.train import summary_markdown

    recs = records(6)
    summary = summarize(recs)

    class Ending(_Ticks):
        def run_summary(self, name, locale):
            self.calls.append(("run_summary", name, locale))
            return None if self.live else (summary, [])

    ticks = Ending()
    ticks.live = True
    finishing = RunView("ending", "finished", None, recs, 6, 3.0, None, True)
    assert train_tab._alerts_and_summary(_tab(ticks), finishing, "ka")[1] == ""
    ticks.live = False
    ended = RunView("ending", "finished", None, recs, 6, 3.0, None, False)
    assert train_tab._alerts_and_summary(_tab(ticks), ended, "ka")[1] == summary_markdown(summary, [], "ka") != ""
    assert len(ticks.calls) == 2
