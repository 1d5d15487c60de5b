"""The Train tab's texts: the estimate before Start, the status line, the live collapse warning, the reproducing CLI
command.
"""

from __future__ import annotations

import shlex
from dataclasses import fields

from rloo_demo.config import RunConfig
from rloo_demo.eval.judges import collapse_warning
from rloo_demo.i18n import t
from rloo_demo.ui.views.common import _duration, text

# Before a server has timed a run of its own, the estimate scales the embedded default's step (measured on 2 cores
# by scripts/bench_engine.py, docs/benchmarks.md) by completions x tokens.
LOAD_SECONDS = 3.0  # loading the models and prompts before the first step


def estimate_text(config: RunConfig, step_seconds: float, budget: float | None, locale: str = "en") -> str:
    """'About 1:41: 150 steps × 0.65 s' before Start, and where this server's compute budget would stop it."""
    total = LOAD_SECONDS + config.max_steps * step_seconds
    line = t(
        locale,
        "estimate.line",
        total=_duration(total),
        steps=config.max_steps,
        seconds=f"{step_seconds:.2f}",
        completions=config.completions_per_step,
        tokens=config.max_new_tokens,
    )
    if budget is not None:
        if total > budget:
            steps = max(0, int((budget - LOAD_SECONDS) / step_seconds))
            line += t(locale, "estimate.over_budget", budget=_duration(budget), steps=steps)
        else:
            line += t(locale, "estimate.budget", budget=_duration(budget))
    return line


def status_line(
    status: str,
    records: list[dict],
    max_steps: int,
    elapsed: float | None,
    name: str = "",
    reason: str | None = None,
    locale: str = "en",
) -> str:
    """'step x / N · elapsed · ETA · steps/s' for a run (a run's stop reason stays as the engine wrote it)."""
    step = records[-1].get("step", 0) if records else 0
    # Rate over training time only (from the first logged step), so model loading does not inflate the ETA.
    trained_for = records[-1].get("time") if records else None
    rate = step / trained_for if trained_for and step else None
    eta = (max_steps - step) / rate if rate and status == "running" else None
    parts = [
        f"**{status_word(status, locale)}**",
        t(locale, "status.step", step=step, max_steps=max_steps),
        t(locale, "status.elapsed", elapsed=_duration(elapsed)),
    ]
    if status == "running":
        parts.append(t(locale, "status.eta", eta=_duration(eta)))
    parts.append(t(locale, "status.rate", rate=f"{rate:.2f}" if rate else "–"))
    if records and isinstance(records[-1].get("reward"), int | float):
        parts.append(t(locale, "status.reward", reward=f"{records[-1]['reward']:+.3f}"))
    if name:
        parts.append(t(locale, "status.run", name=f"<code>{text(name)}</code>"))
    line = " · ".join(parts)
    if reason and status == "stopped":
        line += "<br>" + t(locale, "status.stopped_because", reason=text(reason))
    return line


def status_word(status, locale: str = "en") -> str:
    """A run's status ('running', 'finished', ...) in ``locale``; an unknown one as it is, made inert."""
    key = f"status.{status}"
    return (
        t(locale, key)
        if isinstance(status, str) and status in ("running", "finished", "stopped", "failed")
        else text(status)
    )


def cli_command(config: RunConfig) -> str:
    """The ``python -m rloo_demo train`` command that reproduces a run's config (flags only for non-defaults)."""
    default = RunConfig()
    parts = ["python", "-m", "rloo_demo", "train"]
    for f in fields(RunConfig):
        value = getattr(config, f.name)
        if f.name in ("output_dir", "run_name") or value == getattr(default, f.name):
            continue
        if f.name == "reward_weights" and config.weights == [1.0] * len(config.rewards):
            continue  # the same as no weights
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + f.name.replace("_", "-"))
        elif isinstance(value, list):
            parts += [flag, *[str(v) for v in value]]
        elif value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


LIVE_JUDGE_STEPS = 5  # the live collapse warning averages the judges over the latest steps


def live_collapse_warning(records: list[dict], locale: str = "en") -> str | None:
    """The collapse warning on the latest steps' judges (averaged over ``LIVE_JUDGE_STEPS``), or None."""

    latest = [r for r in records if isinstance(r.get("judges/distinct_2"), int | float)][-LIVE_JUDGE_STEPS:]
    if not latest:
        return None
    judged = {
        key: sum(r[f"judges/{key}"] for r in latest) / len(latest)
        for key in ("distinct_2", "repetition")
        if all(isinstance(r.get(f"judges/{key}"), int | float) for r in latest)
    }
    return collapse_warning(judged, locale=locale)


def prechecks_markdown(warnings: list[str]) -> str:
    return "".join(f"<br>⚠ {text(w)}" for w in warnings)


def meter_estimate_text(config: RunConfig, step_seconds: float, locale: str = "en") -> str:
    """What the gradient-variance meter adds to a run's time, from its measured cost in training steps."""
    from rloo_demo.engine.variance import METER_COST_STEPS, measurements  # torch: loaded on first use, not at start-up

    if not config.variance_every or config.estimator == "grpo":
        return ""
    n = measurements(config.max_steps, config.variance_every)
    extra = n * METER_COST_STEPS * step_seconds
    share = extra / max(config.max_steps * step_seconds, 1e-9)
    return "<br>" + t(
        locale, "estimate.meter", n=n, extra=_duration(extra), share=f"{share:.0%}", cost=f"{METER_COST_STEPS:g}"
    )
