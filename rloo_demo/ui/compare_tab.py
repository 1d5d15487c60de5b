"""Compare tab: base and trained policy side by side with the same seed, and the held-out evaluation."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.eval.evaluation import format_report
from rloo_demo.i18n import localize_figure, t
from rloo_demo.ui import plots
from rloo_demo.ui.common import L, Page, as_plot, caller_of, error_markdown, guarded
from rloo_demo.ui.views import compare_summary, compare_table, text


def build(page: Page, tab: gr.Tab) -> SimpleNamespace:
    limits = page.controller.limits
    ui = SimpleNamespace()
    with gr.Row():
        ui.run = gr.Dropdown(
            [],
            label=L("compare.run"),
            info=L("compare.run_info"),
            scale=2,
            elem_id="compare-run",
        )
        ui.refresh = gr.Button(L("compare.refresh"), scale=0, min_width=80)
    with gr.Row():
        ui.prompt = gr.Textbox(
            "This movie was",
            label=L("compare.prompt"),
            scale=3,
            elem_id="compare-prompt",
            max_length=limits.max_prompt_chars,
        )
        ui.heldout = gr.Dropdown([], label=L("compare.heldout"), scale=2)
    with gr.Row():
        ui.num_samples = gr.Slider(1, min(16, limits.max_compare_samples), value=4, step=1, label=L("compare.samples"))
        ui.max_new_tokens = gr.Slider(
            4,
            limits.max_compare_tokens,
            value=min(24, limits.max_compare_tokens),
            step=1,
            label=L("common.max_new_tokens"),
        )
        ui.temperature = gr.Slider(0.1, 2.0, value=1.0, step=0.05, label=L("common.temperature"))
        ui.top_p = gr.Slider(0.1, 1.0, value=1.0, step=0.05, label=L("compare.top_p"))
        ui.seed = gr.Number(0, label=L("common.seed"), precision=0, minimum=0)
    ui.sample = gr.Button(L("compare.sample"), variant="primary", elem_id="sample-btn")
    ui.summary = gr.Markdown("", elem_id="compare-summary")
    with gr.Row():
        ui.base = gr.Dataframe(label=L("compare.base"), wrap=True, interactive=False, elem_id="base-samples")
        ui.trained = gr.Dataframe(label=L("compare.trained"), wrap=True, interactive=False, elem_id="trained-samples")
    gr.Markdown(L("compare.eval_intro"))
    with gr.Row():
        ui.eval_prompts = gr.Slider(
            8, min(256, limits.max_eval_prompts), value=32, step=8, label=L("compare.eval_prompts")
        )
        ui.eval_seed = gr.Number(0, label=L("common.seed"), precision=0, minimum=0)
        ui.evaluate = gr.Button(L("compare.evaluate"), elem_id="evaluate-btn")
    with gr.Row(equal_height=False):
        ui.eval_report = gr.Markdown("", elem_id="eval-report")
        ui.eval_plot = gr.Plot(label=L("compare.eval_plot"), show_label=False)
    _wire(ui, page, tab)
    return ui


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.summary: error_markdown(msg, locale)})
    def refresh(name, current, locale="en"):
        names = controller.comparable_runs()
        value = current if current in names else (name if name in names else (names[0] if names else None))
        return {
            ui.run: gr.Dropdown(choices=names, value=value),
            ui.heldout: gr.Dropdown(choices=controller.heldout_choices(value)),
        }

    gr.on(
        [tab.select, ui.refresh.click],
        refresh,
        [page.watched, ui.run, page.locale],
        [ui.run, ui.heldout, ui.summary],
        api_name="compare_refresh",
        api_visibility="private",
    )
    ui.heldout.input(
        lambda p: p if isinstance(p, str) else "",
        ui.heldout,
        ui.prompt,
        api_name="compare_heldout",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.summary: error_markdown(msg, locale), ui.base: None, ui.trained: None})
    def sample(cid, name, prompt, n, max_new, temperature, top_p, seed, locale="en", request: gr.Request = None):
        result = controller.compare(name, prompt, n, max_new, temperature, top_p, seed, caller_of(request, cid))
        headers_base, rows_base = compare_table(result["base"], locale)
        headers_trained, rows_trained = compare_table(result["trained"], locale)
        return {
            ui.summary: compare_summary(result, locale),
            ui.base: gr.Dataframe(value=rows_base, headers=headers_base),
            ui.trained: gr.Dataframe(value=rows_trained, headers=headers_trained),
        }

    ui.sample.click(
        sample,
        [
            page.client_id,
            ui.run,
            ui.prompt,
            ui.num_samples,
            ui.max_new_tokens,
            ui.temperature,
            ui.top_p,
            ui.seed,
            page.locale,
        ],
        [ui.summary, ui.base, ui.trained],
        api_name="compare_sample",
        api_visibility="private",
        concurrency_id="sampling",
        concurrency_limit=1,
    )

    @guarded(controller, lambda msg, locale: {ui.eval_report: error_markdown(msg, locale), ui.eval_plot: None})
    def evaluate(cid, name, n, seed, locale="en", request: gr.Request = None, progress=gr.Progress()):  # noqa: B008

        result = controller.evaluate(
            name,
            n,
            seed,
            caller_of(request, cid),
            progress=lambda done, total: progress(done / total, desc=t(locale, "compare.progress")),
        )
        # the report itself (rloo_demo.eval.evaluation.format_report) is the CLI's, in English
        note = "" if result["saved"] else "\n\n" + t(locale, "compare.not_saved")
        return {
            ui.eval_report: f"<pre>{text(format_report(result))}</pre>{note}",
            ui.eval_plot: as_plot(localize_figure(plots.eval_histogram(result), locale)),
        }

    ui.evaluate.click(
        evaluate,
        [page.client_id, ui.run, ui.eval_prompts, ui.eval_seed, page.locale],
        [ui.eval_report, ui.eval_plot],
        api_name="compare_evaluate",
        api_visibility="private",
        concurrency_id="sampling",
        concurrency_limit=1,
    )
