"""A visitor's own page, through the page's own events from distinct loopback addresses: what a fresh page watches
(on a public server only its visitor's runs; on a local one the newest), what it says while another visitor's run
holds the slot, whether Start is on, what Stop says when there is nothing to stop, Run details following a click in
the Runs table, and the reproduce command. The values compared are worked out here: the texts from the locales
with the numbers the test set, the plots from the Train tab's own empty figures, the command through the CLI's own
parser.

The training jobs are stand-ins that hold the slot until stopped (``test_visitor_events.HeldJob``).
``python -m pytest tests/ui/test_own_page.py`` (about half a minute).
"""

import json
import shlex
import shutil
from contextlib import contextmanager
from dataclasses import replace

import pytest
from apputil import HeldJob, call_event, free_port
from factories import finished_run, someones_finished_run, timed_run

from rloo_demo.cli import build_parser, config_from_args
from rloo_demo.config import RunConfig
from rloo_demo.engine.callbacks import SAVE_RESERVE_SECONDS
from rloo_demo.i18n import t
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.server import runner as runner_module
from rloo_demo.server.estimate import run_speed
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.forms import FIELD, FORM_FIELDS, defaults
from rloo_demo.ui.gradio_internals import SKIP
from rloo_demo.ui.tabs import train as train_tab
from rloo_demo.ui.tabs import train_plots

A, B = "127.0.0.2", "127.0.0.3"
PUBLIC_HELD = replace(PUBLIC, abandon_seconds=None)  # the stand-in runs are watched by nobody: nothing abandons them
LOCAL_HELD = replace(LOCAL, max_run_seconds=300)
# the page's own outputs, then the Train tab's load outputs (ui.tabs.train.build), its plots after them
LOAD = ["client_id", "watched", "locale", "language", "drawn", "status", "estimate", "start"]
PLOTS = len(train_plots.TRAIN_PLOTS)
TICK = ["watched", "status", "run_error", *[f"plot{i}" for i in range(PLOTS)], "drawn", "start", "alerts", "summary"]


@contextmanager
def serving(root, limits):
    """The page as ``python app.py`` serves it, with ``limits``, over an emptied runs folder."""
    from rloo_demo.ui.app import build_app, launch_options, prepare

    for old in root.iterdir():
        if old.is_dir():
            shutil.rmtree(old)
    controller = Controller(Runner(str(root), limits=limits))
    demo = prepare(build_app(controller), limits)
    port = free_port()
    options = launch_options(limits, controller.events) | {"server_name": "127.0.0.1", "server_port": port}
    demo.launch(prevent_thread_lock=True, quiet=True, **options)
    try:
        yield f"http://127.0.0.1:{port}/", controller
    finally:
        controller.runner.stop_all("the test ended")
        demo.close()
        controller.close()


@pytest.fixture
def held(monkeypatch):
    monkeypatch.setattr(runner_module, "TrainingJob", HeldJob)
    monkeypatch.setattr(runner_module, "check_resources", lambda config: None)


def load(url, address, cid, session, locale="en") -> dict:
    out = call_event(url, "page_load", [cid, locale], session, address=address)
    return dict(zip(LOAD, out[: len(LOAD)], strict=True)) | {"plots": out[len(LOAD) : len(LOAD) + PLOTS]}


def tick(url, address, cid, session) -> dict:
    """The page's tick in a session that has loaded: the watched run and the language are the session's states."""
    out = call_event(url, "page_tick", [cid, None, -1, 0.6, -1, True, None], session, address=address)
    return dict(zip(TICK, out[: len(TICK)], strict=True))


def start(url, address, cid, session) -> dict:
    form = defaults()
    out = call_event(url, "train_start", [cid, *[form[f] for f in FORM_FIELDS], "en"], session, address=address)
    return dict(zip(["watched", "drawn", "form_error", "status", "start"], out, strict=True))


def empty_plots(locale) -> list[str]:
    """The Train tab's titled empty axes, as a page with no run gets them."""
    return [figure.plot for figure in train_tab.figures([], None, locale)]


