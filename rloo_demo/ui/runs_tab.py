"""Runs tab: run history from disk, metric overlays across runs, downloads and the reproducing CLI command."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.ui.views import RUN_HEADERS

OVERLAY_METRICS = ["reward", "kl", "loss", "entropy", "reward_std", "completions/mean_length", "frac_reward_zero_std"]


def build() -> SimpleNamespace:
    ui = SimpleNamespace()
    with gr.Row():
        ui.refresh = gr.Button("↻ Refresh", scale=0, min_width=100)
    ui.table = gr.Dataframe(headers=RUN_HEADERS, interactive=False, wrap=True, elem_id="runs-table")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            ui.overlay_runs = gr.CheckboxGroup([], label="Overlay runs")
            ui.metric = gr.Dropdown(OVERLAY_METRICS, value="reward", label="Metric")
            ui.smoothing = gr.Slider(0, 0.95, value=0.6, step=0.05, label="Smoothing")
        with gr.Column(scale=2):
            ui.overlay = gr.Plot(label="Overlay", show_label=False)
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            ui.run = gr.Dropdown([], label="Run details")
            ui.downloads = gr.File(
                label="Downloads: metrics CSV, config.yaml, rollouts, model zip", file_count="multiple"
            )
        with gr.Column(scale=2):
            ui.command = gr.Code(label="Reproduce from the command line", language="shell", elem_id="run-command")
            ui.config = gr.Code(label="config.yaml", language="yaml")
    return ui
