"""Train tab: the RunConfig form, the time estimate, Start / Stop, the status line and the live plots.

``build`` makes the components and wires their events; ``render`` is what a page tick shows of a run.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo import plots
from rloo_demo.hub import EMBEDDED_POLICY
from rloo_demo.ui.common import Page, as_plot, caller_of, error_markdown, guarded
from rloo_demo.ui.controller import RunView
from rloo_demo.ui.forms import BUILTIN_REWARDS, FORM_FIELDS, INSTRUCT_MODELS, PROMPT_TEMPLATES, defaults
from rloo_demo.ui.views import live_collapse_warning, status_line, text

REWARD_HELP = (
    "**vader_compound**: lexicon sentiment in [-1, 1] · **sentiment_classifier**: the embedded IMDB classifier, "
    "signed probability · **length_penalty**: −1 for an empty completion, 0 from 12 words on · "
    "**keyword:&lt;word&gt;**: occurrences of the word, up to 3, scaled to [0, 1] · **length_target:&lt;n&gt;**: 1 at "
    "exactly n words, less the further from n"
)
MODULE_HELP = (
    "Your own function with TRL's signature, `f(prompts, completions, **kwargs) -> list[float]` (None: not "
    "applicable), e.g. `examples/rewards.py:keyword_count`. It runs that file's code in this server."
)
INSTRUCT_NOTE = (
    "embedded model, local folder or hub id. The instruct models in the list use their chat template; they need "
    "the hub (or the HF cache) and a GPU"
)
METER_HELP = """Every N steps the meter samples 4 more batches of K completions for the step's prompts and takes one
backward pass per completion. For each estimator (`rloo`, `grpo`, `dr_grpo`, `reinforce_pp`, `batch_mean`,
`reinforce`) it reports the **variance** of its policy-gradient estimate across the 5 batches (log scale) and its
**cosine** to a reference gradient pooled from the other 4 batches (1 = the same direction). `dr_grpo` is RLOO scaled by
(K−1)/K, so its variance is lower by that factor squared, not because it is better; the cosine does not depend on
scale. The same table for a finished run: `python -m rloo_demo variance --run runs/<name>`."""
ESTIMATE_FIELDS = (
    "num_generations",
    "prompts_per_step",
    "max_steps",
    "max_new_tokens",
    "temperature",
    "variance_every",
)


def build(page: Page) -> SimpleNamespace:
    controller, limits = page.controller, page.controller.limits
    open_models = not limits.public  # a public server trains the embedded (or operator-allowed) models only
    d = defaults()
    ui = SimpleNamespace()
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=320):
            with gr.Group():
                suggested = [EMBEDDED_POLICY, *limits.allowed_models]
                if open_models:  # a local server suggests the instruct models (a public one offers what it allows)
                    suggested += [m for m in INSTRUCT_MODELS if m not in suggested]
                ui.policy = gr.Dropdown(
                    suggested,
                    value=d["policy"],
                    allow_custom_value=open_models,
                    label="Policy",
                    info=INSTRUCT_NOTE if open_models else "models this server offers",
                )
                ui.rewards = gr.CheckboxGroup(BUILTIN_REWARDS, value=d["rewards"], label="Reward functions")
                with gr.Row():
                    ui.w_vader_compound = gr.Number(d["w_vader_compound"], label="weight: vader", min_width=80)
                    ui.w_sentiment_classifier = gr.Number(
                        d["w_sentiment_classifier"], label="weight: classifier", min_width=80
                    )
                    ui.w_length_penalty = gr.Number(d["w_length_penalty"], label="weight: length", min_width=80)
                with gr.Row(visible=open_models or bool(limits.allowed_models)):
                    ui.custom_classifier = gr.Textbox(
                        "",
                        label="Extra classifier (optional)",
                        placeholder="hub id or folder of a sentiment model" if open_models else "an allowed hub id",
                        scale=3,
                    )
                    ui.w_custom = gr.Number(d["w_custom"], label="weight", min_width=80, scale=1)
                with gr.Row():
                    ui.extra_reward = gr.Textbox(
                        d["extra_reward"],
                        label="Keyword or length target (optional)",
                        placeholder="keyword:great or length_target:20",
                        max_length=60,
                        scale=3,
                    )
                    ui.w_extra = gr.Number(d["w_extra"], label="weight", min_width=80, scale=1)
                with gr.Row(visible=open_models):  # a public server runs no code of its visitors
                    ui.reward_module = gr.Textbox(
                        d["reward_module"],
                        label="Reward module (path.py:function)",
                        placeholder="examples/rewards.py:keyword_count",
                        info=MODULE_HELP,
                        interactive=open_models,
                        scale=3,
                        elem_id="reward-module",
                    )
                    ui.w_module = gr.Number(d["w_module"], label="weight", min_width=80, scale=1)
                gr.Markdown(REWARD_HELP, elem_classes=["rloo-small"])
            with gr.Group():
                with gr.Row():
                    ui.data_source = gr.Textbox(
                        d["data_source"],
                        label="Prompts",
                        info="embedded:imdb, file or hub id" if open_models else "embedded:imdb or an allowed dataset",
                        interactive=open_models or bool(limits.allowed_datasets),
                    )
                    ui.prompt_template = gr.Radio(
                        PROMPT_TEMPLATES,
                        value=d["prompt_template"],
                        label="Prompt template",
                        info="auto: chat when the policy has a chat template, else continuation",
                    )
                ui.system_prompt = gr.Textbox(
                    d["system_prompt"],
                    label="System prompt (chat prompts only, optional)",
                    max_length=limits.max_prompt_chars,
                    lines=1,
                )
                with gr.Row():
                    ui.num_generations = gr.Slider(
                        2, limits.max_k, value=d["num_generations"], step=1, label="K completions per prompt"
                    )
                    ui.prompts_per_step = gr.Slider(
                        1,
                        min(16, limits.max_prompts_per_step),
                        value=d["prompts_per_step"],
                        step=1,
                        label="Prompts per step",
                    )
                with gr.Row():
                    ui.max_steps = gr.Number(
                        d["max_steps"], label="Steps", precision=0, minimum=1, maximum=limits.max_steps
                    )
                    ui.learning_rate = gr.Number(d["learning_rate"], label="Learning rate")
                    ui.beta = gr.Number(
                        d["beta"],
                        label="β (KL coefficient)",
                        minimum=0,
                        info="RLOO: in the reward (r − β·KL); GRPO puts it in the loss",
                    )
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
                    ui.lora_r = gr.Number(
                        d["lora_r"], label="LoRA rank", precision=0, minimum=1, maximum=limits.max_lora_r, min_width=80
                    )
                with gr.Row():
                    ui.variance_every = gr.Number(
                        d["variance_every"],
                        label="Gradient-variance meter every N steps (0 = off)",
                        info="each estimator's gradient variance and cosine to a 4× reference, on the run's own "
                        "batches; costs several steps per measurement"
                        + (f"; this server: N ≥ {limits.min_variance_every}" if limits.min_variance_every > 1 else ""),
                        precision=0,
                        minimum=0,
                    )
                with gr.Row(visible=open_models):
                    ui.bf16 = gr.Checkbox(d["bf16"], label="bf16 autocast (GPU)")
                    ui.use_vllm = gr.Checkbox(d["use_vllm"], label="vLLM generation (GPU, needs vllm)")
            ui.estimate = gr.Markdown(controller.estimate(d), elem_id="run-estimate", elem_classes=["rloo-small"])
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
                # the gradient's norm, not the loss: RLOO's surrogate loss is 0 by construction (plots.LOSS_NOTE)
                ui.grad_plot = gr.Plot(label="Gradient norm", show_label=False, elem_id="grad-norm-plot")
                ui.entropy_plot = gr.Plot(label="Entropy", show_label=False)
            with gr.Row():
                ui.length_plot = gr.Plot(label="Completion length", show_label=False)
                ui.zero_std_plot = gr.Plot(label="Groups with no signal", show_label=False, elem_id="zero-signal-plot")
            with gr.Row():
                ui.kl_estimators_plot = gr.Plot(label="KL estimators", show_label=False)
                ui.judges_plot = gr.Plot(label="Judges of the text", show_label=False, elem_id="judges-plot")
            with gr.Accordion("Why leave-one-out? The gradient-variance meter", open=False):
                gr.Markdown(METER_HELP, elem_classes=["rloo-small"])
                ui.variance_plot = gr.Plot(label="Gradient variance", show_label=False, elem_id="variance-plot")
                ui.cosine_plot = gr.Plot(label="Cosine to the reference", show_label=False, elem_id="cosine-plot")
    ui.drawn = gr.State(-1)  # last step drawn in the plots (-1: nothing yet)
    ui.form = [getattr(ui, name) for name in FORM_FIELDS]
    ui.plots = [
        ui.reward_plot,
        ui.kl_plot,
        ui.grad_plot,
        ui.entropy_plot,
        ui.length_plot,
        ui.zero_std_plot,
        ui.kl_estimators_plot,
        ui.judges_plot,
        ui.variance_plot,
        ui.cosine_plot,
    ]
    _wire(ui, page)
    return ui


def figures(records: list[dict], smoothing) -> list:
    smoothing = smoothing if isinstance(smoothing, int | float) and not isinstance(smoothing, bool) else 0.6
    secondary = plots.secondary_figures(records, smoothing)
    figs = [
        plots.reward_figure(records, smoothing),
        plots.kl_figure(records, smoothing),
        secondary["grad_norm"],
        secondary["entropy"],
        secondary["completion_length"],
        secondary["frac_reward_zero_std"],
        plots.kl_estimators_figure(records, smoothing),
        plots.judges_figure(records, smoothing),
        plots.variance_figure(records),
        plots.cosine_figure(records),
    ]
    return [as_plot(f) for f in figs]


def failure_markdown(error: str) -> str:
    """A failed run's error; one with several lines (a reward function's traceback) keeps them, in a block."""
    if "\n" in error.strip():
        return f"**Run failed:**\n\n<pre>{text(error.strip())}</pre>"
    return f"**Run failed:** {text(error)}"


def render(ui: SimpleNamespace, view: RunView, smoothing, last_drawn) -> dict:
    """A tick's update of the Train tab: the status line always, the plots only when a new step arrived."""
    status = status_line(view.status, view.records, view.max_steps, view.elapsed, view.name, view.reason)
    warning = live_collapse_warning(view.records)
    if warning:  # the reward may keep rising while the text collapses: say so beside the numbers
        status += f"<br>**{text(warning)}**"
    out = {
        ui.status: status,
        ui.run_error: failure_markdown(view.error) if view.status == "failed" and view.error else "",
    }
    if view.last_step != last_drawn:
        out.update(zip(ui.plots, figures(view.records, smoothing), strict=True))
        out[ui.drawn] = view.last_step
    return out


