"""Train tab: the RunConfig form, the time estimate, Start / Stop, the status line and the live plots.

``build`` makes the components and wires their events; ``render`` is what a page tick shows of a run.

No number box of the form has a ``minimum`` or ``maximum`` and the events read the values raw (``preprocess=False``):
gradio's own range check answers a value past it with a bare toast that names no field (an HTTP 500, a traceback in
the server log), and a slider's box quietly sets a value past its end to the end (K = 1000 became 64). The
controller checks every value against this server's limits instead, and a refusal names each field by its label.
"""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import gradio as gr

from rloo_demo import i18n
from rloo_demo.errors import ConfigError, Waiting
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.server.cache import LRU, BuildAllowance
from rloo_demo.server.readers import RunView
from rloo_demo.ui import plots
from rloo_demo.ui.common import L, Page, as_plot, caller_of, error_markdown, guarded
from rloo_demo.ui.forms import (
    BUILTIN_REWARDS,
    FIELD,
    FORM_FIELDS,
    INSTRUCT_MODELS,
    PROMPT_TEMPLATES,
    defaults,
    form_settings,
    labelled_problems,
)
from rloo_demo.ui.plots.thin import thinned
from rloo_demo.ui.plots.train import mark_steps
from rloo_demo.ui.views import status_line, text
from rloo_demo.ui.views.train import alerts_html, failure_markdown, phase_line, run_alerts, summary_markdown

# The callout and the summary; app.py adds this to the page's CSS.
TRAIN_CSS = """
.rloo-callouts { display: flex; flex-direction: column; gap: 6px; margin: 4px 0; }
.rloo-callout { display: flex; gap: 10px; align-items: flex-start; padding: 8px 12px; border-radius: 6px;
  border: 1px solid #E8A33D; border-left: 6px solid #E8A33D; background: rgba(232, 163, 61, 0.14); }
.rloo-callout-icon { font-size: 1.3em; line-height: 1.2; color: #C47F17; }
#run-summary table { width: auto; }
#run-summary td:nth-child(2) { white-space: nowrap; font-variant-numeric: tabular-nums; }
"""
# The "What am I looking at?" note under each plot: its text key, by the plot's attribute on the tab
PLOT_NOTES = {
    "reward_plot": "train.note_reward",
    "kl_plot": "train.note_kl",
    "grad_plot": "train.note_grad",
    "entropy_plot": "train.note_entropy",
    "length_plot": "train.note_length",
    "zero_std_plot": "train.note_zero",
    "kl_estimators_plot": "train.note_kl_estimators",
    "judges_plot": "train.note_judges",
    "variance_plot": "train.note_variance",
    "cosine_plot": "train.note_cosine",
}

ESTIMATE_FIELDS = ("num_generations", "prompts_per_step", "max_steps", "max_new_tokens", "temperature")
ESTIMATE_FIELDS += ("variance_every",)


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
        ui.alerts = gr.HTML("", elem_id="train-alerts")  # the warnings, as a callout (views.train.alerts_html)
        # the step the first warning fired at, and a button that opens it on the Rollouts tab (``rollouts_tab``)
        ui.alert_step, ui.alert_open = gr.State(None), gr.Button("", visible=False, size="sm", elem_id="alert-open")
        ui.alert_link = [ui.alert_step, ui.alert_open]
    ui.summary = gr.Markdown("", elem_id="run-summary")  # an ended run's summary (store.summary)
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
                # number boxes, not sliders: a slider's box sets a value past its end to the end without a word
                with gr.Row():
                    ui.num_generations = gr.Number(
                        d["num_generations"], label=label("num_generations"), precision=0, elem_id="k-input"
                    )
                    ui.prompts_per_step = gr.Number(d["prompts_per_step"], label=label("prompts_per_step"), precision=0)
                with gr.Row():
                    ui.max_steps = gr.Number(
                        d["max_steps"], label=label("max_steps"), precision=0, elem_id="steps-input"
                    )
                    ui.learning_rate = gr.Number(d["learning_rate"], label=label("learning_rate"))
                    ui.beta = gr.Number(d["beta"], label=label("beta"), info=L("train.beta_info"))
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
                    ui.max_new_tokens = gr.Number(d["max_new_tokens"], label=label("max_new_tokens"), precision=0)
                    ui.temperature = gr.Number(d["temperature"], label=label("temperature"))
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
                    ui.lora_r = gr.Number(d["lora_r"], label=label("lora_r"), precision=0, min_width=80)
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
            _plot(ui, "reward_plot", "train.plot_reward", "reward-plot")
            _plot(ui, "kl_plot", "train.plot_kl", "kl-plot")
            with gr.Row(equal_height=False):
                # the gradient's norm, not the loss: RLOO's surrogate loss is 0 by construction (plots.LOSS_NOTE)
                _plot(ui, "grad_plot", "train.plot_grad", "grad-norm-plot")
                _plot(ui, "entropy_plot", "train.plot_entropy", "entropy-plot")
            with gr.Row(equal_height=False):
                _plot(ui, "length_plot", "train.plot_length", "length-plot")
                _plot(ui, "zero_std_plot", "train.plot_zero", "zero-signal-plot")
            with gr.Row(equal_height=False):
                _plot(ui, "kl_estimators_plot", "train.plot_kl_estimators", "kl-estimators-plot")
                _plot(ui, "judges_plot", "train.plot_judges", "judges-plot")
            with gr.Accordion(L("train.meter_accordion"), open=False):
                gr.Markdown(L("train.meter_help"), elem_classes=["rloo-small"])
                _plot(ui, "variance_plot", "train.plot_variance", "variance-plot")
                _plot(ui, "cosine_plot", "train.plot_cosine", "cosine-plot")
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
    # what a page tick updates on this tab (app._wire_tick's outputs)
    ui.tick_outputs = [ui.status, ui.run_error, *ui.plots, ui.drawn, ui.start, ui.alerts, ui.summary, *ui.alert_link]
    ui.controller = page.controller
    _wire(ui, page)
    return ui


