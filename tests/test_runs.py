"""The run folder: crash-safe writes, readers that never break, the rollout index, the process identity that tells
a restarted server from the one that wrote a status, and pruning. Each test injects the fault it guards against.

``python -m pytest tests/test_runs.py`` (a few seconds).
"""

import errno
import json
import os

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.errors import DiskFull
from rloo_demo.store import folder as runs_module
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.jsonl import RolloutIndex, read_jsonl, read_jsonl_counted
from rloo_demo.store.listing import list_runs, mark_interrupted, prune_runs
from rloo_demo.store.process import is_alive, process_identity


def make_run(tmp_path, name="r", **status):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=name))
    if status:
        run.set_status(**status)
    return run


# ----------------------------------------------------------------------------- writing


def test_create_never_overwrites_an_existing_run(tmp_path):
    first = make_run(tmp_path, "same", status="finished")
    first.append_metrics({"step": 1, "reward": 0.5})
    second = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="same", max_steps=9))
    assert second.name == "same-2"
    assert first.status()["status"] == "finished" and first.metrics() == [{"step": 1, "reward": 0.5}]
    assert first.config().max_steps == RunConfig().max_steps and second.config().max_steps == 9


def test_create_is_all_or_nothing_on_a_full_disk(tmp_path, monkeypatch):
    def full(self, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunConfig, "to_text", full)  # config.yaml is the first file written
    with pytest.raises(DiskFull, match="disk is full"):
        RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="x"))
    assert list(tmp_path.iterdir()) == []  # no half-made folder, no hidden leftovers


