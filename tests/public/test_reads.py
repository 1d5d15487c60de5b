"""Reads that cost nothing twice, and a read rate per visitor.

Eight clients looping on ``/list_runs`` with 31 runs on disk slowed a training step 3.6-5.8x: every call re-read
every status.json, config.yaml and metrics.jsonl. Here each read is counted: a second list, a second read of a
step's rollouts, parses nothing; a changed file is read again, and only it. The gates' tables forget a visitor
once its window has passed; one visitor cannot take the whole sampling share. The last test calls the named
endpoints of a live server from distinct loopback addresses.

``python -m pytest tests/public/test_reads.py`` (about half a minute).
"""

import json
import os
from dataclasses import replace

import httpx
import pytest
from apputil import running_app

from rloo_demo.config import RunConfig
from rloo_demo.errors import RateLimited
from rloo_demo.public import gates as gates_module
from rloo_demo.public.gates import Caller, EventGate, SamplingGate, StartGate
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.server import readers as readers_module
from rloo_demo.server.runner import Runner
from rloo_demo.store import folder as folder_module
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.controller import Controller


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make_runs(root, count=31, steps=150):
    for i in range(count):
        run = RunFolder.create(RunConfig(output_dir=str(root), run_name=f"r{i:02d}"))
        lines = [
            json.dumps({"step": s, "max_steps": steps, "reward": 0.01 * s, "kl": 0.1}) for s in range(1, steps + 1)
        ]
        (run.path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        run.set_status("finished", created=1_000_000.0 + i)


@pytest.fixture
def counted(monkeypatch):
    """Every parse a run list can make, counted by kind: metrics lines, configs, statuses."""
    counts = {"metrics": 0, "config": 0, "status": 0}
    real_jsonl, real_load, real_status = folder_module.read_jsonl_counted, RunConfig.load, RunFolder.status

    def jsonl(*a, **k):
        counts["metrics"] += 1
        return real_jsonl(*a, **k)

    def load(path):
        counts["config"] += 1
        return real_load(path)

    def status(self):
        counts["status"] += 1
        return real_status(self)

    monkeypatch.setattr(folder_module, "read_jsonl_counted", jsonl)
    monkeypatch.setattr(RunConfig, "load", staticmethod(load))
    monkeypatch.setattr(RunFolder, "status", status)
    return counts


def test_a_second_list_of_31_runs_parses_nothing(tmp_path, counted):
    make_runs(tmp_path)
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    first = controller.list_runs()
    assert len(first) == 31 and first[0]["name"] == "r30" and first[0]["steps"] == 150
    assert counted["metrics"] == 31
    parsed = dict(counted)
    for _ in range(5):
        assert controller.list_runs() == first
    assert counted == parsed, "a list of unchanged runs parsed files again"
    # one run gains a step: its metrics are read again, and only its
    with open(tmp_path / "r05" / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 151, "max_steps": 150, "reward": 9.0}) + "\n")
    again = controller.list_runs()
    assert counted["metrics"] == parsed["metrics"] + 1
    assert next(s for s in again if s["name"] == "r05")["reward_last"] == 9.0
    first[0]["status"] = "changed by a caller"  # the cached answer is not the caller's to change
    assert controller.list_runs()[0]["status"] == "finished"


