"""Assemble the Gradio app: the tabs of ``ui.tabs.TABS`` (each builds and wires its own events and returns its
``Tab``), one timer, page-load re-attachment, the language switch and the named API; this module names no tab.
Every event goes through ``Controller``; see ``rloo_demo.public.limits`` for what a public server allows.

Live updates: a ``gr.Timer`` ticks every ``TICK_SECONDS``. Each tick reads the watched run's step count (a cheap
in-memory length for a live run, cached file stamps for one on disk) and redraws only the visible tab, and only
when new steps exist, so an idle page or many watching pages cost the training thread next to nothing.

Sessions: each browser keeps a random client id in localStorage (``gr.BrowserState``). It identifies who started a
run (only they may stop it, and their page's ticks keep it from being stopped as abandoned) and survives reloads;
a reloaded page re-attaches to its run. What a fresh page watches is ``server.readers``'s choice: on a local server
the newest run, on a public one only its own visitor's (else none: "No run yet", and whether the slot is busy).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import uuid

import gradio as gr
from starlette.middleware import Middleware

from rloo_demo import i18n
from rloo_demo.i18n import Message
from rloo_demo.public.admission import Admission
from rloo_demo.public.gates import EventGate
from rloo_demo.public.limits import Limits
from rloo_demo.public.malloc import bound_arenas
from rloo_demo.server.runner import Runner
from rloo_demo.store.sync import RunSync, describe, open_target
from rloo_demo.ui import api, locale_switch
from rloo_demo.ui.api import register_api
from rloo_demo.ui.common import L, Moment, Page, Tab, caller_of, error_markdown, guarded, refusal
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.forms import reward_help
from rloo_demo.ui.gradio_internals import (
    cheap_skips,
    event_cost,
    event_data_problem,
    event_kind,
    queued_events,
    quiet_queue,
    requests_left_out,
    session_lifespan,
)
from rloo_demo.ui.style import PAGE_CSS
from rloo_demo.ui.tabs import TABS

TICK_SECONDS = 1.0
SHUTDOWN_SECONDS = 8.0  # on SIGTERM, how long a run may take to reach its step boundary and save (docker: 10 s)
# Browser sessions a public server keeps (gradio's default: 10,000, ~330 kB each); the least recently used go first
PUBLIC_SESSIONS = 1000


def build_app(controller: Controller) -> gr.Blocks:
    # Gradio copies every file it serves (the Runs tab's downloads, of finished runs only) into its cache, once per
    # content; every 5 minutes, copies unused for half an hour are deleted.
    with gr.Blocks(title="RLOO demo", delete_cache=(300, 1800)) as demo:
        page = Page(
            controller=controller,
            client_id=gr.BrowserState("", storage_key="rloo-demo-client-id"),
            watched=gr.State(None),
            tab=gr.State(TABS[0].ID),
            locale=gr.State(i18n.DEFAULT),
        )
        with gr.Row(equal_height=False, elem_id="header-row"):
            gr.Markdown(L("app.header"), elem_id="app-header")
            language = gr.Dropdown(
                [(name, code) for code, name in i18n.NAMES.items()],
                value=None,
                label=L("app.language"),
                info=L("app.language_info"),
                scale=0,
                min_width=180,
                elem_id="language",
            )
        with gr.Tabs(overflow_behavior="wrap"):  # on a phone the tabs wrap: a "..." menu would hide most of them
            tabs = [module.build(page) for module in TABS]
        by_id = {tab.id: tab for tab in tabs}
        for tab in tabs:
            if tab.connect is not None:  # events that reach across to other tabs, once all are built
                tab.connect(by_id)
        for tab in tabs:
            tab.element.select(
                lambda t=tab.id: t, None, page.tab, api_name=f"show_{tab.id}", api_visibility="private", queue=False
            )
        _wire_tick(page, tabs)
        _wire_load(demo, page, language, tabs)
        _wire_language(page, language, tabs)
        register_api(controller)
    return demo


def page_css() -> str:
    """The page's own CSS, then each tab's (its module's ``CSS``, the ``Tab.css`` it declares beside the elements it
    styles): given to ``launch``, before any page is built."""
    return PAGE_CSS + "".join(module.CSS for module in TABS)


def _split(tabs: list[Tab], inputs: str, values) -> list[tuple[Tab, list]]:
    """``values`` cut into each tab's own, in the order of the tabs' ``inputs`` lists; a value a caller left out (a
    client sends what it likes) reads as None."""
    values, out = list(values), []
    for tab in tabs:
        n = len(getattr(tab, inputs))
        mine, values = values[:n], values[n:]
        out.append((tab, mine + [None] * (n - len(mine))))
    return out


def _outputs(tabs: list[Tab], outputs: str) -> list:
    return [component for tab in tabs for component in getattr(tab, outputs)]


def _inputs(tabs: list[Tab], inputs: str) -> list:
    return [component for tab in tabs for component in getattr(tab, inputs)]


def _labels(tabs: list[Tab]) -> dict:
    """Every tab's label sent again, translated with the locale the page has now."""
    return locale_switch.tab_labels({tab.label_key: tab.element for tab in tabs})


