"""The runs folder as a whole: runs listed newest first, runs left 'running' by a dead process marked, old runs
pruned. A run in training is never deleted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rloo_demo.store.folder import RunFolder
from rloo_demo.store.process import is_alive


def list_runs(root: str | Path = "runs") -> list[RunFolder]:
    """Run folders under ``root``, newest first. Hidden folders (runs being made, exports) are not runs."""
    root = Path(root)
    try:
        candidates = [p for p in root.iterdir() if not p.name.startswith(".") and (p / "config.yaml").is_file()]
    except OSError:
        return []
    runs = [RunFolder(p) for p in candidates]

    def created(run: RunFolder) -> float:
        value = run.status().get("created")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            return run.path.stat().st_mtime
        except OSError:
            return 0.0

    return sorted(runs, key=created, reverse=True)


def mark_interrupted(root: str | Path = "runs") -> list[str]:
    """Runs left 'running' by a process that is gone (a server restart, a crash): mark them failed."""
    names = []
    for run in list_runs(root):
        st = run.status()
        if st.get("status") == "running" and not st.get("unreadable") and not is_alive(st):
            try:
                run.set_status("failed", error="interrupted: the process that ran it exited before it finished")
            except OSError:
                continue
            names.append(run.name)
    return names


def folder_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def prune_runs(root: str | Path, keep: int | None, max_mb: float | None, protect: set[str] = frozenset()) -> list[str]:
    """Delete the oldest runs that are not running until at most ``keep`` remain and they take at most ``max_mb``.
    A run in training (or named in ``protect``) is never deleted. Returns the names deleted."""
    if keep is None and max_mb is None:
        return []
    runs = list_runs(root)  # newest first
    sizes = {r.name: folder_bytes(r.path) for r in runs}
    total = sum(sizes.values())
    deleted = []
    for run in reversed(runs):
        too_many = keep is not None and len(runs) - len(deleted) > keep
        too_big = max_mb is not None and total > max_mb * 1e6
        if not (too_many or too_big):
            break
        st = run.status()
        if run.name in protect or (st.get("status") == "running" and is_alive(st)):
            continue
        shutil.rmtree(run.path, ignore_errors=True)
        total -= sizes[run.name]
        deleted.append(run.name)
    return deleted
