"""The CLI's commands wired to the engine: what each flag becomes in the call it makes, and what it prints.

Training, evaluation and sampling themselves are tested where they live (test_engine, test_evaluation,
test_chat); here they are replaced by recorders, so each flag's value is checked where it arrives, and every
printed line word for word. ``python -m pytest tests/test_cli_commands.py`` (a few seconds).
"""

import json
import os
import signal
import sys
import types

import pytest

from rloo_demo import cli
from rloo_demo.chat import CHAT
from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig, help_text
from rloo_demo.engine import training
from rloo_demo.eval import evaluation
from rloo_demo.models import sampling
from rloo_demo.store.folder import RunFolder

RESULT = {
    "base_mean_reward": 0.125,
    "trained_mean_reward": 0.5,
    "difference": 0.375,
    "difference_ci95": [0.25, 0.5],
    "num_prompts": 3,
    "samples_per_prompt": 2,
    "seed": 7,
    "per_function": {"vader_compound": {"base": 0.1, "trained": 0.6}},
    "heldout_scorers": [],
    "kl_trained_vs_base": 0.75,
    "samples": [{"prompt": "p", "base": "b", "trained": "t"}],
}


@pytest.fixture
def sigterm():
    """cmd_train installs a SIGTERM handler; the test's process gets its own back."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _fake_train(monkeypatch, tmp_path, status="finished", error=None, with_folder=True):
    calls = []

    def train(config, state, progress=False, stop_file=None):
        calls.append({"config": config, "state": state, "progress": progress, "stop_file": stop_file})
        state.run = RunFolder.create(config) if with_folder else None
        state.status, state.error = status, error
        return state

    monkeypatch.setattr(training, "train", train)
    return calls


def test_train_passes_its_flags_to_the_engine_and_prints_the_folder_and_status(monkeypatch, tmp_path, capsys, sigterm):
    calls = _fake_train(monkeypatch, tmp_path)
    argv = [
        "train",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "cli-run",
        "--max-steps",
        "7",
        "--seed",
        "5",
        "--max-seconds",
        "30",
        "--stop-file",
        str(tmp_path / "stop"),
    ]
    assert cli_main(argv) == 0
    (call,) = calls
    assert (call["config"].max_steps, call["config"].seed, call["config"].run_name) == (7, 5, "cli-run")
    assert call["progress"] is True and call["stop_file"] == str(tmp_path / "stop")
    assert call["state"].budget_seconds == 30.0 and call["state"].config is call["config"]
    out = capsys.readouterr()
    assert out.out == f"run folder: {tmp_path / 'cli-run'}\nstatus: finished\n" and out.err == ""
    handler = signal.getsignal(signal.SIGTERM)  # SIGTERM asks the run to stop at the next step, with its reason
    handler(signal.SIGTERM, None)
    assert call["state"].stop_event.is_set() and call["state"].stop_reason == "it received SIGTERM"


def test_train_without_a_budget_gives_the_engine_none(monkeypatch, tmp_path, capsys, sigterm):
    calls = _fake_train(monkeypatch, tmp_path)
    assert cli_main(["train", "--output-dir", str(tmp_path), "--max-steps", "3"]) == 0
    assert calls[0]["state"].budget_seconds is None and calls[0]["stop_file"] is None


def test_train_checks_its_flags_once_and_the_engine_trusts_that_check(monkeypatch, tmp_path, capsys, sigterm):
    """The settings read from flags are unchecked: the CLI checks them (a bad one is refused by name, exit 2,
    before anything is written), and the engine's train() trusts that check rather than making its own."""
    checks = []
    real = RunConfig.problems
    monkeypatch.setattr(
        RunConfig, "problems", lambda self, *a, **k: checks.append(self.max_steps) or real(self, *a, **k)
    )
    monkeypatch.setattr(training, "check_resources", lambda config: checks.append("resources"))

    def no_model(config, state, **kwargs):
        raise RuntimeError("no model in this test")

    monkeypatch.setattr(training, "build_trainer", no_model)
    assert cli_main(["train", "--output-dir", str(tmp_path), "--run-name", "once", "--max-steps", "3"]) == 1
    assert checks == [3, "resources"]  # one check of the settings, one of the resources
    assert capsys.readouterr().err == "error: run failed: RuntimeError: no model in this test\n"
    assert cli_main(["train", "--output-dir", str(tmp_path), "--run-name", "bad", "--max-steps", "0"]) == 2
    assert checks[2:] == [0] and "max_steps" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["once"]


