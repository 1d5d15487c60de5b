"""Your own reward functions (``module:<file.py>:<function>``, ``--reward-module``) and the built-in keyword and
length-target rewards: the examples train, every bad result or exception fails the run with a message that names the
function, and a public server refuses modules before any file is looked at.
``python -m pytest tests/task/test_user_rewards.py`` (about three minutes).

What a person who typed a wrong reward, module, template or part is told, word for word: each message names
what was typed (cut where it is long) and what would be right. Also the metric names the rewards are logged
under, and the prompts the templates build."""

import json
import sys

import pytest
import yaml
from apputil import call_event, running_app, wait_until
from conftest import ROOT

from rloo_demo.cli import build_parser, config_from_args
from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine.training import train
from rloo_demo.errors import InputError
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.store.folder import RunFolder
from rloo_demo.task.data import build_prompt, run_prompts, split
from rloo_demo.task.rewards import build_reward, check_reward_name, metric_name
from rloo_demo.task.user_rewards import RewardFunctionError, check_scores, check_spec, load_reward, parse_spec
from rloo_demo.ui.forms import FORM_FIELDS, defaults, form_settings

# ----------------------------------------------------------------------------- user rewards


EXAMPLES = ROOT / "examples" / "rewards.py"
sys.path.insert(0, str(EXAMPLES.parent))
import rewards as examples  # noqa: E402  (examples/rewards.py, imported as a plain module for its unit tests)

TINY = {"max_steps": 2, "prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 6}


def module(tmp_path, body: str, name: str = "mine.py") -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


# ----------------------------------------------------------------------------- the examples


def test_examples_do_what_their_docstrings_say():
    texts = ["Great, just great and wonderful. Loved it!", "Bad.", "", "no capital here."]
    assert examples.keyword_count([], texts) == [1.0, 0.0, 0.0, 0.0]  # 4 mentions, capped at 3
    assert examples.format_check([], texts) == [0.0, 1.0, None, 0.0]
    twenty = " ".join(["word"] * 20)
    assert examples.length_target([], [twenty, "word " * 10, "word " * 40, ""]) == [1.0, 0.5, 0.0, 0.0]


def test_the_three_examples_train_two_steps_from_a_config_file(tmp_path, capsys):
    specs = [f"module:{EXAMPLES}:{f}" for f in ("keyword_count", "format_check", "length_target")]
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump({"rewards": ["vader_compound", *specs], "reward_weights": [1, 1, 0.5, 0.5]}))
    argv = ["train", "--config", str(config_file), "--output-dir", str(tmp_path), "--run-name", "examples"]
    argv += ["--max-steps", "2", "--prompts-per-step", "2", "--num-generations", "2", "--max-new-tokens", "6"]
    assert cli_main(argv) == 0, capsys.readouterr().err
    run = RunFolder(tmp_path / "examples")
    assert run.status()["status"] == "finished"
    last = run.metrics()[-1]
    assert last["step"] == 2
    for name in ("keyword_count", "format_check", "length_target"):
        assert f"rewards/{name}/mean" in last  # the function's name is its metric key
    group = run.rollouts()[-1]
    assert set(group["completions"][0]["scores"]) == {
        "vader_compound",
        "keyword_count",
        "format_check",
        "length_target",
    }
    assert run.config().rewards == ["vader_compound", *specs]


def test_reward_module_flag_appends_to_the_rewards():
    args = build_parser().parse_args(
        ["train", "--rewards", "length_penalty", "--reward-module", "a.py:f", "--reward-module", "b.py:g"]
    )
    assert config_from_args(args).rewards == ["length_penalty", "module:a.py:f", "module:b.py:g"]
    args = build_parser().parse_args(["train", "--reward-module", "a.py:f"])
    assert config_from_args(args).rewards == ["vader_compound", "module:a.py:f"]
    assert metric_name("module:some/dir/a.py:my_reward") == "my_reward"


# ----------------------------------------------------------------------------- results are checked


