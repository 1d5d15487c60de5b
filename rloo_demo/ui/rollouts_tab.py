"""Rollouts tab: every prompt group of a step, why each completion was pushed up or down, what the update did to
each of its tokens, where the KL lives, and how one prompt's completions drift across the run's snapshots.

``build`` makes the components and wires their events; ``render_latest`` (``rollouts_view``, which draws a view)
is what a page tick shows; ``wire_open_run`` lets the Runs tab's rows open a run here.

What the tab shows is one *view*: a run (the picker), a step, a group and, once a completion is clicked, that
completion. While "Follow the latest step" is ticked, a tick moves the view to the watched run's newest step. Any
choice the user makes (a completion, a step, a group, another run) unticks it, so the view stays where the user put
it until they tick it again; the row outlined in the tables, the arithmetic and the token view always name the
selected completion, also when a tick sent just before the click lands after it (``pin_view`` draws the selection's
step again).
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo.advantages import MAX_REWARD_OFFSET
from rloo_demo.i18n import localize_figure, t
from rloo_demo.server.limits import as_float
from rloo_demo.ui import plots, probe_panel, toy_panel
from rloo_demo.ui.common import L, Page, as_plot, error_markdown, guarded
from rloo_demo.ui.probe_panel import shown_run as _shown_run
from rloo_demo.ui.rollouts_view import (
    SIDE_TEXT_CHARS,
    completion_of,
    group_of,
    latest_view,
    no_token_selection,
    render_latest,
    run_choices,
    selected_view,
    step_view,
    token_view,
    unselected,
)
from rloo_demo.ui.views import MEASURES, arithmetic_markdown, group_label, group_rows, groups_html, whatif_markdown

# Choosing a completion, step or group unticks "Follow" in the browser at once, before the server answers: a tick
# sent after the click then leaves the view alone (one already on its way is undone by ``pin_view``).
UNFOLLOW_JS = "() => false"
# Opening a run from the Runs tab shows the Rollouts tab the way a click on its label does, so its select events run
SHOW_ROLLOUTS_JS = """() => { const b = [...document.querySelectorAll('button[role=tab][data-tab-id="rollouts"]')];
  if (b.length) b[0].click(); }"""


def build(page: Page, tab: gr.Tab) -> SimpleNamespace:
    ui = SimpleNamespace()
    # the primer first: what reward, baseline and advantage mean, before the tables that show them
    with gr.Column(elem_id="rollouts-primer"):
        gr.Markdown(L("rollouts.primer_summary"), elem_id="rollouts-primer-summary")
        with gr.Accordion(L("rollouts.primer_more"), open=False, elem_id="rollouts-primer-more"):
            gr.Markdown(L("rollouts.explanation"))
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            with gr.Row():
                # any value is let through to the server, which reads only a run it lists (a run may appear
                # between two refreshes of the choices)
                ui.run = gr.Dropdown(
                    [],
                    label=L("rollouts.run"),
                    info=L("rollouts.run_info"),
                    allow_custom_value=True,
                    elem_id="rollout-run",
                    scale=2,
                    min_width=300,  # on a phone: a row of its own, the whole name in sight
                )
                ui.step = gr.Slider(
                    1, 2, value=1, step=1, label=L("rollouts.step"), elem_id="rollout-step", scale=2, min_width=200
                )
                ui.follow = gr.Checkbox(
                    True,
                    label=L("rollouts.follow"),
                    info=L("rollouts.follow_info"),
                    elem_id="rollout-follow",
                    scale=1,
                    min_width=180,
                )
            ui.groups = gr.HTML(L("rollouts.none"), elem_id="rollout-groups")
        with gr.Column(scale=2, min_width=360):
            # a live run replaces the choices at each step, so a click sent just before may name the step and group
            # it was made on, which are no longer the choices: gradio would refuse it, and the click would do nothing.
            # Every event here looks the label up itself (group_of), so a stale or made-up one is safe to let through.
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
    ui.shown = gr.State(-1)  # the step whose rollouts are shown (-1: none yet, or to be drawn again)
    ui.shown_run = gr.State(None)  # the run whose rollouts are shown (None: the page's watched run)
    ui.selected = gr.State(None)  # the selected completion: {"name", "step", "label", "index"}
    ui.history = probe_panel.build(page, tab, ui.shown_run)  # the history of a prompt across the run's snapshots
    # what drawing a step writes (a page tick included: app.py's tick lists these as its outputs)
    ui.outputs = [
        *(ui.run, ui.step, ui.groups, ui.group, ui.group_plot, ui.table, ui.arithmetic, ui.whatif),
        *(ui.heatmap, ui.heatmap_note, ui.shown_run),
    ]
    # a step drawn afresh with its selection, and whether the page follows the live run
    # the run chosen in the picker or from the Runs tab while not following (None: none): a tick that left before
    # the choice and came back after it cannot take the view back to the watched run (``pin_view``)
    ui.picked = gr.State(None)
    ui.view_outputs = [*ui.outputs, ui.shown, ui.selected, ui.tokens, ui.token_note, ui.follow, ui.picked]
    _wire(ui, page, tab)
    return ui


def wire_open_run(page: Page, ui: SimpleNamespace, runs_table: gr.Dataframe) -> None:
    """A click on a row of the Runs tab's table opens that run here, at its newest step, and shows this tab. The
    run is the row's first cell (its name); it is read only if the server lists it."""
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def open_run(watched, follow, locale="en", evt: gr.SelectData = None):
        row = getattr(evt, "row_value", None) if evt is not None else None
        name = row[0] if isinstance(row, list | tuple) and row else None
        if name not in [n for _, n in run_choices(controller)]:
            return {ui.arithmetic: t(locale, "common.select_row")}
        # the watched run keeps the page's choice; any other is read as it is, not followed
        following = bool(follow) and name == watched
        return latest_view(ui, controller, name, locale=locale) | {
            ui.follow: following,
            ui.picked: _picked(name, following),
        }

    runs_table.select(
        open_run,
        [page.watched, ui.follow, page.locale],
        ui.view_outputs,
        api_name="rollouts_open_run",
        api_visibility="private",
    ).then(None, None, None, js=SHOW_ROLLOUTS_JS)


