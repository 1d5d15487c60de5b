"""Input a user can fix (issue 24, item 9): every refusal of the Train form names the field by its label in the
page's language, in one message beside the action bar; a value past a limit is refused with the limit named, never
made the largest allowed; nothing a user sends ends in gradio's bare range error (an HTTP 500) or a traceback in
the server log; a prompt past the policy's context is cut to fit, with a note, in Compare, the probe and the API.

The form's events are called on a live server the way a browser (or curl) sends them (``apputil.call_event``).

``python -m pytest tests/test_input_refusals.py`` (about a minute).
"""

import logging
import shutil
from dataclasses import replace

import httpx
import pytest
from apputil import call_event, running_app

from rloo_demo import i18n
from rloo_demo.config import RunConfig
from rloo_demo.models.hub import ASSETS_DIR
from rloo_demo.models.sampling import _tokenizer
from rloo_demo.server.gates import Caller
from rloo_demo.server.limits import LOCAL
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.forms import FIELD, FORM_FIELDS, defaults

LIMITS = replace(LOCAL, sampling_per_minute=None)
LONG = ("This movie was a slow, thoughtful and in the end rather wonderful film about two brothers. " * 60)[:4000]


def finished_run(root, name="done") -> RunFolder:
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, max_steps=2))
    shutil.copytree(ASSETS_DIR / "tiny-imdb-gpt2", run.path / "model", ignore=shutil.ignore_patterns("README.md"))
    run.append_metrics({"step": 1, "reward": 0.1})
    run.set_status("finished", step=2)
    return run


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    finished_run(root)
    with running_app(root, limits=LIMITS) as served:
        yield served


def form(**changes) -> list:
    values = defaults() | changes
    return [values[name] for name in FORM_FIELDS]


def label(name, locale) -> str:
    return i18n.t(locale, FIELD[name].label)


def no_traceback(caplog, capfd) -> None:
    """Nothing the server logged or printed is a traceback: a user's mistake is no bug."""
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err[-3000:]


HOSTILE = [
    ("num_generations", 1000, ["64", "1000"]),  # past the limit: refused with the limit, not made 64
    ("temperature", 1e-300, ["0.01", "1e-300"]),
    ("max_steps", "abc", ["abc"]),
    ("prompts_per_step", 10_000, ["256", "10000"]),
    ("max_new_tokens", 5000, ["1024", "5000"]),
    ("learning_rate", "NaN", ["NaN"]),
    ("w_vader_compound", 5000, ["1000", "5000"]),
    ("lora_r", -3, ["-3"]),
]


@pytest.mark.parametrize("locale", ["en", "ru"])
@pytest.mark.parametrize(("field", "value", "quoted"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_start_refuses_naming_the_field_by_its_label(app, caplog, capfd, locale, field, value, quoted):
    url, controller = app
    session = f"{locale}-{field}"
    call_event(url, "page_load", ["cid-" + session, locale], session_hash=session)  # the page's language
    caplog.clear()
    capfd.readouterr()
    out = call_event(url, "train_start", ["cid-" + session, *form(**{field: value})], session_hash=session)
    message = out[2]  # the form's error box in the action bar
    assert message.startswith(i18n.t(locale, "train.not_started")), message
    assert f"**{label(field, locale)}**" in message, message
    for text in quoted:
        assert text in message, message
    assert not controller.runner.active(), "a refused form started a run"
    no_traceback(caplog, capfd)


@pytest.mark.parametrize(("field", "value", "quoted"), HOSTILE[:4], ids=[h[0] for h in HOSTILE[:4]])
def test_the_estimate_refuses_the_same_way_without_an_http_error(app, caplog, capfd, field, value, quoted):
    """The estimate is a plain request (outside the queue): gradio's range check answered it with HTTP 500."""
    url, _ = app
    call_event(url, "page_load", ["cid-est", "ru"], session_hash="est")
    capfd.readouterr()
    out = call_event(url, "train_estimate", form(**{field: value}), session_hash="est")
    assert f"**{label(field, 'ru')}**" in out[0], out
    assert all(text in out[0] for text in quoted), out
    no_traceback(caplog, capfd)


def test_a_weight_is_named_with_its_reward(app):
    """Three boxes are labelled "weight": a refusal of one names the reward beside it, not RunConfig's key."""
    url, _ = app
    values = form(extra_reward="keyword:great", w_extra=1e9)
    message = call_event(url, "train_start", ["cid-w", *values], session_hash="w")[2]
    assert "reward_weights" not in message
    assert f"**{label('w_extra', 'en')} ({label('extra_reward', 'en')})**" in message, message


def test_the_smoothing_slider_takes_any_value_without_a_range_error(app, caplog, capfd):
    url, _ = app
    out = call_event(url, "train_redraw", ["done", 7.5], session_hash="smooth")
    assert len(out) == 11  # the ten plots and the error box, no gradio error
    no_traceback(caplog, capfd)


# ----------------------------------------------------------------------------- a prompt past the context


def expected_cut(prompt: str, new_tokens: int) -> int:
    tokens = len(_tokenizer(str(ASSETS_DIR / "tiny-imdb-gpt2"))(prompt).input_ids)
    assert tokens > 256 - new_tokens, "the test's prompt must overflow the embedded policy's 256 positions"
    return tokens - (256 - new_tokens)


def test_compare_cuts_a_long_prompt_and_says_how_many_tokens_it_dropped(app):
    _, controller = app
    out = controller.compare("done", LONG, 2, 8, 1.0, 1.0, 0, Caller("v", "10.0.0.9"))
    dropped = out["prompt_cut"]["dropped"]
    assert abs(dropped - expected_cut(LONG, 8)) <= 2  # re-tokenising the cut text may merge a token at its start
    assert f"its first {dropped:,} tokens were dropped" in out["prompt_note"]
    assert LONG.endswith(out["prompt"].strip()[-200:]) and len(out["trained"]) == 2


def test_the_probe_cuts_a_long_prompt_too(app):
    _, controller = app
    out = controller.probe("done", LONG, 1, 0, Caller("v", "10.0.0.9"))
    assert abs(out["prompt_cut"]["dropped"] - expected_cut(LONG, 24)) <= 2  # the run's own 24 new tokens
    assert "tokens were dropped" in out["prompt_note"] and out["steps"]


def test_the_api_cuts_a_long_prompt_and_refuses_25000_characters_without_a_traceback(app, caplog, capfd):
    url, _ = app
    from gradio_client import Client

    client = Client(url, verbose=False)
    out = client.predict("done", LONG, 1, 0, api_name="/compare")
    assert "tokens were dropped" in out["prompt_note"], out
    out = client.predict("done", "great " * 5000, 1, 0, api_name="/compare")  # 30,000 characters
    assert "30000 characters long" in out["error"] and "at most 4000" in out["error"], out
    no_traceback(caplog, capfd)
    assert httpx.get(url, timeout=10).status_code == 200
