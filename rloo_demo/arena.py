"""The arena: paired runs of several estimators on the same policy, prompts, K, seeds and budget.

    python -m rloo_demo arena --estimators rloo grpo reinforce --seeds 3 [--max-steps N] [--output-dir D]
    python -m rloo_demo arena --estimators rloo reinforce --seeds 3 --reward-offset 1   # what the baseline buys

For every seed, each estimator trains once (``python -m rloo_demo train --estimator E --seed S``), one run at a
time, each in its own process (so its peak memory is its own), then is evaluated on the same held-out prompts with
the same sampling seed (``python -m rloo_demo evaluate``). The runs land in the runs folder like any other, named
``arena-<stamp>-<estimator>-s<seed>``, so the Runs tab overlays them; the summary goes next to them as
``arena-<stamp>.json`` and ``.md``.

The summary has one row per estimator:
- held-out gain (trained minus base reward on the trained reward, per prompt) with a 95% interval from a two-level
  bootstrap: seeds resampled, then prompts within each seed, so both the run-to-run and the prompt-to-prompt spread
  count (with 3 seeds the interval is honest about how little 3 runs say). It is a difference of scores, so a
  ``--reward-offset`` (a constant the trainer adds to every reward, RunConfig.reward_offset) leaves its scale alone:
  the offset changes what the trainers learn, not what is measured;
- KL of the trained policy to the base (nats per completion, the evaluation's Monte-Carlo estimate);
- mean step time (TRL's ``step_time``, first step left out) and peak RSS of the training process;
- the judges of the trained samples (distinct-2, repetition) and how many runs tripped the collapse warning;
- the models held in memory, with parameter counts, as each trainer recorded them (``status.json``), said once
  above the table.
PPO would hold a fourth model, a value network of about the policy's size; TRL 1.16 has no PPOTrainer (removed in
PR #7020), so that row is quoted, not measured.

The arena is a command-line action on purpose: 3 estimators x 3 seeds of the default run are 9 trainings and 9
evaluations (15 minutes or more on 2 cores), too long for a page's compute budget; the app shows its results.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rloo_demo.config import ESTIMATOR_CHOICES, RunConfig
from rloo_demo.errors import InputError
from rloo_demo.store.jsonl import atomic_write_text, save_config

ARENA_FILE = re.compile(r"arena-[0-9]{8}-[0-9]{6}\.json")
PPO_NOTE = "quoted from the literature, TRL 1.16 removed PPOTrainer (PR #7020)"
BETA_NOTE = "β enters RLOO's (and REINFORCE's) reward, but GRPO's loss (a per-token k3 KL term)."


# ----------------------------------------------------------------------------- pure summary


def per_prompt_gains(evaluation: dict) -> list[float]:
    """Trained minus base mean reward per held-out prompt, from an ``evaluation.json`` (prompt-major samples)."""
    k = evaluation["samples_per_prompt"]
    base, trained = evaluation["base_rewards"], evaluation["trained_rewards"]
    return [statistics.fmean(trained[i : i + k]) - statistics.fmean(base[i : i + k]) for i in range(0, len(base), k)]


def hierarchical_interval(
    gains_per_seed: Sequence[Sequence[float]], n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95% interval of the mean gain: resample seeds, then prompts within each resampled seed."""
    rng = random.Random(seed)
    means = []
    for _ in range(n_resamples):
        seeds = [gains_per_seed[rng.randrange(len(gains_per_seed))] for _ in gains_per_seed]
        means.append(statistics.fmean(statistics.fmean(g[rng.randrange(len(g))] for _ in g) for g in seeds))
    means.sort()
    return means[int(0.025 * n_resamples)], means[int(0.975 * n_resamples) - 1]


def _mean(values: Sequence[float | None]) -> float | None:
    numbers = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return statistics.fmean(numbers) if numbers else None


def summarize(runs: Sequence[dict]) -> list[dict]:
    """One row per estimator from the arena's run records (``run_record``), in the order first seen."""
    order = list(dict.fromkeys(r["estimator"] for r in runs))
    rows = []
    for estimator in order:
        mine = [r for r in runs if r["estimator"] == estimator and r.get("evaluation")]
        row = {"estimator": estimator, "runs": len(mine), "seeds": [r["seed"] for r in mine]}
        if mine:
            gains = [per_prompt_gains(r["evaluation"]) for r in mine]
            row["gain"] = statistics.fmean(statistics.fmean(g) for g in gains)
            row["gain_ci95"] = list(hierarchical_interval(gains))
            row["kl_to_base"] = _mean([r["evaluation"].get("kl_trained_vs_base") for r in mine])
            judges = [(r["evaluation"].get("judges") or {}).get("trained") or {} for r in mine]
            row["distinct_2"] = _mean([j.get("distinct_2") for j in judges])
            row["repetition"] = _mean([j.get("repetition") for j in judges])
            row["collapsed"] = sum(bool(r["evaluation"].get("collapse_warning")) for r in mine)
        row["step_seconds"] = _mean([r.get("step_seconds") for r in runs if r["estimator"] == estimator])
        row["peak_rss_mb"] = max((r.get("peak_rss_mb") or 0 for r in runs if r["estimator"] == estimator), default=0)
        models = next((r.get("models") for r in runs if r["estimator"] == estimator and r.get("models")), None)
        row["models"] = models
        rows.append(row)
    return rows


