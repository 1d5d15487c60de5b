"""What a server allows, in one place: public mode from the environment, caps on every size, the allowlists, and
the checks of request values. Pure, no server. ``python -m pytest tests/public/test_limits.py``

``public.limits`` word for word: every refusal a server writes, on a config that breaks every cap at once, and
the request checks' names, bounds and texts. The expected texts are written out here, not read from the module.

``python -m pytest tests/public/test_limits.py`` (a second)."""

from dataclasses import replace

import pytest

from rloo_demo.config import MAX_SEED, RunConfig
from rloo_demo.errors import ConfigError, InputError, TooLong
from rloo_demo.public.limits import ENV_NAMES, LOCAL, PUBLIC, Limits, as_float, as_int, as_text

# ----------------------------------------------------------------------------- limits


def test_public_mode_comes_from_the_environment():
    assert not Limits.from_env({}).public
    assert Limits.from_env({"SPACE_ID": "user/space"}).public
    assert Limits.from_env({"RLOO_PUBLIC": "1"}).public
    assert not Limits.from_env({"RLOO_PUBLIC": "0"}).public
    assert Limits.from_env({"RLOO_PUBLIC": "1"}) == PUBLIC
    assert Limits.from_env({}) == LOCAL


def test_every_cap_has_an_environment_variable():
    env = {
        "RLOO_PUBLIC": "1",
        "RLOO_MAX_STEPS": "42",
        "RLOO_MAX_RUN_SECONDS": "60",
        "RLOO_ABANDON_SECONDS": "off",
        "RLOO_ALLOWED_MODELS": "HuggingFaceTB/SmolLM2-135M-Instruct, sshleifer/tiny-gpt2",
        "RLOO_ADMIN_TOKEN": "s3cret",
        "RLOO_SAMPLING_SHARE": "0.5",
    }
    limits = Limits.from_env(env)
    assert limits.max_steps == 42 and limits.max_run_seconds == 60 and limits.abandon_seconds is None
    assert limits.allowed_models == ("HuggingFaceTB/SmolLM2-135M-Instruct", "sshleifer/tiny-gpt2")
    assert limits.admin_token == "s3cret" and "s3cret" not in repr(limits)
    assert limits.sampling_share == 0.5
    assert isinstance(limits.max_steps, int)
    with pytest.raises(SystemExit, match="RLOO_MAX_STEPS"):
        Limits.from_env({"RLOO_MAX_STEPS": "lots"})
    with pytest.raises(SystemExit, match="RLOO_MAX_K"):
        Limits.from_env({"RLOO_MAX_K": "-3"})


def test_caps_name_every_field_over_its_limit():
    limits = Limits(
        max_steps=50,
        max_k=4,
        max_prompts_per_step=4,
        max_completions_per_step=12,
        max_new_tokens=16,
        max_prompt_words=10,
        max_lora_r=8,
        max_lora_alpha=16,
    )
    limits.check_config(RunConfig(max_steps=50, num_generations=4, prompts_per_step=3, max_new_tokens=16))
    over = RunConfig(
        max_steps=51,
        num_generations=8,
        prompts_per_step=5,
        max_new_tokens=17,
        prompt_words=11,
        lora_r=9,
        lora_alpha=17,
    )
    with pytest.raises(ConfigError) as info:
        limits.check_config(over)
    assert set(info.value.problems) == {
        "max_steps",
        "num_generations",
        "prompts_per_step",
        "generation_batch_size",
        "max_new_tokens",
        "prompt_words",
        "lora_r",
        "lora_alpha",
    }
    assert "at most 50 steps" in info.value.problems["max_steps"]
    # the generation batch is capped whichever way it is given
    assert "generation_batch_size" in limits.config_problems(RunConfig(generation_batch_size=16))


def test_local_server_takes_paths_and_hub_ids_public_does_not():
    custom = RunConfig(
        policy="/etc", data_source="/srv/secret.jsonl", rewards=["classifier:./somewhere"], report_to="tensorboard"
    )
    assert LOCAL.config_problems(custom) == {}
    problems = PUBLIC.config_problems(custom)
    assert set(problems) == {"policy", "data_source", "rewards", "report_to"}
    assert "embedded:tiny-imdb-gpt2" in problems["policy"]


