"""A fair share of the one training slot: a first-come line, a compute budget per visitor, a budget that counts
loading and stops before a step would cross it, and pruning that never deletes another visitor's runs.

``python -m pytest tests/public/test_fair_share.py`` (a few seconds: the jobs here are stand-ins that finish when told).
"""

import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.engine.callbacks import SAVE_RESERVE_SECONDS, LiveMetricsCallback, MetricsChannel
from rloo_demo.errors import Busy, DiskFull, RateLimited
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.public.retention import prune, visitor_digest
from rloo_demo.public.waiting import HOUR, ComputeBudget, Ticket, WaitingLine
from rloo_demo.server import runner as runner_module
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder

# ----------------------------------------------------------------------------- the line and the budget, alone


def test_the_line_is_first_come_with_one_place_a_visitor():
    line = WaitingLine(max_waiting=3)
    assert [line.join(Ticket(v, None, v)) for v in ("b", "c", "b")] == [1, 2, 1]  # b asking again keeps its place
    assert len(line) == 2 and line.place("c") == 2 and line.place("a") is None
    line.join(Ticket("d", None, "d"))
    with pytest.raises(Busy, match="line for the training slot is full"):
        line.join(Ticket("e", None, "e"))
    assert [line.pop().visitor for _ in range(3)] == ["b", "c", "d"] and line.pop() is None


def test_the_line_forgets_a_visitor_whose_page_is_gone():
    line = WaitingLine(max_waiting=5)
    line.join(Ticket("b", None, "b"))
    line.join(Ticket("c", None, "c"))
    b, c = list(line._line)
    b.last_seen, c.last_seen = 0.0, 100.0
    assert [t.visitor for t in line.drop_gone(60, now=130.0)] == ["b"]
    assert line.place("c") == 1


def test_the_compute_budget_counts_the_last_hour_and_forgets_the_rest():
    now = [10_000.0]
    budget = ComputeBudget(600, clock=lambda: now[0])
    budget.record("a", start=now[0] - HOUR - 200, end=now[0] - HOUR + 100)  # half in the window: 100 s count
    budget.record("a", start=now[0] - 300, end=now[0] - 100)  # 200 s
    assert budget.used("a") == pytest.approx(300)
    assert budget.used("a", running={"a": now[0] - 50}) == pytest.approx(350)  # a run still on counts too
    assert budget.remaining("b") == 600 and budget.remaining("a") == pytest.approx(300)
    budget.record("a", start=now[0] - 90, end=now[0])
    budget.admit("a")  # 210 s left
    budget.record("a", start=now[0] - 200, end=now[0])
    with pytest.raises(RateLimited, match="this hour's training time"):
        budget.admit("a")  # 10 s left: less than a run needs
    now[0] += HOUR + 1
    assert budget.used("a") == 0 and "a" not in budget._spent  # the table forgets the visitor


def test_no_budget_means_no_refusal():
    budget = ComputeBudget(None)
    budget.record("a", start=0.0, end=10**6)
    budget.admit("a")
    assert budget.remaining("a") is None


def test_asking_again_keeps_the_place_and_when_it_was_taken_with_the_new_settings():
    line = WaitingLine(max_waiting=2)
    first = Ticket("b", "old settings", "own-b", joined=5.0)
    assert line.join(first) == 1
    assert line.join(Ticket("c", None, "c", joined=6.0)) == 2
    again = Ticket("b", "new settings", "own-b", joined=9.0)
    assert line.join(again) == 1  # the line is full, but b only changes its settings
    head = line.pop()
    assert head is again and head.config == "new settings" and head.joined == 5.0


def test_leaving_and_being_seen_touch_only_that_visitor():
    line = WaitingLine(max_waiting=5)
    for v in ("b", "c", "d"):
        line.join(Ticket(v, None, v, last_seen=0.0))
    line.seen("c", now=50.0)
    assert [t.last_seen for t in line._line] == [0.0, 50.0, 0.0]
    line.seen("d")  # the monotonic clock when no time is given
    assert line._line[2].last_seen > 0.0
    assert line.leave("b") is True and line.leave("b") is False and line.leave("nobody") is False
    assert [t.visitor for t in line._line] == ["c", "d"] and line.place("d") == 2