def test_a_failed_run_prints_its_error_and_exits_with_1(monkeypatch, tmp_path, capsys, sigterm):
    _fake_train(monkeypatch, tmp_path, status="failed", error="the loss was nan")
    assert cli_main(["train", "--output-dir", str(tmp_path), "--run-name", "bad"]) == 1
    out = capsys.readouterr()
    assert out.out == f"run folder: {tmp_path / 'bad'}\nstatus: failed\n"
    assert out.err == "error: run failed: the loss was nan\n"


@pytest.mark.parametrize(("status", "code"), [("finished", 0), ("stopped", 0), ("failed", 1)])
def test_a_process_that_is_not_the_main_one_prints_nothing(monkeypatch, tmp_path, capsys, sigterm, status, code):
    _fake_train(monkeypatch, tmp_path, status=status, with_folder=False)
    assert cli_main(["train", "--output-dir", str(tmp_path)]) == code
    assert capsys.readouterr().out == ""


def test_train_warns_before_it_trains(monkeypatch, tmp_path, capsys, sigterm):
    order = []
    monkeypatch.setattr(cli, "prerun_warnings", lambda config: order.append("warned") or ["β 0 trains far", "two"])
    calls = _fake_train(monkeypatch, tmp_path)
    real = training.train
    monkeypatch.setattr(training, "train", lambda *a, **k: order.append("trained") or real(*a, **k))
    assert cli_main(["train", "--output-dir", str(tmp_path)]) == 0
    assert order == ["warned", "trained"] and len(calls) == 1
    assert capsys.readouterr().err == "warning: β 0 trains far\nwarning: two\n"


def test_train_then_evaluate_evaluates_the_new_run_with_the_defaults(monkeypatch, tmp_path, capsys, sigterm):
    _fake_train(monkeypatch, tmp_path)
    asked = []
    monkeypatch.setattr(cli, "cmd_evaluate", lambda args: asked.append(vars(args)) or 3)
    assert cli_main(["train", "--output-dir", str(tmp_path), "--run-name", "e", "--evaluate"]) == 3
    assert asked == [
        {
            "run": str(tmp_path / "e"),
            "num_prompts": 64,
            "samples_per_prompt": 2,
            "seed": 0,
            "temperature": 1.0,
            "top_p": 1.0,
            "json": False,
        }
    ]


def test_a_reward_module_flag_is_added_after_the_rewards(monkeypatch, tmp_path, sigterm):
    calls = _fake_train(monkeypatch, tmp_path)
    rewards = tmp_path / "r.py"
    rewards.write_text("def score(completions, **kw):\n    return [0.0 for _ in completions]\n")
    argv = [
        "train",
        "--output-dir",
        str(tmp_path),
        "--rewards",
        "length_penalty",
        "--reward-module",
        f"{rewards}:score",
        "--reward-weights",
        "1",
        "2",
    ]
    assert cli_main(argv) == 0
    assert calls[0]["config"].rewards == ["length_penalty", f"module:{rewards}:score"]


# ----------------------------------------------------------------------------- evaluate


def _run_with_model(tmp_path, name="done", **config):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=name, **config))
    (run.path / "model").mkdir()
    (run.path / "model" / "config.json").write_text("{}")
    run.set_status("finished")
    return run


class _Bar:
    """tqdm's bar as cmd_evaluate uses it, recorded (a real bar's lock hung mutants forked by mutmut)."""

    made = []

    def __init__(self, **kw):
        self.kw, self.shown, self.closed, self.n = kw, [], False, 0
        _Bar.made.append(self)

    def refresh(self):
        self.shown.append(self.n)

    def close(self):
        self.closed = True


