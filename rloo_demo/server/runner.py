"""The server-side job manager the web app drives: who may start and stop runs, how many train at once, and the
housekeeping that keeps a long-lived server healthy.

It owns the in-process ``TrainingJob`` threads (or ``SubprocessJob`` followers). By default one run trains at a
time (``max_concurrent``), because two runs on a 2-core CPU would each take twice as long without saying so; a
second Start gets ``Busy`` naming what is running. Only the session that started a run may stop it (or an operator
with ``RLOO_ADMIN_TOKEN``).

Housekeeping, on a watchdog thread and at start-up: runs left "running" by a dead process are marked failed; a run
whose starting page has been gone for ``abandon_seconds`` is stopped; old finished runs beyond ``keep_runs`` /
``max_runs_mb`` are pruned; with a sync target, runs missing here are restored first and ended ones copied there on
a thread of their own (``store.sync``). A Start resolves its models before it takes the lock that page ticks take,
so a slow model lookup never freezes a page.

No gradio here: the controller calls these methods, and tests call them directly.
"""

from __future__ import annotations

import hmac
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rloo_demo.config import RunConfig, is_valid_run_name
from rloo_demo.engine.training import STOP_STARTER, TrainingJob, check_resources
from rloo_demo.errors import Busy, DiskFull, NotFound, NotOwner, UserError, message_of
from rloo_demo.i18n import Message
from rloo_demo.public.limits import Limits
from rloo_demo.public.retention import prune, visitor_digest
from rloo_demo.public.waiting import ComputeBudget, Ticket, WaitingLine
from rloo_demo.server.subprocess_job import SubprocessJob
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.listing import list_runs, mark_interrupted
from rloo_demo.store.sync import RunSync

