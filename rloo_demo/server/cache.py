"""Small caches for readers: a least-recently-used mapping, a file's stamp to tell when a cached read is stale, a bound
on builds per step, and the builds every page of a server shares (``SharedBuilds``, which the controller owns)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
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


class SharedBuilds:
    """What the pages of one server build from a run and share: the Train tab's figures and its texts (the warnings'
    callout, the summary), each built once per run, step and settings, whoever asks first. The controller owns one,
    so a server's pages share it and a new controller (a test's) starts empty.

    The plots of a run are built once per new step, not once per page: ten pages watching a 300-step run rebuilt tens
    of ms of figures each, every tick (a client that sends drawn=-1 gets all of them each time), and that pure Python
    held the GIL the training thread next door needs between its torch ops (measured with scripts/bench_load.py).
    Besides the slider's default, at most ``builds`` figure builds a step (a finished run: every ``window`` s) are
    made, whatever the keys asked for: a client cycling the smoothing with fresh sessions forced 20 builds of ~20 ms
    at every 0.2 s step (scripts/bench_load.py --readers)."""

    def __init__(self, figures: int = 96, texts: int = 256, builds: int = 3, window: float = 10.0):
        self._lock = threading.Lock()
        self._figures = LRU(figures)  # 20 smoothings x 4 languages of one step fit
        self._texts = LRU(texts)
        self._allowance = BuildAllowance(builds, window)

    def figures(self, key: Hashable, step: Hashable, build: Callable[[], list], always: bool = False) -> list | None:
        """The figures of ``key``, built by ``build`` if no page has yet; ``None`` when they are not built and
        ``step``'s builds are spent (ask again at the next step). ``always``: built whatever the allowance (the
        slider's default, so that a client spending the allowance first cannot keep plots from the others)."""
        with self._lock:
            built = self._figures.get_fresh(key)
            allowed = built is not None or always or self._allowance.take(step, time.monotonic())
        if not allowed:
            return None
        if built is None:
            built = build()
            with self._lock:
                self._figures.put(key, built)
        return built

    def texts(self, key: Hashable, build: Callable[[], tuple]) -> tuple:
        """The texts of ``key``, built by ``build`` if no page has yet (texts are cheap: no allowance)."""
        with self._lock:
            built = self._texts.get_fresh(key)
        if built is None:
            built = build()
            with self._lock:
                self._texts.put(key, built)
        return built