@pytest.fixture(autouse=True)
def _recorded_bars(monkeypatch):
    import tqdm.auto

    _Bar.made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)


def _fake_models(monkeypatch, context=1024):
    loaded = []

    def load_policy(name):
        loaded.append(name)
        model = types.SimpleNamespace(config=types.SimpleNamespace(n_positions=context), name=name)
        return model, f"tokenizer of {name}"

    monkeypatch.setattr(cli, "load_policy", load_policy)
    return loaded


def test_evaluate_samples_both_models_with_the_flags_and_saves_the_result(monkeypatch, tmp_path, capsys):
    run = _run_with_model(tmp_path)
    loaded, calls = _fake_models(monkeypatch), []
    monkeypatch.setattr(evaluation, "heldout_prompts", lambda config, limit: [f"held {i}" for i in range(limit)])

    def evaluate(base, trained, tokenizer, config, prompts, samples, seed, temperature, top_p, progress):
        calls.append((base.name, trained.name, tokenizer, prompts, samples, seed, temperature, top_p))
        progress(1, 2)
        return dict(RESULT)

    monkeypatch.setattr(evaluation, "evaluate", evaluate)
    argv = [
        "evaluate",
        "--run",
        str(run.path),
        "--num-prompts",
        "3",
        "--samples-per-prompt",
        "2",
        "--seed",
        "7",
        "--temperature",
        "0.5",
        "--top-p",
        "0.75",
        "--json",
    ]
    assert cli_main(argv) == 0
    policy = RunConfig().policy
    assert loaded == [policy, str(run.path / "model")]
    assert calls == [
        (policy, str(run.path / "model"), f"tokenizer of {policy}", ["held 0", "held 1", "held 2"], 2, 7, 0.5, 0.75)
    ]
    assert json.loads(capsys.readouterr().out) == RESULT
    assert json.loads((run.path / "evaluation.json").read_text()) == RESULT
    (bar,) = _Bar.made  # one bar over both models' prompts, on stderr, moved by the evaluation's progress
    assert bar.kw == {"total": 6, "desc": "evaluate", "unit": "prompt", "file": sys.stderr}
    assert bar.shown == [1] and bar.closed


def test_evaluate_prints_the_report_unless_json_is_asked(monkeypatch, tmp_path, capsys):
    run = _run_with_model(tmp_path)
    _fake_models(monkeypatch)
    monkeypatch.setattr(evaluation, "heldout_prompts", lambda config, limit: ["p"])
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: dict(RESULT))
    assert cli_main(["evaluate", "--run", str(run.path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "base_mean_reward=0.1250",
        "trained_mean_reward=0.5000",
        "difference=+0.3750  95% bootstrap CI [+0.2500, +0.5000]  (3 held-out prompts x 2 samples, seed 7)",
    ]


def test_evaluate_refuses_a_run_without_a_model_and_bad_numbers_before_loading(monkeypatch, tmp_path, capsys):
    loaded = _fake_models(monkeypatch)
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="young"))
    run.set_status("stopped")
    assert cli_main(["evaluate", "--run", str(run.path)]) == 2
    assert capsys.readouterr().err == "error: run 'young' has no trained model yet (status: stopped)\n"
    for flag, value, message in [
        ("--samples-per-prompt", "0", "--samples-per-prompt must be between 1 and 1000, not 0"),
        ("--seed", "-1", "--seed must be between 0 and 4294967295, not -1"),
        ("--temperature", "10.5", "--temperature must be between 0.01 and 10, not 10.5"),
        ("--top-p", "0", "--top-p must be between 0.01 and 1, not 0.0"),
    ]:
        assert cli_main(["evaluate", "--run", str(run.path), flag, value]) == 2
        assert capsys.readouterr().err.startswith(f"error: {message}"), flag
    assert loaded == []


# ----------------------------------------------------------------------------- infer


