"""The arena piece by piece, in this process: the commands it runs (each child replaced by a recorder that writes
what a real run would), the records and summary it keeps, its table word for word, and its statistics on toys
whose answers are worked out here. test_lab_cli.py runs a real arena (slow).

``python -m pytest tests/test_arena.py`` (a few seconds).

The estimator lab's command line: ``variance`` (also under a reward offset) and ``arena`` with tiny settings.

``python -m pytest tests/test_arena.py`` (a tiny run, one variance measurement, and an arena of 3 estimators x 1
seed x 2 steps, each run in its own process: a few minutes on 2 cores; marked slow)."""

import json
import math
import random
import re
import statistics
import sys
from pathlib import Path

import pytest

from rloo_demo import arena
from rloo_demo.advantages import ESTIMATORS
from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine.training import train
from rloo_demo.errors import InputError
from rloo_demo.store.jsonl import save_config

# ----------------------------------------------------------------------------- arena units


STAMP = "20261201-120000"


class _Time:
    formats = []

    @staticmethod
    def strftime(fmt):
        _Time.formats.append(fmt)
        return STAMP


class _Children:
    """``arena._run`` as the test wants it: each train writes a finished run folder (or fails), each evaluate an
    evaluation whose gain is the seed; every command and its log file recorded."""

    def __init__(self, fail=()):
        self.commands, self.logs, self.configs, self.fail = [], [], [], set(fail)

    def __call__(self, command, log):
        self.commands.append(command)
        self.logs.append(log.name)
        log.write("child output\n")
        kind = command[3]
        if kind == "train":
            config_path = Path(command[command.index("--config") + 1])
            self.configs.append((config_path.name, config_path.parent.name, RunConfig.load(config_path)))
            name = command[command.index("--run-name") + 1]
            if name in self.fail:
                return 1, 50.0
            folder = Path(command[command.index("--output-dir") + 1]) / name
            folder.mkdir(parents=True)
            (folder / "status.json").write_text(json.dumps({"status": "finished", "models": {"policy": 100}}))
            (folder / "metrics.jsonl").write_text(
                "".join(json.dumps({"step": s, "step_time": t}) + "\n" for s, t in ((1, 9.0), (2, 1.0), (3, 2.0)))
            )
            return 0, 300.0 + len(self.commands)
        folder = Path(command[command.index("--run") + 1])
        seed = int(folder.name.rsplit("-s", 1)[1])
        result = {
            "samples_per_prompt": 1,
            "base_rewards": [0.0, 0.0],
            "trained_rewards": [seed / 10, seed / 10],
            "kl_trained_vs_base": 0.5,
        }
        (folder / "evaluation.json").write_text(json.dumps(result))
        return 0, 10.0


@pytest.fixture
def children(monkeypatch):
    _Time.formats = []
    monkeypatch.setattr(arena, "time", _Time)
    made = _Children(fail={f"arena-{STAMP}-reinforce-s3"})
    monkeypatch.setattr(arena, "_run", made)
    return made