@pytest.mark.parametrize(
    ("scores", "needle"),
    [
        ([1.0], "returned 1 scores for 2 completions"),
        ([1.0, 2.0, 3.0], "returned 3 scores for 2 completions"),
        ([1.0, float("nan")], "returned nan for completion 2; return a finite float, or None"),
        ([float("inf"), 0.0], "returned inf for completion 1"),
        (["high", 0.0], "returned 'high' for completion 1, which is not a number"),
        ([True, 0.0], "returned True for completion 1, which is not a number"),
        (0.5, "returned float; return a list"),
        ("0.5 0.5", "returned str; return a list"),
        (None, "returned NoneType; return a list"),
    ],
)
def test_bad_results_name_the_function(scores, needle):
    with pytest.raises(RewardFunctionError) as info:
        check_scores("my_reward", "mine.py", scores, 2)
    assert "reward function 'my_reward' (mine.py)" in str(info.value) and needle in str(info.value)


def test_good_results_pass_and_none_means_not_applicable():
    import numpy as np

    assert check_scores("f", "f.py", [1, None, np.float32(0.5)], 3) == [1.0, None, 0.5]
    assert check_scores("f", "f.py", np.array([0.25, 0.75]), 2) == [0.25, 0.75]


def test_the_function_gets_text_and_its_result_is_checked(tmp_path):
    path = module(
        tmp_path,
        "def echo(prompts, completions, **kwargs):\n"
        "    assert all(isinstance(p, str) for p in prompts) and all(isinstance(c, str) for c in completions)\n"
        "    extra = 1000 if 'completion_ids' in kwargs and 'trainer_state' in kwargs else 0\n"
        "    return [len(p) * 100 + len(c) + extra for p, c in zip(prompts, completions)]\n"
        "def short(prompts, completions, **kwargs):\n"
        "    return [0.0]\n",
    )
    echo = load_reward(f"{path}:echo")
    assert echo.__name__ == "echo"
    chat = [[{"role": "system", "content": "s"}, {"role": "user", "content": "Hi"}]]
    reply = [[{"role": "assistant", "content": "Hello!"}]]
    # the user turn "Hi" (2) and the reply "Hello!" (6) as text, and TRL's keyword arguments passed on
    assert echo(prompts=chat, completions=reply, completion_ids=[[1]], trainer_state=None) == [1206.0]
    with pytest.raises(RewardFunctionError, match=r"'short' .* returned 1 scores for 2 completions"):
        load_reward(f"{path}:short")(prompts=["a", "b"], completions=["x", "y"])


def test_modules_that_cannot_load_fail_before_the_run(tmp_path):
    cases = [
        (f"{tmp_path}/missing.py:f", InputError, "does not exist"),
        (module(tmp_path, "x = (\n", "syntax.py") + ":f", RewardFunctionError, "cannot be loaded: SyntaxError"),
        (module(tmp_path, "import no_such_package_here\n", "imp.py") + ":f", RewardFunctionError, "ModuleNotFound"),
        (module(tmp_path, "def g(prompts, completions, **kw):\n    return []\n", "g.py") + ":f", RewardFunctionError,
         r"has no function 'f'; its functions are \['g'\]"),
        (module(tmp_path, "def f(prompts):\n    return []\n", "sig.py") + ":f", RewardFunctionError,
         "must take TRL's arguments"),
        (module(tmp_path, "f = 3\n", "value.py") + ":f", RewardFunctionError, "is not a function"),
    ]  # fmt: skip
    for spec, error, needle in cases:
        with pytest.raises(error, match=needle):
            build_reward(f"module:{spec}")
    # through the CLI: one error line, status 2, no run folder
    bad = f"{tmp_path}/sig.py:f"
    assert cli_main(["train", "--reward-module", bad, "--output-dir", str(tmp_path / "runs")]) == 2
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- a failure mid-run