def _fake_sample(monkeypatch, texts=(" great", " dull")):
    calls = []

    def sample(model, tokenizer, prompt, n, max_new_tokens, temperature, top_p, seed):
        calls.append((model.name, tokenizer, prompt, n, max_new_tokens, temperature, top_p, seed))
        return [{"text": t} for t in texts[:n]]

    monkeypatch.setattr(sampling, "sample", sample)
    return calls


def test_infer_from_a_model_continues_the_prompt_with_each_flag(monkeypatch, capsys):
    loaded, calls = _fake_models(monkeypatch), _fake_sample(monkeypatch)
    argv = [
        "infer",
        "--model",
        "embedded:tiny-imdb-gpt2",
        "--prompt",
        "It was",
        "--num-samples",
        "2",
        "--max-new-tokens",
        "9",
        "--temperature",
        "0.5",
        "--top-p",
        "0.9",
        "--seed",
        "3",
    ]
    assert cli_main(argv) == 0
    assert loaded == ["embedded:tiny-imdb-gpt2"]
    assert calls == [("embedded:tiny-imdb-gpt2", "tokenizer of embedded:tiny-imdb-gpt2", "It was", 2, 9, 0.5, 0.9, 3)]
    assert capsys.readouterr().out == "It was great\nIt was dull\n"


def test_infer_from_a_chat_run_sends_messages_with_the_runs_system_prompt(monkeypatch, tmp_path, capsys):
    run = _run_with_model(tmp_path, system_prompt="Be kind.")
    _fake_models(monkeypatch)
    calls = _fake_sample(monkeypatch, texts=("Sure.",))
    seen = []
    monkeypatch.setattr(cli, "effective_template", lambda config, folder: seen.append(folder) or CHAT)
    assert cli_main(["infer", "--run", str(run.path), "--prompt", "Hi"]) == 0
    assert seen == [run.path / "model"]  # the trained tokenizer's template, not the base's
    assert calls[0][2] == [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}]
    assert calls[0][3:] == (1, 40, 0.8, 0.95, 0)  # the flags' defaults
    assert capsys.readouterr().out == "user: Hi\nassistant: Sure.\n"
    assert cli_main(["infer", "--run", str(run.path), "--prompt", "Hi", "--system-prompt", "Be brief."]) == 0
    assert calls[1][2][0] == {"role": "system", "content": "Be brief."}  # the flag wins over the run's


def test_infer_from_a_continuation_run_sends_the_text(monkeypatch, tmp_path, capsys):
    run = _run_with_model(tmp_path, system_prompt=None)
    loaded = _fake_models(monkeypatch)
    calls = _fake_sample(monkeypatch, texts=(" on.",))
    monkeypatch.setattr(cli, "effective_template", lambda config, folder: "continuation")
    assert cli_main(["infer", "--run", str(run.path), "--prompt", "Read"]) == 0
    assert loaded == [str(run.path / "model")] and calls[0][2] == "Read"
    assert capsys.readouterr().out == "Read on.\n"


def test_infer_from_a_chat_model_without_a_run_uses_only_the_flags_system_prompt(monkeypatch, capsys):
    _fake_models(monkeypatch)
    calls = _fake_sample(monkeypatch, texts=("Yes.",))
    monkeypatch.setattr(cli, "has_chat_template", lambda folder: True)
    assert cli_main(["infer", "--model", "embedded:tiny-imdb-gpt2", "--prompt", "Q"]) == 0
    assert calls[0][2] == [{"role": "user", "content": "Q"}]
    assert cli_main(["infer", "--model", "embedded:tiny-imdb-gpt2", "--prompt", "Q", "--system-prompt", "S"]) == 0
    assert calls[1][2] == [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]


