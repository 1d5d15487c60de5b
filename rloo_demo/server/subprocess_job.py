"""The web app's second backend: a run trained in a subprocess under ``accelerate launch`` with N processes (DDP over
gloo on a CPU, over NCCL on GPUs), followed through its run folder as LLaMA-Factory's board follows its logs.

The subprocess is the CLI (``python -m accelerate.commands.launch ... -m rloo_demo train --config ...``); rank 0
appends ``metrics.jsonl`` and ``rollouts.jsonl`` step by step, and a follower thread here tails both files into the
same ``RunState`` (metrics channel, rollouts by step) that the in-process backend fills, so the UI cannot tell them
apart. Stop is a file the training processes look for at each step boundary (rank 0 decides for all).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from rloo_demo.config import RunConfig
from rloo_demo.engine.training import STOP_STARTER, TrainingJob, check_resources
from rloo_demo.store.folder import RunFolder, default_run_name
from rloo_demo.store.jsonl import read_jsonl_counted, save_config

POLL_SECONDS = 0.2
ACCELERATE_LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]  # `accelerate launch` of this environment


class JsonlTail:
    """Complete lines appended to a JSONL file since the last read, through the run folder's one reader
    (``store.jsonl.read_jsonl_counted``): a half-written last line waits, a corrupt line is skipped and counted."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.skipped = 0

    def read(self) -> list[dict]:
        records, skipped, self.offset = read_jsonl_counted(self.path, self.offset)
        self.skipped += skipped
        return records


def free_port() -> int:
    """A TCP port nobody listens on now, for the rendezvous of one run (two runs must not share 29500)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads_per_process(num_processes: int) -> int:
    """The cores this process may use, shared out: N processes on C cores get C // N torch threads each (at least
    one), so they do not oversubscribe the cores and slow each other down."""
    return max(1, len(os.sched_getaffinity(0)) // num_processes)


def accelerate_launch(num_processes: int, port: int | None = None, threads: int | None = None) -> list[str]:
    """``python -m accelerate.commands.launch`` that really starts N local processes, with or without a GPU.

    N > 1 takes accelerate's ``--multi_gpu`` launcher (torchrun underneath): DDP over NCCL on GPUs, over gloo on a
    CPU. ``--cpu`` must not be passed: with it accelerate 1.15 takes its simple launcher, which starts one process
    whatever ``--num_processes`` says. Each process gets ``threads`` OMP/torch threads (default
    ``threads_per_process(N)``).
    """
    import torch

    gpus = torch.cuda.device_count()
    if gpus and num_processes > gpus:
        raise ValueError(f"{num_processes} processes but {gpus} GPU(s): one process per GPU; use at most {gpus}")
    cmd = [*ACCELERATE_LAUNCH, "--num_processes", str(num_processes)]
    cmd += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    cmd += ["--num_cpu_threads_per_process", str(threads or threads_per_process(num_processes))]
    if num_processes > 1:
        cmd += ["--multi_gpu", "--main_process_port", str(port or free_port())]
    return cmd


def launch_command(
    config_path: Path, stop_file: Path, num_processes: int, budget_seconds: float | None = None
) -> list[str]:
    train = ["-m", "rloo_demo", "train", "--config", str(config_path), "--stop-file", str(stop_file)]
    if budget_seconds is not None:
        train += ["--max-seconds", str(budget_seconds)]
    return accelerate_launch(num_processes) + train


class SubprocessJob(TrainingJob):
    """A ``TrainingJob`` whose thread follows a training subprocess instead of training itself."""

    def __init__(self, config: RunConfig, num_processes: int = 2, budget_seconds: float | None = None):
        super().__init__(config, budget_seconds=budget_seconds)
        self.num_processes = num_processes
        self.proc: subprocess.Popen | None = None

    def start(self, resources_checked: bool = False) -> SubprocessJob:
        config = self.state.config
        if not resources_checked:
            check_resources(config)
        root = Path(config.output_dir)
        root.mkdir(parents=True, exist_ok=True)
        name = config.run_name or default_run_name(config)
        suffix = 1
        while (root / name).exists():
            suffix += 1
            name = f"{config.run_name or default_run_name(config)}-{suffix}"
        config.run_name = name
        self.config_path = root / f".{name}.config.yaml"
        save_config(config, self.config_path)
        self.stop_file = root / f".{name}.stop"
        self.log_path = root / f".{name}.log"
        self.state.run = RunFolder(root / name)
        self.state.status, self.state.started = "running", time.time()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                launch_command(self.config_path, self.stop_file, self.num_processes, self.state.budget_seconds),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()
        return self

    def _follow(self) -> None:
        run, st = self.state.run, self.state
        metrics, rollouts = JsonlTail(run.path / "metrics.jsonl"), JsonlTail(run.path / "rollouts.jsonl")

        def drain():
            for record in metrics.read():
                st.channel.publish(record)
            by_step: dict[int, list[dict]] = {}
            for group in rollouts.read():
                by_step.setdefault(group["step"], []).append(group)
            for step, groups in by_step.items():
                st.keep_rollouts(step, st.rollouts.get(step, []) + groups)

        while self.proc.poll() is None:
            drain()
            time.sleep(POLL_SECONDS)
        drain()
        # a child that ended before it wrote a status (killed, or its start failed) is a failed run that says so
        code = self.proc.returncode
        missing = {"status": "failed", "error": f"training subprocess exited with code {code} before writing a status"}
        status = run.status() if (run.path / "status.json").is_file() else missing
        st.status = status.get("status", "failed")
        st.error = status.get("error")
        if code != 0 and st.status in ("running", "finished"):
            st.status = "failed"
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
            st.error = f"training subprocess exited with code {code}: {' | '.join(tail)}"
            if run.path.is_dir():
                run.set_status("failed", error=st.error)
        st.finished = time.time()
        st.channel.close()
        for p in (self.stop_file, self.config_path):
            p.unlink(missing_ok=True)

    def stop(self, reason: str = STOP_STARTER) -> None:
        super().stop(reason)
        self.stop_file.touch()
