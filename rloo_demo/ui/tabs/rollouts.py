"""Rollouts tab: every prompt group of a step, why each completion was pushed up or down, what the update did to
each of its tokens, where the KL lives, and how one prompt's completions drift across the run's snapshots.

``build`` makes the tab, its components and events, and returns its ``Tab``; ``render_latest`` (``rollouts_view``,
which draws a view) is what a page tick shows; ``connect`` lets the Runs tab's rows and the Train tab's warning open
a run here; the choices inside a step are ``rollouts_events``.

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

from rloo_demo.i18n import t
from rloo_demo.ui.common import L, Moment, Page, Tab, error_markdown, guarded
from rloo_demo.ui.tabs import probe_panel, rollouts_events, toy_panel
from rloo_demo.ui.tabs.probe_panel import shown_run as _shown_run
from rloo_demo.ui.tabs.rollouts_view import (
    group_of,
    latest_view,
    render_latest,
    run_choices,
    selected_view,
    step_view,
    unselected,
)
from rloo_demo.ui.views import MEASURES, groups_html

ID, LABEL = "rollouts", "tab.rollouts"
# The groups tables (cards on a phone), the side table, the token view and the probe's table
ROLLOUTS_CSS = """
/* the groups tables: the completion keeps a readable width; where the reward functions make the table wider than
   its box, the advantage stays in sight at the right edge while the rest scrolls under it */
.rloo-groups td.rloo-text { min-width: 11em; }
.rloo-groups th { font-size: 0.92em; }
.rloo-groups th:last-child, .rloo-groups td.rloo-adv { position: sticky; right: 0; z-index: 1;
  background: linear-gradient(var(--row, transparent), var(--row, transparent)), var(--background-fill-primary);
  box-shadow: inset 1px 0 0 rgba(128, 128, 128, 0.25); }
/* a row's colour: its sign, as strong as its |A| against the group's (an inline alpha, views.groups_html) */
tr.rloo-pos { background: rgba(61, 190, 139, 0.18); }
tr.rloo-neg { background: rgba(217, 83, 79, 0.18); }
tr.rloo-zero { background: rgba(128, 128, 128, 0.10); }
.rloo-groups tr[data-pick] { cursor: pointer; }
.rloo-groups tr[data-pick]:hover { box-shadow: inset 3px 0 0 #4C9BE8; }
.rloo-groups tr[data-pick]:focus-visible { outline: 2px solid #4C9BE8; outline-offset: -2px; }
/* the Rollouts side table (a dataframe too): headers whole, numbers on one line; it scrolls sideways under its #,
   its advantage staying in sight at the right edge */
#group-table th span, #group-table .body-cell span { word-break: normal !important; overflow-wrap: normal !important; }
#group-table .body-cell:not([data-col="1"]) span, #group-table .sizing-body td:not(:nth-child(2)) {
  white-space: nowrap; }
#group-table th:last-child, #group-table .virtual-row .body-cell:last-child { position: sticky; right: 0; z-index: 2;
  background: var(--background-fill-primary); box-shadow: inset 1px 0 0 var(--border-color-primary); }
.rloo-token-head { font-size: 0.88em; margin: 2px 0 6px 0; }
.rloo-token-text { white-space: pre-wrap; line-height: 1.9; font-family: ui-monospace, monospace; font-size: 0.95em; }
.rloo-tok { border-radius: 3px; padding: 1px 0; margin: 0 1px 0 0; cursor: help; }
.rloo-swatch { border-radius: 3px; padding: 0 4px; }
.rloo-token-table td:nth-child(2) { text-align: left; font-family: ui-monospace, monospace; }
/* the token table: every number and token on one line, the # in sight while it scrolls on a phone */
.rloo-token-table td { white-space: nowrap; font-variant-numeric: tabular-nums; }
.rloo-token-table th:first-child, .rloo-token-table td:first-child { position: sticky; left: 0; z-index: 1;
  background: var(--background-fill-primary); }
