"""Assemble the Gradio app: four tabs (each builds and wires its own events), one timer, page-load re-attachment
and the named API. Every event goes through ``Controller``; see ``rloo_demo.server.limits`` for what a public
server allows.

Live updates: a ``gr.Timer`` ticks every ``TICK_SECONDS``. Each tick reads the watched run's step count (a cheap
in-memory length for a live run, cached file stamps for one on disk) and redraws only the visible tab, and only
when new steps exist, so an idle page or many watching pages cost the training thread next to nothing.

Sessions: each browser keeps a random client id in localStorage (``gr.BrowserState``). It identifies who started a
run (only they may stop it, and their page's ticks keep it from being stopped as abandoned) and survives reloads;
a reloaded page re-attaches to the run in training.
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
from rloo_demo.server.admission import Admission
from rloo_demo.server.gates import ReadGate
from rloo_demo.server.limits import Limits
from rloo_demo.server.malloc import bound_arenas
from rloo_demo.server.runner import Runner
from rloo_demo.ui import api, compare_tab, locale_switch, rollouts_tab, runs_tab, train_tab
from rloo_demo.ui.api import register_api
from rloo_demo.ui.common import L, Page, caller_of, guarded
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.gradio_internals import cheap_skips, event_kind, queued_events, quiet_queue, session_lifespan
from rloo_demo.ui.views import text
from rloo_demo.ui.views.train import idle_status

TICK_SECONDS = 1.0
SHUTDOWN_SECONDS = 8.0  # on SIGTERM, how long a run may take to reach its step boundary and save (docker: 10 s)
# Browser sessions a public server keeps (gradio's default: 10,000, ~330 kB each); the least recently used go first
PUBLIC_SESSIONS = 1000

CSS = """
.rloo-error p, .rloo-error li { color: #D9534F; }
.rloo-small p { font-size: 0.85em; opacity: 0.8; }
.rloo-group { margin: 0 0 14px 0; }
.rloo-prompt { margin: 4px 0; }
.rloo-table { border-collapse: collapse; width: 100%; font-size: 0.88em; }
.rloo-table th, .rloo-table td { padding: 3px 6px; border-bottom: 1px solid rgba(128,128,128,0.25); text-align: right; }
.rloo-table td.rloo-text { text-align: left; white-space: normal; }
.rloo-table th:nth-child(2) { text-align: left; }
tr.rloo-pos { background: rgba(61, 190, 139, 0.18); }
tr.rloo-neg { background: rgba(217, 83, 79, 0.18); }
tr.rloo-zero { background: rgba(128, 128, 128, 0.10); }
.rloo-empty { opacity: 0.7; }
.rloo-token-head { font-size: 0.88em; margin: 2px 0 6px 0; }
.rloo-token-text { white-space: pre-wrap; line-height: 1.9; font-family: ui-monospace, monospace; font-size: 0.95em; }
.rloo-tok { border-radius: 3px; padding: 1px 0; margin: 0 1px 0 0; cursor: help; }
.rloo-swatch { border-radius: 3px; padding: 0 4px; }
.rloo-token-table td:nth-child(2) { text-align: left; font-family: ui-monospace, monospace; }
.rloo-probe-table th, .rloo-probe-table td.rloo-text { text-align: left; vertical-align: top; }
td.rloo-pos { background: rgba(61, 190, 139, 0.18); }
td.rloo-neg { background: rgba(217, 83, 79, 0.18); }
.rloo-small-num { font-weight: normal; font-size: 0.85em; opacity: 0.8; }
/* labels wrap between words, never inside one ("K completi⏎ons"); a column too narrow for a word is widened instead
   (on a phone a row's items wrap, below) */
[data-testid="block-info"], .label-wrap span, label span { overflow-wrap: normal; word-break: normal; hyphens: auto; }
/* plotly's toolbar only while the pointer (or a tap) is on the plot: at rest it sat over the plot's title */
.js-plotly-plot .modebar-container { opacity: 0; transition: opacity 0.15s; }
.js-plotly-plot:hover .modebar-container, .js-plotly-plot:focus-within .modebar-container { opacity: 1; }
/* the Train tab's action bar (Start, Stop, status, estimate) stays in sight while the page scrolls */
#action-bar { position: sticky; top: 0; z-index: 20; margin-bottom: 10px; }
/* gradio's container hides its overflow, which makes it the scroll box sticky sticks to; clip keeps the look */
.gradio-container { overflow: clip !important; }
/* a phone: the header's text takes the whole width, the language selector goes under it, small */
@media (max-width: 700px) {
  #header-row { flex-direction: column; gap: 4px; }
  #header-row > * { width: 100%; min-width: 0 !important; }
  #app-header p { font-size: 0.9em; }
  #language [data-testid="block-info"] + span, #language .info { display: none; }
  /* a row's inputs wrap to the next line rather than shrink below their label's longest word ("вес: классификатор") */
  .form { flex-wrap: wrap !important; }
  .form > .block { min-width: min(140px, 100%) !important; }
  /* a slider's label above its number box, the whole width: beside it, it broke letter by letter ("Sa/mpl/es") */
  .head:has(+ .slider_input_container) { flex-wrap: wrap; }
  .head:has(+ .slider_input_container) > label { flex: 1 1 100%; }
  /* tables scroll sideways inside their box, the first column (a run's name) staying in sight */
  .table-wrap, .virtual-table-viewport { overflow-x: auto !important; }
  .table-wrap th .header-content span { white-space: nowrap; }
  /* the header's first cell, and the body's: gradio draws the body as rows of divs outside its <table>, and its
     pinned_columns (set on the Runs table) marks the column without making it stay */
  .table-wrap th:first-child, .table-wrap .virtual-row .body-cell.first-column {
    position: sticky; left: 0; z-index: 2; background: var(--background-fill-primary); }
}
"""


def build_app(controller: Controller) -> gr.Blocks:
    # Gradio copies every file it serves (the Runs tab's downloads, of finished runs only) into its cache, once per
    # content; every 5 minutes, copies unused for half an hour are deleted.
    with gr.Blocks(title="RLOO demo", delete_cache=(300, 1800)) as demo:
        page = Page(
            controller=controller,
            client_id=gr.BrowserState("", storage_key="rloo-demo-client-id"),
            watched=gr.State(None),
            tab=gr.State("train"),
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
            with gr.Tab(L("tab.train"), id="train") as train_el:
                tr = train_tab.build(page)
            with gr.Tab(L("tab.rollouts"), id="rollouts") as rollouts_el:
                ro = rollouts_tab.build(page, rollouts_el)
            with gr.Tab(L("tab.compare"), id="compare") as compare_el:
                cm = compare_tab.build(page, compare_el)
            with gr.Tab(L("tab.runs"), id="runs") as runs_el:
                rn = runs_tab.build(page, runs_el)
                rollouts_tab.wire_open_run(page, ro, rn.table)  # a row opens its run
        rollouts_tab.wire_open_step(page, ro, tr.alert_open, tr.alert_step)  # a warning opens its step
        for el, tab_id in ((train_el, "train"), (rollouts_el, "rollouts"), (compare_el, "compare"), (runs_el, "runs")):
            el.select(
                lambda t=tab_id: t, None, page.tab, api_name=f"show_{tab_id}", api_visibility="private", queue=False
            )
        tabs = {"train": train_el, "rollouts": rollouts_el, "compare": compare_el, "runs": runs_el}
        _wire_tick(page, tr, ro)

        @guarded(controller, lambda msg: {page.client_id: uuid.uuid4().hex})
        def on_load(cid, lang):
            cid = cid if isinstance(cid, str) and 0 < len(cid) <= 200 else uuid.uuid4().hex
            locale = controller.locale(lang)
            watched = controller.default_run()
            empty = {} if watched else dict(zip(tr.plots, train_tab.figures([], None, locale), strict=True))
            return (
                empty
                | locale_switch.tab_labels(tabs)
                | {
                    page.client_id: cid,
                    page.watched: watched,
                    tr.drawn: -1,
                    ro.shown: -1,
                    page.locale: locale,
                    language: locale,
                    tr.status: idle_status(locale),
                    tr.estimate: controller.estimate(tr.defaults, locale),
                }
            )

        demo.load(
            on_load,
            [page.client_id, language],
            [
                page.client_id,
                page.watched,
                tr.drawn,
                ro.shown,
                page.locale,
                language,
                tr.status,
                tr.estimate,
                *tr.plots,
                *tabs.values(),
            ],
            js=locale_switch.LOAD_JS,
            api_name="page_load",
            api_visibility="private",
            queue=False,  # a cheap plain request: a page always loads, however full the queue is
        )
        _wire_language(page, language, tabs, tr, ro, cm, rn)
        register_api(controller)
    return demo


def _wire_language(page: Page, language: gr.Dropdown, tabs: dict, tr, ro, cm, rn) -> None:
    """The header selector: the browser switches its texts in place (``locale_switch``), then the server sends the
    tab labels again and writes its own text in the new language; the page's next tick redraws the run's plots and
    the Rollouts tab (drawn and shown reset). Compare's tables (from its last answers) and the Runs table, which
    stay on screen until an event redraws them, are written again at once."""
    controller = page.controller

    @guarded(controller, lambda msg: {tr.run_error: msg})
    def choose(lang, name, smoothing, *values):
        locale = controller.locale(lang)
        view = controller.view(name)
        out = locale_switch.tab_labels(tabs) | {
            page.locale: locale,
            tr.drawn: -1,
            ro.shown: -1,
            tr.estimate: controller.estimate(dict(zip(train_tab.FORM_FIELDS, values, strict=False)), locale),
        }
        if view is None:  # no run: the idle line and the titled empty axes, in the new language
            empty = dict(zip(tr.plots, train_tab.figures([], None, locale), strict=True))
            return out | empty | {tr.status: idle_status(locale)}
        return out | train_tab.render(tr, view, smoothing, -1, locale)

    switched = language.input(
        choose,
        [language, page.watched, tr.smoothing, *tr.form],
        [
            *tabs.values(),
            page.locale,
            tr.drawn,
            ro.shown,
            tr.estimate,
            tr.status,
            tr.run_error,
            *tr.plots,
            tr.alerts,
            tr.summary,
            *tr.alert_link,
        ],
        js=locale_switch.CHOOSE_JS,
        api_name="page_language",
        api_visibility="private",
        queue=False,  # cheap, and a page switches its language however full the queue is
    )

    @guarded(controller, lambda msg: {cm.result: gr.skip()})
    def compare_again(locale, result, evaluation):
        # a dict with a key is read as updates: the state is sent back as it is
        return {cm.result: result} | compare_tab.relocalized(cm, result, evaluation, controller.locale(locale))

    switched.then(
        compare_again,
        [page.locale, cm.result, cm.eval_result],
        [cm.result, cm.summary, cm.base, cm.trained, cm.eval_report, cm.eval_plot],
        api_name="compare_language",
        api_visibility="private",
        queue=False,
    )

    @guarded(controller, lambda msg: {rn.message: msg})
    def runs_again(locale):
        return {rn.table: runs_tab.run_table(controller.list_runs(), controller.locale(locale))}

    switched.then(
        runs_again,
        [page.locale],
        [rn.table, rn.message],
        api_name="runs_language",
        api_visibility="private",
        queue=False,
    )


def _wire_tick(page: Page, tr, ro) -> None:
    controller = page.controller

    # gradio reads a returned dict as updates only if it has a key: every answer names the watched run at least.
    @guarded(controller, lambda msg: {tr.run_error: msg})
    def tick(cid, name, drawn, smoothing, shown, follow, label, visible, locale="en", request: gr.Request = None):
        caller = caller_of(request, cid)
        followed = controller.follow(name, caller)
        out = {page.watched: followed}
        waiting = controller.line_note(caller, locale)  # a place in the line for the slot, kept while this asks
        if followed != name:
            out.update({tr.drawn: -1, ro.shown: -1})
            drawn, shown = -1, -1
        view = controller.view(followed)
        if view is None:
            return out | ({tr.status: text(waiting)} if waiting else {})
        rendered = train_tab.render(tr, view, smoothing, drawn, locale, caller)  # caller: Start off while theirs trains
        if waiting:  # the run shown is someone else's: say where this visitor stands
            rendered[tr.status] += f"<br>{text(waiting)}"
        if visible != "train":  # status and error only; plots redraw when the tab shows again
            rendered = {k: v for k, v in rendered.items() if k in (tr.status, tr.run_error)}
        out.update(rendered)
        if visible == "rollouts":
            out.update(rollouts_tab.render_latest(ro, controller, followed, label, follow, shown, locale))
        return out

    gr.Timer(TICK_SECONDS).tick(
        tick,
        [page.client_id, page.watched, tr.drawn, tr.smoothing, ro.shown, ro.follow, ro.group, page.tab, page.locale],
        [page.watched, *tr.tick_outputs, *ro.outputs, ro.shown],
        show_progress="hidden",
        # callable by clients (scripts/bench_app.py simulates watching pages with it), hidden from the API docs
        api_name="page_tick",
        api_visibility="undocumented",
        concurrency_limit=None,
        concurrency_id=api.TICK,  # a read, counted by the admission middleware (api.READ_KINDS)
        queue=False,  # a plain request: the queue's SSE machinery costs GIL time the training thread would lose
    )


def launch_options(limits: Limits, reads: ReadGate | None = None) -> dict:
    """``demo.launch`` keywords. The app serves nothing that needs an upload, so uploads are refused (1 byte; in
    public mode the admission middleware answers 403 before gradio reads one). In front of gradio's routes sits
    ``server.admission``: who a visitor is, and in public mode its fair share of the queue. In public mode: no
    ``/monitoring``, no run history (it would save public calls to a bucket a caller names), a bounded number of
    browser sessions, and sessions idle for ``limits.session_seconds`` forgotten. ``reads``: the controller's read
    gate, which the middleware counts reads with (one of its own where none is given)."""
    admission = Middleware(
        Admission, limits=limits, kind_of=event_kind, queued=queued_events, read_kinds=api.READ_KINDS, reads=reads
    )
    # sessions that build their copy of the page's config only when asked, and (public) idle ones forgotten
    app_kwargs: dict = {"middleware": [admission], "lifespan": session_lifespan(limits.session_seconds)}
    options = {
        "server_name": os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        "server_port": int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        "theme": gr.themes.Soft(),
        "css": CSS + compare_tab.COMPARE_CSS + train_tab.TRAIN_CSS,  # each tab may bring the CSS of its own tables
        "head": locale_switch.HEAD,
        "i18n": gr.I18n(**i18n.translations(min_variance_every=limits.min_variance_every)),
        "show_error": True,
        "max_file_size": 1,
        "app_kwargs": app_kwargs,
        # the page is rendered in the browser: a Node server in front would be every request's peer address
        "ssr_mode": False,
    }
    if limits.public:
        options |= {"enable_monitoring": False, "run_history": False, "state_session_capacity": PUBLIC_SESSIONS}
    return options


def prepare(demo: gr.Blocks, limits: Limits) -> gr.Blocks:
    """Queue settings: at most 4 events at once by default. In public mode, no global bound on the waiting line
    (it counted events, so one visitor could fill it for everyone): each visitor may have
    ``limits.max_events_per_visitor`` events of a kind waiting or running (``server.admission``), and queued events
    cannot be called around the queue (``api_open=False``: ``/gradio_api/run/<name>`` answers only the page's
    unqueued events)."""
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
        reason = "the server shut down (SIGTERM)"
        runs = runner.stop_all(reason)
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        for active in runs:
            active.job.join(max(0.0, deadline - time.monotonic()))
        for active in runs:
            if not active.job.done:  # still inside a step: say so; the process exits now
                active.mark_stopped(reason + ", before the step ended; no model saved")
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
    runner = Runner(
        runs_dir=os.environ.get("RLOO_RUNS_DIR", "runs"),
        max_concurrent=int(os.environ.get("RLOO_MAX_CONCURRENT_RUNS", "1")),
        backend=os.environ.get("RLOO_BACKEND", "thread"),
        num_processes=int(os.environ.get("RLOO_NUM_PROCESSES", "2")),
        limits=limits,
    )
    controller = Controller(runner)
    demo = prepare(build_app(controller), limits)
    install_sigterm(runner, controller.close)
    mode = "public" if limits.public else "local"
    logging.getLogger(__name__).info("rloo-demo in %s mode, runs in %s", mode, runner.runs_dir)
    try:
        demo.launch(**launch_options(limits, controller.reads))
    finally:
        controller.close()