def test_infer_refuses_what_the_models_context_cannot_hold(monkeypatch, tmp_path, capsys):
    _fake_models(monkeypatch, context=64)
    calls = _fake_sample(monkeypatch)
    assert cli_main(["infer", "--model", "embedded:tiny-imdb-gpt2", "--max-new-tokens", "64"]) == 2
    assert capsys.readouterr().err == "error: --max-new-tokens 64 does not fit this model's context of 64 tokens\n"
    assert cli_main(["infer", "--model", "embedded:tiny-imdb-gpt2", "--max-new-tokens", "63"]) == 0
    assert calls[0][4] == 63
    young = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="young"))
    assert cli_main(["infer", "--run", str(young.path)]) == 2
    assert capsys.readouterr().err == "error: run 'young' has no trained model (status: running)\n"
    for flag, value in [("--seed", "-1"), ("--top-p", "1.5"), ("--num-samples", "1001")]:
        assert cli_main(["infer", "--model", "embedded:tiny-imdb-gpt2", flag, value]) == 2, flag
        assert capsys.readouterr().err.startswith(f"error: {flag} must be between"), flag


def test_toy_prints_the_exact_table_of_its_flags(capsys):
    from rloo_demo.toy import exact_table, markdown_table

    assert cli_main(["toy", "--eta", "0.5", "--k", "3", "--offset", "1"]) == 0
    assert capsys.readouterr().out == markdown_table(exact_table(0.5, 3, 1.0)) + "\n"


def test_a_bad_flag_exits_with_2_through_the_parser_itself(capsys):
    with pytest.raises(SystemExit) as err:
        cli.build_parser().parse_args(["train", "--max-steps", "ten"])
    assert err.value.code == 2
    assert capsys.readouterr().err == "error: argument --max-steps: invalid int value: 'ten' (see --help)\n"


# ----------------------------------------------------------------------------- config from flags, variance


