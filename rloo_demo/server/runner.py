"""The server-side job manager the web app drives: who may start and stop runs, how many train at once, and the
housekeeping that keeps a long-lived server healthy.

It owns the in-process ``TrainingJob`` threads (or ``SubprocessJob`` followers). By default one run trains at a
time (``max_concurrent``), because two runs on a 2-core CPU would each take twice as long without saying so; a
second Start gets ``Busy`` naming what is running. Only the session that started a run may stop it (or an operator
with ``RLOO_ADMIN_TOKEN``).

Housekeeping, on a watchdog thread and at start-up: runs left "running" by a dead process are marked failed; a run
whose starting page has been gone for ``abandon_seconds`` is stopped; old finished runs beyond ``keep_runs`` /
``max_runs_mb`` are pruned. A Start resolves its models before it takes the lock that page ticks take, so a slow
model lookup never freezes a page.

No gradio here: the controller calls these methods, and tests call them directly.
"""

from __future__ import annotations

import hmac
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rloo_demo.config import RunConfig, is_valid_run_name
from rloo_demo.engine.training import TrainingJob, check_resources
from rloo_demo.errors import Busy, DiskFull, NotFound, NotOwner
from rloo_demo.server.limits import Limits
from rloo_demo.server.subprocess_job import SubprocessJob
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.listing import list_runs, mark_interrupted, prune_runs

WATCHDOG_SECONDS = 2.0


@dataclass
class ActiveRun:
    """A run training on this server, as everything above the engine sees it: its config, its records so far,
    the rollouts of a step, a copy of its policy, and how it stopped. Nothing outside the engine reads the job's
    state itself."""

    job: TrainingJob  # or a SubprocessJob, which has the same interface
    owner: str
    started: float
    owner_host: str | None = None  # network address of the starter, for heartbeats from API clients
    last_seen: float = field(default_factory=time.monotonic)  # the starter's latest sign of life

    @property
    def name(self) -> str:
        return self.job.run.name

    @property
    def config(self) -> RunConfig:
        return self.job.state.config

    @property
    def run(self) -> RunFolder | None:
        return self.job.run

    def records(self, start: int = 0) -> list[dict]:
        """The metrics records logged so far (from the ``start``-th on)."""
        return self.job.state.channel.snapshot(start)

    def steps_logged(self) -> int:
        return len(self.job.state.channel)

    def status(self) -> dict:
        """``status`` (loading counts as running), ``error``, ``reason`` (why it stopped) and ``elapsed`` seconds."""
        st = self.job.state
        return {
            "status": st.status if st.status != "pending" else "running",
            "error": st.error,
            "reason": st.stop_reason,
            "elapsed": (st.finished or time.time()) - (st.started or self.started),
        }

    def rollout_steps(self) -> list[int]:
        return list(self.job.state.rollout_steps)

    def rollouts(self, step: int | None) -> list[dict] | None:
        """The groups of ``step`` (the latest if None) if they are kept in memory, else None (read the folder)."""
        st = self.job.state
        if not st.rollout_steps:
            return []
        step = step if step is not None else st.rollout_steps[-1]
        return list(st.rollouts[step]) if step in st.rollouts else None

    def latest_step(self) -> int:
        last = self.records(max(0, self.steps_logged() - 1))
        return last[-1].get("step", 0) if last else 0

    def policy_snapshot(self):
        """A private copy of the policy between two optimiser steps; None while it loads or in a subprocess."""
        return self.job.state.policy_snapshot()

    def stop_requested(self) -> bool:
        return self.job.state.stop_event.is_set()

    def mark_stopped(self, reason: str) -> None:
        """Say in the folder that the run stopped inside a step (the process is exiting); a full disk is let be."""
        if self.job.run is not None:
            try:
                self.job.run.set_status("stopped", reason=reason)
            except OSError:
                pass


