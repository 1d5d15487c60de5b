"""Who is asking, and whether they may: the visitor's identity, and the rate gates in front of sampling, Start and
every event.

Compare, Evaluate and the probe share the CPU with training; ``SamplingGate`` lets one sampling job run at a time,
gives each visitor a number of calls per minute and, while a run trains, a share of the wall time, of which one
visitor may use at most half. ``StartGate`` counts Start attempts per visitor, ``EventGate`` what every event a
visitor sends costs the server (page ticks, clicks, polls, lists). All are keyed by ``Caller.key``: the
connection's address (or, behind a trusted proxy, the forwarded one), never by anything the caller names itself,
and every table forgets a visitor once its window has passed with no call: an address costs nothing after it
leaves.
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
from rloo_demo.i18n import Message
from rloo_demo.public.limits import Limits

SAMPLING_WINDOW = 60.0  # seconds over which the sampling share and per-client rates are counted
SAMPLING_WAIT = 30.0  # how long a sampling request waits for the one running before it is told to retry
SHARE_WINDOW = 10.0  # seconds over which sampling's share of the wall time is counted while a run trains
VISITOR_SHARE = 0.5  # of the sampling share, the most one visitor may use: the rest is left for the others
EVENT_BURST_SECONDS = 20.0  # a visitor's event allowance holds this many seconds' worth of its rate
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
    admitted: bool = False  # the admission middleware already charged this request to the visitor's event budget

    @property
    def key(self) -> str:
        return self.host or self.client_id or "anonymous"


def owner_digest(client_id: str) -> str:
    """What a run's status records about its starter: a hash, so a listed run never reveals a client id."""
    problem = text_problem(client_id) if isinstance(client_id, str) else Message("value.not_text")
    if problem:
        raise InputError(Message("value.bad_text", name="client_id", problem=problem))
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
        self._spent: deque = deque()  # (end time, seconds, visitor) of recent sampling jobs (and parts of long ones)
        self._job: list | None = None  # [visitor, when its unrecorded part began] of the job running now
        self.sleep = time.sleep  # how pace waits (a test's clock advances instead)

    def _admit(self, who: str) -> None:
        now = self.clock()
        with self._lock:
            forget_idle(self._calls, _window_idle, now, self._swept)
            rate = self.limits.sampling_per_minute
            wait = _count_call(self._calls, who, now, rate)
            if wait is not None:
                raise RateLimited(Message("gate.sampling_rate", rate=rate, wait=f"{wait:.0f}"))

    def _check_share(self, who: str) -> None:
        """While a run trains, refuse once sampling has used its share of the last ``SHARE_WINDOW`` seconds, or this
        visitor its half of it. Checked when a job is about to run, after the jobs queued before it have run and been
        counted: checked on arrival, ten visitors arriving together would all pass and then run back to back, and
        training would crawl (docs/benchmarks.md). A short window spreads sampling over the run: a share of the
        last minute let 8 visitors flooding Compare spend it in the minute's first seconds, and a step ran 1.75
        times slower while they did (``scripts/bench_events.py``)."""
        now = self.clock()
        with self._lock:
            while self._spent and now - self._spent[0][0] > SHARE_WINDOW:
                self._spent.popleft()
            share = self.limits.sampling_share
            if share is None or not self.training():
                return
            used = sum(s for _, s, _ in self._spent)
            mine = [(end, s) for end, s, visitor in self._spent if visitor == who]
            own = sum(s for _, s in mine)
            window = f"{SHARE_WINDOW:g}"
            if used >= share * SHARE_WINDOW:
                wait = SHARE_WINDOW - (now - self._spent[0][0]) if self._spent else SHARE_WINDOW
                raise RateLimited(
                    Message("gate.sampling_share", used=f"{used:.1f}", window=window, wait=f"{max(1, wait):.0f}")
                )
            if own >= VISITOR_SHARE * share * SHARE_WINDOW:
                wait = SHARE_WINDOW - (now - mine[0][0])
                raise RateLimited(
                    Message(
                        "gate.visitor_share",
                        own=f"{own:.1f}",
                        window=window,
                        part=f"{VISITOR_SHARE:.0%}",
                        share=f"{share:.0%}",
                        wait=f"{max(1, wait):.0f}",
                    )
                )

    @contextmanager
    def __call__(self, who: str):
        self._admit(who)
        if not self._busy.acquire(timeout=SAMPLING_WAIT):
            raise Busy(Message("gate.sampling_busy"))
        try:
            self._check_share(who)
        except RateLimited:
            self._busy.release()
            raise
        with self._lock:
            self._job = [who, self.clock()]
        try:
            yield
        finally:
            with self._lock:
                now = self.clock()
                self._spent.append((now, now - self._job[1], who))
                self._job = None
            self._busy.release()

    def pace(self) -> None:
        """Inside a long job (an Evaluate, between its prompts): record the part of it run so far and, while a run
        trains and sampling is over its share of the last ``SHARE_WINDOW`` seconds, wait until it is not. The share
        is checked when a job starts; one Evaluate of 64 prompts then ran for many seconds past it, and 8 visitors
        asking for one each slowed a step 2.5 times. Paced, it keeps to the share as it goes."""
        share = self.limits.sampling_share
        while True:
            with self._lock:
                if self._job is None:
                    return
                now = self.clock()
                who, since = self._job
                if now > since:
                    self._spent.append((now, now - since, who))
                    self._job[1] = now
                while self._spent and now - self._spent[0][0] > SHARE_WINDOW:
                    self._spent.popleft()
                used = sum(seconds for _, seconds, _ in self._spent)
                over = share is not None and self.training() and used >= share * SHARE_WINDOW
                wait = SHARE_WINDOW - (now - self._spent[0][0]) if self._spent else 0.0
            if not over:
                return
            self.sleep(min(max(wait, 0.05), 1.0))  # the oldest part leaves the window; then look again
            with self._lock:
                if self._job is not None:
                    self._job[1] = self.clock()  # the wait is not sampling


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
                raise RateLimited(Message("gate.start_rate", rate=rate))


