"""Every setting's check at its edges, word for word: the last value taken, the first one refused, and the message
that says how to fix it (config.RunConfig.problems). A boundary moved by one, a message that names the wrong
limit or field, or a check that runs with another field already wrong, fails here."""

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

LO_T, HI_T = TEMPERATURE_RANGE
TAKEN = [
    dict(num_generations=2), dict(generation_batch_size=8, num_generations=4), dict(snapshot_every=0), dict(seed=0),
    dict(seed=MAX_SEED), dict(learning_rate=1.0), dict(beta=0.0), dict(beta=MAX_BETA), dict(temperature=LO_T),
    dict(temperature=HI_T), dict(top_p=1.0), dict(reward_offset=MAX_REWARD_OFFSET),
    dict(reward_offset=-MAX_REWARD_OFFSET), dict(variance_every=0), dict(reward_weights=[MAX_REWARD_WEIGHT]),
    dict(reward_weights=[-MAX_REWARD_WEIGHT]), dict(system_prompt="x" * MAX_SYSTEM_PROMPT_CHARS),
    dict(system_prompt="hi", prompt_template="chat"), dict(system_prompt="hi", prompt_template="auto"),
    dict(text_column="c" * 100), dict(policy="p" * 300), dict(lora_target_modules=["c_attn", "transformer.h.0"]),
    dict(reward_offset=1.0, estimator="reinforce"), dict(variance_every=5, estimator="reinforce"),
]
REFUSED = [
    (dict(num_generations=1), "num_generations",
     "K=1: RLOO needs at least 2 completions per prompt for a leave-one-out baseline; use 4 to 8"),
    (dict(generation_batch_size=0), "generation_batch_size", "must be a positive number of completions per step"),
    (dict(generation_batch_size=10, num_generations=4), "generation_batch_size",
     "the generation batch of 10 completions must be evenly divisible by num_generations (K=4); use 8 or 12"),
    (dict(generation_batch_size=3, num_generations=4), "generation_batch_size",
     "the generation batch of 3 completions must be evenly divisible by num_generations (K=4); use 4"),
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
    (dict(reward_offset=1.0, estimator="grpo"), "reward_offset",
     "GRPO's advantage (r - group mean) / group std removes any constant offset, so it would change nothing; use "
     "the offset with estimator rloo or reinforce, or leave it 0"),
    (dict(variance_every=-1), "variance_every", "must be 0 (off) or a number of steps, not -1"),
    (dict(variance_every=5, estimator="grpo"), "variance_every",
     "the meter measures on RLOO's captured batch: use it with estimator rloo or reinforce"),
    (dict(rewards=[]), "rewards", "give at least one reward function, e.g. vader_compound"),
    (dict(rewards=["vader_compound", "vader_compound"]), "rewards", "each reward function may appear only once"),
    (dict(rewards=["vader_compound"], reward_weights=[1.0, 2.0]), "reward_weights",
     "1 reward function(s) but 2 weight(s); give one each"),
    (dict(reward_weights=[-MAX_REWARD_WEIGHT - 1]), "reward_weights",
     "each weight must be in [-1000, 1000], not -1001.0 (rewards are in [-1, 1]; a weight that large overflows the "
     "advantages to NaN)"),
    (dict(prompt_template="weird"), "prompt_template",
     "unknown template 'weird'; use auto, continuation, instruction or chat"),
    (dict(system_prompt="   "), "system_prompt", "give a text of 1 to 4000 characters, or none"),
    (dict(system_prompt="x" * (MAX_SYSTEM_PROMPT_CHARS + 1)), "system_prompt",
     "give a text of 1 to 4000 characters, or none"),
    (dict(system_prompt="hi", prompt_template="instruction"), "system_prompt",
     "only chat prompts have a system message; use prompt_template chat or auto, not 'instruction'"),
    (dict(policy=" "), "policy", "must be a non-empty text of at most 300 characters"),
    (dict(policy="p" * 301), "policy", "must be a non-empty text of at most 300 characters"),
    (dict(text_column="c" * 101), "text_column", "must be a non-empty text of at most 100 characters"),
    (dict(data_source=""), "data_source", "must be a non-empty text of at most 500 characters"),
    (dict(lora_target_modules=[]), "lora_target_modules",
     "give module names such as c_attn c_proj (letters, digits, '_' and '.')"),
    (dict(lora_target_modules=["c_attn", "bad name"]), "lora_target_modules",
     "give module names such as c_attn c_proj (letters, digits, '_' and '.')"),
    (dict(run_name="../x"), "run_name", "use 1 to 100 of A-Z a-z 0-9 . _ -, not starting with '.'"),
    (dict(data_source="/nope/x.csv"), "data_source",
     "file '/nope/x.csv' does not exist; give a .csv/.jsonl path, a hub id or 'embedded:imdb'"),
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
