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


def test_a_crashed_exports_leftover_is_replaced(tmp_path):
    run = _finished(tmp_path / "runs", "again")
    exports = tmp_path / "exports"
    folder = export_run(run, exports)[0].parent
    leftover = exports / f".{folder.name}.tmp"
    os.rename(folder, leftover)  # as if the export had died before its rename
    (leftover / "stale").write_text("x")
    again = export_run(run, exports)
    assert again[0].parent == folder and "stale" not in [p.name for p in again]
    assert not leftover.exists()


def test_a_prune_keeps_the_export_in_hand_and_the_newest_others(tmp_path):
    exports = tmp_path / "exports"
    for i, name in enumerate(["e", "d", "c", "b", "a", ".hidden"]):  # newest last: the names sort the other way
        (exports / name).mkdir(parents=True)
        os.utime(exports / name, (1000 + i, 1000 + i))
    (exports / "loose-file").write_text("not a folder")
    prune_exports(exports, keep=exports / "e", max_folders=3)  # the oldest kept: it is the one being served
    assert sorted(p.name for p in exports.iterdir()) == [".hidden", "a", "b", "e", "loose-file"]
    prune_exports(exports, keep=exports / "a", max_folders=1)
    assert sorted(p.name for p in exports.iterdir()) == [".hidden", "a", "loose-file"]


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


def test_an_export_prunes_the_folder_to_its_own_cap(tmp_path):
    exports = tmp_path / "exports"
    for i, name in enumerate(("old-1", "old-2")):
        (exports / name).mkdir(parents=True)
        os.utime(exports / name, (1000 + i, 1000 + i))
    run = _finished(tmp_path / "runs", "capped")
    folder = export_run(run, exports, max_folders=2)[0].parent
    assert sorted(p.name for p in exports.iterdir()) == sorted([folder.name, "old-2"])  # the newer other stays
    kept = export_run(_finished(tmp_path / "runs", "capped-2"), exports, max_folders=1)[0].parent
    assert [p.name for p in exports.iterdir()] == [kept.name]
