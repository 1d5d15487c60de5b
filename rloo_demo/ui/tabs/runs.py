"""Runs tab: run history from disk, metric overlays across runs, arenas (paired runs of several estimators),
downloads, the reproducing CLI command, and a run's name, note and deletion (``server.manage`` says who may).

The table's first column is the run's name, its folder, as every other tab and endpoint knows it; a label a
person gives a run is a column beside it.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.i18n import localize_figure, t
from rloo_demo.store.labels import MAX_LABEL_CHARS, MAX_NOTE_CHARS
from rloo_demo.ui import plots
from rloo_demo.ui.common import SMOOTHING, L, Moment, Page, Tab, as_plot, caller_of, error_markdown, guarded
from rloo_demo.ui.views import RUN_COLUMNS, config_html, run_headers, run_rows

ID, LABEL = "runs", "tab.runs"
# The table, a run's numbered config and its downloads
RUNS_CSS = """
/* the Runs table: gradio's dataframe sizes each column to its longest text and breaks words anywhere; here the
   figures (status to model, columns 3 to 8) stay on one line, headers break between words, and the long texts (the
   run, its label, note and error) wrap inside a width of their own, so all ten columns fit a desktop's width */
#runs-table th span, #runs-table .body-cell span { word-break: normal !important; overflow-wrap: normal !important; }
#runs-table .body-cell[data-col="2"] span, #runs-table .body-cell[data-col="3"] span,
#runs-table .body-cell[data-col="4"] span, #runs-table .body-cell[data-col="5"] span,
#runs-table .body-cell[data-col="6"] span, #runs-table .body-cell[data-col="7"] span,
#runs-table .sizing-body td:nth-child(n+3):nth-child(-n+8) { white-space: nowrap; }
#runs-table .body-cell[data-col="0"] span, #runs-table .body-cell[data-col="1"] span,
#runs-table .body-cell[data-col="8"] span, #runs-table .body-cell[data-col="9"] span,
#runs-table .sizing-body td:nth-child(-n+2), #runs-table .sizing-body td:nth-child(-n+2) .cell-wrap,
#runs-table .sizing-body td:nth-child(n+9), #runs-table .sizing-body td:nth-child(n+9) .cell-wrap {
  white-space: normal !important; overflow-wrap: anywhere !important; }
#runs-table th[data-heading="0"], #runs-table .sizing-body td:nth-child(1) { width: 14em; min-width: 8.5em; }
#runs-table th[data-heading="1"], #runs-table .sizing-body td:nth-child(2) { width: 9em; min-width: 6em; }
#runs-table th[data-heading="8"], #runs-table .sizing-body td:nth-child(9) { width: 13em; min-width: 10em; }
#runs-table th[data-heading="9"], #runs-table .sizing-body td:nth-child(10) { width: 15em; min-width: 12em; }
/* a run's config, every line numbered (views.config_html) */
.rloo-cfg-head { font-weight: 600; margin: 4px 0; }
.rloo-config { font-family: ui-monospace, monospace; font-size: 0.8em; line-height: 1.45; overflow-x: auto;
  border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 6px 0; }
.rloo-cfg-line { display: flex; }
.rloo-cfg-no { flex: 0 0 3.2em; text-align: right; padding-right: 0.8em; opacity: 0.55; user-select: none; }
.rloo-cfg-text { white-space: pre-wrap; overflow-wrap: anywhere; }
/* the downloads: each file's whole name, wrapped (gradio cut it with an ellipsis), and no "remove" cross beside
   a file the server offers */
#runs-downloads .filename, #runs-downloads .filename .stem { white-space: normal; overflow-wrap: anywhere; }
#runs-downloads .filename .stem { display: inline; overflow: visible; text-overflow: clip; }
#runs-downloads td.filename { display: table-cell; font-size: 0; }  /* no space between the name and its extension */
#runs-downloads td.filename span { font-size: var(--text-md); }
#runs-downloads .label-clear-button { display: none; }
@media (max-width: 700px) {
  /* the Runs table's first column, the run, narrower: beside it the figures stay in sight */
  #runs-table th[data-heading="0"], #runs-table .sizing-body td:nth-child(1) { width: 8.5em; }
  #runs-table th[data-heading="1"], #runs-table .sizing-body td:nth-child(2) { width: 6em; }
}
"""

OVERLAY_METRICS = [
    "reward",
    "kl",
    "grad_norm",
    "loss",
    "entropy",
    "reward_std",
    "completions/mean_length",
    "frac_reward_zero_std",
    "frac_raw_score_zero_std",
    "kl_k1",
    "kl_k3",
    "judges/distinct_2",
    "judges/repetition",
    "step_time",
]


def metric_key(metric: str) -> str:
    """The text key of a metric's name in the overlay's picker (``metric.judges.distinct_2``): what it measures in
    words, in the page's language, rather than the key TRL logs it under."""
    return "metric." + metric.replace("/", ".")