def _plot(ui: SimpleNamespace, attr: str, label: str, elem_id: str) -> None:
    """A plot and, under it, its "What am I looking at?" note: what it shows, what healthy looks like, what not."""
    with gr.Column(min_width=300):
        setattr(ui, attr, gr.Plot(label=L(label), show_label=False, elem_id=elem_id))
        with gr.Accordion(L("common.what"), open=False, elem_classes=["rloo-plot-note"]):
            gr.Markdown(L(PLOT_NOTES[attr]), elem_classes=["rloo-small"], elem_id=f"{elem_id}-note")


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
    figs = [i18n.localize_figure(f, locale) for f in figs]
    # where a warning fired, on the reward and KL plots (the curves a learner watches)
    marks = [(a["step"], i18n.t(locale, f"alert.{a['kind']}_title")) for a in run_alerts(records, locale)]
    if marks:
        mark_steps(figs[0], marks)
        mark_steps(figs[1], marks)
    return [as_plot(thinned(f)) for f in figs]  # a long run's traces cut to plots.thin.MAX_POINTS points


# The plots of a run are built once per new step, not once per page: ten pages watching a 300-step run rebuilt
# tens of ms of figures each, every tick (a client that sends drawn=-1 gets all of them each time), and that pure
# Python held the GIL the training thread next door needs between its torch ops (measured with
# scripts/bench_load.py). Keyed by the run, its last record and the page's smoothing and language.
_FIGURES = LRU(96)  # 20 smoothings x 4 languages of one step fit
_FIGURES_LOCK = threading.Lock()
# ... and at most 3 builds a step (a finished run: every 10 s) besides the default smoothing's, whatever the keys
# asked for: a client cycling the smoothing with fresh sessions forced 20 builds of ~20 ms at every 0.2 s step
# (scripts/bench_load.py --readers).
_BUILDS = BuildAllowance(builds=3, window=10.0)


def shared_figures(view: RunView, smoothing, locale: str = "en") -> list | None:
    """``figures`` of a run's records, shared by every page that shows the same step with the same settings;
    ``None`` when they are not built yet and this step's builds are spent (``_BUILDS``): ask again at the next."""
    number = isinstance(smoothing, int | float) and not isinstance(smoothing, bool) and math.isfinite(smoothing)
    # to the slider's own values (0 to 0.95 by 0.05): a client sending any other number cannot force a new build
    smoothing = round(min(max(smoothing, 0.0), 0.95) * 20) / 20 if number else None  # None: figures' default
    locale = i18n.normalize(locale)  # likewise one of the four languages, whatever the client sends
    last = view.records[-1] if view.records else {}
    key = (view.name, len(view.records), last.get("step"), last.get("logged_at"), smoothing, locale)
    with _FIGURES_LOCK:
        built = _FIGURES.get_fresh(key)
        # the slider's default always: a client spending the allowance first cannot keep plots from the others
        allowed = built is not None or smoothing in (None, 0.6) or _BUILDS.take(key[:4], time.monotonic())
    if not allowed:
        return None
    if built is None:
        built = figures(view.records, smoothing, locale)
        with _FIGURES_LOCK:
            _FIGURES.put(key, built)
    return built


