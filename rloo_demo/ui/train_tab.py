"""Train tab: the RunConfig form, the time estimate, Start / Stop, the status line and the live plots.

``build`` makes the components and wires their events; ``render`` is what a page tick shows of a run.
"""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace

import gradio as gr

from rloo_demo import i18n
from rloo_demo.errors import Waiting
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.server.cache import LRU
from rloo_demo.server.readers import RunView
from rloo_demo.ui import plots
from rloo_demo.ui.common import L, Page, as_plot, caller_of, error_markdown, guarded
from rloo_demo.ui.forms import BUILTIN_REWARDS, FIELD, FORM_FIELDS, INSTRUCT_MODELS, PROMPT_TEMPLATES, defaults
from rloo_demo.ui.views import live_collapse_warning, status_line, text

ESTIMATE_FIELDS = (
    "num_generations",
    "prompts_per_step",
    "max_steps",
    "max_new_tokens",
    "temperature",
    "variance_every",
)


def build(page: Page) -> SimpleNamespace:
    limits = page.controller.limits
    open_models = not limits.public  # a public server trains the embedded (or operator-allowed) models only
    d = defaults()
    ui = SimpleNamespace()

    def label(name: str):
        return L(FIELD[name].label)

    # The action bar first, sticky: Start is in sight on a fresh page and while the run trains, whatever the form.
    with gr.Group(elem_id="action-bar"):
        with gr.Row(equal_height=True):
            ui.start = gr.Button(L("train.start"), variant="primary", elem_id="start-btn", scale=0, min_width=110)
            ui.stop = gr.Button(L("train.stop"), variant="stop", elem_id="stop-btn", scale=0, min_width=90)
            with gr.Column(scale=5, min_width=200):
                ui.status = gr.Markdown(L("train.no_run"), elem_id="run-status")
                ui.estimate = gr.Markdown("", elem_id="run-estimate", elem_classes=["rloo-small"])  # written on load
        ui.form_error = gr.Markdown("", elem_id="form-error", elem_classes=["rloo-error"])
        ui.run_error = gr.Markdown("", elem_classes=["rloo-error"], elem_id="run-error")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=320):
            # the settings that change what a run teaches, in sight
            with gr.Group():
                suggested = [EMBEDDED_POLICY, *limits.allowed_models]
                if open_models:  # a local server suggests the instruct models (a public one offers what it allows)
                    suggested += [m for m in INSTRUCT_MODELS if m not in suggested]
                ui.policy = gr.Dropdown(
                    suggested,
                    value=d["policy"],
                    allow_custom_value=open_models,
                    label=label("policy"),
                    info=L("train.policy_info_open" if open_models else "train.policy_info_public"),
                )
                ui.rewards = gr.CheckboxGroup(BUILTIN_REWARDS, value=d["rewards"], label=label("rewards"))
                with gr.Row():
                    for name in ("w_vader_compound", "w_sentiment_classifier", "w_length_penalty"):
                        setattr(ui, name, gr.Number(d[name], label=label(name), min_width=80))
                # one slider a line: beside each other their labels would break mid-word
                ui.num_generations = gr.Slider(
                    2, limits.max_k, value=d["num_generations"], step=1, label=label("num_generations")
                )
                ui.prompts_per_step = gr.Slider(
                    1,
                    min(16, limits.max_prompts_per_step),
                    value=d["prompts_per_step"],
                    step=1,
                    label=label("prompts_per_step"),
                )
                with gr.Row():
                    ui.max_steps = gr.Number(
                        d["max_steps"], label=label("max_steps"), precision=0, minimum=1, maximum=limits.max_steps
                    )
                    ui.learning_rate = gr.Number(d["learning_rate"], label=label("learning_rate"))
                    ui.beta = gr.Number(d["beta"], label=label("beta"), minimum=0, info=L("train.beta_info"))
            with gr.Accordion(L("train.fold_sampling"), open=False, elem_id="fold-sampling"):
                ui.data_source = gr.Textbox(
                    d["data_source"],
                    label=label("data_source"),
                    info=L("train.prompts_info_open" if open_models else "train.prompts_info_public"),
                    interactive=open_models or bool(limits.allowed_datasets),
                )
                ui.prompt_template = gr.Radio(
                    PROMPT_TEMPLATES,
                    value=d["prompt_template"],
                    label=label("prompt_template"),
                    info=L("train.template_info"),
                )
                ui.system_prompt = gr.Textbox(
                    d["system_prompt"], label=label("system_prompt"), max_length=limits.max_prompt_chars, lines=1
                )
                with gr.Row():
                    ui.max_new_tokens = gr.Number(
                        d["max_new_tokens"],
                        label=label("max_new_tokens"),
                        precision=0,
                        minimum=1,
                        maximum=limits.max_new_tokens,
                    )
                    ui.temperature = gr.Number(d["temperature"], label=label("temperature"), minimum=0.05)
                    ui.seed = gr.Number(d["seed"], label=label("seed"), precision=0)
            with gr.Accordion(L("train.fold_own_rewards"), open=False, elem_id="fold-own-rewards"):
                with gr.Row(visible=open_models or bool(limits.allowed_models)):
                    ui.custom_classifier = gr.Textbox(
                        d["custom_classifier"],
                        label=label("custom_classifier"),
                        placeholder=L(f"train.custom_classifier_ph_{'open' if open_models else 'public'}"),
                        scale=3,
                    )
                    ui.w_custom = gr.Number(d["w_custom"], label=label("w_custom"), min_width=80, scale=1)
                with gr.Row():
                    ui.extra_reward = gr.Textbox(
                        d["extra_reward"],
                        label=label("extra_reward"),
                        placeholder=L("train.extra_reward_ph"),
                        max_length=60,
                        scale=3,
                    )
                    ui.w_extra = gr.Number(d["w_extra"], label=label("w_extra"), min_width=80, scale=1)
                with gr.Row(visible=open_models):  # a public server runs no code of its visitors
                    ui.reward_module = gr.Textbox(
                        d["reward_module"],
                        label=label("reward_module"),
                        placeholder="examples/rewards.py:keyword_count",
                        info=L("train.module_help"),
                        interactive=open_models,
                        scale=3,
                        elem_id="reward-module",
                    )
                    ui.w_module = gr.Number(d["w_module"], label=label("w_module"), min_width=80, scale=1)
                ui.reward_offset = gr.Number(
                    d["reward_offset"], label=label("reward_offset"), info=L("train.reward_offset_info")
                )
                gr.Markdown(L("train.reward_help"), elem_classes=["rloo-small"])
            with gr.Accordion(L("train.fold_lora"), open=False, elem_id="fold-lora"):
                with gr.Row():
                    ui.normalize_advantages = gr.Checkbox(
                        d["normalize_advantages"], label=label("normalize_advantages")
                    )
                    ui.use_lora = gr.Checkbox(d["use_lora"], label=label("use_lora"))
                    ui.lora_r = gr.Number(
                        d["lora_r"],
                        label=label("lora_r"),
                        precision=0,
                        minimum=1,
                        maximum=limits.max_lora_r,
                        min_width=80,
                    )
                with gr.Row(visible=open_models):
                    ui.bf16 = gr.Checkbox(d["bf16"], label=label("bf16"))
                    ui.use_vllm = gr.Checkbox(d["use_vllm"], label=label("use_vllm"))
            with gr.Accordion(L("train.fold_diagnostics"), open=False, elem_id="fold-diagnostics"):
                ui.variance_every = gr.Number(
                    d["variance_every"],
                    label=label("variance_every"),
                    # the limit is filled into the translations when the app is built (app.launch_options)
                    info=L("train.variance_info_min" if limits.min_variance_every > 1 else "train.variance_info"),
                    precision=0,
                    minimum=0,
                )
            ui.defaults = d
        with gr.Column(scale=2, min_width=480):
            ui.smoothing = gr.Slider(
                0,
                0.95,
                value=0.6,
                step=0.05,
                label=L("common.smoothing"),
                info=L("common.smoothing_info"),
            )
            # no value here: on load, a page with no run gets titled empty axes in its language (app.on_load)
            ui.reward_plot = gr.Plot(label=L("train.plot_reward"), show_label=False, elem_id="reward-plot")
            ui.kl_plot = gr.Plot(label=L("train.plot_kl"), show_label=False, elem_id="kl-plot")
            with gr.Row():
                # the gradient's norm, not the loss: RLOO's surrogate loss is 0 by construction (plots.LOSS_NOTE)
                ui.grad_plot = gr.Plot(label=L("train.plot_grad"), show_label=False, elem_id="grad-norm-plot")
                ui.entropy_plot = gr.Plot(label=L("train.plot_entropy"), show_label=False)
            with gr.Row():
                ui.length_plot = gr.Plot(label=L("train.plot_length"), show_label=False)
                ui.zero_std_plot = gr.Plot(label=L("train.plot_zero"), show_label=False, elem_id="zero-signal-plot")
            with gr.Row():
                ui.kl_estimators_plot = gr.Plot(label=L("train.plot_kl_estimators"), show_label=False)
                ui.judges_plot = gr.Plot(label=L("train.plot_judges"), show_label=False, elem_id="judges-plot")
            with gr.Accordion(L("train.meter_accordion"), open=False):
                gr.Markdown(L("train.meter_help"), elem_classes=["rloo-small"])
                ui.variance_plot = gr.Plot(label=L("train.plot_variance"), show_label=False, elem_id="variance-plot")
                ui.cosine_plot = gr.Plot(label=L("train.plot_cosine"), show_label=False, elem_id="cosine-plot")
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