def test_the_line_keeps_a_visitor_seen_exactly_the_idle_time_ago_and_every_one_with_no_idle_limit():
    line = WaitingLine(max_waiting=5)
    line.join(Ticket("b", None, "b", last_seen=70.0))
    line.join(Ticket("c", None, "c", last_seen=69.0))
    assert line.drop_gone(None, now=10_000.0) == [] and line.drop_gone(0, now=10_000.0) == [] and len(line) == 2
    assert [t.visitor for t in line.drop_gone(60, now=130.0)] == ["c"]  # 61 s ago goes, 60 s ago stays
    assert line.place("b") == 1


def test_the_compute_budget_at_its_edges():
    now = [10_000.0]
    budget = ComputeBudget(600, clock=lambda: now[0])
    budget.record("a", start=now[0] - HOUR - 50, end=now[0] - HOUR)  # ended exactly an hour ago: forgotten
    assert budget.used("a") == 0 and "a" not in budget._spent
    assert budget.used("b", running={"b": now[0] - HOUR - 500}) == pytest.approx(HOUR)  # a long run: the hour only
    budget.record("a", start=now[0] - 100)  # no end: it ends now, by the budget's clock
    assert budget._spent["a"] == [(now[0] - 100, now[0])]
    budget.record("a", start=now[0] - 470, end=now[0] - 100)  # 470 s used, 130 left
    budget.admit("a", least=130.0)  # exactly what is asked for: admitted
    with pytest.raises(RateLimited, match=r"\(600 s a visitor\)"):
        budget.admit("a", least=130.5)
    assert budget.remaining("a", running={"a": now[0] - 200}) == 0.0  # never below zero


def test_the_line_drops_gone_pages_by_the_monotonic_clock_when_no_time_is_given():
    import time

    line = WaitingLine(max_waiting=5)
    line.join(Ticket("gone", None, "gone", last_seen=time.monotonic() - 3600))
    line.join(Ticket("here", None, "here"))  # seen now
    assert [t.visitor for t in line.drop_gone(60)] == ["gone"] and line.place("here") == 1


def test_admit_counts_a_run_still_on_and_leaves_30_seconds_by_default():
    now = [10_000.0]
    budget = ComputeBudget(600, clock=lambda: now[0])
    budget.record("a", start=now[0] - 570, end=now[0])  # 30 s left: exactly the default least
    budget.admit("a")
    with pytest.raises(RateLimited) as refused:
        budget.admit("b", running={"b": now[0] - 580})  # b's run on for 580 s: 20 s left
    assert str(refused.value) == (
        "you have used this hour's training time on this server (600 s a visitor); "
        "others get their turn now: try again later in the hour"
    )
    budget.admit("b", running={"c": now[0] - 580})  # someone else's run does not count for b


def test_a_visitor_is_recorded_as_a_salted_hash_of_its_address():
    import hashlib

    expected = hashlib.sha256(b"rloo-demo-visitor:127.0.0.2").hexdigest()[:32]
    assert visitor_digest("127.0.0.2") == expected and len(expected) == 32


# ----------------------------------------------------------------------------- the budget of one run


def _callback(budget, started, clock):
    return LiveMetricsCallback(MetricsChannel(), budget_seconds=budget, budget_started=started, clock=lambda: clock[0])


def test_a_run_stops_before_a_step_that_would_end_past_its_budget():
    """Loading counts (the budget runs from the job's start), and the run does not start a step it cannot finish
    with time to save: the last step's length predicts the next."""
    clock = [103.0]  # the job started at 100; 3 s of loading
    cb = _callback(20.0, 100.0, clock)
    args, state = SimpleNamespace(world_size=1), SimpleNamespace()
    steps = 0
    while True:
        control = SimpleNamespace(should_training_stop=False)
        cb.on_step_begin(args, state, control)
        clock[0] += 4.0  # each step takes 4 s
        steps += 1
        cb.on_step_end(args, state, control)
        if control.should_training_stop:
            break
    # after step n the clock reads 103 + 4n; it stops once 103 + 4n + 4 + reserve >= 120
    expected = next(n for n in range(1, 10) if 103 + 4 * n + 4 + SAVE_RESERVE_SECONDS >= 120)
    assert steps == expected
    assert clock[0] + SAVE_RESERVE_SECONDS <= 120  # it ends inside the budget, with the reserve to save
    assert cb.stop_event.is_set()


def test_a_run_within_its_budget_goes_on():
    clock = [0.0]
    cb = _callback(1000.0, 0.0, clock)
    control = SimpleNamespace(should_training_stop=False)
    cb.on_step_begin(SimpleNamespace(world_size=1), None, control)
    clock[0] += 5.0
    cb.on_step_end(SimpleNamespace(world_size=1), None, control)
    assert not control.should_training_stop


