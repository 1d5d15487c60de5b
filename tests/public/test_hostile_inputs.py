"""Hostile inputs that used to end in "internal error" get a clear refusal that names what to change. Each test
calls the controller method (or the named endpoint of a live server) a visitor can reach, and asserts a
``UserError`` (or the endpoint's ``{"error"}``) naming the field, with no traceback in the server log.

``python -m pytest tests/public/test_hostile_inputs.py`` (about a minute).
"""

import errno
import json
import logging
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from apputil import running_app
from factories import finished_run

from rloo_demo.config import RunConfig
from rloo_demo.errors import ConfigError, DiskFull, InputError, NotFound, UserError
from rloo_demo.models.hub import ASSETS_DIR
from rloo_demo.public.gates import Caller
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import is_disk_full_error
from rloo_demo.ui.controller import Controller

LIMITS = replace(LOCAL, sampling_per_minute=None)
WHO = Caller("visitor", "10.2.2.2")


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    finished_run(root)
    controller = Controller(Runner(str(root), limits=LIMITS, watchdog=False))
    yield controller
    controller.close()


def refusal(call) -> str:
    with pytest.raises(UserError) as info:
        call()
    return str(info.value)


# ----------------------------------------------------------------------------- prompts: tokens, not characters


@pytest.mark.parametrize("prompt", ["😀" * 500, "Ж" * 500, "ზ" * 500], ids=["emoji", "cyrillic", "georgian"])
def test_a_prompt_over_the_policys_context_is_cut_to_fit_with_a_note(controller, prompt):
    """500 characters are within the cap, but 500 emoji are over 1,000 byte-level tokens: the embedded policy
    has 256 positions and indexed its position table out of range (IndexError, "internal error"). The prompt's
    first tokens are now dropped until it fits, and the answer says how many."""
    for call in (
        lambda: controller.compare("done", prompt, 1, 8, 1.0, 1.0, 0, WHO),
        lambda: controller.probe("done", prompt, 1, 0, WHO),  # the run's own max_new_tokens
    ):
        out = call()
        assert out["prompt_cut"]["dropped"] > 0 and out["prompt_cut"]["context"] == 256
        assert "tokens were dropped" in out["prompt_note"], out["prompt_note"]


def test_a_prompt_that_fits_still_samples(controller):
    out = controller.compare("done", "This movie was", 2, 8, 1.0, 1.0, 0, WHO)
    assert len(out["base"]) == len(out["trained"]) == 2


def test_prompts_are_checked_before_any_model_loads(tmp_path):
    from rloo_demo.models.sampling import check_prompt_fits

    folder = str(ASSETS_DIR / "tiny-imdb-gpt2")
    check_prompt_fits(folder, "This movie was", 24)
    with pytest.raises(InputError, match="prompt is .* tokens long"):
        check_prompt_fits(folder, "😀" * 500, 24)
    with pytest.raises(InputError, match="do not fit this model's context"):
        check_prompt_fits(folder, "This movie was", 256)


def test_a_lone_surrogate_is_refused_wherever_a_text_goes_in(controller):
    bad = "ab\ud800"
    assert "prompt is not valid Unicode text" in refusal(lambda: controller.compare("done", bad, 1, 8, 1, 1, 0, WHO))
    assert "prompt is not valid Unicode text" in refusal(lambda: controller.probe("done", bad, 1, 0, WHO))
    assert "run is not valid Unicode text" in refusal(lambda: controller.get_rollouts(bad, 0))
    assert "client_id is not valid Unicode text" in refusal(lambda: controller.start({}, Caller(bad, "10.3.3.3")))
    for field, value in (
        ("system_prompt", bad),
        ("policy", bad),
        ("data_source", bad),
        ("text_column", bad),
        ("rewards", ["vader_compound", bad]),
        ("lora_target_modules", [bad]),
    ):
        with pytest.raises(ConfigError) as info:
            controller.parse_settings({field: value})
        assert "not valid Unicode text" in info.value.problems[field], (field, info.value.problems)
    with pytest.raises(ConfigError) as info:  # JSON's escape makes one, as the API receives it
        controller.parse_settings('{"system_prompt": "\\ud800"}')
    assert "lone surrogate" in info.value.problems["system_prompt"]


# ----------------------------------------------------------------------------- settings


def test_a_superscript_length_target_is_refused_clearly(controller):
    """str.isdigit() accepts '²' and int() does not: ValueError, "internal error"."""
    for name in ("length_target:²", "length_target:٣", "length_target:１２"):
        with pytest.raises(ConfigError) as info:
            controller.parse_settings({"rewards": [name]})
        assert "from 1 to 256" in info.value.problems["rewards"]
    assert controller.parse_settings({"rewards": ["length_target:12"]}).rewards == ["length_target:12"]


