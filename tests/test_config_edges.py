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
