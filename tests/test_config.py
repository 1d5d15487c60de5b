"""RunConfig validation and (de)serialisation: ``python -m pytest tests/test_config.py``."""

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import rloo_config
from rloo_demo.errors import ConfigError
from rloo_demo.store.jsonl import save_config


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