class Runner:
    def __init__(
        self,
        runs_dir: str = "runs",
        max_concurrent: int = 1,
        backend: str = "thread",
        num_processes: int = 2,
        limits: Limits | None = None,
        watchdog: bool = True,
    ):
        if backend not in ("thread", "subprocess"):
            raise ValueError(f"backend must be 'thread' or 'subprocess', not {backend!r}")
        self.runs_dir = str(runs_dir)
        self.max_concurrent = max_concurrent
        self.backend = backend  # "subprocess": a launcher with num_processes, followed through the run folder
        self.num_processes = num_processes
        self.limits = limits or Limits()
        self._active: dict[str, ActiveRun] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        Path(self.runs_dir).mkdir(parents=True, exist_ok=True)
        mark_interrupted(self.runs_dir)
        self.prune()
        if watchdog:
            threading.Thread(target=self._watch, name="rloo-watchdog", daemon=True).start()

    # ------------------------------------------------------------------ jobs

    def start(
        self, config: RunConfig, owner: str, owner_host: str | None = None, owner_record: str | None = None
    ) -> ActiveRun:
        """Start a validated config; raises ``ResolveError``, ``DataError``, ``Busy`` or ``DiskFull``.

        ``owner_record`` is what status.json keeps about the starter (a hash of its client id, see the controller)."""
        config.output_dir = self.runs_dir
        self._refuse_if_busy()  # before the slow part: a busy server answers at once
        self._refuse_if_disk_full()
        check_resources(config)  # may read the HF cache or download: never under the lock that ticks take
        self.prune()
        with self._lock:
            self._reap()
            self._refuse_if_busy(locked=True)
            if self.backend == "subprocess":
                job = SubprocessJob(config, self.num_processes, budget_seconds=self.limits.max_run_seconds)
            else:
                job = TrainingJob(config, budget_seconds=self.limits.max_run_seconds)
            job.status_extra = {"owner": owner_record} if owner_record else {}
            job.start(resources_checked=True)
            active = ActiveRun(job, owner, time.time(), owner_host)
            self._active[active.name] = active
            return active

    def _refuse_if_busy(self, locked: bool = False) -> None:
        if not locked:
            with self._lock:
                self._reap()
                return self._refuse_if_busy(locked=True)
        if len(self._active) >= self.max_concurrent:
            running = ", ".join(
                f"{a.name} (step {self.progress(a)[0]}/{a.config.max_steps})" for a in self._active.values()
            )
            raise Busy(
                f"the server is busy training {running}; it trains {self.max_concurrent} run(s) at a time. "
                "Watch it here, or start yours when it ends."
            )

    def _refuse_if_disk_full(self) -> None:
        free_mb = shutil.disk_usage(self.runs_dir).free / 1e6
        if free_mb < self.limits.min_free_mb:
            raise DiskFull(
                f"the server's disk is full ({free_mb:.0f} MB free, a run needs {self.limits.min_free_mb:g}); "
                "no new run can start until space is freed"
            )

    def stop(self, name: str, owner: str, reason: str = "its starter asked it to stop") -> None:
        with self._lock:
            active = self._active.get(name)
        if active is None:
            raise NotFound(f"run {name!r} is not training")
        if self.is_admin(owner):
            active.job.stop("the server's operator stopped it")
            return
        if not hmac.compare_digest(str(active.owner), str(owner)):
            raise NotOwner("only the browser session that started this run can stop it")
        active.job.stop(reason)

    def is_admin(self, token: str) -> bool:
        admin = self.limits.admin_token
        return bool(admin) and isinstance(token, str) and hmac.compare_digest(admin, token)

    def stop_all(self, reason: str) -> list[ActiveRun]:
        runs = self.active()
        for active in runs:
            active.job.stop(reason)
        return runs

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
        return (active.steps_logged(), active.config.max_steps)

    # ------------------------------------------------------------------ liveness and housekeeping

    def heartbeat(self, owner: str | None = None, host: str | None = None) -> None:
        """A sign of life from a client: its runs are not abandoned."""
        now = time.monotonic()
        with self._lock:
            for active in self._active.values():
                if (owner and active.owner == owner) or (host and active.owner_host == host):
                    active.last_seen = now

    def check_abandoned(self, now: float | None = None) -> list[str]:
        """Stop runs whose starter has not been seen for ``abandon_seconds``; returns their names."""
        limit = self.limits.abandon_seconds
        if not limit:
            return []
        now = time.monotonic() if now is None else now
        stopped = []
        for active in self.active():
            if now - active.last_seen > limit and not active.stop_requested():
                active.job.stop(f"its page was gone for more than {limit:g} s (abandoned)")
                stopped.append(active.name)
        return stopped

    def prune(self) -> list[str]:
        protect = {a.name for a in self.active()}
        return prune_runs(self.runs_dir, self.limits.keep_runs, self.limits.max_runs_mb, protect)

    def _watch(self) -> None:
        finished_seen = 0
        while not self._closed.wait(WATCHDOG_SECONDS):
            try:
                self.check_abandoned()
                with self._lock:
                    before = len(self._active)
                    self._reap()
                    finished_seen += before - len(self._active)
                if finished_seen:
                    finished_seen = 0
                    self.prune()
            except Exception:  # housekeeping must never die; the next round tries again
                import logging

                logging.getLogger(__name__).exception("watchdog round failed")

    def close(self) -> None:
        self._closed.set()

    # ------------------------------------------------------------------ runs on disk

    def runs(self) -> list[RunFolder]:
        return list_runs(self.runs_dir)

    def run(self, name) -> RunFolder:
        """A run folder by name; the name must be a plain folder name inside the runs folder."""
        if not is_valid_run_name(name):
            raise NotFound("no such run (a run name is 1 to 100 of A-Z a-z 0-9 . _ -)")
        root = Path(self.runs_dir).resolve()
        path = root / name
        if path.resolve().parent != root or not (path / "config.yaml").is_file():
            raise NotFound(f"no run named {name!r}")
        return RunFolder(path)