def _wire_load(demo: gr.Blocks, page: Page, language: gr.Dropdown, tabs: list[Tab]) -> None:
    """A page load: the browser's client id kept (or a new one), the run this visitor may watch, the page's language
    and each tab's first drawing (``Tab.load``)."""
    controller = page.controller

    # ``request`` first: gradio hands it only to a positional parameter annotated ``gr.Request`` (see Start)
    def on_load(request: gr.Request, cid, lang):
        # the id before anything that can be refused: a refused load (its visitor's reads spent, say) keeps the
        # browser's id, and with it the runs that id started
        cid = cid if isinstance(cid, str) and 0 < len(cid) <= 200 else uuid.uuid4().hex
        return {page.client_id: cid} | loaded(caller_of(request, cid), controller.locale(lang))

    @guarded(controller, lambda msg: {tabs[0].error: msg})
    def loaded(caller, locale):
        watched = controller.default_run(caller)  # public: only the visitor's own (server.readers)
        moment = Moment(controller, caller, watched, locale)
        out = _labels(tabs) | {page.watched: watched, page.locale: locale, language: locale}
        for tab in tabs:
            out |= tab.load(moment)
        return out

    demo.load(
        on_load,
        [page.client_id, language],
        _unique(
            [page.client_id, page.watched, page.locale, language, *_outputs(tabs, "load_outputs")]
            + [tab.element for tab in tabs]
            + _errors(tabs, "load_outputs")
        ),
        js=locale_switch.LOAD_JS,
        api_name="page_load",
        api_visibility="private",
        queue=False,  # a cheap plain request: a page always loads, however full the queue is
        # raw values: a language the page does not have reads as English (controller.locale), never gradio's
        # HTTP 500 with the value echoed back
        preprocess=False,
    )


def _wire_language(page: Page, language: gr.Dropdown, tabs: list[Tab]) -> None:
    """The header selector: the browser switches its texts in place (``locale_switch``), then the server sends the
    tab labels again and each tab writes its own text in the new language (``Tab.relocalize``: the texts that stay
    on screen until an event redraws them, and what the next tick draws afresh)."""
    controller = page.controller

    def choose(lang, watched, *values):
        locale = controller.locale(lang)
        moment = Moment(controller, None, watched if isinstance(watched, str) else None, locale)
        out = _labels(tabs) | {page.locale: locale}
        for tab, mine in _split(tabs, "relocalize_inputs", values):
            out |= _guarded_hook(controller, tab, tab.relocalize)(moment, *mine)
        return out

    language.input(
        choose,
        [language, page.watched, *_inputs(tabs, "relocalize_inputs")],
        _unique(
            [*(tab.element for tab in tabs), page.locale, *_outputs(tabs, "relocalize_outputs")]
            + _errors(tabs, "relocalize_outputs")
        ),
        js=locale_switch.CHOOSE_JS,
        api_name="page_language",
        api_visibility="private",
        queue=False,  # cheap, and a page switches its language however full the queue is
        preprocess=False,  # raw values, as page_load's: the language and the form are checked by each tab
    )