class EventGate:
    """One budget for every event a visitor sends: the page's ticks, clicks and form changes, the API's polls and
    lists. Each event costs what it costs the server (``ui.api.EVENT_COSTS``: milliseconds of the server's CPU,
    measured), and each visitor may spend ``Limits.event_ms_per_minute`` of them a minute. The allowance refills at
    that rate and holds ``EVENT_BURST_SECONDS`` of it (a page's load and a few clicks come together). An event is let
    in when the visitor's allowance holds its cost (one dearer than the whole allowance, when the allowance is
    full), and refused at once otherwise, before gradio builds a session or queues it, so a looping client costs
    the server a refusal, not an event. Counted per visitor, not per kind: cycling through the page's 55 events
    buys nothing. Two numbers a visitor, forgotten once its allowance is full again."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic):
        self.limits, self.clock = limits, clock
        self._allowance: dict[str, list[float]] = {}  # visitor -> [milliseconds left, when counted]
        self._swept: dict = {}
        self._lock = threading.Lock()

    def _capacity(self) -> float:
        return max(1.0, self.limits.event_ms_per_minute * EVENT_BURST_SECONDS / SAMPLING_WINDOW)

    def _full(self, entry: list[float], now: float) -> bool:
        rate = self.limits.event_ms_per_minute / SAMPLING_WINDOW
        return entry[0] + (now - entry[1]) * rate >= self._capacity()

    def admit(self, who: str, cost: float = 1.0) -> None:
        """Charge ``who`` an event of ``cost`` milliseconds, or raise ``RateLimited`` with the wait."""
        per_minute = self.limits.event_ms_per_minute
        if per_minute is None:
            return
        now = self.clock()
        rate, capacity = per_minute / SAMPLING_WINDOW, self._capacity()
        with self._lock:
            forget_idle(self._allowance, self._full, now, self._swept)
            entry = self._allowance.get(who)
            left = capacity if entry is None else min(capacity, entry[0] + (now - entry[1]) * rate)
            price = min(max(0.0, float(cost)), capacity)
            if left < price:
                self._allowance[who] = [left, now]
                wait = (price - left) / rate if rate > 0 else SAMPLING_WINDOW
                raise RateLimited(
                    Message("gate.event_budget", ms=f"{per_minute / SAMPLING_WINDOW:.0f}", wait=max(1, math.ceil(wait)))
                )
            self._allowance[who] = [left - price, now]

    def left(self, who: str) -> float | None:
        """Milliseconds ``who`` may still spend now (None: no budget on this server)."""
        per_minute = self.limits.event_ms_per_minute
        if per_minute is None:
            return None
        now = self.clock()
        with self._lock:
            entry = self._allowance.get(who)
            capacity = self._capacity()
            return (
                capacity if entry is None else min(capacity, entry[0] + (now - entry[1]) * per_minute / SAMPLING_WINDOW)
            )

    def __len__(self) -> int:
        return len(self._allowance)
