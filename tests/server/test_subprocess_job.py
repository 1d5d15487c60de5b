"""The subprocess backend's follower (``server/subprocess_job.py``) on a stand-in child: a short Python script in
place of ``accelerate launch``, writing the run folder's files as rank 0 does. What the page reads (the metrics
channel, the rollouts by step, the status and its error) against what the script wrote; the real two-process run
is tests/engine/test_distributed.py's (slow). ``python -m pytest tests/server/test_subprocess_job.py``
"""

import json
import sys
import textwrap

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.server import subprocess_job
from rloo_demo.server.subprocess_job import JsonlTail, SubprocessJob, launch_command
from rloo_demo.store.folder import RunFolder

METRICS = [{"step": 1, "reward": 0.25}, {"step": 2, "reward": 0.5}]
ROLLOUTS = [
    {"step": 1, "group": 0, "prompt": "a"},
    {"step": 1, "group": 1, "prompt": "b"},
    {"step": 2, "group": 0, "prompt": "c"},
]


def child(folder, status, code, lines=("one", "two", "three", "four")) -> list[str]:
    """A child that writes the run folder as the training CLI does, prints ``lines`` and exits with ``code``."""
    script = textwrap.dedent(f"""
        import json, os, sys
        folder = {str(folder)!r}
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\\n" for r in {METRICS!r})
            f.write('{{"step": 3, "rew')  # a half-written last line: not read
        with open(os.path.join(folder, "rollouts.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\\n" for r in {ROLLOUTS!r})
        status = {status!r}
        if status:
            with open(os.path.join(folder, "status.json"), "w") as f:
                json.dump({{"status": status, "error": None}}, f)
        print("\\n".join({list(lines)!r}))
        sys.exit({code})
    """)
    return [sys.executable, "-c", script]


@pytest.fixture()
def job(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess_job, "POLL_SECONDS", 0.01)

    def make(status, code, name="sub"):
        config = RunConfig(output_dir=str(tmp_path), run_name=name, max_steps=2)
        folder = tmp_path / name
        monkeypatch.setattr(subprocess_job, "launch_command", lambda *args: child(folder, status, code))
        started = SubprocessJob(config, num_processes=2).start(resources_checked=True)
        started.thread.join(60)
        assert not started.thread.is_alive()
        return started

    return make


def test_a_finished_child_is_followed_into_the_runs_state(job, tmp_path):
    done = job("finished", 0)
    st = done.state
    assert st.channel.snapshot(0) == METRICS
    assert st.rollout_steps == [1, 2] and st.rollouts[1] == ROLLOUTS[:2] and st.rollouts[2] == ROLLOUTS[2:]
    assert (st.status, st.error) == ("finished", None) and st.finished >= st.started
    # the launch's own files are removed; the run folder stays
    assert not (tmp_path / ".sub.stop").exists() and not (tmp_path / ".sub.config.yaml").exists()
    assert (tmp_path / ".sub.log").read_text().splitlines() == ["one", "two", "three", "four"]
    assert done.state.run.path == tmp_path / "sub"


def test_a_child_that_exits_with_an_error_fails_the_run_with_its_last_lines(job, tmp_path):
    crashed = job("running", 3)
    want = "training subprocess exited with code 3: two | three | four"
    assert (crashed.state.status, crashed.state.error) == ("failed", want)
    saved = json.loads((tmp_path / "sub" / "status.json").read_text())
    assert (saved["status"], saved["error"]) == ("failed", want)


def test_a_child_that_says_it_failed_keeps_its_own_error_and_one_with_no_status_failed(job, tmp_path):
    stopped = job("stopped", 0, name="st")
    assert (stopped.state.status, stopped.state.error) == ("stopped", None)
    said = job("failed", 1, name="fl")  # its own status: not overwritten by the exit code's
    assert said.state.status == "failed" and said.state.error is None
    silent = job(None, 0, name="none")  # ended without a status: failed, and the page is told why
    assert silent.state.status == "failed"
    assert silent.state.error == "training subprocess exited with code 0 before writing a status"


