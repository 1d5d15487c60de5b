"""The lesson's table, figure and file (``rloo_demo.exact.report``), and the shipped lesson
assets/lessons/trajectory.json against what its own command builds now: ``python -m pytest tests/exact/test_report.py``
(a few seconds).
"""

import json
import shlex
from pathlib import Path

import plotly.graph_objects as go
import pytest

from rloo_demo import cli
from rloo_demo.exact import report
from rloo_demo.exact.command import settings_from
from rloo_demo.exact.paths import Settings, trajectory

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "lessons" / "trajectory.json"


@pytest.fixture
def small():  # per test, not per module: mutation testing links a mutant to the tests that ran its code
    return trajectory(Settings(k=3, beta=0.1, steps=12, lr=1.5, seeds=14, seed=2))


def test_the_table_has_one_row_per_estimator_with_its_numbers(small):
    lines = report.markdown_table(small).splitlines()
    assert "K = 3, beta = 0.1; 12 steps of lr 1.5 from pi_ref; 14 sampled seeds from seed 2" in lines[0]
    assert lines[2] == f"KL-regularised optimum pi*_beta ~ pi_ref * exp(r / beta): E[r] = {small['optimum_reward']:.4f}"
    assert lines[4].count("|") == 6 and "exact path KL to pi*" in lines[4]
    for line, name in zip(lines[6:], ["rloo", "grpo", "dr_grpo", "reinforce"], strict=True):
        est = small["estimators"][name]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells == [
            name,
            f"{est['exact_reward'][-1]:.4f}",
            f"{est['sampled_mean'][-1]:.4f} +- {est['sampled_error'][-1]:.4f}",
            f"{est['exact_kl_to_optimum'][-1]:.4f}",
            f"{est['sampled_final_kl']:.4f} +- {est['sampled_final_kl_error']:.4f}",
        ]


def test_without_a_kl_term_the_table_has_no_optimum_columns():
    lines = report.markdown_table(trajectory(Settings(k=2, beta=0.0, steps=3, seeds=2))).splitlines()
    assert lines[2] == "beta = 0: no KL-regularised optimum (the best action alone, E[r] = 1)"
    assert lines[4].count("|") == 4 and "KL" not in lines[4]


def test_the_figure_is_a_plotly_figure_with_four_panels(small):
    fig = report.figure(small)
    built = go.Figure(fig)  # plotly validates every property: a misspelt one raises
    assert len(built.data) == 4 * (10 + 3)  # 10 of the 14 seeds shown, the mean, the exact path, pi*_beta
    exact = [t for t in fig["data"] if t["name"] == "exact expected-update path"]
    assert [t["yaxis"] for t in exact] == ["y", "y2", "y3", "y4"]
    assert exact[2]["y"] == [round(v, 5) for v in small["estimators"]["dr_grpo"]["exact_reward"]]
    assert sum(t["showlegend"] for t in fig["data"]) == 4  # one legend entry per kind of line


def test_the_command_line_computes_the_same_settings_again(small):
    line = report.command_line(Settings(**small["settings"]), "my lessons")
    args = cli.build_parser().parse_args(shlex.split(line)[3:])
    assert settings_from(args) == Settings(**small["settings"])
    assert args.out == "my lessons"


def test_write_makes_the_folder_and_a_png_only_with_kaleido(small, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "kaleido_installed", lambda: False)
    written = report.write(small, str(tmp_path / "a" / "b"))
    assert written == [tmp_path / "a" / "b" / "trajectory.json"]
    content = json.loads(written[0].read_text())
    assert content == json.loads(json.dumps(report.lesson(small, str(tmp_path / "a" / "b"))))

    import plotly.io

    images = []
    monkeypatch.setattr(report, "kaleido_installed", lambda: True)
    monkeypatch.setattr(plotly.io, "write_image", lambda fig, path, **kw: images.append((fig, path)))
    written = report.write(small, str(tmp_path))
    assert written == [tmp_path / "trajectory.json", tmp_path / "trajectory.png"]
    assert images == [(report.figure(small), tmp_path / "trajectory.png")]


def test_the_shipped_lesson_is_what_its_command_builds():
    shipped = json.loads(SHIPPED.read_text())
    argv = shlex.split(shipped["command"])
    assert argv[:3] == ["python", "-m", "rloo_demo"] and argv[-2:] == ["--out", "assets/lessons"]
    args = cli.build_parser().parse_args(argv[3:])
    settings = settings_from(args)
    assert settings == Settings()  # the defaults: what `python -m rloo_demo trajectory` shows
    now = json.loads(json.dumps(report.lesson(trajectory(settings), args.out)))
    assert shipped.keys() == now.keys()
    for key in ("command", "settings", "rewards", "table"):
        assert shipped[key] == now[key], key
    for old, new in zip(shipped["rows"], now["rows"], strict=True):
        assert old.pop("estimator") == new.pop("estimator")
        assert old == pytest.approx(new, rel=1e-9)
    for old, new in zip(shipped["figure"]["data"], now["figure"]["data"], strict=True):
        assert old["y"] == pytest.approx(new["y"], abs=2e-5)  # rounded to 5 places: a last digit may flip
