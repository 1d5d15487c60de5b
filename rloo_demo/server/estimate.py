"""How long a run will take on this server, before Start: from what this server measured, not a fixed figure.

A run folder records each step's ``step_time`` (TRL's) and, from ``status.json``'s ``started`` and the first
record's ``logged_at - time``, how long loading took before the first step. The newest run on this server with at
least ``MIN_STEPS`` timed steps sets the speed; its step time is scaled by the work of a step (completions x new
tokens) and, for another policy, by the parameter count: sampling and the update both grow with it. With no timed
run here, the embedded default's step measured on 2 cores (``readers.DEFAULT_STEP_SECONDS``) is scaled the same
way, and the estimate says it has not been measured here yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rloo_demo.config import RunConfig
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.models.model_size import policy_parameters
from rloo_demo.server.readers import DEFAULT_STEP_SECONDS, DEFAULT_STEP_WORK, RunReader

MIN_STEPS = 5  # timed steps (after the first) a run needs before its speed is believed
DEFAULT_LOAD_SECONDS = 3.0  # loading the embedded models and prompts, where no run has been timed here
RUNS_LOOKED_AT = 20  # the newest runs searched for a timed one


@dataclass(frozen=True)
class Speed:
    """A run's time on this server, measured or scaled: ``load`` before the first step, the ``first`` step (it warms
    up caches and threads) and each ``step`` after it, in seconds. ``source``: the run measured (None: nothing timed
    here yet); ``scaled``: the policy differs from the measured run's, so its size was scaled in."""

    load: float
    first: float
    step: float
    source: str | None
    scaled: bool = False

    def total(self, steps: int) -> float:
        return self.load + self.first + max(0, steps - 1) * self.step


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _work(config: RunConfig) -> int:
    return max(1, config.completions_per_step * config.max_new_tokens)


def measured(records: list[dict], started) -> tuple[float, float, float] | None:
    """``(load, first step, mean later step)`` seconds from a run's records and its ``started`` time; None when it
    has fewer than ``MIN_STEPS`` timed steps after the first."""
    times = [r["step_time"] for r in records if _number(r.get("step_time"))]
    if len(times) < MIN_STEPS + 1:
        return None
    first = records[0]
    load = None
    if _number(started) and _number(first.get("logged_at")) and _number(first.get("time")):
        # the first record is logged at train begin + its "time"; loading is what came before train begin
        load = first["logged_at"] - first["time"] - started
    later = times[1:]
    return (load if load is not None and load >= 0 else DEFAULT_LOAD_SECONDS, times[0], sum(later) / len(later))


def _size_ratio(policy: str, measured_policy: str) -> float:
    """The policy's parameters over the measured one's (1 where either is unknown: nothing to scale by)."""
    if policy.strip() == measured_policy.strip():
        return 1.0
    try:
        mine, theirs = policy_parameters(policy), policy_parameters(measured_policy)
    except Exception:  # an unreachable hub, a broken folder: the estimate does without the size
        return 1.0
    return mine / theirs if mine and theirs else 1.0


def run_speed(config: RunConfig, reader: RunReader) -> Speed:
    """The speed a run of ``config`` will have here: the newest timed run of the same policy, else of any policy
    (scaled by size), else the embedded default's benchmark (scaled by size)."""
    candidates = []
    for run in reader.runner.runs()[:RUNS_LOOKED_AT]:
        view = reader.view(run.name)  # cached by file stamps: an estimate per form change re-reads little
        if view is None or view.config is None or view.live:
            continue
        try:
            started = run.status().get("started")
        except Exception:  # an unreadable status: its timing is not used
            continue
        timing = measured(view.records, started)
        if timing is not None:
            candidates.append((view.config.policy.strip() != config.policy.strip(), run.name, view.config, timing))
            if not candidates[-1][0]:
                break  # the newest run of the same policy: nothing nearer to look for
    if candidates:
        _, name, past, (load, first, step) = min(candidates, key=lambda c: c[0])  # same policy first, then newest
        work = _work(config) / _work(past)
        size = _size_ratio(config.policy, past.policy)
        return Speed(load, first * work * size, step * work * size, name, scaled=size != 1.0)
    size = _size_ratio(config.policy, EMBEDDED_POLICY)
    step = DEFAULT_STEP_SECONDS * _work(config) / DEFAULT_STEP_WORK * size
    return Speed(DEFAULT_LOAD_SECONDS, step, step, None, scaled=size != 1.0)
