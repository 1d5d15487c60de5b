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

    runs = [SimpleNamespace(job=SimpleNamespace(done=True, join=join("a", app_module.SHUTDOWN_SECONDS + 5)),
                            mark_stopped=lambda why: None),
            SimpleNamespace(job=SimpleNamespace(done=True, join=join("b", 0.0)), mark_stopped=lambda why: None)]
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
    holder = _Holder({"edge": edge, "older": edge - datetime.timedelta(microseconds=1), "no-data": edge - datetime.
                      timedelta(seconds=1), "fresh": now})
    assert gi.drop_idle_sessions(holder, 50) == 2
    assert holder.deleted == ["older", "no-data"]  # each state's callbacks are told which session went
    assert set(holder.time_last_used) == {"edge", "fresh"} and set(holder.session_data) == {"edge", "fresh"}