CSS = RUNS_CSS  # the tab's own CSS (``Tab.css``), which ``ui.app`` adds to the page's


def build(page: Page) -> Tab:
    with gr.Tab(L(LABEL), id=ID) as element:
        ui = _components(page)
    _wire(ui, page, element)
    return Tab(
        id=ID,
        label_key=LABEL,
        element=element,
        ui=ui,
        error=ui.message,
        css=CSS,
        relocalize_outputs=[ui.table, ui.message],
        relocalize=lambda moment: relocalized(ui, moment),
    )


def relocalized(ui: SimpleNamespace, moment: Moment) -> dict:
    """The language switched: the table written again (it stays on screen until an event redraws it)."""
    return {ui.table: run_table(moment.controller.list_runs(), moment.locale)}


def _components(page: Page) -> SimpleNamespace:
    ui = SimpleNamespace()
    with gr.Row():
        ui.refresh = gr.Button(L("runs.refresh"), scale=0, min_width=100)
    ui.message = gr.Markdown("", elem_classes=["rloo-error"], elem_id="runs-message")
    headers = [L(f"runs.col_{c}") for c in RUN_COLUMNS]
    # the first column (the run) pinned: on a phone the table scrolls sideways under it
    ui.table = gr.Dataframe(headers=headers, interactive=False, wrap=True, pinned_columns=1, elem_id="runs-table")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            ui.overlay_runs = gr.CheckboxGroup([], label=L("runs.overlay_runs"))
            ui.metric = gr.Dropdown(
                [(L(metric_key(m)), m) for m in OVERLAY_METRICS], value="reward", label=L("runs.metric")
            )
            ui.smoothing = gr.Slider(*SMOOTHING.range, value=0.6, step=0.05, label=L("common.smoothing"))
        with gr.Column(scale=2):
            ui.overlay = gr.Plot(label=L("runs.overlay"), show_label=False)
    with gr.Accordion(L("runs.arena_accordion"), open=False):
        gr.Markdown(L("runs.arena_help"), elem_classes=["rloo-small"])
        with gr.Row():
            ui.arena = gr.Dropdown([], label=L("runs.arena"), scale=3, elem_id="arena-pick")
            ui.arena_overlay = gr.Button(L("runs.arena_overlay"), scale=1)
        ui.arena_table = gr.Markdown("", elem_id="arena-table", elem_classes=["rloo-md-table"])
    # the page's width: a choice is a run's label and its name, which a third of the width cut short
    ui.run = gr.Dropdown([], label=L("runs.details"), elem_id="runs-detail")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            ui.downloads = gr.File(
                label=L("runs.downloads"),
                file_count="multiple",
                elem_id="runs-downloads",
            )
            # a finished run as a TRL project's zip (engine.trl_project), shown once its own event has built it
            ui.trl_project = gr.DownloadButton(L("runs.trl_project"), visible=False, elem_id="run-trl-project")
            with gr.Accordion(L("runs.manage"), open=False, elem_id="runs-manage"):
                public = page.controller.limits.public
                gr.Markdown(L("runs.manage_public" if public else "runs.manage_local"), elem_classes=["rloo-small"])
                ui.label = gr.Textbox(label=L("runs.label"), max_length=MAX_LABEL_CHARS, elem_id="run-label")
                ui.note = gr.Textbox(label=L("runs.note"), lines=2, max_length=MAX_NOTE_CHARS, elem_id="run-note")
                with gr.Row():
                    ui.save = gr.Button(L("runs.save"), elem_id="run-save")
                    ui.delete = gr.Button(L("runs.delete"), variant="stop", elem_id="run-delete")
                with gr.Row():
                    # a second, explicit click: a deleted run cannot come back
                    ui.confirm = gr.Button(
                        L("runs.confirm_delete"), variant="stop", visible=False, elem_id="run-delete-confirm"
                    )
                    ui.cancel = gr.Button(L("runs.cancel"), visible=False, elem_id="run-delete-cancel")
                ui.manage_message = gr.Markdown("", elem_id="runs-manage-message")
        with gr.Column(scale=2):
            ui.command = gr.Code(label=L("runs.command"), language="shell", elem_id="run-command")
            ui.config = gr.HTML("", elem_id="run-config")  # every line numbered (views.config_html)
    return ui


