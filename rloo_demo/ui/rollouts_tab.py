"""Rollouts tab: every prompt group of a step, why each completion was pushed up or down, what the update did to
each of its tokens, where the KL lives, and how one prompt's completions drift across the run's snapshots.

``build`` makes the components and wires their events; ``render_latest`` is what a page tick shows.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.advantages import MAX_REWARD_OFFSET
from rloo_demo.i18n import localize_figure, t
from rloo_demo.server.limits import as_float
from rloo_demo.ui import plots, toy_panel
from rloo_demo.ui.common import L, Page, as_plot, caller_of, error_markdown, guarded
from rloo_demo.ui.views import (
    MEASURES,
    arithmetic_markdown,
    group_label,
    group_rows,
    groups_html,
    kl_heatmap_note,
    probe_html,
    probe_note,
    token_note_markdown,
    token_spans_html,
    whatif_markdown,
)

SIDE_TEXT_CHARS = 40  # completion text in the narrow per-group table; the full text is in the tables beside it


def no_token_selection(locale: str = "en") -> str:
    return f"<p class='rloo-empty'>{t(locale, 'rollouts.no_token_selection')}</p>"


def build(page: Page, tab: gr.Tab) -> SimpleNamespace:
    limits = page.controller.limits
    ui = SimpleNamespace()
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            with gr.Row():
                ui.step = gr.Slider(1, 2, value=1, step=1, label=L("rollouts.step"), elem_id="rollout-step", scale=3)
                ui.follow = gr.Checkbox(True, label=L("rollouts.follow"), scale=1)
            ui.groups = gr.HTML(L("rollouts.none"), elem_id="rollout-groups")
        with gr.Column(scale=2, min_width=360):
            # a live run replaces the choices at each step, so a click sent just before may name the step and group
            # it was made on, which are no longer the choices: gradio would refuse it, and the click would do nothing.
            # Every event here looks the label up itself (_pick), so a stale or made-up one is safe to let through.
            ui.group = gr.Dropdown(
                [], label=L("rollouts.group"), info=L("rollouts.group_info"), allow_custom_value=True
            )
            ui.group_plot = gr.Plot(label=L("rollouts.group_plot"), show_label=False, elem_id="group-plot")
            ui.table = gr.Dataframe(
                label=L("rollouts.table"),
                interactive=False,
                wrap=True,
                max_height=320,
                elem_id="group-table",
            )
            ui.arithmetic = gr.Markdown(L("common.select_row"), elem_id="arithmetic")
            ui.whatif_offset = gr.Number(
                0, label=L("rollouts.whatif_offset"), info=L("rollouts.whatif_offset_info"), elem_id="whatif-offset"
            )
            ui.whatif = gr.Markdown("", elem_id="whatif")
            with gr.Accordion(L("common.what"), open=False):
                gr.Markdown(L("rollouts.explanation"))
    ui.toy = toy_panel.build(page)  # the estimator lab's exact toy: needs no run
    with gr.Column(elem_id="tokens-section"):
        gr.Markdown(L("rollouts.tokens_title"))
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                ui.measure = gr.Radio(
                    [(L(f"measure.{key}"), key) for key in MEASURES],
                    value="delta",
                    label=L("rollouts.measure"),
                    elem_id="token-measure",
                )
                ui.tokens = gr.HTML(L("rollouts.no_token_selection"), elem_id="token-view")
                with gr.Accordion(L("common.what"), open=True):
                    ui.token_note = gr.Markdown("", elem_id="token-note")
            with gr.Column(scale=2, min_width=360):
                ui.heatmap = gr.Plot(label=L("rollouts.heatmap"), show_label=False, elem_id="kl-heatmap")
                with gr.Accordion(L("common.what"), open=True):
                    ui.heatmap_note = gr.Markdown("", elem_id="kl-heatmap-note")
    with gr.Column(elem_id="probe-section"):
        gr.Markdown(L("rollouts.probe_intro"))
        with gr.Row():
            ui.probe_prompt = gr.Dropdown(
                [],
                label=L("rollouts.probe_prompt"),
                allow_custom_value=True,
                scale=3,
                elem_id="probe-prompt",
            )
            ui.probe_k = gr.Slider(
                1, min(8, limits.max_compare_samples), value=min(4, limits.max_compare_samples), step=1, label="K"
            )
            ui.probe_seed = gr.Number(0, label=L("common.seed"), precision=0, minimum=0)
            ui.probe = gr.Button(L("rollouts.probe"), elem_id="probe-btn", scale=0, min_width=100)
        ui.probe_view = gr.HTML("", elem_id="probe-view")
        with gr.Accordion(L("common.what"), open=True):
            ui.probe_note = gr.Markdown("", elem_id="probe-note")
    ui.shown = gr.State(-1)  # the step whose rollouts are shown (-1: none yet)
    ui.selected = gr.State(None)  # the completion in the token view: {"step", "label", "index"}
    ui.outputs = [
        *(ui.step, ui.groups, ui.group, ui.group_plot, ui.table, ui.arithmetic, ui.whatif),
        *(ui.heatmap, ui.heatmap_note),
    ]
    _wire(ui, page, tab)
    return ui


def _pick(groups: list[dict], label, locale: str = "en") -> tuple[dict | None, list[str], str | None]:
    labels = [group_label(g, locale) for g in groups]
    if not labels:
        return None, labels, None
    chosen = label if label in labels else labels[0]
    return groups[labels.index(chosen)], labels, chosen


def step_view(ui: SimpleNamespace, controller, name, step, label, steps=None, locale: str = "en") -> dict:
    """Everything the tab shows for one step of a run."""
    steps = steps if steps is not None else controller.rollout_steps(name)
    groups = controller.rollouts(name, step)
    g, labels, chosen = _pick(groups, label, locale)
    out = {
        ui.step: gr.Slider(minimum=steps[0] if steps else 1, maximum=max(steps[-1] if steps else 1, 2), value=step),
        ui.groups: groups_html(groups, locale),
        ui.group: gr.Dropdown(choices=labels, value=chosen),
        ui.shown: step,
        ui.heatmap: as_plot(localize_figure(plots.kl_heatmap(groups), locale)),
        ui.heatmap_note: kl_heatmap_note(groups, locale),
    }
    if g is None:
        out.update({ui.group_plot: None, ui.table: None, ui.whatif: ""})
    else:
        headers, rows = group_rows(g, text_chars=SIDE_TEXT_CHARS, locale=locale)
        out.update(
            {
                ui.group_plot: as_plot(localize_figure(plots.group_figure(g), locale)),
                ui.table: gr.Dataframe(value=rows, headers=headers),
                ui.whatif: whatif_markdown(groups, labels.index(chosen), locale),
            }
        )
    return out


def render_latest(ui: SimpleNamespace, controller, name, label, follow, shown, locale: str = "en") -> dict:
    """A tick's update: the newest step, when the page follows it and it is not yet shown."""
    steps = controller.rollout_steps(name)
    if not steps or not follow or steps[-1] == shown:
        return {}
    return step_view(ui, controller, name, steps[-1], label, steps, locale)


