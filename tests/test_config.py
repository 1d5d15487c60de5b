"""RunConfig validation and (de)serialisation: ``python -m pytest tests/test_config.py``.

Every setting's check at its edges, word for word: the last value taken, the first one refused, and the message
that says how to fix it (config.RunConfig.problems). A boundary moved by one, a message that names the wrong
limit or field, or a check that runs with another field already wrong, fails here."""

import json
from dataclasses import fields

import pytest

from rloo_demo.config import (
    MAX_BETA,
    MAX_REWARD_OFFSET,
    MAX_REWARD_WEIGHT,
    MAX_SEED,
    MAX_SYSTEM_PROMPT_CHARS,
    TEMPERATURE_RANGE,
    RunConfig,
)
from rloo_demo.engine.trl_args import rloo_config
from rloo_demo.errors import ConfigError
from rloo_demo.store.jsonl import save_config

# ----------------------------------------------------------------------------- config


def problems(**kw):
    return RunConfig(**kw).problems()


def test_defaults_are_valid():
    assert RunConfig().problems() == {}


@pytest.mark.parametrize(
    ("kw", "field", "needle"),
    [
        ({"num_generations": 1}, "num_generations", "at least 2"),
        (
            {"generation_batch_size": 10},
            "generation_batch_size",
            "evenly divisible by num_generations (K=4); use 8 or 12",
        ),
        ({"max_steps": 0}, "max_steps", "positive whole number"),
        ({"max_new_tokens": -3}, "max_new_tokens", "positive whole number"),
        ({"learning_rate": 0.0}, "learning_rate", "must be in (0, 1]"),
        ({"learning_rate": 5.0}, "learning_rate", "must be in (0, 1]"),
        ({"seed": -1}, "seed", "between 0 and 4294967295"),
        ({"seed": 2**32}, "seed", "between 0 and 4294967295"),
        ({"temperature": 0.0}, "temperature", "[0.01, 10]"),
        ({"temperature": 1e-300}, "temperature", "[0.01, 10]"),
        ({"lora_r": 0}, "lora_r", "positive whole number"),
        ({"run_name": ".."}, "run_name", "not starting with '.'"),
        ({"run_name": "a/b"}, "run_name", "A-Z a-z 0-9"),
        ({"run_name": "y`<img src=x>`"}, "run_name", "A-Z a-z 0-9"),
        ({"run_name": "x" * 101}, "run_name", "1 to 100"),
        ({"report_to": "mlflow"}, "report_to", "unknown tracker 'mlflow'"),
        ({"lora_target_modules": ["c_attn", "x; rm -rf /"]}, "lora_target_modules", "module names"),
        ({"beta": -0.1}, "beta", ">= 0"),
        ({"top_p": 1.5}, "top_p", "(0, 1]"),
        ({"rewards": ["nope"]}, "rewards", "unknown reward 'nope'"),
        ({"rewards": []}, "rewards", "at least one"),
        ({"reward_weights": [1.0, 2.0]}, "reward_weights", "give one each"),
        ({"prompt_template": "bogus"}, "prompt_template", "auto, continuation, instruction or chat"),
        ({"system_prompt": "Be kind.", "prompt_template": "continuation"}, "system_prompt", "only chat prompts"),
        ({"system_prompt": "  "}, "system_prompt", "1 to 4000 characters"),
        ({"rewards": ["keyword:two words"]}, "rewards", "one word of 1 to 32 letters or digits"),
        ({"rewards": ["length_target:0"]}, "rewards", "from 1 to 256"),
        ({"rewards": ["module:no/such/file.py:reward"]}, "rewards", "does not exist"),
        ({"rewards": ["module:examples/rewards.py"]}, "rewards", "file.py:function_name"),
        ({"use_vllm": True}, "use_vllm", "vllm is not installed here"),
        ({"data_source": "/no/such/file.csv"}, "data_source", "does not exist"),
        ({"policy": "./no-such-model"}, "policy", "does not exist"),
    ],
)
def test_invalid_settings_say_how_to_fix(kw, field, needle):
    p = problems(**kw)
    assert field in p
    assert needle in p[field]


