"""Copies of ended runs on a sync target (``rloo_demo.store.sync``), with a real folder as the target: copied
whole, the marker last, copied again when a note changes, restored byte for byte into an empty runs folder, and a
copy cut off before its marker restored as interrupted. The bucket target's calls are checked against
huggingface_hub's own signatures; its round trip against a real bucket skips offline (it has not run here).

``python -m pytest tests/store/test_sync.py`` (a few seconds).
"""

import hashlib
import inspect
import json
import os
import shutil
from pathlib import Path

import pytest
from factories import finished_run, written_run

from rloo_demo.config import RunConfig
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.labels import read_notes, write_notes
from rloo_demo.store.listing import list_runs
from rloo_demo.store.sync import (
    MARKER,
    BucketTarget,
    DirectoryTarget,
    RunSync,
    open_target,
    pull_run,
    push_run,
)


def hashes(folder: Path) -> dict[str, str]:
    """Every visible file of a folder and its sha256, computed here with hashlib (not the module's helper)."""
    out = {}
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            out[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


class Recording(DirectoryTarget):
    """A real folder target that also remembers the order of its writes, and can be cut off after ``fail_after``
    writes (a crash mid-copy: the write in flight raises, nothing after it happens)."""

    def __init__(self, root, fail_after=None):
        super().__init__(Path(root))
        self.puts: list[tuple[str, str]] = []
        self.fail_after = fail_after

    def put(self, name, rel, source):
        if self.fail_after is not None and len(self.puts) >= self.fail_after:
            raise OSError("the copy was cut off")
        self.puts.append((name, rel))
        super().put(name, rel, source)


def three_runs(root: Path) -> list[RunFolder]:
    """A finished run with a model, one with metrics only, and a stopped one with a rollout file."""
    runs = [finished_run(root, "with-model"), written_run(root, [{"step": 1, "reward": 0.5}])]
    stopped = RunFolder.create(RunConfig(output_dir=str(root), run_name="stopped"))
    stopped.append_rollouts(1, [{"step": 1, "prompt": "p", "completions": ["a", "b"]}])
    stopped.set_status("stopped", reason="by its starter")
    return [*runs, stopped]


def test_ended_runs_are_restored_byte_for_byte_into_an_empty_runs_folder(tmp_path):
    here, target, fresh = tmp_path / "here", tmp_path / "target", tmp_path / "fresh"
    runs = three_runs(here)
    training = RunFolder.create(RunConfig(output_dir=str(here), run_name="training"))  # status "running"
    sync = RunSync(DirectoryTarget(target))
    assert sorted(sync.push_ended(here)) == ["ended", "stopped", "with-model"]
    assert not (target / training.name).exists()  # a run in training is never copied
    assert sync.push_ended(here) == []  # nothing changed: nothing written again

    restored = RunSync(DirectoryTarget(target)).restore(fresh)
    assert sorted(restored) == ["ended", "stopped", "with-model"]
    for run in runs:
        assert hashes(fresh / run.name) == hashes(run.path) and len(hashes(run.path)) >= 3
    assert len(hashes(fresh / "with-model")) > 6  # the model's files came too
    listed = {r.name: r.status() for r in list_runs(fresh)}
    assert listed["with-model"]["status"] == "finished" and listed["stopped"]["status"] == "stopped"
    # The files keep their times, so the restored runs are not copied back
    assert RunSync(DirectoryTarget(target)).push_ended(fresh) == []


def test_the_marker_is_written_last_and_the_run_files_first(tmp_path):
    run = finished_run(tmp_path / "here", "one")
    target = Recording(tmp_path / "target")
    push_run(target, run)
    written = [rel for _, rel in target.puts]
    assert written[:2] == ["config.yaml", "status.json"] and written[-1] == MARKER
    assert sorted(written[:-1]) == sorted(hashes(run.path))  # every file once, then the marker
    marker = json.loads((tmp_path / "target" / "one" / MARKER).read_text())
    assert marker["files"]["config.yaml"][2] == hashlib.sha256((run.path / "config.yaml").read_bytes()).hexdigest()


@pytest.mark.parametrize(("cut", "before"), [(1, None), (4, "finished")], ids=["after-the-config", "mid-model"])
def test_a_copy_cut_off_before_its_marker_is_restored_as_interrupted(tmp_path, cut, before):
    here, fresh = tmp_path / "here", tmp_path / "fresh"
    run = finished_run(here, "cut")
    write_notes(run, label="mine", note="kept")
    with pytest.raises(OSError):
        push_run(Recording(tmp_path / "target", fail_after=cut), run)
    assert not (tmp_path / "target" / "cut" / MARKER).exists()

    assert RunSync(DirectoryTarget(tmp_path / "target")).restore(fresh) == ["cut"]
    restored = RunFolder(fresh / "cut")
    status = restored.status()
    assert status["status"] == "failed" and status["error"].startswith("interrupted")
    assert status["status_before"] == before  # what the copied status said, if it was copied
    summary = list_runs(fresh)[0].summary()  # the list shows it, with that status
    assert summary["status"] == "failed" and summary["name"] == "cut"


def test_a_copy_without_the_marker_and_a_torn_file_read_as_interrupted_and_break_no_listing(tmp_path):
    here, target, fresh = tmp_path / "here", tmp_path / "target", tmp_path / "fresh"
    whole, copied, torn = (finished_run(here, n) for n in ("whole", "copied", "torn"))
    RunSync(DirectoryTarget(target)).push_ended(here)
    # "copied": its files on the target as a plain copy, no marker (a copy cut off before its last write)
    (target / "copied" / MARKER).unlink()
    # "torn": the marker is there but a weights file lost its tail (a mount's upload cut off at close)
    weights = target / "torn" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    # a folder with no config.yaml at all, and one whose name is no run name: left on the target, not restored
    (target / "no-config").mkdir()
    (target / "no-config" / "status.json").write_text('{"status": "finished"}')
    (target / "bad name!").mkdir()

    assert sorted(RunSync(DirectoryTarget(target)).restore(fresh)) == ["copied", "torn", "whole"]
    statuses = {r.name: r.summary()["status"] for r in list_runs(fresh)}
    assert statuses == {"whole": "finished", "copied": "failed", "torn": "failed"}
    assert hashes(fresh / "whole") == hashes(whole.path)
    assert hashes(fresh / "copied")["config.yaml"] == hashes(copied.path)["config.yaml"]
    assert RunFolder(fresh / "torn").status()["error"].startswith("interrupted")
    assert not (fresh / "no-config").exists() and (target / "no-config").exists()


def test_a_note_edited_after_the_end_is_copied_again_and_only_what_changed(tmp_path):
    here, fresh = tmp_path / "here", tmp_path / "fresh"
    run = finished_run(here, "noted")
    target = Recording(tmp_path / "target")
    sync = RunSync(target)
    assert sync.push_ended(here) == ["noted"]
    target.puts.clear()
    write_notes(run, label="best so far", note="beta 0.05 held the KL down")
    assert sync.push_ended(here) == ["noted"]
    assert [rel for _, rel in target.puts] == ["notes.json", MARKER]
    write_notes(run, note="")  # cleared: the copy follows
    sync.push_ended(here)
    RunSync(DirectoryTarget(tmp_path / "target")).restore(fresh)
    assert read_notes(RunFolder(fresh / "noted")) == {"label": "best so far", "note": ""}
    assert hashes(fresh / "noted") == hashes(run.path)


def test_a_file_gone_from_the_run_goes_from_its_copy_after_the_marker(tmp_path):
    run = finished_run(tmp_path / "here", "shrunk")
    target = Recording(tmp_path / "target")
    push_run(target, run)
    (run.path / "metrics.jsonl").unlink()
    push_run(target, run)
    assert not (tmp_path / "target" / "shrunk" / "metrics.jsonl").exists()
    marker = json.loads((tmp_path / "target" / "shrunk" / MARKER).read_text())
    assert "metrics.jsonl" not in marker["files"]


def test_forget_deletes_the_copy_and_a_restore_skips_a_run_already_here(tmp_path):
    here, target = tmp_path / "here", tmp_path / "target"
    kept, gone = finished_run(here, "kept"), finished_run(here, "gone")
    sync = RunSync(DirectoryTarget(target))
    sync.push_ended(here)
    sync.forget("gone")
    assert not (target / "gone").exists() and (target / "kept" / MARKER).is_file()
    (kept.path / "notes.json").write_text('{"label": "local"}')  # the local run wins: not overwritten
    assert RunSync(DirectoryTarget(target)).restore(here) == []
    assert read_notes(kept)["label"] == "local"
    assert gone.path.exists()  # forgetting the copy leaves the runs folder alone


def test_a_marker_naming_a_path_outside_the_run_is_not_trusted(tmp_path):
    run = finished_run(tmp_path / "here", "sly")
    push_run(DirectoryTarget(tmp_path / "target"), run)
    marker = tmp_path / "target" / "sly" / MARKER
    data = json.loads(marker.read_text())
    data["files"]["../../escaped"] = [1, 0, "0" * 64]
    marker.write_text(json.dumps(data))
    (tmp_path / "escaped").write_text("a file beside the target")  # where that path leads from the run's copy
    fresh, target = tmp_path / "deep" / "er" / "fresh", DirectoryTarget(tmp_path / "target")
    pull_run(target, "sly", target.runs()["sly"], fresh)
    assert not (tmp_path / "deep" / "er" / "escaped").exists()  # where it would land, two up from the restore
    assert RunFolder(fresh / "sly").status()["error"].startswith("interrupted")  # a marker not to trust: no marker


@pytest.mark.parametrize(
    "entry", [["12", 0, "0" * 64], [12, 0.5, "0" * 64], [12, 0], {"size": 12}, [True, 0, "0" * 64]]
)
def test_a_marker_with_a_malformed_entry_reads_as_none_and_the_other_runs_still_restore(tmp_path, entry):
    here, target = tmp_path / "here", tmp_path / "target"
    odd, fine = finished_run(here, "odd"), finished_run(here, "fine")
    RunSync(DirectoryTarget(target)).push_ended(here)
    marker = target / "odd" / MARKER
    data = json.loads(marker.read_text())
    data["files"]["config.yaml"] = entry
    marker.write_text(json.dumps(data))
    assert sorted(RunSync(DirectoryTarget(target)).restore(tmp_path / "fresh")) == ["fine", "odd"]
    assert RunFolder(tmp_path / "fresh" / "odd").status()["error"].startswith("interrupted")
    assert hashes(tmp_path / "fresh" / "fine") == hashes(fine.path)
    assert hashes(tmp_path / "fresh" / "odd")["config.yaml"] == hashes(odd.path)["config.yaml"]


def test_open_target_reads_rloo_sync(tmp_path):
    runs = tmp_path / "runs"
    assert open_target("", runs) is None and open_target("  ", runs) is None
    assert open_target(str(tmp_path / "mount"), runs) == DirectoryTarget((tmp_path / "mount").resolve())
    bucket = open_target("hf://buckets/someone/history/space-a", runs)
    assert isinstance(bucket, BucketTarget) and (bucket.bucket_id, bucket.prefix) == ("someone/history", "space-a")
    for spec in ("hf://buckets/someone", "hf://datasets/someone/x"):
        with pytest.raises(SystemExit, match="hf://buckets/<namespace>/<name>"):
            open_target(spec, runs)
    for spec in (runs, runs / "inside", tmp_path):  # the same folder, inside the runs folder, or holding it
        with pytest.raises(SystemExit, match="overlap"):
            open_target(str(spec), runs)


# ----------------------------------------------------------------------------- the bucket target


class BucketApi:
    """A bucket in memory that answers only calls binding to huggingface_hub's own ``HfApi`` signatures: a renamed
    parameter or method fails here, although no bucket is reachable from this machine."""

    def __init__(self):
        from huggingface_hub import HfApi

        self.real = HfApi
        self.files: dict[str, bytes] = {}

    def _bind(self, method, *args, **kwargs):
        inspect.signature(getattr(self.real, method)).bind(None, *args, **kwargs)

    def list_bucket_tree(self, *args, **kwargs):
        from huggingface_hub._buckets import BucketFile

        self._bind("list_bucket_tree", *args, **kwargs)
        prefix = kwargs.get("prefix") or ""
        for path in sorted(p for p in self.files if p.startswith(prefix)):  # as the Hub's JSON names the fields
            yield BucketFile(type="file", path=path, size=len(self.files[path]), xetHash="0" * 64)

    def batch_bucket_files(self, *args, **kwargs):
        self._bind("batch_bucket_files", *args, **kwargs)
        for source, dest in kwargs.get("add") or []:
            self.files[dest] = source if isinstance(source, bytes) else Path(source).read_bytes()
        for path in kwargs.get("delete") or []:
            self.files.pop(path, None)

    def download_bucket_files(self, *args, **kwargs):
        from huggingface_hub.errors import EntryNotFoundError

        self._bind("download_bucket_files", *args, **kwargs)
        for remote, local in args[1]:
            if remote not in self.files:
                raise EntryNotFoundError(remote)
            Path(local).write_bytes(self.files[remote])


def test_the_bucket_target_round_trip_through_huggingface_hubs_signatures(tmp_path):
    api = BucketApi()
    target = BucketTarget("someone/history", "space-a", api=api)
    run = finished_run(tmp_path / "here", "bucketed")
    write_notes(run, note="in the bucket")
    assert RunSync(target).push_ended(tmp_path / "here") == ["bucketed"]
    assert all(p.startswith("space-a/bucketed/") for p in api.files) and f"space-a/bucketed/{MARKER}" in api.files
    assert RunSync(target).restore(tmp_path / "fresh") == ["bucketed"]
    assert hashes(tmp_path / "fresh" / "bucketed") == hashes(run.path)
    RunSync(target).forget("bucketed")
    assert api.files == {}


@pytest.mark.skipif(
    os.environ.get("HF_HUB_OFFLINE") == "1" or not os.environ.get("RLOO_TEST_BUCKET"),
    reason="needs the Hub: RLOO_TEST_BUCKET=<namespace>/<bucket> and a token (not run on this project's machines)",
)
def test_a_real_bucket_round_trip(tmp_path):
    prefix = f"rloo-test-{os.getpid()}"
    target = BucketTarget(os.environ["RLOO_TEST_BUCKET"], prefix)
    run = finished_run(tmp_path / "here", "real")
    try:
        assert RunSync(target).push_ended(tmp_path / "here") == ["real"]
        assert RunSync(target).restore(tmp_path / "fresh") == ["real"]
        assert hashes(tmp_path / "fresh" / "real") == hashes(run.path)
    finally:
        RunSync(target).forget("real")
        shutil.rmtree(tmp_path / "fresh", ignore_errors=True)
