"""``server.readers``: every read a page or an API caller makes of a run, compared with what the test wrote.

A runner with no watchdog over a runs folder the test fills; a run "in training" is an ``ActiveRun`` around a
fake job whose state the test sets, so each of the reader's two paths (memory, disk) is checked against a value
known in advance. Fast: no model loads. ``python -m pytest tests/server/test_readers.py``.
"""

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rloo_demo.arena import markdown_table
from rloo_demo.config import RunConfig
from rloo_demo.engine.callbacks import MetricsChannel
from rloo_demo.errors import InputError, NotFound
from rloo_demo.public.gates import Caller, owner_digest
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.public.redaction import Redactor, inert
from rloo_demo.public.retention import visitor_digest
from rloo_demo.server import readers as readers_module
from rloo_demo.server import runner as runner_module
from rloo_demo.server.readers import DEFAULT_STEP_SECONDS, DEFAULT_STEP_WORK, MAX_OVERLAY_RUNS, RunReader
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.labels import write_notes


@dataclass
class _State:
    config: RunConfig
    status: str = "running"
    error: str | None = None
    stop_reason: str | None = None
    started: float | None = None
    finished: float | None = None
    rollout_steps: list = field(default_factory=list)
    rollouts: dict = field(default_factory=dict)
    channel: MetricsChannel = field(default_factory=MetricsChannel)
    stop_event: threading.Event = field(default_factory=threading.Event)


class _Job:
    """A job that never trains: the state the reader reads, and its run folder."""

    def __init__(self, run, config):
        self.run = run
        self._folder = run
        self.state = _State(config)
        self.done = False


def _reader(tmp_path, public=False):
    runner = Runner(str(tmp_path), limits=LOCAL, watchdog=False)
    return RunReader(runner, Redactor(public, str(tmp_path))), runner


def _disk_run(root, name, steps=3, status="finished", created=1_000_000.0, max_steps=9, **extra):
    config = RunConfig(output_dir=str(root), run_name=name, max_steps=max_steps)
    run = RunFolder.create(config)
    lines = [json.dumps({"step": s, "reward": 0.5 * s}) for s in range(1, steps + 1)]
    (run.path / "metrics.jsonl").write_text("".join(f"{line}\n" for line in lines))
    run.set_status(status, created=created, **extra)
    return run


def _train(runner, name, root, started=2e9, **config):
    """Put a run "in training" into the runner: an ActiveRun whose job the test drives."""
    config = RunConfig(output_dir=str(root), run_name=name, **config)
    job = _Job(RunFolder.create(config), config)
    runner._active[name] = runner_module.ActiveRun(job, "owner-" + name, started)
    return job


# ----------------------------------------------------------------------------- a run on disk


def test_a_run_on_disk_is_viewed_field_by_field(tmp_path):
    run = _disk_run(tmp_path, "disk", steps=0, max_steps=7)
    with open(run.path / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"step": 1, "reward": 0.25}) + "\n")
        f.write("{corrupt\n")
        f.write(json.dumps({"step": "2", "reward": 9.0}) + "\n")  # a step that is not an int: not a record
        f.write(json.dumps({"step": 3, "reward": 0.75}) + "\n")
    error = f"cannot read {tmp_path.resolve()}/disk/model/config.json"
    run.set_status("stopped", error=error, started=100.0, finished=130.5, reason="asked to stop")
    view = _reader(tmp_path, public=True)[0].view("disk")
    assert (view.name, view.status, view.live, view.reason) == ("disk", "stopped", False, "asked to stop")
    assert view.error == "cannot read <runs>/disk/model/config.json"
    assert view.records == [{"step": 1, "reward": 0.25}, {"step": 3, "reward": 0.75}]
    assert (view.max_steps, view.elapsed, view.skipped_lines, view.last_step) == (7, 30.5, 1, 3)
    assert view.config.max_steps == 7 and view.config.run_name == "disk"
    assert _reader(tmp_path, public=False)[0].view("disk").error == error  # a local server keeps its paths


def test_elapsed_runs_to_the_last_update_when_a_run_has_not_finished(tmp_path):
    run = _disk_run(tmp_path, "going", status="stopped")

    def elapsed(**times):  # "stopped": a "running" run of no live process would be marked interrupted
        (run.path / "status.json").write_text(json.dumps({"status": "stopped", **times}))
        return _reader(tmp_path)[0].view("going").elapsed

    assert elapsed(started=50.0, updated=80.0) == 30.0
    assert elapsed(started=50.0, updated=80.0, finished=65.0) == 15.0  # finished first
    assert elapsed(started="not a time", updated=80.0) is None
    assert elapsed(started=50.0, updated="later") is None
    now = time.time()
    assert now - 50.0 <= elapsed(started=50.0) <= time.time() - 50.0  # neither: until now