def test_operator_allowlists_open_named_hub_ids_only():
    limits = Limits.from_env({"RLOO_PUBLIC": "1", "RLOO_ALLOWED_MODELS": "org/model", "RLOO_ALLOWED_DATASETS": "o/d"})
    assert limits.config_problems(RunConfig(policy="org/model", data_source="o/d")) == {}
    assert limits.config_problems(RunConfig(rewards=["classifier:org/model", "vader_compound"])) == {}
    assert "policy" in limits.config_problems(RunConfig(policy="org/other"))
    assert "rewards" in limits.config_problems(RunConfig(rewards=["classifier:org/other"]))
    assert limits.config_problems(RunConfig(rewards=["classifier:embedded:tiny-imdb-sentiment"])) == {}


def test_fields_with_type_problems_are_left_to_the_type_check():
    # a cap compares numbers; a string where a number belongs must not crash it
    assert PUBLIC.config_problems(RunConfig(max_steps="999999", policy=None)) == {}


def test_sampling_request_values():
    ok = PUBLIC.sampling_request(4, 24.0, 1, 0.9, 0, "This movie was")
    assert ok == {
        "prompt": "This movie was",
        "num_samples": 4,
        "max_new_tokens": 24,
        "temperature": 1.0,
        "top_p": 0.9,
        "seed": 0,
    }
    bad = [
        ((0, 24, 1.0, 1.0, 0, "p"), "number of samples must be between 1 and 8"),
        ((9, 24, 1.0, 1.0, 0, "p"), "between 1 and 8"),
        ((4, 65, 1.0, 1.0, 0, "p"), "max new tokens must be between 1 and 64"),
        ((4, 24, float("nan"), 1.0, 0, "p"), "temperature must be a finite number"),
        ((4, 24, 1.0, 0.0, 0, "p"), "top-p must be between"),
        ((4, 24, 1.0, 1.0, -1, "p"), "seed must be between 0"),
        ((True, 24, 1.0, 1.0, 0, "p"), "must be a whole number, not True"),
        ((4.5, 24, 1.0, 1.0, 0, "p"), "must be a whole number, not 4.5"),
        ((4, 24, 1.0, 1.0, 0, "x" * 501), "at most 500"),
        ((4, 24, 1.0, 1.0, 0, "   "), "type a prompt"),
        ((4, 24, 1.0, 1.0, 0, None), "prompt must be a text"),
    ]
    for args, needle in bad:
        with pytest.raises(InputError, match=needle.replace("(", r"\(")):
            PUBLIC.sampling_request(*args)


def test_eval_request_values():
    assert PUBLIC.eval_request(64, 3) == {"num_prompts": 64, "seed": 3}
    with pytest.raises(InputError, match="between 1 and 64"):
        PUBLIC.eval_request(65, 0)
    assert LOCAL.eval_request(512, 0)["num_prompts"] == 512


def test_as_int_and_as_float():
    assert as_int("n", 3.0, 1, 5) == 3 and as_float("x", 2, 0, 5) == 2.0
    for value in ("3", None, [3], float("inf"), True):
        with pytest.raises(InputError):
            as_int("n", value, 1, 5)
    for value in ("1", None, float("nan"), float("-inf"), False):
        with pytest.raises(InputError):
            as_float("x", value, 0, 5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: as_int("K", "4", 2, 64), "K must be a whole number, not '4'"),
        (lambda: as_int("K", True, 2, 64), "K must be a whole number, not True"),
        (lambda: as_int("K", 4.5, 2, 64), "K must be a whole number, not 4.5"),
        (lambda: as_int("K", 1, 2, 64), "K must be between 2 and 64, not 1"),
        (lambda: as_int("K", 65.0, 2, 64), "K must be between 2 and 64, not 65"),
        (lambda: as_float("top_p", 0.0, 0.01, 1.0), "top_p must be between 0.01 and 1, not 0.0"),
        (lambda: as_float("top_p", 1.5, 0.01, 1), "top_p must be between 0.01 and 1, not 1.5"),
        (lambda: as_float("top_p", float("inf"), 0, 1), "top_p must be a finite number, not inf"),
        (lambda: as_float("top_p", "0.5", 0, 1), "top_p must be a finite number, not '0.5'"),
    ],
    ids=["text", "bool", "fraction", "below", "above", "float-below", "float-above", "inf", "float-text"],
)
def test_a_number_out_of_its_range_is_told_its_range(call, message):
    with pytest.raises(InputError) as err:
        call()
    assert str(err.value) == message


