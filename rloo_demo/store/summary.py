"""A run's end-of-run summary: what happened, in a few numbers, kept in the run's folder as ``summary.json``.

The reward, the completion length, the KL to the reference and the judges of the text, each as its mean over the
first and over the last steps of the run (``WINDOW`` steps each: one step's reward is one batch's, noisy), from the
records of ``metrics.jsonl``. Pure arithmetic on the records; the page adds what the judges' thresholds say
(``ui.views.train``), since this layer does not know them. Written once the run has ended, read by the Train tab.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from rloo_demo.store.jsonl import atomic_write_text

SUMMARY_FILE = "summary.json"
WINDOW = 5  # steps averaged at each end
# The figures a summary reports: its key, and the metric it averages (TRL's names, and the judges' the engine logs).
FIGURES = {
    "reward": "reward",
    "length": "completions/mean_length",
    "kl": "kl",
    "distinct_2": "judges/distinct_2",
    "repetition": "judges/repetition",
}


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(records: Sequence[dict], window: int = WINDOW) -> dict:
    """``{"steps", "window", <figure>: {"first", "last"}}`` from a run's step records. A figure the run never logged
    (no KL with beta = 0, no judges in an old run) is absent; each end averages the up to ``window`` steps that
    logged it there."""
    out: dict = {"steps": 0, "window": window}
    steps = [r.get("step") for r in records if _number(r.get("step"))]
    if steps:
        out["steps"] = int(max(steps))
    for name, key in FIGURES.items():
        values = [float(r[key]) for r in records if _number(r.get(key))]
        if values:
            out[name] = {"first": _mean(values[:window]), "last": _mean(values[-window:])}
    return out


def write_summary(folder: str | Path, summary: dict) -> None:
    """Save ``summary`` as the run folder's ``summary.json``, atomically."""
    atomic_write_text(Path(folder) / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")


def read_summary(folder: str | Path) -> dict | None:
    """The saved summary, or None (not written yet, or unreadable)."""
    try:
        data = json.loads((Path(folder) / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
