"""Train tab: the RunConfig form, the time estimate, Start / Stop, the status line and the live plots.

``build`` makes the tab, its components and events, and returns its ``Tab``; ``render`` is what a page tick shows
of a run.

No number box of the form has a ``minimum`` or ``maximum`` and the events read the values raw (``preprocess=False``):
gradio's own range check answers a value past it with a bare toast that names no field (an HTTP 500, a traceback in
the server log), and a slider's box quietly sets a value past its end to the end (K = 1000 became 64). The
controller checks every value against this server's limits instead, and a refusal names each field by its label.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import gradio as gr

from rloo_demo import i18n
from rloo_demo.errors import Waiting
from rloo_demo.server.readers import RunView
from rloo_demo.ui.common import SMOOTHING, L, Moment, Page, Tab, caller_of, error_markdown, form_refusal, guarded
from rloo_demo.ui.forms import FIELDS, FOLD_NOTES, FOLDS, FORM_FIELDS, defaults
from rloo_demo.ui.tabs import train_form
from rloo_demo.ui.tabs.train_plots import build_plots, figures, shared_figures
from rloo_demo.ui.tabs.train_style import TOGGLE_HTML, TOGGLE_JS, TRAIN_CSS
from rloo_demo.ui.views import status_line, text
from rloo_demo.ui.views.train import (
    alerts_html,
    failure_markdown,
    idle_status,
    phase_line,
    run_alerts,
    summary_markdown,
)

ID, LABEL = "train", "tab.train"
ESTIMATE_FIELDS = (*(f.name for f in FIELDS if f.number), "data_source")


CSS = TRAIN_CSS  # the tab's own CSS (``Tab.css``), which ``ui.app`` adds to the page's


def build(page: Page) -> Tab:
    with gr.Tab(L(LABEL), id=ID) as element:
        ui = _components(page)
    _wire(ui, page)
    return Tab(
        id=ID,
        label_key=LABEL,
        element=element,
        ui=ui,
        error=ui.status,  # a refused load or a failed redraw says why where the run's state is said
        css=CSS,
        tick_inputs=[ui.drawn, ui.smoothing],
        tick_outputs=ui.tick_outputs,
        render=lambda moment, drawn, smoothing: tick(ui, moment, drawn, smoothing),
        relocalize_inputs=[ui.smoothing, *ui.form],
        relocalize_outputs=[
            *(ui.drawn, ui.estimate, ui.form_error, ui.status, ui.run_error),
            *(*ui.plots, ui.alerts, ui.summary, *ui.alert_link),
        ],
        relocalize=lambda moment, smoothing, *form: relocalized(ui, moment, smoothing, form),
        load_outputs=[ui.drawn, ui.status, ui.estimate, ui.start, *ui.plots],
        load=lambda moment: loaded(ui, moment),
    )


def _components(page: Page) -> SimpleNamespace:
    ui = SimpleNamespace(controller=page.controller, defaults=defaults())
    # The action bar first, sticky: Start is in sight on a fresh page and while the run trains, whatever the form.
    # On a phone it folds to one line, Start, Stop and the status, which a tap opens (``BAR_CSS``, ``TOGGLE_JS``).
    with gr.Group(elem_id="action-bar"):
        with gr.Row(equal_height=True, elem_id="action-line"):
            # off until the page's load has given it the browser's client id: a click before that would be refused
            ui.start = gr.Button(
                L("train.start"), variant="primary", elem_id="start-btn", scale=0, min_width=110, interactive=False
            )
            ui.stop = gr.Button(L("train.stop"), variant="stop", elem_id="stop-btn", scale=0, min_width=90)
            with gr.Column(scale=5, min_width=200, elem_id="action-text"):
                ui.status = gr.Markdown(L("train.no_run"), elem_id="run-status")
                ui.estimate = gr.Markdown("", elem_id="run-estimate", elem_classes=["rloo-small"])  # written on load
            # the fold's button (a phone's only), its name for a screen reader in the page's language; no server event
            gr.HTML(
                L("train.bar_toggle"),
                html_template=TOGGLE_HTML,
                js_on_load=TOGGLE_JS,
                elem_id="bar-toggle",
                min_width=0,
            )
        ui.form_error = gr.Markdown("", elem_id="form-error", elem_classes=["rloo-error"])
        ui.run_error = gr.Markdown("", elem_classes=["rloo-error"], elem_id="run-error")
        ui.alerts = gr.HTML("", elem_id="train-alerts")  # the warnings, as a callout (views.train.alerts_html)
        # the step the first warning fired at, and a button that opens it on the Rollouts tab (``rollouts.connect``)
        ui.alert_step, ui.alert_open = gr.State(None), gr.Button("", visible=False, size="sm", elem_id="alert-open")
        ui.alert_link = [ui.alert_step, ui.alert_open]
    ui.summary = gr.Markdown("", elem_id="run-summary")  # an ended run's summary (store.summary)
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=320):
            for fold in FOLDS:  # the form, fold by fold, from its fields' declarations (forms.FIELDS)
                with train_form.fold(fold):
                    shown = [f for f in FIELDS if f.fold == fold]
                    for _, row in itertools.groupby(shown, key=lambda f: f.widget.row):
                        row = list(row)
                        with train_form.row(page, row):
                            for f in row:
                                setattr(ui, f.name, train_form.box(page, f, ui.defaults[f.name]))
                    if fold in FOLD_NOTES:
                        gr.Markdown(L(FOLD_NOTES[fold]), elem_classes=["rloo-small"])
        with gr.Column(scale=2, min_width=480):
            ui.smoothing = gr.Slider(
                *SMOOTHING.range, value=0.6, step=0.05, label=L("common.smoothing"), info=L("common.smoothing_info")
            )
            build_plots(ui)
    ui.drawn = gr.State(-1)  # last step drawn in the plots (-1: nothing yet)
    ui.form = [getattr(ui, name) for name in FORM_FIELDS]
    # what a page tick updates on this tab
    ui.tick_outputs = [ui.status, ui.run_error, *ui.plots, ui.drawn, ui.start, ui.alerts, ui.summary, *ui.alert_link]
    return ui


def idle_line(moment: Moment) -> str:
    """The status line of a page with no run to show: "No run yet", and, while another visitor's run holds the
    slot, its progress and what Start will do (``Controller.slot_note``); its plots stay empty."""
    return idle_status(moment.locale) + (f"<br>{moment.slot}" if moment.slot else "")


def empty_plots(ui: SimpleNamespace, locale: str) -> dict:
    """The plots' titled empty axes, before any run (each says that no run has started)."""
    return dict(zip(ui.plots, figures([], None, locale), strict=True))