def test_the_edges_of_a_range_are_taken():
    assert as_int("K", 2, 2, 64) == 2 and as_int("K", 64.0, 2, 64) == 64 and isinstance(as_int("K", 64.0, 2, 64), int)
    assert as_float("t", 0.01, 0.01, 10) == 0.01 and as_float("t", 10, 0.01, 10) == 10.0
    assert isinstance(as_float("t", 3, 0, 10), float)


def test_a_text_is_a_text_within_its_length_that_encodes():
    from rloo_demo.errors import TooLong
    from rloo_demo.public.limits import as_text

    assert as_text("prompt", "é" * 5, 5) == "é" * 5
    with pytest.raises(TooLong):
        as_text("prompt", "é" * 6, 5)
    with pytest.raises(InputError, match="^prompt must be a text, not 5$"):
        as_text("prompt", 5, 5)
    with pytest.raises(InputError, match="^prompt "):
        as_text("prompt", "a\ud800b", 5)  # a lone surrogate: no tokenizer takes it


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),
        ({"RLOO_TRUSTED_PROXIES": ""}, ()),
        ({"RLOO_TRUSTED_PROXIES": " 10.0.0.0/8 , ,192.168.1.7"}, ("10.0.0.0/8", "192.168.1.7")),
        ({"SPACE_ID": "me/space"}, "space"),
        ({"SPACE_ID": "me/space", "RLOO_TRUSTED_PROXIES": "10.1.0.0/16"}, ("10.1.0.0/16",)),
        ({"SPACE_ID": "me/space", "RLOO_TRUST_FORWARDED": " OFF "}, ()),
        ({"RLOO_TRUSTED_PROXIES": "10.0.0.0/8", "RLOO_TRUST_FORWARDED": "no"}, ()),
        ({"RLOO_TRUSTED_PROXIES": "10.0.0.0/8", "RLOO_TRUST_FORWARDED": "yes"}, ("10.0.0.0/8",)),
    ],
    ids=["nothing", "empty", "listed", "space", "listed-on-space", "off-on-space", "no", "yes"],
)
def test_which_proxies_the_environment_trusts(env, expected):
    from rloo_demo.public.limits import SPACE_PROXIES, trusted_proxies_from_env

    assert trusted_proxies_from_env(env) == (SPACE_PROXIES if expected == "space" else expected)


def test_a_malformed_proxy_network_stops_the_start():
    from rloo_demo.public.limits import trusted_proxies_from_env

    with pytest.raises(SystemExit, match=r"^error: RLOO_TRUSTED_PROXIES: "):
        trusted_proxies_from_env({"RLOO_TRUSTED_PROXIES": "10.0.0.0/8,not-a-network"})


# ----------------------------------------------------------------------------- limits exact


# A server of its own: every cap small and distinct, so a message that names the wrong cap or value is seen.
SMALL = replace(
    PUBLIC,
    max_steps=11,
    max_k=3,
    max_prompts_per_step=5,
    max_completions_per_step=13,
    max_new_tokens=17,
    max_prompt_words=19,
    max_lora_r=23,
    max_lora_alpha=29,
    min_variance_every=31,
    min_snapshot_every=37,
    max_prompt_chars=41,
    allowed_models=("org/policy", "org/judge"),
    allowed_datasets=("org/data",),
)

EVERYTHING_TOO_BIG = dict(
    max_steps=12,
    num_generations=4,
    prompts_per_step=6,
    max_new_tokens=18,
    prompt_words=20,
    use_lora=True,
    lora_r=24,
    lora_alpha=30,
    variance_every=30,
    snapshot_every=36,
    policy="someone/else",
    data_source="someone/data",
    rewards=["vader_compound", "classifier:someone/judge"],
    report_to="wandb",
    use_vllm=True,
    system_prompt="s" * 42,
)


