"""The runner's bookkeeping on stand-in jobs: what a live run answers, whose budget a request spends, which runs
a heartbeat keeps, and what one round of the watchdog does. No training: the job and the engine are stand-ins, so
each test can say exactly which record, ticket, visitor or run a method touched."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.public.limits import Limits
from rloo_demo.server import runner as runner_mod
from rloo_demo.server.runner import ActiveRun, Runner


class _Channel:
    def __init__(self, records):
        self.records, self.asked = records, []

    def snapshot(self, start):
        self.asked.append(start)
        return self.records[start:]

    def __len__(self):
        return len(self.records)


def _job(name="run-a", records=(), rollouts=None, done=False):
    rollouts = rollouts or {}
    state = SimpleNamespace(
        channel=_Channel(list(records)),
        config=RunConfig(),
        rollout_steps=sorted(rollouts),
        rollouts=rollouts,
        stop_event=threading.Event(),
    )
    job = SimpleNamespace(run=SimpleNamespace(name=name), state=state, done=done, stopped=[])
    job.stop = job.stopped.append
    return job


def test_a_live_runs_records_are_read_from_where_the_caller_asks():
    job = _job(records=[{"step": 1}, {"step": 2}, {"step": 5}])
    active = ActiveRun(job, "owner", 0.0)
    assert active.records() == [{"step": 1}, {"step": 2}, {"step": 5}] and job.state.channel.asked == [0]
    assert active.records(2) == [{"step": 5}]
    job.state.channel.asked.clear()
    assert active.latest_step() == 5
    assert job.state.channel.asked == [2]  # only the last record is copied, not the whole history
    assert ActiveRun(_job(records=[{"step": 4}]), "o", 0.0).latest_step() == 4
    assert ActiveRun(_job(records=[]), "o", 0.0).latest_step() == 0
    assert ActiveRun(_job(records=[{"loss": 1.0}]), "o", 0.0).latest_step() == 0


def test_a_live_runs_rollouts_default_to_its_latest_step_kept_in_memory():
    groups = {1: [{"g": "one"}], 2: [{"g": "two"}], 3: [{"g": "three"}]}
    active = ActiveRun(_job(rollouts=groups), "o", 0.0)
    assert active.rollouts(None) == [{"g": "three"}] and active.rollouts(2) == [{"g": "two"}]
    assert active.rollouts(9) is None  # not in memory: the caller reads the folder
    assert ActiveRun(_job(), "o", 0.0).rollouts(None) == []
    assert active.rollout_steps() == [1, 2, 3]


class _Budget:
    def __init__(self):
        self.admitted = []

    def admit(self, visitor, running):
        self.admitted.append((visitor, dict(running)))

    def remaining(self, visitor, running):
        return None

    def record(self, visitor, start):
        pass


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_mod, "check_resources", lambda config: None)
    r = Runner(str(tmp_path / "runs"), watchdog=False)
    r.budget = _Budget()
    started = []

    def start_locked(ticket):
        started.append(ticket)
        active = ActiveRun(
            _job(name=f"run-{len(started)}"),
            ticket.owner,
            time.time(),
            ticket.owner_host,
            visitor=ticket.visitor,
            started_clock=100.0 + len(started),
        )
        r._active[active.name] = active
        return active

    r._start_locked = start_locked
    r.started = started
    return r


def test_a_request_spends_the_visitors_budget_and_names_its_starter(runner):
    other = ActiveRun(_job(name="theirs"), "their-id", 0.0, "10.0.0.9", visitor="10.0.0.9", started_clock=50.0)
    runner._active["theirs"] = other
    runner.max_concurrent = 2
    ticket = runner.request(RunConfig(), "my-id", "10.0.0.2", "digest")
    assert runner.budget.admitted == [("10.0.0.2", {"10.0.0.9": 50.0})]  # the runs in training count too
    assert (ticket.visitor, ticket.owner, ticket.owner_host, ticket.owner_record) == (
        "10.0.0.2",
        "my-id",
        "10.0.0.2",
        "digest",
    )
    assert ticket.started == "run-1" and runner.started == [ticket]
    assert runner.turn_of("10.0.0.2") == (None, ticket)
    # without an address the client id is the visitor
    ticket = runner.request(RunConfig(), "id-only")
    assert ticket.visitor == "id-only" and runner.budget.admitted[-1][0] == "id-only"


def test_a_heartbeat_keeps_only_the_runs_and_places_of_the_one_who_sent_it(runner, monkeypatch):
    seen = []
    monkeypatch.setattr(runner.line, "seen", lambda visitor, now: seen.append((visitor, now)))
    mine = ActiveRun(_job(name="mine"), "my-id", 0.0, "10.0.0.2", last_seen=1.0)
    by_host = ActiveRun(_job(name="host"), "other-id", 0.0, "10.0.0.3", last_seen=1.0)
    theirs = ActiveRun(_job(name="theirs"), "their-id", 0.0, "10.0.0.4", last_seen=1.0)
    runner._active.update(mine=mine, host=by_host, theirs=theirs)
    before = time.monotonic()
    runner.heartbeat(owner="my-id")
    # the client id keeps its runs, never a place in the line: the line is keyed by address, and an id may spell one
    assert seen == [] and mine.last_seen >= before
    assert by_host.last_seen == 1.0 and theirs.last_seen == 1.0
    runner.heartbeat(host="10.0.0.3")
    assert [v for v, _ in seen] == ["10.0.0.3"] and by_host.last_seen == seen[0][1] and theirs.last_seen == 1.0
    seen.clear()
    runner.heartbeat()  # nobody named: nothing kept
    assert seen == [] and theirs.last_seen == 1.0
    runner.heartbeat(owner="10.0.0.4", host="y")  # an id spelling another visitor's address keeps nothing of theirs
    assert [v for v, _ in seen] == ["y"] and theirs.last_seen == 1.0


class _Rounds:
    """A ``_closed`` event whose wait says "not closed" ``n`` times, recording the timeouts it was given."""

    def __init__(self, n):
        self.left, self.timeouts = n, []

    def wait(self, timeout):
        self.timeouts.append(timeout)
        self.left -= 1
        return self.left < 0


def test_a_watchdog_round_stops_the_abandoned_admits_the_line_and_prunes_after_a_run_ended(runner, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "check_abandoned", lambda: calls.append("abandoned"))
    monkeypatch.setattr(runner.line, "drop_gone", lambda seconds: calls.append(("drop_gone", seconds)))
    monkeypatch.setattr(runner, "_admit_next", lambda: calls.append("admit"))
    monkeypatch.setattr(runner, "prune", lambda: calls.append("prune"))
    runner.limits = Limits(abandon_seconds=77)
    ended = ActiveRun(_job(name="ended", done=True), "o", 0.0)
    runner._active["ended"] = ended
    runner._closed = _Rounds(2)
    runner._watch()
    one = ["abandoned", ("drop_gone", 77), "admit"]
    assert calls == one + ["prune"] + one  # a run ended in the first round only: pruned once, after it
    assert runner._closed.timeouts == [runner_mod.WATCHDOG_SECONDS] * 3 and "ended" not in runner._active


def test_a_watchdog_round_without_an_ended_run_prunes_nothing(runner, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "check_abandoned", lambda: None)
    monkeypatch.setattr(runner.line, "drop_gone", lambda seconds: None)
    monkeypatch.setattr(runner, "_admit_next", lambda: None)
    monkeypatch.setattr(runner, "prune", lambda: calls.append("prune"))
    runner._active["live"] = ActiveRun(_job(name="live"), "o", 0.0)
    runner._closed = _Rounds(3)
    runner._watch()
    assert calls == [] and runner._closed.timeouts == [runner_mod.WATCHDOG_SECONDS] * 4


def test_a_run_whose_end_a_poll_saw_first_is_still_pruned_by_the_next_round(runner, monkeypatch):
    """A page's poll (``get_active``) notices the end and takes the run out of the slot before the watchdog looks:
    the watchdog's round prunes all the same (it did not, and a visitor kept a run over its cap until its next
    Start); the round after, with nothing new ended, does not."""
    calls = []
    monkeypatch.setattr(runner, "check_abandoned", lambda: None)
    monkeypatch.setattr(runner.line, "drop_gone", lambda seconds: None)
    monkeypatch.setattr(runner, "_admit_next", lambda: None)
    monkeypatch.setattr(runner, "prune", lambda: calls.append("prune"))
    runner._active["ended"] = ActiveRun(_job(name="ended", done=True), "o", 0.0)
    assert runner.get_active("ended") is None  # the poll reaped it
    runner.watch_round()
    assert calls == ["prune"]
    runner.watch_round()
    assert calls == ["prune"]


def test_a_failed_watchdog_round_is_logged_and_the_next_one_runs(runner, monkeypatch, caplog):
    rounds = []

    def check():
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise RuntimeError("the disk went away")

    monkeypatch.setattr(runner, "check_abandoned", check)
    monkeypatch.setattr(runner, "_admit_next", lambda: None)
    runner._closed = _Rounds(2)
    with caplog.at_level(logging.ERROR, logger="rloo_demo.server.runner"):
        runner._watch()
    assert rounds == [0, 1]
    failed = [r for r in caplog.records if r.name == "rloo_demo.server.runner"]
    assert [r.getMessage() for r in failed] == ["watchdog round failed"] and failed[0].exc_info[0] is RuntimeError


def test_a_closed_runner_runs_no_watchdog_round(runner, monkeypatch):
    monkeypatch.setattr(runner, "check_abandoned", lambda: pytest.fail("a round ran after close"))
    runner.close()
    runner._watch()  # returns at once: the event is set


# ------------------------------------------------------------------ refusing, starting, admitting


def _active(name, steps, max_steps, done=False, **kw):
    job = _job(name=name, records=[{"step": i + 1} for i in range(steps)], done=done)
    job.state.config = RunConfig(max_steps=max_steps)
    return ActiveRun(job, kw.pop("owner", "o"), 0.0, **kw)


def test_a_full_server_refuses_naming_each_run_and_its_progress(tmp_path):
    runner = Runner(str(tmp_path / "runs"), watchdog=False)
    runner._active["run-a"] = _active("run-a", 3, 10)
    with pytest.raises(runner_mod.Busy) as e:
        runner._refuse_if_busy()
    assert str(e.value) == (
        "the server is busy training run-a (step 3/10); it trains 1 run(s) at a time. "
        "Watch it here, or start yours when it ends."
    )
    runner.max_concurrent = 3
    runner._active["run-b"] = _active("run-b", 0, 4)
    runner._refuse_if_busy()  # two of three slots: room left
    runner._active["run-c"] = _active("run-c", 1, 2)
    with pytest.raises(runner_mod.Busy) as e:
        runner._refuse_if_busy()
    assert str(e.value).startswith(
        "the server is busy training run-a (step 3/10), run-b (step 0/4), run-c (step 1/2); it trains 3 run(s)"
    )
    runner._active["run-c"].job.done = True  # it ended: reaped before the count, so a slot is free
    runner._refuse_if_busy()
    assert "run-c" not in runner._active


class _Job:
    made = []

    def __init__(self, config, *args, budget_seconds=None):
        self.config, self.args, self.budget_seconds, self.started_with = config, args, budget_seconds, None
        self.status_extra, self.run, self.done = None, SimpleNamespace(name=config.run_name), False
        _Job.made.append(self)

    def start(self, resources_checked=False):
        self.started_with = resources_checked


class _Remaining(_Budget):
    def __init__(self, left):
        super().__init__()
        self.left, self.asked = left, []

    def remaining(self, visitor, running):
        self.asked.append((visitor, dict(running)))
        return self.left


@pytest.mark.parametrize(
    ("backend", "cap", "left", "budget"),
    [
        ("thread", 60, 30.0, 30.0),
        ("thread", 60, None, 60),
        ("subprocess", None, 45.0, 45.0),
        ("thread", None, None, None),
        ("subprocess", 20, 90.0, 20),
    ],
)
def test_a_started_run_gets_the_smaller_of_the_servers_cap_and_the_visitors_hour(
    tmp_path, monkeypatch, backend, cap, left, budget
):
    monkeypatch.setattr(runner_mod, "TrainingJob", _Job)
    monkeypatch.setattr(runner_mod, "SubprocessJob", _Job)
    _Job.made.clear()
    runner = Runner(
        str(tmp_path / "runs"), backend=backend, num_processes=3, limits=Limits(max_run_seconds=cap), watchdog=False
    )
    runner.budget = _Remaining(left)
    runner._active["theirs"] = _active("theirs", 1, 5, visitor="10.0.0.9", started_clock=5.0)
    ticket = runner_mod.Ticket("10.0.0.2", RunConfig(run_name="mine"), "my-id", "10.0.0.2", "digest")
    active = runner._start_locked(ticket)
    [job] = _Job.made
    assert job.config is ticket.config and job.budget_seconds == budget and job.started_with is True
    assert job.args == ((3,) if backend == "subprocess" else ())
    assert runner.budget.asked == [("10.0.0.2", {"10.0.0.9": 5.0})]
    assert job.status_extra == {"owner": "digest", "visitor": runner_mod.visitor_digest("10.0.0.2")}
    assert (active.owner, active.owner_host, active.visitor) == ("my-id", "10.0.0.2", "10.0.0.2")
    assert runner._active["mine"] is active
    unrecorded = runner._start_locked(runner_mod.Ticket("v", RunConfig(run_name="other"), "id"))
    assert _Job.made[-1].status_extra == {} and unrecorded.owner_host is None


def test_start_now_puts_the_run_in_the_runs_folder_under_its_starter(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_mod, "check_resources", lambda config: None)
    runner = Runner(str(tmp_path / "runs"), watchdog=False)
    tickets = []
    monkeypatch.setattr(runner, "_start_locked", lambda ticket: tickets.append(ticket) or "started")
    config = RunConfig(output_dir="elsewhere")
    assert runner.start(config, "my-id", "10.0.0.2", "digest") == "started"
    assert config.output_dir == runner.runs_dir
    [t] = tickets
    assert (t.visitor, t.owner, t.owner_host, t.owner_record, t.config) == (
        "10.0.0.2",
        "my-id",
        "10.0.0.2",
        "digest",
        config,
    )
    runner.start(RunConfig(), "id-only")
    assert (tickets[-1].visitor, tickets[-1].owner_host, tickets[-1].owner_record) == ("id-only", None, None)


def test_the_line_gives_a_free_slot_to_the_next_ticket_that_can_still_start(runner, monkeypatch):
    refused = "10.0.0.3"

    class Budget(_Budget):
        def admit(self, visitor, running):
            super().admit(visitor, running)
            if visitor == refused:
                raise runner_mod.Busy("your hour of compute is spent")

    runner.budget = Budget()
    monkeypatch.setattr(runner, "prune", lambda: [])
    monkeypatch.setattr(runner, "_refuse_if_disk_full", lambda: None)
    runner.max_concurrent = 2
    runner._active["theirs"] = _active("theirs", 1, 5, visitor="10.0.0.9", started_clock=5.0)
    first = runner_mod.Ticket(refused, RunConfig(), "a")
    second = runner_mod.Ticket("10.0.0.4", RunConfig(), "b")
    runner.line.join(first)
    runner.line.join(second)
    runner._admit_next()
    assert first.error == "your hour of compute is spent" and first.started is None
    assert second.started == "run-1" and second.error is None and runner.started == [second]
    assert runner.budget.admitted == [(refused, {"10.0.0.9": 5.0}), ("10.0.0.4", {"10.0.0.9": 5.0})]
    assert runner.turn_of(refused) == (None, first) and runner.turn_of("10.0.0.4") == (None, second)


def test_stop_all_stops_every_run_for_the_reason_given(runner):
    runner._active.update(a=_active("a", 1, 5), b=_active("b", 0, 5))
    stopped = runner.stop_all("the server is shutting down")
    assert [a.name for a in stopped] == ["a", "b"]
    assert [a.job.stopped for a in stopped] == [["the server is shutting down"]] * 2


def test_a_run_unseen_for_longer_than_the_limit_is_stopped_as_abandoned(tmp_path):
    runner = Runner(str(tmp_path / "runs"), limits=Limits(abandon_seconds=30), watchdog=False)
    runner._active.update(
        gone=_active("gone", 1, 5, last_seen=100.0),
        edge=_active("edge", 1, 5, last_seen=140.0),
        here=_active("here", 1, 5, last_seen=160.0),
    )
    assert runner.check_abandoned(now=170.0) == ["gone"]  # 70 s unseen; exactly 30 s is not more than 30
    assert runner._active["gone"].job.stopped == ["its page was gone for more than 30 s (abandoned)"]
    assert runner._active["edge"].job.stopped == [] and runner._active["here"].job.stopped == []
    now = time.monotonic()
    runner._active["fresh"] = _active("fresh", 1, 5, last_seen=now - 100)
    assert "fresh" in runner.check_abandoned()  # without a time given: the clock's now


def test_a_run_name_must_be_a_plain_folder_with_a_config(tmp_path):
    runner = Runner(str(tmp_path / "runs"), watchdog=False)
    (tmp_path / "runs" / "empty").mkdir()
    with pytest.raises(runner_mod.NotFound) as e:
        runner.run("../etc")
    assert str(e.value) == "no such run (a run name is 1 to 100 of A-Z a-z 0-9 . _ -)"
    with pytest.raises(runner_mod.NotFound) as e:
        runner.run("empty")
    assert str(e.value) == "no run named 'empty'"


def test_a_runners_defaults_and_its_refusal_of_an_unknown_backend(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = Runner()
    try:
        assert runner.runs_dir == "runs" and (tmp_path / "runs").is_dir() and runner.num_processes == 2
        assert runner.backend == "thread" and runner.max_concurrent == 1
        mine = [t for t in threading.enumerate() if getattr(t, "_target", None) == runner._watch]
        assert [t.name for t in mine] == ["rloo-watchdog"] and mine[0].daemon  # housekeeping runs by default
    finally:
        runner.close()
    assert Runner(str(tmp_path / "sub"), backend="subprocess", watchdog=False).backend == "subprocess"
    with pytest.raises(ValueError) as e:
        Runner(str(tmp_path / "x"), backend="process", watchdog=False)
    assert str(e.value) == "backend must be 'thread' or 'subprocess', not 'process'"


def test_a_start_is_refused_below_the_free_space_a_run_needs_and_not_at_it(tmp_path, monkeypatch):
    runner = Runner(str(tmp_path / "runs"), limits=Limits(min_free_mb=1000), watchdog=False)
    free = {"bytes": 1000 * 10**6}
    monkeypatch.setattr(runner_mod.shutil, "disk_usage", lambda path: SimpleNamespace(free=free["bytes"]))
    runner._refuse_if_disk_full()  # exactly what a run needs: it may start
    free["bytes"] = 999 * 10**6
    with pytest.raises(runner_mod.DiskFull) as e:
        runner._refuse_if_disk_full()
    assert str(e.value) == (
        "the server's disk is full (999 MB free, a run needs 1000); no new run can start until space is freed"
    )


def test_an_ended_run_is_reaped_and_its_time_counted_against_its_visitors_hour(tmp_path):
    class Recording(_Budget):
        def __init__(self):
            super().__init__()
            self.recorded = []

        def record(self, visitor, start):
            self.recorded.append((visitor, start))

    runner = Runner(str(tmp_path / "runs"), watchdog=False)
    runner.budget = Recording()
    runner._active.update(
        done=_active("done", 3, 3, done=True, visitor="10.0.0.2", started_clock=5.0),
        anon=_active("anon", 3, 3, done=True, started_clock=6.0),
        live=_active("live", 1, 3, visitor="10.0.0.3", started_clock=7.0),
    )
    assert [a.name for a in runner.active()] == ["live"]
    assert runner.budget.recorded == [("10.0.0.2", 5.0)]  # a run nobody's budget paid for is not counted


def test_a_started_run_is_stamped_with_the_wall_clock(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_mod, "TrainingJob", _Job)
    runner = Runner(str(tmp_path / "runs"), watchdog=False)
    before = time.time()
    active = runner._start_locked(runner_mod.Ticket("v", RunConfig(run_name="stamped"), "id"))
    assert before <= active.started <= time.time()


def test_pruning_never_touches_a_run_in_training_and_clears_space_only_when_the_disk_is_low(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(
        runner_mod,
        "prune",
        lambda root, limits, protect, free_mb=None: calls.append((root, set(protect), free_mb)) or [],
    )
    runner = Runner(str(tmp_path / "runs"), limits=Limits(min_free_mb=1000), watchdog=False)
    runner._active["live"] = _active("live", 1, 3)
    free = {"bytes": 1000 * 10**6}
    monkeypatch.setattr(runner_mod.shutil, "disk_usage", lambda path: SimpleNamespace(free=free["bytes"]))
    calls.clear()
    runner.prune()
    free["bytes"] = 999 * 10**6
    runner.prune()
    assert calls == [(runner.runs_dir, {"live"}, None), (runner.runs_dir, {"live"}, 1000)]