# ----------------------------------------------------------------------------- the line on a runner


class FakeJob:
    """A training job that ends when told: the runner's line is tested without training anything."""

    made: list = []

    def __init__(self, config, budget_seconds=None):
        self.config, self.budget_seconds = config, budget_seconds
        self.state = SimpleNamespace(config=config, channel=MetricsChannel(), stop_event=threading.Event())
        self.finished = threading.Event()
        self.status_extra = {}
        self.run = None
        FakeJob.made.append(self)

    def start(self, resources_checked=False):
        self.run = RunFolder.create(self.config, **self.status_extra)
        return self

    @property
    def done(self):
        return self.finished.is_set()

    def stop(self, reason="stop"):
        self.finished.set()

    def join(self, timeout=None):
        return self.done


@pytest.fixture
def runner(tmp_path, monkeypatch):
    FakeJob.made = []
    monkeypatch.setattr(runner_module, "TrainingJob", FakeJob)
    monkeypatch.setattr(runner_module, "check_resources", lambda config: None)
    limits = replace(LOCAL, max_run_seconds=300, compute_seconds_per_hour=900)
    r = Runner(str(tmp_path), limits=limits, watchdog=False)
    yield r
    r.close()


def config(tmp_path, name):
    return RunConfig(output_dir=str(tmp_path), run_name=name, max_steps=3)


def test_a_visitor_who_restarts_on_finish_cannot_keep_the_slot(runner, tmp_path):
    """A trains; B asks and waits; A's run ends and A asks again at once: B trains next, A waits behind B."""
    a1 = runner.request(config(tmp_path, "a1"), "id-a", "127.0.0.2", "own-a")
    assert a1.started == "a1"
    b = runner.request(config(tmp_path, "b"), "id-b", "127.0.0.3", "own-b")
    assert b.started is None and runner.line.place("127.0.0.3") == 1
    with pytest.raises(Busy, match="your run a1 is still training"):
        runner.request(config(tmp_path, "a2"), "id-a", "127.0.0.2", "own-a")
    FakeJob.made[0].finished.set()  # A's run ends ...
    a2 = runner.request(config(tmp_path, "a2"), "id-a", "127.0.0.2", "own-a")  # ... and A asks again at once
    assert b.started == "b", "the visitor who waited gets the slot"
    assert a2.started is None and runner.line.place("127.0.0.2") == 1
    assert [a.name for a in runner.active()] == ["b"]
    FakeJob.made[1].finished.set()
    runner._admit_next()  # the watchdog's round
    assert a2.started == "a2" and runner.turn_of("127.0.0.2") == (None, a2)


def test_a_second_tab_of_a_waiting_visitor_keeps_its_one_place_with_the_new_settings(runner, tmp_path):
    """B waits; B's second tab (another client id, the same address) asks again: still one place, B's, now with
    the second tab's settings and owner; C's place behind it is unmoved."""
    runner.request(config(tmp_path, "a"), "id-a", "127.0.0.2", "own-a")
    first = runner.request(config(tmp_path, "b1"), "tab-1", "127.0.0.3", "own-b1")
    runner.request(config(tmp_path, "c"), "id-c", "127.0.0.4", "own-c")
    second = runner.request(config(tmp_path, "b2"), "tab-2", "127.0.0.3", "own-b2")
    assert len(runner.line) == 2 and runner.line.place("127.0.0.3") == 1 and runner.line.place("127.0.0.4") == 2
    head = runner.line.pop()
    assert head is second and head.owner == "tab-2" and head.config.run_name == "b2" and head.joined == first.joined


def test_a_run_from_the_line_gets_what_is_left_of_its_visitors_hour(runner, tmp_path):
    runner.budget.record("127.0.0.2", start=runner.budget.clock() - 700)  # 200 s of 900 left
    runner.request(config(tmp_path, "a"), "id-a", "127.0.0.2", "own-a")
    assert FakeJob.made[-1].budget_seconds == pytest.approx(200, abs=1)
    runner.request(config(tmp_path, "b"), "id-b", "127.0.0.3", "own-b")
    FakeJob.made[0].finished.set()
    runner._admit_next()
    assert FakeJob.made[-1].budget_seconds == 300  # a fresh visitor: the server's per-run cap