def test_a_5000_digit_number_is_refused_naming_its_field(controller):
    """Python refuses to convert over 4,300 digits: json.loads raised ValueError, "internal error"."""
    with pytest.raises(ConfigError) as info:
        controller.parse_settings('{"max_steps": ' + "9" * 5000 + "}")
    assert "max_steps" in info.value.problems and "whole number" in info.value.problems["max_steps"]
    with pytest.raises(ConfigError) as info:
        controller.parse_settings('{"beta": 1' + "0" * 5000 + ".5}")
    assert "finite number" in info.value.problems["beta"]


@pytest.mark.parametrize(
    ("settings", "field", "needle"),
    [
        ({"beta": 1e300}, "beta", "<= 100"),
        ({"beta": 101}, "beta", "<= 100"),
        ({"reward_weights": [1e300]}, "reward_weights", "[-1000, 1000]"),
        ({"rewards": ["vader_compound", "length_penalty"], "reward_weights": [1, -1001]}, "reward_weights", "-1001"),
        ({"temperature": 1e-300}, "temperature", "[0.01, 10]"),
        ({"temperature": 0.001}, "temperature", "[0.01, 10]"),
        ({"learning_rate": 1e300}, "learning_rate", "(0, 1]"),
    ],
)
def test_values_that_would_finish_with_nan_are_refused(controller, settings, field, needle):
    with pytest.raises(ConfigError) as info:
        controller.parse_settings(settings)
    assert needle in info.value.problems[field], info.value.problems
    controller.parse_settings({"beta": 100, "reward_weights": [1000]})  # the edges are allowed


def test_a_lora_module_the_policy_lacks_is_refused_before_the_run_starts(tmp_path):
    """Used to fail after the start, inside PEFT, with the model's module tree printed."""
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    for modules, needle in ((["nope"], "no module named 'nope'"), (["attn"], "names a GPT2Attention block")):
        settings = {"use_lora": True, "lora_target_modules": modules, "max_steps": 2}
        with pytest.raises(ConfigError) as info:
            controller.start(settings, Caller("me", "10.4.4.4"))
        problem = info.value.problems["lora_target_modules"]
        assert needle in problem and "c_attn, c_fc, c_proj" in problem, problem
    assert [p.name for p in tmp_path.iterdir()] == []  # no run folder was made
    from rloo_demo.engine.training import check_resources

    check_resources(RunConfig(use_lora=True, lora_target_modules=["c_attn", "h.0.mlp.c_fc"]))  # these exist


# ----------------------------------------------------------------------------- files on disk


def test_a_corrupt_model_in_a_run_folder_is_a_clear_not_found(tmp_path):
    run = finished_run(tmp_path, "corrupt")
    (run.path / "model" / "model.safetensors").write_bytes(b"\x00" * 64)  # a torn or overwritten weights file
    controller = Controller(Runner(str(tmp_path), limits=LIMITS, watchdog=False))
    with pytest.raises(NotFound, match="this run's model cannot be read"):
        controller.compare("corrupt", "This movie was", 1, 8, 1.0, 1.0, 0, WHO)
    with pytest.raises(NotFound, match="this run's model cannot be read"):
        controller.probe("corrupt", "This movie was", 1, 0, WHO)


SAFETENSORS_ENOSPC = "Error while serializing: I/O error: No space left on device (os error 28)"


def test_a_full_disk_during_the_model_save_reads_disk_full(tmp_path, monkeypatch):
    """safetensors' writer says SafetensorError, with no errno: the run read "SafetensorError: ...", not "disk
    full". The half-written model is removed, so its room is free for the status write after it."""
    import transformers.modeling_utils as modeling_utils
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        Path(args[1]).write_bytes(b"x" * 1000)  # half a file, as a full disk leaves it
        raise SafetensorError(SAFETENSORS_ENOSPC)

    monkeypatch.setattr(modeling_utils, "safe_save_file", full)
    runner = Runner(str(tmp_path), limits=LOCAL, watchdog=False)
    active = runner.start(RunConfig(max_steps=2, prompts_per_step=1, max_new_tokens=8, snapshot_every=0), "me")
    assert active.job.join(180)
    state = active.job.state
    assert state.status == "failed" and state.error.startswith("disk full"), state.error
    assert "model" in state.error
    folder = tmp_path / active.name
    assert not (folder / ".model.tmp").exists() and not (folder / "model").exists()
    assert json.loads((folder / "status.json").read_text())["error"].startswith("disk full")