@pytest.mark.parametrize(
    ("kw", "field", "needle"),
    [
        ({"max_steps": True}, "max_steps", "must be a whole number, not True"),
        ({"max_steps": 10.5}, "max_steps", "must be a whole number, not 10.5"),
        ({"max_steps": "10"}, "max_steps", "must be a whole number, not '10'"),
        ({"max_steps": None}, "max_steps", "must be a whole number, not None"),
        ({"beta": float("nan")}, "beta", "must be a finite number, not nan"),
        ({"temperature": float("inf")}, "temperature", "must be a finite number, not inf"),
        ({"learning_rate": "5e-4"}, "learning_rate", "must be a finite number"),
        ({"learning_rate": False}, "learning_rate", "must be a finite number, not False"),
        ({"use_lora": 1}, "use_lora", "must be true or false, not 1"),
        ({"rewards": "vader_compound"}, "rewards", "must be a list of texts"),
        ({"rewards": [None]}, "rewards", "must be a list of texts"),
        ({"reward_weights": [1.0, float("nan")]}, "reward_weights", "list of finite numbers"),
        ({"reward_weights": ["1"]}, "reward_weights", "list of finite numbers"),
        ({"policy": None}, "policy", "must be a text, not None"),
        ({"policy": {"a": 1}}, "policy", "must be a text"),
        ({"generation_batch_size": True}, "generation_batch_size", "a whole number or null"),
        ({"seed": 1.0}, "seed", "a whole number, not 1.0"),
    ],
)
def test_types_are_checked_strictly(kw, field, needle):
    p = problems(**kw)
    assert needle in p[field], p
    assert set(p) == {field}  # a type problem does not also raise from a later check


def test_validate_raises_with_all_problems():
    with pytest.raises(ConfigError) as info:
        RunConfig(num_generations=1, max_steps=0).validate()
    assert set(info.value.problems) == {"num_generations", "max_steps"}


def test_a_checked_config_is_not_checked_again_until_a_value_changes(monkeypatch):
    """``validate`` marks the values it checked; validating them again trusts the mark and looks at nothing, while
    a value set afterwards, a list changed in place or a copy with other values is checked again (and refused)."""
    import dataclasses

    checked = []
    real = RunConfig.problems
    monkeypatch.setattr(
        RunConfig, "problems", lambda self, *a, **k: checked.append(self.max_steps) or real(self, *a, **k)
    )
    config = RunConfig(max_steps=3)
    assert not config.checked()
    assert config.validate() is config and config.checked() and checked == [3]
    assert config.validate() is config and checked == [3]  # trusted: no second check
    config.max_steps = 0  # a value set after the check: checked again, and refused
    assert not config.checked()
    with pytest.raises(ConfigError) as refused:
        config.validate()
    assert list(refused.value.problems) == ["max_steps"] and checked == [3, 0]
    config.max_steps = 3  # the values checked once more: trusted again
    assert config.checked() and config.validate() is config and checked == [3, 0]
    config.rewards.append("vader_compound")  # a list changed in place: the same reward twice
    with pytest.raises(ConfigError) as refused:
        config.validate()
    assert list(refused.value.problems) == ["rewards"] and checked == [3, 0, 3]
    copy = dataclasses.replace(RunConfig(max_steps=3).validate(), max_steps=-1)  # a copy carries no mark of its own
    with pytest.raises(ConfigError):
        copy.validate()
    assert RunConfig(max_steps=3) == RunConfig(max_steps=3).validate()  # the mark is no field: equal configs stay equal


def test_generation_batch_overrides_prompts_per_step():
    assert RunConfig(prompts_per_step=3, num_generations=4).completions_per_step == 12
    assert RunConfig(generation_batch_size=8, num_generations=4).completions_per_step == 8


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path, suffix):
    cfg = RunConfig(rewards=["vader_compound", "length_penalty"], reward_weights=[1.0, 0.5], beta=0.0, seed=7)
    path = tmp_path / f"run{suffix}"
    save_config(cfg, path)
    assert RunConfig.load(path) == cfg


def test_unknown_key_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting"):
        RunConfig.from_dict({"num_gens": 4})
    with pytest.raises(ConfigError, match="does not exist"):
        RunConfig.load(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[1, 2]", "must be a mapping of settings, not list"),
        ('"max_steps"', "must be a mapping of settings, not str"),
        ("{bad json", "is not valid JSON"),
        ('{"max_steps": 1', "is not valid JSON"),
        ("[" * 100_000, "characters long"),
    ],
)
def test_json_settings_that_are_not_a_mapping(text, needle):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json(text)
    assert needle in str(info.value)