def test_a_visitor_over_its_hour_is_refused_before_it_takes_a_place(runner, tmp_path):
    runner.budget.record("127.0.0.2", start=runner.budget.clock() - 890)
    with pytest.raises(RateLimited):
        runner.request(config(tmp_path, "a"), "id-a", "127.0.0.2", "own-a")
    assert len(runner.line) == 0 and FakeJob.made == []


def test_a_run_records_its_visitor_as_a_hash(runner, tmp_path):
    ticket = runner.request(config(tmp_path, "a"), "id-a", "127.0.0.2", "own-a")
    status = runner.run(ticket.started).status()
    assert status["visitor"] == visitor_digest("127.0.0.2") and "127.0.0.2" not in str(status)


# ----------------------------------------------------------------------------- whose runs are pruned


def made(tmp_path, name, visitor=None, finished=0.0, status="finished"):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=name))
    extra = {"owner": f"own-{visitor}", "visitor": visitor_digest(visitor)} if visitor else {}
    run.set_status(status, finished=finished, **extra)
    return run


def test_a_visitor_loses_its_own_oldest_runs_never_anothers(tmp_path):
    now = 100_000.0
    b = made(tmp_path, "b-just-finished", "127.0.0.3", finished=now - 5)
    for i in range(5):
        made(tmp_path, f"a{i}", "127.0.0.2", finished=now - 60 + i)
    limits = replace(PUBLIC, max_runs_per_visitor=3, keep_runs=30, keep_seconds=3600)
    deleted = prune(tmp_path, limits, now=now)
    assert deleted == ["a1", "a0"]  # A's own oldest two beyond its 3; newest first in the listing, so a1 then a0
    assert b.path.is_dir()


def test_the_servers_counts_spare_runs_younger_than_the_keep_time_and_the_operators(tmp_path):
    now = 100_000.0
    old = made(tmp_path, "old", "127.0.0.4", finished=now - 7200)
    operator = made(tmp_path, "operator", None, finished=now - 90_000)  # made by the CLI: no owner
    young = [made(tmp_path, f"y{i}", f"127.0.1.{i}", finished=now - 30) for i in range(3)]
    limits = replace(PUBLIC, max_runs_per_visitor=None, keep_runs=2, keep_seconds=3600)
    assert prune(tmp_path, limits, now=now) == ["old"]  # still 4 runs: the young and the operator's stay
    assert operator.path.is_dir() and all(r.path.is_dir() for r in young) and not old.path.exists()


def test_the_size_cap_deletes_the_oldest_ended_runs_until_the_rest_fit(tmp_path):
    now = 100_000.0
    runs = [made(tmp_path, f"r{i}", f"127.0.2.{i}", finished=now - 7200 + i) for i in range(4)]
    size = lambda run: sum(f.stat().st_size for f in run.path.rglob("*") if f.is_file())  # noqa: E731
    for run in runs:  # each run's folder made exactly 1 MB
        (run.path / "weights.bin").write_bytes(b"0" * (1_000_000 - size(run)))
    assert [size(r) for r in runs] == [1_000_000] * 4
    limits = replace(PUBLIC, max_runs_per_visitor=None, keep_runs=None, max_runs_mb=2.5, keep_seconds=3600)
    assert prune(tmp_path, replace(limits, max_runs_mb=None), now=now) == []  # no cap: nothing goes
    assert prune(tmp_path, limits, now=now) == ["r0", "r1"]  # the two newest fit in 2.5 MB, three do not
    assert prune(tmp_path, replace(limits, max_runs_mb=2.0), now=now) == []  # exactly the cap: kept
    assert prune(tmp_path, replace(limits, max_runs_mb=1.999), now=now) == ["r2"]
    with open(runs[3].path / "weights.bin", "ab") as f:
        f.write(b"0")  # one byte over a 1 MB cap
    assert prune(tmp_path, replace(limits, max_runs_mb=1.0), now=now) == ["r3"]


def test_pruning_spares_a_run_in_training_and_a_protected_one_and_keeps_counting(tmp_path):
    from rloo_demo.store.process import process_identity

    now = 100_000.0
    training = made(tmp_path, "training", "127.0.3.1", finished=now - 9000, status="running")
    training.set_status("running", **process_identity())  # this process trains it
    made(tmp_path, "protected", "127.0.3.2", finished=now - 8000)
    made(tmp_path, "old", "127.0.3.3", finished=now - 7000)
    made(tmp_path, "newer", "127.0.3.4", finished=now - 6000)
    made(tmp_path, "newest", "127.0.3.5", finished=now - 5000)
    limits = replace(PUBLIC, max_runs_per_visitor=None, keep_runs=3, keep_seconds=3600)
    assert prune(tmp_path, limits, protect={"protected"}, now=now) == ["old", "newer"]  # past both spared ones
    assert (tmp_path / "training").is_dir() and (tmp_path / "protected").is_dir()


