"""``report_to trackio`` works offline: trackio is an optional extra (``pip install 'rloo-demo[trackio]'``,
installed by requirements-dev.txt), local-first, and a 2-step run writes its metrics into trackio's local database
under the project ``rloo-demo`` and the run's name. ``python -m pytest tests/test_trackio.py`` (about a minute).
"""

import json
import os
import sqlite3
import subprocess
import sys
import tomllib

from conftest import ROOT

from rloo_demo.config import RunConfig


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
