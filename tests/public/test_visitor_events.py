"""Who a visitor is, as the page's own events reach the server: through gradio's queue (or its plain route, for the
page's unqueued events), from distinct loopback addresses, on a public server. Every per-visitor rule of the
training slot (one place in the line, the hour's compute budget, whose run it is) keys the visitor by its address,
whatever client id the page sends; and every handler that takes the request is handed it by gradio.

Distinct loopback addresses stand for distinct visitors (127.0.0.2, 127.0.0.3, ...). The training jobs here are
stand-ins that hold the slot until they are stopped.
``python -m pytest tests/public/test_visitor_events.py`` (about 20 s).
"""

import inspect
import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from apputil import HeldJob, call_event, free_port
from factories import finished_run

from rloo_demo.errors import NotFound
from rloo_demo.i18n import t
from rloo_demo.public.gates import Caller
from rloo_demo.public.limits import PUBLIC
from rloo_demo.public.retention import visitor_digest
from rloo_demo.server import runner as runner_module
from rloo_demo.ui.forms import FORM_FIELDS, defaults

A, B, C, D = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"
LIMITS = replace(PUBLIC, abandon_seconds=None)  # the stand-in runs are watched by nobody: nothing abandons them


@pytest.fixture
def app(space_runs_dir, monkeypatch):
    monkeypatch.setattr(runner_module, "TrainingJob", HeldJob)
    monkeypatch.setattr(runner_module, "check_resources", lambda config: None)
    for old in space_runs_dir.iterdir():  # each test starts on an empty runs folder
        if old.is_dir():
            import shutil

            shutil.rmtree(old)
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app, launch_options, prepare
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(str(space_runs_dir), limits=LIMITS))
    demo = prepare(build_app(controller), LIMITS)
    port = free_port()
    options = launch_options(LIMITS, controller.events) | {"server_name": "127.0.0.1", "server_port": port}
    demo.launch(prevent_thread_lock=True, quiet=True, **options)
    try:
        yield f"http://127.0.0.1:{port}/", controller, demo
    finally:
        controller.runner.stop_all("the test ended")
        demo.close()
        controller.close()


def start(url, address, cid, session, **settings):
    """The page's Start (``train_start``), from ``address``, with client id ``cid``: its outputs by name (a state's
    is None: gradio keeps states on the server)."""
    form = defaults() | settings
    out = call_event(url, "train_start", [cid, *[form[f] for f in FORM_FIELDS], "en"], session, address=address)
    return dict(zip(["watched", "drawn", "form_error", "status", "start"], out, strict=True))


def tick(url, address, cid, session):
    data = [cid, None, -1, 0.6, -1, True, None, "train", "en"]
    return call_event(url, "page_tick", data, session, address=address)


def test_one_address_with_five_client_ids_takes_one_place_and_one_start_rate(app):
    """B's run holds the slot. A sends the page's Start five times, each with a new client id and a new session:
    A takes one place in the line (place 1, each answer says so), its fifth Start is over the Start rate of its
    address (4 a minute), and B's run is recorded as B's address's, not as a client id's."""
    url, controller, _ = app
    assert start(url, B, "b-client", "b")["form_error"] == ""
    (active,) = controller.runner.active()
    assert active.visitor == B and active.owner == "b-client"
    status = json.loads((active.run.path / "status.json").read_text())
    assert status["visitor"] == visitor_digest(B) != visitor_digest("b-client")

    answers = [start(url, A, f"a-client-{i}", f"a-{i}") for i in range(5)]
    waiting = t("en", "train.waiting", place=1, wait="")[:20]  # "Place 1 in the line ..."
    assert [a["status"].startswith(waiting) for a in answers[:4]] == [True] * 4, answers
    assert "too many Start attempts" in answers[4]["form_error"], answers[4]
    assert len(controller.runner.line) == 1 and controller.runner.line.place(A) == 1
    for i in range(5):
        assert controller.runner.line.place(f"a-client-{i}") is None


def test_an_address_over_its_hour_cannot_train_under_a_new_client_id(app):
    """A's address has used 890 of its 900 s this hour: the page's Start from that address is refused whatever
    client id it sends, and no run starts; another address starts at once."""
    url, controller, _ = app
    runner = controller.runner
    runner.budget.record(A, start=runner.budget.clock() - 890)
    for i in range(2):
        refused = start(url, A, f"fresh-id-{i}", f"a-{i}")
        assert "this hour's training time" in refused["form_error"], refused
    assert runner.active() == [] and len(runner.line) == 0
    assert start(url, B, "b-client", "b")["form_error"] == ""
    assert [a.visitor for a in runner.active()] == [B]