def test_an_exception_in_the_function_fails_the_run_with_its_traceback(tmp_path):
    path = module(
        tmp_path,
        "def flaky(prompts, completions, **kwargs):\n"
        "    scores = [1.0 for _ in completions]\n"
        "    return [s / 0 for s in scores]\n",
    )
    config = RunConfig(rewards=["vader_compound", f"module:{path}:flaky"], output_dir=str(tmp_path), **TINY)
    state = train(config)
    assert state.status == "failed"
    assert state.error.startswith(f"RewardFunctionError: reward function 'flaky' ({path}) raised ZeroDivisionError")
    assert "return [s / 0 for s in scores]" in state.error and "line 3, in flaky" in state.error
    status = state.run.status()
    assert status["status"] == "failed" and "ZeroDivisionError" in status["traceback"]
    assert path in status["traceback"]  # the full traceback reaches into the user's file


def test_a_nan_mid_run_fails_with_a_message_naming_the_function(tmp_path, capsys):
    path = module(
        tmp_path, "def shaky(prompts, completions, **kwargs):\n    return [float('nan')] * len(completions)\n"
    )
    argv = ["train", "--reward-module", f"{path}:shaky", "--output-dir", str(tmp_path), "--run-name", "nan"]
    argv += ["--max-steps", "2", "--prompts-per-step", "2", "--num-generations", "2", "--max-new-tokens", "6"]
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    assert "error: run failed: RewardFunctionError: reward function 'shaky'" in err
    assert "returned nan for completion 1" in err
    assert RunFolder(tmp_path / "nan").status()["status"] == "failed"


# ----------------------------------------------------------------------------- the local app


def test_the_local_app_takes_a_reward_module_and_shows_its_traceback(tmp_path):
    from types import SimpleNamespace

    from rloo_demo.ui.tabs.train import render

    path = module(tmp_path, "def boom(prompts, completions, **kwargs):\n    raise RuntimeError('no verifier')\n")
    values = defaults() | {
        "reward_module": f"{path}:boom",
        "w_module": 0.5,
        "extra_reward": "keyword:great",
        **TINY,
    }
    settings = form_settings(values)
    assert settings["rewards"] == ["vader_compound", "keyword:great", f"module:{path}:boom"]
    assert settings["reward_weights"] == [1.0, 1.0, 0.5]
    with running_app(tmp_path / "runs", limits=LOCAL) as (url, controller):
        _, _, error, *_ = call_event(url, "train_start", ["me", *[values[f] for f in FORM_FIELDS]])
        assert not error, error  # the page's State (the watched run) does not travel to a client: ask the server
        watched = controller.default_run()
        assert controller.view(watched).config.rewards == settings["rewards"]
        wait_until(lambda: controller.view(watched).status != "running", timeout=300)
        view = controller.view(watched)
        assert view.status == "failed"
        assert "reward function 'boom'" in view.error and "raise RuntimeError('no verifier')" in view.error
        ui = SimpleNamespace(status="status", run_error="error", plots=[], drawn="drawn")
        shown = render(ui, view, 0.6, view.last_step)["error"]  # no new step: no plots to draw
        assert shown.startswith("**Run failed:**\n\n<pre>") and "raise RuntimeError(&#x27;no verifier&#x27;)" in shown


# ----------------------------------------------------------------------------- built-in keyword and length target


def test_keyword_and_length_target_rewards():
    keyword = build_reward("keyword:Great")
    assert keyword.__name__ == "keyword_great" == metric_name("keyword:Great")
    texts = ["great", "GREAT great, great! great", "greatest", [{"role": "assistant", "content": "Great."}]]
    assert keyword(prompts=[""] * 4, completions=texts) == [1 / 3, 1.0, 0.0, 1 / 3]
    target = build_reward("length_target:4")
    assert target.__name__ == "length_target_4"
    assert target(prompts=[""] * 4, completions=["a b c d", "a b", "", "a " * 20]) == [1.0, 0.5, 0.0, -1.0]
    for bad in ("keyword:", "keyword:two words", "keyword:" + "x" * 33, "keyword:<b>", "keyword:_"):
        with pytest.raises(InputError, match="one word of 1 to 32 letters or digits"):
            build_reward(bad)
    for bad in ("length_target:0", "length_target:257", "length_target:-3", "length_target:2.5", "length_target:"):
        with pytest.raises(InputError, match="whole number of words from 1 to 256"):
            build_reward(bad)


