"""Fair turns at the training slot: a first-come line, and each visitor's training time in the last hour.

A public Space has one training slot. Without a line, whoever presses Start the moment a run ends gets it, and a
visitor who restarts their run on finish keeps it for ever. So a Start that finds the slot busy takes a place in a
``WaitingLine`` (one place a visitor) and the slot goes to the head of the line when a run ends; a visitor who has
just trained and asks again joins at the back, behind everyone already waiting. ``ComputeBudget`` caps how much
training one visitor may use an hour, so even an empty line cannot be hogged.

Both are plain data structures with an injected clock, tested without a server; ``Runner`` drives them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rloo_demo.errors import Busy, RateLimited
from rloo_demo.i18n import Message

HOUR = 3600.0


@dataclass
class Ticket:
    """A visitor's place in the line: what it will start, and who asked."""

    visitor: str  # who is waiting (the connection's address, or a trusted proxy's forwarded one)
    config: object  # the validated RunConfig it will train
    owner: str  # the client id that may stop the run once it starts
    owner_host: str | None = None
    owner_record: str | None = None  # what status.json keeps about the starter
    joined: float = field(default_factory=time.monotonic)
    last_seen: float = field(default_factory=time.monotonic)  # the visitor's page still asks: the place is kept
    started: str | None = None  # the run's name once the slot was given to it
    error: str | None = None  # why it could not start when its turn came


class WaitingLine:
    """First come, first served, one place a visitor. ``join`` is idempotent for a visitor already in line."""

    def __init__(self, max_waiting: int):
        self.max_waiting = max_waiting
        self._line: deque[Ticket] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._line)

    def join(self, ticket: Ticket) -> int:
        """Put ``ticket`` at the back (or keep the visitor's place, with the new settings); its 1-based place."""
        with self._lock:
            for i, waiting in enumerate(self._line):
                if waiting.visitor == ticket.visitor:
                    ticket.joined = waiting.joined
                    self._line[i] = ticket
                    return i + 1
            if len(self._line) >= self.max_waiting:
                raise Busy(Message("line.full", waiting=self.max_waiting))
            self._line.append(ticket)
            return len(self._line)

    def place(self, visitor: str) -> int | None:
        """The visitor's 1-based place, or None when it is not waiting."""
        with self._lock:
            for i, waiting in enumerate(self._line):
                if waiting.visitor == visitor:
                    return i + 1
        return None

    def seen(self, visitor: str, now: float | None = None) -> None:
        with self._lock:
            for waiting in self._line:
                if waiting.visitor == visitor:
                    waiting.last_seen = time.monotonic() if now is None else now

    def leave(self, visitor: str) -> bool:
        with self._lock:
            for waiting in list(self._line):
                if waiting.visitor == visitor:
                    self._line.remove(waiting)
                    return True
        return False

    def pop(self) -> Ticket | None:
        with self._lock:
            return self._line.popleft() if self._line else None

    def drop_gone(self, idle_seconds: float | None, now: float | None = None) -> list[Ticket]:
        """Forget the places of visitors whose page has not asked for ``idle_seconds``: nobody would watch the run."""
        if not idle_seconds:
            return []
        now = time.monotonic() if now is None else now
        with self._lock:
            gone = [t for t in self._line if now - t.last_seen > idle_seconds]
            for t in gone:
                self._line.remove(t)
        return gone


class ComputeBudget:
    """Training seconds per visitor over the last hour. A run counts from its start until it ends (loading and
    saving included); ``admit`` refuses a visitor who has used the hour's budget, and ``remaining`` caps a new run."""

    def __init__(self, seconds_per_hour: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds_per_hour = seconds_per_hour
        self.clock = clock
        self._spent: dict[str, list[tuple[float, float]]] = {}  # visitor -> [(start, end)], end may still grow
        self._lock = threading.Lock()

    def used(self, visitor: str, running: dict[str, float] | None = None) -> float:
        """Seconds ``visitor`` trained in the last hour; ``running`` maps visitors to the start of a run still on."""
        now = self.clock()
        with self._lock:
            spans = self._spent.get(visitor, [])
            spans[:] = [(s, e) for s, e in spans if e > now - HOUR]  # forget what left the window
            if not spans:
                self._spent.pop(visitor, None)
            total = sum(e - max(s, now - HOUR) for s, e in spans)
        if running and visitor in running:
            total += now - max(running[visitor], now - HOUR)
        return total

    def remaining(self, visitor: str, running: dict[str, float] | None = None) -> float | None:
        if self.seconds_per_hour is None:
            return None
        return max(0.0, self.seconds_per_hour - self.used(visitor, running))

    def admit(self, visitor: str, running: dict[str, float] | None = None, least: float = 30.0) -> None:
        """Refuse a Start when the visitor has less than ``least`` seconds of the hour's budget left."""
        left = self.remaining(visitor, running)
        if left is not None and left < least:
            raise RateLimited(Message("line.budget", seconds=f"{self.seconds_per_hour:g}"))

    def record(self, visitor: str, start: float, end: float | None = None) -> None:
        with self._lock:
            self._spent.setdefault(visitor, []).append((start, self.clock() if end is None else end))
