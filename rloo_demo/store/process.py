"""Which process trains a run: a pid alone is not enough, because in a container the app is PID 1 on every boot.

The boot time and the process's creation time (from ``psutil``, which accelerate already installs) tell a restarted
server from the one that wrote a run's status.
"""

from __future__ import annotations

import os

import psutil

_CLOCK = 0.01  # psutil's creation times are floats from clock ticks: equal within this, they are the same process


def _created(pid: int) -> float | None:
    try:
        return round(psutil.Process(pid).create_time(), 2)
    except (psutil.Error, OSError, ValueError, OverflowError):
        return None


def _boot_time() -> float | None:
    try:
        return round(psutil.boot_time(), 0)
    except (psutil.Error, OSError):
        return None


def process_identity(pid: int | None = None) -> dict:
    """``{"pid", "boot_time", "pid_created"}`` of a process (this one by default), as a run's status records it."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "boot_time": _boot_time(), "pid_created": _created(pid)}


def is_alive(status: dict) -> bool:
    """Whether the process recorded in a status is still the one running."""
    pid = status.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    boot = status.get("boot_time")
    now = _boot_time()
    if isinstance(boot, int | float) and now is not None and abs(boot - now) > 1:
        return False
    recorded = status.get("pid_created")
    if isinstance(recorded, int | float) and not isinstance(recorded, bool):
        created = _created(pid)
        return created is not None and abs(created - recorded) <= _CLOCK
    return psutil.pid_exists(pid)  # a status without a creation time: the pid is all there is
