"""The estimator lab's command line: ``variance`` (also under a reward offset) and ``arena`` with tiny settings.

``python -m pytest tests/test_lab_cli.py`` (a tiny run, one variance measurement, and an arena of 3 estimators x 1
seed x 2 steps, each run in its own process: a few minutes on 2 cores; marked slow).
"""

import json
import re

import pytest

from rloo_demo.advantages import ESTIMATORS
from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine.training import train
from rloo_demo.store.jsonl import save_config

pytestmark = pytest.mark.slow

TINY = dict(max_steps=2, prompts_per_step=2, num_generations=4, max_new_tokens=8)


def table_rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines() if line.startswith("|")
    ]


def test_variance_cli_prints_one_row_per_estimator(tmp_path, capsys):
    state = train(RunConfig(**TINY, output_dir=str(tmp_path)))
    assert state.status == "finished", state.error
    assert cli_main(["variance", "--run", str(state.run.path), "--steps", "1"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    header = rows[0]
    assert header[:3] == ["estimator", "variance_vs_rloo", "cosine_to_reference"]
    body = {r[0]: r for r in rows[2:]}
    assert list(body) == list(ESTIMATORS)
    assert float(body["rloo"][1]) == pytest.approx(1.0)
    assert float(body["dr_grpo"][1]) == pytest.approx((3 / 4) ** 2, abs=2e-3)  # a scaled RLOO
    assert all(-1 <= float(r[2]) <= 1 for r in body.values())
    assert cli_main(["variance", "--run", str(state.run.path), "--steps", "0"]) == 2
    capsys.readouterr()
    # the same run, draws and seed under an offset C: leave-one-out's variance is the same, REINFORCE's grows
    measured = {}
    for offset in ("0", "2"):
        argv = ["variance", "--run", str(state.run.path), "--steps", "1", "--reward-offset", offset, "--json"]
        assert cli_main(argv) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["reward_offset"] == float(offset)
        measured[offset] = {r["estimator"]: r["variance"] for r in result["rows"]}
    for name in ("rloo", "grpo", "dr_grpo", "batch_mean"):
        assert measured["2"][name] == pytest.approx(measured["0"][name], rel=1e-4), name
    assert measured["2"]["reinforce"] > 2 * measured["0"]["reinforce"]


def test_arena_cli_runs_paired_estimators_and_prints_the_table(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    save_config(RunConfig(**TINY), config)
    out_dir = tmp_path / "runs"
    code = cli_main(
        [
            "arena",
            *("--estimators", "rloo", "grpo", "reinforce"),
            *("--seeds", "1", "--max-steps", "2", "--eval-prompts", "2"),
            *("--config", str(config), "--output-dir", str(out_dir)),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    header = " | ".join(rows[0])
    for column in ("held-out gain [95% CI]", "KL to base", "mean step time (s)", "peak RSS (MB)", "models held"):
        assert column in header
    body = [r for r in rows[2:]]
    assert [r[0] for r in body] == ["rloo", "grpo", "reinforce", "ppo (not run)"]
    for r in body[:3]:
        assert r[1] == "1"  # one seed
        assert re.match(r"[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", r[2]), r
        assert float(r[6]) > 0 and float(r[7]) > 100  # step time, peak RSS of the training process
        assert "policy 1.35M" in r[8] and "reference 1.35M" in r[8] and "vader_compound (lexicon, 0)" in r[8]
    assert "β enters RLOO's" in out
    summary = json.loads(next(out_dir.glob("arena-*.json")).read_text())
    names = [r["run"] for r in summary["runs"]]
    assert len(names) == 3 and all((out_dir / n / "model").is_dir() for n in names)
    assert all((out_dir / n / "evaluation.json").is_file() for n in names)
    estimators = [RunConfig.load(out_dir / n / "config.yaml").estimator for n in names]
    assert estimators == ["rloo", "grpo", "reinforce"]


def test_arena_cli_refuses_unknown_estimators(capsys):
    assert cli_main(["arena", "--estimators", "rloo", "ppo"]) == 2
    assert "unknown estimator 'ppo'" in capsys.readouterr().err