def test_flags_override_the_config_file_and_reward_modules_follow_its_rewards(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("max_steps: 40\nseed: 3\nrewards: [vader_compound]\n")
    parse = cli.build_parser().parse_args
    args = parse(
        ["train", "--config", str(path), "--seed", "8", "--reward-module", "a.py:f", "--reward-module", "b.py:g"]
    )
    config = cli.config_from_args(args)
    assert (config.max_steps, config.seed) == (40, 8)
    assert config.rewards == ["vader_compound", "module:a.py:f", "module:b.py:g"]
    assert cli.config_from_args(parse(["train", "--config", str(path)])).rewards == ["vader_compound"]
    defaults = cli.config_from_args(parse(["train", "--reward-module", "a.py:f"]))
    assert defaults.rewards == [*RunConfig().rewards, "module:a.py:f"]  # no file: after the default rewards
    path.write_text("rewards: vader_compound\n")  # not a list: left for the type check to name
    wrong = cli.config_from_args(parse(["train", "--config", str(path), "--reward-module", "a.py:f"]))
    assert wrong.rewards == "vader_compound"
    assert cli.config_from_args(types.SimpleNamespace(max_steps=9)).max_steps == 9  # arena's flags: no config key


VARIANCE = {
    "run": "done",
    "at": "base",
    "steps": 3,
    "prompts_per_step": 4,
    "k": 5,
    "replicates": 6,
    "reward_offset": 0.5,
    "seconds": 12.4,
    "rows": [{"estimator": "rloo"}],
}


def test_variance_passes_its_flags_and_prints_the_header_and_table(monkeypatch, tmp_path, capsys):
    from rloo_demo.engine import meter, variance

    run = _run_with_model(tmp_path)
    calls = []

    def measure_run(folder, steps, at, seed, progress=None, reward_offset=None):
        calls.append((folder.path, steps, at, seed, reward_offset))
        progress(1, 3)
        return dict(VARIANCE)

    monkeypatch.setattr(meter, "measure_run", measure_run)
    monkeypatch.setattr(variance, "markdown_table", lambda rows: f"TABLE {rows}")
    argv = [
        "variance",
        "--run",
        str(run.path),
        "--steps",
        "1000",
        "--at",
        "base",
        "--seed",
        str(2**32 - 1),
        "--reward-offset",
        "0.5",
    ]
    assert cli_main(argv) == 0
    assert calls == [(run.path, 1000, "base", 2**32 - 1, 0.5)]
    out = capsys.readouterr()
    assert out.err == "measured 1/3 batches\n"
    assert out.out == (
        "Gradient variance on done (base policy): 3 batches of 4 prompts x K=5, 6 replicates each (reference: 5x the "
        "batch), reward offset 0.5, 12 s\n\nTABLE [{'estimator': 'rloo'}]\n"
    )
    assert cli_main(["variance", "--run", str(run.path), "--json"]) == 0
    assert capsys.readouterr().out == json.dumps(VARIANCE, indent=2) + "\n"
    assert calls[-1] == (run.path, 5, "trained", 0, None)  # the flags' defaults
    for flag, value, message in [
        ("--steps", "1001", "--steps must be between 1 and 1000, not 1001"),
        ("--seed", str(2**32), f"--seed must be between 0 and {2**32 - 1}, not {2**32}"),
    ]:
        assert cli_main(["variance", "--run", str(run.path), flag, value]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"


def test_each_commands_bounds_take_their_largest_value(monkeypatch, tmp_path, capsys):
    run = _run_with_model(tmp_path)
    _fake_models(monkeypatch, context=200_000)
    calls = _fake_sample(monkeypatch)
    top = ["--seed", str(2**32 - 1)]
    model = ["infer", "--model", "embedded:tiny-imdb-gpt2"]
    assert cli_main([*model, "--num-samples", "1000", "--max-new-tokens", "100000", *top]) == 0
    assert calls[0][3:] == (1000, 100000, 0.8, 0.95, 2**32 - 1)
    assert cli_main([*model, "--max-new-tokens", "100001"]) == 2
    assert capsys.readouterr().err.startswith("error: --max-new-tokens must be between 1 and 100000")
    monkeypatch.setattr(evaluation, "heldout_prompts", lambda config, limit: ["p"] * limit)
    asked = []
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: asked.append(a[5:7]) or dict(RESULT))
    argv = ["evaluate", "--run", str(run.path), "--num-prompts", "100000", "--samples-per-prompt", "1000", *top]
    assert cli_main(argv) == 0 and asked == [(1000, 2**32 - 1)]
    capsys.readouterr()
    for flag, value in [("--num-prompts", "100001"), ("--samples-per-prompt", "1001"), ("--seed", str(2**32))]:
        assert cli_main(["evaluate", "--run", str(run.path), flag, value]) == 2, flag
        assert capsys.readouterr().err.startswith(f"error: {flag} must be between"), flag


# ----------------------------------------------------------------------------- arena


def test_arena_passes_its_flags_over_the_config_file_and_prints_the_table(monkeypatch, tmp_path, capsys):
    path = tmp_path / "base.yaml"
    path.write_text("max_steps: 40\nseed: 3\nrun_name: ignored\nlearning_rate: 0.001\n")
    calls = []

    def run_arena(base, estimators, seeds, output_dir, eval_prompts, max_seconds, echo):
        calls.append((base, estimators, seeds, output_dir, eval_prompts, max_seconds))
        echo("[arena] training ...")
        return {"markdown": "| the table |"}

    monkeypatch.setattr(cli, "run_arena", run_arena)
    argv = [
        "arena",
        "--estimators",
        "reinforce",
        "rloo",
        "--seeds",
        "100",
        "--max-steps",
        "12",
        "--output-dir",
        str(tmp_path / "out"),
        "--config",
        str(path),
        "--eval-prompts",
        "100000",
        "--max-seconds",
        "30",
        "--reward-offset",
        "1.5",
    ]
    assert cli_main(argv) == 0
    ((base, estimators, seeds, output_dir, eval_prompts, max_seconds),) = calls
    assert (estimators, seeds, output_dir, eval_prompts, max_seconds) == (
        ["reinforce", "rloo"],
        100,
        str(tmp_path / "out"),
        100000,
        30.0,
    )
    assert (base.max_steps, base.seed, base.learning_rate, base.reward_offset) == (12, 3, 0.001, 1.5)
    assert base.output_dir == str(tmp_path / "out") and base.run_name is None  # each run is named by the arena
    out = capsys.readouterr()
    assert out.out == "| the table |\n" and out.err == "[arena] training ...\n"


def test_arena_without_flags_runs_the_defaults(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli, "run_arena", lambda base, *a, **k: calls.append((base, *a)) or {"markdown": "t"})
    assert cli_main(["arena"]) == 0
    base, estimators, seeds, output_dir, eval_prompts, max_seconds = calls[0]
    defaults = RunConfig()
    assert (estimators, seeds, output_dir, eval_prompts, max_seconds) == (
        ["rloo", "grpo", "reinforce"],
        3,
        "runs",
        64,
        None,
    )
    assert (base.max_steps, base.reward_offset, base.seed) == (
        defaults.max_steps,
        defaults.reward_offset,
        defaults.seed,
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--seeds", "101"], "--seeds must be between 1 and 100, not 101"),
        (["--seeds", "0"], "--seeds must be between 1 and 100, not 0"),
        (["--eval-prompts", "100001"], "--eval-prompts must be between 1 and 100000, not 100001"),
        (["--max-steps", "0"], "--max-steps must be between 1 and 1000000, not 0"),
        (["--max-steps", "1000001"], "--max-steps must be between 1 and 1000000, not 1000001"),
        (["--max-seconds", "0.5"], "--max-seconds must be between 1 and 1e+09, not 0.5"),
        (["--estimators", "rloo", "rloo"], "each estimator may appear only once"),
    ],
)
def test_arena_refuses_each_bad_flag_before_anything_runs(monkeypatch, capsys, flags, message):
    monkeypatch.setattr(cli, "run_arena", lambda *a, **k: pytest.fail("the arena ran"))
    assert cli_main(["arena", *flags]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_arena_takes_the_largest_steps_and_a_budget_of_one_second(monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "run_arena", lambda base, *a, **k: calls.append((base, *a)) or {"markdown": "t"})
    assert cli_main(["arena", "--max-steps", "1000000", "--max-seconds", "1", "--seeds", "1"]) == 0
    assert calls[0][0].max_steps == 1_000_000 and calls[0][5] == 1.0


# ----------------------------------------------------------------------------- main, flags, bounds


def test_main_reports_each_kind_of_failure_with_its_status(monkeypatch, capsys):
    def raising(exc):
        def cmd(args):
            raise exc

        return cmd

    from rloo_demo.errors import UserError

    for exc, code, line in [
        (UserError("two\n   lines  here"), 2, "error: two lines here"),
        (OSError(28, "No space left on device"), 1, "error: [Errno 28] No space left on device"),
        (KeyboardInterrupt(), 130, "error: interrupted"),
    ]:
        monkeypatch.setattr(cli, "cmd_toy", raising(exc))
        assert cli_main(["toy"]) == code
        out = capsys.readouterr()
        assert (out.out, out.err) == ("", line + "\n"), line


def test_main_turns_a_parsers_exit_without_a_number_into_2(monkeypatch):
    class Exiting:
        def parse_args(self, argv):
            raise SystemExit("not a number")

    monkeypatch.setattr(cli, "build_parser", lambda: Exiting())
    assert cli_main(["toy"]) == 2
    assert cli_main(["toy", "--help"]) == 2


def test_main_turns_tokenizer_threads_off_unless_told_otherwise(monkeypatch, capsys):
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    cli_main(["toy"])

    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    cli_main(["toy"])
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"


def test_every_setting_is_a_flag_of_its_type_with_its_default_in_the_help(capsys):
    parse = cli.build_parser().parse_args
    args = parse(
        [
            "train",
            "--use-lora",
            "--no-bf16",
            "--rewards",
            "a",
            "b",
            "--reward-weights",
            "1",
            "0.5",
            "--generation-batch-size",
            "8",
            "--learning-rate",
            "1e-4",
        ]
    )
    assert (args.use_lora, args.bf16, args.rewards, args.reward_weights) == (True, False, ["a", "b"], [1.0, 0.5])
    assert args.generation_batch_size == 8 and type(args.generation_batch_size) is int
    assert args.learning_rate == 1e-4 and not hasattr(parse(["train"]), "max_steps")  # unset: the config decides
    assert cli_main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "run settings (override --config):" in text
    assert f"--max-steps MAX_STEPS {help_text('max_steps')}" in text
    assert "--max-steps MAX_STEPS optimisation steps (>= 1) (default: 150)" in text  # its range written in
    assert f"(default: {RunConfig().max_steps})" in text and f"(default: {RunConfig().rewards})" in text
    assert "--rewards X [X ...]" in text and "--use-lora, --no-use-lora" in text


def test_the_budget_flags_take_one_second_to_a_billion(monkeypatch, tmp_path, capsys, sigterm):
    _fake_train(monkeypatch, tmp_path)
    monkeypatch.setattr(cli, "run_arena", lambda *a, **k: {"markdown": "t"})
    for command in (["train", "--output-dir", str(tmp_path)], ["arena"]):
        for ok in ("1", "1e9"):
            assert cli_main([*command, "--max-seconds", ok]) == 0, (command, ok)
        for bad in ("0.99", "1000000001"):
            assert cli_main([*command, "--max-seconds", bad]) == 2, (command, bad)
            assert "--max-seconds must be between 1 and 1e+09" in capsys.readouterr().err


def test_evaluate_gives_the_runs_config_to_the_prompts_and_the_evaluation(monkeypatch, tmp_path, capsys):
    run = _run_with_model(tmp_path, max_new_tokens=13)
    _fake_models(monkeypatch)
    configs = []
    monkeypatch.setattr(evaluation, "heldout_prompts", lambda config, limit: configs.append(config) or ["p"])
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: configs.append(a[3]) or dict(RESULT))
    assert cli_main(["evaluate", "--run", str(run.path), "--num-prompts", "1", "--json"]) == 0
    assert [c.max_new_tokens for c in configs] == [13, 13] and configs[0].run_name == "done"
    assert capsys.readouterr().out == json.dumps(RESULT, indent=2) + "\n"