def test_an_unreadable_run_is_a_view_that_says_so(tmp_path):
    run = _disk_run(tmp_path, "broken")
    (run.path / "status.json").write_text("{not json")
    view = _reader(tmp_path)[0].view("broken")
    assert view.status == "unreadable: status.json is corrupt (JSONDecodeError)"
    assert (view.records, view.max_steps, view.config, view.live, view.error, view.elapsed) == (
        [],
        0,
        None,
        False,
        None,
        None,
    )
    reader = _reader(tmp_path)[0]
    assert reader.rollout_steps("broken") == [] and reader.rollouts("broken", None) == []


@pytest.mark.parametrize("name", [None, "", 7, ["disk"], "nothing-here", "../disk"])
def test_no_run_is_no_view(tmp_path, name):
    _disk_run(tmp_path, "disk")
    reader = _reader(tmp_path)[0]
    assert reader.view(name) is None
    assert reader.rollout_steps(name) == [] and reader.rollouts(name, 1) == []


def test_a_view_is_read_again_when_a_file_changes_and_only_then(tmp_path, monkeypatch):
    run = _disk_run(tmp_path, "disk", steps=2)
    reader = _reader(tmp_path)[0]
    reads = []
    real = RunReader._read_view
    monkeypatch.setattr(RunReader, "_read_view", lambda self, r: reads.append(r.name) or real(self, r))
    assert reader.view("disk").last_step == 2
    assert reader.view("disk").last_step == 2 and reads == ["disk"]
    with open(run.path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3}) + "\n")
    assert reader.view("disk").last_step == 3 and reads == ["disk", "disk"]
    run.set_status("failed", error="boom")
    assert reader.view("disk").status == "failed" and len(reads) == 3


# ----------------------------------------------------------------------------- a run in training


def test_a_run_in_training_is_viewed_from_memory(tmp_path):
    reader, runner = _reader(tmp_path, public=True)
    _disk_run(tmp_path, "old")
    job = _train(runner, "live", tmp_path, max_steps=11)
    st = job.state
    st.status, st.started, st.finished, st.stop_reason = "pending", 10.0, 14.25, "why not"
    st.error = f"no file {tmp_path.resolve()}/live/x.bin"
    for s in (1, 2):
        st.channel.publish({"step": s, "reward": s / 4})
    view = reader.view("live")
    assert (view.name, view.status, view.live, view.max_steps, view.elapsed) == ("live", "running", True, 11, 4.25)
    assert view.error == "no file <runs>/live/x.bin" and view.reason == "why not"
    assert view.records == [{"step": 1, "reward": 0.25}, {"step": 2, "reward": 0.5}] and view.config is st.config
    st.status = "finished"
    assert reader.view("live").status == "finished"


def test_the_default_run_is_the_newest_training_else_the_newest_on_disk(tmp_path):
    reader, runner = _reader(tmp_path)
    assert reader.default_run() is None
    _disk_run(tmp_path, "older", created=1.0)
    _disk_run(tmp_path, "newer", created=2.0)
    assert reader.default_run() == "newer"
    _train(runner, "late", tmp_path, started=300.0)
    _train(runner, "early", tmp_path, started=200.0)
    assert reader.default_run() == "late"


def test_a_page_follows_the_run_that_trains_unless_it_watches_a_live_one(tmp_path):
    reader, runner = _reader(tmp_path)
    _disk_run(tmp_path, "done")
    me = Caller("page", "127.0.0.2")
    assert reader.follow("done", me) == "done" and reader.follow("", me) is None and reader.follow(5, me) is None
    _train(runner, "mine", tmp_path, started=100.0)
    _train(runner, "theirs", tmp_path, started=200.0)
    assert reader.follow("", me) == "theirs"  # watching nothing: the newest run in training
    assert reader.follow(None, me) == "theirs"
    assert reader.follow("done", me) == "theirs"  # a finished run gives way to one that trains
    assert reader.follow("gone", me) == "theirs"
    assert reader.follow("mine", me) == "mine"  # a live run of its own choice is kept
    assert reader.follow("theirs", me) == "theirs"


def _started(cid, address) -> dict:
    """What status.json records about a run's starter (``Runner._start_locked``)."""
    return {"owner": owner_digest(cid), "visitor": visitor_digest(address)}