def test_a_config_that_breaks_every_cap_is_told_each_cap_and_its_value():
    config = RunConfig(**EVERYTHING_TOO_BIG)
    assert config.type_problems() == {}
    choices = "vader_compound, sentiment_classifier, length_penalty, keyword:<word>, length_target:<n>"
    assert SMALL.config_problems(config) == {
        "max_steps": "this server allows at most 11 steps, not 12",
        "num_generations": "this server allows at most 3 completions per prompt (K), not 4",
        "prompts_per_step": "this server allows at most 5 prompts per step, not 6",
        "generation_batch_size": "this server allows at most 13 completions a step, not 24",
        "max_new_tokens": "this server allows at most 17 new tokens per completion, not 18",
        "prompt_words": "this server allows at most 19 prompt words, not 20",
        "lora_r": "this server allows at most 23 as LoRA rank, not 24",
        "lora_alpha": "this server allows at most 29 as LoRA alpha, not 30",
        "variance_every": "this server measures the gradient variance at most every 31 steps (each measurement costs "
        "several training steps); use 0 (off) or at least that",
        "snapshot_every": "this server saves a policy snapshot at most every 37 steps; use 0 (none) or at least 37",
        "policy": "this server trains 'embedded:tiny-imdb-gpt2' or 'org/policy' or 'org/judge' only",
        "data_source": "this server takes prompts from 'embedded:imdb' or 'org/data'",
        "rewards": f"'classifier:someone/judge' is not available here; use {choices} or classifier:<org/policy | "
        "org/judge>",
        "report_to": "trackers write files or reach the network; this server allows none",
        "use_vllm": "this server generates with transformers; vLLM is for a server of your own",
        "system_prompt": "this server takes a system prompt of at most 41 characters",
    }
    with pytest.raises(ConfigError) as err:
        SMALL.check_config(config)
    assert err.value.problems == SMALL.config_problems(config)


def test_every_cap_is_met_exactly_at_its_value():
    at_caps = dict(
        EVERYTHING_TOO_BIG,
        max_steps=11,
        num_generations=3,
        prompts_per_step=4,
        max_new_tokens=17,
        prompt_words=19,
        lora_r=23,
        lora_alpha=29,
        variance_every=31,
        snapshot_every=37,
        policy=" org/policy ",
        data_source="org/data",
        rewards=["classifier:org/judge", "keyword:great", "length_target:12"],
        report_to=" none ",
        use_vllm=False,
        system_prompt="s" * 41,
    )
    assert SMALL.config_problems(RunConfig(**at_caps)) == {}  # 4 x 3 = 12 completions, under 13
    assert SMALL.config_problems(RunConfig(**at_caps, generation_batch_size=15)) == {
        "generation_batch_size": "this server allows at most 13 completions a step, not 15"
    }
    off = RunConfig(**dict(at_caps, variance_every=0, snapshot_every=0))
    assert SMALL.config_problems(off) == {}  # 0 is "off", never "too often"
    once = RunConfig(**dict(at_caps, variance_every=1, snapshot_every=1))
    assert set(SMALL.config_problems(once)) == {"variance_every", "snapshot_every"}


def test_without_allowed_models_the_refusal_offers_no_classifier_list():
    config = RunConfig(rewards=["length_penalty", "exotic_reward"])
    assert PUBLIC.config_problems(config) == {
        "rewards": "'exotic_reward' is not available here; use vader_compound, sentiment_classifier, length_penalty, "
        "keyword:<word>, length_target:<n>"
    }
    assert PUBLIC.config_problems(RunConfig(rewards=["classifier:embedded:tiny-imdb-sentiment"])) == {}
    assert "rewards" in PUBLIC.config_problems(RunConfig(rewards=["classifier:org/judge"]))
    assert PUBLIC.config_problems(RunConfig(policy="org/policy")) == {
        "policy": "this server trains 'embedded:tiny-imdb-gpt2' only"
    }


def test_a_reward_module_is_refused_first_with_what_a_public_server_offers():
    config = RunConfig(rewards=["module:my.py:score", "exotic"])
    assert PUBLIC.config_problems(config) == {
        "rewards": "your own reward functions (module:<file.py>:<function>) run code, so only a local server loads "
        "them; here use vader_compound, sentiment_classifier, length_penalty, keyword:<word>, length_target:<n>"
    }
    assert "rewards" not in LOCAL.config_problems(config)  # a local server loads them (config.problems checks the file)


def test_the_embedded_data_has_one_text_column_and_other_data_is_not_told_so():
    assert PUBLIC.config_problems(RunConfig(text_column="review")) == {
        "text_column": "the embedded data has one text column, 'text'"
    }
    allowing = replace(PUBLIC, allowed_datasets=("org/data",))
    assert allowing.config_problems(RunConfig(text_column="review", data_source="org/data")) == {}