def test_public_mode_allows_the_safe_builtins_and_refuses_modules():
    safe = RunConfig(rewards=["vader_compound", "keyword:great", "length_target:20"])
    assert PUBLIC.config_problems(safe) == {} and safe.problems(check_files=False) == {}
    own = RunConfig(rewards=["module:examples/rewards.py:keyword_count"])
    assert "only a local server" in PUBLIC.config_problems(own)["rewards"]
    assert LOCAL.config_problems(own) == {}
    assert "use_vllm" in PUBLIC.config_problems(RunConfig(use_vllm=True))
    assert "system_prompt" in PUBLIC.config_problems(RunConfig(system_prompt="x" * 501))


def test_a_public_server_never_loads_a_visitors_module(tmp_path):
    """Through the API and the page's own event: refused, nothing created, and the file's code never ran."""
    from gradio_client import Client

    sentinel = tmp_path / "ran"
    path = module(
        tmp_path,
        f"open({str(sentinel)!r}, 'w').write('pwned')\ndef f(prompts, completions, **kwargs):\n    return [0.0]\n",
    )
    with running_app(tmp_path / "runs", limits=PUBLIC) as (url, controller):
        client = Client(url, verbose=False)
        for rewards in ([f"module:{path}:f"], ["vader_compound", "module:examples/rewards.py:keyword_count"]):
            out = client.predict(json.dumps({"rewards": rewards}), "visitor", api_name="/start_run")
            assert "run" not in out and "only a local server" in out["error"], out
            assert str(tmp_path) not in out["error"]  # no server path in the answer
        values = defaults() | {"reward_module": f"{path}:f"}
        watched, _, error, *_ = call_event(url, "train_start", ["visitor", *[values[f] for f in FORM_FIELDS]])
        assert watched is None and "only a local server" in error
        for settings, needle in (
            ({"use_vllm": True}, "generates with transformers"),
            ({"rewards": ["keyword:<script>"]}, "letters or digits"),
            ({"rewards": ["length_target:100000"]}, "from 1 to 256"),
            ({"system_prompt": "x" * 600}, "at most 500 characters"),
        ):
            out = client.predict(json.dumps(settings), "visitor", api_name="/start_run")
            assert "run" not in out and needle in out["error"], (settings, out)
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert not sentinel.exists()
    load_reward(f"{path}:f")  # the same file on a local server does run: the refusal is what kept it out
    assert sentinel.read_text() == "pwned"


def test_a_value_that_is_no_number_is_quoted_whole_up_to_60_characters_and_cut_past_them():
    fits, over = "a" * 58, "b" * 59  # their reprs: 60 and 61 characters with the quotes
    with pytest.raises(RewardFunctionError) as err:
        check_scores("mine", "r.py", [fits], 1)
    assert f"returned {fits!r} for completion 1, which is not a number" in str(err.value)
    with pytest.raises(RewardFunctionError) as err:
        check_scores("mine", "r.py", [0.5, over], 2)
    assert f"returned {repr(over)[:59]}… for completion 2, which is not a number" in str(err.value)


# ----------------------------------------------------------------------------- messages