def test_status_survives_a_crash_between_write_and_rename(tmp_path, monkeypatch):
    run = make_run(tmp_path, status="running", step=3)

    def crash(src, dst):
        raise OSError("killed between the write and the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        run.set_status("finished", step=10)
    monkeypatch.undo()
    st = run.status()
    assert st["status"] == "running" and st["step"] == 3  # the old status, whole


def test_model_appears_only_when_complete(tmp_path):
    from rloo_demo.models.policy import load_policy

    run = make_run(tmp_path)
    model, tok = load_policy("embedded:tiny-imdb-gpt2")

    class BrokenTokenizer:
        def save_pretrained(self, folder):
            raise OSError("disk went away while saving the tokenizer")

    with pytest.raises(OSError):
        run.save_model(model, BrokenTokenizer())
    assert run.model_dir is None and not (run.path / "model").exists()  # the weights alone do not make a model
    assert (run.path / ".model.tmp" / "config.json").is_file()  # they were written, to the temporary folder
    final = run.save_model(model, tok)
    assert final == run.model_dir and not (run.path / ".model.tmp").exists()
    # a second save replaces the model whole; a failure leaves the first one in place
    with pytest.raises(OSError):
        run.save_model(model, BrokenTokenizer())
    assert (run.model_dir / "tokenizer.json").is_file()


# ----------------------------------------------------------------------------- reading


def test_jsonl_reader_skips_and_counts_bad_lines_and_waits_for_a_torn_one(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\nnot json\n\xff\xfe\n[1, 2]\n{"step": 2}\n{"step": 3')
    records, skipped, end = read_jsonl_counted(path)
    assert records == [{"step": 1}, {"step": 2}]  # lines after a bad one are still read
    assert skipped == 3  # not JSON, not UTF-8, not an object; the torn last line is not counted
    assert end == len(b'{"step": 1}\nnot json\n\xff\xfe\n[1, 2]\n{"step": 2}\n')
    assert read_jsonl(path) == records
    with open(path, "ab") as f:
        f.write(b"}\n")
    assert read_jsonl_counted(path, end)[0] == [{"step": 3}]  # completed later, read from where we left off


@pytest.mark.parametrize(
    ("filename", "content", "reason"),
    [
        ("status.json", b"{not json", "status.json is corrupt"),
        ("status.json", b'{"status": "exploded"}', "no valid status"),
        ("status.json", b"\xff\xfe{}", "status.json is corrupt"),
        ("config.yaml", b"\xff\xfe\x00\x01", "config.yaml"),
        ("config.yaml", b"num_generations: 4\nsetting_from_a_newer_version: 1\n", "unknown setting"),
        ("config.yaml", b"max_steps: [1,\n", "not valid YAML"),
    ],
    ids=["bad-json", "bad-status", "not-utf8-status", "not-utf8-config", "unknown-setting", "bad-yaml"],  # plain
    # ids: one with a backslash (the bytes' repr) is not found again when mutmut reselects the test
)
def test_an_unreadable_run_is_listed_as_such_and_breaks_nothing(tmp_path, filename, content, reason):
    good = make_run(tmp_path, "good", status="finished")
    bad = make_run(tmp_path, "bad", status="finished")
    (bad.path / filename).write_bytes(content)
    runs = list_runs(tmp_path)
    assert {r.name for r in runs} == {"good", "bad"}
    summaries = {r.name: r.summary() for r in runs}
    assert summaries["good"]["status"] == "finished"
    assert summaries["bad"]["status"].startswith("unreadable: ") and reason in summaries["bad"]["status"]
    assert bad.unreadable() and good.unreadable() is None


def test_summary_counts_skipped_metric_lines(tmp_path):
    run = make_run(tmp_path, status="finished")
    with open(run.path / "metrics.jsonl", "wb") as f:
        f.write(b'{"step": 1, "reward": 0.1}\n{oops\n{"step": 2, "reward": 0.3, "kl": 0.02}\n')
    s = run.summary()
    assert (s["steps"], s["reward_first"], s["reward_last"], s["kl_last"], s["skipped_lines"]) == (2, 0.1, 0.3, 0.02, 1)


def test_hidden_folders_are_not_runs(tmp_path):
    make_run(tmp_path, "r")
    (tmp_path / ".creating-abc").mkdir()
    (tmp_path / ".creating-abc" / "config.yaml").write_text("max_steps: 1\n")
    assert [r.name for r in list_runs(tmp_path)] == ["r"]


# ----------------------------------------------------------------------------- the rollout index


def groups(step, n=2):
    return [{"step": step, "group": g, "prompt": f"p{step}-{g}", "completions": []} for g in range(n)]


def test_rollout_index_reads_one_step_without_parsing_the_rest(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    for step in range(1, 201):
        run.append_rollouts(step, groups(step))
    index = RolloutIndex(run.path / "rollouts.jsonl")
    assert index.steps() == list(range(1, 201))
    parsed = []
    real = json.loads
    monkeypatch.setattr(runs_module.json, "loads", lambda s, *a, **k: parsed.append(1) or real(s, *a, **k))
    assert [g["prompt"] for g in index.read(117)] == ["p117-0", "p117-1"]
    assert len(parsed) == 2  # the two lines of step 117, not 400
    monkeypatch.undo()
    run.append_rollouts(201, groups(201, 3))
    assert index.steps()[-1] == 201 and len(index.read(201)) == 3  # extended incrementally
    assert index.read(999) == []


def test_rollout_index_handles_torn_corrupt_and_replaced_files(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"step": 1, "group": 0}\n{"step": 2, "gro')
    index = RolloutIndex(path)
    assert index.steps() == [1]  # the torn line waits
    with open(path, "ab") as f:
        f.write(b'up": 0}\n{"step": 3, broken\n')
    assert index.steps() == [1, 2] and index.skipped == 1
    path.write_bytes(b'{"step": 7, "group": 0}\n')  # replaced by a shorter file: the index starts over
    assert index.steps() == [7] and index.read(7) == [{"step": 7, "group": 0}]


# ----------------------------------------------------------------------------- who trains a run


def test_process_identity_tells_a_restarted_pid_from_the_live_one(tmp_path):
    me = process_identity()
    assert me["pid"] == os.getpid() and is_alive(me)
    assert me["pid_created"] is not None and me["boot_time"] is not None
    # the same pid, started at another time: a container's PID 1 after a restart
    assert not is_alive(me | {"pid_created": me["pid_created"] + 1})
    assert not is_alive(me | {"pid_created": me["pid_created"] - 0.05})
    assert not is_alive(me | {"boot_time": me["boot_time"] - 3600})  # another boot
    assert is_alive(me | {"pid_created": me["pid_created"] + 0.005})  # within the clock's resolution
    assert not is_alive({"pid": 2**22 + 12345})
    assert not is_alive({"pid": None}) and not is_alive({})


def test_mark_interrupted_after_a_restart_with_the_same_pid(tmp_path):
    me = process_identity()
    alive = make_run(tmp_path, "alive", status="running", **me)
    reborn = make_run(tmp_path, "reborn", status="running", **(me | {"pid_created": me["pid_created"] - 1}))
    done = make_run(tmp_path, "done", status="finished")
    assert mark_interrupted(tmp_path) == ["reborn"]
    assert alive.status()["status"] == "running" and done.status()["status"] == "finished"
    st = reborn.status()
    assert st["status"] == "failed" and "interrupted" in st["error"]


# ----------------------------------------------------------------------------- retention


def test_prune_keeps_the_newest_and_never_a_running_run(tmp_path):
    me = process_identity()
    names = []
    for i in range(6):
        run = make_run(tmp_path, f"r{i}", status="finished", created=1000.0 + i)
        names.append(run.name)
    oldest_running = make_run(tmp_path, "old-live", status="running", created=1.0, **me)
    deleted = prune_runs(tmp_path, keep=3, max_mb=None)
    assert sorted(deleted) == ["r0", "r1", "r2", "r3"]  # 7 runs, keep 3: the running one counts but stays
    assert sorted(r.name for r in list_runs(tmp_path)) == ["old-live", "r4", "r5"]
    assert oldest_running.path.is_dir()
    assert prune_runs(tmp_path, keep=None, max_mb=None) == []


def test_prune_by_size_and_protected_names(tmp_path):
    for i in range(3):
        run = make_run(tmp_path, f"r{i}", status="finished", created=1000.0 + i)
        (run.path / "blob").write_bytes(b"x" * 400_000)
    assert prune_runs(tmp_path, keep=None, max_mb=1.0, protect={"r0"}) == ["r1"]  # r0 is protected
    assert sorted(r.name for r in list_runs(tmp_path)) == ["r0", "r2"]


def test_the_rollout_index_by_hand(tmp_path):
    """Which lines the index finds, by a count the test makes itself: "step" must be among a line's first 64 bytes
    and an int; other lines are skipped (and counted); an empty line is no record; a replaced file is read anew."""
    import os

    path = tmp_path / "rollouts.jsonl"
    late = b'{"pad": "' + b"x" * 44 + b'", "step": 4}'  # its step's digit is byte 64: not among the first 64
    assert late.index(b"4") == 64
    lines = [
        b"",
        b'{"step": 1, "g": 0}',
        b'[{"step": 2}]',  # a list, not a group
        b'{"step": 1, "step": "x"}',  # JSON keeps the last: a text
        b'{"step": 3, "g": 1}',
        late,
        b'{"step": 1, "g": 2}',
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    index = RolloutIndex(path)
    assert index.steps() == [1, 3]
    assert [g["g"] for g in index.read(1)] == [0, 2] and index.read(3) == [{"step": 3, "g": 1}]
    assert index.skipped == 3 and index.read(4) == []
    fresh = tmp_path / "new.jsonl"  # the file replaced by a longer one (another inode)
    fresh.write_bytes(b'{"step": 7, "g": 9}\n' * 2 + b"\n".join(lines) + b"\n")
    os.replace(fresh, path)
    assert index.steps() == [1, 3, 7] and index.read(7) == [{"step": 7, "g": 9}] * 2
    gone = RolloutIndex(tmp_path / "missing.jsonl")
    assert gone.steps() == [] and gone.read(1) == [] and gone.skipped == 0


def test_an_export_is_its_runs_files_made_again_when_one_of_them_changed(tmp_path):
    from rloo_demo.store.export import export_run

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path / "runs"), run_name="ex"))
    run.set_status("finished")
    exports = tmp_path / "deep" / "exports"  # not there yet: made with its parents
    first = export_run(run, exports)
    assert [p.name for p in first] == ["ex-config.yaml", "ex-metrics.csv"]
    assert first[1].read_bytes() == b"step\r\n"  # no records: a header alone
    assert export_run(run, exports) == first  # nothing changed: the same export

    def touch(name, ns):  # a file's change as its time stamp says it
        path = run.path / name
        if not path.exists():
            path.write_text('{"step": 1}\n')
        os.utime(path, ns=(ns, ns))

    seen = {first[0].parent}
    for name, ns in (("metrics.jsonl", 10**18), ("status.json", 2 * 10**18), ("rollouts.jsonl", 3 * 10**18)):
        if name == "metrics.jsonl":
            run.append_metrics({"step": 1, "reward": 0.5, "b": 2})
            run.append_metrics({"step": 2, "reward": 0.25})
        touch(name, ns)
        folder = export_run(run, exports)[0].parent
        assert folder not in seen, f"a change of {name} made no new export"
        seen.add(folder)
    files = {p.name: p for p in export_run(run, exports)}
    assert files["ex-metrics.csv"].read_bytes() == b"step,b,reward\r\n1,2,0.5\r\n2,,0.25\r\n"  # step first, then a-z
    assert files["ex-rollouts.jsonl"].read_text() == '{"step": 1}\n'


def test_prune_by_size_stops_once_the_rest_fit_exactly(tmp_path):
    def megabyte_runs(root, extra=0):
        root.mkdir()
        for i in range(4):
            run = RunFolder.create(RunConfig(output_dir=str(root), run_name=f"s{i}"))
            run.set_status("finished")
            pad = 1_000_000 - sum(f.stat().st_size for f in run.path.rglob("*") if f.is_file())
            (run.path / "weights.bin").write_bytes(b"0" * (pad + (extra if i == 3 else 0)))  # each 1 MB
        return root

    assert prune_runs(megabyte_runs(tmp_path / "a"), keep=None, max_mb=3.0) == ["s0"]  # 3 MB left: fits exactly
    assert prune_runs(megabyte_runs(tmp_path / "b"), keep=None, max_mb=2.0) == ["s0", "s1"]
    assert prune_runs(megabyte_runs(tmp_path / "c", extra=1), keep=None, max_mb=3.0) == ["s0", "s1"]  # a byte over
