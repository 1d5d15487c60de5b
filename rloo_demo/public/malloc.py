"""glibc malloc tuning for the long-running server (one job: keep its memory from growing with its threads)."""

from __future__ import annotations

import ctypes
import ctypes.util

MALLOC_ARENAS = 2


def bound_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Let glibc's malloc keep at most ``arenas`` arenas (as ``MALLOC_ARENA_MAX`` would), whatever starts the app.

    By default each thread that allocates at the same time as another gets an arena of its own, up to 8 per core,
    and an arena keeps the memory it freed. A server with dozens of request threads that sample, score and plot
    then grows by hundreds of MB that it never returns (``scripts/bench_load.py`` measures it with 10 visitors;
    docs/benchmarks.md has the figures, with and without the bound). Call it before the threads start. Returns
    whether it took effect (False off glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-8, int(arenas)))  # -8: M_ARENA_MAX
    except (OSError, AttributeError):
        return False