def test_the_arena_runs_each_estimator_for_each_seed_with_these_commands(children, tmp_path):
    out = tmp_path / "nested" / "runs"  # made with its parents
    base = RunConfig(seed=3, max_steps=6, num_generations=4, prompts_per_step=2, beta=0.02, learning_rate=1e-4)
    echoed = []
    summary = arena.run_arena(
        base, ["reinforce", "grpo"], 2, str(out), eval_prompts=5, max_seconds=30.0, echo=echoed.append
    )
    assert _Time.formats == ["%Y%m%d-%H%M%S"]
    py = [sys.executable, "-m", "rloo_demo"]

    def train(estimator, seed, extra=()):
        name = f"arena-{STAMP}-{estimator}-s{seed}"
        return [
            *py,
            "train",
            "--config",
            "CONFIG",
            "--estimator",
            estimator,
            "--seed",
            str(seed),
            "--run-name",
            name,
            "--output-dir",
            str(out),
            "--max-seconds",
            "30.0",
            *extra,
        ]

    def evaluate(estimator, seed):
        return [*py, "evaluate", "--run", str(out / f"arena-{STAMP}-{estimator}-s{seed}"), "--num-prompts", "5"]

    grpo = ["--variance-every", "0", "--reward-offset", "0"]
    commands = [[("CONFIG" if i and c[i - 1] == "--config" else a) for i, a in enumerate(c)] for c in children.commands]
    assert commands == [
        train("reinforce", 3),  # fails: not evaluated, and the seed's other estimator still runs
        train("grpo", 3, grpo),
        evaluate("grpo", 3),
        train("reinforce", 4),
        evaluate("reinforce", 4),
        train("grpo", 4, grpo),
        evaluate("grpo", 4),
    ]
    assert children.logs == [str(out / f".arena-{STAMP}.log")] * 7
    assert (out / f".arena-{STAMP}.log").read_text() == "child output\n" * 7
    name, folder, config = children.configs[0]
    assert name == "base.yaml" and folder.startswith("rloo-arena-") and config.to_dict() == base.to_dict()
    assert echoed == [
        f"[arena] training arena-{STAMP}-reinforce-s3 ...",
        f"[arena] arena-{STAMP}-reinforce-s3 failed (exit 1); see {out / f'.arena-{STAMP}.log'}",
        f"[arena] training arena-{STAMP}-grpo-s3 ...",
        f"[arena] evaluating arena-{STAMP}-grpo-s3 ...",
        f"[arena] training arena-{STAMP}-reinforce-s4 ...",
        f"[arena] evaluating arena-{STAMP}-reinforce-s4 ...",
        f"[arena] training arena-{STAMP}-grpo-s4 ...",
        f"[arena] evaluating arena-{STAMP}-grpo-s4 ...",
    ]
    assert summary["runs"][0] == {
        "run": f"arena-{STAMP}-reinforce-s3",
        "estimator": "reinforce",
        "seed": 3,
        "status": "failed",
    }
    assert all("evaluation" not in r for r in summary["runs"]) and len(summary["runs"]) == 4
    rows = {r["estimator"]: r for r in summary["rows"]}
    assert rows["reinforce"]["seeds"] == [4] and rows["grpo"]["seeds"] == [3, 4]  # the failed run left out
    assert rows["grpo"]["gain"] == pytest.approx(0.35)  # the seeds' gains 0.3 and 0.4
    assert rows["grpo"]["peak_rss_mb"] == 306.0  # the children's peaks as _run measured them: 302 and 306
    assert summary["settings"] == (
        f"Arena {STAMP}: 2 estimators x 2 seeds (3..4), 6 steps, K=4, 2 prompts/step, beta=0.02, lr=0.0001; "
        "held-out gain on 5 prompts x 2 samples, sampling seed 0."
    )
    assert summary["name"] == f"arena-{STAMP}" and summary["config"] == base.to_dict()
    assert summary["markdown"] == arena.markdown_table(summary["rows"], summary["settings"])
    assert (out / f"arena-{STAMP}.json").read_text() == json.dumps(summary, indent=2) + "\n"
    assert (out / f"arena-{STAMP}.md").read_text() == summary["markdown"] + "\n"


def test_an_arena_without_a_budget_evaluates_64_prompts_and_names_its_reward_offset(children, tmp_path):
    base = RunConfig(seed=0, reward_offset=1.5)
    summary = arena.run_arena(base, ["rloo"], 1, str(tmp_path), echo=lambda line: None)
    assert "--max-seconds" not in children.commands[0] and "--variance-every" not in children.commands[0]
    assert children.commands[1][-2:] == ["--num-prompts", "64"]
    assert summary["settings"].endswith(
        ", reward offset 1.5 (rloo and reinforce; grpo removes it and trains without); held-out gain on 64 prompts "
        "x 2 samples, sampling seed 0."
    )


def test_a_run_record_reads_a_finished_folder(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "status.json").write_text(json.dumps({"status": "stopped", "models": {"policy": 7}}))
    lines = [{"step": 1, "step_time": 50.0}, {"step": 2, "step_time": 1.0}, {"step": 3}, {"step": 4, "step_time": 2.0}]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    record = arena.run_record(folder, "rloo", 5, 123.5)
    assert record == {
        "run": "r",
        "estimator": "rloo",
        "seed": 5,
        "status": "stopped",
        "steps": 4,
        "step_seconds": 1.5,
        "peak_rss_mb": 123.5,
        "models": {"policy": 7},
        "evaluation": None,
    }
    (folder / "evaluation.json").write_text(json.dumps({"x": 1}))
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "step_time": 3.0}) + "\n")
    record = arena.run_record(folder, "rloo", 5, 1.0)
    assert record["evaluation"] == {"x": 1} and record["step_seconds"] is None  # only the first step: not counted