def test_every_kind_of_full_disk_is_recognised():
    from safetensors import SafetensorError

    assert is_disk_full_error(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full_error(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full_error(SafetensorError(SAFETENSORS_ENOSPC))
    assert is_disk_full_error(DiskFull("disk full"))
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("the library's own words") from inner
    except RuntimeError as wrapped:
        assert is_disk_full_error(wrapped)
    assert not is_disk_full_error(SafetensorError("Error while deserializing header: HeaderTooLarge"))
    assert not is_disk_full_error(OSError(errno.EACCES, "Permission denied"))


# ----------------------------------------------------------------------------- the named endpoints, live


def test_hostile_values_at_the_named_endpoints_are_refused_without_a_traceback(space_runs_dir, caplog):
    limits = replace(PUBLIC, sampling_per_minute=None, sampling_share=None)
    caplog.set_level(logging.INFO)
    with running_app(space_runs_dir, limits=limits) as (url, controller):
        finished_run(space_runs_dir, "api-done")
        config = httpx.get(f"{url}config", timeout=30).json()
        ids = {d["api_name"]: d["id"] for d in config["dependencies"]}

        def call(api, data_json: str):
            """The endpoint called with raw JSON (a lone surrogate is an escape gradio_client cannot send)."""
            body = f'{{"data": {data_json}, "fn_index": {ids[api]}, "session_hash": "h1", "event_data": null}}'
            with httpx.Client(timeout=120) as http:
                joined = http.post(
                    f"{url}gradio_api/queue/join", content=body, headers={"content-type": "application/json"}
                )
                assert joined.status_code == 200, joined.text
                with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": "h1"}) as stream:
                    for line in stream.iter_lines():
                        if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_completed":
                            return json.loads(line[5:])["output"]["data"][0]
            raise AssertionError("no answer")

        emoji = json.dumps(["api-done", "😀" * 500, 2, 0])
        assert "tokens were dropped" in call("compare", emoji)["prompt_note"]  # cut to fit
        assert "at most 500" in call("compare", json.dumps(["api-done", "a " * 12_500, 2, 0]))["error"]
        assert "prompt is not valid Unicode" in call("compare", '["api-done", "\\ud800", 2, 0]')["error"]
        assert "run is not valid Unicode" in call("get_rollouts", '["\\ud800", 0]')["error"]
        assert "client_id is not valid Unicode" in call("start_run", '["{}", "\\ud800"]')["error"]
        huge = json.dumps(['{"max_steps": ' + "9" * 5000 + "}", "visitor"])
        assert "max_steps" in call("start_run", huge)["error"]
        assert "rewards" in call("start_run", json.dumps(['{"rewards": ["length_target:²"]}', "visitor"]))["error"]
        assert "beta" in call("start_run", json.dumps(['{"beta": 1e300}', "visitor"]))["error"]
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "internal error" not in logged and "Traceback" not in logged, logged[-3000:]
    assert "Exception in ASGI application" not in logged


HOSTILE_LOCALES = ["<script>alert(1)</script>", "zz" * 5000, 5, ["ru"], {"ka": 1}, "", None]


def test_a_hostile_language_reads_as_english_at_the_pages_load_and_switch(space_runs_dir, capfd):
    """The page's load and its language switch, sent with a language the page does not have: answered (not
    gradio's HTTP 500 with the value echoed back), in English, with nothing of the value in the answer and no
    traceback in the server log. A language it has is still taken."""
    from apputil import call_event

    from rloo_demo.ui.views.train import idle_status

    english, russian = idle_status("en"), idle_status("ru")  # the status line of a page with no run
    with running_app(space_runs_dir, limits=PUBLIC) as (url, controller):
        for i, value in enumerate(HOSTILE_LOCALES):  # a visitor each: a page load is charged what it costs
            for event, data in (("page_load", ["cid", value]), ("page_language", [value, None, 0.6])):
                out = call_event(url, event, data, session_hash=f"s-{event}", address=f"127.0.0.{10 + i}")
                text = json.dumps(out, ensure_ascii=False)
                assert english in text and russian not in text, (event, value)
                if isinstance(value, str) and len(value) > 3:
                    assert value not in text, (event, value)
        assert russian in json.dumps(
            call_event(url, "page_load", ["cid", "ru"], session_hash="s-ok"), ensure_ascii=False
        )
    assert "Traceback" not in capfd.readouterr().err