def test_a_local_server_applies_its_caps_and_none_of_the_public_rules():
    config = RunConfig(**EVERYTHING_TOO_BIG)
    local = replace(SMALL, public=False)
    assert sorted(local.config_problems(config)) == sorted(
        [
            "max_steps",
            "num_generations",
            "prompts_per_step",
            "generation_batch_size",
            "max_new_tokens",
            "prompt_words",
            "lora_r",
            "lora_alpha",
            "variance_every",
            "snapshot_every",
        ]
    )


def test_every_field_with_a_type_problem_is_left_to_the_type_check():
    """A field of the wrong type is skipped (its type problem is the message); the completions-a-step cap is
    skipped when any of its three inputs is wrong, and only then."""
    wrong = dict.fromkeys(
        [
            "max_steps",
            "num_generations",
            "prompts_per_step",
            "max_new_tokens",
            "prompt_words",
            "lora_r",
            "lora_alpha",
            "variance_every",
            "snapshot_every",
            "use_vllm",
        ],
        "many",
    )
    wrong.update(policy=7, data_source=7, rewards="vader_compound", report_to=7, system_prompt=7, text_column=7)
    config = RunConfig(**wrong)
    assert set(config.type_problems()) == set(wrong)
    assert SMALL.config_problems(config) == {}
    for name in ("generation_batch_size", "prompts_per_step", "num_generations"):
        fields = dict(prompts_per_step=6, num_generations=3, generation_batch_size=None)
        fields[name] = "many"
        problems = SMALL.config_problems(RunConfig(**fields))
        assert "generation_batch_size" not in problems, name
    problems = SMALL.config_problems(RunConfig(prompts_per_step=5, num_generations=3))  # 15 > 13, all well-typed
    assert problems["generation_batch_size"] == "this server allows at most 13 completions a step, not 15"


# ----------------------------------------------------------------------------- requests


def _refusal(call, *args):
    with pytest.raises(InputError) as err:
        call(*args)
    return str(err.value)


def test_the_probes_request_names_each_bad_value():
    assert SMALL.probe_request(" a prompt ", 8.0, MAX_SEED) == {
        "prompt": " a prompt ",
        "num_samples": 8,
        "seed": MAX_SEED,
    }
    assert _refusal(SMALL.probe_request, "   ", 1, 0) == "pick a held-out prompt, or type one"
    assert _refusal(SMALL.probe_request, "p", 9, 0) == "completions per step must be between 1 and 8, not 9"
    assert _refusal(SMALL.probe_request, "p", 1, -1) == f"seed must be between 0 and {MAX_SEED}, not -1"
    assert _refusal(SMALL.probe_request, 5, 1, 0) == "prompt must be a text, not 5"
    with pytest.raises(TooLong) as err:
        SMALL.probe_request("x" * 42, 1, 0)
    assert (err.value.name, err.value.chars, err.value.limit) == ("prompt", 42, 41)
    assert str(err.value) == "prompt is 42 characters long; this server takes at most 41"


def test_compares_and_evaluates_requests_name_each_bad_value():
    blank = _refusal(SMALL.sampling_request, 1, 1, 1.0, 0.9, 0, "\t")
    assert blank == "type a prompt, or pick one from the held-out set"
    assert _refusal(SMALL.sampling_request, 1, 1, 1.0, 1.01, 0, "p") == "top-p must be between 0.01 and 1, not 1.01"
    assert SMALL.sampling_request(1, 1, 1.0, 1.0, 0, "p")["top_p"] == 1.0
    assert _refusal(SMALL.eval_request, 65, 0) == "number of held-out prompts must be between 1 and 64, not 65"
    assert _refusal(SMALL.eval_request, 1, "3") == "seed must be a whole number, not '3'"


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_float_that_is_not_finite_is_refused_by_name(value):
    assert _refusal(as_float, "temperature", value, 0.0, 2.0) == f"temperature must be a finite number, not {value!r}"


def test_a_text_too_long_is_told_its_name_and_both_lengths():
    with pytest.raises(TooLong) as err:
        as_text("system prompt", "abcdef", 5)
    assert str(err.value) == "system prompt is 6 characters long; this server takes at most 5"
    assert as_text("system prompt", "abcde", 5) == "abcde"


# ----------------------------------------------------------------------------- the environment


