"""What a server allows, in one place: public mode from the environment, caps on every size, the allowlists, and
the checks of request values. Pure, no server. ``python -m pytest tests/test_limits.py``
"""

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.errors import ConfigError, InputError
from rloo_demo.server.limits import LOCAL, PUBLIC, Limits, as_float, as_int


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
    from rloo_demo.server.limits import as_text

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
    from rloo_demo.server.limits import SPACE_PROXIES, trusted_proxies_from_env

    assert trusted_proxies_from_env(env) == (SPACE_PROXIES if expected == "space" else expected)


def test_a_malformed_proxy_network_stops_the_start():
    from rloo_demo.server.limits import trusted_proxies_from_env

    with pytest.raises(SystemExit, match=r"^error: RLOO_TRUSTED_PROXIES: "):
        trusted_proxies_from_env({"RLOO_TRUSTED_PROXIES": "10.0.0.0/8,not-a-network"})
