"""``python -m rloo_demo trajectory`` (``rloo_demo.exact.command``): it prints the table and writes the lesson, and
refuses bad input with one ``error:`` line and status 2. ``python -m pytest tests/exact/test_command.py`` (a few
seconds; one test starts the real command in a subprocess).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rloo_demo.cli import main
from rloo_demo.exact import command, report
from rloo_demo.exact.paths import Settings, trajectory

ROOT = Path(__file__).resolve().parents[2]


def test_it_prints_the_table_and_writes_the_lesson(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(command, "kaleido_installed", lambda: False)
    monkeypatch.setattr(report, "kaleido_installed", lambda: False)
    out = tmp_path / "lessons"
    assert main(["trajectory", "--k", "3", "--steps", "20", "--seeds", "4", "--seed", "5", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    table = report.markdown_table(trajectory(Settings(k=3, steps=20, seeds=4, seed=5)))
    assert captured.out == (
        f"{table}\n\nwrote {out / 'trajectory.json'}\n"
        "no PNG: kaleido is not installed (pip install kaleido); the figure is in the JSON, for plotly\n"
    )
    assert captured.err.startswith("computed in ")
    assert (out / "trajectory.json").is_file()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--k", "1"], "--k must be between 2 and 8, not 1"),
        (["--k", "9"], "--k must be between 2 and 8, not 9"),
        (["--beta", "-0.1"], "--beta must be between 0 and 10, not -0.1"),
        (["--beta", "nan"], "--beta must be a finite number"),
        (["--steps", "0"], "--steps must be between 1 and 10000, not 0"),
        (["--steps", "-5"], "--steps must be between 1 and 10000, not -5"),
        (["--lr", "0"], "--lr must be between 1e-06 and 100, not 0.0"),
        (["--seeds", "0"], "--seeds must be between 1 and 1000"),
        (["--k", "two"], "invalid int value: 'two'"),
    ],
)
def test_bad_input_is_one_error_line_and_status_2(argv, needle, tmp_path, capsys):
    assert main(["trajectory", *argv, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], captured.err
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_the_real_command_refuses_and_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}

    def run(*argv):
        return subprocess.run(
            [sys.executable, "-m", "rloo_demo", "trajectory", *argv, "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )

    refused = run("--beta", "-1")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == "error: --beta must be between 0 and 10, not -1.0\n"
    done = run("--steps", "5", "--seeds", "2")
    assert done.returncode == 0, done.stderr
    assert "| rloo | " in done.stdout and f"wrote {tmp_path / 'trajectory.json'}" in done.stdout