def idle_status(locale: str = "en") -> str:
    """The status line before any run, in the page's language (written on load)."""
    return i18n.t(locale, "train.no_run")


def figures(records: list[dict], smoothing, locale: str = "en") -> list:
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
    return [as_plot(i18n.localize_figure(f, locale)) for f in figs]


# The plots of a run are built once per new step, not once per page: ten pages watching a 300-step run rebuilt
# tens of ms of figures each, every tick (a client that sends drawn=-1 gets all of them each time), and that pure
# Python held the GIL the training thread next door needs between its torch ops (measured with
# scripts/bench_load.py). Keyed by the run, its last record and the page's smoothing and language.
_FIGURES = LRU(96)  # 20 smoothings x 4 languages of one step fit
_FIGURES_LOCK = threading.Lock()


def shared_figures(view: RunView, smoothing, locale: str = "en") -> list:
    """``figures`` of a run's records, shared by every page that shows the same step with the same settings."""
    number = isinstance(smoothing, int | float) and not isinstance(smoothing, bool) and math.isfinite(smoothing)
    # to the slider's own values (0 to 0.95 by 0.05): a client sending any other number cannot force a new build
    smoothing = round(min(max(smoothing, 0.0), 0.95) * 20) / 20 if number else None  # None: figures' default
    locale = i18n.normalize(locale)  # likewise one of the four languages, whatever the client sends
    last = view.records[-1] if view.records else {}
    key = (view.name, len(view.records), last.get("step"), last.get("logged_at"), smoothing, locale)
    with _FIGURES_LOCK:
        built = _FIGURES.get_fresh(key)
    if built is None:
        built = figures(view.records, smoothing, locale)
        with _FIGURES_LOCK:
            _FIGURES.put(key, built)
    return built


