"""The estimator lab's exact toy, a panel of the Rollouts tab: sliders for η, K and the offset, each estimator's exact
variance against K and a table of its mean and bias (``rloo_demo.toy``: no sampling, no run needed).

The toy is pure Python: a new (η, offset) pair sums over every multiset for every K from 2 to 8 (12,861 of them,
holding the GIL while it does), an old one costs nothing (``rloo_demo.toy.exact_moments`` is cached), and its events
run one at a time. Every input is checked on the server (``rloo_demo.toy.check_inputs``), whatever a client sends.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.i18n import localize_figure
from rloo_demo.toy import K_RANGE, check_inputs, exact_table, variance_curves
from rloo_demo.ui import plots
from rloo_demo.ui.common import L, Page, as_plot, error_markdown, guarded
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
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                ui.plot = gr.Plot(label=L("toy.plot"), show_label=False, elem_id="toy-plot")
            with gr.Column(scale=2, min_width=360):
                ui.table = gr.Markdown("", elem_id="toy-table")
    _wire(ui, page)
    return ui


def toy_view(ui: SimpleNamespace, eta, k, offset, locale: str = "en") -> dict:
    """The plot and the table for the inputs, checked first (a ``UserError`` names the bad one)."""
    eta, k, offset = check_inputs(eta, k, offset)
    figure = plots.toy_variance_figure(variance_curves(eta, offset), selected_k=k)
    return {
        ui.plot: as_plot(localize_figure(figure, locale)),
        ui.table: toy_markdown(exact_table(eta, k, offset), locale),
    }


def _wire(ui: SimpleNamespace, page: Page) -> None:
    @guarded(page.controller, lambda msg, locale: {ui.table: error_markdown(msg, locale)})
    def show(eta, k, offset, locale="en"):
        return toy_view(ui, eta, k, offset, locale)

    gr.on(
        [ui.accordion.expand, ui.eta.release, ui.k.release, ui.offset.release],
        show,
        [ui.eta, ui.k, ui.offset, page.locale],
        [ui.plot, ui.table],
        api_name="toy",
        api_visibility="private",
        concurrency_id="toy",
        concurrency_limit=1,
        trigger_mode="always_last",
    )
