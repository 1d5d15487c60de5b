"""Every bad input to the CLI ends with one ``error:`` line and status 2, before any model loads.

``python -m pytest tests/test_cli.py`` (a few seconds).

The CLI's surface word for word: every command's help (each flag, its wording and default) against
``tests/golden/cli_help.json``, and every command's defaults as the parser gives them, written out here.

The help is the CLI's documentation, so a changed flag, default or sentence fails here. After a deliberate change,
read the diff of the rewritten file: ``UPDATE_GOLDEN=1 pytest tests/test_cli.py`` rewrites it and checks
nothing. ``python -m pytest tests/test_cli.py`` (a second). The commands' wiring: tests/test_cli_commands.py."""

import json
import os
from pathlib import Path

import pytest

from rloo_demo import cli
from rloo_demo.cli import main as cli_main

# ----------------------------------------------------------------------------- cli


@pytest.fixture
def bad_yaml(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("max_steps: [1,\n")
    return str(path)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["train", "--config", "BAD_YAML"], "not valid YAML"),
        (["train", "--max-steps", "0"], "max_steps: must be a positive whole number"),
        (["train", "--max-steps", "ten"], "invalid int value"),
        (["train", "--beta", "nan"], "beta: must be a finite number"),
        (["train", "--seed", "-1"], "seed: must be between 0"),
        (["train", "--run-name", "../x"], "run_name"),
        (["train", "--no-such-flag"], "unrecognized arguments"),
        (["train", "--max-seconds", "0"], "--max-seconds must be between"),
        (["infer", "--model", "embedded:tiny-imdb-gpt2", "--max-new-tokens", "100000"], "does not fit"),
        (["infer", "--model", "embedded:tiny-imdb-gpt2", "--max-new-tokens", "0"], "between 1 and"),
        (["infer", "--model", "embedded:tiny-imdb-gpt2", "--num-samples", "0"], "--num-samples must be between"),
        (["infer", "--model", "embedded:tiny-imdb-gpt2", "--temperature", "nan"], "--temperature must be a finite"),
        (["infer", "--model", "nobody/missing"], "not in the local Hugging Face cache"),
        (["infer"], "one of the arguments --run --model is required"),
        (["evaluate", "--run", "TMP"], "is not a run folder"),
        (["evaluate", "--run", "TMP", "--num-prompts", "0"], "--num-prompts must be between"),
        (["bogus"], "invalid choice"),
        (["train", "--reward-offset", "inf"], "reward_offset: must be a finite number"),
        (["train", "--reward-offset", "101"], "reward_offset: must be between -100 and 100"),
        (["train", "--estimator", "grpo", "--reward-offset", "1"], "removes any constant offset"),
        (["arena", "--reward-offset", "1e9"], "reward_offset: must be between"),
        (["variance", "--run", "TMP", "--reward-offset", "nan"], "--reward-offset must be a finite number"),
        (["toy", "--k", "1"], "K must be between 2 and 8"),
        (["toy", "--offset", "500"], "offset must be between"),
    ],
)
def test_bad_input_is_one_error_line_and_status_2(argv, needle, bad_yaml, tmp_path, capsys):
    argv = [bad_yaml if a == "BAD_YAML" else str(tmp_path) if a == "TMP" else a for a in argv]
    assert cli_main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert needle in lines[0]
    assert captured.out == ""


def test_help_is_not_an_error(capsys):
    assert cli_main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--max-seconds" in out
    assert "--reward-offset" in out  # generated from RunConfig.reward_offset, with its help
    for command in ("arena", "variance"):
        assert cli_main([command, "--help"]) == 0
        assert "--reward-offset" in capsys.readouterr().out


# ----------------------------------------------------------------------------- cli help


GOLDEN = Path(__file__).parent / "golden" / "cli_help.json"
COMMANDS = ["", "train", "evaluate", "infer", "variance", "arena", "toy", "trajectory"]