def test_a_runs_end_is_read_from_its_latest_time_it_has(tmp_path):
    """``finished``, else ``updated``, else ``created``, else the folder's time: a run with no end recorded is not
    taken for one that ended at time 0."""
    import json
    import os

    now = 100_000.0
    times = {"f": {"finished": now - 10}, "u": {"updated": now - 10}, "c": {"created": now - 10}, "m": {}}
    for name, keys in times.items():
        run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=name))
        status = {"status": "finished", "owner": f"own-{name}", "visitor": visitor_digest(name), **keys}
        (run.path / "status.json").write_text(json.dumps(status))
        os.utime(run.path, (now - 1000, now - 1000))  # the folder's time, older than any recorded one
    limits = replace(PUBLIC, max_runs_per_visitor=None, keep_runs=0, keep_seconds=60)
    assert prune(tmp_path, limits, now=now) == ["m"]  # the others ended 10 s ago, by the time each has
    assert sorted(prune(tmp_path, limits, now=now + 100)) == ["c", "f", "u"]


def test_a_visitors_own_cap_counts_its_client_where_no_address_was_recorded(tmp_path):
    now = 100_000.0
    for i in range(3):
        run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=f"o{i}"))
        run.set_status("finished", finished=now - 100 + i, owner="own-x")  # an owner, no visitor
    limits = replace(PUBLIC, max_runs_per_visitor=1, keep_runs=None, max_runs_mb=None, keep_seconds=3600)
    assert prune(tmp_path, limits, now=now) == ["o1", "o0"]  # its own beyond one, young as they are


def test_a_run_with_only_its_visitor_recorded_is_a_visitors_and_may_be_pruned(tmp_path):
    now = 100_000.0
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="visitor-only"))
    run.set_status("finished", finished=now - 7200, visitor=visitor_digest("127.0.4.1"))  # no owner (client id)
    made(tmp_path, "operator", None, finished=now - 9000)  # older, but the operator's
    limits = replace(PUBLIC, max_runs_per_visitor=None, keep_runs=1, keep_seconds=3600)
    assert prune(tmp_path, limits, now=now) == ["visitor-only"]


def test_a_visitors_cap_counts_its_address_across_its_browser_sessions(tmp_path):
    now = 100_000.0
    for i, owner in enumerate(("own-tab-1", "own-tab-2")):  # one address, two client ids
        run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=f"tab{i}"))
        run.set_status("finished", finished=now - 100 + i, owner=owner, visitor=visitor_digest("127.0.5.1"))
    limits = replace(PUBLIC, max_runs_per_visitor=1, keep_runs=None, max_runs_mb=None, keep_seconds=3600)
    assert prune(tmp_path, limits, now=now) == ["tab0"]


def test_a_run_that_ended_exactly_the_keep_time_ago_may_go(tmp_path):
    now = 100_000.0
    made(tmp_path, "due", "127.0.6.1", finished=now - 3600)
    made(tmp_path, "young", "127.0.6.2", finished=now - 3599)
    limits = replace(PUBLIC, max_runs_per_visitor=None, keep_runs=0, max_runs_mb=None, keep_seconds=3600)
    assert prune(tmp_path, limits, now=now) == ["due"]


def test_pruning_for_free_disk_asks_about_the_runs_disk_and_stops_at_the_floor(tmp_path, monkeypatch):
    from rloo_demo.public import retention

    now = 100_000.0
    made(tmp_path, "old", "127.0.7.1", finished=now - 9000)
    asked = []

    def disk_usage(path):
        asked.append(path)
        return SimpleNamespace(free=500 * 10**6)  # 500 MB free

    monkeypatch.setattr(retention.shutil, "disk_usage", disk_usage)
    limits = replace(PUBLIC, max_runs_per_visitor=None, keep_runs=None, max_runs_mb=None, keep_seconds=3600)
    assert prune(tmp_path, limits, free_mb=500, now=now) == []  # exactly the floor free: enough
    assert asked and all(str(p) == str(tmp_path) for p in asked)
    assert prune(tmp_path, limits, free_mb=500.001, now=now) == ["old"]


