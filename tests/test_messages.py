"""What a person who typed a wrong reward, module, template or part is told, word for word: each message names
what was typed (cut where it is long) and what would be right. Also the metric names the rewards are logged
under, and the prompts the templates build."""

import pytest

from rloo_demo.errors import InputError
from rloo_demo.task.data import build_prompt, run_prompts, split
from rloo_demo.task.rewards import check_reward_name, metric_name
from rloo_demo.task.user_rewards import check_spec, parse_spec

RULE = "give path/to/file.py:function_name, e.g. examples/rewards.py:keyword_count"
KNOWN = ("choose from sentiment_classifier, vader_compound, length_penalty, 'classifier:<hub id or folder>', "
         "'keyword:<word>', 'length_target:<words>' or 'module:<file.py>:<function>'")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: check_reward_name("keyword:two words"),
         "'keyword:two words': a keyword is one word of 1 to 32 letters or digits, e.g. keyword:great"),
        (lambda: check_reward_name("length_target:x"),
         "'length_target:x': a length target is a whole number of words from 1 to 256, e.g. length_target:20"),
        (lambda: check_reward_name("nope"), f"unknown reward 'nope'; {KNOWN}"),
        (lambda: check_reward_name("classifier:"), f"unknown reward 'classifier:'; {KNOWN}"),  # a prefix alone
        (lambda: check_reward_name("module:a.txt:f"), f"reward module 'a.txt:f': the file must be a .py file; {RULE}"),
        (lambda: check_reward_name("module:/nowhere/r.py:f"), "reward module file '/nowhere/r.py' does not exist"),
        (lambda: parse_spec(3), f"reward module must be a text; {RULE}"),
        (lambda: parse_spec("noseparator"), f"reward module 'noseparator': {RULE}"),
        (lambda: parse_spec("p" * 81), f"reward module '{'p' * 79}…': {RULE}"),  # 81 characters: cut to 79 and …
        (lambda: parse_spec("file.py:1bad"),
         f"reward module 'file.py:1bad': '1bad' is not a Python function name; {RULE}"),
        (lambda: parse_spec("x" * 998 + ".py:f"), f"reward module '{'x' * 79}…': the file must be a .py file; {RULE}"),
    ],
    ids=["keyword", "length", "unknown", "bare-classifier", "module-suffix", "module-missing", "not-text", "no-colon",
         "long", "function", "long-path"],
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
    [("classifier:org/My-Model.v2", "classifier_org_My_Model_v2"), ("classifier:./x/", "classifier_x"),
     ("module:/a/b.py:score", "score"), ("module:c:/a/b.py:score", "score"), ("keyword:great", "keyword_great"),
     ("length_target:20", "length_target_20"), ("vader_compound", "vader_compound")],
)
def test_the_metric_name_a_reward_is_logged_under(name, logged):
    assert metric_name(name) == logged


def test_a_chat_prompt_is_the_instruction_with_the_system_message_first():
    text = "a b c d e"
    instruction = build_prompt(text, "instruction", 3)
    assert instruction.endswith("excerpt:\na b c d e\n\nPositive comment:")
    assert build_prompt(text, "chat", 3, "Sys") == [
        {"role": "system", "content": "Sys"}, {"role": "user", "content": instruction}
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