def test_a_second_run_of_the_same_name_gets_a_suffix_and_stop_leaves_a_file(tmp_path, monkeypatch):
    (tmp_path / "twin").mkdir()
    (tmp_path / "twin-2").mkdir()
    monkeypatch.setattr(
        subprocess_job, "launch_command", lambda *args: [sys.executable, "-c", "import time; time.sleep(30)"]
    )
    seen = {}
    real = subprocess_job.save_config
    monkeypatch.setattr(
        subprocess_job, "save_config", lambda config, path: seen.update(path=path) or real(config, path)
    )
    running = SubprocessJob(RunConfig(output_dir=str(tmp_path), run_name="twin", max_steps=2)).start(True)
    try:
        assert running.state.config.run_name == "twin-3" and seen["path"] == tmp_path / ".twin-3.config.yaml"
        assert running.state.status == "running" and running.state.run.path == tmp_path / "twin-3"
        running.stop("asked")
        assert (tmp_path / ".twin-3.stop").exists() and running.state.stop_reason == "asked"
    finally:
        running.proc.kill()
        running.thread.join(30)


def test_the_launch_command_runs_the_cli_with_the_config_stop_file_and_budget(monkeypatch):
    monkeypatch.setattr(subprocess_job, "accelerate_launch", lambda n: ["launch", str(n)])
    from pathlib import Path

    assert launch_command(Path("/r/c.yaml"), Path("/r/.s"), 2) == [
        "launch",
        "2",
        "-m",
        "rloo_demo",
        "train",
        "--config",
        "/r/c.yaml",
        "--stop-file",
        "/r/.s",
    ]
    assert launch_command(Path("c"), Path("s"), 1, 90.0)[-2:] == ["--max-seconds", "90.0"]