def tick(ui: SimpleNamespace, moment: Moment, drawn, smoothing) -> dict:
    """A page tick: the status line always (with the visitor's place in the line or the slot's word), the plots only
    while the tab shows (``drawn`` stays, so they are drawn when it shows again)."""
    out = {ui.drawn: -1} if moment.fresh else {}
    if moment.view is None:  # no run of its own: "No run yet", and whether another visitor's run holds the slot
        return out | {ui.status: moment.waiting or idle_line(moment)}
    drawn = -1 if moment.fresh else drawn
    rendered = render(
        ui, moment.view, smoothing, drawn, moment.locale, moment.caller
    )  # caller: Start off while theirs trains
    note = moment.waiting or moment.slot
    if note:  # the slot is another visitor's (the run shown or not): say where this visitor stands
        rendered[ui.status] += f"<br>{note}"
    if moment.visible != ID:  # status and error only; plots redraw when the tab shows again
        rendered = {k: v for k, v in rendered.items() if k in (ui.status, ui.run_error)}
    return out | rendered


def loaded(ui: SimpleNamespace, moment: Moment) -> dict:
    """A fresh page: the idle line and the form's estimate; the empty plots where it has no run to watch."""
    out = {ui.drawn: -1, ui.status: idle_line(moment), ui.estimate: ui.controller.estimate(ui.defaults, moment.locale)}
    out[ui.start] = gr.Button(interactive=moment.caller is None or not ui.controller.trains_for(moment.caller))
    return out if moment.watched else out | empty_plots(ui, moment.locale)


