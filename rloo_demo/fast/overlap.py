"""Run a no-grad forward pass on a worker thread while the training thread goes on.

The embedded policy generates and scores on one torch thread (``rloo_demo.fast.fast_step.engine_threads``; only its
backward takes two), so on two cores the other one is free for work whose inputs are ready and whose weights do not
change until a known point: the reference model's scoring pass beside the policy's (``rloo_demo.fast.fast_step``), and
the token record's pass under the updated weights beside the next step's generation (``BackgroundAfterPass``, for
``rloo_demo.engine.capture``). Torch ops release the GIL while they run, so two threads of tensor work overlap;
each caller waits for the result before anything it reads can change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch


class Background:
    """``fn(*args, **kwargs)`` on a worker thread under ``no_grad``; ``result()`` waits for it, then returns its value
    or raises its error in the caller's thread."""

    def __init__(self, fn: Callable, *args, name: str = "rloo-background", **kwargs):
        self._value = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Callable, args: tuple, kwargs: dict) -> None:
        try:
            with torch.no_grad():  # grad mode is per thread: the worker starts with the default (enabled)
                self._value = fn(*args, **kwargs)
        except BaseException as e:  # handed to the thread that waits for the result
            self._error = e

    def wait(self) -> None:
        """Wait for the call to end, whatever it returns or raises."""
        self._thread.join()

    def result(self):
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


def may_overlap(trainer, *models) -> bool:
    """Whether a forward pass of ``models`` may run beside the training thread's own work:

    - one process: several processes gather across ranks, collectives that must keep their place in order;
    - on the CPU, with no autocast in the caller: autocast is per thread, and the worker would compute in another
      precision than the call it replaces (on a GPU both threads queue on the same stream, for no gain anyway);
    - no gradient checkpointing: the pass switches it off and on under the other thread's forward;
    - no dropout: a forward with dropout draws from the random generator the next step samples with, and the run
      would then depend on which thread drew first.
    """
    if not getattr(trainer, "overlap_passes", True):  # turned off (benchmarks)
        return False
    acc = trainer.accelerator
    if acc.num_processes != 1 or not getattr(trainer.args, "disable_dropout", False):
        return False
    if torch.is_autocast_enabled("cpu"):
        return False
    for model in models:
        model = acc.unwrap_model(model)
        if getattr(model, "is_gradient_checkpointing", False) or next(model.parameters()).device.type != "cpu":
            return False
    return True


class BackgroundAfterPass:
    """Mixin for ``CapturingRLOOTrainer``: the token record's pass under the updated weights runs on a worker thread
    while the next step generates, where ``may_overlap`` allows it. The trainer waits for it before the next update,
    at the end of training and on an error (``CapturingRLOOTrainer._await_after``)."""

    def _deliver_after(self, pending: dict, background: bool) -> None:
        if background and self.record_tokens and may_overlap(self, self.model):
            self._after = Background(self._deliver, pending, name="rloo-after")
        else:
            super()._deliver_after(pending, background)


__all__ = ["Background", "BackgroundAfterPass", "may_overlap"]
