"""The server-side job manager the web app drives: who may start and stop runs, and how many train at once.

It owns the in-process ``TrainingJob`` threads. By default one run trains at a time (``max_concurrent``), because
two runs on a 2-core CPU would each take twice as long without saying so; a second Start gets ``Busy`` naming
what is running. Only the session that started a run may stop it. Finished runs are read from disk, so a server
restart loses nothing but the runs that were in flight, which ``mark_interrupted`` marks as failed.

No gradio here: the UI calls these methods, and tests call them directly.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.config import RunConfig
from rloo_demo.runs import RunFolder, list_runs, mark_interrupted
from rloo_demo.training import TrainingJob


class Busy(RuntimeError):
    """The server is already training as many runs as it allows."""


class NotOwner(PermissionError):
    """A session tried to stop a run that another session started."""


@dataclass
class ActiveRun:
    job: TrainingJob  # or a SubprocessJob, which has the same interface
    owner: str
    started: float

    @property
    def name(self) -> str:
        return self.job.run.name


class Runner:
    def __init__(
        self, runs_dir: str = "runs", max_concurrent: int = 1, backend: str = "thread", num_processes: int = 2
    ):
        if backend not in ("thread", "subprocess"):
            raise ValueError(f"backend must be 'thread' or 'subprocess', not {backend!r}")
        self.runs_dir = runs_dir
        self.max_concurrent = max_concurrent
        self.backend = backend  # "subprocess": accelerate launch with num_processes, followed through the run folder
        self.num_processes = num_processes
        self._active: dict[str, ActiveRun] = {}
        self._lock = threading.Lock()
        mark_interrupted(runs_dir)

    # ------------------------------------------------------------------ jobs

    def start(self, config: RunConfig, owner: str) -> ActiveRun:
        """Validate, then start a run in a background thread; raises ``ConfigError``, ``ResolveError`` or ``Busy``."""
        config.output_dir = self.runs_dir
        config.validate()
        with self._lock:
            self._reap()
            if len(self._active) >= self.max_concurrent:
                running = ", ".join(
                    f"{a.name} (step {self.progress(a)[0]}/{a.job.state.config.max_steps})"
                    for a in self._active.values()
                )
                raise Busy(
                    f"the server is busy training {running}; it trains {self.max_concurrent} run(s) at a time. "
                    "Watch it here, or start yours when it ends."
                )
            if self.backend == "subprocess":
                from rloo_demo.subprocess_job import SubprocessJob

                job = SubprocessJob(config, self.num_processes).start()
            else:
                job = TrainingJob(config).start()
            active = ActiveRun(job, owner, time.time())
            self._active[active.name] = active
            return active

    def stop(self, name: str, owner: str) -> None:
        with self._lock:
            active = self._active.get(name)
        if active is None:
            raise KeyError(f"run {name!r} is not training")
        if active.owner != owner:
            raise NotOwner("only the browser session that started this run can stop it")
        active.job.stop()

    def _reap(self) -> None:
        for name in [n for n, a in self._active.items() if a.job.done]:
            del self._active[name]

    def active(self) -> list[ActiveRun]:
        with self._lock:
            self._reap()
            return list(self._active.values())

    def get_active(self, name: str) -> ActiveRun | None:
        """The run if it is still training; a finished one is read from its folder instead."""
        with self._lock:
            self._reap()
            return self._active.get(name)

    def latest_active(self) -> ActiveRun | None:
        runs = self.active()
        return max(runs, key=lambda a: a.started) if runs else None

    @staticmethod
    def progress(active: ActiveRun) -> tuple[int, int]:
        channel = active.job.state.channel
        return (len(channel), active.job.state.config.max_steps)

    # ------------------------------------------------------------------ runs on disk

    def runs(self) -> list[RunFolder]:
        return list_runs(self.runs_dir)

    def run(self, name: str) -> RunFolder:
        path = Path(self.runs_dir) / name
        if "/" in name or not (path / "config.yaml").is_file():
            raise KeyError(f"no run named {name!r} in {self.runs_dir}")
        return RunFolder(path)
