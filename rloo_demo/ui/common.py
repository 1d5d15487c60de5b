"""What every tab module shares: the page-wide states, the ``Tab`` record each tab module's ``build(page)`` returns,
who is calling, and the guard around every event handler."""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from types import SimpleNamespace

import gradio as gr
from gradio.components.plot import PlotData
from gradio.i18n import I18nData

from rloo_demo import i18n
from rloo_demo.errors import ConfigError, TooLong, UserError
from rloo_demo.public.admission import event_admitted, stamped_visitor
from rloo_demo.public.gates import Caller
from rloo_demo.public.limits import as_float, trusted_proxies_from_env, visitor_address
from rloo_demo.server.readers import RunView
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.forms import labelled_problems
from rloo_demo.ui.plots.base import wrapped_notes
from rloo_demo.ui.views.common import text

log = logging.getLogger(__name__)


class SMOOTHING:  # noqa: N801 (a constant: the one description of both smoothing sliders)
    """The smoothing sliders' (Train and Runs): their range, and a value past it refused by the slider's label."""

    range = (0.0, 0.95)
    labels = {"smoothing": "common.smoothing"}  # the name ``check`` refuses a value by -> the label's text key

    @classmethod
    def check(cls, value) -> float:
        return as_float("smoothing", value, *cls.range)


@dataclass
class Page:
    """Components that belong to the page, not to one tab."""

    controller: Controller
    client_id: gr.BrowserState  # a random id in the browser's localStorage: who started a run, across reloads
    watched: gr.State  # name of the run this page follows
    tab: gr.State  # the visible tab: a tick renders only what the page shows
    locale: gr.State  # the page's language (one of i18n.LOCALES), set on load: the server's text is written in it


@dataclass
class Moment:
    """What the page knows when a tab is asked to draw itself (a page load, a tick, a language switch): the
    controller, who asks, the run the page watches (``view``: its records, None when there is none to show), the
    visible tab and the page's language. ``fresh``: the watched run changed since the page's last tick, so what a
    tab drew of the previous one is stale."""

    controller: Controller
    caller: Caller | None
    watched: str | None
    locale: str
    view: RunView | None = None
    visible: str | None = None
    fresh: bool = False

    @cached_property
    def waiting(self) -> str | None:
        """This visitor's place in the line for the slot, escaped (kept while its page asks), or None."""
        note = self.controller.line_note(self.caller, self.locale) if self.caller is not None else None
        return text(note) if note else None

    @cached_property
    def slot(self) -> str | None:
        """Where this visitor stands while another visitor's run holds the slot, or None."""
        return self.controller.slot_note(self.caller, self.locale) if self.caller is not None else None


def _none(*_) -> dict:
    return {}


@dataclass
class Tab:
    """One tab of the page, as its module's ``build(page)`` returns it; ``ui.app`` loops over these for the blocks,
    the select events, the tick, the language switch and the CSS, and names no tab itself.

    Each hook returns a dict of updates keyed by component (only what it changes) and takes the ``Moment`` first,
    then the values of its own inputs, in order:

    - ``render``: a page tick (once a second): ``tick_inputs`` -> ``tick_outputs``;
    - ``relocalize``: the header's language selector: ``relocalize_inputs`` -> ``relocalize_outputs``;
    - ``load``: a page load -> ``load_outputs``;
    - ``connect(tabs)``: events that reach across to other tabs (``{id: Tab}``), wired once every tab is built.

    ``error``: the box that shows what went wrong while this tab drew itself."""

    id: str
    label_key: str
    element: gr.Tab
    ui: SimpleNamespace
    error: gr.components.Component
    css: str = ""
    tick_inputs: list = field(default_factory=list)
    tick_outputs: list = field(default_factory=list)
    render: Callable[..., dict] = _none
    relocalize_inputs: list = field(default_factory=list)
    relocalize_outputs: list = field(default_factory=list)
    relocalize: Callable[..., dict] = _none
    load_outputs: list = field(default_factory=list)
    load: Callable[[Moment], dict] = _none
    connect: Callable[[dict], None] | None = None


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
    (``public.admission``), so every per-visitor limit keys a visitor the same way; a request without the stamp
    (a test's stand-in) is read here with the environment's trusted proxies."""
    host, admitted = None, False
    if request is not None:
        host = stamped_visitor(getattr(request, "state", None))
        admitted = event_admitted(getattr(request, "state", None))
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


def guarded(controller: Controller, on_error, labels: dict[str, str] | None = None):
    """Wrap an event handler so that nothing it raises reaches gradio as a raw error or breaks the page: a
    ``UserError`` (or any bug, reported as a bug) becomes ``on_error(message)``, the handler's normal output.

    With ``on_error(message, locale)`` the message is in the page's language (the handler's ``locale``
    argument). ``labels`` maps the names the limits give the values they refuse (``as_int("seed", ...)``) to the
    text keys of the boxes they came from, so a refusal names the box by the label the page shows."""

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
            return on_error(refusal(controller, exc, locale, labels), locale)

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


def refusal(controller: Controller, exc: BaseException, locale: str, labels: dict[str, str] | None = None) -> str:
    """What ``exc`` tells the page, in its language; a refused value named by the label of its box (``labels``:
    the name the limits give it -> the label's text key, as ``guarded`` takes them)."""
    names = {name: i18n.t(locale, "common.quoted", text=i18n.t(locale, key)) for name, key in (labels or {}).items()}
    return translated_refusal(exc, locale) or controller.error_text(exc, locale, names)


def form_refusal(controller: Controller, exc: BaseException, values, locale: str = "en") -> str:
    """Why the Train form's settings were refused, one line per field, each named by its label in the page's
    language (``forms.labelled_problems``) rather than by RunConfig's key; anything else as the controller words
    it."""
    if isinstance(exc, ConfigError) and isinstance(values, dict):
        rows = labelled_problems(exc.problems, values, locale)
        return controller.redact("\n".join(f"- **{text(label)}**: {text(message)}" for label, message in rows))
    return controller.error_text(exc, locale)


def refusal_markdown(controller: Controller, exc: BaseException, locale: str, labels: dict[str, str] | None = None):
    """``refusal`` framed as an error (``error_markdown``)."""
    return error_markdown(refusal(controller, exc, locale, labels), locale)


def translated_refusal(exc: BaseException, locale: str) -> str | None:
    """A refusal the page writes in its own language from the numbers the error carries (a prompt past the
    server's length limit, from Compare or the probe), else None: the engine's English message is shown."""
    if isinstance(exc, TooLong) and exc.name == "prompt":
        return i18n.t(locale, "prompt.too_long", chars=f"{exc.chars:,}", limit=f"{exc.limit:,}")
    return None


def error_markdown(message: str, locale: str = "en") -> str:
    """An error, framed in the page's language (the message is already in it: ``guarded``)."""
    head = i18n.t(locale, "common.error")
    return f"{head} {message}" if "\n" not in message else f"{head}\n\n{message}"