def _wire_tick(page: Page, tabs: list[Tab]) -> None:
    controller = page.controller

    # gradio reads a returned dict as updates only if it has a key: every answer names the watched run at least.
    # ``request`` first: gradio hands it only to a positional parameter annotated ``gr.Request``.
    @guarded(controller, lambda msg: {tabs[0].error: msg})
    def tick(request: gr.Request, cid, name, *values):
        *values, visible, locale = [*values, None, None][: len(tick_inputs)]
        locale = i18n.normalize(locale)
        caller = caller_of(request, cid)
        followed = controller.follow(name, caller)
        view = controller.view(followed)
        moment = Moment(controller, caller, followed, locale, view, visible, fresh=followed != name)
        out = {page.watched: followed}
        for tab, mine in _split(tabs, "tick_inputs", values):
            out |= _guarded_hook(controller, tab, tab.render)(moment, *mine)
        return out

    tick_inputs = [*_inputs(tabs, "tick_inputs"), page.tab, page.locale]
    gr.Timer(TICK_SECONDS).tick(
        tick,
        [page.client_id, page.watched, *tick_inputs],
        _unique([page.watched, *_outputs(tabs, "tick_outputs")] + _errors(tabs, "tick_outputs")),
        show_progress="hidden",
        # callable by clients (scripts/bench_app.py simulates watching pages with it), hidden from the API docs
        api_name="page_tick",
        api_visibility="undocumented",
        concurrency_limit=None,
        concurrency_id=api.TICK,  # its own group: charged to the event budget like every event (public.admission)
        queue=False,  # a plain request: the queue's SSE machinery costs GIL time the training thread would lose
    )


def _guarded_hook(controller: Controller, tab: Tab, hook):
    """A tab's hook that fails shows why in the tab's error box, in the page's language; the other tabs still draw
    (a bug is logged with its traceback by the controller, as ``guarded`` does)."""

    def run(moment: Moment, *values) -> dict:
        try:
            return hook(moment, *values)
        except Exception as exc:
            return {tab.error: error_markdown(refusal(controller, exc, moment.locale), moment.locale)}

    return run


def _errors(tabs: list[Tab], outputs: str) -> list:
    """The error boxes of the tabs that have such outputs: where a failing hook says why."""
    return [tab.error for tab in tabs if getattr(tab, outputs)]


def _unique(components: list) -> list:
    """Each component once, in first-seen order (a tab's error box may be among its outputs already)."""
    seen, out = set(), []
    for c in components:
        if id(c) not in seen:
            seen.add(id(c))
            out.append(c)
    return out


def launch_options(limits: Limits, events: EventGate | None = None) -> dict:
    """``demo.launch`` keywords. The app serves nothing that needs an upload, so uploads are refused (1 byte; in
    public mode the admission middleware answers 403 before gradio reads one). In front of gradio's routes sits
    ``public.admission``: who a visitor is, and in public mode its fair share of the queue. In public mode: no
    ``/monitoring``, no run history (it would save public calls to a bucket a caller names), a bounded number of
    browser sessions, and sessions idle for ``limits.session_seconds`` forgotten. ``events``: the controller's event
    budget, which the middleware charges every event to (one of its own where none is given)."""
    admission = Middleware(
        Admission,
        limits=limits,
        kind_of=event_kind,
        queued=queued_events,
        cost_of=event_cost(api.EVENT_COSTS, api.DEFAULT_EVENT_COST),
        event_data_problem=event_data_problem,
        events=events,
    )
    # sessions that build their copy of the page's config only when asked, and (public) idle ones forgotten
    app_kwargs: dict = {"middleware": [admission], "lifespan": session_lifespan(limits.session_seconds)}
    options = {
        "server_name": os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        "server_port": int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        "theme": gr.themes.Soft(),
        "css": page_css(),
        "head": locale_switch.HEAD,
        "i18n": gr.I18n(**page_translations(limits)),
        "show_error": True,
        "max_file_size": 1,
        "app_kwargs": app_kwargs,
        # the page is rendered in the browser: a Node server in front would be every request's peer address
        "ssr_mode": False,
    }
    if limits.public:
        options |= {"enable_monitoring": False, "run_history": False, "state_session_capacity": PUBLIC_SESSIONS}
    return options