def test_json_settings_default_and_nan():
    assert RunConfig.from_json("") == RunConfig() == RunConfig.from_json(None)
    assert "beta" in RunConfig.from_json('{"beta": NaN}').problems()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"max_steps: [1, 2\n", "is not valid YAML"),
        (b"\xff\xfe\x00max_steps: 3", "cannot be read"),
        (b"- 1\n- 2\n", "must hold a mapping"),
        (b"max_stepz: 3\n", "unknown setting"),
    ],
)
def test_bad_config_files_are_config_errors(tmp_path, content, needle):
    path = tmp_path / "run.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        RunConfig.load(path)
    assert needle in str(info.value)


def test_save_is_atomic(tmp_path, monkeypatch):
    import os

    path = tmp_path / "config.yaml"
    save_config(RunConfig(max_steps=7), path)

    def crash(*a, **k):
        raise OSError("crash between write and rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        save_config(RunConfig(max_steps=8), path)
    assert RunConfig.load(path).max_steps == 7  # the old file is intact


def test_to_rloo_config():
    cfg = RunConfig(prompts_per_step=3, num_generations=4, beta=0.1, learning_rate=2e-3, max_new_tokens=16)
    args = rloo_config(cfg, "/tmp/x", reward_weights=[1.0])
    assert args.per_device_train_batch_size == 12
    assert args.num_generations == 4
    assert args.generation_batch_size % args.num_generations == 0
    assert args.beta == 0.1 and args.learning_rate == 2e-3 and args.max_completion_length == 16
    assert args.disable_dropout is True
    with pytest.raises(ConfigError, match="processes"):
        rloo_config(RunConfig(prompts_per_step=1, num_generations=3), "/tmp/x", num_processes=2)


# ----------------------------------------------------------------------------- config edges


LO_T, HI_T = TEMPERATURE_RANGE
TAKEN = [
    dict(num_generations=2),
    dict(generation_batch_size=8, num_generations=4),
    dict(snapshot_every=0),
    dict(seed=0),
    dict(seed=MAX_SEED),
    dict(learning_rate=1.0),
    dict(beta=0.0),
    dict(beta=MAX_BETA),
    dict(temperature=LO_T),
    dict(temperature=HI_T),
    dict(top_p=1.0),
    dict(reward_offset=MAX_REWARD_OFFSET),
    dict(reward_offset=-MAX_REWARD_OFFSET),
    dict(variance_every=0),
    dict(reward_weights=[MAX_REWARD_WEIGHT]),
    dict(reward_weights=[-MAX_REWARD_WEIGHT]),
    dict(system_prompt="x" * MAX_SYSTEM_PROMPT_CHARS),
    dict(system_prompt="hi", prompt_template="chat"),
    dict(system_prompt="hi", prompt_template="auto"),
    dict(text_column="c" * 100),
    dict(policy="p" * 300),
    dict(lora_target_modules=["c_attn", "transformer.h.0"]),
    dict(reward_offset=1.0, estimator="reinforce"),
    dict(variance_every=5, estimator="reinforce"),
]
REFUSED = [
    (
        dict(num_generations=1),
        "num_generations",
        "K=1: RLOO needs at least 2 completions per prompt for a leave-one-out baseline; use 4 to 8",
    ),
    (dict(generation_batch_size=0), "generation_batch_size", "must be a positive number of completions per step"),
    (
        dict(generation_batch_size=10, num_generations=4),
        "generation_batch_size",
        "the generation batch of 10 completions must be evenly divisible by num_generations (K=4); use 8 or 12",
    ),
    (
        dict(generation_batch_size=3, num_generations=4),
        "generation_batch_size",
        "the generation batch of 3 completions must be evenly divisible by num_generations (K=4); use 4",
    ),
    (dict(prompts_per_step=0), "prompts_per_step", "must be a positive whole number, not 0"),
    (dict(max_new_tokens=-3), "max_new_tokens", "must be a positive whole number, not -3"),
    (dict(snapshot_every=-1), "snapshot_every", "must be 0 (no snapshots) or a positive number of steps, not -1"),
    (dict(seed=-1), "seed", f"must be between 0 and {MAX_SEED}, not -1"),
    (dict(seed=MAX_SEED + 1), "seed", f"must be between 0 and {MAX_SEED}, not {MAX_SEED + 1}"),
    (dict(learning_rate=0.0), "learning_rate", "must be in (0, 1], not 0.0 (try 5e-4 for the embedded model)"),
    (dict(learning_rate=1.5), "learning_rate", "must be in (0, 1], not 1.5 (try 5e-4 for the embedded model)"),
    (dict(beta=-0.1), "beta", "must be >= 0 and <= 100, not -0.1 (0 turns the KL penalty off)"),
    (dict(beta=MAX_BETA + 1), "beta", "must be >= 0 and <= 100, not 101.0 (0 turns the KL penalty off)"),
    (dict(temperature=LO_T / 2), "temperature", "must be in [0.01, 10], not 0.005"),
    (dict(temperature=HI_T + 1), "temperature", "must be in [0.01, 10], not 11.0"),
    (dict(top_p=0.0), "top_p", "must be in (0, 1], not 0.0"),
    (dict(top_p=1.01), "top_p", "must be in (0, 1], not 1.01"),
    (dict(estimator="x" * 100), "estimator", f"unknown estimator '{'x' * 58}…; use rloo, reinforce, grpo"),
    (dict(reward_offset=-MAX_REWARD_OFFSET - 1), "reward_offset", "must be between -100 and 100, not -101.0"),
    (
        dict(reward_offset=1.0, estimator="grpo"),
        "reward_offset",
        "GRPO's advantage (r - group mean) / group std removes any constant offset, so it would change nothing; use "
        "the offset with estimator rloo or reinforce, or leave it 0",
    ),
    (dict(variance_every=-1), "variance_every", "must be 0 (off) or a number of steps, not -1"),
    (
        dict(variance_every=5, estimator="grpo"),
        "variance_every",
        "the meter measures on RLOO's captured batch: use it with estimator rloo or reinforce",
    ),
    (dict(rewards=[]), "rewards", "give at least one reward function, e.g. vader_compound"),
    (dict(rewards=["vader_compound", "vader_compound"]), "rewards", "each reward function may appear only once"),
    (
        dict(rewards=["vader_compound"], reward_weights=[1.0, 2.0]),
        "reward_weights",
        "1 reward function(s) but 2 weight(s); give one each",
    ),
    (
        dict(reward_weights=[-MAX_REWARD_WEIGHT - 1]),
        "reward_weights",
        "each weight must be in [-1000, 1000], not -1001.0 (rewards are in [-1, 1]; a weight that large overflows the "
        "advantages to NaN)",
    ),
    (
        dict(prompt_template="weird"),
        "prompt_template",
        "unknown template 'weird'; use auto, continuation, instruction or chat",
    ),
    (dict(system_prompt="   "), "system_prompt", "give a text of 1 to 4000 characters, or none"),
    (
        dict(system_prompt="x" * (MAX_SYSTEM_PROMPT_CHARS + 1)),
        "system_prompt",
        "give a text of 1 to 4000 characters, or none",
    ),
    (
        dict(system_prompt="hi", prompt_template="instruction"),
        "system_prompt",
        "only chat prompts have a system message; use prompt_template chat or auto, not 'instruction'",
    ),
    (dict(policy=" "), "policy", "must be a non-empty text of at most 300 characters"),
    (dict(policy="p" * 301), "policy", "must be a non-empty text of at most 300 characters"),
    (dict(text_column="c" * 101), "text_column", "must be a non-empty text of at most 100 characters"),
    (dict(data_source=""), "data_source", "must be a non-empty text of at most 500 characters"),
    (
        dict(lora_target_modules=[]),
        "lora_target_modules",
        "give module names such as c_attn c_proj (letters, digits, '_' and '.')",
    ),
    (
        dict(lora_target_modules=["c_attn", "bad name"]),
        "lora_target_modules",
        "give module names such as c_attn c_proj (letters, digits, '_' and '.')",
    ),
    (dict(run_name="../x"), "run_name", "use 1 to 100 of A-Z a-z 0-9 . _ -, not starting with '.'"),
    (
        dict(data_source="/nope/x.csv"),
        "data_source",
        "file '/nope/x.csv' does not exist; give a .csv/.jsonl path, a hub id or 'embedded:imdb'",
    ),
    (dict(policy="./nope"), "policy", "model folder './nope' does not exist or has no config.json"),
]


@pytest.mark.parametrize("kw", TAKEN, ids=[",".join(f"{k}" for k in kw) + f"-{i}" for i, kw in enumerate(TAKEN)])
def test_the_last_value_taken(kw):
    assert RunConfig(**kw).problems() == {}


@pytest.mark.parametrize("kw, field, message", REFUSED, ids=[f"{f}-{i}" for i, (_, f, _) in enumerate(REFUSED)])
def test_the_first_value_refused_and_what_it_is_told(kw, field, message):
    assert RunConfig(**kw).problems() == {field: message}


def test_a_public_server_looks_at_no_path():
    for kw in (dict(data_source="/nope/x.csv"), dict(policy="./nope")):
        assert RunConfig(**kw).problems(check_files=False) == {}


def test_a_check_that_needs_another_field_waits_for_it():
    # K wrong: the batch's divisibility is not judged against it; estimator wrong: the offset's GRPO rule is not
    both = RunConfig(num_generations=1, generation_batch_size=7).problems()
    assert set(both) == {"num_generations"}
    assert set(RunConfig(estimator=3, reward_offset=1.0).problems()) == {"estimator"}


# ----------------------------------------------------------------------------- vLLM, first lines, the line's place


def test_vllm_is_refused_first_when_missing_then_when_there_is_no_gpu(monkeypatch):
    import importlib.util

    import torch

    from rloo_demo.config import vllm_problem

    asked = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: asked.append(name) or real(name, *a))
    assert vllm_problem() == (
        "vllm is not installed here; on a machine with a GPU, pip install vllm, or leave use_vllm off"
    )
    assert asked == ["vllm"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert vllm_problem() == (
        "vLLM generates on a GPU and this machine has none; leave use_vllm off (transformers generates)"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert vllm_problem() is None


def test_an_error_is_told_by_its_first_line_cut_at_200_characters_or_else_its_type():
    from rloo_demo.config import _first_line

    assert _first_line(ValueError("  first line\nsecond line")) == "first line"
    assert _first_line(ValueError("x" * 250)) == "x" * 200
    assert _first_line(ValueError("   ")) == "ValueError" and _first_line(KeyError()) == "KeyError"


def test_a_refusal_to_wait_keeps_its_place_in_the_line():
    from rloo_demo.errors import Busy, Waiting

    waiting = Waiting("you are 3rd in line", 3)
    assert isinstance(waiting, Busy) and str(waiting) == "you are 3rd in line" and waiting.place == 3


def test_json_config_that_is_not_text_is_told_its_type():
    from rloo_demo.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        RunConfig.from_json(["max_steps"])
    assert err.value.problems == {"config": "must be JSON text, not list"}


def test_a_config_error_joins_its_problems_in_order():
    from rloo_demo.errors import ConfigError

    error = ConfigError({"max_steps": "too many", "seed": "not a number"})
    assert str(error) == "max_steps: too many; seed: not a number"


def test_a_repr_of_exactly_the_limit_is_kept_whole():
    from rloo_demo.config import _short_repr

    assert _short_repr("x" * 58) == repr("x" * 58)  # 60 characters with its quotes
    assert _short_repr("x" * 59) == repr("x" * 59)[:59] + "…"


def test_json_config_at_its_length_limit_is_read_and_one_more_character_is_refused():
    from rloo_demo.config import MAX_CONFIG_CHARS
    from rloo_demo.errors import ConfigError

    text = '{"max_steps": 7}'
    assert RunConfig.from_json(text.ljust(MAX_CONFIG_CHARS)).max_steps == 7
    with pytest.raises(ConfigError) as err:
        RunConfig.from_json(text.ljust(MAX_CONFIG_CHARS + 1))
    assert err.value.problems == {"config": f"is {MAX_CONFIG_CHARS + 1} characters long; at most 20000 are read"}
    with pytest.raises(ConfigError) as err:
        RunConfig.from_json("{max_steps: 7}")
    assert err.value.problems == {
        "config": "is not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
    }


def test_a_json_number_of_100_digits_is_read_and_one_of_101_is_infinite():
    hundred, more = "1" + "0" * 99, "1" + "0" * 100
    assert RunConfig.from_json(f'{{"seed": {hundred}}}').seed == 10**99  # read whole, then refused by its range
    assert RunConfig.from_json(f'{{"seed": {more}}}').seed == float("inf")
    assert RunConfig.from_json('{"seed": 12}').seed == 12


def test_a_list_setting_of_the_wrong_type_is_described_as_a_list():
    assert RunConfig(reward_weights="1").type_problems() == {
        "reward_weights": "must be a list of finite numbers or null, not '1'"
    }


# ----------------------------------------------------------------------------- a wrong type is told as one, alone

# Each field with a value of the wrong type, and around it the settings that would run its value check: the
# problem named must be the type's, and the check after it must not run on the wrong value (nor crash on it).
WRONG_TYPE = [
    ("num_generations", "x", {"generation_batch_size": 3}),
    ("snapshot_every", "x", {}),
    ("seed", "x", {}),
    ("top_p", "x", {}),
    ("estimator", 7, {}),
    ("reward_offset", "x", {"estimator": "grpo"}),
    ("variance_every", "x", {"estimator": "grpo"}),
    ("prompt_template", 7, {"system_prompt": "Be kind."}),
    ("system_prompt", 7, {}),
    ("data_source", 7, {}),
    ("policy", 7, {}),
    ("bf16", "yes", {}),
    ("use_vllm", "yes", {}),
    ("run_name", 7, {}),
    ("report_to", 7, {}),
]


@pytest.mark.parametrize(("name", "value", "around"), WRONG_TYPE, ids=[w[0] for w in WRONG_TYPE])
def test_a_setting_of_the_wrong_type_is_told_its_type_and_nothing_else(name, value, around):
    config = RunConfig(**{name: value, **around})
    types_ = config.type_problems()
    problems = config.problems()
    assert name in types_ and problems[name] == types_[name]
    assert set(problems) - set(types_) <= {"system_prompt"} - {name}  # a prompt for a template not yet known


def test_a_batch_of_completions_is_checked_against_k_and_one_is_a_size():
    assert RunConfig(generation_batch_size=6, num_generations=4).problems() == {
        "generation_batch_size": "the generation batch of 6 completions must be evenly divisible by num_generations "
        "(K=4); use 4 or 8"
    }
    assert RunConfig(generation_batch_size=8, num_generations=4).problems() == {}
    assert RunConfig(generation_batch_size=1, num_generations=2).problems() == {  # a size, refused for K only
        "generation_batch_size": "the generation batch of 1 completions must be evenly divisible by num_generations "
        "(K=2); use 2"
    }
    assert RunConfig(generation_batch_size=0, num_generations=2).problems() == {
        "generation_batch_size": "must be a positive number of completions per step"
    }


def test_one_character_texts_are_texts_and_the_output_folder_takes_4096():
    assert RunConfig(text_column="t", system_prompt="x", prompt_template="chat").problems(check_files=False) == {}
    assert "output_dir" not in RunConfig(output_dir="d" * 4096).problems(check_files=False)
    assert "output_dir" in RunConfig(output_dir="d" * 4097).problems(check_files=False)
    assert "text_column" in RunConfig(text_column="  ").problems(check_files=False)


def test_a_path_like_policy_must_be_a_folder_with_a_config(tmp_path):
    for name in ("/no/such/policy", "~/no/such/policy", "./no/such/policy"):
        assert "policy" in RunConfig(policy=name).problems(), name
    (tmp_path / "config.json").write_text("{}")
    assert "policy" not in RunConfig(policy=str(tmp_path)).problems()
    assert "policy" not in RunConfig(policy="/no/such/policy").problems(check_files=False)


def test_bf16_needs_a_gpu_that_supports_it(monkeypatch):
    import torch

    message = "bf16 needs a GPU that supports it; on a CPU leave it off (fp32)"
    for available, supported, refused in [
        (False, False, True),
        (False, True, True),
        (True, False, True),
        (True, True, False),
    ]:
        monkeypatch.setattr(torch.cuda, "is_available", lambda a=available: a)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda s=supported: s)
        problems = RunConfig(bf16=True).problems(check_files=False)
        assert (problems.get("bf16") == message) is refused, (available, supported)


def test_a_reward_file_is_looked_for_unless_files_are_not_checked(tmp_path):
    config = RunConfig(rewards=["module:/no/such/file.py:score"])
    assert "rewards" in config.problems()
    assert "rewards" not in config.problems(check_files=False)
    with pytest.raises(ConfigError) as err:
        config.validate()
    assert "rewards" in err.value.problems
    assert config.validate(check_files=False) is config


def test_trackers_are_each_known_and_installed():
    from rloo_demo.config import tracker_problem

    assert tracker_problem("none") is None and tracker_problem("") is None
    assert tracker_problem("none, bogus") == (
        "unknown tracker 'bogus'; use none or tensorboard, trackio, wandb (comma-separated)"
    )
    assert tracker_problem(" none ,  ") is None


def test_a_tracker_not_installed_is_told_how_to_install_it(monkeypatch):
    import importlib.util

    from rloo_demo.config import tracker_problem

    real = importlib.util.find_spec
    missing = {"wandb", "trackio"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a))
    assert tracker_problem("wandb") == "tracker 'wandb' is not installed here; pip install wandb, or use none"
    assert tracker_problem("trackio") == (
        "tracker 'trackio' is not installed here; pip install 'rloo-demo[trackio]' (or trackio==0.43.0), or use none"
    )
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert tracker_problem("wandb,trackio") is None