def test_a_child_process_is_run_to_its_end_with_its_output_in_the_log(tmp_path):
    log_path = tmp_path / "log"
    with open(log_path, "w") as log:
        child = "import sys; print('from the child'); print('its errors', file=sys.stderr); sys.exit(3)"
        code, rss = arena._run([sys.executable, "-c", child], log)
    assert code == 3 and log_path.read_text().split() == ["from", "the", "child", "its", "errors"]
    assert 1.0 < rss < 2000.0  # a Python interpreter's peak, in MB (not KB, not the parent's)


def test_a_childs_peak_is_its_own_whatever_the_size_of_the_process_that_starts_it(tmp_path):
    """A child forked from a large process reads that process's memory in its own ``ru_maxrss`` until its exec; the
    peak reported is the child's: a small interpreter's, although this process holds 800 MB more than it did."""
    ballast = bytearray(800 * 1024 * 1024)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touched, so resident
    with open(tmp_path / "log", "w") as log:
        code, rss = arena._run([sys.executable, "-c", "pass"], log)
    assert code == 0 and 1.0 < rss < 400.0, rss
    del ballast


# ----------------------------------------------------------------------------- the summary and its table


def _evaluation(gains, kl=None, judges=None, collapse=None):
    return {
        "samples_per_prompt": 1,
        "base_rewards": [0.0] * len(gains),
        "trained_rewards": list(gains),
        "kl_trained_vs_base": kl,
        "judges": judges,
        "collapse_warning": collapse,
    }


def test_the_summary_has_one_row_per_estimator_with_each_figure_by_hand():
    models = {"policy": 2_000_000, "reference": {"kind": "adapter off", "parameters": 0}}
    grpo_models = {"policy": 3}
    runs = [
        {
            "estimator": "rloo",
            "seed": 1,
            "step_seconds": 0.5,
            "peak_rss_mb": 700,
            "models": None,
            "evaluation": _evaluation([0.2, 0.4], kl=1.0, judges={"trained": {"distinct_2": 0.8, "repetition": 0.1}}),
        },
        {
            "estimator": "grpo",
            "seed": 1,
            "step_seconds": None,
            "peak_rss_mb": None,
            "models": grpo_models,
            "evaluation": _evaluation([0.1, 0.1], collapse="collapsed"),
        },
        {
            "estimator": "rloo",
            "seed": 2,
            "step_seconds": 1.5,
            "peak_rss_mb": 900,
            "models": models,
            "evaluation": _evaluation([0.0, 1.0], kl=float("nan"), judges={"trained": {"distinct_2": 0.6}}),
        },
        {"estimator": "rloo", "seed": 3, "step_seconds": 2.5, "peak_rss_mb": 800, "evaluation": None},
    ]
    rows = arena.summarize(runs)
    assert [r["estimator"] for r in rows] == ["rloo", "grpo"]
    rloo, grpo = rows
    assert (rloo["runs"], rloo["seeds"]) == (2, [1, 2])  # the run without an evaluation is no gain
    assert rloo["gain"] == pytest.approx((0.3 + 0.5) / 2)
    assert rloo["gain_ci95"] == list(arena.hierarchical_interval([[0.2, 0.4], [0.0, 1.0]]))
    assert rloo["kl_to_base"] == 1.0  # NaN left out of the mean
    assert rloo["distinct_2"] == pytest.approx(0.7) and rloo["repetition"] == 0.1 and rloo["collapsed"] == 0
    assert rloo["step_seconds"] == pytest.approx(1.5)  # all three runs' steps, the unevaluated one too
    assert rloo["peak_rss_mb"] == 900 and rloo["models"] == models and grpo["models"] == grpo_models
    assert grpo["collapsed"] == 1 and grpo["kl_to_base"] is None and grpo["distinct_2"] is None
    assert grpo["step_seconds"] is None and grpo["peak_rss_mb"] == 0
    assert arena.summarize([{"estimator": "rloo", "seed": 1, "evaluation": None}]) == [
        {"estimator": "rloo", "runs": 0, "seeds": [], "step_seconds": None, "peak_rss_mb": 0, "models": None}
    ]