def wire_open_step(page: Page, ui: SimpleNamespace, button: gr.Button, step: gr.State) -> None:
    """The Train tab's alert button opens the watched run here at the step its first warning fired (the nearest
    step with rollouts, where a run records only some), nothing selected, not following, and shows this tab."""
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def open_step(watched, fired, locale="en"):
        steps = controller.rollout_steps(watched) if isinstance(watched, str) and watched else []
        if not steps or not isinstance(fired, int) or isinstance(fired, bool):
            return {ui.arithmetic: t(locale, "common.select_row")}
        at = min(steps, key=lambda s: (abs(s - fired), s))
        return (
            step_view(ui, controller, watched, at, None, steps, locale=locale)
            | unselected(ui, locale)
            | {ui.follow: False}
        )

    button.click(
        open_step,
        [page.watched, step, page.locale],
        ui.view_outputs,
        api_name="rollouts_open_step",
        api_visibility="private",
    ).then(None, None, None, js=SHOW_ROLLOUTS_JS)


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    controller = page.controller
    _wire_view(ui, page, tab)

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pick_step(name, step, label, locale="en", watched=None):
        """Another step of the run shown: drawn, nothing selected, not following (the user chose where to look)."""
        view = step_view(ui, controller, _shown_run(name, watched), step, label, locale=locale)
        return view | unselected(ui, locale) | {ui.follow: False}

    ui.step.release(
        pick_step,
        [ui.shown_run, ui.step, ui.group, page.locale, page.watched],
        ui.view_outputs,
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pick_group(name, step, label, locale="en", watched=None):
        groups = controller.rollouts(_shown_run(name, watched), step)
        g, labels, chosen = group_of(groups, label, locale)
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
        [ui.shown_run, ui.step, ui.group, page.locale, page.watched],
        [ui.group_plot, ui.table, ui.arithmetic, ui.whatif],
        api_visibility="private",
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

    @guarded(controller, lambda msg, locale: {ui.whatif: error_markdown(msg, locale)})
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
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
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
    for trigger in (ui.group.input, ui.table.select):
        trigger(None, None, [ui.follow], js=UNFOLLOW_JS, queue=False)


def _wire_view(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    """The run picker, "Follow", and the pin that keeps the selection's step on screen."""
    controller = page.controller

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def refresh_runs(current, shown_run, watched, locale="en"):
        """The picker's choices as the tab shows (a run may have started or ended since)."""
        value = _shown_run(shown_run, watched)
        return {ui.run: gr.Dropdown(choices=run_choices(controller, value), value=value)}

    tab.select(
        refresh_runs,
        [ui.run, ui.shown_run, page.watched, page.locale],
        [ui.run, ui.arithmetic],
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pick_run(name, watched, follow, locale="en"):
        """Another run: its newest step; following goes on only for the watched run, if it was on."""
        if name not in [n for _, n in run_choices(controller)]:
            return {ui.arithmetic: t(locale, "common.select_row")}
        following = bool(follow) and name == watched
        return latest_view(ui, controller, name, locale=locale) | {
            ui.follow: following,
            ui.picked: _picked(name, following),
        }

    ui.run.input(
        pick_run,
        [ui.run, page.watched, ui.follow, page.locale],
        ui.view_outputs,
        api_name="rollouts_run",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def follow_again(follow, watched, label, locale="en"):
        """Ticked: back to the watched run's newest step, the selection dropped. Unticked: the view stays."""
        if not follow or not watched:
            return {ui.follow: bool(follow)}
        return latest_view(ui, controller, watched, label, locale) | {ui.follow: True, ui.picked: None}

    ui.follow.input(
        follow_again,
        [ui.follow, page.watched, ui.group, page.locale],
        ui.view_outputs,
        api_name="rollouts_follow",
        api_visibility="private",
    )

    @guarded(controller, lambda msg, locale: {ui.arithmetic: error_markdown(msg, locale)})
    def pin_view(selected, name, shown, step, label, follow, measure, locale="en", watched=None, picked=None):
        """After anything moved the view or the selection: a selection whose step is not the one shown (a tick
        that left before the click and came back after it) has its step drawn again, outlined; one that is shown
        gets its row outlined. A view to be drawn again (-1: the language or the watched run changed) is drawn at
        its step while the page does not follow (following, the tick draws it). A run picked while not following
        that is not the one shown (a tick drew the watched run over it) is drawn again."""
        if isinstance(picked, str) and not follow and _shown_run(name, watched) != picked and not selected:
            return latest_view(ui, controller, picked, locale=locale) | {ui.follow: False}
        if isinstance(selected, dict):
            if (selected.get("name"), selected.get("step")) != (name, shown):
                return selected_view(ui, controller, selected, measure, locale)
            groups = controller.rollouts(name, shown)
            g, _, _ = group_of(groups, selected.get("label"), locale)
            mark = (g["group"], selected.get("index")) if g is not None else None
            return {ui.groups: groups_html(groups, locale, selected=mark)}
        if shown == -1 and not follow and isinstance(step, int | float) and _shown_run(name, watched):
            return step_view(ui, controller, _shown_run(name, watched), int(step), label, locale=locale)
        return {ui.shown: gr.skip()}  # nothing to do (a dict with a key: gradio reads it as updates)

    gr.on(
        [ui.shown.change, ui.selected.change],
        pin_view,
        [
            ui.selected,
            ui.shown_run,
            ui.shown,
            ui.step,
            ui.group,
            ui.follow,
            ui.measure,
            page.locale,
            page.watched,
            ui.picked,
        ],
        ui.view_outputs,
        api_visibility="private",
        queue=False,  # cheap when nothing moved, which is nearly always: it must not wait behind the queue
        show_progress="hidden",
    )


def _picked(name: str, following: bool) -> str | None:
    """What ``ui.picked`` keeps for a run opened while not following it."""
    return None if following else name


__all__ = ["build", "render_latest", "step_view", "wire_open_run"]
