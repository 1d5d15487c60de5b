"""RunConfig validation and (de)serialisation: ``python -m pytest tests/test_config.py``."""

import pytest

from rloo_demo.config import ConfigError, RunConfig


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
        ({"learning_rate": 0.0}, "learning_rate", "must be > 0"),
        ({"beta": -0.1}, "beta", ">= 0"),
        ({"top_p": 1.5}, "top_p", "(0, 1]"),
        ({"rewards": ["nope"]}, "rewards", "unknown reward 'nope'"),
        ({"rewards": []}, "rewards", "at least one"),
        ({"reward_weights": [1.0, 2.0]}, "reward_weights", "give one each"),
        ({"prompt_template": "chat"}, "prompt_template", "continuation or instruction"),
        ({"data_source": "/no/such/file.csv"}, "data_source", "does not exist"),
        ({"policy": "./no-such-model"}, "policy", "does not exist"),
    ],
)
def test_invalid_settings_say_how_to_fix(kw, field, needle):
    p = problems(**kw)
    assert field in p
    assert needle in p[field]


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
    cfg.save(path)
    assert RunConfig.load(path) == cfg


def test_unknown_key_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting"):
        RunConfig.from_dict({"num_gens": 4})
    with pytest.raises(ConfigError, match="does not exist"):
        RunConfig.load(tmp_path / "missing.yaml")


def test_to_rloo_config():
    cfg = RunConfig(prompts_per_step=3, num_generations=4, beta=0.1, learning_rate=2e-3, max_new_tokens=16)
    args = cfg.to_rloo_config("/tmp/x", reward_weights=[1.0])
    assert args.per_device_train_batch_size == 12
    assert args.num_generations == 4
    assert args.generation_batch_size % args.num_generations == 0
    assert args.beta == 0.1 and args.learning_rate == 2e-3 and args.max_completion_length == 16
    assert args.disable_dropout is True
    with pytest.raises(ConfigError, match="processes"):
        RunConfig(prompts_per_step=1, num_generations=3).to_rloo_config("/tmp/x", num_processes=2)
