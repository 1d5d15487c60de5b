"""Who is asking, and whether they may: the visitor's identity, and the rate gates in front of sampling and Start.

Compare, Evaluate and the probe share the CPU with training; ``SamplingGate`` lets one sampling job run at a time,
gives each visitor a number of calls per minute and, while a run trains, a share of the wall time. ``StartGate``
counts Start attempts per visitor. Both are keyed by ``Caller.key``: the connection's address (or, behind a
trusted proxy, the forwarded one), never by anything the caller names itself.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from rloo_demo.errors import Busy, RateLimited
from rloo_demo.server.limits import Limits

SAMPLING_WINDOW = 60.0  # seconds over which the sampling share and per-client rates are counted
SAMPLING_WAIT = 30.0  # how long a sampling request waits for the one running before it is told to retry


@dataclass(frozen=True)
class Caller:
    """Who is asking: the browser's client id (kept in its localStorage) or an API caller's ``client_id``, and its
    network address (``ui.common.caller_of``: the last ``X-Forwarded-For`` hop behind a Space's proxy), used for
    per-client rates."""

    client_id: str = ""
    host: str | None = None

    @property
    def key(self) -> str:
        return self.host or self.client_id or "anonymous"


def owner_digest(client_id: str) -> str:
    """What a run's status records about its starter: a hash, so a listed run never reveals a client id."""
    return hashlib.sha256(f"rloo-demo:{client_id}".encode()).hexdigest()[:32]


class SamplingGate:
    """Compare and Evaluate share the CPU with training. The gate lets one sampling job run at a time, gives each
    client a number of calls per minute, and while a run trains lets sampling use at most ``sampling_share`` of
    the wall time, so watchers cannot starve the run (gradio's queue also serialises these events)."""

    def __init__(self, limits: Limits, training: Callable[[], bool], clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.training = training
        self.clock = clock
        self._lock = threading.Lock()
        self._busy = threading.Semaphore(1)
        self._calls: dict[str, deque] = {}
        self._spent: deque = deque()  # (end time, seconds) of recent sampling jobs

    def _admit(self, who: str) -> None:
        now = self.clock()
        with self._lock:
            calls = self._calls.setdefault(who, deque())
            while calls and now - calls[0] > SAMPLING_WINDOW:
                calls.popleft()
            rate = self.limits.sampling_per_minute
            if rate is not None and len(calls) >= rate:
                wait = SAMPLING_WINDOW - (now - calls[0])
                raise RateLimited(f"too many samples requested: {rate} a minute per visitor; try again in {wait:.0f} s")
            calls.append(now)
            if len(self._calls) > 10_000:  # forget idle clients
                for key in [k for k, v in self._calls.items() if not v][:5000]:
                    del self._calls[key]

    def _check_share(self) -> None:
        """While a run trains, refuse once sampling has used its share of the last minute. Checked when a job is
        about to run, after the jobs queued before it have run and been counted: checked on arrival, ten visitors
        arriving together would all pass and then run back to back, and training would crawl (docs/benchmarks.md)."""
        now = self.clock()
        with self._lock:
            while self._spent and now - self._spent[0][0] > SAMPLING_WINDOW:
                self._spent.popleft()
            share = self.limits.sampling_share
            used = sum(s for _, s in self._spent)
            if share is not None and self.training() and used >= share * SAMPLING_WINDOW:
                wait = SAMPLING_WINDOW - (now - self._spent[0][0]) if self._spent else SAMPLING_WINDOW
                raise RateLimited(
                    f"a run is training: sampling has used its share of the CPU ({used:.0f} s of the last minute), "
                    f"so that training stays fast; try again in {wait:.0f} s"
                )

    @contextmanager
    def __call__(self, who: str):
        self._admit(who)
        if not self._busy.acquire(timeout=SAMPLING_WAIT):
            raise Busy("another comparison or evaluation is running; try again in a moment")
        try:
            self._check_share()
        except RateLimited:
            self._busy.release()
            raise
        start = self.clock()
        try:
            yield
        finally:
            self._busy.release()
            with self._lock:
                self._spent.append((self.clock(), self.clock() - start))


class StartGate:
    """At most ``starts_per_minute`` Start attempts per client (each attempt resolves models and may make a run)."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic):
        self.limits, self.clock = limits, clock
        self._calls: dict[str, deque] = {}
        self._lock = threading.Lock()

    def admit(self, who: str) -> None:
        rate = self.limits.starts_per_minute
        if rate is None:
            return
        now = self.clock()
        with self._lock:
            calls = self._calls.setdefault(who, deque())
            while calls and now - calls[0] > SAMPLING_WINDOW:
                calls.popleft()
            if len(calls) >= rate:
                raise RateLimited(f"too many Start attempts: {rate} a minute per visitor; try again shortly")
            calls.append(now)