def failure_markdown(error: str, locale: str = "en") -> str:
    """A failed run's error; one with several lines (a reward function's traceback) keeps them, in a block. The
    frame is in the page's language, the error as the engine wrote it."""
    head = i18n.t(locale, "train.run_failed")
    if "\n" in error.strip():
        return f"{head}\n\n<pre>{text(error.strip())}</pre>"
    return f"{head} {text(error)}"


def render(ui: SimpleNamespace, view: RunView, smoothing, last_drawn, locale: str = "en") -> dict:
    """A tick's update of the Train tab: the status line always, the plots only when a new step arrived."""
    status = status_line(view.status, view.records, view.max_steps, view.elapsed, view.name, view.reason, locale)
    warning = live_collapse_warning(view.records, locale)
    if warning:  # the reward may keep rising while the text collapses: say so beside the numbers
        status += f"<br>**{text(warning)}**"
    out = {
        ui.status: status,
        ui.run_error: failure_markdown(view.error, locale) if view.status == "failed" and view.error else "",
    }
    if view.last_step != last_drawn:
        out.update(zip(ui.plots, shared_figures(view, smoothing, locale), strict=True))
        out[ui.drawn] = view.last_step
    return out


def _wire(ui: SimpleNamespace, page: Page) -> None:
    controller = page.controller

    # the refusal's frame in the page's language (the locale is the last input: the state set on load)
    def not_started(msg, locale):
        return {ui.form_error: i18n.t(locale, "train.not_started") + "\n\n" + msg}

    def start(cid, *values, request: gr.Request = None):
        *values, locale = values
        caller = caller_of(request, cid)
        try:
            name = controller.start_from_form(dict(zip(FORM_FIELDS, values, strict=False)), caller)
        except Waiting as exc:  # not a refusal: a place in the line, shown where the run's status will be
            return {ui.form_error: "", ui.status: text(controller.line_text(exc.place, locale))}
        except Exception as exc:  # as guarded does, with the page's language for the frame
            return not_started(controller.error_text(exc), locale)
        return {page.watched: name, ui.drawn: -1, ui.form_error: ""}

    ui.start.click(
        start,
        [page.client_id, *ui.form, page.locale],
        [page.watched, ui.drawn, ui.form_error, ui.status],
        api_name="train_start",
        api_visibility="private",
        concurrency_id="start",
        concurrency_limit=1,
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
        return {ui.estimate: controller.estimate(dict(zip(FORM_FIELDS, values, strict=False)), locale)}

    gr.on(
        [getattr(ui, name).change for name in ESTIMATE_FIELDS],
        estimate,
        [*ui.form, page.locale],
        [ui.estimate],
        api_name="train_estimate",
        api_visibility="private",
        queue=False,
        show_progress="hidden",
    )

    @guarded(controller, lambda msg, locale: {ui.form_error: error_markdown(msg, locale)})
    def redraw(name, smoothing, locale="en"):
        view = controller.view(name)  # through the shared builds: any client may send this event, with any value
        built = shared_figures(view, smoothing, locale) if view is not None else figures([], None, locale)
        return dict(zip(ui.plots, built, strict=True))

    ui.smoothing.release(
        redraw,
        [page.watched, ui.smoothing, page.locale],
        ui.plots + [ui.form_error],
        api_name="train_redraw",
        api_visibility="private",
    )
