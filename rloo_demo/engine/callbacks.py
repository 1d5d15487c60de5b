"""Live metrics out of the trainer, and stop requests into it.

``MetricsChannel`` is a thread-safe, append-only log of step records with any number of subscribers in other
threads. Each subscriber keeps its own read position, so one slow reader never holds up training or another
reader, and a subscriber that joins late (a reloaded page) still sees every step from the first.

``LiveMetricsCallback`` is a ``TrainerCallback``: ``on_log`` publishes each logged step with everything TRL logs,
and ``on_step_end`` turns a stop request into ``control.should_training_stop``, which the ``Trainer`` honours at the
next step boundary. Its ``phase`` says what a run does before its first step is logged (``run_phase``): the
first seconds of a run load models and sample a first batch, and a page should say so rather than "step 0".
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from transformers import TrainerCallback

from rloo_demo.i18n import Message


class MetricsChannel:
    """Append-only step records; readers wait on a condition instead of polling."""

    def __init__(self):
        self._records: list[dict] = []
        self._cond = threading.Condition()
        self._closed = False

    def publish(self, record: dict) -> None:
        with self._cond:
            self._records.append(record)
            self._cond.notify_all()

    def close(self) -> None:
        """No more records will come; wakes every waiting reader."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._records)

    def snapshot(self, start: int = 0) -> list[dict]:
        """Records from index ``start`` on, without waiting."""
        with self._cond:
            return list(self._records[start:])

    def wait_for(self, start: int, timeout: float | None = None) -> list[dict]:
        """Records from ``start`` on; blocks until there is one or the channel closes (or ``timeout`` passes)."""
        with self._cond:
            self._cond.wait_for(lambda: len(self._records) > start or self._closed, timeout=timeout)
            return list(self._records[start:])

    def subscribe(self) -> Subscription:
        return Subscription(self)


class Subscription:
    """One reader's position in a ``MetricsChannel``; iterate it to get records as they arrive."""

    def __init__(self, channel: MetricsChannel):
        self.channel = channel
        self.position = 0

    def poll(self, timeout: float | None = 0.0) -> list[dict]:
        records = (
            self.channel.wait_for(self.position, timeout) if timeout != 0.0 else self.channel.snapshot(self.position)
        )
        self.position += len(records)
        return records

    def __iter__(self):
        while True:
            records = self.poll(timeout=None)
            yield from records
            if not records and self.channel.closed:
                return


def run_phase(trainer) -> str:
    """What a run in training does now: "loading" (no trainer yet: the policy, the reward models and the prompts
    are loading), "preparing" (the trainer's set-up), "first_step" or "training" (steps are being logged)."""
    if trainer is None:
        return "loading"
    handler = getattr(trainer, "callback_handler", None)
    for callback in getattr(handler, "callbacks", ()):
        if isinstance(callback, LiveMetricsCallback):
            return callback.phase
    return "training"


TRAIN_SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_loss")


SAVE_RESERVE_SECONDS = 3.0  # kept free at the end of a budget for saving the model and the run's files


class LiveMetricsCallback(TrainerCallback):
    """Publishes every logged training step and honours stop requests at step boundaries.

    ``on_record`` (optional) is called with each record on the training thread, e.g. to append it to disk.
    """

    def __init__(
        self,
        channel: MetricsChannel,
        stop_event: threading.Event | None = None,
        on_record: Callable[[dict], None] | None = None,
        stop_file: str | None = None,
        budget_seconds: float | None = None,
        on_stop: Callable[[str], None] | None = None,
        budget_started: float | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.channel = channel
        self.stop_event = stop_event or threading.Event()
        self.on_record = on_record
        self.stop_file = stop_file  # another process (the web app) asks a subprocess run to stop by creating it
        # The compute budget is wall time from ``budget_started`` (the job's start: loading counts), and the run stops
        # before a step that would end past it, not at the first boundary after it, with time left to save.
        self.budget_seconds = budget_seconds
        self.on_stop = on_stop  # told why the run stops when the reason is decided here (the budget)
        self.clock = clock
        self.started = clock()
        self.budget_started = budget_started
        self._step_began: float | None = None
        self.last_step_seconds: float | None = None
        # The callback is made once the policy, the reward functions and the prompts are loaded; the trainer's own
        # set-up (the reference copy, the optimiser) follows, then the first step (sampling, scoring, the update).
        self.phase = "preparing"

    def on_train_begin(self, args, state, control, **kwargs):
        self.phase = "first_step"
        self.started = self.clock()
        if self.budget_started is None:
            self.budget_started = self.started

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_began = self.clock()

    def out_of_budget(self) -> bool:
        """Whether the next step (as long as the last one, with ``SAVE_RESERVE_SECONDS`` to save) would end past
        the budget's deadline."""
        if self.budget_seconds is None:
            return False
        now = self.clock()
        deadline = (self.budget_started if self.budget_started is not None else self.started) + self.budget_seconds
        return now + (self.last_step_seconds or 0.0) + SAVE_RESERVE_SECONDS >= deadline

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or any(k in logs for k in TRAIN_SUMMARY_KEYS) or "reward" not in logs:
            return  # the end-of-training summary and eval logs are not step records
        if not state.is_world_process_zero:
            return
        now = time.time()
        # "time": seconds since training began; "logged_at": wall clock, to measure how fast the page shows it
        record = {"step": state.global_step, "max_steps": state.max_steps, "time": now - self.started, "logged_at": now}
        record.update({k: float(v) for k, v in logs.items() if isinstance(v, int | float)})
        if self.on_record is not None:
            self.on_record(record)
        self.phase = "training"
        self.channel.publish(record)

    def on_step_end(self, args, state, control, **kwargs):
        if self._step_began is not None:
            self.last_step_seconds = self.clock() - self._step_began
        stop = self.stop_event.is_set() or bool(self.stop_file and os.path.exists(self.stop_file))
        if not stop and self.out_of_budget():
            stop = True
            if self.on_stop is not None:
                self.on_stop(Message("stop.budget", seconds=f"{self.budget_seconds:g}"))
        if args.world_size > 1:
            # Every process must stop at the same step or the next collective hangs: rank 0 decides for all.
            import torch
            import torch.distributed as dist

            flag = torch.tensor([int(stop)])
            dist.broadcast(flag, src=0)
            stop = bool(flag.item())
        if stop:
            self.stop_event.set()
            control.should_training_stop = True
        return control