def _listing(ui: SimpleNamespace, controller, selected, details, locale: str) -> dict:
    """The table and every run picker of the tab, from the runs on disk; the picks kept where they still exist."""
    summaries = controller.list_runs()
    names = [s["name"] for s in summaries]
    selected = selected if isinstance(selected, list) else []
    keep = [n for n in selected if n in names] or names[:2]
    pick = details if details in names else (names[0] if names else None)
    arenas = controller.arenas()
    return {
        ui.table: run_table(summaries, locale),
        ui.overlay_runs: gr.CheckboxGroup(choices=names, value=keep),
        # a run's label beside its name, which stays the value every event is sent
        ui.run: gr.Dropdown(choices=[(_shown(s), s["name"]) for s in summaries], value=pick),
        ui.arena: gr.Dropdown(choices=arenas, value=arenas[0] if arenas else None),
        ui.message: "",
    }


def run_table(summaries: list[dict], locale: str) -> gr.Dataframe:
    """The runs table in ``locale``: its headers and the words in its rows (a status, "yes"/"no")."""
    return gr.Dataframe(value=run_rows(summaries, locale), headers=run_headers(locale))


def _shown(summary: dict) -> str:
    return f"{summary['label']} · {summary['name']}" if summary.get("label") else summary["name"]


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.message: error_markdown(msg, locale)})
    def refresh(selected, details, locale="en"):
        return _listing(ui, controller, selected, details, locale)

    gr.on(
        [tab.select, ui.refresh.click],
        refresh,
        [ui.overlay_runs, ui.run, page.locale],
        [ui.table, ui.overlay_runs, ui.run, ui.arena, ui.message],
        api_name="runs_refresh",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.message: error_markdown(msg, locale)}, SMOOTHING.labels)
    def overlay(selected, metric, smoothing, locale="en"):
        metric = metric if metric in OVERLAY_METRICS else "reward"
        smoothing = SMOOTHING.check(smoothing)  # refused by the slider's label
        figure = plots.overlay_figure(controller.overlay_records(selected), metric, smoothing)
        return {ui.overlay: as_plot(localize_figure(figure, locale)), ui.message: ""}

    for trigger in (ui.overlay_runs.change, ui.metric.change, ui.smoothing.release):
        trigger(
            overlay,
            [ui.overlay_runs, ui.metric, ui.smoothing, page.locale],
            [ui.overlay, ui.message],
            api_visibility="private",
            preprocess=False,  # raw values: a smoothing past the slider is refused by its label, not by a toast
        )

    @guarded(controller, lambda msg, locale: {ui.arena_table: error_markdown(msg, locale)})
    def show_arena(name, locale="en"):
        if not name:
            return {ui.arena_table: t(locale, "runs.no_arena")}
        return {ui.arena_table: controller.arena(name)["markdown"]}

    ui.arena.change(
        show_arena, [ui.arena, page.locale], [ui.arena_table], api_name="runs_arena", api_visibility="private"
    )

    @guarded(controller, lambda msg, locale: {ui.message: error_markdown(msg, locale)})
    def overlay_arena(name, locale="en"):
        runs = controller.arena(name)["runs"] if name else []
        return {ui.overlay_runs: gr.CheckboxGroup(value=runs[:12]), ui.message: ""}

    ui.arena_overlay.click(
        overlay_arena,
        [ui.arena, page.locale],
        [ui.overlay_runs, ui.message],
        api_name="runs_arena_overlay",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.message: error_markdown(msg, locale), ui.downloads: None})
    def details(name, locale="en"):
        if not name:
            return {ui.downloads: None, ui.command: "", ui.config: "", ui.message: ""}
        files, command, config_text = controller.run_details(name)
        note = "" if files else t(locale, "runs.downloads_when_done")  # a run in training has none (store.export)
        return {ui.downloads: files or None, ui.command: command, ui.config: config_html(config_text), ui.message: note}

    ui.run.change(
        details,
        [ui.run, page.locale],
        [ui.downloads, ui.command, ui.config, ui.message],
        api_name="runs_details",
        api_visibility="private",
    )

    no_project = gr.DownloadButton(value=None, visible=False, render=False)

    @guarded(controller, lambda msg, locale: {ui.message: error_markdown(msg, locale), ui.trl_project: no_project})
    def trl_project(name, locale="en"):
        """The run's TRL project, its own event beside ``details``: the downloads show while it builds (once per
        run and content), and a run in training or one that failed has none."""
        project = controller.trl_project(name) if name else None
        return {ui.trl_project: gr.DownloadButton(value=str(project), visible=True) if project else no_project}

    ui.run.change(
        trl_project,
        [ui.run, page.locale],
        [ui.trl_project, ui.message],
        api_name="runs_trl_project",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.message: error_markdown(msg, locale)})
    def pick_row(locale="en", evt: gr.SelectData = None):
        """A click on a row of the table (which also opens the run on the Rollouts tab) moves "Run details" to that
        run too; its change then shows the run's downloads, command, config and notes. The run is the row's first
        cell, taken only if the server lists it."""
        row = getattr(evt, "row_value", None) if evt is not None else None
        name = row[0] if isinstance(row, list | tuple) and row else None
        summaries = controller.list_runs()
        if name not in [s["name"] for s in summaries]:
            return {ui.message: ""}  # no listed run clicked: the details stay where they are
        return {ui.run: gr.Dropdown(choices=[(_shown(s), s["name"]) for s in summaries], value=name), ui.message: ""}

    ui.table.select(pick_row, [page.locale], [ui.run, ui.message], api_name="runs_pick_row", api_visibility="private")

    _wire_manage(ui, page)


