"""Two pieces of the app's housekeeping on stand-ins with a clock the test sets: SIGTERM's shutdown when the
first run's wait used up the whole allowance (the next one gets no time, not a second more) and what it logs,
and the idle-session sweep at its cutoff exactly, with the state callbacks told which session went."""

from __future__ import annotations

import datetime
import logging
import signal
import threading
from types import SimpleNamespace

import pytest

from rloo_demo.ui import app as app_module
from rloo_demo.ui import gradio_internals as gi


def test_sigterm_gives_later_runs_no_time_once_the_allowance_is_spent_and_logs_what_it_did(monkeypatch, caplog):
    handlers, events = {}, []
    monkeypatch.setattr(signal, "signal", lambda sig, fn: handlers.__setitem__(sig, fn))
    clock = [100.0]
    monkeypatch.setattr(app_module.time, "monotonic", lambda: clock[0])

    def join(name, spend):
        def wait(timeout):
            events.append((name, timeout))
            clock[0] += spend

        return wait

    runs = [
        SimpleNamespace(
            job=SimpleNamespace(done=True, join=join("a", app_module.SHUTDOWN_SECONDS + 5)),
            mark_stopped=lambda why: None,
        ),
        SimpleNamespace(job=SimpleNamespace(done=True, join=join("b", 0.0)), mark_stopped=lambda why: None),
    ]
    runner = SimpleNamespace(stop_all=lambda why: runs, close=lambda: None)

    class Exited(Exception):
        pass

    def exit_(code):
        raise Exited

    monkeypatch.setattr(app_module.os, "_exit", exit_)
    app_module.install_sigterm(runner)
    with caplog.at_level(logging.INFO, logger="rloo_demo.ui.app"), pytest.raises(Exited):
        handlers[signal.SIGTERM](signal.SIGTERM, None)
    assert events == [("a", app_module.SHUTDOWN_SECONDS), ("b", 0.0)]  # the deadline had passed: b waits 0 s
    logged = [r.getMessage() for r in caplog.records if r.name == "rloo_demo.ui.app"]
    assert logged == [f"SIGTERM: 2 runs stopped and saved in {app_module.SHUTDOWN_SECONDS + 5:.1f} s; exiting"]


class _Holder:
    def __init__(self, used):
        self.lock = threading.Lock()
        self.time_last_used = dict(used)
        self.session_data = {s: {} for s in used if s != "no-data"}
        self.deleted = []

    def delete_state(self, session):
        self.deleted.append(session)


def test_a_session_idle_exactly_as_long_as_the_limit_is_kept_and_one_without_data_is_dropped(monkeypatch):
    now = datetime.datetime(2026, 12, 2, 1, 0, 0)

    class Clock(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return now

    monkeypatch.setattr(gi, "datetime", SimpleNamespace(datetime=Clock, timedelta=datetime.timedelta))
    edge = now - datetime.timedelta(seconds=50)
    holder = _Holder(
        {
            "edge": edge,
            "older": edge - datetime.timedelta(microseconds=1),
            "no-data": edge - datetime.timedelta(seconds=1),
            "fresh": now,
        }
    )
    assert gi.drop_idle_sessions(holder, 50) == 2
    assert holder.deleted == ["older", "no-data"]  # each state's callbacks are told which session went
    assert set(holder.time_last_used) == {"edge", "fresh"} and set(holder.session_data) == {"edge", "fresh"}


def test_main_takes_the_subprocess_backend_from_the_environment_and_names_no_proxy_as_none(
    tmp_path, monkeypatch, caplog
):
    import gradio as gr

    seen = {}
    for var in ("RLOO_PUBLIC", "SPACE_ID", "RLOO_TRUSTED_PROXIES", "RLOO_MAX_CONCURRENT_RUNS", "RLOO_NUM_PROCESSES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RLOO_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("RLOO_BACKEND", "subprocess")
    monkeypatch.setenv("RLOO_TRUST_FORWARDED", "on")
    monkeypatch.setattr(app_module, "bound_arenas", lambda: True)
    monkeypatch.setattr(app_module, "install_sigterm", lambda runner, close: seen.update(runner=runner))
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **options: seen.update(options=options))
    caplog.set_level(logging.INFO, logger="rloo_demo.ui.app")
    app_module.main()
    runner = seen["runner"]
    assert runner.backend == "subprocess" and runner.num_processes == 2 and runner.max_concurrent == 1
    assert not runner.limits.public and "enable_monitoring" not in seen["options"]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "RLOO_TRUST_FORWARDED=1 is ignored: name the proxies whose X-Forwarded-For to believe in "
        "RLOO_TRUSTED_PROXIES (now: none)"
    ]


def test_the_queue_holds_four_events_at_once_unbounded_and_is_closed_to_direct_calls_in_public(monkeypatch):
    import gradio as gr

    from rloo_demo.public.limits import LOCAL, PUBLIC

    for limits, api_open in ((LOCAL, True), (PUBLIC, False)):
        with gr.Blocks() as demo:
            gr.Button().click(lambda: None)
        app_module.prepare(demo, limits)
        queue = demo._queue
        assert queue.default_concurrency_limit == 4 and queue.max_size is None and demo.api_open is api_open
        for name, value in gi.QUEUE_SETTINGS.items():  # quieted
            assert getattr(queue, name) == value, name
    assert len(gi.QUEUE_SETTINGS) >= 1


def test_only_the_queues_own_attributes_are_quieted():
    name, value = next(iter(gi.QUEUE_SETTINGS.items()))
    demo = SimpleNamespace(_queue=SimpleNamespace(**{name: "loud"}))
    assert gi.quiet_queue(demo) == [name] and getattr(demo._queue, name) == value
    assert vars(demo._queue) == {name: value}  # nothing it lacks is added
    assert gi.quiet_queue(SimpleNamespace()) == []


def test_the_admission_middleware_is_given_gradios_readers_and_the_sessions_idle_time(monkeypatch):
    from rloo_demo.public.admission import Admission
    from rloo_demo.public.limits import LOCAL
    from rloo_demo.ui import api

    monkeypatch.setattr(app_module, "session_lifespan", lambda seconds: ("lifespan", seconds))
    limits = LOCAL.__class__(**{**vars(LOCAL), "session_seconds": 1234.0})
    options = app_module.launch_options(limits)
    (admission,) = options["app_kwargs"]["middleware"]
    assert admission.cls is Admission
    assert admission.kwargs["kind_of"] is gi.event_kind and admission.kwargs["queued"] is gi.queued_events
    assert admission.kwargs["limits"] is limits and admission.kwargs["events"] is None
    cost_of = admission.kwargs["cost_of"]  # by the event's API name, from the page's table of measured costs
    blocks = SimpleNamespace(fns={3: SimpleNamespace(api_name="runs_details", fn=print)})
    gradio_app = SimpleNamespace(get_blocks=lambda: blocks)
    assert cost_of(gradio_app, 3, None) == api.EVENT_COSTS["runs_details"]
    assert cost_of(gradio_app, None, "page_tick") == api.EVENT_COSTS["page_tick"]
    assert cost_of(gradio_app, None, "nothing-by-that-name") == api.DEFAULT_EVENT_COST
    assert options["app_kwargs"]["lifespan"] == ("lifespan", 1234.0)
