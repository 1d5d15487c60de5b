"""The estimator lab's exact toy, a panel of the Rollouts tab: sliders for η, K and the offset, each estimator's exact
variance against K and a table of its mean and bias (``rloo_demo.toy``: no sampling, no run needed).

The toy is pure Python: a new (η, offset) pair sums over every multiset for every K from 2 to 8 (12,861 of them,
holding the GIL while it does), an old one costs nothing (``rloo_demo.toy.exact_moments`` is cached), and its events
run one at a time. Every input is checked on the server (``rloo_demo.toy.check_inputs``), whatever a client sends:
the event takes the sliders' raw values (gradio's own range check answered K = 1000 with a bare toast and a
traceback), a refusal names the slider by its label in the page's language, and the sliders go back to the values
the table shows, so the slider, its box and the table never disagree.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.errors import UserError
from rloo_demo.i18n import localize_figure
from rloo_demo.toy import K_RANGE, check_inputs, exact_table, variance_curves
from rloo_demo.ui import plots
from rloo_demo.ui.common import L, Page, as_plot, error_markdown, guarded, refusal_markdown
from rloo_demo.ui.views import toy_markdown


def build(page: Page) -> SimpleNamespace:
    """The panel, folded (its numbers are computed when it is opened), and its events."""
    ui = SimpleNamespace()
    with gr.Accordion(L("toy.accordion"), open=False, elem_id="toy-panel") as ui.accordion:
        gr.Markdown(L("toy.help"), elem_classes=["rloo-small"])
        with gr.Row():
            ui.eta = gr.Slider(-6, 6, value=0, step=0.5, label=L("toy.eta"), elem_id="toy-eta")
            ui.k = gr.Slider(*K_RANGE, value=4, step=1, label=L("toy.k"), elem_id="toy-k")
            ui.offset = gr.Slider(-5, 5, value=0, step=0.5, label=L("toy.offset"), elem_id="toy-offset")
        ui.shown = gr.State(DEFAULT_INPUTS)  # the (η, K, offset) the table shows: a refused value is put back to it
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                ui.plot = gr.Plot(label=L("toy.plot"), show_label=False, elem_id="toy-plot")
            with gr.Column(scale=2, min_width=360):
                ui.table = gr.Markdown("", elem_id="toy-table", elem_classes=["rloo-md-table"])
    _wire(ui, page)
    return ui


DEFAULT_INPUTS = (0.0, 4, 0.0)
# the names ``toy.check_inputs`` refuses a value by -> the text keys of the sliders' labels
LABELS = {"eta": "toy.eta", "K": "toy.k", "offset": "toy.offset"}


def toy_view(ui: SimpleNamespace, eta, k, offset, locale: str = "en") -> dict:
    """The plot and the table for the inputs, checked first (a ``UserError`` names the bad one)."""
    eta, k, offset = check_inputs(eta, k, offset)
    figure = plots.toy_variance_figure(variance_curves(eta, offset), selected_k=k)
    return {
        ui.plot: as_plot(localize_figure(figure, locale)),
        ui.table: toy_markdown(exact_table(eta, k, offset), locale),
    }


def _wire(ui: SimpleNamespace, page: Page) -> None:
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.table: error_markdown(msg, locale)})
    def show(eta, k, offset, locale="en", shown=DEFAULT_INPUTS):
        try:
            out = toy_view(ui, eta, k, offset, locale)
        except UserError as exc:  # refused by the slider's label; the sliders back to what the table shows
            back = shown if isinstance(shown, list | tuple) and len(shown) == 3 else DEFAULT_INPUTS
            return {
                ui.table: refusal_markdown(controller, exc, locale, LABELS),
                ui.eta: back[0],
                ui.k: back[1],
                ui.offset: back[2],
            }
        return out | {ui.shown: (float(eta), int(k), float(offset))}

    gr.on(
        [ui.accordion.expand, ui.eta.release, ui.k.release, ui.offset.release],
        show,
        [ui.eta, ui.k, ui.offset, page.locale, ui.shown],
        [ui.plot, ui.table, ui.eta, ui.k, ui.offset, ui.shown],
        api_name="toy",
        api_visibility="private",
        concurrency_id="toy",
        concurrency_limit=1,
        trigger_mode="always_last",
        preprocess=False,  # raw values: a K past the slider is refused by its label, not by gradio's toast
    )