def test_the_listing_sees_every_change(tmp_path):
    """Fresh whatever changes: a new run, a deleted one, a status replaced within one mtime tick (the inode tells),
    a deleted config.yaml (no longer a run)."""
    make_runs(tmp_path, count=3, steps=2)
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    assert [s["name"] for s in controller.list_runs()] == ["r02", "r01", "r00"]
    RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="new")).set_status("running", created=2e6)
    assert [s["name"] for s in controller.list_runs()][0] == "new"
    status = tmp_path / "r01" / "status.json"
    before = os.stat(status)
    text = status.read_text().replace('"finished"', '"stopped" ')  # the same length
    replacement = tmp_path / "r01" / ".status.tmp"
    replacement.write_text(text)
    os.replace(replacement, status)
    os.utime(status, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same mtime, the same size
    assert os.stat(status).st_size == before.st_size
    assert next(s for s in controller.list_runs() if s["name"] == "r01")["status"] == "stopped"
    (tmp_path / "r00" / "config.yaml").unlink()
    assert "r00" not in [s["name"] for s in controller.list_runs()]


def test_a_step_of_rollouts_on_disk_is_parsed_once(tmp_path, monkeypatch):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="done"))
    for step in range(1, 41):
        run.append_rollouts(step, [{"step": step, "group": g, "prompt": "p", "completions": []} for g in range(4)])
    run.set_status("finished")
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    reads = []
    real = readers_module.RolloutIndex.read
    monkeypatch.setattr(readers_module.RolloutIndex, "read", lambda self, step: reads.append(step) or real(self, step))
    for _ in range(5):
        answer = controller.get_rollouts("done", 7)
        assert [g["group"] for g in answer["groups"]] == [0, 1, 2, 3] and answer["steps"][-1] == 40
        assert controller.get_rollouts("done", 0)["groups"][0]["step"] == 40
    assert reads == [7, 40]
    answer["groups"].clear()  # a caller's copy
    assert len(controller.get_rollouts("done", 7)["groups"]) == 4


# ----------------------------------------------------------------------------- the read gate


def test_events_are_charged_their_cost_against_one_budget_per_visitor():
    """240 ms a minute (4 ms a second, an allowance of 80): events of any kind draw on it at their cost, each let in
    only when what is left holds its cost; one dearer than the whole allowance passes on a full one."""
    clock = Clock()
    gate = EventGate(replace(LOCAL, event_ms_per_minute=240), clock=clock)
    for cost in (10, 20, 30):  # 60 of 80 spent ...
        gate.admit("a", cost)
    assert gate.left("a") == pytest.approx(20)
    with pytest.raises(RateLimited, match=r"about 4 ms of its time a second .* try again in 8 s"):
        gate.admit("a", 50)  # ... 20 left: 30 short, 7.5 s at 4 a second
    gate.admit("a", 20)  # what is left is enough for a cheaper one
    gate.admit("b", 80)  # another visitor is not affected
    clock.now += 0.2
    with pytest.raises(RateLimited, match="try again in 1 s"):
        gate.admit("a", 1)  # 0.8 of 1
    clock.now += 0.05
    gate.admit("a", 1)
    clock.now += 1000  # refilled to the allowance, never beyond it
    assert gate.left("a") == pytest.approx(80)
    gate.admit("a", 500)  # dearer than the whole allowance: let in on a full one, which it empties
    assert gate.left("a") == pytest.approx(0)
    EventGate(LOCAL).admit("a", 10**6)  # a local server sets no budget
    assert EventGate(LOCAL).left("a") is None


def test_gate_tables_forget_their_visitors():
    """The audit: the gates kept every address for ever (~885 bytes each). After a window with no call, a visitor
    is gone from every table."""
    clock = Clock()
    limits = replace(LOCAL, event_ms_per_minute=240, starts_per_minute=4, sampling_per_minute=12)
    reads, starts = EventGate(limits, clock=clock), StartGate(limits, clock=clock)
    sampling = SamplingGate(limits, training=lambda: False, clock=clock)
    for i in range(2000):
        reads.admit(f"10.0.{i // 250}.{i % 250}")
        starts.admit(f"10.0.{i // 250}.{i % 250}")
        with sampling(f"10.0.{i // 250}.{i % 250}"):
            pass
    assert len(reads) == len(starts._calls) == len(sampling._calls) == 2000
    clock.now += 61
    reads.admit("last")
    starts.admit("last")
    with sampling("last"):
        pass
    assert len(reads) == len(starts._calls) == len(sampling._calls) == 1


