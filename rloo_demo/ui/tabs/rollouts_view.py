"""What the Rollouts tab draws for a view (a run, a step, a group, a selected completion): the components' new
values as a dict keyed by component, from ``Controller`` reads and the pure views. ``ui.tabs.rollouts`` wires them.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import gradio as gr

from rloo_demo.i18n import localize_figure, t
from rloo_demo.ui import plots
from rloo_demo.ui.common import as_plot
from rloo_demo.ui.views import (
    arithmetic_markdown,
    group_label,
    group_rows,
    groups_html,
    kl_heatmap_note,
    shown_rows,
    token_note_markdown,
    token_spans_html,
    whatif_markdown,
)

SIDE_TEXT_CHARS = 40  # completion text in the narrow per-group table; the full text is in the tables beside it


def no_token_selection(locale: str = "en") -> str:
    return f"<p class='rloo-empty'>{t(locale, 'rollouts.no_token_selection')}</p>"


def group_of(groups: list[dict], label, locale: str = "en") -> tuple[dict | None, list[str], str | None]:
    labels = [group_label(g, locale) for g in groups]
    if not labels:
        return None, labels, None
    chosen = label if label in labels else labels[0]
    return groups[labels.index(chosen)], labels, chosen


def run_choices(controller, current=None) -> list[tuple[str, str]]:
    """The picker's choices: the runs on disk, newest first, a run's label beside its name; ``current`` (a run
    training before its folder is listed, say) is kept in them."""
    summaries = controller.list_runs()
    choices = [(f"{s['label']} · {s['name']}" if s.get("label") else s["name"], s["name"]) for s in summaries]
    if isinstance(current, str) and current and current not in [name for _, name in choices]:
        choices.insert(0, (current, current))
    return choices


def step_view(
    ui: SimpleNamespace, controller, name, step, label, steps=None, locale: str = "en", selected=None
) -> dict:
    """Everything the tab shows for one step of a run; ``selected`` (a completion of that step) is outlined."""
    steps = steps if steps is not None else controller.rollout_steps(name)
    groups = controller.rollouts(name, step)
    g, labels, chosen = group_of(groups, label, locale)
    mark = None
    if isinstance(selected, dict) and g is not None and selected.get("step") == g["step"]:
        mark = (g["group"], selected.get("index"))
    first = steps[0] if steps else 1
    out = {
        ui.run: gr.Dropdown(choices=run_choices(controller, name), value=name),
        # gradio refuses a slider whose maximum is not above its minimum: a run with one step of rollouts on disk
        # (its only readable line at step 4, say) gets one more stop
        ui.step: gr.Slider(minimum=first, maximum=max(steps[-1] if steps else 1, first + 1), value=step),
        ui.groups: groups_html(groups, locale, selected=mark),
        ui.group: gr.Dropdown(choices=labels, value=chosen),
        ui.shown: step,
        ui.shown_run: name,
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
                ui.table: gr.Dataframe(value=shown_rows(rows), headers=headers),
                ui.whatif: whatif_markdown(groups, labels.index(chosen), locale),
            }
        )
    return out


def unselected(ui: SimpleNamespace, locale: str = "en") -> dict:
    """No completion selected: the arithmetic and the token view say to pick one."""
    return {
        ui.selected: None,
        ui.arithmetic: t(locale, "common.select_row"),
        ui.tokens: no_token_selection(locale),
        ui.token_note: "",
    }


def latest_view(ui: SimpleNamespace, controller, name, label=None, locale: str = "en") -> dict:
    """A run's newest step, nothing selected (a run picked, opened from the Runs tab, or followed again)."""
    steps = controller.rollout_steps(name)
    out = step_view(ui, controller, name, steps[-1] if steps else None, label, steps, locale)
    out[ui.shown] = steps[-1] if steps else -1
    return out | unselected(ui, locale)


def render_latest(ui: SimpleNamespace, controller, name, label, follow, shown, locale: str = "en") -> dict:
    """A tick's update: the newest step, when the page follows it and it is not yet shown."""
    steps = controller.rollout_steps(name)
    if not steps or not follow or steps[-1] == shown:
        return {}
    return step_view(ui, controller, name, steps[-1], label, steps, locale)


def selected_view(ui: SimpleNamespace, controller, selected, measure, locale: str = "en") -> dict:
    """The selected completion's step drawn again, outlined, with its arithmetic and tokens; not following."""
    name, step = selected.get("name"), selected.get("step")
    g, index = completion_of(controller, name, step, selected.get("label"), selected.get("index"), locale)
    if g is None:
        return unselected(ui, locale)
    spans, note = token_view(controller, selected, measure, locale)
    out = step_view(ui, controller, name, step, selected.get("label"), locale=locale, selected=selected)
    return out | {
        ui.arithmetic: arithmetic_markdown(g, index, locale),
        ui.tokens: spans,
        ui.token_note: note,
        ui.follow: False,
    }


PICK = re.compile(r"([1-9][0-9]{0,8}):([0-9]{1,4}):([0-9]{1,4})")


def picked_row(data) -> tuple[int, int, int] | None:
    """(step, group, index) of the row a click on the groups tables names (``{"pick": "step:group:index"}``, the
    click event's data), or None for anything else a client may send."""
    pick = data.get("pick") if isinstance(data, dict) else None
    match = PICK.fullmatch(pick) if isinstance(pick, str) else None
    return tuple(int(x) for x in match.groups()) if match else None


def completion_of(controller, name, step, label, index, locale="en") -> tuple[dict | None, int | None]:
    """The group and index of a selected completion, or (None, None) for anything that does not name one."""
    g, _, _ = group_of(controller.rollouts(name, step), label, locale)
    if g is None or isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(g["completions"]):
        return None, None
    return g, index


def token_view(controller, selected, measure, locale: str = "en") -> tuple[str, str]:
    """The token spans and their note for a selection (a dict the page keeps in its state)."""
    if not isinstance(selected, dict):
        return no_token_selection(locale), ""
    g, index = completion_of(
        controller, selected.get("name"), selected.get("step"), selected.get("label"), selected.get("index"), locale
    )
    if g is None:
        return no_token_selection(locale), ""
    return token_spans_html(g, index, measure, locale), token_note_markdown(g, index, measure, locale)