.rloo-probe-table th, .rloo-probe-table td.rloo-text { text-align: left; vertical-align: top; }
@media (max-width: 700px) {
  /* each completion of the groups tables a card: its number and advantage on a line, its text, then its numbers,
     each under its column's name (a 560 px table put the advantage off a 390 px screen) */
  .rloo-groups thead { display: none; }
  .rloo-groups, .rloo-groups tr { border: 0 !important; }
  .rloo-groups td.rloo-adv { position: static; background: none; box-shadow: none; }
  .rloo-groups, .rloo-groups tbody { display: block; width: 100%; }
  .rloo-groups tr { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 14px; padding: 6px 8px;
    border-bottom: 1px solid rgba(128, 128, 128, 0.25) !important; }
  .rloo-groups td { display: block; border: 0 !important; padding: 0 !important; text-align: left !important; }
  .rloo-groups td.rloo-idx { order: 0; font-weight: 600; }
  .rloo-groups td.rloo-idx::before { content: "#"; }
  .rloo-groups td.rloo-text { order: 2; flex: 1 0 100%; }
  .rloo-groups td.rloo-num { order: 3; }
  .rloo-groups td.rloo-adv { order: 1; margin-left: auto; font-weight: 600; }
  .rloo-groups .rloo-cap { display: block; font-size: 0.75em; font-weight: normal; opacity: 0.75; white-space: nowrap; }
  .rloo-groups td.rloo-adv .rloo-cap { display: inline; margin-right: 6px; font-size: 0.85em; }
}
"""
# A row of the groups tables names its completion ("step:group:index", ``views.groups_html``): a click or Enter on it
# sends that to the server as the click event's data (gradio's ``trigger``), read by ``pick_row``
PICK_ROW_JS = """const send = (row) => trigger('click', {pick: row.dataset.pick});
element.addEventListener('click', (e) => { const row = e.target.closest('tr[data-pick]'); if (row) send(row); });
element.addEventListener('keydown', (e) => {
  const row = e.target.closest('tr[data-pick]');
  if (row && (e.key === 'Enter' || e.key === ' ')) { e.preventDefault(); send(row); } });"""
# Opening a run from the Runs tab shows the Rollouts tab the way a click on its label does, so its select events run
SHOW_ROLLOUTS_JS = """() => { const b = [...document.querySelectorAll('button[role=tab][data-tab-id="rollouts"]')];
  if (b.length) b[0].click(); }"""


CSS = ROLLOUTS_CSS  # the tab's own CSS (``Tab.css``), which ``ui.app`` adds to the page's


def build(page: Page) -> Tab:
    with gr.Tab(L(LABEL), id=ID) as element:
        ui = _components(page, element)
    _wire_view(ui, page, element)
    rollouts_events.wire(ui, page)
    return Tab(
        id=ID,
        label_key=LABEL,
        element=element,
        ui=ui,
        error=ui.arithmetic,
        css=CSS,
        tick_inputs=[ui.shown, ui.follow, ui.group],
        tick_outputs=[*ui.outputs, ui.shown],
        render=lambda moment, shown, follow, label: tick(ui, moment, shown, follow, label),
        relocalize_outputs=[ui.shown],
        relocalize=lambda moment: {ui.shown: -1},  # drawn again in the new language at the next tick
        load_outputs=[ui.shown],
        load=lambda moment: {ui.shown: -1},
        connect=lambda tabs: connect(page, ui, tabs),
    )


def tick(ui: SimpleNamespace, moment: Moment, shown, follow, label) -> dict:
    """A page tick: the watched run's newest step while the tab shows and follows it (``render_latest``)."""
    out = {ui.shown: -1} if moment.fresh else {}  # another run watched: its steps are drawn afresh
    if moment.view is None or moment.visible != ID:
        return out
    shown = -1 if moment.fresh else shown
    return out | render_latest(ui, moment.controller, moment.watched, label, follow, shown, moment.locale)


def connect(page: Page, ui: SimpleNamespace, tabs: dict[str, Tab]) -> None:
    """A Runs row opens its run here; the Train tab's warning opens its step here."""
    if "runs" in tabs:
        wire_open_run(page, ui, tabs["runs"].ui.table)
    if "train" in tabs:
        wire_open_step(page, ui, tabs["train"].ui.alert_open, tabs["train"].ui.alert_step)


def _components(page: Page, tab: gr.Tab) -> SimpleNamespace:
    ui = SimpleNamespace()
    # the primer first: what reward, baseline and advantage mean, before the tables that show them
    with gr.Column(elem_id="rollouts-primer"):
        gr.Markdown(L("rollouts.primer_summary"), elem_id="rollouts-primer-summary")
        with gr.Accordion(L("rollouts.primer_more"), open=False, elem_id="rollouts-primer-more"):
            gr.Markdown(L("rollouts.explanation"))
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            # any value is let through to the server, which reads only a run it lists (a run may appear between two
            # refreshes of the choices). A row of its own, the column's width: a choice is a run's label and its
            # name, which a row shared with the step slider cut short.
            ui.run = gr.Dropdown(
                [],
                label=L("rollouts.run"),
                info=L("rollouts.run_info"),
                allow_custom_value=True,
                elem_id="rollout-run",
            )
            with gr.Row():
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
            # a click (or Enter) on a row selects its completion, as a click in the side table does
            ui.groups = gr.HTML(L("rollouts.none"), elem_id="rollout-groups", js_on_load=PICK_ROW_JS)
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
                pinned_columns=1,  # on a phone the table scrolls sideways under its first column, the #
                elem_id="group-table",
            )
            ui.arithmetic = gr.Markdown(L("common.select_row"), elem_id="arithmetic")
            ui.whatif_offset = gr.Number(
                0, label=L("rollouts.whatif_offset"), info=L("rollouts.whatif_offset_info"), elem_id="whatif-offset"
            )
            ui.whatif = gr.Markdown("", elem_id="whatif", elem_classes=["rloo-md-table"])
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


__all__ = ["build", "connect", "render_latest", "step_view", "tick", "wire_open_run"]
