"""Compare tab: base and trained policy side by side with the same seed, and the held-out evaluation."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr


def build(limits) -> SimpleNamespace:
    ui = SimpleNamespace()
    with gr.Row():
        ui.run = gr.Dropdown(
            [],
            label="Run",
            info="a finished run, or the one training now (a consistent snapshot)",
            scale=2,
            elem_id="compare-run",
        )
        ui.refresh = gr.Button("↻ runs", scale=0, min_width=80)
    with gr.Row():
        ui.prompt = gr.Textbox("This movie was", label="Prompt", scale=3, elem_id="compare-prompt")
        ui.heldout = gr.Dropdown([], label="…or a held-out prompt", scale=2)
    with gr.Row():
        ui.num_samples = gr.Slider(1, 16, value=4, step=1, label="Samples per model")
        ui.max_new_tokens = gr.Slider(
            4, limits.max_new_tokens, value=min(24, limits.max_new_tokens), step=1, label="Max new tokens"
        )
        ui.temperature = gr.Slider(0.1, 2.0, value=1.0, step=0.05, label="Temperature")
        ui.top_p = gr.Slider(0.1, 1.0, value=1.0, step=0.05, label="Top-p")
        ui.seed = gr.Number(0, label="Seed", precision=0)
    ui.sample = gr.Button("Sample from both", variant="primary", elem_id="sample-btn")
    ui.summary = gr.Markdown("")
    with gr.Row():
        ui.base = gr.Dataframe(label="Base policy", wrap=True, interactive=False, elem_id="base-samples")
        ui.trained = gr.Dataframe(label="Trained policy", wrap=True, interactive=False, elem_id="trained-samples")
    gr.Markdown(
        "#### Held-out evaluation\nBase vs trained over held-out prompts, both sampled with the same seeds; "
        "includes a scorer the run did not train on, so reward hacking shows."
    )
    with gr.Row():
        ui.eval_prompts = gr.Slider(8, 256, value=32, step=8, label="Held-out prompts")
        ui.eval_seed = gr.Number(0, label="Seed", precision=0)
        ui.evaluate = gr.Button("Evaluate", elem_id="evaluate-btn")
    with gr.Row(equal_height=False):
        ui.eval_report = gr.Markdown("")
        ui.eval_plot = gr.Plot(label="Reward distributions", show_label=False)
    return ui