def test_a_tail_reads_each_complete_line_once_and_counts_the_corrupt(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = JsonlTail(path)
    assert tail.read() == [] and tail.skipped == 0  # no file yet
    path.write_text('{"a": 1}\nnot json\n{"b": 2}\n{"c": ')
    assert tail.read() == [{"a": 1}, {"b": 2}] and tail.skipped == 1
    with open(path, "a") as f:
        f.write("3}\n")
    assert tail.read() == [{"c": 3}] and tail.read() == [] and tail.skipped == 1


# ------------------------------------------------------------------ what start launches, and where


def test_start_checks_resources_names_the_run_and_launches_it_with_its_settings(tmp_path, monkeypatch):
    launched, checked = [], []
    monkeypatch.setattr(subprocess_job, "check_resources", lambda config: checked.append(config))

    def launch(config_path, stop_file, num_processes, budget_seconds):
        launched.append((config_path, stop_file, num_processes, budget_seconds))
        script = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(0)"
        return [sys.executable, "-c", script]

    monkeypatch.setattr(subprocess_job, "launch_command", launch)
    monkeypatch.setattr(subprocess_job, "default_run_name", lambda config: f"auto-k{config.num_generations}")
    root = tmp_path / "nested" / "runs"  # made, parents and all
    fresh = SubprocessJob(RunConfig(output_dir=str(root), num_generations=3, max_steps=2), budget_seconds=45.0)
    assert fresh.num_processes == 2 and fresh.proc is None and fresh.state.budget_seconds == 45.0
    fresh.start()
    fresh.thread.join(60)
    assert fresh.thread.daemon and not fresh.thread.is_alive()
    assert checked == [fresh.state.config] and fresh.state.config.run_name == "auto-k3"
    assert launched == [(root / ".auto-k3.config.yaml", root / ".auto-k3.stop", 2, 45.0)]
    assert (root / ".auto-k3.log").read_text().splitlines() == ["to stdout", "to stderr"]  # both streams kept

    (root / "named").mkdir()
    second = SubprocessJob(RunConfig(output_dir=str(root), run_name="named", max_steps=2), num_processes=4)
    second.start(resources_checked=True)
    second.thread.join(60)
    assert second.state.config.run_name == "named-2" and len(checked) == 1  # the next free suffix is 2
    assert launched[-1] == (root / ".named-2.config.yaml", root / ".named-2.stop", 4, None)
    (root / "auto-k3").mkdir(exist_ok=True)
    third = SubprocessJob(RunConfig(output_dir=str(root), num_generations=3, max_steps=2)).start(True)
    third.thread.join(60)
    assert third.state.config.run_name == "auto-k3-2"


class _Proc:
    """A child that runs for ``polls`` polls, then has exited with ``code``."""

    def __init__(self, polls, code=0):
        self.polls, self.returncode = polls, code

    def poll(self):
        self.polls -= 1
        return None if self.polls >= 0 else self.returncode


def _following(tmp_path, monkeypatch, polls, code=0):
    job = SubprocessJob(RunConfig(output_dir=str(tmp_path), run_name="f", max_steps=2))
    folder = tmp_path / "f"
    folder.mkdir()
    job.state.run = RunFolder(folder)
    job.proc = _Proc(polls, code)
    job.stop_file, job.config_path, job.log_path = tmp_path / ".f.stop", tmp_path / ".f.config.yaml", tmp_path / "log"
    job.log_path.write_text("last words\n")
    return job, folder


def _append(path, *records):
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def test_a_steps_groups_read_in_two_polls_are_kept_together(tmp_path, monkeypatch):
    job, folder = _following(tmp_path, monkeypatch, polls=1)
    _append(folder / "rollouts.jsonl", {"step": 1, "group": 0})
    _append(folder / "metrics.jsonl", {"step": 1})
    # between the two reads the child writes the step's second group and the next step
    monkeypatch.setattr(
        subprocess_job.time,
        "sleep",
        lambda s: _append(folder / "rollouts.jsonl", {"step": 1, "group": 1}, {"step": 2, "group": 0}),
    )
    (folder / "status.json").write_text(json.dumps({"status": "finished", "error": None}))
    job._follow()
    st = job.state
    assert st.rollouts[1] == [{"step": 1, "group": 0}, {"step": 1, "group": 1}]
    assert st.rollouts[2] == [{"step": 2, "group": 0}] and st.rollout_steps == [1, 2]
    assert st.channel.snapshot(0) == [{"step": 1}] and st.channel.closed and st.status == "finished"


def test_a_status_without_its_word_is_a_failure(tmp_path, monkeypatch):
    job, folder = _following(tmp_path, monkeypatch, polls=0)
    (folder / "status.json").write_text(json.dumps({"error": "cut short"}))
    job._follow()
    # the folder's reader turns it into a failed status that says so (RunFolder.status always names one)
    assert (job.state.status, job.state.error) == ("failed", "status.json has no valid status")


def test_a_child_that_said_finished_but_exited_with_an_error_failed_and_its_log_may_hold_any_bytes(
    tmp_path, monkeypatch
):
    job, folder = _following(tmp_path, monkeypatch, polls=0, code=2)
    (folder / "status.json").write_text(json.dumps({"status": "finished", "error": None}))
    job.log_path.write_bytes(b"one\ntwo\n\xff\xfe not utf-8\nthe end\n")
    job._follow()
    assert job.state.status == "failed"
    assert job.state.error == "training subprocess exited with code 2: two | \ufffd\ufffd not utf-8 | the end"
    assert json.loads((folder / "status.json").read_text())["error"] == job.state.error


def test_stop_without_a_reason_is_the_starters_and_ports_are_the_systems_to_give(tmp_path):
    job = SubprocessJob(RunConfig(output_dir=str(tmp_path), run_name="s", max_steps=2))
    job.stop_file = tmp_path / ".s.stop"
    job.stop()
    assert job.state.stop_reason == "its starter asked it to stop" and job.stop_file.exists()
    ports = {subprocess_job.free_port() for _ in range(3)}
    assert all(1024 <= p <= 65535 for p in ports)  # an ephemeral port the system picked, not a fixed one


def test_a_gpu_machine_takes_one_process_a_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert "--multi_gpu" in subprocess_job.accelerate_launch(2, port=29600, threads=1)
    with pytest.raises(ValueError) as e:
        subprocess_job.accelerate_launch(3, port=29600, threads=1)
    assert str(e.value) == "3 processes but 2 GPU(s): one process per GPU; use at most 2"
