"""TRL internals that the package calls (not only overrides), in one place.

The names the engine overrides in its trainer subclasses (``_calculate_rewards``,
``_get_per_token_logps_and_entropies``, ...) cannot move here, but every private name it *calls* does, and
``tests/project/test_dependency_surface.py`` pins all of them, so a TRL upgrade that renames one fails there by
name rather than deep inside a run.
"""

from __future__ import annotations

import functools

from trl import RLOOTrainer
from trl.models.utils import disable_gradient_checkpointing

__all__ = ["disable_gradient_checkpointing", "trl_scoring"]


def trl_scoring(trainer):
    """TRL's own scoring call (``RLOOTrainer._get_per_token_logps_and_entropies``) bound to ``trainer``, for passes
    made beside or after the batch being scored: not the trainer's overrides, which read and change that batch's
    state (the next step may be building it on another thread), and without TRL's profiling wrapper, which logs to
    the trackers at the current step from whatever thread calls it (it pushed trackio's step counter one ahead of
    the run's steps)."""
    score = RLOOTrainer._get_per_token_logps_and_entropies
    return functools.partial(getattr(score, "__wrapped__", score), trainer)
