"""Who is asking, and whether they may: the visitor's identity, and the rate gates in front of sampling, Start and
reads.

Compare, Evaluate and the probe share the CPU with training; ``SamplingGate`` lets one sampling job run at a time,
gives each visitor a number of calls per minute and, while a run trains, a share of the wall time, of which one
visitor may use at most half. ``StartGate`` counts Start attempts per visitor, ``ReadGate`` reads of runs (lists,
rollouts, polls, page ticks). All are keyed by ``Caller.key``: the connection's address (or, behind a trusted
proxy, the forwarded one), never by anything the caller names itself, and every table forgets a visitor once its
window has passed with no call: an address costs nothing after it leaves.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from rloo_demo.config import text_problem
from rloo_demo.errors import Busy, InputError, RateLimited
from rloo_demo.server.limits import Limits

SAMPLING_WINDOW = 60.0  # seconds over which the sampling share and per-client rates are counted
SAMPLING_WAIT = 30.0  # how long a sampling request waits for the one running before it is told to retry
VISITOR_SHARE = 0.5  # of the sampling share, the most one visitor may use: the rest is left for the others
READ_BURST_SECONDS = 10.0  # a visitor's read allowance holds this many seconds' worth of its rate (20 reads)
MAX_VISITORS = 20_000  # entries a gate's table holds before it forgets the idlest at once


def forget_idle(table: dict, idle, now: float, last: dict) -> None:
    """Drop the visitors of ``table`` for which ``idle(entry, now)`` holds; at most once a window (``last`` keeps
    when), or at once when the table is full. A visitor forgotten while full loses only its count."""
    if now - last.get("swept", -1e18) < SAMPLING_WINDOW and len(table) < MAX_VISITORS:
        return
    last["swept"] = now
    for key in [k for k, v in table.items() if idle(v, now)]:
        del table[key]
    if len(table) >= MAX_VISITORS:  # all busy: the oldest entries go
        for key in list(table)[: len(table) // 4]:
            del table[key]


def _window_idle(calls: deque, now: float) -> bool:
    return not calls or now - calls[-1] > SAMPLING_WINDOW


def _count_call(table: dict, who: str, now: float, rate: int | None) -> float | None:
    """Count a call of ``who`` in the last window; the seconds to wait instead when ``rate`` calls are counted."""
    calls = table.get(who)
    if calls is None:
        calls = table[who] = deque()
    while calls and now - calls[0] > SAMPLING_WINDOW:
        calls.popleft()
    if rate is not None and len(calls) >= rate:
        return SAMPLING_WINDOW - (now - calls[0])
    calls.append(now)
    return None


@dataclass(frozen=True)
class Caller:
    """Who is asking: the browser's client id (kept in its localStorage) or an API caller's ``client_id``, and its
    network address (``ui.common.caller_of``: the last ``X-Forwarded-For`` hop behind a Space's proxy), used for
    per-client rates."""

    client_id: str = ""
    host: str | None = None
    read_admitted: bool = False  # the admission middleware already counted this request as a read

    @property
    def key(self) -> str:
        return self.host or self.client_id or "anonymous"


def owner_digest(client_id: str) -> str:
    """What a run's status records about its starter: a hash, so a listed run never reveals a client id."""
    problem = text_problem(client_id) if isinstance(client_id, str) else "is not a text"
    if problem:
        raise InputError(f"client_id {problem}")
    return hashlib.sha256(f"rloo-demo:{client_id}".encode()).hexdigest()[:32]


class SamplingGate:
    """Compare and Evaluate share the CPU with training. The gate lets one sampling job run at a time, gives each
    client a number of calls per minute, and while a run trains lets sampling use at most ``sampling_share`` of
    the wall time, so watchers cannot starve the run (gradio's queue also serialises these events). Of that share
    one visitor may use at most ``VISITOR_SHARE``: one visitor within its own rate used up the whole share in 21 s,
    and everyone else was refused for the rest of the minute."""

    def __init__(self, limits: Limits, training: Callable[[], bool], clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.training = training
        self.clock = clock
        self._lock = threading.Lock()
        self._busy = threading.Semaphore(1)
        self._calls: dict[str, deque] = {}
        self._swept: dict = {}
        self._spent: deque = deque()  # (end time, seconds, visitor) of recent sampling jobs

    def _admit(self, who: str) -> None:
        now = self.clock()
        with self._lock:
            forget_idle(self._calls, _window_idle, now, self._swept)
            rate = self.limits.sampling_per_minute
            wait = _count_call(self._calls, who, now, rate)
            if wait is not None:
                raise RateLimited(f"too many samples requested: {rate} a minute per visitor; try again in {wait:.0f} s")

    def _check_share(self, who: str) -> None:
        """While a run trains, refuse once sampling has used its share of the last minute, or this visitor its half
        of it. Checked when a job is about to run, after the jobs queued before it have run and been counted:
        checked on arrival, ten visitors arriving together would all pass and then run back to back, and training
        would crawl (docs/benchmarks.md)."""
        now = self.clock()
        with self._lock:
            while self._spent and now - self._spent[0][0] > SAMPLING_WINDOW:
                self._spent.popleft()
            share = self.limits.sampling_share
            if share is None or not self.training():
                return
            used = sum(s for _, s, _ in self._spent)
            mine = [(end, s) for end, s, visitor in self._spent if visitor == who]
            own = sum(s for _, s in mine)
            if used >= share * SAMPLING_WINDOW:
                wait = SAMPLING_WINDOW - (now - self._spent[0][0]) if self._spent else SAMPLING_WINDOW
                raise RateLimited(
                    f"a run is training: sampling has used its share of the CPU ({used:.0f} s of the last minute), "
                    f"so that training stays fast; try again in {wait:.0f} s"
                )
            if own >= VISITOR_SHARE * share * SAMPLING_WINDOW:
                wait = SAMPLING_WINDOW - (now - mine[0][0])
                raise RateLimited(
                    f"a run is training: your sampling has used your part of the CPU ({own:.0f} s of the last "
                    f"minute; one visitor may use {VISITOR_SHARE:.0%} of sampling's {share:.0%}), so that others "
                    f"can sample too; try again in {wait:.0f} s"
                )

    @contextmanager
    def __call__(self, who: str):
        self._admit(who)
        if not self._busy.acquire(timeout=SAMPLING_WAIT):
            raise Busy("another comparison or evaluation is running; try again in a moment")
        try:
            self._check_share(who)
        except RateLimited:
            self._busy.release()
            raise
        start = self.clock()
        try:
            yield
        finally:
            self._busy.release()
            with self._lock:
                self._spent.append((self.clock(), self.clock() - start, who))


class StartGate:
    """At most ``starts_per_minute`` Start attempts per client (each attempt resolves models and may make a run)."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic):
        self.limits, self.clock = limits, clock
        self._calls: dict[str, deque] = {}
        self._swept: dict = {}
        self._lock = threading.Lock()

    def admit(self, who: str) -> None:
        rate = self.limits.starts_per_minute
        if rate is None:
            return
        now = self.clock()
        with self._lock:
            forget_idle(self._calls, _window_idle, now, self._swept)
            if _count_call(self._calls, who, now, rate) is not None:
                raise RateLimited(f"too many Start attempts: {rate} a minute per visitor; try again shortly")


class ReadGate:
    """At most ``reads_per_minute`` reads of runs per visitor: a list of runs, a step's rollouts, a poll, a page
    tick. Each visitor has an allowance that refills at that rate and holds ``READ_BURST_SECONDS`` of it (a page's
    load and first ticks come together); a read with none left is refused at once, before it reads anything, so a
    looping client costs the server a refusal, not a read. Two numbers a visitor, forgotten once its allowance is
    full again."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic):
        self.limits, self.clock = limits, clock
        self._allowance: dict[str, list[float]] = {}  # visitor -> [reads left, when counted]
        self._swept: dict = {}
        self._lock = threading.Lock()

    def _capacity(self) -> float:
        return max(1.0, self.limits.reads_per_minute * READ_BURST_SECONDS / SAMPLING_WINDOW)

    def _full(self, entry: list[float], now: float) -> bool:
        rate = self.limits.reads_per_minute / SAMPLING_WINDOW
        return entry[0] + (now - entry[1]) * rate >= self._capacity()

    def admit(self, who: str) -> None:
        per_minute = self.limits.reads_per_minute
        if per_minute is None:
            return
        now = self.clock()
        rate, capacity = per_minute / SAMPLING_WINDOW, self._capacity()
        with self._lock:
            forget_idle(self._allowance, self._full, now, self._swept)
            entry = self._allowance.get(who)
            left = capacity if entry is None else min(capacity, entry[0] + (now - entry[1]) * rate)
            if left < 1.0:
                self._allowance[who] = [left, now]
                wait = (1.0 - left) / rate if rate > 0 else SAMPLING_WINDOW
                raise RateLimited(
                    f"too many reads: {per_minute} a minute per visitor (lists, rollouts, polls and page updates "
                    f"together); try again in {max(1, math.ceil(wait))} s"
                )
            self._allowance[who] = [left - 1.0, now]

    def __len__(self) -> int:
        return len(self._allowance)