def test_infer_reads_a_models_context_from_either_key_and_the_template_from_the_runs_config(
    monkeypatch, tmp_path, capsys
):
    run = _run_with_model(tmp_path, prompt_template="continuation")
    calls = _fake_sample(monkeypatch)

    def load_policy(name):
        return types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=32), name=name), "tok"

    monkeypatch.setattr(cli, "load_policy", load_policy)
    seen = []
    monkeypatch.setattr(cli, "effective_template", lambda config, folder: seen.append(config) or "continuation")
    assert cli_main(["infer", "--run", str(run.path), "--max-new-tokens", "32"]) == 2
    assert capsys.readouterr().err == "error: --max-new-tokens 32 does not fit this model's context of 32 tokens\n"
    assert seen[0].prompt_template == "continuation" and seen[0].run_name == "done"
    assert cli_main(["infer", "--run", str(run.path), "--max-new-tokens", "31"]) == 0 and calls[0][4] == 31
    assert cli_main(["infer", "--model", "embedded:tiny-imdb-gpt2", "--seed", str(2**32)]) == 2
    assert capsys.readouterr().err == "error: --seed must be between 0 and 4294967295, not 4294967296\n"


def test_infer_on_a_model_that_names_no_context_samples_without_a_check(monkeypatch, capsys):
    calls = _fake_sample(monkeypatch)
    monkeypatch.setattr(
        cli, "load_policy", lambda name: (types.SimpleNamespace(config=types.SimpleNamespace(), name=name), "tok")
    )
    assert cli_main(["infer", "--model", "embedded:tiny-imdb-gpt2", "--max-new-tokens", "5000"]) == 0
    assert calls[0][4] == 5000


def test_no_command_is_one_error_line_and_status_2(capsys):
    assert cli_main([]) == 2
    assert capsys.readouterr().err == "error: the following arguments are required: command (see --help)\n"