def test_a_full_table_forgets_at_once(monkeypatch):
    monkeypatch.setattr(gates_module, "MAX_VISITORS", 100)
    clock = Clock()
    gate = StartGate(replace(LOCAL, starts_per_minute=4), clock=clock)
    for i in range(1000):  # all within one window: a spray of addresses
        gate.admit(f"v{i}")
        clock.now += 0.01
    assert len(gate._calls) <= 100


def test_a_sweep_keeps_a_visitor_whose_last_call_is_exactly_a_window_old():
    clock = Clock()
    clock.now = 0.0
    gate = StartGate(replace(LOCAL, starts_per_minute=4), clock=clock)
    gate.admit("a")  # the first call sweeps the (empty) table
    clock.now = 10.0
    for _ in range(4):
        gate.admit("c")  # c at its rate
    clock.now = 70.0  # a window after the first sweep: b's call sweeps; c's calls are exactly 60 s old
    gate.admit("b")
    assert set(gate._calls) == {"b", "c"}  # a (60 s idle and more) is forgotten, c is not
    with pytest.raises(RateLimited):
        gate.admit("c")  # its four calls still count


@pytest.mark.parametrize(("elapsed", "left"), [(0.25, 76), (0.5, 1)], ids=["short-of-full", "exactly-full"])
def test_a_full_event_table_forgets_only_the_visitors_whose_allowance_refilled(monkeypatch, elapsed, left):
    """120 ms a minute: 2 a second into an allowance of 40. Each of 100 visitors spent 1 (39 left); when the table
    is full, those refilled to 40 are forgotten (nothing lost), the rest kept and the oldest quarter dropped."""
    monkeypatch.setattr(gates_module, "MAX_VISITORS", 100)
    clock = Clock()
    clock.now = 1000.0
    gate = EventGate(replace(LOCAL, event_ms_per_minute=120), clock=clock)
    for i in range(100):
        gate.admit(f"v{i}", 1)
    clock.now += elapsed  # 39 + 2 x 0.25 = 39.5 (short of full), 39 + 2 x 0.5 = 40 (full)
    gate.admit("new", 1)
    assert len(gate) == left


def test_one_visitor_cannot_take_the_whole_sampling_share():
    """The audit: one visitor within its 12 a minute used up the whole share in 21 s. Now one visitor may use half
    of it; the others still sample. A share of 0.4 is 4 s of every 10 while a run trains."""
    clock = Clock()
    gate = SamplingGate(replace(LOCAL, sampling_share=0.4), training=lambda: True, clock=clock)
    with gate("a"):
        clock.now += 2.5  # over half of the 4 s share
    with pytest.raises(RateLimited, match="your part of the CPU"):
        with gate("a"):
            pass
    with gate("b"):  # someone else still may
        clock.now += 1.4
    with pytest.raises(RateLimited, match="sampling has used its share"):  # 3.9 s + the whole share's rule
        with gate("c"):
            clock.now += 0.2
        with gate("c"):
            pass
    clock.now += 11
    with gate("a"):  # the window moved on
        pass


def test_controller_reads_count_against_the_callers_budget(tmp_path):
    """A read that reaches the controller without the admission middleware (an in-process caller) is charged
    ``READ_MS`` to its visitor's budget: 96 ms a minute is an allowance of 32, four reads of 8."""
    from rloo_demo.ui.controller import READ_MS

    make_runs(tmp_path, count=2, steps=3)
    limits = replace(LOCAL, event_ms_per_minute=12 * READ_MS)
    controller = Controller(Runner(str(tmp_path), limits=limits, watchdog=False))
    a, b = Caller("page-a", "10.1.1.1"), Caller("page-b", "10.1.1.2")
    for _ in range(2):
        controller.list_runs(a)
        controller.poll_metrics("r00", 0, a)
    assert 0 <= controller.events.left(a.key) < 1  # four reads of 8 spent the 32 (a second refills 1.6)
    for read in (
        lambda: controller.list_runs(a),
        lambda: controller.get_rollouts("r00", 0, a),
        lambda: controller.follow("r00", a),
        lambda: controller.poll_metrics("r00", 0, a),
    ):
        with pytest.raises(RateLimited, match="too many requests"):
            read()
    assert controller.list_runs(b)[0]["name"] == "r01"
    assert len(controller.list_runs()) == 2  # the server's own reads (no caller) are not counted
    admitted = Caller("page-a", "10.1.1.1", admitted=True)  # the middleware charged it already
    assert controller.list_runs(admitted)[0]["name"] == "r01"


