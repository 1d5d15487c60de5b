"""What TRL's trackers receive: one 5-step run reporting to tensorboard and trackio at once leaves tensorboard event
files and a trackio store whose scalars equal the run's own ``metrics.jsonl``, step by step, for every metric the
run logged (the Train tab's plots among them). Offline, with trackio's local store.

``python -m pytest tests/engine/test_trackers.py`` (about a minute: one short run).

``report_to trackio`` works offline: trackio is an optional extra (``pip install 'rloo-demo[trackio]'``,
installed by requirements-dev.txt), local-first, and a 2-step run writes its metrics into trackio's local database
under the project ``rloo-demo`` and the run's name.
``python -m pytest tests/engine/test_trackers.py`` (about a minute)."""

import json
import math
import os
import sqlite3
import subprocess
import sys
import tomllib

import pytest
from conftest import ROOT

from rloo_demo.config import RunConfig

# ----------------------------------------------------------------------------- trackers


# the run's own bookkeeping in metrics.jsonl, which is no TRL metric and reaches no tracker
BOOKKEEPING = {"step", "max_steps", "time", "logged_at"}
# metrics the Train tab plots: each must reach the trackers
PLOTTED = {
    "reward",
    "reward_std",
    "kl",
    "grad_norm",
    "entropy",
    "completions/mean_length",
    "frac_reward_zero_std",
    "frac_raw_score_zero_std",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "judges/distinct_2",
    "judges/repetition",
}


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracked")
    env = dict(os.environ, TRACKIO_DIR=str(root / "trackio"), HF_HUB_OFFLINE="1")
    argv = [sys.executable, "-m", "rloo_demo", "train", "--report-to", "tensorboard,trackio", "--run-name", "both"]
    argv += ["--output-dir", str(root / "runs"), "--max-steps", "5", "--prompts-per-step", "2"]
    argv += ["--num-generations", "2", "--max-new-tokens", "8", "--seed", "7"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    folder = root / "runs" / "both"
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    return root, folder, records


def logged(records) -> dict[str, dict[int, float]]:
    """metric -> step -> value, as metrics.jsonl has them (the numbers only)."""
    out: dict[str, dict[int, float]] = {}
    for r in records:
        for key, value in r.items():
            if key not in BOOKKEEPING and isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(key, {})[r["step"]] = float(value)
    return out


def same(a: float, b: float) -> bool:
    """Equal as a float32 scalar keeps it (tensorboard's summaries are float32)."""
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7)


def test_tensorboards_scalars_are_the_runs_metrics_step_by_step(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, folder, records = tracked_run
    (events,) = list(folder.glob("trainer/runs/*/events.out.tfevents.*"))
    board = EventAccumulator(str(events), size_guidance={"scalars": 0})
    board.Reload()
    scalars = {tag.removeprefix("train/"): board.Scalars(tag) for tag in board.Tags()["scalars"]}
    ours = logged(records)
    assert PLOTTED <= set(ours)
    assert set(ours) <= set(scalars), sorted(set(ours) - set(scalars))
    for key, by_step in ours.items():
        theirs = {e.step: e.value for e in scalars[key]}
        assert set(theirs) >= set(by_step), key
        wrong = {s: (v, theirs[s]) for s, v in by_step.items() if not same(v, theirs[s])}
        assert not wrong, (key, wrong)


def test_trackios_store_holds_the_run_with_the_same_numbers(tracked_run):
    root, _, records = tracked_run
    database = root / "trackio" / "rloo-demo.db"  # one database per project
    with sqlite3.connect(database) as db:
        rows = db.execute("select run_name, step, metrics from metrics").fetchall()
    assert {run for run, _, _ in rows} == {"both"}
    theirs: dict[str, dict[int, float]] = {}
    for _, step, metrics in rows:
        for key, value in json.loads(metrics).items():
            if key.startswith("train/") and isinstance(value, int | float):
                theirs.setdefault(key.removeprefix("train/"), {})[step] = float(value)
    ours = logged(records)
    assert PLOTTED <= set(theirs), sorted(PLOTTED - set(theirs))
    for key, by_step in ours.items():
        wrong = {s: (v, theirs.get(key, {}).get(s)) for s, v in by_step.items() if not same(v, theirs[key][s])}
        assert not wrong, (key, wrong)


# ----------------------------------------------------------------------------- trackio


def test_trackio_is_an_optional_extra_and_a_dev_requirement():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["trackio"] == ["trackio==0.43.0"]
    assert "trackio==0.43.0" in (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert "trackio" not in (ROOT / "requirements.txt").read_text()  # the Space image does not need it
    assert "pip install 'rloo-demo[trackio]'" in (ROOT / "docs" / "reference.md").read_text()  # the config reference


def test_a_missing_tracker_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    problem = RunConfig(report_to="trackio").problems()["report_to"]
    assert "tracker 'trackio' is not installed here; pip install 'rloo-demo[trackio]'" in problem


def test_a_run_reports_to_trackio_offline(tmp_path):
    env = dict(os.environ, TRACKIO_DIR=str(tmp_path / "trackio"), HF_HUB_OFFLINE="1")
    argv = [sys.executable, "-m", "rloo_demo", "train", "--report-to", "trackio", "--run-name", "tracked"]
    argv += ["--output-dir", str(tmp_path / "runs"), "--max-steps", "2", "--prompts-per-step", "2"]
    argv += ["--num-generations", "2", "--max-new-tokens", "6"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    database = tmp_path / "trackio" / "rloo-demo.db"  # one database per project
    assert database.is_file()
    with sqlite3.connect(database) as db:
        rows = db.execute("select run_name, step, metrics from metrics").fetchall()
    logged = {}
    for run_name, step, metrics in rows:
        assert run_name == "tracked"
        for key, value in json.loads(metrics).items():
            logged.setdefault(key, {})[step] = value
    assert set(logged["train/reward"]) == {1, 2}  # both steps' reward, as the run's metrics.jsonl has them
    records = [json.loads(line) for line in (tmp_path / "runs" / "tracked" / "metrics.jsonl").read_text().splitlines()]
    assert [logged["train/reward"][r["step"]] for r in records] == [r["reward"] for r in records]