def relocalized(ui: SimpleNamespace, moment: Moment, smoothing, form) -> dict:
    """The language switched: the estimate (or the form's refusal), and the watched run drawn again in it."""
    locale = moment.locale
    out = {ui.drawn: -1} | estimate_update(ui, dict(zip(FORM_FIELDS, form, strict=False)), locale)
    view = ui.controller.view(moment.watched)
    if view is None:  # no run: the idle line and the titled empty axes, in the new language
        return out | empty_plots(ui, locale) | {ui.status: idle_status(locale)}
    return out | render(ui, view, smoothing, -1, locale)


def _alerts_and_summary(ui: SimpleNamespace, view: RunView, locale: str) -> tuple[str, str, int | None]:
    """The callout, the end-of-run summary and the step of the first warning (None: none) of a run, built once per
    new step or status (like the figures)."""
    last = view.records[-1] if view.records else {}
    # ``live`` too: a run says "finished" a moment before its thread ends and it leaves the runner; the summary is
    # read only once it has (``Controller.run_summary``), so the ended run's texts are built again then
    key = (view.name, len(view.records), last.get("step"), last.get("logged_at"), view.status, view.live, locale)

    def build() -> tuple[str, str, int | None]:
        ended = ui.controller.run_summary(view.name, locale)  # None while it trains; saved as summary.json
        alerts = ended[1] if ended else run_alerts(view.records, locale)
        first = alerts[0]["step"] if alerts else None
        return alerts_html(alerts, locale), summary_markdown(ended[0], alerts, locale) if ended else "", first

    return ui.controller.builds.texts(key, build)


def render(ui: SimpleNamespace, view: RunView, smoothing, last_drawn, locale: str = "en", caller=None) -> dict:
    """A tick's update of the Train tab: the status line, the warnings' callout and an ended run's summary always,
    the plots only when a new step arrived; with the ``caller``, Start disabled while a run of theirs trains."""
    controller = getattr(ui, "controller", None)  # None: a tab built without a page (the unit tests' stand-in)
    starting = controller is not None and view.status == "running" and not view.records
    phase = controller.run_phase(view.name) if starting else None
    if phase is not None:  # the first seconds: what the run is doing, not "step 0 / 150 · ETA –"
        status = phase_line(phase, view.elapsed, view.max_steps, locale)
    else:
        status = status_line(view.status, view.records, view.max_steps, view.elapsed, view.name, view.reason, locale)
    alerts, summary, fired = _alerts_and_summary(ui, view, locale) if controller is not None else ("", "", None)
    out = {
        ui.status: status,
        ui.run_error: failure_markdown(view.error, locale) if view.status == "failed" and view.error else "",
    }
    if controller is not None:
        out |= {ui.alerts: alerts, ui.summary: summary, ui.alert_step: fired}
        label = i18n.t(locale, "alert.open", step=fired) if fired is not None else ""
        out[ui.alert_open] = gr.Button(value=label, visible=fired is not None)
    if caller is not None and controller is not None:
        out[ui.start] = gr.Button(interactive=not ui.controller.trains_for(caller))
    if view.last_step == last_drawn:
        built = None
    elif controller is None:  # a tab built without a page has no server's builds to share
        built = figures(view.records, smoothing, locale, started=True)
    else:
        built = shared_figures(controller.builds, view, smoothing, locale)
    if built is not None:  # None: drawn stays, so the next tick asks again
        out.update(zip(ui.plots, built, strict=True))
        out[ui.drawn] = view.last_step
    return out


