"""Who sent an event (``ui.common.caller_of``) and how an error reads on the page (``error_markdown``).

A live server's admission middleware stamps the visitor it read on the request's state; a handler must use that
stamp (so every per-visitor limit keys a visitor the same way) and read the connection itself only where there is
none. Behind a trusted proxy that sent ``X-Forwarded-For`` on two lines, both lines count, read from the right."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from starlette.datastructures import Headers

from rloo_demo import i18n
from rloo_demo.public.admission import ADMITTED_STATE, VISITOR_STATE
from rloo_demo.public.gates import Caller
from rloo_demo.ui.common import caller_of, error_markdown

PROXY = "10.0.0.1"


@pytest.fixture
def trusted_proxy(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setenv("RLOO_TRUST_FORWARDED", "1")
    monkeypatch.setenv("RLOO_TRUSTED_PROXIES", f"{PROXY}/32")


def _request(peer, headers=None, **state):
    return SimpleNamespace(
        client=SimpleNamespace(host=peer) if peer else None,
        headers=headers or Headers(),
        state=SimpleNamespace(**state),
    )


def test_the_middlewares_stamp_is_the_visitor_and_says_whether_its_event_was_charged(trusted_proxy):
    forged = Headers(raw=[(b"x-forwarded-for", b"203.0.113.9")])
    stamped = _request(PROXY, forged, **{VISITOR_STATE: "198.51.100.7", ADMITTED_STATE: True})
    assert caller_of(stamped, "c") == Caller("c", "198.51.100.7", True)
    # stamped, read not counted: the gate counts it
    assert caller_of(_request(PROXY, forged, **{VISITOR_STATE: "198.51.100.7"}), "c") == Caller(
        "c", "198.51.100.7", False
    )
    # no stamp: the connection is read here, and no read was counted
    assert caller_of(_request(PROXY, forged), "c") == Caller("c", "203.0.113.9", False)
    # a stamp that is not a text is no stamp
    assert caller_of(_request(PROXY, forged, **{VISITOR_STATE: 5, ADMITTED_STATE: "yes"}), "c") == Caller(
        "c", "203.0.113.9", False
    )


def test_a_forwarded_header_sent_twice_is_read_across_both_lines_from_the_right(trusted_proxy):
    two_lines = Headers(raw=[(b"x-forwarded-for", b"1.1.1.1"), (b"x-forwarded-for", b"198.51.100.5")])
    assert two_lines.get("x-forwarded-for") == "1.1.1.1"  # the first line alone would name the client's own text
    assert caller_of(_request(PROXY, two_lines), "c").host == "198.51.100.5"
    # a plain mapping (a test's or another server's request) is read as one value
    assert caller_of(_request(PROXY, {"x-forwarded-for": "1.1.1.1, 198.51.100.6"}), "c").host == "198.51.100.6"


def test_a_request_without_a_peer_has_no_address_and_forged_hops_do_not_give_it_one(trusted_proxy):
    forged = Headers(raw=[(b"x-forwarded-for", b"203.0.113.9")])
    assert caller_of(_request(None, forged), "c") == Caller("c", None, False)
    assert caller_of(_request("192.0.2.8", forged), "c").host == "192.0.2.8"  # not our proxy: its header is ignored


@pytest.mark.parametrize("locale", ["en", "ka", "ru"])
def test_an_error_reads_with_the_pages_heading_on_one_line_or_above_a_block(locale):
    head = i18n.t(locale, "common.error")
    assert error_markdown("the seed must be 0 or more", locale) == f"{head} the seed must be 0 or more"
    assert error_markdown("two problems:\n- a\n- b", locale) == f"{head}\n\ntwo problems:\n- a\n- b"
    assert error_markdown("x") == f"{i18n.t('en', 'common.error')} x"
    if locale != "en":
        assert head != i18n.t("en", "common.error")


def test_no_request_is_no_address_and_no_counted_read_and_a_client_id_must_be_a_text():
    assert caller_of(None, "c") == Caller("c", None, False)
    assert caller_of(None, 42) == Caller("", None, False) and caller_of(None, None) == Caller("", None, False)


# ----------------------------------------------------------------------------- guarded: errors as the handler's output


def test_guarded_turns_a_refusal_or_a_bug_into_the_handlers_output_with_the_controllers_words():
    from rloo_demo.errors import InputError
    from rloo_demo.ui.common import guarded

    controller = SimpleNamespace(error_text=lambda exc, locale="en", names=None: f"told: {type(exc).__name__}: {exc}")

    @guarded(controller, lambda msg: {"error": msg})
    def handler(value, locale="en"):
        if value == "bad":
            raise InputError("value must be good")
        if value == "bug":
            raise ZeroDivisionError("division by zero")
        return {"ok": value}

    assert handler("fine") == {"ok": "fine"}
    assert handler("bad", "ru") == {"error": "told: InputError: value must be good"}
    assert handler("bug") == {"error": "told: ZeroDivisionError: division by zero"}


def test_guarded_frames_an_error_in_the_language_of_the_handlers_own_locale_argument():
    from rloo_demo.errors import InputError, TooLong
    from rloo_demo.ui.common import guarded

    controller = SimpleNamespace(error_text=lambda exc, locale="en", names=None: f"told: {exc}")
    errors = iter([])

    @guarded(controller, lambda msg, locale: (msg, locale))
    def handler(name, prompt, locale="en", watched=None):
        raise next(errors)

    too_long = TooLong("prompt", 12345, 2000)
    ru = i18n.t("ru", "prompt.too_long", chars="12,345", limit="2,000")
    assert ru != i18n.t("en", "prompt.too_long", chars="12,345", limit="2,000")
    cases = [
        ((("run", "p", "ru"), {}), too_long, (ru, "ru")),  # the locale given by position ...
        ((("run", "p"), {"locale": "ru"}), too_long, (ru, "ru")),  # ... or by name
        ((("run", "p"), {}), too_long, (i18n.t("en", "prompt.too_long", chars="12,345", limit="2,000"), "en")),
        (
            (("run", "p", "xx-evil<script>"), {}),
            too_long,
            (i18n.t("en", "prompt.too_long", chars="12,345", limit="2,000"), "en"),
        ),  # not a language
        ((("run", "p", "ru"), {}), InputError("no such run"), ("told: no such run", "ru")),  # English words, ru frame
        ((("run", "p", "ru"), {}), TooLong("note", 9, 5), ("told: " + str(TooLong("note", 9, 5)), "ru")),
    ]
    for (args, kwargs), error, want in cases:
        errors = iter([error])
        assert handler(*args, **kwargs) == want, (args, kwargs, error)
    # a direct call with arguments the handler cannot take: the bug is told, framed in English (no locale bound)
    message, locale = handler("run", "p", "ru", None, "extra")
    assert locale == "en" and message.startswith("told: ") and "5 were given" in message
