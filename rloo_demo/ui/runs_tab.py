"""Runs tab: run history from disk, metric overlays across runs, arenas (paired runs of several estimators),
downloads and the reproducing CLI command."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.i18n import localize_figure, t
from rloo_demo.ui import plots
from rloo_demo.ui.common import L, Page, as_plot, error_markdown, guarded
from rloo_demo.ui.views import RUN_COLUMNS, run_headers, run_rows

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


def build(page: Page, tab: gr.Tab) -> SimpleNamespace:
    ui = SimpleNamespace()
    with gr.Row():
        ui.refresh = gr.Button(L("runs.refresh"), scale=0, min_width=100)
    ui.message = gr.Markdown("", elem_classes=["rloo-error"], elem_id="runs-message")
    headers = [L(f"runs.col_{c}") for c in RUN_COLUMNS]
    ui.table = gr.Dataframe(headers=headers, interactive=False, wrap=True, elem_id="runs-table")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            ui.overlay_runs = gr.CheckboxGroup([], label=L("runs.overlay_runs"))
            ui.metric = gr.Dropdown(OVERLAY_METRICS, value="reward", label=L("runs.metric"))
            ui.smoothing = gr.Slider(0, 0.95, value=0.6, step=0.05, label=L("common.smoothing"))
        with gr.Column(scale=2):
            ui.overlay = gr.Plot(label=L("runs.overlay"), show_label=False)
    with gr.Accordion(L("runs.arena_accordion"), open=False):
        gr.Markdown(L("runs.arena_help"), elem_classes=["rloo-small"])
        with gr.Row():
            ui.arena = gr.Dropdown([], label=L("runs.arena"), scale=3, elem_id="arena-pick")
            ui.arena_overlay = gr.Button(L("runs.arena_overlay"), scale=1)
        ui.arena_table = gr.Markdown("", elem_id="arena-table")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            ui.run = gr.Dropdown([], label=L("runs.details"), elem_id="runs-detail")
            ui.downloads = gr.File(
                label=L("runs.downloads"),
                file_count="multiple",
                elem_id="runs-downloads",
            )
        with gr.Column(scale=2):
            ui.command = gr.Code(label=L("runs.command"), language="shell", elem_id="run-command")
            ui.config = gr.Code(label="config.yaml", language="yaml")
    _wire(ui, page, tab)
    return ui


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.message: error_markdown(msg, locale)})
    def refresh(selected, details, locale="en"):
        summaries = controller.list_runs()
        names = [s["name"] for s in summaries]
        selected = selected if isinstance(selected, list) else []
        keep = [n for n in selected if n in names] or names[:2]
        pick = details if details in names else (names[0] if names else None)
        arenas = controller.arenas()
        return {
            ui.table: gr.Dataframe(value=run_rows(summaries, locale), headers=run_headers(locale)),
            ui.overlay_runs: gr.CheckboxGroup(choices=names, value=keep),
            ui.run: gr.Dropdown(choices=names, value=pick),
            ui.arena: gr.Dropdown(choices=arenas, value=arenas[0] if arenas else None),
            ui.message: "",
        }

    gr.on(
        [tab.select, ui.refresh.click],
        refresh,
        [ui.overlay_runs, ui.run, page.locale],
        [ui.table, ui.overlay_runs, ui.run, ui.arena, ui.message],
        api_name="runs_refresh",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.message: error_markdown(msg, locale)})
    def overlay(selected, metric, smoothing, locale="en"):
        metric = metric if metric in OVERLAY_METRICS else "reward"
        smoothing = smoothing if isinstance(smoothing, int | float) and not isinstance(smoothing, bool) else 0.6
        figure = plots.overlay_figure(controller.overlay_records(selected), metric, smoothing)
        return {ui.overlay: as_plot(localize_figure(figure, locale))}

    for trigger in (ui.overlay_runs.change, ui.metric.change, ui.smoothing.release):
        trigger(
            overlay,
            [ui.overlay_runs, ui.metric, ui.smoothing, page.locale],
            [ui.overlay, ui.message],
            api_visibility="private",
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
        return {ui.downloads: files or None, ui.command: command, ui.config: config_text, ui.message: note}

    ui.run.change(
        details,
        [ui.run, page.locale],
        [ui.downloads, ui.command, ui.config, ui.message],
        api_name="runs_details",
        api_visibility="private",
    )
