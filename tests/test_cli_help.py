"""The CLI's surface word for word: every command's help (each flag, its wording and default) against
``tests/golden/cli_help.json``, and every command's defaults as the parser gives them, written out here.

The help is the CLI's documentation, so a changed flag, default or sentence fails here. After a deliberate change,
read the diff of the rewritten file: ``UPDATE_GOLDEN=1 pytest tests/test_cli_help.py`` rewrites it and checks
nothing. ``python -m pytest tests/test_cli_help.py`` (a second).
"""

import json
import os
from pathlib import Path

import pytest

from rloo_demo import cli

GOLDEN = Path(__file__).parent / "golden" / "cli_help.json"
COMMANDS = ["", "train", "evaluate", "infer", "variance", "arena", "toy"]


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
    assert vars(parse(["train"])) == {"command": "train", "config": None, "evaluate": False, "stop_file": None,
                                      "max_seconds": None, "reward_module": None}
    assert vars(parse(["evaluate", "--run", "r"])) == {
        "command": "evaluate", "run": "r", "num_prompts": 64, "samples_per_prompt": 2, "seed": 0, "temperature": 1.0,
        "top_p": 1.0, "json": False,
    }
    assert vars(parse(["infer", "--model", "m"])) == {
        "command": "infer", "run": None, "model": "m", "prompt": "This movie was", "num_samples": 1,
        "max_new_tokens": 40, "temperature": 0.8, "top_p": 0.95, "seed": 0, "system_prompt": None,
    }
    assert vars(parse(["variance", "--run", "r"])) == {
        "command": "variance", "run": "r", "steps": 5, "at": "trained", "seed": 0, "reward_offset": None, "json": False,
    }
    assert vars(parse(["arena"])) == {
        "command": "arena", "estimators": ["rloo", "grpo", "reinforce"], "seeds": 3, "max_steps": None,
        "output_dir": "runs", "config": None, "eval_prompts": 64, "max_seconds": None, "reward_offset": None,
    }
    assert vars(parse(["toy"])) == {"command": "toy", "eta": 0.0, "k": 4, "offset": 0.0}


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
