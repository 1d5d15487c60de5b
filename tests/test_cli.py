"""Every bad input to the CLI ends with one ``error:`` line and status 2, before any model loads.

``python -m pytest tests/test_cli.py`` (a few seconds).
"""

import pytest

from rloo_demo.cli import main as cli_main


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
