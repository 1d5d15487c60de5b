"""Runs tab: run history from disk, metric overlays across runs, arenas (paired runs of several estimators),
downloads and the reproducing CLI command."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo import plots
from rloo_demo.ui.common import Page, as_plot, error_markdown, guarded
from rloo_demo.ui.views import RUN_HEADERS, run_rows

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
ARENA_HELP = """Paired runs of several estimators on the same policy, prompts, K, seeds and step budget, made from the
command line (9 trainings and evaluations for 3 estimators × 3 seeds: too long for a page's budget):
`python -m rloo_demo arena --estimators rloo grpo reinforce --seeds 3`. `grpo` is TRL's GRPOTrainer; `reinforce` is
this app's RLOO trainer with the baseline removed. **β enters RLOO's (and REINFORCE's) reward, but GRPO's loss.**"""


def build(page: Page, tab: gr.Tab) -> SimpleNamespace:
    ui = SimpleNamespace()
    with gr.Row():
        ui.refresh = gr.Button("↻ Refresh", scale=0, min_width=100)
    ui.message = gr.Markdown("", elem_classes=["rloo-error"], elem_id="runs-message")
    ui.table = gr.Dataframe(headers=RUN_HEADERS, interactive=False, wrap=True, elem_id="runs-table")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            ui.overlay_runs = gr.CheckboxGroup([], label="Overlay runs")
            ui.metric = gr.Dropdown(OVERLAY_METRICS, value="reward", label="Metric")
            ui.smoothing = gr.Slider(0, 0.95, value=0.6, step=0.05, label="Smoothing")
        with gr.Column(scale=2):
            ui.overlay = gr.Plot(label="Overlay", show_label=False)
    with gr.Accordion("Arena: rloo vs grpo vs reinforce", open=False):
        gr.Markdown(ARENA_HELP, elem_classes=["rloo-small"])
        with gr.Row():
            ui.arena = gr.Dropdown([], label="Arena", scale=3, elem_id="arena-pick")
            ui.arena_overlay = gr.Button("Overlay its runs", scale=1)
        ui.arena_table = gr.Markdown("", elem_id="arena-table")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            ui.run = gr.Dropdown([], label="Run details", elem_id="runs-detail")
            ui.downloads = gr.File(
                label="Downloads: metrics CSV, config.yaml, rollouts, model zip",
                file_count="multiple",
                elem_id="runs-downloads",
            )
        with gr.Column(scale=2):
            ui.command = gr.Code(label="Reproduce from the command line", language="shell", elem_id="run-command")
            ui.config = gr.Code(label="config.yaml", language="yaml")
    _wire(ui, page, tab)
    return ui


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    controller = page.controller

    @guarded(controller, lambda msg: {ui.message: error_markdown(msg)})
    def refresh(selected, details):
        summaries = controller.list_runs()
        names = [s["name"] for s in summaries]
        selected = selected if isinstance(selected, list) else []
        keep = [n for n in selected if n in names] or names[:2]
        pick = details if details in names else (names[0] if names else None)
        arenas = controller.arenas()
        return {
            ui.table: run_rows(summaries),
            ui.overlay_runs: gr.CheckboxGroup(choices=names, value=keep),
            ui.run: gr.Dropdown(choices=names, value=pick),
            ui.arena: gr.Dropdown(choices=arenas, value=arenas[0] if arenas else None),
            ui.message: "",
        }

    gr.on(
        [tab.select, ui.refresh.click],
        refresh,
        [ui.overlay_runs, ui.run],
        [ui.table, ui.overlay_runs, ui.run, ui.arena, ui.message],
        api_name="runs_refresh",
        api_visibility="private",
    )

    @guarded(controller, lambda msg: {ui.message: error_markdown(msg)})
    def overlay(selected, metric, smoothing):
        metric = metric if metric in OVERLAY_METRICS else "reward"
        smoothing = smoothing if isinstance(smoothing, int | float) and not isinstance(smoothing, bool) else 0.6
        figure = plots.overlay_figure(controller.overlay_records(selected), metric, smoothing)
        return {ui.overlay: as_plot(figure)}

    for trigger in (ui.overlay_runs.change, ui.metric.change, ui.smoothing.release):
        trigger(overlay, [ui.overlay_runs, ui.metric, ui.smoothing], [ui.overlay, ui.message], api_visibility="private")

    @guarded(controller, lambda msg: {ui.arena_table: error_markdown(msg)})
    def show_arena(name):
        if not name:
            return {ui.arena_table: "No arena yet: run `python -m rloo_demo arena` on this server."}
        return {ui.arena_table: controller.arena(name)["markdown"]}

    ui.arena.change(show_arena, ui.arena, [ui.arena_table], api_name="runs_arena", api_visibility="private")

    @guarded(controller, lambda msg: {ui.message: error_markdown(msg)})
    def overlay_arena(name):
        runs = controller.arena(name)["runs"] if name else []
        return {ui.overlay_runs: gr.CheckboxGroup(value=runs[:12]), ui.message: ""}

    ui.arena_overlay.click(
        overlay_arena, ui.arena, [ui.overlay_runs, ui.message], api_name="runs_arena_overlay", api_visibility="private"
    )

    @guarded(controller, lambda msg: {ui.message: error_markdown(msg), ui.downloads: None})
    def details(name):
        if not name:
            return {ui.downloads: None, ui.command: "", ui.config: "", ui.message: ""}
        files, command, config_text = controller.run_details(name)
        return {ui.downloads: files, ui.command: command, ui.config: config_text, ui.message: ""}

    ui.run.change(
        details,
        ui.run,
        [ui.downloads, ui.command, ui.config, ui.message],
        api_name="runs_details",
        api_visibility="private",
    )