def before_wait(locale, **numbers) -> str:
    """The slot's busy note up to its wait (a time the test does not fix)."""
    return t(locale, "train.slot_busy", wait="\0", **numbers).split("\0")[0]


# ----------------------------------------------------------------------------- a public newcomer's first screen


@pytest.mark.parametrize("locale", ["en", "ru"])
def test_a_new_public_visitor_sees_no_run_yet_not_another_visitors_finished_run(space_runs_dir, locale):
    """B's finished run (with a collapse warning) is on disk. A's fresh page says "No run yet" and draws the empty
    axes, and its tick draws none of B's run: no status, plots, warnings or summary of it. B's own page, after a
    reload (the same client id), still shows B's run; so does a page from B's address with a new client id."""
    with serving(space_runs_dir, PUBLIC_HELD) as (url, controller):
        someones_finished_run(space_runs_dir, "theirs", "b-client", B)
        page = load(url, A, "a-client", "a", locale)
        assert page["status"] == t(locale, "train.no_run")
        # Start is built disabled (a click before the load has the browser's client id would be refused): the load
        # enables it for a visitor with no run in training
        assert page["start"]["interactive"] is True
        assert [p["plot"] for p in page["plots"]] == empty_plots(locale)
        ticked = tick(url, A, "a-client", "a")
        assert ticked["status"] == t(locale, "train.no_run")
        assert all(ticked[f"plot{i}"] == SKIP for i in range(PLOTS))  # the empty axes stay
        assert ticked["alerts"] == SKIP and ticked["summary"] == SKIP
        assert controller.list_runs()[0]["name"] == "theirs"  # it stays in the Runs tab
        for cid, session in (("b-client", "b"), ("b-new-tab", "b2")):
            load(url, B, cid, session, locale)
            mine = tick(url, B, cid, session)
            assert "<code>theirs</code>" in mine["status"] and mine["summary"] not in ("", SKIP), mine


def test_a_new_public_visitor_is_told_the_slot_is_busy_without_that_runs_plots(space_runs_dir, held):
    """B's run holds the one slot. A's fresh page says "No run yet" and that the slot is busy, with B's run's
    progress and A's place if it presses Start; its plots stay the empty axes. Once A presses Start, its page says
    its place in the line instead."""
    with serving(space_runs_dir, PUBLIC_HELD) as (url, controller):
        assert start(url, B, "b-client", "b")["form_error"] == ""
        page = load(url, A, "a-client", "a", "ru")
        busy = before_wait("ru", step=0, max_steps=defaults()["max_steps"], place=1)
        assert page["status"].startswith(t("ru", "train.no_run") + "<br>" + busy), page["status"]
        assert [p["plot"] for p in page["plots"]] == empty_plots("ru")
        ticked = tick(url, A, "a-client", "a")
        assert ticked["status"].startswith(t("ru", "train.no_run") + "<br>" + busy), ticked["status"]
        assert all(ticked[f"plot{i}"] == SKIP for i in range(PLOTS)) and ticked["summary"] == SKIP
        place = t("ru", "train.waiting", place=1, wait="\0").split("\0")[0]
        assert start(url, A, "a-client", "a")["status"].startswith(place)
        waiting = tick(url, A, "a-client", "a")["status"]
        assert waiting.startswith(place) and busy not in waiting, waiting


# ----------------------------------------------------------------------------- Start on a page watching a run


def test_a_page_watching_another_visitors_run_keeps_start_on_and_says_it_would_queue(space_runs_dir, held):
    """On a local server a fresh page watches the newest run. A page at another address watching B's run keeps
    Start on and says the slot is busy (its Start takes place 1 in the line); B's own page, and B's second page
    with another client id (the runner would refuse B a second run), have Start off and no such note."""
    with serving(space_runs_dir, LOCAL_HELD) as (url, controller):
        assert start(url, B, "b-client", "b")["form_error"] == ""
        (active,) = controller.runner.active()
        busy = before_wait("en", step=0, max_steps=active.config.max_steps, place=1)
        load(url, A, "a-client", "a")
        other = tick(url, A, "a-client", "a")
        assert other["start"]["interactive"] is True and busy in other["status"], other
        for cid, session in (("b-client", "b"), ("b-second", "b2")):
            load(url, B, cid, session)
            own = tick(url, B, cid, session)
            assert own["start"]["interactive"] is False and busy not in own["status"], (cid, own)