def test_the_operators_table_names_every_setting_its_variable_and_value():
    limits = replace(LOCAL, max_k=7, allowed_models=("a/b",), admin_token="secret")
    rows = limits.table()
    assert rows[0] == ("public", "", "False")  # public is set by the mode, not a variable of its own
    assert ("max_k", "RLOO_MAX_K", "7") in rows and ("allowed_models", "RLOO_ALLOWED_MODELS", "('a/b',)") in rows
    assert ("sampling_share", "RLOO_SAMPLING_SHARE", "None") in rows
    assert all(row[0] != "admin_token" for row in rows) and "secret" not in str(rows)  # the token is never shown
    assert [row[0] for row in rows] == [name for name in Limits.__dataclass_fields__ if name != "admin_token"]
    assert all(var == ENV_NAMES[name] for name, var, _ in rows[1:])


@pytest.mark.parametrize("word", ["1", "true", "TRUE", " Yes ", "on", "On"])
def test_public_mode_is_on_for_each_word_that_means_yes(word):
    assert Limits.from_env({"RLOO_PUBLIC": word}).public is True


@pytest.mark.parametrize("word", ["", "0", "false", "no", "off", "yes please", "2"])
def test_public_mode_is_off_for_anything_else(word):
    assert Limits.from_env({"RLOO_PUBLIC": word}).public is False
    assert Limits.from_env({}).public is False
    assert Limits.from_env({"SPACE_ID": "org/space"}).public is True


@pytest.mark.parametrize("word", ["", "none", "NONE", "off", "Off", "0"])
def test_an_optional_limit_is_switched_off_by_each_word_for_none(word):
    assert PUBLIC.sampling_per_minute == 12
    assert Limits.from_env({"RLOO_PUBLIC": "1", "RLOO_SAMPLING_PER_MINUTE": word}).sampling_per_minute is None


def test_a_limit_that_is_not_optional_takes_no_word_for_none():
    with pytest.raises(SystemExit) as err:
        Limits.from_env({"RLOO_MAX_K": "none"})
    assert str(err.value) == "error: RLOO_MAX_K='none' is not a number"
    assert Limits.from_env({"RLOO_MAX_K": "0"}).max_k == 0
    assert isinstance(Limits.from_env({"RLOO_MAX_K": "6"}).max_k, int)


def test_the_environment_is_read_from_the_process_when_none_is_given(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setenv("RLOO_PUBLIC", "1")
    monkeypatch.setenv("RLOO_MAX_K", "5")
    assert Limits.from_env().public is True and Limits.from_env().max_k == 5


@pytest.mark.parametrize("word", ["0", "false", "FALSE", " no ", "Off"])
def test_trust_forwarded_off_believes_no_proxy_whatever_else_is_set(word):
    env = {"SPACE_ID": "org/space", "RLOO_TRUSTED_PROXIES": "10.0.0.0/8", "RLOO_TRUST_FORWARDED": word}
    assert Limits.from_env(env).trusted_proxies == ()


def test_trust_forwarded_unset_or_yes_keeps_the_proxies():
    assert Limits.from_env({"SPACE_ID": "org/space"}).trusted_proxies == (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
    )
    env = {"RLOO_TRUSTED_PROXIES": "10.1.0.0/16", "RLOO_TRUST_FORWARDED": "1"}
    assert Limits.from_env(env).trusted_proxies == ("10.1.0.0/16",)


def test_no_tracker_written_either_way_is_allowed_on_a_public_server():
    for report_to in ("", "  ", "none", " none "):
        assert PUBLIC.config_problems(RunConfig(report_to=report_to)) == {}, report_to
    assert set(PUBLIC.config_problems(RunConfig(report_to="trackio"))) == {"report_to"}


def test_a_text_column_of_the_wrong_type_is_left_to_the_type_check():
    config = RunConfig(text_column=7)
    assert "text_column" in config.type_problems()
    assert PUBLIC.config_problems(config) == {}


def test_a_limit_of_a_float_field_stays_a_float_when_written_whole():
    limits = Limits.from_env({"RLOO_MAX_RUN_SECONDS": "300", "RLOO_SAMPLING_SHARE": "1", "RLOO_MAX_K": "6"})
    assert type(limits.max_run_seconds) is float and limits.max_run_seconds == 300.0
    assert type(limits.sampling_share) is float and type(limits.max_k) is int
