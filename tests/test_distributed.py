"""Multi-process data-parallel training on CPU (gloo) under ``accelerate launch``, and the web app's subprocess
backend that follows such a run through its folder. ``python -m pytest tests/test_distributed.py`` (~1 min)."""

import os
import subprocess

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.runner import Runner
from rloo_demo.runs import open_run
from rloo_demo.subprocess_job import JsonlTail, accelerate_launch


def check_consistent(run, steps, prompts_per_step, k):
    metrics = run.metrics()
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    groups = run.rollouts()
    assert len(groups) == steps * prompts_per_step
    for step in range(1, steps + 1):
        assert sorted(g["group"] for g in groups if g["step"] == step) == list(range(prompts_per_step))
    for g in groups:
        assert len(g["completions"]) == k
        assert g["parity_error"] < 1e-5
        assert sum(c["advantage"] for c in g["completions"]) == pytest.approx(0.0, abs=1e-5)


@pytest.mark.slow
def test_accelerate_launch_two_processes(tmp_path):
    train = ["-m", "rloo_demo", "train", "--max-steps", "4", "--prompts-per-step", "2", "--max-new-tokens", "8"]
    cmd = accelerate_launch(2) + train + ["--output-dir", str(tmp_path), "--run-name", "ddp"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp"]  # only rank 0 wrote a run folder
    run = open_run(tmp_path / "ddp")
    assert run.status()["status"] == "finished" and run.model_dir is not None
    # 2 prompts x K=4 per step were split over 2 processes; the rollouts hold both halves, in whole groups
    check_consistent(run, 4, 2, 4)


@pytest.mark.slow
def test_subprocess_backend_streams_and_stops(tmp_path):
    runner = Runner(str(tmp_path), backend="subprocess", num_processes=2)
    config = RunConfig(max_steps=300, prompts_per_step=2, max_new_tokens=8)
    active = runner.start(config, owner="me")
    state = active.job.state
    first = state.channel.wait_for(0, timeout=300)
    assert first and first[0]["step"] == 1
    state.channel.wait_for(2, timeout=120)
    runner.stop(active.name, "me")
    assert active.job.join(timeout=300)
    assert state.status == "stopped", state.error
    run = open_run(tmp_path / active.name)
    steps = len(run.metrics())
    assert 2 <= steps < 300
    check_consistent(run, steps, 2, 4)
    assert [r["step"] for r in state.channel.snapshot()] == list(range(1, steps + 1))  # streamed all of them
    assert sorted(state.rollouts) == list(range(1, steps + 1))
    assert not list(tmp_path.glob(".*.stop"))


def test_jsonl_tail_waits_for_complete_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = JsonlTail(path)
    assert tail.read() == []
    path.write_text('{"step": 1}\n{"step": 2')
    assert tail.read() == [{"step": 1}]
    with open(path, "a") as f:
        f.write('}\n{"step": 3}\n')
    assert tail.read() == [{"step": 2}, {"step": 3}]
    assert tail.read() == []