# ----------------------------------------------------------------------------- Stop with nothing to stop


@pytest.mark.parametrize("locale", ["ru", "ka"])
def test_stop_on_a_page_whose_run_is_not_training_says_there_is_nothing_to_stop(space_runs_dir, locale):
    """A's reloaded page shows its own finished run; Stop says there is nothing to stop, in the page's language;
    so does Stop on a fresh page of another visitor, which watches nothing."""
    with serving(space_runs_dir, PUBLIC_HELD) as (url, controller):
        someones_finished_run(space_runs_dir, "mine", "a-client", A)
        load(url, A, "a-client", "a", locale)
        assert "<code>mine</code>" in tick(url, A, "a-client", "a")["status"]  # the page watches it
        said = call_event(url, "train_stop", ["a-client"], "a", address=A)
        assert said == [t(locale, "train.not_training", name="mine")]
        load(url, B, "b-client", "b", locale)
        assert call_event(url, "train_stop", ["b-client"], "b", address=B) == [t(locale, "train.nothing_to_stop")]
    assert t(locale, "train.not_training", name="x") != t("en", "train.not_training", name="x")


# ----------------------------------------------------------------------------- Run details follow the Runs table


def test_a_click_on_a_runs_row_moves_run_details_to_that_run(space_runs_dir):
    """The Runs table lists "newer" first, so Run details starts there; a click on the row of "older" sets Run
    details to "older" (its change then shows that run's files and command). A row that is no listed run leaves
    the pick alone."""
    with serving(space_runs_dir, PUBLIC_HELD) as (url, controller):
        finished_run(space_runs_dir, "older")
        finished_run(space_runs_dir, "newer")
        listed = call_event(url, "runs_refresh", [[], None], "r")
        assert listed[2]["value"] == "newer"
        table = listed[0].get("value", listed[0])
        row = next(r for r in table["data"] if r[0] == "older")
        picked, message = call_event(
            url, "runs_pick_row", [], "r", event_data={"index": [1, 0], "value": "older", "row_value": row}
        )
        assert picked["value"] == "older" and message == ""
        assert [c[1] for c in picked["choices"]] == ["newer", "older"]
        gone, _ = call_event(
            url, "runs_pick_row", [], "r", event_data={"index": [0, 0], "value": "x", "row_value": ["no-such-run"]}
        )
        assert gone == SKIP


# ----------------------------------------------------------------------------- the reproduce command


def reproduced(command: str) -> RunConfig:
    """The config the shown command trains, read by the CLI's own parser."""
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "rloo_demo", "train"], words
    return config_from_args(build_parser().parse_args(words[3:]))


def test_the_reproduce_command_trains_the_same_config_into_the_same_runs_folder(tmp_path):
    """A local server whose runs folder is not the default: the command, parsed by the CLI, is the run's config,
    its runs folder included (its name aside: a new run gets its own). A public server's command keeps the default
    folder, which the server itself would accept, and names no server path."""
    root = tmp_path / "elsewhere" / "my runs"
    settings = RunConfig(output_dir=str(root), run_name="done", num_generations=6, beta=0.0, max_steps=7)
    run = RunFolder.create(settings)
    run.append_metrics({"step": 1, "reward": 0.1})
    run.set_status("finished", step=1)
    local = Controller(Runner(str(root), limits=LOCAL, watchdog=False))
    try:
        _, command, _ = local.run_details("done")
        assert reproduced(command) == replace(settings, run_name=None) and settings.output_dir == str(root)
    finally:
        local.close()
    public = Controller(Runner(str(root), limits=PUBLIC, watchdog=False))
    try:
        _, command, _ = public.run_details("done")
        again = reproduced(command)
        assert again == replace(settings, run_name=None, output_dir=RunConfig().output_dir)
        assert str(root) not in command and "--output-dir" not in command
        public.parse_settings(again.to_dict())  # what the command trains, this server would start
    finally:
        public.close()