def _params(n) -> str:
    if not isinstance(n, int | float):
        return "?"
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,.0f}"


def models_text(models: dict | None) -> str:
    """'policy 1.35M + reference 1.35M + reward vader_compound (lexicon, 0)'."""
    if not models:
        return "?"
    parts = [f"policy {_params(models.get('policy'))}"]
    ref = models.get("reference")
    if isinstance(ref, dict):
        parts.append(f"reference {_params(ref.get('parameters'))} ({ref.get('kind')})")
    for reward in models.get("rewards", []):
        parts.append(f"reward {reward['name']} ({reward['kind']}, {_params(reward['parameters'])})")
    return " + ".join(parts)


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and math.isfinite(value) else "–"


def models_line(rows: Sequence[dict]) -> str:
    """What the trainers held in memory, said once above the table: one text when every estimator held the same
    models (the usual case: a 60-character text repeated in each row made the table too wide to read), else each
    text with the estimators that held it."""
    held: dict[str, list[str]] = {}
    for r in rows:
        held.setdefault(models_text(r.get("models")), []).append(str(r["estimator"]))
    if len(held) == 1:
        return f"Models held in memory, by every estimator: {next(iter(held))}."
    return "Models held in memory: " + "; ".join(f"{', '.join(names)}: {text}" for text, names in held.items()) + "."