def _help(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # argparse wraps to the terminal's width
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args([command, "--help"] if command else ["--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_every_commands_help_is_what_the_golden_file_holds(capsys, monkeypatch):
    now = {command or "rloo_demo": _help(command, capsys, monkeypatch) for command in COMMANDS}
    if os.environ.get("UPDATE_GOLDEN"):  # rewrite and compare nothing: a file is not checked against itself
        GOLDEN.write_text(json.dumps(now, indent=1, ensure_ascii=False) + "\n")
        pytest.skip(f"UPDATE_GOLDEN: rewrote {GOLDEN.name}; read the diff, then run again")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(golden) == sorted(now)
    for command, text in now.items():
        assert text.splitlines() == golden[command].splitlines(), command


def test_every_command_has_these_defaults():
    parse = cli.build_parser().parse_args
    assert vars(parse(["train"])) == {
        "command": "train",
        "config": None,
        "trl_config": None,
        "evaluate": False,
        "stop_file": None,
        "max_seconds": None,
        "reward_module": None,
    }
    assert vars(parse(["evaluate", "--run", "r"])) == {
        "command": "evaluate",
        "run": "r",
        "num_prompts": 64,
        "samples_per_prompt": 2,
        "seed": 0,
        "temperature": 1.0,
        "top_p": 1.0,
        "json": False,
    }
    assert vars(parse(["infer", "--model", "m"])) == {
        "command": "infer",
        "run": None,
        "model": "m",
        "prompt": "This movie was",
        "num_samples": 1,
        "max_new_tokens": 40,
        "temperature": 0.8,
        "top_p": 0.95,
        "seed": 0,
        "system_prompt": None,
    }
    assert vars(parse(["variance", "--run", "r"])) == {
        "command": "variance",
        "run": "r",
        "steps": 5,
        "at": "trained",
        "seed": 0,
        "reward_offset": None,
        "json": False,
    }
    assert vars(parse(["arena"])) == {
        "command": "arena",
        "estimators": ["rloo", "grpo", "reinforce"],
        "seeds": 3,
        "max_steps": None,
        "output_dir": "runs",
        "config": None,
        "eval_prompts": 64,
        "max_seconds": None,
        "reward_offset": None,
    }
    assert vars(parse(["toy"])) == {"command": "toy", "eta": 0.0, "k": 4, "offset": 0.0}
    trajectory = vars(parse(["trajectory"]))
    assert trajectory.pop("handler").__module__ == "rloo_demo.exact.command"
    assert trajectory == {
        "command": "trajectory",
        "k": 4,
        "beta": 0.1,
        "steps": 200,
        "lr": 2.0,
        "seeds": 20,
        "seed": 0,
        "out": "lessons",
    }


@pytest.mark.parametrize(
    ("argv", "key", "value"),
    [
        (["train", "--evaluate"], "evaluate", True),
        (["train", "--reward-module", "a.py:f", "--reward-module", "b.py:g"], "reward_module", ["a.py:f", "b.py:g"]),
        (["train", "--max-seconds", "2.5"], "max_seconds", 2.5),
        (["evaluate", "--run", "r", "--json"], "json", True),
        (["variance", "--run", "r", "--at", "base"], "at", "base"),
        (["arena", "--estimators", "rloo"], "estimators", ["rloo"]),
        (["arena", "--eval-prompts", "3"], "eval_prompts", 3),
        (["toy", "--k", "6"], "k", 6),
        (["infer", "--run", "r", "--system-prompt", "Be brief."], "system_prompt", "Be brief."),
    ],
)
def test_each_flag_sets_its_own_value_with_its_type(argv, key, value):
    got = getattr(cli.build_parser().parse_args(argv), key)
    assert got == value and type(got) is type(value)


def test_infer_takes_a_run_or_a_model_not_both(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["infer", "--run", "r", "--model", "m"])
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["variance", "--run", "r", "--at", "middle"])


def test_a_command_module_adds_its_command_with_its_own_handler_and_the_common_error_handling(monkeypatch, capsys):
    """A module in ``COMMAND_MODULES`` adds its subparser and handler; its exit status and its user errors go
    through ``main`` as every command's do (one ``error:`` line, status 2)."""
    import types

    from rloo_demo.errors import UserError

    seen = []

    def handler(args):
        seen.append(args.times)
        if args.times < 0:
            raise UserError("times must be at least 0")
        return 7

    def add_command(sub):
        sub.add_parser("echo-times").add_argument("--times", type=int, default=1)
        sub.choices["echo-times"].set_defaults(handler=handler)

    monkeypatch.setattr(cli, "COMMAND_MODULES", (types.SimpleNamespace(add_command=add_command),))
    assert cli_main(["echo-times", "--times", "3"]) == 7 and seen == [3]
    assert cli_main(["echo-times", "--times", "-2"]) == 2
    assert capsys.readouterr().err.strip() == "error: times must be at least 0"
    assert cli_main(["toy", "--k", "3"]) == 0 and seen == [3, -2]  # the others keep their own handlers