def test_the_table_word_for_word():
    rows = [
        {
            "estimator": "rloo",
            "runs": 2,
            "gain": 0.25,
            "gain_ci95": [-0.125, 0.5],
            "kl_to_base": 1.25,
            "distinct_2": 0.8,
            "repetition": 0.05,
            "collapsed": 1,
            "step_seconds": 0.375,
            "peak_rss_mb": 712.4,
            "models": {
                "policy": 1_350_400,
                "reference": {"kind": "separate copy", "parameters": 1_350_400},
                "rewards": [{"name": "vader_compound", "kind": "lexicon", "parameters": 0}],
            },
        },
        {"estimator": "grpo", "runs": 0, "models": None},
    ]
    assert arena.markdown_table(rows, "the settings").splitlines() == [
        "the settings",
        "",
        "Models held in memory: rloo: policy 1.35M + reference 1.35M (separate copy) + reward vader_compound "
        "(lexicon, 0); grpo: ?.",
        "",
        "| estimator | runs | held-out gain [95% CI] | KL to base (nats) | distinct-2 | repetition | "
        "mean step time (s) | peak RSS (MB) |",
        "|---|---|---|---|---|---|---|---|",
        "| rloo | 2 | +0.250 [-0.125, +0.500] | 1.2 | 0.80 | 0.05 (1 collapsed) | 0.38 | 712 |",
        "| grpo | 0 | – [–, –] | – | – | – | – | – |",
        "| ppo (not run) | – | – | – | – | – | – | – |",
        "",
        "PPO (not run) would hold the policy, the reference, the reward and a value network of about the policy's "
        f"size (1.35M): {arena.PPO_NOTE}.",
        "",
        arena.BETA_NOTE,
    ]
    assert arena.markdown_table([]).splitlines()[0].startswith("| estimator |")  # no settings: no settings line
    assert "policy's size (?)" in arena.markdown_table([])


def test_the_models_held_are_said_once_when_every_estimator_held_the_same():
    models = {"policy": 2_000_000, "reference": {"kind": "adapter off", "parameters": 0}}
    rows = [{"estimator": name, "runs": 1, "models": dict(models)} for name in ("rloo", "grpo", "reinforce")]
    table = arena.markdown_table(rows)
    text = arena.models_text(models)
    assert table.count(text) == 1
    assert table.splitlines()[0] == f"Models held in memory, by every estimator: {text}."
    # two texts: each said once, with the estimators that held it, in the order first seen
    rows[1]["models"] = {"policy": 3}
    assert arena.models_line(rows) == f"Models held in memory: rloo, reinforce: {text}; grpo: policy 3."


def test_parameter_counts_are_millions_from_a_tenth_of_a_million():
    assert arena._params(99_999) == "99,999" and arena._params(100_000) == "0.10M" and arena._params(2.5e6) == "2.50M"
    assert arena._params(None) == "?" and arena._params("many") == "?" and arena._params(1e11) == "100000.00M"
    assert arena.models_text(None) == "?" and arena.models_text({}) == "?"
    assert arena.models_text({"policy": 5, "reference": None}) == "policy 5"
    assert arena._fmt(float("inf"), ".1f") == "–" and arena._fmt("x", ".1f") == "–" and arena._fmt(2, ".1f") == "2.0"


def test_a_mean_skips_what_is_not_a_finite_number():
    assert arena._mean([1, None, float("nan"), "2", float("inf"), 3.0]) == 2.0
    assert arena._mean([None, float("nan")]) is None and arena._mean([]) is None


def test_per_prompt_gains_average_each_prompts_samples():
    evaluation = {
        "samples_per_prompt": 2,
        "base_rewards": [0.0, 1.0, 2.0, 2.0],
        "trained_rewards": [1.0, 1.0, 0.0, 1.0],
    }
    assert arena.per_prompt_gains(evaluation) == [0.5, -1.5]


