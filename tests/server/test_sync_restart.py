"""History that survives a restart: a server with ``RLOO_SYNC`` set copies each run that ended to the sync target
(a real folder here), and a server started on an empty runs folder pulls them back. The end-to-end test runs the
app as the image runs it (``python app.py``), trains three tiny runs through the named API, notes one after its end,
SIGKILLs the server in the middle of a fourth, and starts a second server on an empty runs folder.

``python -m pytest tests/server/test_sync_restart.py`` (about two minutes; the quick ones alone: ``-m "not slow"``).
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from apputil import free_port, wait_until
from conftest import ROOT
from factories import someones_finished_run
from gradio_client import Client

from rloo_demo.config import RunConfig
from rloo_demo.public.gates import Caller
from rloo_demo.public.limits import LOCAL
from rloo_demo.server.manage import RunManager
from rloo_demo.server.runner import ActiveRun, Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.labels import write_notes
from rloo_demo.store.sync import MARKER, DirectoryTarget, RunSync

QUICK = json.dumps({"max_steps": 2, "prompts_per_step": 1})
LONG = json.dumps({"max_steps": 400, "prompts_per_step": 1, "max_new_tokens": 8})


def hashes(folder: Path) -> dict[str, str]:
    """Every visible file of a run folder and its sha256, computed here with hashlib."""
    out = {}
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            out[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def marked(target: Path, name: str) -> dict:
    """The files a run's marker on the target lists ({} while it has none)."""
    try:
        return json.loads((target / name / MARKER).read_text())["files"]
    except (OSError, ValueError):
        return {}


