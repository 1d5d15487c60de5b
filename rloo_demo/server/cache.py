"""Small caches for readers: a least-recently-used mapping, and a file's stamp to tell when a cached read is stale."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from rloo_demo.store.folder import file_stamp


class LRU(OrderedDict):
    """A small least-recently-used mapping."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get_fresh(self, key):
        if key in self:
            self.move_to_end(key)
            return self[key]
        return None

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


def stamp(path: Path) -> tuple[int, int, int]:
    """``(mtime in ns, size, inode)`` of a file, ``(0, 0, 0)`` where there is none: a cached read of it is fresh
    while equal (``store.folder.file_stamp``, which the store's own caches use)."""
    return file_stamp(path)


class BuildAllowance:
    """At most ``builds`` new builds of one thing (a step's figures) per ``window`` seconds, whoever asks.

    The figures of a run's step are cached per smoothing and language, so a client cycling the smoothing, with a
    fresh session each time, used to force a build of all ten plots for every value at every step: 20 builds of
    about 20 ms for a 400-step run, at each 0.2 s step, all of it Python holding the GIL the training thread next
    door needs. With an allowance a key not yet built waits for the next step (or the next window of a finished
    run) once the allowance is spent; what was built is served from the cache to anyone."""

    def __init__(self, builds: int, window: float, size: int = 256):
        self.builds, self.window = builds, window
        self._spent = LRU(size)  # thing -> (window start, builds made in it)

    def take(self, thing, now: float) -> bool:
        """Whether ``thing`` may be built now (and count it)."""
        start, made = self._spent.get_fresh(thing) or (now, 0)
        if now - start >= self.window:
            start, made = now, 0
        if made >= self.builds:
            return False
        self._spent.put(thing, (start, made + 1))
        return True
