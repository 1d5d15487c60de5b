"""Train tab: the RunConfig form, Start / Stop, the status line and the live plots."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.hub import EMBEDDED_POLICY
from rloo_demo.ui.forms import BUILTIN_REWARDS, FORM_FIELDS, defaults

REWARD_HELP = (
    "**vader_compound**: lexicon sentiment in [-1, 1] · **sentiment_classifier**: the embedded IMDB classifier, "
    "signed probability · **length_penalty**: −1 for an empty completion, 0 from 12 words on"
)


def build(limits) -> SimpleNamespace:
    d = defaults()
    ui = SimpleNamespace()
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=320):
            with gr.Group():
                ui.policy = gr.Dropdown(
                    [EMBEDDED_POLICY],
                    value=d["policy"],
                    allow_custom_value=True,
                    label="Policy",
                    info="embedded model, local folder or hub id (e.g. sshleifer/tiny-gpt2)",
                    interactive=limits.allow_custom_models,
                )
                ui.rewards = gr.CheckboxGroup(BUILTIN_REWARDS, value=d["rewards"], label="Reward functions")
                with gr.Row():
                    ui.w_vader_compound = gr.Number(d["w_vader_compound"], label="weight: vader", min_width=80)
                    ui.w_sentiment_classifier = gr.Number(
                        d["w_sentiment_classifier"], label="weight: classifier", min_width=80
                    )
                    ui.w_length_penalty = gr.Number(d["w_length_penalty"], label="weight: length", min_width=80)
                with gr.Row():
                    ui.custom_classifier = gr.Textbox(
                        "",
                        label="Extra classifier (optional)",
                        placeholder="hub id or folder of a sentiment model",
                        scale=3,
                        interactive=limits.allow_custom_models,
                    )
                    ui.w_custom = gr.Number(d["w_custom"], label="weight", min_width=80, scale=1)
                gr.Markdown(REWARD_HELP, elem_classes=["rloo-small"])
            with gr.Group():
                with gr.Row():
                    ui.data_source = gr.Textbox(
                        d["data_source"],
                        label="Prompts",
                        info="embedded:imdb, file or hub id",
                        interactive=limits.allow_custom_models,
                    )
                    ui.prompt_template = gr.Radio(
                        ["continuation", "instruction"], value=d["prompt_template"], label="Prompt template"
                    )
                with gr.Row():
                    ui.num_generations = gr.Slider(
                        2, limits.max_k, value=d["num_generations"], step=1, label="K completions per prompt"
                    )
                    ui.prompts_per_step = gr.Slider(
                        1, 16, value=d["prompts_per_step"], step=1, label="Prompts per step"
                    )
                with gr.Row():
                    ui.max_steps = gr.Number(
                        d["max_steps"], label="Steps", precision=0, minimum=1, maximum=limits.max_steps
                    )
                    ui.learning_rate = gr.Number(d["learning_rate"], label="Learning rate")
                    ui.beta = gr.Number(d["beta"], label="β (KL coefficient)", minimum=0)
                with gr.Row():
                    ui.max_new_tokens = gr.Number(
                        d["max_new_tokens"],
                        label="Max new tokens",
                        precision=0,
                        minimum=1,
                        maximum=limits.max_new_tokens,
                    )
                    ui.temperature = gr.Number(d["temperature"], label="Temperature", minimum=0.05)
                    ui.seed = gr.Number(d["seed"], label="Seed", precision=0)
                with gr.Row():
                    ui.normalize_advantages = gr.Checkbox(d["normalize_advantages"], label="Normalize advantages")
                    ui.use_lora = gr.Checkbox(d["use_lora"], label="LoRA adapter (PEFT)")
                    ui.lora_r = gr.Number(d["lora_r"], label="LoRA rank", precision=0, minimum=1, min_width=80)
            ui.form_error = gr.Markdown("", elem_id="form-error", elem_classes=["rloo-error"])
            with gr.Row():
                ui.start = gr.Button("Start", variant="primary", elem_id="start-btn")
                ui.stop = gr.Button("Stop", variant="stop", elem_id="stop-btn")
        with gr.Column(scale=2, min_width=480):
            ui.status = gr.Markdown("No run yet: press **Start** to train with the defaults.", elem_id="run-status")
            ui.run_error = gr.Markdown("", elem_classes=["rloo-error"], elem_id="run-error")
            ui.smoothing = gr.Slider(
                0, 0.95, value=0.6, step=0.05, label="Smoothing", info="exponential moving average, as in TensorBoard"
            )
            ui.reward_plot = gr.Plot(label="Reward", show_label=False, elem_id="reward-plot")
            ui.kl_plot = gr.Plot(label="KL to the reference", show_label=False, elem_id="kl-plot")
            with gr.Row():
                ui.loss_plot = gr.Plot(label="Loss", show_label=False)
                ui.entropy_plot = gr.Plot(label="Entropy", show_label=False)
            with gr.Row():
                ui.length_plot = gr.Plot(label="Completion length", show_label=False)
                ui.zero_std_plot = gr.Plot(label="frac_reward_zero_std", show_label=False)
    ui.form = [getattr(ui, name) for name in FORM_FIELDS]
    ui.plots = [ui.reward_plot, ui.kl_plot, ui.loss_plot, ui.entropy_plot, ui.length_plot, ui.zero_std_plot]
    return ui
