"""A run's summary, status and place in the list (store/folder.py, store/listing.py) against dicts written out
here: every key of a summary, a status that is missing, corrupt or invalid, the caches bounded and refreshed by
the files' stamps, the list ordered by creation time, and a run left 'running' by a dead process marked."""

import json
import os

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.store import folder as folder_module
from rloo_demo.store import listing
from rloo_demo.store.folder import RunFolder


def _run(root, name, **status):
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name))
    if status:
        run.set_status(**status)
    return run


def test_a_summary_holds_every_figure_of_the_run(tmp_path):
    run = _run(tmp_path, "full", status="stopped", reason="budget spent")
    run.append_metrics({"step": 1, "reward": -0.25, "kl": 0.0, "max_steps": 40})
    run.append_metrics({"step": 7, "reward": 0.625, "kl": 0.125, "max_steps": 40})
    (run.path / "model").mkdir()
    (run.path / "model" / "config.json").write_text("{}")
    created = run.status()["created"]
    assert run.summary() == {
        "name": "full",
        "status": "stopped",
        "error": None,
        "reason": "budget spent",
        "steps": 7,
        "max_steps": 40,
        "reward_first": -0.25,
        "reward_last": 0.625,
        "kl_last": 0.125,
        "created": created,
        "has_model": True,
        "skipped_lines": 0,
    }
    bare = _run(tmp_path, "bare", status="failed", error="boom")
    bare.append_metrics({"step": True, "reward": "x", "kl": None})  # not numbers: none of them counts
    got = bare.summary()
    assert (got["steps"], got["reward_first"], got["kl_last"], got["max_steps"]) == (0, None, None, None)
    assert got["error"] == "boom" and got["has_model"] is False and got["status"] == "failed"


def test_a_summary_follows_its_files_and_the_cache_forgets_the_oldest(tmp_path, monkeypatch):
    monkeypatch.setattr(folder_module, "_SUMMARIES", folder_module.OrderedDict())
    monkeypatch.setattr(folder_module, "MAX_CACHED_SUMMARIES", 2)
    a, b, c = (_run(tmp_path, n, status="finished") for n in "abc")
    assert a.summary()["steps"] == 0
    a.append_metrics({"step": 3, "reward": 0.5})
    assert a.summary()["steps"] == 3  # a new stamp: read again
    b.summary()
    c.summary()
    assert list(folder_module._SUMMARIES) == [str(b.path), str(c.path)]  # the least recently used went
    b.summary()  # a hit moves it to the end
    assert list(folder_module._SUMMARIES) == [str(c.path), str(b.path)]
    copy = b.summary()
    copy["steps"] = 99
    assert b.summary()["steps"] == 0  # a caller's change does not reach the cache


@pytest.mark.parametrize(
    "body, reason",
    [
        (None, "status.json is missing"),
        (b"\xff", "status.json is corrupt (UnicodeDecodeError)"),
        (b"{oops", "status.json is corrupt (JSONDecodeError)"),
        (b'{"status": "sleeping"}', "status.json has no valid status"),
        (b"[1]", "status.json has no valid status"),
    ],
    ids=["missing", "bytes", "syntax", "unknown-status", "not-a-dict"],
)
def test_a_status_that_cannot_be_read_reads_as_failed_and_says_why(tmp_path, body, reason):
    run = _run(tmp_path, "r")
    path = run.path / "status.json"
    path.unlink()
    if body is not None:
        path.write_bytes(body)
    assert run.status() == {"status": "failed", "error": reason, "unreadable": reason}
    assert run.unreadable() == reason
    summary = run.summary()
    assert summary["status"] == f"unreadable: {reason}" and summary["steps"] == 0 and "skipped_lines" not in summary


def test_an_unreadable_config_is_named(tmp_path):
    run = _run(tmp_path, "cfg", status="finished")
    assert run.unreadable() is None
    (run.path / "config.yaml").write_bytes(b"\xff\xfe")
    assert run.unreadable().startswith("config.yaml: ")
    (run.path / "config.yaml").unlink()
    (run.path / "config.yaml").mkdir()  # a folder where the file should be
    assert run.unreadable() == f"config.yaml: config: config file '{run.path / 'config.yaml'}' does not exist"


@pytest.mark.parametrize(
    "exc, shown",
    [(OSError(5, "Input/output error"), "Input/output error"), (OSError(), "OSError")],
    ids=["eio", "bare"],
)
def test_a_config_that_fails_to_read_says_how(tmp_path, monkeypatch, exc, shown):
    run = _run(tmp_path, "io", status="finished")

    def fail(path):
        raise exc

    monkeypatch.setattr(RunConfig, "load", staticmethod(fail))
    assert run.unreadable() == f"config.yaml: {shown}"