def test_on_a_public_server_a_fresh_page_attaches_only_to_its_visitors_own_runs(tmp_path):
    """Own: started with the page's client id (a reload keeps it), or from its address. Another visitor's run, or
    the operator's (no starter recorded), is nobody's page's default, on disk or in training."""
    runner = Runner(str(tmp_path), limits=PUBLIC, watchdog=False)
    reader = RunReader(runner, Redactor(True, str(tmp_path)))
    me, other = Caller("my-id", "127.0.0.2"), Caller("their-id", "127.0.0.3")
    _disk_run(tmp_path, "theirs", created=1.0, **_started("their-id", "127.0.0.3"))
    _disk_run(tmp_path, "operators", created=9.0)  # the CLI's, newest of all
    assert reader.default_run(me) is None and reader.default_run(None) is None
    assert reader.default_run(other) == "theirs"
    assert reader.default_run(Caller("their-id", "10.1.1.1")) == "theirs"  # its browser, from another network
    _disk_run(tmp_path, "mine-by-id", created=2.0, **_started("my-id", "10.9.9.9"))
    assert reader.default_run(me) == "mine-by-id"
    _disk_run(tmp_path, "mine-by-address", created=3.0, **_started("an-old-id", "127.0.0.2"))
    assert reader.default_run(me) == "mine-by-address"  # the newest of its own
    assert reader.default_run(Caller("my-id", "127.0.0.9")) == "mine-by-id"
    assert reader.default_run(Caller("\ud800", "127.0.0.9")) is None  # an id no hash is taken of: nobody's

    theirs = _train(runner, "theirs-live", tmp_path, started=300.0)
    runner._active["theirs-live"].owner, runner._active["theirs-live"].visitor = "their-id", "127.0.0.3"
    assert theirs is not None and reader.default_run(me) == "mine-by-address"  # their run trains: not this page's
    assert reader.follow(None, me) is None and reader.follow("mine-by-id", me) == "mine-by-id"
    assert reader.default_run(other) == "theirs-live" and reader.follow("theirs", other) == "theirs-live"
    _train(runner, "mine-live", tmp_path, started=200.0)
    runner._active["mine-live"].owner, runner._active["mine-live"].visitor = "a-new-tab", "127.0.0.2"
    assert reader.default_run(me) == "mine-live"  # its own in training, before any on disk
    assert reader.follow(None, me) == "mine-live" and reader.follow("mine-by-id", me) == "mine-live"
    assert reader.follow("theirs-live", me) == "theirs-live"  # a live run the page chose is kept


def test_a_visitors_turn_that_became_a_run_is_what_its_page_follows(tmp_path):
    reader, runner = _reader(tmp_path)
    _train(runner, "theirs", tmp_path, started=200.0)
    _train(runner, "mine", tmp_path, started=100.0)
    me, other = Caller("page", "127.0.0.2"), Caller("page", "127.0.0.3")
    runner._turns[me.key] = type("Turn", (), {"started": "mine"})()
    assert reader.follow("", me) == "mine" and reader.follow("theirs", me) == "mine"
    assert reader.follow("", other) == "theirs"  # another visitor's turn is not this one's
    runner._turns[me.key].started = "ended"  # its run no longer trains: the usual rule
    assert reader.follow("", me) == "theirs"


def test_a_page_tick_is_its_starters_heartbeat(tmp_path):
    reader, runner = _reader(tmp_path)
    _train(runner, "mine", tmp_path)
    active = runner.get_active("mine")
    active.last_seen = 0.0
    reader.follow("mine", Caller("someone-else", "127.0.0.2"))
    assert active.last_seen == 0.0
    reader.follow("mine", Caller("owner-mine", "127.0.0.2"))
    assert active.last_seen > 0.0
    active.owner_host, active.last_seen = "10.0.0.7", 0.0
    reader.poll_metrics("mine", 0, Caller("", "10.0.0.7"))  # an API caller's poll keeps its host's runs alive
    assert active.last_seen > 0.0


# ----------------------------------------------------------------------------- polls


def test_a_poll_answers_the_records_after_the_step_asked(tmp_path):
    reader, runner = _reader(tmp_path)
    run = _disk_run(tmp_path, "disk", steps=5, max_steps=8)
    run.set_status("stopped", error="e", reason="r")
    caller = Caller("api", "127.0.0.2")
    answer = reader.poll_metrics("disk", 3, caller)
    assert answer == {
        "run": "disk",
        "status": "stopped",
        "error": "e",
        "reason": "r",
        "max_steps": 8,
        "records": [{"step": 4, "reward": 2.0}, {"step": 5, "reward": 2.5}],
        "more": False,
    }
    assert [r["step"] for r in reader.poll_metrics("disk", -1, caller)["records"]] == [1, 2, 3, 4, 5]
    assert reader.poll_metrics("disk", 2.0, caller)["records"][0]["step"] == 3
    assert reader.poll_metrics("disk", 5, caller)["records"] == []