def _completion(controller, name, step, label, index, locale="en") -> tuple[dict | None, int | None]:
    """The group and index of a selected completion, or (None, None) for anything that does not name one."""
    g, _, _ = _pick(controller.rollouts(name, step), label, locale)
    if g is None or isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(g["completions"]):
        return None, None
    return g, index


def token_view(controller, selected, measure, locale: str = "en") -> tuple[str, str]:
    """The token spans and their note for a selection (a dict the page keeps in its state)."""
    if not isinstance(selected, dict):
        return no_token_selection(locale), ""
    g, index = _completion(
        controller, selected.get("name"), selected.get("step"), selected.get("label"), selected.get("index"), locale
    )
    if g is None:
        return no_token_selection(locale), ""
    return token_spans_html(g, index, measure, locale), token_note_markdown(g, index, measure, locale)


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pick_step(name, step, label, locale="en"):
        return step_view(ui, controller, name, step, label, locale=locale)

    ui.step.release(
        pick_step,
        [page.watched, ui.step, ui.group, page.locale],
        [*ui.outputs, ui.shown],
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pick_group(name, step, label, locale="en"):
        groups = controller.rollouts(name, step)
        g, labels, chosen = _pick(groups, label, locale)
        if g is None:
            return {ui.arithmetic: t(locale, "common.select_row")}
        headers, rows = group_rows(g, text_chars=SIDE_TEXT_CHARS, locale=locale)
        return {
            ui.group_plot: as_plot(localize_figure(plots.group_figure(g), locale)),
            ui.table: gr.Dataframe(value=rows, headers=headers),
            ui.arithmetic: t(locale, "common.select_row"),
            ui.whatif: whatif_markdown(groups, labels.index(chosen), locale),
        }

    ui.group.input(
        pick_group,
        [page.watched, ui.step, ui.group, page.locale],
        [ui.group_plot, ui.table, ui.arithmetic, ui.whatif],
        api_visibility="private",
    )

    def whatif_text(name, step, label, offset, locale) -> str:
        offset = as_float("offset", offset, -MAX_REWARD_OFFSET, MAX_REWARD_OFFSET)
        groups = controller.rollouts(name, step)
        g, labels, chosen = _pick(groups, label, locale)
        return whatif_markdown(groups, labels.index(chosen), locale, offset) if g is not None else ""

    @guarded(controller, lambda msg, locale: {ui.whatif: error_markdown(msg, locale)})
    def offset_changed(name, step, label, offset, locale="en"):
        """The what-if table with every reward shifted by the offset box's C; a bad C is refused in the table."""
        return {ui.whatif: whatif_text(name, step, label, offset, locale)}

    ui.whatif_offset.change(
        offset_changed,
        [page.watched, ui.shown, ui.group, ui.whatif_offset, page.locale],
        [ui.whatif],
        api_name="rollouts_whatif",
        api_visibility="private",
        trigger_mode="always_last",
    )

    @guarded(controller, lambda msg, locale: {ui.whatif: gr.skip()})
    def keep_offset(name, step, label, offset, shown_text, locale="en"):
        """The table's other writers (a new step on a tick, another step or group) draw it with C = 0: draw it
        again with the box's C. Writes only what differs from what is shown, and nothing for a bad C (the box's
        own event said so), so this chain ends after one round."""
        text = whatif_text(name, step, label, offset, locale)
        return {ui.whatif: gr.skip() if text == shown_text else text}

    ui.whatif.change(
        keep_offset,
        [page.watched, ui.shown, ui.group, ui.whatif_offset, ui.whatif, page.locale],
        [ui.whatif],
        api_visibility="private",
        trigger_mode="always_last",
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pick_completion(name, step, label, measure, locale="en", evt: gr.SelectData = None):
        index = evt.index[0] if evt is not None and isinstance(evt.index, list | tuple) and evt.index else None
        g, index = _completion(controller, name, step, label, index, locale)
        if g is None:
            return {
                ui.arithmetic: t(locale, "common.select_row"),
                ui.selected: None,
                ui.tokens: no_token_selection(locale),
            }
        selected = {"name": name, "step": g["step"], "label": group_label(g, locale), "index": index}
        spans, note = token_view(controller, selected, measure, locale)
        return {
            ui.arithmetic: arithmetic_markdown(g, index, locale),
            ui.selected: selected,
            ui.tokens: spans,
            ui.token_note: note,
        }

    ui.table.select(
        pick_completion,
        [page.watched, ui.step, ui.group, ui.measure, page.locale],
        [ui.arithmetic, ui.selected, ui.tokens, ui.token_note],
        api_name="rollouts_completion",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.token_note: error_markdown(msg, locale)})
    def pick_measure(selected, measure, locale="en"):
        spans, note = token_view(controller, selected, measure, locale)
        return {ui.tokens: spans, ui.token_note: note}

    ui.measure.change(
        pick_measure,
        [ui.selected, ui.measure, page.locale],
        [ui.tokens, ui.token_note],
        api_name="rollouts_token_measure",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.probe_note: error_markdown(msg, locale)})
    def refresh_prompts(name, current, locale="en"):
        choices = controller.heldout_choices(name)
        value = current if isinstance(current, str) and current else (choices[0] if choices else None)
        return {ui.probe_prompt: gr.Dropdown(choices=choices, value=value)}

    tab.select(
        refresh_prompts,
        [page.watched, ui.probe_prompt, page.locale],
        [ui.probe_prompt, ui.probe_note],
        api_name="rollouts_prompts",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.probe_view: "", ui.probe_note: error_markdown(msg, locale)})
    def probe(cid, name, prompt, k, seed, locale="en", request: gr.Request = None):
        result = controller.probe(name, prompt, k, seed, caller_of(request, cid))
        return {ui.probe_view: probe_html(result, locale), ui.probe_note: probe_note(result, locale)}

    ui.probe.click(
        probe,
        [page.client_id, page.watched, ui.probe_prompt, ui.probe_k, ui.probe_seed, page.locale],
        [ui.probe_view, ui.probe_note],
        api_name="rollouts_probe",
        api_visibility="private",
        concurrency_id="sampling",
        concurrency_limit=1,
    )