def test_a_tick_keeps_only_its_own_addresss_place(app):
    """C waits in the line behind B's run. D's page tick with C's address as its client id leaves C's place as it
    was; C's own tick keeps it."""
    url, controller, _ = app
    runner = controller.runner
    start(url, B, "b-client", "b")
    assert start(url, C, "c-client", "c")["status"]
    (ticket,) = list(runner.line._line)
    assert ticket.visitor == C
    ticket.last_seen = 0.0
    tick(url, D, C, "d")
    tick(url, D, "c-client", "d")  # nor C's client id: a place is the address's
    assert ticket.last_seen == 0.0
    before = time.monotonic()
    tick(url, C, "c-client", "c")
    assert ticket.last_seen >= before


# Each page event and endpoint whose handler takes the request: the controller method it reaches with the caller,
# and the data it is sent (the rest is sent as null, as a browser sends an unset state).
CALLERS = {
    "train_start": ("start_from_form", lambda: ["cid", *[defaults()[f] for f in FORM_FIELDS], "en"]),
    "train_stop": ("stop", lambda: ["cid", "some-run", "en"]),
    "rollouts_probe": ("probe", lambda: ["cid", "some-run", "This movie was", 2, 0, "en", "some-run"]),
    "compare_sample": ("compare", lambda: ["cid", "some-run", "This movie was", 2, 8, 1.0, 1.0, 0, "en"]),
    "compare_evaluate": ("evaluate", lambda: ["cid", "some-run", 8, 0, "en"]),
    "runs_notes": ("may_manage", lambda: ["cid", "some-run", "en"]),
    "runs_label": ("label_run", lambda: ["cid", "some-run", "label", "note", ["some-run"], "en"]),
    "runs_delete": ("delete_run", lambda: ["cid", "some-run", ["some-run"], "en"]),
    "page_tick": ("follow", lambda: ["cid", None, -1, 0.6, -1, True, None, "train", "en"]),
    "page_load": ("default_run", lambda: ["cid", "en"]),
    "start_run": ("start", lambda: ["{}", "cid"]),
    "stop_run": ("stop", lambda: ["some-run", "cid"]),
    "poll_metrics": ("poll_metrics", lambda: ["some-run", 0]),
    "get_rollouts": ("get_rollouts", lambda: ["some-run", 0]),
    "compare": ("compare", lambda: ["some-run", "This movie was", 2, 0]),
    "list_runs": ("list_runs", lambda: []),
}


def test_every_handler_that_takes_the_request_is_handed_it_through_the_queue(app, monkeypatch):
    """Each event whose handler has a ``request`` parameter, sent from its own address through gradio's queue (or
    its plain route): the controller is handed a caller at that address. The table above covers every such handler
    of the page, so a new one is checked too."""
    url, controller, _ = app
    config = httpx.get(f"{url}config", timeout=30).json()
    named = {d["api_name"] for d in config["dependencies"] if d.get("api_name")}
    assert set(CALLERS) <= named
    seen: dict[str, list[Caller]] = {}

    def recorder(method):
        def record(*args, **kwargs):
            seen.setdefault(method, []).extend(a for a in (*args, *kwargs.values()) if isinstance(a, Caller))
            raise NotFound("recorded")

        return record

    finished_run(controller.runner.runs_dir, "some-run")
    # the page's own way to a run picker's choices: the tab's refresh, in the session that then sends the event
    for event in CALLERS:
        refresh = {"compare_": ("compare_refresh", []), "runs_": ("runs_refresh", [[]])}
        for prefix, (name, data) in refresh.items():
            if event.startswith(prefix):
                call_event(url, name, data, f"audit-{event}", address=B)
    for method in {m for m, _ in CALLERS.values()}:
        monkeypatch.setattr(controller, method, recorder(method))
    wrong = {}
    for i, (event, (method, data)) in enumerate(sorted(CALLERS.items())):
        address = f"127.0.1.{i + 2}"
        seen.pop(method, None)
        try:
            call_event(url, event, data(), f"audit-{event}", address=address)
        except RuntimeError as exc:
            if "recorded" not in str(exc):
                wrong[event] = str(exc)[-200:]
                continue
        hosts = {c.host for c in seen.get(method, [])}
        if hosts != {address}:
            wrong[event] = f"the controller's {method} saw {hosts or 'no caller'}, not {address}"
    assert wrong == {}


def test_the_table_names_every_handler_that_takes_the_request(app):
    """Every handler of the page with a ``request`` parameter is in ``CALLERS`` (a new one must be added there)."""
    demo = app[2]
    takes = {
        fn.api_name
        for fn in demo.fns.values()
        if fn.fn is not None and "request" in inspect.signature(fn.fn).parameters
    }
    assert takes == set(CALLERS)


def own_run(root, name, visitor, cid, ended):
    """A finished run on disk as a visitor's Start leaves it: its visitor's and its client id's hashes."""
    from rloo_demo.config import RunConfig
    from rloo_demo.public.gates import owner_digest
    from rloo_demo.store.folder import RunFolder

    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, max_steps=2))
    run.append_metrics({"step": 1, "reward": 0.1})
    run.set_status("finished", finished=ended, owner=owner_digest(cid), visitor=visitor_digest(visitor))
    return run