def test_a_poll_of_no_run_says_which(tmp_path):
    reader = _reader(tmp_path)[0]
    caller = Caller("api", "127.0.0.2")
    with pytest.raises(NotFound) as err:
        reader.poll_metrics("nothing-here", 0, caller)
    assert str(err.value) == "no run named 'nothing-here'"
    with pytest.raises(NotFound) as err:
        reader.poll_metrics("../etc", 0, caller)
    assert str(err.value) == "no such run"  # a name no run can have is not echoed
    for since in ("x", -2, 10**9 + 1, 1.5):
        with pytest.raises(InputError, match="since_step"):
            reader.poll_metrics("nothing-here", since, caller)


def test_a_poll_pages_a_run_in_training(tmp_path, monkeypatch):
    monkeypatch.setattr(readers_module, "POLL_RECORDS", 3)
    reader, runner = _reader(tmp_path)
    job = _train(runner, "live", tmp_path)
    for s in range(1, 8):
        job.state.channel.publish({"step": s})
    caller = Caller("api", "127.0.0.2")
    first = reader.poll_metrics("live", 0, caller)
    assert [r["step"] for r in first["records"]] == [1, 2, 3] and first["more"] is True
    last = reader.poll_metrics("live", 4, caller)
    assert [r["step"] for r in last["records"]] == [5, 6, 7] and last["more"] is False  # exactly a page: no more


# ----------------------------------------------------------------------------- rollouts


def _groups(step, count=2):
    return [{"step": step, "group": g, "prompt": f"p{step}.{g}", "completions": []} for g in range(count)]


def test_rollouts_on_disk_by_step_and_the_latest_for_none_or_below_one(tmp_path):
    run = _disk_run(tmp_path, "disk")
    for step in (2, 4, 6):
        run.append_rollouts(step, _groups(step))
    reader = _reader(tmp_path)[0]
    assert reader.rollout_steps("disk") == [2, 4, 6]
    assert [g["prompt"] for g in reader.rollouts("disk", 4)] == ["p4.0", "p4.1"]
    for latest in (None, 0, -3, 0.0):
        assert [g["prompt"] for g in reader.rollouts("disk", latest)] == ["p6.0", "p6.1"], latest
    assert reader.rollouts("disk", 2.0)[0]["prompt"] == "p2.0"
    assert reader.rollouts("disk", 5) == []  # a step with no rollouts
    with pytest.raises(InputError, match="step"):
        reader.rollouts("disk", "two")
    assert reader.get_rollouts("disk", 2) == {"run": "disk", "steps": [2, 4, 6], "groups": _groups(2)}
    assert reader.get_rollouts("disk", 0)["groups"] == _groups(6)
    empty = _disk_run(tmp_path, "empty")
    assert reader.rollouts(empty.name, None) == [] and reader.rollout_steps(empty.name) == []


def test_a_run_in_training_answers_rollouts_from_memory_then_from_its_folder(tmp_path):
    reader, runner = _reader(tmp_path)
    job = _train(runner, "live", tmp_path)
    assert reader.rollouts("live", None) == [] and reader.rollout_steps("live") == []
    for step in (1, 2, 3):
        job._folder.append_rollouts(step, _groups(step, 1))
    job.state.rollout_steps = [1, 2, 3]
    job.state.rollouts = {3: [{"step": 3, "in": "memory"}]}  # only the latest kept in memory
    assert reader.rollout_steps("live") == [1, 2, 3]
    assert reader.rollouts("live", None) == [{"step": 3, "in": "memory"}]
    assert reader.rollouts("live", 3) == [{"step": 3, "in": "memory"}]
    assert reader.rollouts("live", 2) == _groups(2, 1)  # not in memory: read from the run's folder
    assert reader.get_rollouts("live", 1) == {"run": "live", "steps": [1, 2, 3], "groups": _groups(1, 1)}


def test_a_run_in_training_without_a_folder_yet_has_no_rollouts_to_read(tmp_path):
    reader, runner = _reader(tmp_path)
    job = _train(runner, "new", tmp_path)
    job._folder.append_rollouts(1, _groups(1, 1))
    job.state.rollout_steps = [1]  # step 1 is not kept in memory, and the job has no folder (a subprocess's)
    job.run = None
    assert reader.rollouts("new", 1) == [] and reader.rollouts("new", None) == []