def test_a_list_setting_holds_at_most_64_values():
    assert "reward_weights" not in RunConfig(reward_weights=[1.0] * 64).type_problems()
    assert "reward_weights" in RunConfig(reward_weights=[1.0] * 65).type_problems()


def test_unknown_settings_are_named_up_to_five_with_the_known_ones():
    from rloo_demo.config import RunConfig as C

    with pytest.raises(ConfigError) as err:
        C.from_dict({f"extra{i}": 1 for i in range(7)} | {3: 1})
    keys = list(err.value.problems)
    assert keys == ["'3'", "'extra0'", "'extra1'", "'extra2'", "'extra3'"]  # sorted, five, repr'd (3 by its repr)
    hint = err.value.problems["'extra0'"]
    assert hint == "unknown setting; known settings are " + ", ".join(sorted(f.name for f in fields(C)))
    with pytest.raises(ConfigError) as err:
        C.from_dict({3: 1, "x" * 50: 2})
    assert sorted(err.value.problems) == sorted(["'3'", "'" + "x" * 38 + "…"])  # cut at 40 characters
    with pytest.raises(ConfigError) as err:
        C.from_dict(["max_steps"])
    assert err.value.problems == {"config": "must be a mapping of settings, not list"}


def test_a_config_file_is_read_by_its_suffix_and_each_failure_is_told(tmp_path):
    path = tmp_path / "run.JSON"
    path.write_text('{"max_steps": 7, "launch": {"processes": 2}}')
    assert RunConfig.load(path).max_steps == 7  # .JSON is JSON; the launch record is not a setting
    missing = tmp_path / "none.yaml"
    with pytest.raises(ConfigError) as err:
        RunConfig.load(missing)
    assert err.value.problems == {"config": f"config file {str(missing)!r} does not exist"}
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"max_steps: \xff\n")
    with pytest.raises(ConfigError) as err:
        RunConfig.load(bad)
    assert err.value.problems["config"].startswith("bad.yaml cannot be read: 'utf-8' codec can't decode byte 0xff")
    bad.write_text("max_steps: [1,\n")
    with pytest.raises(ConfigError) as err:
        RunConfig.load(bad)
    assert err.value.problems["config"].startswith("bad.yaml is not valid YAML: while parsing a flow ")
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError) as err:
        RunConfig.load(bad)
    assert err.value.problems == {"config": "bad.yaml must hold a mapping of settings"}


def test_a_config_is_written_as_json_or_yaml_in_field_order(tmp_path):
    config = RunConfig(max_steps=7, seed=3)
    assert config.to_text(tmp_path / "c.json") == json.dumps(config.to_dict(), indent=2) + "\n"
    text = config.to_text(tmp_path / "c.yaml")
    keys = [line.split(":")[0] for line in text.splitlines() if line and not line.startswith((" ", "-"))]
    assert keys == list(config.to_dict())  # the dataclass's order, not sorted
    assert keys != sorted(keys)