def test_a_run_whose_end_a_page_saw_first_still_brings_its_visitor_back_to_its_cap(space_runs_dir, monkeypatch):
    """A has its 3 runs (the cap); its page starts a 4th, stops it, and its next tick is what notices the end.
    The watchdog's next round prunes A's oldest: 3 again. (It pruned only ends it noticed itself, and A kept 4
    runs until its next Start.)"""
    monkeypatch.setattr(runner_module, "TrainingJob", HeldJob)
    monkeypatch.setattr(runner_module, "check_resources", lambda config: None)
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app, launch_options, prepare
    from rloo_demo.ui.controller import Controller

    for old in space_runs_dir.iterdir():
        if old.is_dir():
            import shutil

            shutil.rmtree(old)
    now = time.time()
    runs = [own_run(space_runs_dir, f"a-old-{i}", A, "a-client", now - 600 + i) for i in range(3)]
    controller = Controller(Runner(str(space_runs_dir), limits=LIMITS, watchdog=False))  # its rounds driven here
    demo = prepare(build_app(controller), LIMITS)
    port = free_port()
    options = launch_options(LIMITS, controller.events) | {"server_name": "127.0.0.1", "server_port": port}
    demo.launch(prevent_thread_lock=True, quiet=True, **options)
    url = f"http://127.0.0.1:{port}/"
    try:
        assert start(url, A, "a-client", "a")["form_error"] == ""
        (active,) = controller.runner.active()
        call_event(url, "train_stop", ["a-client", active.name, "en"], "a", address=A)
        active.job.join(30)
        tick(url, A, "a-client", "a")  # the page's tick is what sees the run end
        assert controller.runner.active() == [] and all(r.path.is_dir() for r in runs)
        controller.runner.watch_round()
        mine = sorted(p.name for p in space_runs_dir.iterdir() if p.is_dir())
        assert mine == sorted(["a-old-1", "a-old-2", active.name])  # the oldest went
    finally:
        demo.close()
        controller.close()


def test_a_disk_filled_by_young_runs_lets_the_next_start_through(app, monkeypatch):
    """The disk is under its floor (200 MB free) and every run on it ended minutes ago: B's Start clears A's oldest
    runs until the floor is free, and starts. (It was refused, and every Start after it, until an operator
    acted.)"""
    from rloo_demo.public import retention

    url, controller, _ = app
    root = Path(controller.runner.runs_dir)
    now = time.time()
    young = [own_run(root, f"a-young-{i}", A, "a-client", now - 300 + 60 * i) for i in range(3)]

    def disk_usage(path):  # 100 MB free, and each of A's runs deleted frees 100 MB
        gone = sum(not run.path.exists() for run in young)
        return SimpleNamespace(free=(100 + 100 * gone) * 10**6, total=10**12, used=10**12)

    monkeypatch.setattr(retention.shutil, "disk_usage", disk_usage)
    monkeypatch.setattr(runner_module.shutil, "disk_usage", disk_usage)
    answer = start(url, B, "b-client", "b")
    assert answer["form_error"] == "", answer
    assert [a.visitor for a in controller.runner.active()] == [B]
    assert [r.path.is_dir() for r in young] == [False, True, True]  # one freed enough: the oldest went


def details(url, address, session, name):
    """The Runs tab's details of ``name``, as the page asks: its refresh (the picker's choices), then the pick."""
    call_event(url, "runs_refresh", [[], None, "en"], session, address=address)
    out = call_event(url, "runs_details", [name, "en"], session, address=address)
    return [Path(f["path"]).name for f in out[0] or []], out


def test_two_visitors_asking_for_one_runs_downloads_at_once_get_them_and_an_export_is_built_once(app):
    """A and B pick the same finished run's details at the same moment: both get its four downloads, no internal
    error. A then picks five other runs and the first again: the first's export is the one built before (its zip
    not written again), where four kept exports re-zipped it."""
    from factories import finished_run

    url, controller, _ = app
    root = Path(controller.runner.runs_dir)
    for i in range(6):
        finished_run(root, f"done-{i}")
    answers, ready = {}, threading.Barrier(2)

    def ask(address, session):
        ready.wait(30)
        answers[address] = details(url, address, session, "done-0")[0]

    threads = [threading.Thread(target=ask, args=(who, f"s-{who}")) for who in (A, B)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    expected = [f"done-0-{part}" for part in ("config.yaml", "metrics.csv", "model.zip")]
    assert sorted(answers[A]) == sorted(answers[B]) == expected, answers
    (zipped,) = Path(controller._exports).glob("done-0-*/done-0-model.zip")
    stamp = zipped.stat().st_mtime_ns
    for i in range(1, 6):
        assert f"done-{i}-model.zip" in details(url, A, "s-a", f"done-{i}")[0]
    assert sorted(details(url, A, "s-a", "done-0")[0]) == expected
    assert zipped.is_file() and zipped.stat().st_mtime_ns == stamp
    assert len([p for p in Path(controller._exports).iterdir() if p.is_dir()]) == 6