def test_a_full_disk_is_pruned_before_a_start_is_refused(runner, tmp_path, monkeypatch):
    old = made(tmp_path, "old", "127.0.0.4", finished=0.0)
    free = [10 * 10**6]  # 10 MB free, a run needs 200
    monkeypatch.setattr(runner_module.shutil, "disk_usage", lambda p: SimpleNamespace(free=free[0]))
    from rloo_demo.public import retention

    def disk_usage(path):
        free[0] = 10 * 10**6 if old.path.exists() else 500 * 10**6  # deleting the old run frees the disk
        return SimpleNamespace(free=free[0])

    monkeypatch.setattr(retention.shutil, "disk_usage", disk_usage)
    monkeypatch.setattr(runner_module.shutil, "disk_usage", disk_usage)
    ticket = runner.request(config(tmp_path, "new"), "id-a", "127.0.0.2", "own-a")
    assert not old.path.exists() and ticket.started == "new"


def test_a_disk_filled_by_young_runs_is_cleared_oldest_first_down_to_the_floor(tmp_path, monkeypatch):
    """Every run on a full disk ended under an hour ago (``keep_seconds``): the oldest visitors' runs go, one at a
    time until the floor is free (each freeing 100 MB here), whatever their age; the operator's run and a run in
    training stay. Before, nothing went, and every Start was refused until the operator acted."""
    from rloo_demo.public import retention

    now = 100_000.0
    runs = {name: made(tmp_path, name, f"127.0.8.{i}", finished=now - 600 + 60 * i) for i, name in enumerate("abcd")}
    operator = made(tmp_path, "operator", None, finished=now - 900)
    training = made(tmp_path, "training", "127.0.8.9", finished=now - 950)
    training.set_status("running")  # this process: alive

    def disk_usage(path):  # 100 MB free, and each deleted visitor's run frees 100 MB more
        gone = sum(not run.path.exists() for run in runs.values())
        return SimpleNamespace(free=(100 + 100 * gone) * 10**6)

    monkeypatch.setattr(retention.shutil, "disk_usage", disk_usage)
    limits = replace(PUBLIC, max_runs_per_visitor=None, keep_runs=None, max_runs_mb=None, keep_seconds=3600)
    assert prune(tmp_path, limits, free_mb=300, now=now) == ["a", "b"]  # 300 MB free after two
    assert runs["c"].path.is_dir() and operator.path.is_dir() and training.path.is_dir()
    assert prune(tmp_path, limits, now=now) == []  # a disk with room: young runs are kept as before


def test_a_full_disk_that_pruning_cannot_clear_refuses_the_start(runner, tmp_path, monkeypatch):
    keep = made(tmp_path, "keep", None, finished=0.0)  # the operator's: never pruned
    monkeypatch.setattr(runner_module.shutil, "disk_usage", lambda p: SimpleNamespace(free=10 * 10**6))
    from rloo_demo.public import retention

    monkeypatch.setattr(retention.shutil, "disk_usage", lambda p: SimpleNamespace(free=10 * 10**6))
    with pytest.raises(DiskFull):
        runner.request(config(tmp_path, "new"), "id-a", "127.0.0.2", "own-a")
    assert keep.path.is_dir()


def test_the_page_of_a_waiting_visitor_shows_its_place_then_follows_its_run(runner, tmp_path):
    from rloo_demo.errors import Waiting
    from rloo_demo.public.gates import Caller
    from rloo_demo.ui.controller import Controller

    controller = Controller(runner)
    a, b = Caller("id-a", "127.0.0.2"), Caller("id-b", "127.0.0.3")
    first = controller.start({"run_name": "a1", "max_steps": 3}, a)
    with pytest.raises(Waiting) as waiting:
        controller.start({"run_name": "b1", "max_steps": 3}, b)
    assert waiting.value.place == 1 and "Place 1 in the line" in str(waiting.value)
    assert controller.line_note(a) is None and "Place 1" in controller.line_note(b, "en")
    assert "Место 1" in controller.line_note(b, "ru")
    assert controller.follow(None, b) == first  # while it waits, the page watches the run in training
    FakeJob.made[0].finished.set()
    runner._admit_next()
    assert controller.line_note(b) is None
    assert controller.follow(first, b) == "b1"  # its own run now: the page switches to it