def api(url, address, name, data):
    """A named endpoint called from ``address`` (gradio_client cannot bind one: its ``httpx_kwargs`` go to
    ``httpx.get`` too), through the queue's join and event stream as gradio_client calls it."""
    config = httpx.get(f"{url}config", timeout=30).json()
    fn = next(d["id"] for d in config["dependencies"] if d.get("api_name") == name)
    body = {"data": data, "fn_index": fn, "session_hash": f"s-{address}", "event_data": None}
    with httpx.Client(timeout=60, transport=httpx.HTTPTransport(local_address=address)) as http:
        joined = http.post(f"{url}gradio_api/queue/join", json=body)
        if joined.status_code == 429:  # refused by the admission middleware, before the queue
            return {"error": joined.json()["detail"]}
        assert joined.status_code == 200
        with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": f"s-{address}"}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_completed":
                    return json.loads(line[5:])["output"]["data"][0]
    raise AssertionError("no answer")


def test_named_read_endpoints_refuse_a_looping_visitor_and_serve_the_others(space_runs_dir, monkeypatch):
    """An allowance of two list_runs and a half: the third read of any kind from that address is refused before
    gradio; another address reads as before."""
    from rloo_demo.ui.api import EVENT_COSTS

    # an allowance of 2.5 calls, which ten minutes refill: what comes back while the test runs is negligible
    monkeypatch.setattr(gates_module, "EVENT_BURST_SECONDS", 600.0)
    limits = replace(PUBLIC, event_ms_per_minute=EVENT_COSTS["list_runs"] * 2.5 / 10)
    with running_app(space_runs_dir, limits=limits) as (url, controller):
        make_runs(space_runs_dir, count=2, steps=3)
        answers = [api(url, "127.0.0.2", "list_runs", []) for _ in range(2)]
        assert all(isinstance(a, list) and len(a) == 2 for a in answers)
        assert "too many requests" in api(url, "127.0.0.2", "list_runs", [])["error"]
        assert "too many requests" in api(url, "127.0.0.2", "get_rollouts", ["r00", 0])["error"]
        assert "too many requests" in api(url, "127.0.0.2", "poll_metrics", ["r00", 0])["error"]
        assert [s["name"] for s in api(url, "127.0.0.3", "list_runs", [])] == ["r01", "r00"]
        assert api(url, "127.0.0.3", "poll_metrics", ["r00", 0])["status"] == "finished"


def test_a_poll_answers_a_page_of_records_and_says_when_more_follow(tmp_path):
    """A poll from step 0 of a long run answered every record (530 kB at 600 steps, each poll); now at most
    ``POLL_RECORDS``, and ``more`` until the caller has them all, polling on from the last step it got."""
    from rloo_demo.server.readers import POLL_RECORDS

    make_runs(tmp_path, count=1, steps=2 * POLL_RECORDS + 50)
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    caller, got, since, pages = Caller("api", "10.1.1.9"), [], 0, []
    while True:
        answer = controller.poll_metrics("r00", since, caller)
        got += answer["records"]
        pages.append((len(answer["records"]), answer["more"]))
        if not answer["more"]:
            break
        since = answer["records"][-1]["step"]
    assert pages == [(POLL_RECORDS, True), (POLL_RECORDS, True), (50, False)]
    assert [r["step"] for r in got] == list(range(1, 2 * POLL_RECORDS + 51))  # each step once, in order
    assert controller.poll_metrics("r00", 2 * POLL_RECORDS + 50, caller) | {"records": None} == {
        **answer,
        "records": None,
        "more": False,
    }