def _wire_manage(ui: SimpleNamespace, page: Page) -> None:
    """The run's name, note and deletion: every check is the server's (``Controller.label_run``, ``delete_run``),
    so the events are as safe called directly, with any values, as from these widgets."""
    controller = page.controller
    # updates, not blocks: made inside the page's Blocks, they were two stray hidden buttons on the page
    hide = {ui.confirm: gr.Button(visible=False, render=False), ui.cancel: gr.Button(visible=False, render=False)}
    listed = [ui.table, ui.overlay_runs, ui.run, ui.arena, ui.message]

    @guarded(controller, lambda msg, locale: {ui.manage_message: error_markdown(msg, locale)})
    def notes(cid, name, locale="en", request: gr.Request = None):
        stored = controller.run_notes(name) if name else {"label": "", "note": ""}
        # the buttons only for a run this visitor may change now (``server.manage``): in public mode one's own,
        # never one in training; the server refuses the others anyway
        allowed = not name or controller.may_manage(name, caller_of(request, cid))
        return {
            ui.label: gr.Textbox(value=stored["label"], interactive=allowed),
            ui.note: gr.Textbox(value=stored["note"], interactive=allowed),
            ui.save: gr.Button(interactive=allowed),
            ui.delete: gr.Button(interactive=allowed),
            ui.manage_message: "" if allowed else t(locale, "runs.not_manageable"),
            **hide,
        }

    ui.run.change(
        notes,
        [page.client_id, ui.run, page.locale],
        [ui.label, ui.note, ui.save, ui.delete, ui.manage_message, ui.confirm, ui.cancel],
        api_name="runs_notes",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.manage_message: error_markdown(msg, locale)})
    def save(cid, name, label, note, selected, locale="en", request: gr.Request = None):
        if not name:
            return {ui.manage_message: t(locale, "runs.pick_first")}
        stored = controller.label_run(name, label, note, caller_of(request, cid))
        done = t(locale, "runs.saved", name=name)
        return {
            **_listing(ui, controller, selected, name, locale),
            ui.label: stored["label"],
            ui.note: stored["note"],
            ui.manage_message: done,
        }

    ui.save.click(
        save,
        [page.client_id, ui.run, ui.label, ui.note, ui.overlay_runs, page.locale],
        [*listed, ui.label, ui.note, ui.manage_message],
        api_name="runs_label",
        api_visibility="private",
    )

    def ask(name, locale="en"):
        if not name:
            return {ui.manage_message: t(locale, "runs.pick_first"), **hide}
        shown = {ui.confirm: gr.Button(visible=True), ui.cancel: gr.Button(visible=True)}
        return {ui.manage_message: t(locale, "runs.confirm_text", name=name), **shown}

    ui.delete.click(ask, [ui.run, page.locale], [ui.manage_message, ui.confirm, ui.cancel], api_visibility="private")
    ui.cancel.click(
        lambda: {ui.manage_message: "", **hide},
        None,
        [ui.manage_message, ui.confirm, ui.cancel],
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.manage_message: error_markdown(msg, locale), **hide})
    def delete(cid, name, selected, locale="en", request: gr.Request = None):
        if not name:
            return {ui.manage_message: t(locale, "runs.pick_first"), **hide}
        deleted = controller.delete_run(name, caller_of(request, cid))
        return {
            **_listing(ui, controller, selected, None, locale),
            ui.manage_message: t(locale, "runs.deleted", name=deleted),
            **hide,
        }

    ui.confirm.click(
        delete,
        [page.client_id, ui.run, ui.overlay_runs, page.locale],
        [*listed, ui.manage_message, ui.confirm, ui.cancel],
        api_name="runs_delete",
        api_visibility="private",
    )
