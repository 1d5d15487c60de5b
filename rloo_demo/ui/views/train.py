"""The Train tab's texts: the estimate before Start, the status line, the live collapse warning, the reproducing CLI
command.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import fields

from rloo_demo.config import RunConfig
from rloo_demo.eval.judges import DISTINCT_2_MIN, REPETITION_MAX, collapse_warning
from rloo_demo.i18n import in_locale, t, tn
from rloo_demo.ui.forms import FIELD
from rloo_demo.ui.views.common import _duration, text

# Before a server has timed a run of its own, the estimate scales the embedded default's step (measured on 2 cores
# by scripts/bench_engine.py, docs/benchmarks.md) by completions x tokens.
LOAD_SECONDS = 3.0  # loading the models and prompts before the first step
LONG_RUN_SECONDS = (
    900  # an estimate past this (15 minutes) is warned about before Start: a typo of Steps can mean hours
)


def estimate_text(
    config: RunConfig,
    step_seconds: float,
    budget: float | None,
    locale: str = "en",
    speed=None,
) -> str:
    """'About 1:41: 150 steps × 0.65 s' before Start, and where this server's compute budget would stop it. With
    ``speed`` (``server.estimate.Speed``) the loading and the first step are this server's measured ones, and the
    line says where the figures come from: a run timed here, or a benchmark not yet measured here."""
    load = speed.load if speed is not None else LOAD_SECONDS
    first = speed.first if speed is not None else step_seconds
    total = load + first + max(0, config.max_steps - 1) * step_seconds
    line = t(
        locale,
        "estimate.line",
        total=_duration(total, locale),
        steps=config.max_steps,
        seconds=f"{step_seconds:.2f}",
        completions=config.completions_per_step,
        tokens=config.max_new_tokens,
    )
    if speed is not None:
        key = "estimate.measured" if speed.source else "estimate.unmeasured"
        line += t(locale, key, run=text(speed.source or ""), load=_duration(load, locale))
        if speed.scaled:
            line += t(locale, "estimate.scaled")
    if budget is not None:
        fit = steps_within(budget, load, first, step_seconds)
        if config.max_steps > fit:  # and which box to lower, by its label in the page's language
            line += t(locale, "estimate.over_budget", budget=_duration(budget, locale), steps=fit)
            box = {k: f"**{t(locale, FIELD[k].label)}**" for k in ("max_steps", "num_generations", "max_new_tokens")}
            line += t(
                locale,
                "estimate.lower",
                steps_box=box["max_steps"],
                steps=fit,
                k_box=box["num_generations"],
                tokens_box=box["max_new_tokens"],
            )
        else:
            line += t(locale, "estimate.budget", budget=_duration(budget, locale))
    if total > LONG_RUN_SECONDS and (budget is None or budget > LONG_RUN_SECONDS):  # a budget's cut is said above
        line += "<br>" + t(locale, "estimate.long", total=_duration(total, locale), minutes=LONG_RUN_SECONDS // 60)
    return line


def steps_within(budget: float, load: float, first: float, step_seconds: float) -> int:
    """The most steps a run finishes within a compute budget that counts its loading: it stops at the first step
    boundary where the next step, with the time to save, would end past the budget (``engine.callbacks``); it
    always finishes its first step."""
    from rloo_demo.engine.callbacks import SAVE_RESERVE_SECONDS  # transformers: loaded on first use, not at start-up

    room = (budget - SAVE_RESERVE_SECONDS - load - first) / max(step_seconds, 1e-9)
    return max(1, math.ceil(room))


def status_line(
    status: str,
    records: list[dict],
    max_steps: int,
    elapsed: float | None,
    name: str = "",
    reason: str | None = None,
    locale: str = "en",
) -> str:
    """'step x / N · elapsed · ETA · steps/s' for a run, and why a stopped one stopped (in ``locale`` where the
    reason is a ``Message``: every reason the engine gives, and an old run's English one that reads as one)."""
    step = records[-1].get("step", 0) if records else 0
    # Rate over training time only (from the first logged step), so model loading does not inflate the ETA.
    trained_for = records[-1].get("time") if records else None
    rate = step / trained_for if trained_for and step else None
    eta = (max_steps - step) / rate if rate and status == "running" else None
    parts = [
        f"**{status_word(status, locale)}**",
        t(locale, "status.step", step=step, max_steps=max_steps),
        t(locale, "status.elapsed", elapsed=_duration(elapsed, locale)),
    ]
    if status == "running":
        parts.append(t(locale, "status.eta", eta=_duration(eta, locale)))
    parts.append(t(locale, "status.rate", rate=f"{rate:.2f}" if rate else "–"))
    if records and isinstance(records[-1].get("reward"), int | float):
        parts.append(t(locale, "status.reward", reward=f"{records[-1]['reward']:+.3f}"))
    if name:
        parts.append(t(locale, "status.run", name=f"<code>{text(name)}</code>"))
    line = " · ".join(parts)
    if reason and status == "stopped":
        line += "<br>" + t(locale, "status.stopped_because", reason=text(in_locale(reason, locale)))
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
    """The ``python -m rloo_demo train`` command that reproduces a run's config (flags only for non-defaults),
    into the same runs folder (``--output-dir`` where it is not the default). The run's name is left out: the new
    run gets its own, as the first did."""
    default = RunConfig()
    parts = ["python", "-m", "rloo_demo", "train"]
    for f in fields(RunConfig):
        value = getattr(config, f.name)
        if f.name == "run_name" or value == getattr(default, f.name):
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
    measured = tn(locale, "estimate.measurements.plural", n)
    return "<br>" + t(
        locale,
        "estimate.meter",
        n=measured,
        extra=_duration(extra, locale),
        share=f"{share:.0%}",
        cost=f"{METER_COST_STEPS:g}",
    )


# ----------------------------------------------------------------------------- alerts, phases, the summary

NO_SIGNAL_SHARE = 0.5  # the no-signal alert: at least this share of groups, over the latest steps, had equal scores


def _windows(records: list[dict], key: str):
    """``(step, mean of the LIVE_JUDGE_STEPS records up to it that logged key)`` for each record that logged it."""
    logged = [r for r in records if isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)]
    for i, record in enumerate(logged):
        window = logged[max(0, i + 1 - LIVE_JUDGE_STEPS) : i + 1]
        yield record.get("step", i + 1), sum(r[key] for r in window) / len(window)