def estimate_update(ui: SimpleNamespace, form: dict, locale: str) -> dict:
    """The form's estimate, or its refusal by the fields' labels in Start's box (each problem is shown once)."""
    try:
        config = ui.controller.check_form(form)  # once a keystroke: the estimate reads the config it returns
    except Exception as exc:
        refused = i18n.t(locale, "train.form_refused") + "\n\n" + form_refusal(ui.controller, exc, form, locale)
        return {ui.estimate: "", ui.form_error: refused}
    return {ui.estimate: ui.controller.estimate_checked(config, locale), ui.form_error: ""}


def _wire(ui: SimpleNamespace, page: Page) -> None:
    controller = page.controller

    # the refusal's frame in the page's language (the locale is the last input: the state set on load)
    def not_started(msg, locale):
        return {ui.form_error: i18n.t(locale, "train.not_started") + "\n\n" + msg}

    # the request first: gradio fills no keyword-only one after *values (gradio_internals.requests_left_out)
    def start(request: gr.Request, cid, *values):
        *values, locale = values
        locale = i18n.normalize(locale)
        caller = caller_of(request, cid)
        form = dict(zip(FORM_FIELDS, values, strict=False))
        try:
            name = controller.start_from_form(form, caller)
        except Waiting as exc:  # not a refusal: a place in the line, shown where the run's status will be
            return {ui.form_error: "", ui.status: text(controller.line_text(exc.place, locale))}
        except Exception as exc:  # as guarded does, with the page's language for the frame and the labels
            return not_started(form_refusal(controller, exc, form, locale), locale)
        # Start stays disabled while the run trains: the tick enables it again when it ends (render)
        return {page.watched: name, ui.drawn: -1, ui.form_error: "", ui.start: gr.Button(interactive=False)}

    ui.start.click(
        start,
        [page.client_id, *ui.form, page.locale],
        [page.watched, ui.drawn, ui.form_error, ui.status, ui.start],
        api_name="train_start",
        api_visibility="private",
        concurrency_id="start",
        concurrency_limit=1,
        preprocess=False,  # raw values: the controller checks them and names each field (module docstring)
    )

    @guarded(controller, lambda msg, locale: {ui.form_error: error_markdown(msg, locale)})
    def stop(cid, name, locale="en", request: gr.Request = None):
        return {ui.form_error: text(controller.stop(name, caller_of(request, cid), locale))}

    ui.stop.click(
        stop,
        [page.client_id, page.watched, page.locale],
        [ui.form_error],
        api_name="train_stop",
        api_visibility="private",
        queue=False,  # it only sets a flag: never behind anything in the queue
    )

    @guarded(controller, lambda msg: {ui.estimate: msg})
    def estimate(*values):
        *values, locale = values
        return estimate_update(ui, dict(zip(FORM_FIELDS, values, strict=False)), i18n.normalize(locale))

    gr.on(
        [getattr(ui, name).change for name in ESTIMATE_FIELDS],
        estimate,
        [*ui.form, page.locale],
        [ui.estimate, ui.form_error],
        api_name="train_estimate",
        api_visibility="private",
        queue=False,
        show_progress="hidden",
        preprocess=False,  # raw values, as Start's
    )

    @guarded(controller, lambda msg, locale: {ui.form_error: error_markdown(msg, locale)}, SMOOTHING.labels)
    def redraw(name, smoothing, locale="en"):
        SMOOTHING.check(smoothing)  # refused by the slider's label; never gradio's range error
        view = controller.view(name)  # through the shared builds: any client may send this event, with any value
        if view is None:
            return dict(zip(ui.plots, figures([], None, locale, False), strict=True))
        built = shared_figures(controller.builds, view, smoothing, locale)
        if built is None:  # this step's builds are spent: the plots follow the new smoothing from the next step
            return {}
        return dict(zip(ui.plots, built, strict=True))

    ui.smoothing.release(
        redraw,
        [page.watched, ui.smoothing, page.locale],
        ui.plots + [ui.form_error],
        api_name="train_redraw",
        api_visibility="private",
        preprocess=False,  # any smoothing a client sends is read by shared_figures, never a range error of gradio's
    )
