"""Which old runs a server deletes, so that no visitor can delete another's.

Runs belong to someone: a run started from the page or the API records a hash of its visitor (``visitor``, from the
address) and of its client id (``owner``); a run without them was made by the operator (the CLI, the arena, a
script) and is never deleted here. The rules, in order:

1. a visitor's own runs beyond ``Limits.max_runs_per_visitor`` go, its oldest first: many runs in a row cost that
   visitor its own history, nobody else's;
2. beyond the server's counts (``keep_runs``, ``max_runs_mb``, or a disk with less than ``free_mb`` free) the oldest
   runs go, but only those that ended at least ``keep_seconds`` ago: a run just finished stays for its visitor to
   look at, whatever others do;
3. a disk still too full after that (every run on it younger than ``keep_seconds``) is cleared of the oldest
   visitors' runs whatever their age: otherwise no Start could run until the operator acted, and a run kept for
   its visitor is worth less than the slot for everyone.

A run in training (or named in ``protect``) is never deleted.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from pathlib import Path

from rloo_demo.public.limits import Limits
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.listing import folder_bytes, list_runs
from rloo_demo.store.process import is_alive

log = logging.getLogger(__name__)


def visitor_digest(visitor: str) -> str:
    """What a run's status records about its visitor: a hash, so a listed run never reveals an address."""
    return hashlib.sha256(f"rloo-demo-visitor:{visitor}".encode()).hexdigest()[:32]


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _ended(status: dict, run: RunFolder) -> float:
    for key in ("finished", "updated", "created"):
        value = _number(status.get(key))
        if value is not None:
            return value
    try:
        return run.path.stat().st_mtime
    except OSError:
        return 0.0


def prune(
    root: str | Path,
    limits: Limits,
    protect: set[str] = frozenset(),
    free_mb: float | None = None,
    now: float | None = None,
) -> list[str]:
    """Delete runs by the rules above; returns the names deleted, oldest first."""
    now = time.time() if now is None else now
    runs = list_runs(root)  # newest first
    statuses = {r.name: r.status() for r in runs}

    def deletable(run: RunFolder) -> bool:
        st = statuses[run.name]
        training = st.get("status") == "running" and is_alive(st)
        return run.name not in protect and not training and bool(st.get("owner") or st.get("visitor"))

    deleted: list[str] = []

    def delete(run: RunFolder) -> None:
        shutil.rmtree(run.path, ignore_errors=True)
        deleted.append(run.name)

    # 1. each visitor's own runs beyond its cap, its oldest first
    cap = limits.max_runs_per_visitor
    if cap is not None:
        by_visitor: dict[str, list[RunFolder]] = {}
        for run in runs:
            st = statuses[run.name]
            key = st.get("visitor") or st.get("owner")
            if key:
                by_visitor.setdefault(str(key), []).append(run)
        for own in by_visitor.values():
            for run in [r for r in own[cap:] if deletable(r)]:
                delete(run)

    # 2. the server's counts: the oldest runs that ended at least keep_seconds ago
    kept = [r for r in runs if r.name not in deleted]
    sizes = {r.name: folder_bytes(r.path) for r in kept} if limits.max_runs_mb is not None else {}
    total = sum(sizes.values())
    for run in reversed(kept):  # oldest first
        too_many = limits.keep_runs is not None and sum(1 for r in kept if r.name not in deleted) > limits.keep_runs
        too_big = limits.max_runs_mb is not None and total > limits.max_runs_mb * 1e6
        too_full = free_mb is not None and shutil.disk_usage(root).free / 1e6 < free_mb
        if not (too_many or too_big or too_full):
            break
        if not deletable(run) or now - _ended(statuses[run.name], run) < limits.keep_seconds:
            continue
        delete(run)
        total -= sizes.get(run.name, 0)

    # 3. a disk still too full: the oldest visitors' runs, however young
    if free_mb is not None:
        for run in reversed([r for r in runs if r.name not in deleted]):
            if shutil.disk_usage(root).free / 1e6 >= free_mb:
                break
            if deletable(run):
                log.warning("the disk is full: deleting run %s, younger than keep_seconds", run.name)
                delete(run)
    return deleted