RULE = "give path/to/file.py:function_name, e.g. examples/rewards.py:keyword_count"
KNOWN = (
    "choose from vader_compound, sentiment_classifier, length_penalty, 'classifier:<hub id or folder>', "
    "'keyword:<word>', 'length_target:<words>' or 'module:<file.py>:<function>'"
)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: check_reward_name("keyword:two words"),
            "'keyword:two words': a keyword is one word of 1 to 32 letters or digits, e.g. keyword:great",
        ),
        (
            lambda: check_reward_name("length_target:x"),
            "'length_target:x': a length target is a whole number of words from 1 to 256, e.g. length_target:20",
        ),
        (lambda: check_reward_name("nope"), f"unknown reward 'nope'; {KNOWN}"),
        (lambda: check_reward_name("classifier:"), f"unknown reward 'classifier:'; {KNOWN}"),  # a prefix alone
        (lambda: check_reward_name("module:a.txt:f"), f"reward module 'a.txt:f': the file must be a .py file; {RULE}"),
        (lambda: check_reward_name("module:/nowhere/r.py:f"), "reward module file '/nowhere/r.py' does not exist"),
        (lambda: parse_spec(3), f"reward module must be a text; {RULE}"),
        (lambda: parse_spec("noseparator"), f"reward module 'noseparator': {RULE}"),
        (lambda: parse_spec("p" * 81), f"reward module '{'p' * 79}…': {RULE}"),  # 81 characters: cut to 79 and …
        (
            lambda: parse_spec("file.py:1bad"),
            f"reward module 'file.py:1bad': '1bad' is not a Python function name; {RULE}",
        ),
        (lambda: parse_spec("x" * 998 + ".py:f"), f"reward module '{'x' * 79}…': the file must be a .py file; {RULE}"),
    ],
    ids=[
        "keyword",
        "length",
        "unknown",
        "bare-classifier",
        "module-suffix",
        "module-missing",
        "not-text",
        "no-colon",
        "long",
        "function",
        "long-path",
    ],
)
def test_a_wrong_name_is_told_what_was_typed_and_what_is_right(call, message):
    with pytest.raises(InputError) as err:
        call()
    assert str(err.value) == message


def test_the_edges_of_a_module_spec():
    path = "d" * 997 + ".py"  # 1,000 characters: the longest path taken
    assert parse_spec(f"{path}:f") == (path, "f")
    with pytest.raises(InputError, match="the file must be a .py file"):
        parse_spec("d" + path + ":f")  # 1,001
    with pytest.raises(InputError) as err:
        parse_spec("q" * 80)
    assert str(err.value) == f"reward module '{'q' * 80}': {RULE}"  # 80 characters: shown whole
    assert parse_spec("c:/dir/file.py:fn") == ("c:/dir/file.py", "fn")  # split at the last colon only
    check_reward_name("module:/nowhere/r.py:f", check_files=False)  # public mode: no file is looked at
    check_spec("/nowhere/r.py:f", check_files=False)
    with pytest.raises(InputError, match="does not exist"):
        check_spec("/nowhere/r.py:f")


def test_template_and_part_errors_name_the_choices():
    with pytest.raises(ValueError) as err:
        split(None, "middle")
    assert str(err.value) == "part must be 'train' or 'heldout', not 'middle'"
    with pytest.raises(ValueError) as err:
        build_prompt("t", "weird")
    assert str(err.value) == "unknown prompt template 'weird'; choose one of continuation, instruction, chat"


@pytest.mark.parametrize(
    "name, logged",
    [
        ("classifier:org/My-Model.v2", "classifier_org_My_Model_v2"),
        ("classifier:./x/", "classifier_x"),
        ("module:/a/b.py:score", "score"),
        ("module:c:/a/b.py:score", "score"),
        ("keyword:great", "keyword_great"),
        ("length_target:20", "length_target_20"),
        ("vader_compound", "vader_compound"),
    ],
)
def test_the_metric_name_a_reward_is_logged_under(name, logged):
    assert metric_name(name) == logged


def test_a_chat_prompt_is_the_instruction_with_the_system_message_first():
    text = "a b c d e"
    instruction = build_prompt(text, "instruction", 3)
    assert instruction.endswith("excerpt:\na b c d e\n\nPositive comment:")
    assert build_prompt(text, "chat", 3, "Sys") == [
        {"role": "system", "content": "Sys"},
        {"role": "user", "content": instruction},
    ]
    assert build_prompt(text, "chat", 3) == [{"role": "user", "content": instruction}]
    assert build_prompt(text, "continuation", 3, "ignored") == "a b c"


def test_a_chat_runs_prompts_carry_its_system_prompt(tmp_path):
    from rloo_demo.config import RunConfig

    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")  # a tokenizer folder that has a chat template
    config = RunConfig(prompt_template="auto", system_prompt="Be brief.")
    prompts = run_prompts(config, "train", limit=3, folder=tmp_path)["prompt"]
    assert len(prompts) == 3 and all(p[0] == {"role": "system", "content": "Be brief."} for p in prompts)
    assert [p[1]["role"] for p in prompts] == ["user"] * 3