def test_get_rollouts_refuses_a_name_no_answer_can_carry_and_echoes_no_invalid_name(tmp_path):
    reader = _reader(tmp_path)[0]
    with pytest.raises(InputError) as err:
        reader.get_rollouts("run\ud800", 1)
    assert str(err.value).startswith("run ") and "surrogate" in str(err.value)
    assert reader.get_rollouts("../../etc", 1) == {"run": None, "steps": [], "groups": []}
    assert reader.get_rollouts("no-such", 1) == {"run": "no-such", "steps": [], "groups": []}
    with pytest.raises(InputError, match="step"):
        reader.get_rollouts("no-such", 10**9 + 1)


def test_a_steps_groups_are_read_once_and_each_caller_gets_its_own_list(tmp_path, monkeypatch):
    run = _disk_run(tmp_path, "disk")
    run.append_rollouts(1, _groups(1, 3))
    reader = _reader(tmp_path)[0]
    reads = []
    real = readers_module.RolloutIndex.read
    monkeypatch.setattr(readers_module.RolloutIndex, "read", lambda self, step: reads.append(step) or real(self, step))
    first = reader.rollouts("disk", 1)
    first.pop()
    assert reader.rollouts("disk", 1) == _groups(1, 3) and reads == [1]
    run.append_rollouts(2, _groups(2, 1))
    assert reader.rollouts("disk", None) == _groups(2, 1) and reads == [1, 2]
    assert reader.rollouts("disk", 1) == _groups(1, 3) and reads == [1, 2]  # appending left step 1's lines alone


# ----------------------------------------------------------------------------- estimates, overlays, lists


def _timed_run(root, name, times, policy=None, k=None, tokens=None, created=1.0):
    config = {"policy": policy} if policy else {}
    config.update({"num_generations": k} if k else {})
    config.update({"max_new_tokens": tokens} if tokens else {})
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, **config))
    lines = [json.dumps({"step": i + 1, "step_time": t}) for i, t in enumerate(times)]
    (run.path / "metrics.jsonl").write_text("".join(f"{line}\n" for line in lines))
    run.set_status("finished", created=created)
    return run


