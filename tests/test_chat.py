"""The chat format's leaves (chat.py) and the template lookup (models/templates.py) on the inputs where the
plausible wrong versions differ: invalid messages of every kind, a conversation with two system messages, lists
and dicts as completions, a template saved in each of the three places transformers uses, named templates."""

import json

import pytest

from rloo_demo.chat import completion_text, is_messages, prompt_key, prompt_text, to_messages
from rloo_demo.config import RunConfig
from rloo_demo.errors import ConfigError
from rloo_demo.models.templates import chat_template_of, check_template, effective_template, has_chat_template


@pytest.mark.parametrize(
    "value, ok",
    [
        ([{"role": "user", "content": "a"}], True),
        ([{"role": "system", "content": ""}, {"role": "assistant", "content": "b"}], True),
        ([], False),
        ([{"role": "tool", "content": "a"}], False),
        ([{"role": "user", "content": 3}], False),
        ([{"role": "user"}], False),
        ([{"role": "user", "content": "a"}, "b"], False),
        ("text", False),
        ({"role": "user", "content": "a"}, False),
    ],
    ids=["user", "system-assistant", "empty", "tool", "number", "no-content", "mixed", "text", "dict"],
)
def test_what_counts_as_messages(value, ok):
    assert is_messages(value) is ok


def test_to_messages_keeps_role_and_content_and_one_system_message():
    given = [{"role": "user", "content": "q", "name": "x"}, {"role": "assistant", "content": "r"}]
    assert to_messages(given) == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}]
    assert to_messages(given, "sys")[0] == {"role": "system", "content": "sys"} and len(to_messages(given, "sys")) == 3
    assert to_messages("q", "") == [{"role": "user", "content": "q"}]  # an empty system prompt adds nothing
    assert to_messages([{"role": "system", "content": "mine"}, {"role": "user", "content": "q"}], "other")[0] == {
        "role": "system",
        "content": "mine",
    }


def test_what_a_person_reads_of_prompts_and_completions():
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "Tell me"}]
    assert prompt_text(chat) == "Tell me" and prompt_text(3) == "3" and prompt_text([]) == ""
    assert prompt_text([{"role": "user"}]) == ""
    two = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "assistant"}]
    assert prompt_text(two) == "user: a\nassistant: "
    assert completion_text([{"role": "assistant", "content": "Hi"}, {"role": "assistant", "content": "there"}]) == (
        "Hi there"
    )
    assert completion_text([{"role": "assistant"}, "raw"]) == " raw" and completion_text(5) == "5"
    assert prompt_key("plain") == "plain"
    assert prompt_key([{"role": "user", "content": "é"}]) == '[{"content": "é", "role": "user"}]'


@pytest.mark.parametrize("where", ["jinja", "json", "tokenizer_config", "named"])
def test_a_chat_template_is_found_where_transformers_saved_it(tmp_path, where):
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    if where == "jinja":
        (tmp_path / "chat_template.jinja").write_text(template, encoding="utf-8")
    elif where == "json":
        (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": template}), encoding="utf-8")
    elif where == "tokenizer_config":
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}), encoding="utf-8")
    else:
        named = [{"name": "tool_use", "template": "other"}, {"name": "default", "template": template}]
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}), encoding="utf-8")
    assert chat_template_of(tmp_path) == template and has_chat_template(tmp_path)
    config = RunConfig(prompt_template="auto", system_prompt="Be kind.")
    assert effective_template(config, tmp_path) == "chat" and check_template(config, tmp_path) == "chat"


def test_no_chat_template_anywhere(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("", encoding="utf-8")  # empty: none
    (tmp_path / "chat_template.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "x", "template": "t"}]}))
    assert chat_template_of(tmp_path) is None and not has_chat_template(tmp_path)
    assert effective_template(RunConfig(prompt_template="auto"), tmp_path) == "continuation"
    with pytest.raises(ConfigError) as err:
        check_template(RunConfig(prompt_template="chat"), tmp_path)
    assert set(err.value.problems) == {"prompt_template"}
    with pytest.raises(ConfigError) as err:
        check_template(RunConfig(prompt_template="instruction", system_prompt="x"), tmp_path)
    assert set(err.value.problems) == {"system_prompt"} and "'instruction'" in err.value.problems["system_prompt"]
    assert check_template(RunConfig(prompt_template="instruction"), tmp_path) == "instruction"


@pytest.mark.parametrize(
    "files",
    [
        {"tokenizer_config.json": "[1, 2]"},  # JSON, but not an object
        {"tokenizer_config.json": json.dumps({"chat_template": {"default": "t"}})},  # not a text
        {"tokenizer_config.json": json.dumps({"chat_template": [{"name": "tool_use", "template": "t"}]})},
        {"chat_template.json": json.dumps({"chat_template": ""})},
    ],
    ids=["list", "dict", "no-default", "empty"],
)
def test_what_is_no_chat_template(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert chat_template_of(tmp_path) is None


def test_the_refusal_of_chat_prompts_without_a_template_word_for_word(tmp_path):
    with pytest.raises(ConfigError) as err:
        check_template(RunConfig(prompt_template="chat", policy="embedded:tiny-imdb-gpt2"), tmp_path)
    assert err.value.problems == {
        "prompt_template": "chat prompts need a tokenizer with a chat template, and 'embedded:tiny-imdb-gpt2' has "
        "none; use continuation or instruction, or an instruct model"
    }
