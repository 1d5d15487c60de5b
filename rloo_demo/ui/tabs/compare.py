"""Compare tab: base and trained policy side by side with the same seed, and the held-out evaluation.

Both are HTML tables the page's CSS lays out (``COMPARE_CSS``, the tab's ``css``): a dataframe
kept its columns at their width and cut the completion, the thing being compared, at the right edge.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.i18n import localize_figure, t
from rloo_demo.ui import plots
from rloo_demo.ui.common import L, Page, Tab, as_plot, caller_of, error_markdown, guarded
from rloo_demo.ui.views.compare import compare_html, compare_summary, eval_report_html

# Numbers on one line, headers broken only between words, each completion whole on a row of its own under its
# numbers; a table wider than its box (many reward functions on a phone) scrolls inside it instead of being cut.
ID, LABEL = "compare", "tab.compare"
COMPARE_CSS = """
.rloo-cmp-box, #eval-report { overflow-x: auto; max-width: 100%; }
.rloo-cmp-head { margin: 4px 0; }
.rloo-cmp th, .rloo-eval th { white-space: normal; word-break: normal; overflow-wrap: normal; hyphens: manual;
  vertical-align: bottom; }
.rloo-cmp td.rloo-num, .rloo-eval td.rloo-num { white-space: nowrap; font-variant-numeric: tabular-nums; }
.rloo-cmp td.rloo-text, .rloo-eval-samples td.rloo-text { white-space: pre-line; overflow-wrap: anywhere;
  text-align: left; vertical-align: top; }
.rloo-eval-samples td.rloo-prompt-cell, .rloo-eval-samples td.rloo-side { text-align: left; }
.rloo-eval-samples td.rloo-side { white-space: nowrap; vertical-align: top; opacity: 0.8; }
.rloo-eval-samples td.rloo-text { width: 100%; }
.rloo-eval th:first-child { text-align: left; }
.rloo-cmp td[rowspan] { vertical-align: top; text-align: left; }
.rloo-cmp tbody, .rloo-eval-samples tbody { border-top: 2px solid rgba(128, 128, 128, 0.35); }
.rloo-eval { width: auto; min-width: 60%; }
.rloo-eval td.rloo-text { text-align: left; overflow-wrap: break-word; }
.rloo-eval caption, .rloo-eval-samples caption { caption-side: top; text-align: left; font-size: 0.9em;
  opacity: 0.85; padding: 2px 0; }
