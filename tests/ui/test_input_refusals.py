"""Input a user can fix: every refusal of the Train form names the field by its label in the
page's language, in one message beside the action bar; a value past a limit is refused with the limit named, never
made the largest allowed; nothing a user sends ends in gradio's bare range error (an HTTP 500) or a traceback in
the server log; a prompt past the policy's context is cut to fit, with a note, in Compare, the probe and the API.

The form's events are called on a live server the way a browser (or curl) sends them (``apputil.call_event``).

``python -m pytest tests/ui/test_input_refusals.py`` (about a minute).
"""

import httpx
import pytest
from apputil import UNPACED as LIMITS
from apputil import call_event, no_traceback, running_app
from factories import LONG, expected_cut, finished_run

from rloo_demo import i18n
from rloo_demo.models.hub import ASSETS_DIR
from rloo_demo.models.sampling import _tokenizer
from rloo_demo.public.gates import Caller
from rloo_demo.ui.forms import FIELD, FORM_FIELDS, defaults


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
    assert out[0] == "" and f"**{label(field, 'ru')}**" in out[1], out  # in the form's error box, where Start's goes
    assert all(text in out[1] for text in quoted), out
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


# ----------------------------------------------------------------------------- cut_to_fit itself, without a server
# (fast: these are the tests of models/sampling.py's cut in pyproject.toml's [tool.mutmut] selection)

POLICY = ASSETS_DIR / "tiny-imdb-gpt2"
REVIEW = "a slow, thoughtful and in the end rather wonderful film about two brothers and their father. " * 8


def n_tokens(text: str) -> int:
    return len(_tokenizer(str(POLICY))(text).input_ids)


def chat(text: str) -> str:  # a stand-in template around the text (the real ones add a few tokens like this)
    return f"System: be kind.\nUser: {text}\nAssistant:"


@pytest.mark.parametrize("render", [None, chat], ids=["text", "template"])
@pytest.mark.parametrize(("new_tokens", "max_ctx"), [(8, 64), (40, 100), (3, 30)])
def test_cut_to_fit_keeps_the_longest_end_that_fits(render, new_tokens, max_ctx):
    from rloo_demo.models.sampling import cut_to_fit

    shown = render or (lambda t: t)
    room = max_ctx - new_tokens
    assert n_tokens(shown(REVIEW)) > room + 20, "the test's text must overflow the room by far"
    cut, dropped, had = cut_to_fit(_tokenizer(str(POLICY)), REVIEW, new_tokens, max_ctx, render)
    start = len(REVIEW) - len(cut)
    assert 0 < start < len(REVIEW) and REVIEW[start:] == cut  # an end of the text, cut at a character
    assert n_tokens(shown(cut)) <= room  # it fits the room left by the new tokens ...
    assert n_tokens(shown(REVIEW[start - 1 :])) > room  # ... and one character more would not: the longest end
    assert had == n_tokens(shown(REVIEW))
    assert dropped == n_tokens(REVIEW) - n_tokens(cut) and dropped > 1


def test_cut_to_fit_leaves_a_text_that_fits_whole_and_says_it_dropped_nothing():
    from rloo_demo.models.sampling import cut_to_fit

    text = "a lovely film"
    had = n_tokens(text)
    tok = _tokenizer(str(POLICY))
    assert cut_to_fit(tok, text, 10, 10 + had) == (text, 0, had)  # exactly the room: kept whole
    cut, dropped, _ = cut_to_fit(tok, text, 11, 10 + had)  # one token short: cut
    assert text.endswith(cut) and cut != text and dropped == had - n_tokens(cut) >= 1


def test_cut_to_fit_counts_one_dropped_token_at_least():
    """A cut that re-tokenises to as many tokens as the whole (a cut inside a word's token) still says 1."""
    from rloo_demo.models.sampling import cut_to_fit

    tok = _tokenizer(str(POLICY))
    text = "wonderful"  # several tokens; the cut keeps its end
    had = n_tokens(text)
    assert had >= 2
    cut, dropped, _ = cut_to_fit(tok, text, 1, had)  # room had - 1
    assert n_tokens(cut) <= had - 1 and dropped == max(1, had - n_tokens(cut))


def test_cut_to_fit_refuses_what_cannot_fit():
    from rloo_demo.errors import InputError
    from rloo_demo.models.sampling import cut_to_fit

    tok = _tokenizer(str(POLICY))
    with pytest.raises(InputError, match="64 new tokens do not fit this model's context of 64 tokens"):
        cut_to_fit(tok, "good", 64, 64)
    assert cut_to_fit(tok, "", 63, 64) == ("", 0, 0)  # one token of room: an empty text fits
    template = n_tokens(chat(""))
    with pytest.raises(
        InputError,
        match=f"prompt is {n_tokens(chat(REVIEW)):,} tokens long; this policy reads {template + 2} tokens, 3 of them",
    ) as refused:
        cut_to_fit(tok, REVIEW, 3, template + 2, chat)  # the template alone needs more than the room left
    assert "the template around it leaves no room" in str(refused.value)
    cut, _, _ = cut_to_fit(tok, REVIEW, 3, template + 3, chat)  # the template alone fits exactly: little text left
    assert n_tokens(chat(cut)) <= template and n_tokens(chat(REVIEW[len(REVIEW) - len(cut) - 1 :])) > template


