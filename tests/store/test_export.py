"""A run's downloads (store/export.py) and which process owns a run (store/process.py), against what the test
reads back itself: the zip's names and bytes, the copies byte for byte, which exports a prune keeps, the identity of
this process and of one that is gone."""

import os
import subprocess
import sys
import zipfile

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.store import process
from rloo_demo.store.export import export_run, prune_exports
from rloo_demo.store.folder import RunFolder


def _finished(root, name, model_files=None):
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name))
    run.set_status("finished")
    for rel, data in (model_files or {}).items():
        path = run.path / "model" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return run


def test_the_model_zip_holds_every_file_under_model_with_its_bytes(tmp_path):
    files = {"config.json": b"{}", "model.safetensors": os.urandom(3000), "sub/tokenizer.json": b'{"v": 1}'}
    run = _finished(tmp_path / "runs", "zipped", files)
    (run.path / "rollouts.jsonl").write_bytes(b'{"step": 3}\n')
    out = {p.name: p for p in export_run(run, tmp_path / "exports")}
    assert sorted(out) == ["zipped-config.yaml", "zipped-metrics.csv", "zipped-model.zip", "zipped-rollouts.jsonl"]
    with zipfile.ZipFile(out["zipped-model.zip"]) as z:
        assert {i.filename: z.read(i) for i in z.infolist()} == {f"model/{k}": v for k, v in files.items()}
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    assert out["zipped-config.yaml"].read_bytes() == (run.path / "config.yaml").read_bytes()
    assert out["zipped-rollouts.jsonl"].read_bytes() == b'{"step": 3}\n'


def test_a_model_folder_without_its_config_is_no_model_and_a_training_run_has_no_export(tmp_path):
    run = _finished(tmp_path / "runs", "half", {"model.safetensors": b"x"})
    assert [p.name for p in export_run(run, tmp_path / "exports")] == ["half-config.yaml", "half-metrics.csv"]
    training = RunFolder.create(RunConfig(output_dir=str(tmp_path / "runs"), run_name="live"))
    training.set_status("running")
    assert export_run(training, tmp_path / "exports2") == [] and not (tmp_path / "exports2").exists()


def test_a_crashed_exports_leftover_is_removed_by_the_next_build(tmp_path):
    run = _finished(tmp_path / "runs", "again")
    exports = tmp_path / "exports"
    folder = export_run(run, exports)[0].parent
    leftover = exports / f".{folder.name}-x1y2"
    os.rename(folder, leftover)  # as if the export had died before its rename
    (leftover / "stale").write_text("x")
    again = export_run(run, exports)
    assert again[0].parent == folder and "stale" not in [p.name for p in again]
    assert not leftover.exists()


def test_a_prune_removes_what_no_run_has_and_keeps_every_other_runs_export(tmp_path):
    """Exports of runs still on disk are kept however many (each built once per run and content); another content
    of the run just built, a deleted run's and a dot folder go; a loose file is let be."""
    runs, exports = tmp_path / "runs", tmp_path / "exports"
    for name in ("a", "b", "c"):
        _finished(runs, name)
    for name in ("a-0123456789", "a-abcdefabcd", "b-0123456789", "c-0123456789", "gone-0123456789", ".a-tmp"):
        (exports / name).mkdir(parents=True)
    (exports / "loose-file").write_text("not a folder")
    removed = prune_exports(exports, runs, keep=exports / "a-abcdefabcd")
    assert sorted(removed) == [".a-tmp", "a-0123456789", "gone-0123456789"]
    assert sorted(p.name for p in exports.iterdir()) == ["a-abcdefabcd", "b-0123456789", "c-0123456789", "loose-file"]