def test_step_seconds_scale_the_latest_timed_run_of_the_same_policy(tmp_path):
    reader = _reader(tmp_path)[0]
    asked = RunConfig(output_dir=str(tmp_path))
    work = asked.completions_per_step * asked.max_new_tokens
    assert reader.step_seconds(asked) == pytest.approx(DEFAULT_STEP_SECONDS * work / DEFAULT_STEP_WORK)
    # the first step is not counted (it loads and warms up); a run needs 5 timed steps after it
    _timed_run(tmp_path, "few", [100.0, 1.0, 1.0, 1.0, 1.0], created=1.0)
    assert reader.step_seconds(asked) == pytest.approx(DEFAULT_STEP_SECONDS * work / DEFAULT_STEP_WORK)
    past = _timed_run(tmp_path, "timed", [100.0, 1.0, 2.0, "x", 3.0, 4.0, 5.0], created=2.0)
    cfg = past.config()
    expected = 3.0 * work / (cfg.completions_per_step * cfg.max_new_tokens)
    assert reader.step_seconds(asked) == pytest.approx(expected)
    halved = RunConfig(output_dir=str(tmp_path), max_new_tokens=asked.max_new_tokens // 2)
    assert reader.step_seconds(halved) == pytest.approx(expected / 2)
    _timed_run(tmp_path, "other-policy", [1, 9, 9, 9, 9, 9], policy="other", created=3.0)  # newest, another policy
    assert reader.step_seconds(asked) == pytest.approx(expected)
    _timed_run(tmp_path, "newest", [1, 6, 6, 6, 6, 6], created=4.0)
    assert reader.step_seconds(asked) == pytest.approx(6.0 * work / (cfg.completions_per_step * cfg.max_new_tokens))


def test_overlays_take_at_most_the_cap_and_skip_what_is_not_a_run(tmp_path):
    for i in range(MAX_OVERLAY_RUNS + 2):
        _disk_run(tmp_path, f"r{i:02d}", steps=i % 3 + 1)
    reader = _reader(tmp_path)[0]
    assert reader.overlay_records("r00") == {} and reader.overlay_records(None) == {}
    names = [f"r{i:02d}" for i in range(MAX_OVERLAY_RUNS + 2)]
    data = reader.overlay_records(["missing", *names])
    assert list(data) == names[: MAX_OVERLAY_RUNS - 1]  # the missing name took one of the places
    assert [len(records) for records in data.values()] == [i % 3 + 1 for i in range(MAX_OVERLAY_RUNS - 1)]
    assert data["r02"] == [{"step": s, "reward": 0.5 * s} for s in (1, 2, 3)]


def test_comparable_runs_are_the_ones_training_then_the_finished_with_a_model(tmp_path):
    reader, runner = _reader(tmp_path)
    for name, created in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
        run = _disk_run(tmp_path, name, created=created)
        if name != "b":
            (run.path / "model").mkdir()
            (run.path / "model" / "config.json").write_text("{}")
    _train(runner, "live", tmp_path, started=5.0)
    assert reader.comparable_runs() == ["live", "c", "a"]
    live = Path(tmp_path) / "live"
    (live / "model").mkdir()
    (live / "model" / "config.json").write_text("{}")  # a run in training with a model: listed once
    assert reader.comparable_runs() == ["live", "c", "a"]


def test_labels_are_the_labelled_runs_only(tmp_path):
    reader = _reader(tmp_path)[0]
    a, _b = _disk_run(tmp_path, "a"), _disk_run(tmp_path, "b")
    write_notes(a, label="best so far", note="n")
    assert reader.labels() == {"a": "best so far"}
    assert reader.run_notes("a") == {"label": "best so far", "note": "n"}
    assert reader.run_notes("b") == {"label": "", "note": ""}
    with pytest.raises(NotFound):
        reader.run_notes("c")


def test_a_listed_runs_error_is_redacted_and_the_listing_is_newest_first(tmp_path):
    reader = _reader(tmp_path, public=True)[0]
    _disk_run(tmp_path, "a", created=1.0, status="failed", error=f"bad {tmp_path.resolve()}/a/x")
    _disk_run(tmp_path, "b", created=2.0)
    listed = reader.list_runs()
    assert [s["name"] for s in listed] == ["b", "a"]
    assert listed[1]["error"] == "bad <runs>/a/x" and listed[0]["label"] == ""


# ----------------------------------------------------------------------------- arenas


def _arena(root, name, rows=None, runs=(), settings="K=4, 3 seeds", text=None):
    path = Path(root) / f"{name}.json"
    rows = rows if rows is not None else [{"estimator": "rloo", "runs": 3, "gain": 0.25}]
    data = {"rows": rows, "settings": settings, "runs": list(runs)}
    path.write_text(text if text is not None else json.dumps(data))
    return path


def test_arenas_are_listed_newest_first_and_other_files_are_not(tmp_path):
    reader = _reader(tmp_path)[0]
    assert reader.arenas() == []
    for name in ("arena-20260101-120000", "arena-20261201-090000", "arena-20260601-000000"):
        _arena(tmp_path, name)
    (tmp_path / "arena-2026-x.json").write_text("{}")
    (tmp_path / "notes.json").write_text("{}")
    (tmp_path / "arena-20260101-120000.json.bak").write_text("{}")
    assert reader.arenas() == ["arena-20261201-090000", "arena-20260601-000000", "arena-20260101-120000"]
    assert _reader(tmp_path / "not-made")[0].arenas() == []


def test_an_arena_answers_its_table_inert_and_its_runs_still_on_disk(tmp_path):
    reader = _reader(tmp_path)[0]
    _disk_run(tmp_path, "seed-1")
    rows = [{"estimator": "rloo <b>", "runs": 2, "gain_ci95": [0.1, 0.3], "collapsed": 1}]
    _arena(
        tmp_path,
        "arena-20261201-090000",
        rows=rows,
        runs=[{"run": "seed-1"}, {"run": "deleted"}, {"run": "../x"}, "seed-1", {"other": 1}],
    )
    answer = reader.arena("arena-20261201-090000")
    assert answer == {
        "name": "arena-20261201-090000",
        "markdown": inert(markdown_table(rows, "K=4, 3 seeds")),
        "runs": ["seed-1"],
    }
    assert "<b>" not in answer["markdown"] and "rloo" in answer["markdown"]


@pytest.mark.parametrize("name", [None, 3, "", "arena-1", "../arena-20261201-090000", "arena-20261201-090000.json"])
def test_an_arena_name_that_is_not_one_is_not_found(tmp_path, name):
    with pytest.raises(NotFound) as err:
        _reader(tmp_path)[0].arena(name)
    assert str(err.value) == "no such arena (its name is arena-<date>-<time>)"


@pytest.mark.parametrize(
    ("text", "why"),
    [("{corrupt", "JSONDecodeError"), ('{"settings": "x"}', "KeyError"), ('{"rows": 5}', "TypeError"), (None, None)],
)
def test_an_arena_that_cannot_be_read_says_why(tmp_path, text, why):
    name = "arena-20261201-090000"
    if text is None:  # too large to show
        _arena(tmp_path, name, text="x" * 2_000_001)
        message = f"arena {name!r} is too large to show"
    else:
        _arena(tmp_path, name, text=text)
        message = f"arena {name!r} cannot be read ({why})"
    with pytest.raises(NotFound) as err:
        _reader(tmp_path)[0].arena(name)
    assert str(err.value) == message
    if text is None:
        _arena(tmp_path, name, text=json.dumps({"rows": [], "runs": []}).ljust(2_000_000))  # exactly the limit: read
        assert _reader(tmp_path)[0].arena(name)["runs"] == []


# ----------------------------------------------------------------------------- the edges the first tests left


def test_step_seconds_look_at_the_newest_twenty_runs_only(tmp_path):
    reader = _reader(tmp_path)[0]
    asked = RunConfig(output_dir=str(tmp_path))
    work = asked.completions_per_step * asked.max_new_tokens
    _timed_run(tmp_path, "oldest-same-policy", [1, 4, 4, 4, 4, 4], created=1.0)
    for i in range(19):
        _timed_run(tmp_path, f"other-{i:02d}", [1, 9, 9, 9, 9, 9], policy="other", created=10.0 + i)
    cfg = RunConfig(output_dir=str(tmp_path))
    scaled = 4.0 * work / (cfg.completions_per_step * cfg.max_new_tokens)
    assert reader.step_seconds(asked) == pytest.approx(scaled)  # the 20th newest: still looked at
    _timed_run(tmp_path, "other-19", [1, 9, 9, 9, 9, 9], policy="other", created=40.0)
    assert reader.step_seconds(asked) == pytest.approx(DEFAULT_STEP_SECONDS * work / DEFAULT_STEP_WORK)  # the 21st


def test_a_poll_names_its_bad_step_and_a_record_without_a_step_counts_as_step_0(tmp_path):
    reader, runner = _reader(tmp_path)
    job = _train(runner, "live", tmp_path)
    job.state.channel.publish({"reward": 1.0})  # no step
    job.state.channel.publish({"step": 1})
    caller = Caller("api", "127.0.0.2")
    assert reader.poll_metrics("live", -1, caller)["records"] == [{"reward": 1.0}, {"step": 1}]
    assert reader.poll_metrics("live", 0, caller)["records"] == [{"step": 1}]
    with pytest.raises(InputError) as err:
        reader.poll_metrics("live", -2, caller)
    assert str(err.value) == "since_step must be between -1 and 1000000000, not -2"


def test_an_unreadable_runs_rollouts_are_not_read(tmp_path):
    run = _disk_run(tmp_path, "broken")
    run.append_rollouts(1, _groups(1))
    (run.path / "status.json").write_text("{not json")
    reader = _reader(tmp_path)[0]
    assert reader.rollout_steps("broken") == [] and reader.rollouts("broken", 1) == []
    assert reader.get_rollouts("broken", 0) == {"run": "broken", "steps": [], "groups": []}


def test_a_step_still_being_written_is_read_again_when_it_grows(tmp_path):
    """The latest step's groups are appended one line at a time while a run trains: a read between two lines
    sees part of the step, and the next read must see the rest, not the cached part."""
    run = _disk_run(tmp_path, "growing")
    run.append_rollouts(1, _groups(1, 1))
    reader = _reader(tmp_path)[0]
    assert len(reader.rollouts("growing", 1)) == 1
    run.append_rollouts(1, [{"step": 1, "group": 1, "prompt": "late", "completions": []}])
    assert [g["prompt"] for g in reader.rollouts("growing", 1)] == ["p1.0", "late"]


def test_two_runs_steps_of_the_same_number_are_cached_apart(tmp_path):
    a, b = _disk_run(tmp_path, "a"), _disk_run(tmp_path, "b")
    a.append_rollouts(1, [{"step": 1, "group": 0, "prompt": "from a", "completions": []}])
    b.append_rollouts(1, [{"step": 1, "group": 0, "prompt": "from b", "completions": []}])
    reader = _reader(tmp_path)[0]
    assert reader.rollouts("a", 1)[0]["prompt"] == "from a"
    assert reader.rollouts("b", 1)[0]["prompt"] == "from b"


def test_a_runs_rollout_index_is_built_once(tmp_path, monkeypatch):
    run = _disk_run(tmp_path, "disk")
    run.append_rollouts(1, _groups(1))
    built = []
    real = readers_module.RolloutIndex

    class Counted(real):
        def __init__(self, path):
            built.append(path)
            super().__init__(path)

    monkeypatch.setattr(readers_module, "RolloutIndex", Counted)
    reader = _reader(tmp_path)[0]
    for _ in range(4):
        assert reader.rollout_steps("disk") == [1] and len(reader.rollouts("disk", None)) == 2
    assert built == [run.path / "rollouts.jsonl"]


def test_a_run_in_training_lists_the_steps_it_holds_not_only_those_on_disk(tmp_path):
    reader, runner = _reader(tmp_path)
    job = _train(runner, "live", tmp_path)
    job._folder.append_rollouts(1, _groups(1, 1))
    job.state.rollout_steps = [1, 2]  # step 2 is in memory, not yet on disk
    job.state.rollouts = {2: [{"step": 2, "in": "memory"}]}
    assert reader.rollout_steps("live") == [1, 2]
    assert reader.get_rollouts("live", 0)["steps"] == [1, 2]


def test_a_run_in_training_whose_latest_step_is_not_in_memory_reads_the_latest_on_disk(tmp_path):
    reader, runner = _reader(tmp_path)
    job = _train(runner, "live", tmp_path)
    assert reader.rollouts("live", None) == []
    job.state.rollout_steps = [5]  # logged, but neither kept in memory nor on disk yet
    assert reader.rollouts("live", None) == [] and reader.rollouts("live", 5) == []
    for step in (1, 2, 3):
        job._folder.append_rollouts(step, _groups(step, 1))
    job.state.rollout_steps = [1, 2, 3]
    assert reader.rollouts("live", None) == _groups(3, 1)  # the latest on disk, not the second or the first
    assert reader.rollouts("live", 0) == _groups(3, 1)


@pytest.mark.parametrize("read", ["rollouts", "get_rollouts"])
def test_a_step_is_taken_from_minus_to_plus_a_billion(tmp_path, read):
    run = _disk_run(tmp_path, "disk")
    run.append_rollouts(1, _groups(1, 1))
    reader = _reader(tmp_path)[0]

    def groups(step):
        answer = getattr(reader, read)("disk", step)
        return answer["groups"] if read == "get_rollouts" else answer

    assert groups(-(10**9)) == _groups(1, 1)  # below 1: the latest
    assert groups(10**9) == []
    for step in (-(10**9) - 1, 10**9 + 1):
        with pytest.raises(InputError) as err:
            groups(step)
        assert str(err.value) == f"step must be between -1000000000 and 1000000000, not {step}"


def test_an_arena_without_settings_or_runs_reads_as_empty_ones(tmp_path):
    reader = _reader(tmp_path)[0]
    rows = [{"estimator": "rloo", "runs": 1}]
    _arena(tmp_path, "arena-20261201-090000", text=json.dumps({"rows": rows}))
    assert reader.arena("arena-20261201-090000") == {
        "name": "arena-20261201-090000",
        "markdown": inert(markdown_table(rows, "")),
        "runs": [],
    }


def test_a_changed_config_alone_is_read_again(tmp_path):
    from rloo_demo.store.jsonl import save_config

    run = _disk_run(tmp_path, "disk", max_steps=9)
    reader = _reader(tmp_path)[0]
    assert reader.view("disk").max_steps == 9
    save_config(RunConfig(output_dir=str(tmp_path), run_name="disk", max_steps=12), run.path / "config.yaml")
    assert reader.view("disk").max_steps == 12
    (run.path / "status.json").write_text("{not json")
    assert reader.view("disk").name == "disk"  # an unreadable run keeps its name


def test_an_unchanged_listing_is_answered_from_the_reader_without_a_summary_or_a_label_read(tmp_path, monkeypatch):
    _disk_run(tmp_path, "a", created=1.0)
    _disk_run(tmp_path, "b", created=2.0)
    reader = _reader(tmp_path)[0]
    notes = []
    real = readers_module.read_notes
    monkeypatch.setattr(readers_module, "read_notes", lambda run: notes.append(run.name) or real(run))
    first = reader.list_runs()
    assert notes == ["b", "a"]
    assert reader.list_runs() == first and reader.list_runs() == first
    assert notes == ["b", "a"]  # the whole answer came from the reader's cache
    write_notes(RunFolder(tmp_path / "a"), label="new")
    assert next(s for s in reader.list_runs() if s["name"] == "a")["label"] == "new"
    assert notes == ["b", "a", "b", "a"]
