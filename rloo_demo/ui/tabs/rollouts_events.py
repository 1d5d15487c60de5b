"""The Rollouts tab's choices inside a step: another step, a group, a completion (a row of either table), the
what-if table's reward offset and the token view's measure. Each event reads the run the tab shows
(``probe_panel.shown_run``), draws what the choice changes and unticks "Follow" in the browser at once
(``UNFOLLOW_JS``), so a tick sent after the click leaves the view alone."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.advantages import MAX_REWARD_OFFSET
from rloo_demo.errors import UserError
from rloo_demo.i18n import localize_figure, t
from rloo_demo.public.limits import as_float, as_int
from rloo_demo.ui import plots
from rloo_demo.ui.common import Page, as_plot, error_markdown, guarded, refusal_markdown
from rloo_demo.ui.tabs.probe_panel import shown_run as _shown_run
from rloo_demo.ui.tabs.rollouts_view import (
    SIDE_TEXT_CHARS,
    completion_of,
    group_of,
    no_token_selection,
    picked_row,
    step_view,
    token_view,
    unselected,
)
from rloo_demo.ui.views import arithmetic_markdown, group_label, group_rows, shown_rows, whatif_markdown

# The names the limits refuse a value by -> the text keys of the labels of the boxes it came from
STEP_LABELS = {"step": "rollouts.step"}
OFFSET_LABELS = {"offset": "rollouts.whatif_offset"}
# Choosing a completion, step or group unticks "Follow" in the browser at once, before the server answers: a tick
# sent after the click then leaves the view alone (one already on its way is undone by ``pin_view``).
UNFOLLOW_JS = "() => false"


def wire(ui: SimpleNamespace, page: Page) -> None:
    """The choices' events (module docstring)."""
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pick_step(name, step, label, locale="en", watched=None, shown=-1):
        """Another step of the run shown: drawn, nothing selected, not following (the user chose where to look).
        A step outside the run's is refused by the box's label, and the box goes back to the step shown."""
        name = _shown_run(name, watched)
        steps = controller.rollout_steps(name)
        try:
            step = as_int("step", step, steps[0] if steps else 1, steps[-1] if steps else 1)
        except UserError as exc:
            back = shown if isinstance(shown, int) and not isinstance(shown, bool) and shown in steps else None
            return {
                ui.arithmetic: refusal_markdown(controller, exc, locale, STEP_LABELS),
                ui.step: gr.Slider(value=back if back is not None else (steps[-1] if steps else 1)),
            }
        view = step_view(ui, controller, name, step, label, steps, locale=locale)
        return view | unselected(ui, locale) | {ui.follow: False}

    ui.step.release(
        pick_step,
        [ui.shown_run, ui.step, ui.group, page.locale, page.watched, ui.shown],
        ui.view_outputs,
        api_visibility="private",
        preprocess=False,  # raw values: a step past the slider is refused by its label, not by gradio's toast
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)}, STEP_LABELS)
    def pick_group(name, step, label, locale="en", watched=None):
        groups = controller.rollouts(_shown_run(name, watched), step)
        g, labels, chosen = group_of(groups, label, locale)
        if g is None:
            return {ui.arithmetic: t(locale, "common.select_row")}
        headers, rows = group_rows(g, text_chars=SIDE_TEXT_CHARS, locale=locale)
        return {
            ui.group_plot: as_plot(localize_figure(plots.group_figure(g), locale)),
            ui.table: gr.Dataframe(value=shown_rows(rows), headers=headers),
            ui.arithmetic: t(locale, "common.select_row"),
            ui.whatif: whatif_markdown(groups, labels.index(chosen), locale),
        }

    ui.group.input(
        pick_group,
        [ui.shown_run, ui.step, ui.group, page.locale, page.watched],
        [ui.group_plot, ui.table, ui.arithmetic, ui.whatif],
        api_visibility="private",
        preprocess=False,  # raw values: the step box's value is checked by the read, refused by its label
    )

    def drop_selection(locale="en"):
        """Another group: the selection (of the group left) is dropped, from the token view too."""
        return unselected(ui, locale)

    ui.group.input(
        drop_selection,
        [page.locale],
        [ui.selected, ui.arithmetic, ui.tokens, ui.token_note],
        api_visibility="private",
        queue=False,
    )

    def whatif_text(name, step, label, offset, locale) -> str:
        offset = as_float("offset", offset, -MAX_REWARD_OFFSET, MAX_REWARD_OFFSET)
        groups = controller.rollouts(name, step)
        g, labels, chosen = group_of(groups, label, locale)
        return whatif_markdown(groups, labels.index(chosen), locale, offset) if g is not None else ""

    @guarded(controller, lambda msg, locale: {ui.whatif: error_markdown(msg, locale)}, OFFSET_LABELS)
    def offset_changed(name, step, label, offset, locale="en", watched=None):
        """The what-if table with every reward shifted by the offset box's C; a bad C is refused in the table."""
        return {ui.whatif: whatif_text(_shown_run(name, watched), step, label, offset, locale)}

    ui.whatif_offset.change(
        offset_changed,
        [ui.shown_run, ui.shown, ui.group, ui.whatif_offset, page.locale, page.watched],
        [ui.whatif],
        api_name="rollouts_whatif",
        api_visibility="private",
        trigger_mode="always_last",
        preprocess=False,  # raw values: an emptied or wild C is refused by the box's label in the table
    )

    @guarded(controller, lambda msg, locale: {ui.whatif: gr.skip()})
    def keep_offset(name, step, label, offset, shown_text, locale="en", watched=None):
        """The table's other writers (a new step on a tick, another step or group) draw it with C = 0: draw it
        again with the box's C. Writes only what differs from what is shown, and nothing for a bad C (the box's
        own event said so), so this chain ends after one round."""
        text = whatif_text(_shown_run(name, watched), step, label, offset, locale)
        return {ui.whatif: gr.skip() if text == shown_text else text}

    ui.whatif.change(
        keep_offset,
        [ui.shown_run, ui.shown, ui.group, ui.whatif_offset, ui.whatif, page.locale, page.watched],
        [ui.whatif],
        api_visibility="private",
        trigger_mode="always_last",
        preprocess=False,  # as the box's own event
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)}, STEP_LABELS)
    def pick_completion(name, step, label, measure, locale="en", watched=None, evt: gr.SelectData = None):
        index = evt.index[0] if evt is not None and isinstance(evt.index, list | tuple) and evt.index else None
        name = _shown_run(name, watched)
        g, index = completion_of(controller, name, step, label, index, locale)
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
        [ui.shown_run, ui.step, ui.group, ui.measure, page.locale, page.watched],
        [ui.arithmetic, ui.selected, ui.tokens, ui.token_note],
        api_name="rollouts_completion",
        api_visibility="private",
        preprocess=False,  # as the group's
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pick_row(name, measure, locale="en", watched=None, evt: gr.EventData = None):
        """A click on a row of the groups tables: its completion selected, and its group shown beside (the chart, the
        side table, the what-if table), as if picked there. The row names its step: a tick that moved the view
        between the click and this leaves the selection on the step clicked (``pin_view`` draws it again)."""
        picked = picked_row(getattr(evt, "_data", None) if evt is not None else None)
        name = _shown_run(name, watched)
        groups = controller.rollouts(name, picked[0]) if picked is not None else []
        g = next((x for x in groups if x["group"] == picked[1] and x["step"] == picked[0]), None)
        if g is None or not picked[2] < len(g["completions"]):
            return {ui.arithmetic: t(locale, "common.select_row")}
        index, label = picked[2], group_label(g, locale)
        selected = {"name": name, "step": g["step"], "label": label, "index": index}
        spans, note = token_view(controller, selected, measure, locale)
        headers, rows = group_rows(g, text_chars=SIDE_TEXT_CHARS, locale=locale)
        return {
            ui.arithmetic: arithmetic_markdown(g, index, locale),
            ui.selected: selected,
            ui.tokens: spans,
            ui.token_note: note,
            ui.group: gr.Dropdown(choices=[group_label(x, locale) for x in groups], value=label),
            ui.group_plot: as_plot(localize_figure(plots.group_figure(g), locale)),
            ui.table: gr.Dataframe(value=shown_rows(rows), headers=headers),
            ui.whatif: whatif_markdown(groups, groups.index(g), locale),
        }

    ui.groups.click(
        pick_row,
        [ui.shown_run, ui.measure, page.locale, page.watched],
        [ui.arithmetic, ui.selected, ui.tokens, ui.token_note, ui.group, ui.group_plot, ui.table, ui.whatif],
        api_name="rollouts_row",
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
    # last: events with no server function (tests and tools that list the handlers by name meet them after these)
    for trigger in (ui.group.input, ui.table.select, ui.groups.click):
        trigger(None, None, [ui.follow], js=UNFOLLOW_JS, queue=False)