def test_this_process_is_alive_and_a_finished_one_or_another_boot_is_not():
    me = process.process_identity()
    assert me["pid"] == os.getpid() and me["boot_time"] == round(__import__("psutil").boot_time(), 0)
    assert process.is_alive(me)
    assert not process.is_alive({**me, "boot_time": me["boot_time"] + 5})  # the same pid after a restart
    assert not process.is_alive({**me, "boot_time": me["boot_time"] + 2})
    assert process.is_alive({**me, "boot_time": me["boot_time"] + 1})  # boot times rounded: within a second
    assert not process.is_alive({**me, "pid_created": me["pid_created"] + 0.02})  # a pid reused by a later process
    assert process.is_alive({**me, "pid_created": me["pid_created"] + 0.005})  # within the clock tick
    assert process.is_alive({"pid": os.getpid()})  # no creation time recorded: the pid is all there is
    init = process.process_identity(1)  # another live process, checked by its own creation time, not this one's
    assert init["pid_created"] != me["pid_created"] and process.is_alive(init) and process.is_alive({"pid": 1})
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = process.process_identity(child.pid)
    child.wait()
    assert isinstance(identity["pid_created"], float)
    assert not process.is_alive(identity) and not process.is_alive({"pid": child.pid})
    assert process.process_identity(child.pid)["pid_created"] is None


@pytest.mark.parametrize("pid", [None, 0, -3, True, "12", 2.0])
def test_a_status_without_a_usable_pid_is_not_alive(pid):
    assert not process.is_alive({"pid": pid, "boot_time": None, "pid_created": None})


def test_an_export_is_built_once_per_run_and_content_however_many_runs_are_picked(tmp_path, monkeypatch):
    """Six runs' details picked in turn, then the first again: six builds, not seven (kept four in all, the
    seventh re-zipped the first run's model); a changed run is built again and its old export goes."""
    from rloo_demo.store import export as export_module

    builds, build = [], export_module._build
    monkeypatch.setattr(export_module, "_build", lambda run, into: builds.append(run.name) or build(run, into))
    exports = tmp_path / "exports"
    runs = [_finished(tmp_path / "runs", f"r{i}", {"config.json": b"{}"}) for i in range(6)]
    first = [export_run(run, exports) for run in runs]
    assert export_run(runs[0], exports) == first[0] and builds == [f"r{i}" for i in range(6)]
    assert len([p for p in exports.iterdir() if p.is_dir()]) == 6
    runs[0].append_metrics({"step": 1, "reward": 0.5})
    changed = export_run(runs[0], exports)
    assert builds[-1] == "r0" and changed[0].parent != first[0][0].parent and not first[0][0].parent.exists()


def test_two_visitors_exporting_one_run_at_once_get_the_same_files(tmp_path, monkeypatch):
    """Both ask while the first build is still running (its zip held by the test): the second waits for it, and
    both are answered with the one export; no shared temporary folder, no FileNotFoundError."""
    import threading

    from rloo_demo.store import export as export_module

    run = _finished(tmp_path / "runs", "shared", {"config.json": b"{}", "model.safetensors": os.urandom(2000)})
    exports, started, release, builds = tmp_path / "exports", threading.Event(), threading.Event(), []
    build = export_module._build

    def held_build(r, into):
        builds.append(into)
        started.set()
        release.wait(30)
        build(r, into)

    class Recorded:
        """The build lock, saying each time someone asks for it."""

        def __init__(self):
            self.lock, self.asked = threading.Lock(), threading.Semaphore(0)

        def __enter__(self):
            self.asked.release()
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    monkeypatch.setattr(export_module, "_build", held_build)
    monkeypatch.setattr(export_module, "_BUILDING", Recorded())
    answers, errors = [], []

    def ask():
        try:
            answers.append(export_run(run, exports))
        except Exception as exc:  # noqa: BLE001 (what the visitor would have seen)
            errors.append(exc)

    first = threading.Thread(target=ask)
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=ask)
    second.start()
    lock = export_module._BUILDING
    assert lock.asked.acquire(timeout=30) and lock.asked.acquire(timeout=30)  # both asked: the second waits now
    release.set()
    first.join(30)
    second.join(30)
    assert errors == [] and len(answers) == 2 and answers[0] == answers[1] and len(builds) == 1
    assert [p.name for p in answers[0]][-1] == "shared-model.zip" and all(p.is_file() for p in answers[0])
