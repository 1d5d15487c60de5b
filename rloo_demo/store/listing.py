"""The runs folder as a whole: runs listed newest first (each run's creation time read once per version of its
status), runs left 'running' by a dead process marked, old runs pruned. A run in training is never deleted."""

from __future__ import annotations

import os
import shutil
import threading
from collections import OrderedDict
from pathlib import Path

from rloo_demo.store.folder import RunFolder, file_stamp
from rloo_demo.store.process import is_alive

_CREATED: OrderedDict[str, tuple[tuple, float]] = OrderedDict()  # run path -> (status.json's stamp, created)
_CREATED_LOCK = threading.Lock()
MAX_CACHED = 4096


def _created(run: RunFolder) -> float:
    """When a run was made (status.json's ``created``, else the folder's mtime), read once per status.json
    version: listing 30 runs costs two ``stat`` calls a run, not 30 JSON parses."""
    key, stamp = str(run.path), file_stamp(run.path / "status.json")
    with _CREATED_LOCK:
        cached = _CREATED.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    value = run.status().get("created")
    if isinstance(value, int | float) and not isinstance(value, bool):
        created = float(value)
    else:
        try:
            created = run.path.stat().st_mtime
        except OSError:
            created = 0.0
    with _CREATED_LOCK:
        _CREATED[key] = (stamp, created)
        _CREATED.move_to_end(key)
        while len(_CREATED) > MAX_CACHED:
            _CREATED.popitem(last=False)
    return created


def list_runs(root: str | Path = "runs") -> list[RunFolder]:
    """Run folders under ``root``, newest first. Hidden folders (runs being made, exports) are not runs."""
    root = Path(root)
    try:
        with os.scandir(root) as entries:
            names = [e.name for e in entries if not e.name.startswith(".")]
    except OSError:
        return []
    runs = [RunFolder(root / name) for name in names if os.path.isfile(os.path.join(root, name, "config.yaml"))]
    return sorted(runs, key=_created, reverse=True)


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