def test_the_two_level_interval_is_the_bootstrap_written_here():
    gains = [[0.1, 0.5, 0.3], [0.9, 0.2], [0.0, 0.4, 0.8, 0.6]]

    def by_hand(n, seed):
        rng = random.Random(seed)
        means = []
        for _ in range(n):
            picked = [gains[rng.randrange(len(gains))] for _ in gains]
            means.append(statistics.fmean(statistics.fmean(g[rng.randrange(len(g))] for _ in g) for g in picked))
        means.sort()
        return means[math.floor(n * 0.025)], means[math.ceil(n * 0.975) - 1]

    assert arena.hierarchical_interval(gains) == by_hand(2000, 0)
    rng = random.Random(1)
    gains = [[rng.gauss(0, 1) for _ in range(10)] for _ in range(8)]  # no ties among the means
    assert arena.hierarchical_interval(gains) == by_hand(2000, 0)
    assert arena.hierarchical_interval(gains, n_resamples=400, seed=7) == by_hand(400, 7)
    assert arena.hierarchical_interval([[0.25, 0.25], [0.25]]) == (0.25, 0.25)


def test_estimators_are_checked_by_name_and_once_each():
    assert arena.arena_estimators(["grpo", "rloo"]) == ["grpo", "rloo"]
    with pytest.raises(InputError) as err:
        arena.arena_estimators(["rloo", "ppo"])
    assert str(err.value) == "unknown estimator 'ppo'; use rloo, reinforce, grpo"
    with pytest.raises(InputError) as err:
        arena.arena_estimators(["rloo", "rloo"])
    assert str(err.value) == "each estimator may appear only once"


def test_an_estimator_whose_every_run_failed_has_no_row(monkeypatch, tmp_path):
    _Time.formats = []
    monkeypatch.setattr(arena, "time", _Time)
    monkeypatch.setattr(arena, "_run", _Children(fail={f"arena-{STAMP}-reinforce-s0", f"arena-{STAMP}-reinforce-s1"}))
    summary = arena.run_arena(RunConfig(seed=0), ["reinforce", "rloo"], 2, str(tmp_path), echo=lambda line: None)
    assert [r["estimator"] for r in summary["rows"]] == ["rloo"]
    assert [r["status"] for r in summary["runs"]] == ["failed", "finished", "failed", "finished"]


# ----------------------------------------------------------------------------- lab cli


# each test here trains and evaluates tiny runs in child processes

TINY = dict(max_steps=2, prompts_per_step=2, num_generations=4, max_new_tokens=8)


def table_rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines() if line.startswith("|")
    ]


@pytest.mark.slow
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


@pytest.mark.slow
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
    for column in ("held-out gain [95% CI]", "KL to base", "mean step time (s)", "peak RSS (MB)"):
        assert column in header
    body = [r for r in rows[2:]]
    assert [r[0] for r in body] == ["rloo", "grpo", "reinforce", "ppo (not run)"]
    # the models held, said once above the table: every estimator held the same two models and the lexicon
    held = next(line for line in out.splitlines() if line.startswith("Models held in memory"))
    assert "by every estimator" in held
    assert "policy 1.35M" in held and "reference 1.35M" in held and "vader_compound (lexicon, 0)" in held
    for r in body[:3]:
        assert r[1] == "1"  # one seed
        assert re.match(r"[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", r[2]), r
        assert float(r[6]) > 0 and float(r[7]) > 100  # step time, peak RSS of the training process
    assert "β enters RLOO's" in out
    summary = json.loads(next(out_dir.glob("arena-*.json")).read_text())
    names = [r["run"] for r in summary["runs"]]
    assert len(names) == 3 and all((out_dir / n / "model").is_dir() for n in names)
    assert all((out_dir / n / "evaluation.json").is_file() for n in names)
    estimators = [RunConfig.load(out_dir / n / "config.yaml").estimator for n in names]
    assert estimators == ["rloo", "grpo", "reinforce"]


@pytest.mark.slow
def test_arena_cli_refuses_unknown_estimators(capsys):
    assert cli_main(["arena", "--estimators", "rloo", "ppo"]) == 2
    assert "unknown estimator 'ppo'" in capsys.readouterr().err