def test_runs_are_listed_newest_first_by_their_recorded_creation(tmp_path, monkeypatch):
    monkeypatch.setattr(listing, "_CREATED", listing.OrderedDict())
    runs = {name: _run(tmp_path, name, status="finished") for name in ("old", "new", "mid")}
    for name, created in (("old", 100.0), ("new", 300.0), ("mid", 200.0)):
        data = json.loads((runs[name].path / "status.json").read_text())
        (runs[name].path / "status.json").write_text(json.dumps({**data, "created": created}))
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "not-a-run").mkdir()
    assert [r.name for r in listing.list_runs(tmp_path)] == ["new", "mid", "old"]
    # a run without a recorded time: its folder's time (here the newest of all)
    data = json.loads((runs["old"].path / "status.json").read_text())
    del data["created"]
    (runs["old"].path / "status.json").write_text(json.dumps(data))
    os.utime(runs["old"].path, (500.0, 500.0))
    assert [r.name for r in listing.list_runs(tmp_path)] == ["old", "new", "mid"]
    assert listing._created(runs["new"]) == 300.0 and listing.list_runs(tmp_path / "nowhere") == []


def test_the_creation_cache_is_keyed_by_the_status_stamp_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(listing, "_CREATED", listing.OrderedDict())
    monkeypatch.setattr(listing, "MAX_CACHED", 2)
    a, b, c = (_run(tmp_path, n, status="finished") for n in "abc")
    first = listing._created(a)
    assert listing._CREATED[str(a.path)][1] == first
    data = json.loads((a.path / "status.json").read_text())
    (a.path / "status.json").write_text(json.dumps({**data, "created": 12345.5}))
    assert listing._created(a) == 12345.5  # a new status: read again
    listing._created(b)
    listing._created(c)
    assert list(listing._CREATED) == [str(b.path), str(c.path)]
    (b.path / "status.json").write_text(json.dumps({"status": "finished", "created": True}))
    assert listing._created(b) == b.path.stat().st_mtime  # a bool is no time


def test_a_run_left_running_by_a_dead_process_is_marked_and_the_others_are_not(tmp_path):
    gone = {"pid": 2**22 + 17, "boot_time": None, "pid_created": 1.0}  # no such process
    dead = [_run(tmp_path, f"dead{i}", status="running", **gone) for i in range(2)]
    live = _run(tmp_path, "live", status="running")  # this process: alive
    _run(tmp_path, "done", status="finished", **gone)
    marked = listing.mark_interrupted(tmp_path)
    assert sorted(marked) == ["dead0", "dead1"]  # both, not only the first
    for run in dead:
        st = run.status()
        assert st["status"] == "failed"
        assert st["error"] == "interrupted: the process that ran it exited before it finished"
    assert live.status()["status"] == "running"
    (live.path / "status.json").write_text(json.dumps({"status": "running", "unreadable": "x", **gone}))
    assert listing.mark_interrupted(tmp_path) == []  # a status it cannot trust is not rewritten


def test_a_new_run_records_its_process_and_keeps_its_creation_through_later_statuses(tmp_path, monkeypatch):
    import time

    from rloo_demo.store.process import process_identity

    clock = iter([1000.0, 2000.0, 3000.0])
    monkeypatch.setattr(time, "time", lambda: next(clock))
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path / "deep" / "runs"), run_name="p"), reason="asked")
    first = run.status()
    assert {k: first[k] for k in ("status", "error", "created", "updated", "reason")} == {
        "status": "running",
        "error": None,
        "created": 1000.0,
        "updated": 1000.0,
        "reason": "asked",
    }
    assert {k: first[k] for k in ("pid", "boot_time", "pid_created")} == process_identity()
    run.set_status("finished")
    later = run.status()
    assert (later["created"], later["updated"], later["status"], later["pid"]) == (
        1000.0,
        2000.0,
        "finished",
        first["pid"],
    )
    (run.path / "status.json").write_text("{broken")  # a corrupt status: the next write starts it again
    run.set_status("failed", error="x")
    fixed = json.loads((run.path / "status.json").read_text())
    assert "unreadable" not in fixed and fixed["status"] == "failed" and fixed["updated"] == 3000.0
    assert (run.path / "status.json").read_text().startswith('{\n  "')  # indented by two


def test_a_taken_name_gets_the_next_free_suffix_and_a_bad_name_is_refused(tmp_path):
    from rloo_demo.errors import UserError

    names = [RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="same")).name for _ in range(3)]
    assert names == ["same", "same-2", "same-3"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".creating-")]
    with pytest.raises(UserError, match=r"^run name '\.\./x' is not allowed$"):
        RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="../x"))


def test_an_evaluation_that_is_not_a_dict_reads_as_none(tmp_path):
    run = _run(tmp_path, "e", status="finished")
    (run.path / "evaluation.json").write_text("[1, 2]")
    assert run.evaluation() is None
    (run.path / "evaluation.json").write_bytes(b"\xff")
    assert run.evaluation() is None