def page_translations(limits: Limits) -> dict[str, dict[str, str]]:
    """The page's static texts in every language, as ``gr.I18n`` takes them: this server's meter spacing filled in,
    and the reward help's list of the built-in rewards (``forms.reward_help``: those this server offers)."""
    return i18n.translations(
        min_variance_every=limits.min_variance_every,
        builtin_rewards=lambda locale: reward_help(locale, public=limits.public),
    )


def prepare(demo: gr.Blocks, limits: Limits) -> gr.Blocks:
    """Queue settings: at most 4 events at once by default. In public mode, no global bound on the waiting line
    (it counted events, so one visitor could fill it for everyone): each visitor may have
    ``limits.max_events_per_visitor`` events of a kind waiting or running (``public.admission``), and queued events
    cannot be called around the queue (``api_open=False``: ``/gradio_api/run/<name>`` answers only the page's
    unqueued events)."""
    missing = requests_left_out(demo)
    if missing:  # a per-visitor rule would key these events by the client id the caller picks
        raise RuntimeError("gradio would not hand these handlers their request: " + ", ".join(missing))
    demo.queue(default_concurrency_limit=4, max_size=None, api_open=not limits.public)
    quiet_queue(demo)
    cheap_skips(demo)
    return demo


def install_sigterm(runner: Runner, close=None) -> None:
    """SIGTERM (``docker stop``, a Space restart) stops runs at a step boundary, marks them stopped, calls
    ``close`` and exits within ``SHUTDOWN_SECONDS``, instead of being killed mid-write 10 s later.

    It exits there and then (``os._exit``), once everything is on disk (each write atomic and synced): the way out
    through gradio took 5-10 s more on a busy machine, past docker's 10 s. gradio's ``close`` waits 5 s for uvicorn,
    which waits for the page's open event streams; then the interpreter's teardown collected the models and
    gradio's objects (5-7 s under load)."""

    def on_sigterm(signum, frame):
        started = time.monotonic()
        reason = Message("stop.shutdown")
        runs = runner.stop_all(reason)
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        for active in runs:
            active.job.join(max(0.0, deadline - time.monotonic()))
        for active in runs:
            if not active.job.done:  # still inside a step: say so; the process exits now
                active.mark_stopped(Message("stop.mid_step", reason=reason))
        runner.close()
        if close is not None:
            close()
        log = logging.getLogger(__name__)
        log.info("SIGTERM: %d runs stopped and saved in %.1f s; exiting", len(runs), time.monotonic() - started)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)


def main() -> None:
    """Entry point of ``python app.py``."""
    bound_arenas()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    limits = Limits.from_env()
    if os.environ.get("RLOO_TRUST_FORWARDED", "").strip().lower() in ("1", "true", "yes", "on"):
        logging.getLogger(__name__).warning(
            "RLOO_TRUST_FORWARDED=1 is ignored: name the proxies whose X-Forwarded-For to believe in "
            "RLOO_TRUSTED_PROXIES (now: %s)",
            ", ".join(limits.trusted_proxies) or "none",
        )
    runs_dir = os.environ.get("RLOO_RUNS_DIR", "runs")
    target = open_target(os.environ.get("RLOO_SYNC", ""), runs_dir)  # ended runs copied there, restored from there
    if target is not None:
        logging.getLogger(__name__).info("runs synced to %s", describe(target))
    runner = Runner(
        runs_dir=runs_dir,
        max_concurrent=int(os.environ.get("RLOO_MAX_CONCURRENT_RUNS", "1")),
        backend=os.environ.get("RLOO_BACKEND", "thread"),
        num_processes=int(os.environ.get("RLOO_NUM_PROCESSES", "2")),
        limits=limits,
        sync=RunSync(target) if target is not None else None,
    )
    controller = Controller(runner)
    demo = prepare(build_app(controller), limits)
    install_sigterm(runner, controller.close)
    mode = "public" if limits.public else "local"
    logging.getLogger(__name__).info("rloo-demo in %s mode, runs in %s", mode, runner.runs_dir)
    try:
        demo.launch(**launch_options(limits, controller.events))
    finally:
        controller.close()