# ----------------------------------------------------------------------------- the estimate against the cap


def steps_before_the_cap(budget, load, first, step) -> int:
    """The steps a run finishes under the budget, by the callback's rule: after each step it goes on only if the
    next one, with the time to save, ends before the budget (``LiveMetricsCallback.out_of_budget``)."""
    clock, steps = load + first, 1
    while clock + step + SAVE_RESERVE_SECONDS < budget:
        clock, steps = clock + step, steps + 1
    return steps


@pytest.mark.parametrize("locale", ["en", "ru"])
def test_when_the_default_run_does_not_fit_the_cap_the_estimate_names_the_setting_to_lower(tmp_path, locale):
    """This server timed a run of the default's work at 2.5 s a step: 150 steps do not fit its 5 minutes. The
    estimate says where the run would stop and names the Steps box, by its label, with the most steps that fit;
    with that many steps it fits, with one more it does not."""
    timed = timed_run(tmp_path, num_generations=4, prompts_per_step=4, max_new_tokens=24)
    with open(timed.path / "metrics.jsonl", "w") as f:  # the same run, slower: 6 s, then 2.5 s a step
        for step, seconds in enumerate([6.0] + [2.5] * 7, start=1):
            clock = 6.0 + 2.5 * (step - 1)
            f.write(
                json.dumps({"step": step, "step_time": seconds, "time": clock, "logged_at": 1e9 + 9 + clock}) + "\n"
            )
    timed.set_status("finished", started=1e9)
    controller = Controller(Runner(str(tmp_path), limits=PUBLIC, watchdog=False))
    try:
        speed = run_speed(RunConfig(), controller.reader)
        assert (speed.load, speed.first, speed.step) == (9.0, 6.0, 2.5)
        fit = steps_before_the_cap(300, 9.0, 6.0, 2.5)
        assert fit < defaults()["max_steps"]
        text = controller.estimate(defaults(), locale)
        box = {k: f"**{t(locale, FIELD[k].label)}**" for k in ("max_steps", "num_generations", "max_new_tokens")}
        lower = t(
            locale,
            "estimate.lower",
            steps_box=box["max_steps"],
            steps=fit,
            k_box=box["num_generations"],
            tokens_box=box["max_new_tokens"],
        )
        assert lower in text and t(locale, "estimate.over_budget", budget="5:00", steps=fit) in text, text
        fits = controller.estimate(defaults() | {"max_steps": fit}, locale)
        assert t(locale, "estimate.budget", budget="5:00") in fits and box["max_steps"] not in fits
        assert lower.split(str(fit))[0] in controller.estimate(defaults() | {"max_steps": fit + 1}, locale)
    finally:
        controller.close()


def test_a_page_load_refused_for_its_reads_keeps_the_browsers_id(space_runs_dir, monkeypatch):
    """A load whose reading of the runs is refused (here the controller's default run) shows the reason in the
    status line, and the page keeps the client id it sent (a new one would cost the browser its runs: only that id
    may stop them). A load over the visitor's event budget never reaches the handler: the middleware refuses it."""
    from rloo_demo.errors import RateLimited

    with serving(space_runs_dir, PUBLIC_HELD) as (url, controller):
        someones_finished_run(space_runs_dir, "mine", "a-client", A)

        def spent(caller=None):
            raise RateLimited(f"too many reads from {caller.host}")

        monkeypatch.setattr(controller, "default_run", spent)
        page = load(url, A, "a-client", "a")
        assert page["client_id"] == "a-client" and page["status"] == f"too many reads from {A}", page
        monkeypatch.undo()
        load(url, A, page["client_id"], "a-again")  # the next load, with the id it kept: its run is its own
        assert "<code>mine</code>" in tick(url, A, "a-client", "a-again")["status"]