def markdown_table(rows: Sequence[dict], settings: str = "") -> str:
    """The arena's table, one row per estimator, then PPO's quoted row; the models held in memory above it, what
    PPO would hold and the β note under it."""
    lines = []
    if settings:
        lines += [settings, ""]
    if rows:
        lines += [models_line(rows), ""]
    lines += [
        "| estimator | runs | held-out gain [95% CI] | KL to base (nats) | distinct-2 | repetition | "
        "mean step time (s) | peak RSS (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = r.get("gain_ci95") or [None, None]
        collapsed = f" ({r['collapsed']} collapsed)" if r.get("collapsed") else ""
        lines.append(
            f"| {r['estimator']} | {r['runs']} | {_fmt(r.get('gain'), '+.3f')} [{_fmt(ci[0], '+.3f')}, "
            f"{_fmt(ci[1], '+.3f')}] | {_fmt(r.get('kl_to_base'), '.1f')} | {_fmt(r.get('distinct_2'), '.2f')} | "
            f"{_fmt(r.get('repetition'), '.2f')}{collapsed} | {_fmt(r.get('step_seconds'), '.2f')} | "
            f"{_fmt(r.get('peak_rss_mb'), '.0f')} |"
        )
    policy = next((r["models"].get("policy") for r in rows if r.get("models")), None)
    lines.append("| ppo (not run) | – | – | – | – | – | – | – |")
    lines += [
        "",
        f"PPO (not run) would hold the policy, the reference, the reward and a value network of about the policy's "
        f"size ({_params(policy)}): {PPO_NOTE}.",
        "",
        BETA_NOTE,
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- running


# A child's ``ru_maxrss`` counts the memory of the process it was forked from until its exec: from a parent of
# 2 GB, every child read at least 2 GB. So a small launcher (its own Python, a few MB) starts the command and
# reports that grandchild's peak through a pipe; the launcher's own inflated figure is never read.
_LAUNCHER = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "os.write(int(sys.argv[1]), str(usage.ru_maxrss).encode())\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def _run(command: list[str], log) -> tuple[int, float]:
    """Run a child process to the end; ``(exit status, its peak RSS in MB)`` (Linux ``wait4``: this child only, as
    started from the launcher above, not from this process)."""
    read, write = os.pipe()
    try:
        launcher = [sys.executable, "-c", _LAUNCHER, str(write), *command]
        proc = subprocess.Popen(launcher, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ), pass_fds=(write,))
        os.close(write)
        write = None
        code = proc.wait()
        peak_kb = os.read(read, 64).decode() or "nan"  # nothing written: the launcher itself failed
    finally:
        os.close(read)
        if write is not None:
            os.close(write)
    return code, float(peak_kb) / 1024  # KB on Linux


def run_record(run_path: Path, estimator: str, seed: int, peak_rss_mb: float) -> dict:
    """What the summary needs from one finished arena run's folder."""
    status = json.loads((run_path / "status.json").read_text())
    metrics = [json.loads(line) for line in (run_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = [m["step_time"] for m in metrics[1:] if isinstance(m.get("step_time"), int | float)]
    evaluation_path = run_path / "evaluation.json"
    return {
        "run": run_path.name,
        "estimator": estimator,
        "seed": seed,
        "status": status.get("status"),
        "steps": len(metrics),
        "step_seconds": statistics.fmean(times) if times else None,
        "peak_rss_mb": peak_rss_mb,
        "models": status.get("models"),
        "evaluation": json.loads(evaluation_path.read_text()) if evaluation_path.is_file() else None,
    }


def run_arena(
    base: RunConfig,
    estimators: Sequence[str],
    seeds: int,
    output_dir: str,
    eval_prompts: int = 64,
    max_seconds: float | None = None,
    echo=print,
) -> dict:
    """Train and evaluate every (seed, estimator) pair, one at a time; write and return the summary."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    with tempfile.TemporaryDirectory(prefix="rloo-arena-") as tmp:
        config_path = Path(tmp) / "base.yaml"
        save_config(base, config_path)
        log_path = out / f".arena-{stamp}.log"
        with open(log_path, "a") as log:
            for i in range(seeds):
                seed = base.seed + i
                for estimator in estimators:
                    name = f"arena-{stamp}-{estimator}-s{seed}"
                    echo(f"[arena] training {name} ...")
                    train = [sys.executable, "-m", "rloo_demo", "train", "--config", str(config_path)]
                    train += [
                        "--estimator",
                        estimator,
                        "--seed",
                        str(seed),
                        "--run-name",
                        name,
                        "--output-dir",
                        str(out),
                    ]
                    if max_seconds is not None:
                        train += ["--max-seconds", str(max_seconds)]
                    if estimator == "grpo":  # the meter measures RLOO's captured batch; GRPO runs go without it
                        train += ["--variance-every", "0"]
                        # and GRPO's group mean removes a constant offset exactly: the same run without it
                        train += ["--reward-offset", "0"]
                    code, rss = _run(train, log)
                    if code != 0:
                        echo(f"[arena] {name} failed (exit {code}); see {log_path}")
                        records.append({"run": name, "estimator": estimator, "seed": seed, "status": "failed"})
                        continue
                    echo(f"[arena] evaluating {name} ...")
                    evaluate = [sys.executable, "-m", "rloo_demo", "evaluate", "--run", str(out / name)]
                    evaluate += ["--num-prompts", str(eval_prompts)]
                    _run(evaluate, log)
                    records.append(run_record(out / name, estimator, seed, rss))
    rows = summarize([r for r in records if r.get("status") != "failed"])
    offset = (
        f", reward offset {base.reward_offset:g} (rloo and reinforce; grpo removes it and trains without)"
        if base.reward_offset
        else ""
    )
    settings = (
        f"Arena {stamp}: {len(estimators)} estimators x {seeds} seeds ({base.seed}..{base.seed + seeds - 1}), "
        f"{base.max_steps} steps, K={base.num_generations}, {base.prompts_per_step} prompts/step, beta={base.beta:g}, "
        f"lr={base.learning_rate:g}{offset}; held-out gain on {eval_prompts} prompts x 2 samples, sampling seed 0."
    )
    summary = {"name": f"arena-{stamp}", "settings": settings, "config": base.to_dict(), "rows": rows}
    summary["runs"] = [{k: v for k, v in r.items() if k != "evaluation"} for r in records]
    summary["markdown"] = markdown_table(rows, settings)
    atomic_write_text(out / f"arena-{stamp}.json", json.dumps(summary, indent=2) + "\n")
    atomic_write_text(out / f"arena-{stamp}.md", summary["markdown"] + "\n")
    return summary


def arena_estimators(names: Sequence[str]) -> list[str]:
    """The estimators asked for, checked (a ``UserError`` names the unknown one)."""

    for name in names:
        if name not in ESTIMATOR_CHOICES:
            raise InputError(f"unknown estimator {name!r}; use {', '.join(ESTIMATOR_CHOICES)}")
    if len(set(names)) != len(names):
        raise InputError("each estimator may appear only once")
    return list(names)