def start_app(runs_dir: Path, target: Path, log: Path):
    """``python app.py`` in local mode with its runs in ``runs_dir`` and their copies in ``target``; its output in a
    file (a pipe nobody reads would fill and stall the server)."""
    port = free_port()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        RLOO_RUNS_DIR=str(runs_dir),
        RLOO_SYNC=str(target),
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        HF_HUB_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
    )
    for public in ("RLOO_PUBLIC", "SPACE_ID"):
        env.pop(public, None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"

    def up():
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            return urllib.request.urlopen(url, timeout=2).status == 200
        except OSError:
            return False

    wait_until(up, timeout=180)
    return proc, Client(url, verbose=False)


def kill(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # a crash: no chance to write or copy anything
    proc.wait(30)


@pytest.mark.slow
def test_three_runs_and_a_note_survive_a_sigkill_and_a_restart_on_an_empty_disk(tmp_path):
    here, target, fresh = tmp_path / "runs", tmp_path / "mounted", tmp_path / "fresh-disk"
    proc, client = start_app(here, target, tmp_path / "first.log")
    try:
        names = []
        for _ in range(3):
            started = client.predict(QUICK, "sync-test", api_name="/start_run")
            assert "run" in started, started
            run = started["run"]
            wait_until(
                lambda r=run: client.predict(r, 0, api_name="/poll_metrics")["status"] == "finished", timeout=300
            )
            names.append(run)
            if len(names) == 1:  # a note given after the run ended (what the Runs tab writes)
                wait_until(lambda r=run: marked(target, r), timeout=60)
                write_notes(RunFolder(here / run), label="first", note="the baseline; beta 0.05")
        for name in names:  # every copy complete, the note's included
            wait_until(lambda n=name: set(marked(target, n)) == set(hashes(here / n)), timeout=60)
        killed = client.predict(LONG, "sync-test", api_name="/start_run")["run"]
        wait_until(lambda: len(client.predict(killed, 0, api_name="/poll_metrics")["records"]) >= 1, timeout=300)
    finally:
        kill(proc)
    assert json.loads((here / killed / "status.json").read_text())["status"] == "running"  # it died training
    assert not (target / killed).exists()  # a run in training is never on the target

    proc, client = start_app(fresh, target, tmp_path / "second.log")
    try:
        listed = {r["name"]: r for r in client.predict(api_name="/list_runs")}
    finally:
        kill(proc)
    assert sorted(listed) == sorted(names)  # the killed run is not there: it never ended
    assert {listed[n]["status"] for n in names} == {"finished"}
    assert (listed[names[0]]["label"], listed[names[0]]["note"]) == ("first", "the baseline; beta 0.05")
    for name in names:
        assert hashes(fresh / name) == hashes(here / name), name
        assert (fresh / name / "model" / "model.safetensors").is_file()

    # The same disk back instead (a restart that kept it): the killed run is marked interrupted, then copied
    runner = Runner(str(here), watchdog=False, sync=RunSync(DirectoryTarget(target)))
    try:
        assert runner.sync_round() == [killed]
    finally:
        runner.close()
    status = json.loads((target / killed / "status.json").read_text())
    assert status["status"] == "failed" and status["error"].startswith("interrupted")
    assert set(marked(target, killed)) == set(hashes(here / killed))


def test_a_runner_restores_first_and_prunes_only_its_own_disk(tmp_path):
    here, target, fresh = tmp_path / "runs", tmp_path / "mounted", tmp_path / "fresh-disk"
    for i in range(3):
        someones_finished_run(here, f"run-{i}", cid="client", address="10.0.0.9")  # prunable: a visitor's
    RunSync(DirectoryTarget(target)).push_ended(here)
    keep_one = replace(LOCAL, keep_runs=1, keep_seconds=0)
    runner = Runner(str(fresh), limits=keep_one, watchdog=False, sync=RunSync(DirectoryTarget(target)))
    try:
        assert len(runner.runs()) == 1  # restored, then pruned by the server's retention rules
        assert all(marked(target, f"run-{i}") for i in range(3))  # the target keeps every one
        assert runner.sync_round() == []  # the restored run is not copied back
    finally:
        runner.close()


def test_deleting_a_run_deletes_its_copy_so_no_restart_brings_it_back(tmp_path):
    here, target = tmp_path / "runs", tmp_path / "mounted"
    for name in ("kept", "deleted"):
        someones_finished_run(here, name, cid="client", address="10.0.0.9")
    runner = Runner(str(here), watchdog=False, sync=RunSync(DirectoryTarget(target)))
    try:
        assert sorted(runner.sync_round()) == ["deleted", "kept"]
        RunManager(runner, LOCAL).delete("deleted", Caller("anyone"))
    finally:
        runner.close()
    assert not (target / "deleted").exists() and marked(target, "kept")
    again = Runner(str(tmp_path / "fresh-disk"), watchdog=False, sync=RunSync(DirectoryTarget(target)))
    again.close()
    assert [r.name for r in again.runs()] == ["kept"]


def test_a_run_still_in_its_last_step_is_copied_once_its_thread_ends_and_at_the_latest_on_close(tmp_path):
    here, target = tmp_path / "runs", tmp_path / "mounted"
    run = RunFolder.create(RunConfig(output_dir=str(here), run_name="stopping"))
    run.set_status("stopped", reason="SIGTERM")  # as ActiveRun.mark_stopped writes it while the step goes on
    runner = Runner(str(here), watchdog=False, sync=RunSync(DirectoryTarget(target)))
    job = SimpleNamespace(done=False, run=run)  # the job as the runner sees it: its thread still writes the folder
    runner._active[run.name] = ActiveRun(job, "owner", 0.0)
    try:
        assert runner.sync_round() == [] and not (target / "stopping").exists()
        job.done = True
        runner._sync_due.clear()
        runner.active()  # whoever notices the end (a poll, a tick) wakes the copier
        assert runner._sync_due.is_set()
        runner.close()  # what a SIGTERM's way out calls once its runs stopped: it copies them before the exit
        assert set(marked(target, "stopping")) == set(hashes(run.path)) and len(hashes(run.path)) == 2
        assert runner.sync_round() == []
    finally:
        runner.close()