def run_alerts(records: list[dict], locale: str = "en") -> list[dict]:
    """The warnings a run has earned, each ``{"kind", "step", "text"}``: ``step`` is where it first fired (the
    marker on the plots), ``text`` what it says now. Collapse: the judges' thresholds (``eval.judges``) on the
    latest steps' average, as the live warning reads them; no signal: most groups scored all alike, so their
    leave-one-out advantages were all zero and they taught nothing."""

    alerts = []
    fired = [s for s, v in _windows(records, "judges/distinct_2") if v < DISTINCT_2_MIN]
    fired += [s for s, v in _windows(records, "judges/repetition") if v > REPETITION_MAX]
    if fired:
        now = live_collapse_warning(records, locale)
        first = min(fired)
        alerts.append(
            {
                "kind": "collapse",
                "step": first,
                "text": now or t(locale, "alert.collapse_earlier", step=first),
            }
        )
    key = "frac_raw_score_zero_std" if any("frac_raw_score_zero_std" in r for r in records) else "frac_reward_zero_std"
    quiet = [(s, v) for s, v in _windows(records, key) if v >= NO_SIGNAL_SHARE]
    if quiet:
        share = list(_windows(records, key))[-1][1]
        alerts.append(
            {"kind": "no_signal", "step": quiet[0][0], "text": t(locale, "alert.no_signal", share=f"{share:.0%}")}
        )
    return alerts


def _alert_title(alert: dict, locale: str) -> str:
    return t(locale, "alert.{}_title".format(alert["kind"]))


def alerts_html(alerts: list[dict], locale: str = "en") -> str:
    """The callout above the plots: one coloured box per warning, with an icon and the step it fired at."""
    if not alerts:
        return ""
    items = "".join(
        f'<div class="rloo-callout" role="alert" data-kind="{text(a["kind"])}">'
        f'<span class="rloo-callout-icon" aria-hidden="true">⚠</span>'
        f"<div><strong>{text(_alert_title(a, locale))}</strong> · "
        f"{text(t(locale, 'alert.at_step', step=a['step']))}<br>{text(a['text'])}</div></div>"
        for a in alerts
    )
    return f'<div class="rloo-callouts">{items}</div>'


PHASES = ("loading", "preparing", "first_step")  # the first seconds of a run, before its first step is logged


def phase_line(phase: str, elapsed: float | None, max_steps: int, locale: str = "en") -> str:
    """The status line before the first step: what the run is doing, not 'step 0 / 150 · ETA –'."""
    word = t(locale, f"phase.{phase}") if phase in PHASES else text(phase)
    return " · ".join(
        [
            f"**{word}**",
            t(locale, "status.step", step=0, max_steps=max_steps),
            t(locale, "status.elapsed", elapsed=_duration(elapsed, locale)),
        ]
    )


def _pair(figure: dict | None, spec: str) -> str | None:
    if not isinstance(figure, dict) or figure.get("first") is None or figure.get("last") is None:
        return None
    return f"{figure['first']:{spec}} → {figure['last']:{spec}}"


def summary_markdown(summary: dict | None, alerts: list[dict], locale: str = "en") -> str:
    """The end-of-run summary on the Train tab: reward, length, KL and the judges, first steps → last steps, and
    what the warnings said."""
    if not summary or not summary.get("steps"):
        return ""
    rows = []
    for key, spec in (
        ("reward", "+.3f"),
        ("length", ".1f"),
        ("kl", ".3f"),
        ("distinct_2", ".2f"),
        ("repetition", ".2f"),
    ):
        pair = _pair(summary.get(key), spec)
        if pair:
            rows.append(f"| {text(t(locale, f'summary.{key}'))} | {pair} |")
    head = t(locale, "summary.title", steps=summary["steps"], window=summary.get("window", 5))
    table = f"| | {text(t(locale, 'summary.first_last'))} |\n|---|---|\n" + "\n".join(rows) if rows else ""
    if alerts:
        verdict = " ".join(
            f"⚠ {text(_alert_title(a, locale))} ({text(t(locale, 'alert.at_step', step=a['step']))})." for a in alerts
        )
    else:
        verdict = t(locale, "summary.no_alerts")
    return f"{head}\n\n{table}\n\n{verdict}"


def failure_markdown(error: str, locale: str = "en") -> str:
    """A failed run's error; one with several lines (a reward function's traceback) keeps them, in a block. The
    frame is in the page's language, the error as the engine wrote it."""
    head = t(locale, "train.run_failed")
    if "\n" in error.strip():
        return f"{head}\n\n<pre>{text(error.strip())}</pre>"
    return f"{head} {text(error)}"


def idle_status(locale: str = "en") -> str:
    """The status line before any run, in the page's language (written on load)."""
    return t(locale, "train.no_run")
