"""What every tab module shares: the page-wide states, who is calling, and the guard around every event handler."""

from __future__ import annotations

import functools
import inspect
import json
import logging
from dataclasses import dataclass

import gradio as gr
from gradio.components.plot import PlotData
from gradio.i18n import I18nData

from rloo_demo import i18n
from rloo_demo.errors import TooLong, UserError
from rloo_demo.server.admission import read_admitted, stamped_visitor
from rloo_demo.server.gates import Caller
from rloo_demo.server.limits import trusted_proxies_from_env, visitor_address
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.plots.base import wrapped_notes

log = logging.getLogger(__name__)


@dataclass
class Page:
    """Components that belong to the page, not to one tab."""

    controller: Controller
    client_id: gr.BrowserState  # a random id in the browser's localStorage: who started a run, across reloads
    watched: gr.State  # name of the run this page follows
    tab: gr.State  # the visible tab: a tick renders only what the page shows
    locale: gr.State  # the page's language (one of i18n.LOCALES), set on load: the server's text is written in it


def L(key: str) -> I18nData:  # noqa: N802 (short on purpose: it wraps every label)
    """Text fixed when the page is built, as a key the browser translates (``gr.I18n``, given to ``launch``):
    ``L("train.start")`` shows "Start", "Pornește", "დაწყება" or "Старт". An unknown key fails at build time."""
    if key not in i18n.load(i18n.DEFAULT):
        raise KeyError(f"no translation key {key!r} in en.json")
    return I18nData(key)


def caller_of(request: gr.Request | None, client_id=None) -> Caller:
    """Who sent an event: its client id, and its network address as ``limits.visitor_address`` reads it (the
    connection's peer, or behind a trusted proxy the hop that proxy appended to ``X-Forwarded-For``). On a live
    server the admission middleware has already read it, with this server's limits, and stamped it on the request
    (``server.admission``), so every per-visitor limit keys a visitor the same way; a request without the stamp
    (a test's stand-in) is read here with the environment's trusted proxies."""
    host, admitted = None, False
    if request is not None:
        host = stamped_visitor(getattr(request, "state", None))
        admitted = read_admitted(getattr(request, "state", None))
        if host is None:
            peer = request.client.host if request.client else None
            headers = request.headers
            values = (
                headers.getlist("x-forwarded-for") if hasattr(headers, "getlist") else headers.get("x-forwarded-for")
            )
            host = visitor_address(peer, values, trusted_proxies_from_env() or ())
    return Caller(client_id if isinstance(client_id, str) else "", host, admitted)


def as_plot(figure: dict) -> PlotData:
    """A figure dict as gr.Plot's payload, its notes broken into lines (``plots.base.wrapped_notes``). The builders
    make plain dicts, not ``go.Figure``s: plotly's validation costs milliseconds a figure, GIL time that the training
    thread in this process would lose at every redraw."""
    return PlotData(type="plotly", plot=json.dumps(wrapped_notes(figure)))


def guarded(controller: Controller, on_error):
    """Wrap an event handler so that nothing it raises reaches gradio as a raw error or breaks the page: a
    ``UserError`` (or any bug, reported as a bug) becomes ``on_error(message)``, the handler's normal output."""

    takes_locale = on_error.__code__.co_argcount == 2  # on_error(message, locale): a frame in the page's language

    def decorate(fn):
        signature = inspect.signature(fn)

        def fail(exc, args, kwargs):
            if not takes_locale:
                return on_error(controller.error_text(exc))
            try:
                locale = i18n.normalize(signature.bind_partial(*args, **kwargs).arguments.get("locale"))
            except TypeError:
                locale = i18n.normalize(None)
            return on_error(translated_refusal(exc, locale) or controller.error_text(exc), locale)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except UserError as exc:
                return fail(exc, args, kwargs)
            except Exception as exc:  # a bug: logged with its traceback, shown as one
                return fail(exc, args, kwargs)

        return wrapper

    return decorate


def translated_refusal(exc: BaseException, locale: str) -> str | None:
    """A refusal the page writes in its own language from the numbers the error carries (a prompt past the
    server's length limit, from Compare or the probe), else None: the engine's English message is shown."""
    if isinstance(exc, TooLong) and exc.name == "prompt":
        return i18n.t(locale, "prompt.too_long", chars=f"{exc.chars:,}", limit=f"{exc.limit:,}")
    return None


def error_markdown(message: str, locale: str = "en") -> str:
    """An error in the page's language; the message itself (from the engine or the limits) stays English."""
    head = i18n.t(locale, "common.error")
    return f"{head} {message}" if "\n" not in message else f"{head}\n\n{message}"
