"""The history of a prompt, a panel of the Rollouts tab: a held-out prompt's K completions from the base policy,
from each snapshot the run kept and from its latest policy, all with one seed (``Controller.probe``).

The run probed is the one the tab shows (its run picker), else the page's watched run. The event takes the boxes'
raw values: the limits check them, and a refusal names the box by its label (``LABELS``).
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.ui.common import L, Page, caller_of, error_markdown, guarded
from rloo_demo.ui.views import probe_html, probe_note

# the names ``Limits.probe_request`` refuses a value by -> the text keys of the boxes' labels
LABELS = {"completions per step": "rollouts.probe_k", "seed": "common.seed", "prompt": "rollouts.probe_prompt"}


def shown_run(name, watched):
    """The run an event is about: the one the Rollouts tab shows, else (nothing drawn yet) the watched run."""
    return name if isinstance(name, str) and name else watched


def build(page: Page, tab: gr.Tab, run: gr.State) -> SimpleNamespace:
    """The panel and its events; ``run`` is the state holding the run the tab shows."""
    limits = page.controller.limits
    ui = SimpleNamespace()
    with gr.Column(elem_id="probe-section"):
        gr.Markdown(L("rollouts.probe_intro"))
        with gr.Row():
            ui.prompt = gr.Dropdown(
                [],
                label=L("rollouts.probe_prompt"),
                allow_custom_value=True,
                scale=3,
                elem_id="probe-prompt",
            )
            ui.k = gr.Slider(
                1,
                min(8, limits.max_compare_samples),
                value=min(4, limits.max_compare_samples),
                step=1,
                label=L("rollouts.probe_k"),
            )
            ui.seed = gr.Number(0, label=L("common.seed"), precision=0, minimum=0)
            ui.button = gr.Button(L("rollouts.probe"), elem_id="probe-btn", scale=0, min_width=100)
        ui.view = gr.HTML("", elem_id="probe-view")
        with gr.Accordion(L("common.what"), open=True):
            ui.note = gr.Markdown("", elem_id="probe-note")
    _wire(ui, page, tab, run)
    return ui


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab, run: gr.State) -> None:
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.note: error_markdown(msg, locale)})
    def refresh_prompts(name, current, locale="en", watched=None):
        choices = controller.heldout_choices(shown_run(name, watched))
        value = current if isinstance(current, str) and current else (choices[0] if choices else None)
        return {ui.prompt: gr.Dropdown(choices=choices, value=value)}

    tab.select(
        refresh_prompts,
        [run, ui.prompt, page.locale, page.watched],
        [ui.prompt, ui.note],
        api_name="rollouts_prompts",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.view: "", ui.note: error_markdown(msg, locale)}, LABELS)
    def probe(cid, name, prompt, k, seed, locale="en", watched=None, request: gr.Request = None):
        result = controller.probe(shown_run(name, watched), prompt, k, seed, caller_of(request, cid))
        return {ui.view: probe_html(result, locale), ui.note: probe_note(result, locale)}

    ui.button.click(
        probe,
        [page.client_id, run, ui.prompt, ui.k, ui.seed, page.locale, page.watched],
        [ui.view, ui.note],
        api_name="rollouts_probe",
        api_visibility="private",
        concurrency_id="sampling",
        concurrency_limit=1,
        preprocess=False,  # raw values: a K or seed past its range is refused by its label, not by gradio's toast
    )