.rloo-eval-samples { margin-top: 10px; }
@media (max-width: 700px) {
  #compare-tables, #eval-row { flex-direction: column; }
  #compare-tables > *, #eval-row > * { width: 100%; min-width: 0 !important; }
  .rloo-eval th, .rloo-eval td { padding: 3px 3px; }
  /* four columns in a phone's width, in Georgian too (its interval column was 8 px too wide at 0.82em): smaller,
     and the box's own side padding given to them */
  .rloo-eval { font-size: 0.78em; }
  #eval-report .html-container { padding-left: 0; padding-right: 0; }
}
"""


# The names ``Limits.sampling_request`` and ``eval_request`` refuse a value by -> the text keys of the labels of
# the boxes it came from: a refusal names the box the page shows (the events take raw values, so gradio's own range
# check never answers with a bare toast).
SAMPLE_LABELS = {
    "number of samples": "compare.samples",
    "max new tokens": "common.max_new_tokens",
    "temperature": "common.temperature",
    "top-p": "compare.top_p",
    "seed": "common.seed",
    "prompt": "compare.prompt",
}
EVAL_LABELS = {"number of held-out prompts": "compare.eval_prompts", "seed": "common.seed"}


CSS = COMPARE_CSS  # the tab's own CSS (``Tab.css``), which ``ui.app`` adds to the page's


def build(page: Page) -> Tab:
    with gr.Tab(L(LABEL), id=ID) as element:
        ui = _components(page)
    _wire(ui, page, element)
    return Tab(
        id=ID,
        label_key=LABEL,
        element=element,
        ui=ui,
        error=ui.summary,
        css=CSS,
        relocalize_inputs=[ui.result, ui.eval_result],
        relocalize_outputs=[ui.result, ui.summary, ui.base, ui.trained, ui.eval_report, ui.eval_plot],
        # a dict with a key is read as updates: the state is sent back as it is
        relocalize=lambda moment, result, evaluation: (
            {ui.result: result} | relocalized(ui, result, evaluation, moment.locale)
        ),
    )


def _components(page: Page) -> SimpleNamespace:
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
            elem_id="compare-prompt",  # no max_length: the browser cut a pasted prompt without a word; the
        )  # server refuses one past ``limits.max_prompt_chars`` with the limit named
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
    # the last answers, so a language switch writes the tables again in the new language (``ui.app``)
    ui.result, ui.eval_result = gr.State(None), gr.State(None)
    ui.summary = gr.Markdown("", elem_id="compare-summary")
    with gr.Row(equal_height=False, elem_id="compare-tables"):
        # side by side on a desktop; on a phone they stack (COMPARE_CSS), so each completion has the screen's width
        ui.base = gr.HTML("", elem_id="base-samples")
        ui.trained = gr.HTML("", elem_id="trained-samples")
    gr.Markdown(L("compare.eval_intro"))
    with gr.Row():
        ui.eval_prompts = gr.Slider(
            8, min(256, limits.max_eval_prompts), value=32, step=8, label=L("compare.eval_prompts")
        )
        ui.eval_seed = gr.Number(0, label=L("common.seed"), precision=0, minimum=0)
        ui.evaluate = gr.Button(L("compare.evaluate"), elem_id="evaluate-btn")
    with gr.Row(equal_height=False, elem_id="eval-row"):
        ui.eval_report = gr.HTML("", elem_id="eval-report")
        ui.eval_plot = gr.Plot(label=L("compare.eval_plot"), show_label=False)
    return ui


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.summary: error_markdown(msg, locale)})
    def refresh(watched, current, locale="en"):
        # the run picked stays picked; otherwise the newest (the one training now, else the latest on disk), not
        # the run the page watches: a page that opened an old run in Rollouts still compares the newest by default
        choices = controller.comparable_choices()
        names = [n for _, n in choices]
        value = current if current in names else (names[0] if names else None)
        return {
            ui.run: gr.Dropdown(choices=choices, value=value),
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

    @guarded(
        controller,
        lambda msg, locale: {ui.summary: error_markdown(msg, locale), ui.base: "", ui.trained: "", ui.result: None},
        SAMPLE_LABELS,
    )
    def sample(cid, name, prompt, n, max_new, temperature, top_p, seed, locale="en", request: gr.Request = None):
        result = controller.compare(name, prompt, n, max_new, temperature, top_p, seed, caller_of(request, cid))
        return {ui.result: result, **samples_shown(ui, result, locale)}

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
        [ui.summary, ui.base, ui.trained, ui.result],
        api_name="compare_sample",
        api_visibility="private",
        concurrency_id="sampling",
        concurrency_limit=1,
        preprocess=False,  # raw values: a value past a slider is refused by its label, not by gradio's toast
    )

    @guarded(
        controller,
        lambda msg, locale: {ui.eval_report: _error_html(msg, locale), ui.eval_plot: None, ui.eval_result: None},
        EVAL_LABELS,
    )
    def evaluate(cid, name, n, seed, locale="en", request: gr.Request = None, progress=gr.Progress()):  # noqa: B008

        result = controller.evaluate(
            name,
            n,
            seed,
            caller_of(request, cid),
            progress=lambda done, total: progress(done / total, desc=t(locale, "compare.progress")),
        )
        return {ui.eval_result: result, **evaluation_shown(ui, result, locale)}

    ui.evaluate.click(
        evaluate,
        [page.client_id, ui.run, ui.eval_prompts, ui.eval_seed, page.locale],
        [ui.eval_report, ui.eval_plot, ui.eval_result],
        api_name="compare_evaluate",
        api_visibility="private",
        concurrency_id="sampling",
        concurrency_limit=1,
        preprocess=False,  # raw values, as the samples'
    )


def samples_shown(ui: SimpleNamespace, result: dict, locale: str) -> dict:
    """The summary and both tables of one Compare answer, in ``locale``."""
    return {
        ui.summary: compare_summary(result, locale),
        ui.base: compare_html(result["base"], t(locale, "compare.base"), locale),
        ui.trained: compare_html(result["trained"], t(locale, "compare.trained"), locale),
    }


def evaluation_shown(ui: SimpleNamespace, result: dict, locale: str) -> dict:
    """The report and the histogram of one evaluation, in ``locale``."""
    note = "" if result.get("saved") else f"<p class='rloo-small'>{t(locale, 'compare.not_saved')}</p>"
    return {
        ui.eval_report: eval_report_html(result, locale) + note,
        ui.eval_plot: as_plot(localize_figure(plots.eval_histogram(result), locale)),
    }


def relocalized(ui: SimpleNamespace, result, evaluation, locale: str) -> dict:
    """What the tab shows, written again in ``locale`` from its last answers (a language switch): nothing where
    there is no answer yet, so an error on screen stays as it is."""
    out = samples_shown(ui, result, locale) if isinstance(result, dict) else {}
    return out | (evaluation_shown(ui, evaluation, locale) if isinstance(evaluation, dict) else {})


def _error_html(message: str, locale: str) -> str:
    """An error in the report's HTML box (the message is already inert: ``public.redaction``)."""
    head = t(locale, "common.error").strip("*")
    return f"<div class='rloo-error'><p><b>{head}</b> {message}</p></div>"