WATCHDOG_SECONDS = 2.0
DEFAULT_RUN_SECONDS = 120.0  # a wait estimate's run length where the server sets no budget
SYNC_SECONDS = 10.0  # how often ended runs are checked for changes to copy (a run's end wakes the copier at once)


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
    visitor: str | None = None  # whose compute budget it spends (``Caller.key``)
    started_clock: float = field(default_factory=time.monotonic)  # the budget's clock

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
        sync: RunSync | None = None,
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
        self.line = WaitingLine(self.limits.max_waiting)
        self.budget = ComputeBudget(self.limits.compute_seconds_per_hour)
        self._turns: dict[str, Ticket] = {}  # visitor -> its latest ticket that left the line (started or failed)
        self._ended = 0  # runs that ended since the watchdog's last round
        self.sync = sync  # copies of ended runs elsewhere (store.sync), pulled back into an empty runs folder
        self._sync_due = threading.Event()
        Path(self.runs_dir).mkdir(parents=True, exist_ok=True)
        if sync is not None:  # before anything reads the folder: restored runs are listed, marked and pruned
            _logged(lambda: sync.restore(self.runs_dir), "restoring runs from the sync target")
        mark_interrupted(self.runs_dir)
        self.prune()
        if watchdog:
            threading.Thread(target=self._watch, name="rloo-watchdog", daemon=True).start()
        if watchdog and sync is not None:  # its own thread: a slow target never holds up the watchdog
            threading.Thread(target=self._sync_loop, name="rloo-sync", daemon=True).start()

    # ------------------------------------------------------------------ jobs

    def start(
        self, config: RunConfig, owner: str, owner_host: str | None = None, owner_record: str | None = None
    ) -> ActiveRun:
        """Start a validated config now; raises ``ResolveError``, ``DataError``, ``Busy`` or ``DiskFull``. The
        line for the slot is ``request``'s: this is for a caller that wants a run now or not at all.

        ``owner_record`` is what status.json keeps about the starter (a hash of its client id, see the controller)."""
        self.place(config)
        self._refuse_if_busy()  # before the slow part: a busy server answers at once
        self._make_room()
        check_resources(config)  # may read the HF cache or download: never under the lock that ticks take
        with self._lock:
            self._reap()
            self._refuse_if_busy(locked=True)
            return self._start_locked(Ticket(owner_host or owner, config, owner, owner_host, owner_record))

    def request(
        self, config: RunConfig, owner: str, owner_host: str | None = None, owner_record: str | None = None
    ) -> Ticket:
        """Start a validated config when the slot is free and nobody waits, else give it a place in the line (it
        starts by itself when its turn comes: ``_admit_next``). Everything that can refuse it (the visitor's own
        run still training, its compute budget, the disk, the models) is checked now, not when its turn comes: the
        models once, here, before the lock (the job that starts it trusts this check)."""
        self.place(config)
        visitor = owner_host or owner
        with self._lock:
            self._reap()
            mine = [a.name for a in self._active.values() if a.visitor == visitor]
            running = {a.visitor: a.started_clock for a in self._active.values() if a.visitor}
        if mine:
            raise Busy(Message("runner.yours_training", name=mine[0]))
        self.budget.admit(visitor, running)
        self._make_room()
        check_resources(config)  # may read the HF cache or download: never under the lock that ticks take
        ticket = Ticket(visitor, config, owner, owner_host, owner_record)
        with self._lock:
            self._reap()
            if len(self._active) < self.max_concurrent and not len(self.line):
                ticket.started = self._start_locked(ticket).name
                self._turns[visitor] = ticket
                return ticket
        self.line.join(ticket)
        self._admit_next()  # the slot may have freed meanwhile: the head of the line, not this ticket, gets it
        return ticket

    def place(self, config: RunConfig) -> RunConfig:
        """Put a run in this server's runs folder: the one place a run's ``output_dir`` is set on a server, whatever a
        caller sent (the controller refuses any other folder in public mode). The controller places a config before
        it marks it checked, so placing it again here changes nothing and the mark holds."""
        config.output_dir = self.runs_dir
        return config

    def turn_of(self, visitor: str) -> tuple[int | None, Ticket | None]:
        """``(place in the line, the visitor's last ticket that left it)``: where a waiting page stands."""
        return self.line.place(visitor), self._turns.get(visitor)

    def wait_estimate(self, place: int) -> float:
        """Seconds until the run at ``place`` starts: what the runs in training have left of their budgets, then
        a whole budget (or a default run's length) for each place ahead."""
        per_run = self.limits.max_run_seconds or DEFAULT_RUN_SECONDS
        now = time.monotonic()
        left = [max(0.0, per_run - (now - a.started_clock)) for a in self.active()]
        first = min(left) if len(left) >= self.max_concurrent else 0.0
        return first + (place - 1) * per_run / self.max_concurrent

    def _admit_next(self) -> None:
        """Give free slots to the head of the line. A ticket that can no longer start (its visitor is over budget
        or the disk is full) leaves the line with its reason; the next one is tried."""
        while True:
            if len(self.line):
                self.prune()  # not under the lock: pruning reads the runs' folders
            with self._lock:
                self._reap()
                if len(self._active) >= self.max_concurrent:
                    return
                ticket = self.line.pop()
                if ticket is None:
                    return
                running = {a.visitor: a.started_clock for a in self._active.values() if a.visitor}
                try:
                    self.budget.admit(ticket.visitor, running)
                    self._refuse_if_disk_full()
                    ticket.started = self._start_locked(ticket).name
                except (UserError, OSError) as exc:
                    ticket.error = message_of(exc)
                self._turns[ticket.visitor] = ticket

    def _start_locked(self, ticket: Ticket) -> ActiveRun:
        """Start a ticket's run (the lock held, resources checked): its budget is the server's per-run cap, or what
        is left of the visitor's hour if that is less."""
        running = {a.visitor: a.started_clock for a in self._active.values() if a.visitor}
        budgets = [b for b in (self.limits.max_run_seconds, self.budget.remaining(ticket.visitor, running)) if b]
        budget = min(budgets) if budgets else None
        if self.backend == "subprocess":
            job = SubprocessJob(ticket.config, self.num_processes, budget_seconds=budget)
        else:
            job = TrainingJob(ticket.config, budget_seconds=budget)
        extra = {"owner": ticket.owner_record} if ticket.owner_record else {}
        if ticket.owner_record:  # whose runs these are when old ones are pruned: the visitor's, whatever its id
            extra["visitor"] = visitor_digest(ticket.visitor)
        job.status_extra = extra
        job.start(resources_checked=True)
        active = ActiveRun(job, ticket.owner, time.time(), ticket.owner_host, visitor=ticket.visitor)
        self._active[active.name] = active
        return active

    def _refuse_if_busy(self, locked: bool = False) -> None:
        if not locked:
            with self._lock:
                self._reap()
                return self._refuse_if_busy(locked=True)
        if len(self._active) >= self.max_concurrent:
            running = [
                Message("runner.busy_run", name=a.name, step=self.progress(a)[0], max_steps=a.config.max_steps)
                for a in self._active.values()
            ]
            raise Busy(Message("runner.busy", running=running, slots=self.max_concurrent))

    def _refuse_if_disk_full(self) -> None:
        free_mb = shutil.disk_usage(self.runs_dir).free / 1e6
        if free_mb < self.limits.min_free_mb:
            raise DiskFull(Message("runner.disk_full", free=f"{free_mb:.0f}", needed=f"{self.limits.min_free_mb:g}"))

    def stop(self, name: str, owner: str, reason: str = STOP_STARTER) -> None:
        with self._lock:
            active = self._active.get(name)
        if active is None:
            raise NotFound(Message("runner.not_training", name=repr(name)))
        if self.is_admin(owner):
            active.job.stop(Message("stop.operator"))
            return
        if not hmac.compare_digest(_bytes(active.owner), _bytes(owner)):
            raise NotOwner(Message("runner.not_owner"))
        active.job.stop(reason)

    def is_admin(self, token: str) -> bool:
        admin = self.limits.admin_token
        return bool(admin) and isinstance(token, str) and hmac.compare_digest(_bytes(admin), _bytes(token))

    def stop_all(self, reason: str) -> list[ActiveRun]:
        runs = self.active()
        for active in runs:
            active.job.stop(reason)
        return runs

    def _reap(self) -> None:
        for name in [n for n, a in self._active.items() if a.job.done]:
            active = self._active.pop(name)
            self._ended += 1  # the watchdog prunes after it, whoever noticed the end (a poll, a tick, a Start)
            self._sync_due.set()  # and the copier copies it now
            if active.visitor:  # its time counts against the visitor's hour
                self.budget.record(active.visitor, active.started_clock)

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
        """``(the last step logged, max_steps)``: the step, not the count of records, which a run with gaps (a line
        it could not write) has fewer of."""
        return (active.latest_step(), active.config.max_steps)

    # ------------------------------------------------------------------ liveness and housekeeping

    def heartbeat(self, owner: str | None = None, host: str | None = None) -> None:
        """A sign of life from a client: the runs its client id (``owner``) or its address (``host``) started are not
        abandoned, and the place its address holds in the line is kept. Only the address keeps a place: the line is
        keyed by visitor, and a client id is whatever the caller names, so an id that spells another visitor's
        address would keep that visitor's place."""
        now = time.monotonic()
        if host:
            self.line.seen(host, now)
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
                active.job.stop(Message("stop.abandoned", seconds=f"{limit:g}"))
                stopped.append(active.name)
        return stopped

    def prune(self) -> list[str]:
        """Old runs out (``public.retention``): a visitor's own beyond its cap, then the oldest past their keep time
        beyond the server's counts. A run in training is never touched."""
        protect = {a.name for a in self.active()}
        low = shutil.disk_usage(self.runs_dir).free / 1e6 < self.limits.min_free_mb  # a full disk is cleared too
        return prune(self.runs_dir, self.limits, protect, free_mb=self.limits.min_free_mb if low else None)

    def _make_room(self) -> None:
        """Prune first, then refuse if the disk is still too full: a full disk is cleared, not only reported."""
        self.prune()
        self._refuse_if_disk_full()

    def _watch(self) -> None:
        while not self._closed.wait(WATCHDOG_SECONDS):
            self.watch_round()

    def watch_round(self) -> None:
        """One round of the watchdog: abandoned runs stopped, gone visitors out of the line, the slot given to the
        next, and old runs pruned once a run has ended since the last round (however its end was noticed: a run
        that a page's poll saw end was left unpruned until the next Start, its visitor one run over its cap)."""
        try:
            self.check_abandoned()
            with self._lock:
                self._reap()
                ended, self._ended = self._ended, 0
            self.line.drop_gone(self.limits.abandon_seconds)
            self._admit_next()
            if ended:
                self.prune()
        except Exception:  # housekeeping must never die; the next round tries again
            logging.getLogger(__name__).exception("watchdog round failed")

    def close(self) -> None:
        """Stop the housekeeping; runs that ended (stopped by a SIGTERM, say) are copied to the sync target first."""
        self._closed.set()
        self._sync_due.set()
        self.sync_round()

    def _sync_loop(self) -> None:
        while not self._closed.is_set():
            self.sync_round()
            self._sync_due.wait(SYNC_SECONDS)
            self._sync_due.clear()

    def sync_round(self) -> list[str]:
        """Copy the ended runs whose files changed since their last copy (a run's end, a note) to the sync target."""
        if self.sync is None:
            return []
        training = {a.name for a in self.active()}
        return _logged(lambda: self.sync.push_ended(self.runs_dir, training), "copying runs to the sync target") or []

    def forget(self, name: str) -> None:
        """A run a person deleted goes from the sync target too (a pruned one stays there: ``store.sync``)."""
        if self.sync is not None:
            _logged(lambda: self.sync.forget(name), f"deleting {name} from the sync target")

    # ------------------------------------------------------------------ runs on disk

    def runs(self) -> list[RunFolder]:
        return list_runs(self.runs_dir)

    def run(self, name) -> RunFolder:
        """A run folder by name; the name must be a plain folder name inside the runs folder."""
        if not is_valid_run_name(name):
            raise NotFound(Message("runner.bad_name"))
        root = Path(self.runs_dir).resolve()
        path = root / name
        if path.resolve().parent != root or not (path / "config.yaml").is_file():
            raise NotFound(Message("runner.no_run", name=repr(name)))
        return RunFolder(path)


def _logged(work, what: str):
    """``work()``, or None with the error logged: a target out of reach (a bucket over the network) must not stop
    the server from starting or a round from ending; the next round tries again."""
    try:
        return work()
    except Exception:
        logging.getLogger(__name__).exception("sync: %s failed", what)
        return None


def _bytes(text) -> bytes:
    """A text for ``hmac.compare_digest``, which compares ``str`` only when it is ASCII (any other id raised)."""
    return str(text).encode("utf-8", "surrogatepass")