def test_fit_prompt_reads_the_policys_own_context(tmp_path):
    import json

    from rloo_demo.errors import InputError
    from rloo_demo.models.sampling import cut_to_fit, fit_prompt

    context = json.loads((POLICY / "config.json").read_text())["n_positions"]
    long = REVIEW * 3
    assert n_tokens(long) > context
    expected = cut_to_fit(_tokenizer(str(POLICY)), long, 16, context)
    assert fit_prompt(str(POLICY), long, 16) == (*expected, context)
    assert n_tokens(expected[0]) <= context - 16
    assert fit_prompt(str(tmp_path), long, 16) == (long, 0, 0, None)  # no config: left to the model's load

    # a chat's render (the template's text around the prompt) is handed on: the prompt keeps less of its end
    def render(text):
        return "A long system prompt around the question. " * 8 + text

    framed = cut_to_fit(_tokenizer(str(POLICY)), long, 16, context, render)
    assert fit_prompt(str(POLICY), long, 16, render) == (*framed, context)
    assert len(framed[0]) < len(expected[0]) and framed[1] > expected[1]
    with pytest.raises(InputError, match="lone surrogate at character 3"):
        fit_prompt(str(POLICY), "abc\ud800", 16)


def test_cut_to_fit_drops_a_single_first_character_when_that_is_enough():
    from rloo_demo.models.sampling import cut_to_fit

    tok = _tokenizer(str(POLICY))
    text = "x" + " good" * 10  # "x" is a token of its own, and so is each " good"
    assert n_tokens(text) == 11 and n_tokens(text[1:]) == 10
    assert cut_to_fit(tok, text, 2, 12) == (text[1:], 1, 11)


def test_a_prompt_is_checked_against_the_context_before_any_model_loads(tmp_path):
    import json
    from types import SimpleNamespace

    from rloo_demo.errors import InputError
    from rloo_demo.models.sampling import check_prompt_fits, prompt_ids_that_fit

    tok = _tokenizer(str(POLICY))
    text = "a lovely film, truly"
    ids = tok(text).input_ids
    assert prompt_ids_that_fit(tok, text, 10, 10 + len(ids)) == ids  # exactly the room
    message = f"prompt is {len(ids)} tokens long; this policy reads {9 + len(ids)} tokens, 10 of them for the "
    message += f"completion, so a prompt may have at most {len(ids) - 1} tokens: shorten it"
    with pytest.raises(InputError) as refused:
        prompt_ids_that_fit(tok, text, 10, 9 + len(ids))  # one token short
    assert str(refused.value) == message
    assert prompt_ids_that_fit(tok, "", 63, 64) == [tok.eos_token_id]  # an empty prompt starts from the EOS token

    class Bare:  # a tokenizer that encodes every text to nothing, with the given special tokens
        def __init__(self, bos, eos):
            self.bos_token_id, self.eos_token_id = bos, eos

        def __call__(self, text):
            return SimpleNamespace(input_ids=[])

    assert prompt_ids_that_fit(Bare(5, 7), "", 1, 8) == [5]  # the BOS token where there is one
    assert prompt_ids_that_fit(Bare(None, 7), "", 1, 8) == [7]  # else the EOS token
    with pytest.raises(InputError, match="64 new tokens do not fit this model's context of 64 tokens"):
        prompt_ids_that_fit(tok, "", 64, 64)
    with pytest.raises(InputError, match="lone surrogate at character 2"):
        prompt_ids_that_fit(tok, "ab\ud800", 8, 64)

    context = json.loads((POLICY / "config.json").read_text())["n_positions"]
    check_prompt_fits(str(POLICY), "x" * (context - 24), 24)  # one token each: exactly the room
    with pytest.raises(InputError, match=f"prompt is {context - 23} tokens long; this policy reads {context} tokens"):
        check_prompt_fits(str(POLICY), "x" * (context - 23), 24)
    check_prompt_fits(str(tmp_path), "x" * 5000, 24)  # no config.json: left to the model's load
    (tmp_path / "config.json").write_text("{not json")
    check_prompt_fits(str(tmp_path), "x" * 5000, 24)


def test_the_context_is_read_from_either_key_of_a_config():
    from types import SimpleNamespace

    from rloo_demo.models.sampling import context_length

    assert context_length({"n_positions": 256, "max_position_embeddings": 4096}) == 256  # GPT-2's key first
    assert context_length({"max_position_embeddings": 4096}) == 4096  # Llama's, Qwen's
    assert context_length(SimpleNamespace(max_position_embeddings=1)) == 1  # a config object, the smallest context
    assert context_length(SimpleNamespace(n_positions=0, max_position_embeddings=512)) == 512  # 0 is no context
    assert context_length({"n_positions": "1024", "max_position_embeddings": None}) == 2048  # neither an int
    assert context_length(SimpleNamespace()) == 2048  # a config that says nothing: a common default