def _wire(ui: SimpleNamespace, page: Page) -> None:
    controller = page.controller

    @guarded(controller, lambda msg: {ui.form_error: "**Not started.**\n\n" + msg})
    def start(cid, *values, request: gr.Request = None):
        name = controller.start_from_form(dict(zip(FORM_FIELDS, values, strict=False)), caller_of(request, cid))
        return {page.watched: name, ui.drawn: -1, ui.form_error: ""}

    ui.start.click(
        start,
        [page.client_id, *ui.form],
        [page.watched, ui.drawn, ui.form_error],
        api_name="train_start",
        api_visibility="private",
        concurrency_id="start",
        concurrency_limit=1,
    )

    @guarded(controller, lambda msg: {ui.form_error: error_markdown(msg)})
    def stop(cid, name, request: gr.Request = None):
        return {ui.form_error: text(controller.stop(name, caller_of(request, cid)))}

    ui.stop.click(
        stop, [page.client_id, page.watched], [ui.form_error], api_name="train_stop", api_visibility="private"
    )

    @guarded(controller, lambda msg: {ui.estimate: msg})
    def estimate(*values):
        return {ui.estimate: controller.estimate(dict(zip(FORM_FIELDS, values, strict=False)))}

    gr.on(
        [getattr(ui, name).change for name in ESTIMATE_FIELDS],
        estimate,
        ui.form,
        [ui.estimate],
        api_name="train_estimate",
        api_visibility="private",
        queue=False,
        show_progress="hidden",
    )

    @guarded(controller, lambda msg: {ui.form_error: error_markdown(msg)})
    def redraw(name, smoothing):
        view = controller.view(name)
        return dict(zip(ui.plots, figures(view.records if view else [], smoothing), strict=True))

    ui.smoothing.release(
        redraw,
        [page.watched, ui.smoothing],
        ui.plots + [ui.form_error],
        api_name="train_redraw",
        api_visibility="private",
    )