_TEXTS = LRU(256)  # (run, records, last record, status, live, language) -> (alerts html, summary markdown, first step)


def _alerts_and_summary(ui: SimpleNamespace, view: RunView, locale: str) -> tuple[str, str, int | None]:
    """The callout, the end-of-run summary and the step of the first warning (None: none) of a run, built once per
    new step or status (like the figures)."""
    last = view.records[-1] if view.records else {}
    # ``live`` too: a run says "finished" a moment before its thread ends and it leaves the runner; the summary is
    # read only once it has (``Controller.run_summary``), so the ended run's texts are built again then
    key = (view.name, len(view.records), last.get("step"), last.get("logged_at"), view.status, view.live, locale)
    with _FIGURES_LOCK:
        built = _TEXTS.get_fresh(key)
    if built is None:
        ended = ui.controller.run_summary(view.name, locale)  # None while it trains; saved as summary.json
        alerts = ended[1] if ended else run_alerts(view.records, locale)
        first = alerts[0]["step"] if alerts else None
        built = (alerts_html(alerts, locale), summary_markdown(ended[0], alerts, locale) if ended else "", first)
        with _FIGURES_LOCK:
            _TEXTS.put(key, built)
    return built


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
    built = shared_figures(view, smoothing, locale) if view.last_step != last_drawn else None
    if built is not None:  # None: drawn stays, so the next tick asks again
        out.update(zip(ui.plots, built, strict=True))
        out[ui.drawn] = view.last_step
    return out


def refusal_text(controller, exc: BaseException, values, locale: str = "en") -> str:
    """Why the form's settings were refused, one line per field, each named by its label in the page's language
    (``forms.labelled_problems``) rather than by RunConfig's key; anything else as the controller words it."""
    if isinstance(exc, ConfigError) and isinstance(values, dict):
        rows = labelled_problems(exc.problems, values, locale)
        return controller.redact("\n".join(f"- **{text(label)}**: {text(message)}" for label, message in rows))
    return controller.error_text(exc)


def _wire(ui: SimpleNamespace, page: Page) -> None:
    controller = page.controller

    # the refusal's frame in the page's language (the locale is the last input: the state set on load)
    def not_started(msg, locale):
        return {ui.form_error: i18n.t(locale, "train.not_started") + "\n\n" + msg}

    def start(cid, *values, request: gr.Request = None):
        *values, locale = values
        locale = i18n.normalize(locale)
        caller = caller_of(request, cid)
        form = dict(zip(FORM_FIELDS, values, strict=False))
        try:
            name = controller.start_from_form(form, caller)
        except Waiting as exc:  # not a refusal: a place in the line, shown where the run's status will be
            return {ui.form_error: "", ui.status: text(controller.line_text(exc.place, locale))}
        except Exception as exc:  # as guarded does, with the page's language for the frame and the labels
            return not_started(refusal_text(controller, exc, form, locale), locale)
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
        locale = i18n.normalize(locale)
        form = dict(zip(FORM_FIELDS, values, strict=False))
        try:  # a refusal names the fields by their labels, as Start's does
            controller.parse_settings(form_settings(form))
        except Exception as exc:
            return {ui.estimate: refusal_text(controller, exc, form, locale)}
        return {ui.estimate: controller.estimate(form, locale)}

    gr.on(
        [getattr(ui, name).change for name in ESTIMATE_FIELDS],
        estimate,
        [*ui.form, page.locale],
        [ui.estimate],
        api_name="train_estimate",
        api_visibility="private",
        queue=False,
        show_progress="hidden",
        preprocess=False,  # raw values, as Start's
    )

    @guarded(controller, lambda msg, locale: {ui.form_error: error_markdown(msg, locale)})
    def redraw(name, smoothing, locale="en"):
        view = controller.view(name)  # through the shared builds: any client may send this event, with any value
        built = shared_figures(view, smoothing, locale) if view is not None else figures([], None, locale)
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
