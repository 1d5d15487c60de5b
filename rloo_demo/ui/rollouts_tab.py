"""Rollouts tab: every prompt group of a step, why each completion was pushed up or down, what the update did to
each of its tokens, where the KL lives, and how one prompt's completions drift across the run's snapshots.

``build`` makes the components and wires their events; ``render_latest`` is what a page tick shows.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from rloo_demo import plots
from rloo_demo.ui.common import Page, as_plot, caller_of, error_markdown, guarded
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

EXPLANATION = """
#### How RLOO turns rewards into updates
- **The whole completion is one action.** The policy samples K completions per prompt; each gets one reward
  (a score of the finished text), and the update raises or lowers the log-probability of the *whole* completion
  in proportion to its advantage. There is no per-token credit assignment and no value model.
- **Leave-one-out baseline.** A completion is compared with the mean reward of the *other* K−1 completions of the
  same prompt. The baseline never includes the completion itself, so it adds no bias, and the advantages of a group
  sum to zero: what one gains, its siblings lose.
- **KL in the reward.** Before the baseline, β times the completion's summed log-ratio to the frozen reference is
  subtracted from its reward, so drifting far from the reference costs reward.
- **Three models, not four.** RLOO holds the policy, the reference and the reward model. PPO also trains a value
  model of the policy's size; published comparisons report 50–70% less GPU memory and 2–3× faster runs for RLOO.
- **Why K ≥ 4.** The baseline is a mean of K−1 samples: with K=2 it is a single sibling's reward, a noisy yardstick.
  More siblings give a steadier baseline and lower-variance gradients, at K forward passes per prompt.
- **Why leave-one-out, rather than none, a value network or GRPO's mean and std?** No baseline (REINFORCE) lets the
  reward's offset add noise to every update; a value network (PPO) costs a fourth model; GRPO's group mean includes
  the completion itself (a (K−1)/K shrink) and its std rescales each group differently. The table under the
  arithmetic shows the selected group under each choice; the Train tab's variance meter and
  `python -m rloo_demo arena` measure what each choice does to the gradient and to training.
"""


NO_TOKEN_SELECTION = "<p class='rloo-empty'>Select a completion in the table above to see its tokens.</p>"


def build(page: Page, tab: gr.Tab) -> SimpleNamespace:
    limits = page.controller.limits
    ui = SimpleNamespace()
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            with gr.Row():
                ui.step = gr.Slider(1, 2, value=1, step=1, label="Step", elem_id="rollout-step", scale=3)
                ui.follow = gr.Checkbox(True, label="Follow the latest step", scale=1)
            ui.groups = gr.HTML("<p class='rloo-empty'>No rollouts yet.</p>", elem_id="rollout-groups")
        with gr.Column(scale=2, min_width=360):
            ui.group = gr.Dropdown([], label="Prompt group", info="chart and arithmetic for one group")
            ui.group_plot = gr.Plot(
                label="Shaped reward vs leave-one-out baseline", show_label=False, elem_id="group-plot"
            )
            ui.table = gr.Dataframe(
                label="Select a completion to see its arithmetic",
                interactive=False,
                wrap=True,
                max_height=320,
                elem_id="group-table",
            )
            ui.arithmetic = gr.Markdown("Select a row above.", elem_id="arithmetic")
            ui.whatif = gr.Markdown("", elem_id="whatif")
            with gr.Accordion("What am I looking at?", open=False):
                gr.Markdown(EXPLANATION)
    with gr.Column(elem_id="tokens-section"):
        gr.Markdown("#### Token by token: what the update did to each token, and where the KL lives")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                ui.measure = gr.Radio(
                    [(label, key) for key, label in MEASURES.items()],
                    value="delta",
                    label="Colour the tokens by",
                    elem_id="token-measure",
                )
                ui.tokens = gr.HTML(NO_TOKEN_SELECTION, elem_id="token-view")
                with gr.Accordion("What am I looking at?", open=True):
                    ui.token_note = gr.Markdown("", elem_id="token-note")
            with gr.Column(scale=2, min_width=360):
                ui.heatmap = gr.Plot(label="Per-token KL over the batch", show_label=False, elem_id="kl-heatmap")
                with gr.Accordion("What am I looking at?", open=True):
                    ui.heatmap_note = gr.Markdown("", elem_id="kl-heatmap-note")
    with gr.Column(elem_id="probe-section"):
        gr.Markdown(
            "#### History of a prompt\nK completions of one held-out prompt from the base policy, each snapshot the "
            "run kept, and its latest policy: the same seed for every one."
        )
        with gr.Row():
            ui.probe_prompt = gr.Dropdown(
                [],
                label="Held-out prompt (or type one)",
                allow_custom_value=True,
                scale=3,
                elem_id="probe-prompt",
            )
            ui.probe_k = gr.Slider(
                1, min(8, limits.max_compare_samples), value=min(4, limits.max_compare_samples), step=1, label="K"
            )
            ui.probe_seed = gr.Number(0, label="Seed", precision=0, minimum=0)
            ui.probe = gr.Button("Probe", elem_id="probe-btn", scale=0, min_width=100)
        ui.probe_view = gr.HTML("", elem_id="probe-view")
        with gr.Accordion("What am I looking at?", open=True):
            ui.probe_note = gr.Markdown("", elem_id="probe-note")
    ui.shown = gr.State(-1)  # the step whose rollouts are shown (-1: none yet)
    ui.selected = gr.State(None)  # the completion in the token view: {"step", "label", "index"}
    ui.outputs = [
        *(ui.step, ui.groups, ui.group, ui.group_plot, ui.table, ui.arithmetic, ui.whatif),
        *(ui.heatmap, ui.heatmap_note),
    ]
    _wire(ui, page, tab)
    return ui


def _pick(groups: list[dict], label) -> tuple[dict | None, list[str], str | None]:
    labels = [group_label(g) for g in groups]
    if not labels:
        return None, labels, None
    chosen = label if label in labels else labels[0]
    return groups[labels.index(chosen)], labels, chosen


def step_view(ui: SimpleNamespace, controller, name, step, label, steps=None) -> dict:
    """Everything the tab shows for one step of a run."""
    steps = steps if steps is not None else controller.rollout_steps(name)
    groups = controller.rollouts(name, step)
    g, labels, chosen = _pick(groups, label)
    out = {
        ui.step: gr.Slider(minimum=steps[0] if steps else 1, maximum=max(steps[-1] if steps else 1, 2), value=step),
        ui.groups: groups_html(groups),
        ui.group: gr.Dropdown(choices=labels, value=chosen),
        ui.shown: step,
        ui.heatmap: as_plot(plots.kl_heatmap(groups)),
        ui.heatmap_note: kl_heatmap_note(groups),
    }
    if g is None:
        out.update({ui.group_plot: None, ui.table: None, ui.whatif: ""})
    else:
        headers, rows = group_rows(g, text_chars=SIDE_TEXT_CHARS)
        out.update(
            {
                ui.group_plot: as_plot(plots.group_figure(g)),
                ui.table: gr.Dataframe(value=rows, headers=headers),
                ui.whatif: whatif_markdown(groups, labels.index(chosen)),
            }
        )
    return out


def render_latest(ui: SimpleNamespace, controller, name, label, follow, shown) -> dict:
    """A tick's update: the newest step, when the page follows it and it is not yet shown."""
    steps = controller.rollout_steps(name)
    if not steps or not follow or steps[-1] == shown:
        return {}
    return step_view(ui, controller, name, steps[-1], label, steps)


def _completion(controller, name, step, label, index) -> tuple[dict | None, int | None]:
    """The group and index of a selected completion, or (None, None) for anything that does not name one."""
    g, _, _ = _pick(controller.rollouts(name, step), label)
    if g is None or isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(g["completions"]):
        return None, None
    return g, index


def token_view(controller, selected, measure) -> tuple[str, str]:
    """The token spans and their note for a selection (a dict the page keeps in its state)."""
    if not isinstance(selected, dict):
        return NO_TOKEN_SELECTION, ""
    g, index = _completion(
        controller, selected.get("name"), selected.get("step"), selected.get("label"), selected.get("index")
    )
    if g is None:
        return NO_TOKEN_SELECTION, ""
    return token_spans_html(g, index, measure), token_note_markdown(g, index, measure)


def _wire(ui: SimpleNamespace, page: Page, tab: gr.Tab) -> None:
    controller = page.controller

    @guarded(controller, lambda msg: {ui.arithmetic: error_markdown(msg)})
    def pick_step(name, step, label):
        return step_view(ui, controller, name, step, label)

    ui.step.release(pick_step, [page.watched, ui.step, ui.group], [*ui.outputs, ui.shown], api_visibility="private")

    @guarded(controller, lambda msg: {ui.arithmetic: error_markdown(msg)})
    def pick_group(name, step, label):
        groups = controller.rollouts(name, step)
        g, labels, chosen = _pick(groups, label)
        if g is None:
            return {ui.arithmetic: "Select a row above."}
        headers, rows = group_rows(g, text_chars=SIDE_TEXT_CHARS)
        return {
            ui.group_plot: as_plot(plots.group_figure(g)),
            ui.table: gr.Dataframe(value=rows, headers=headers),
            ui.arithmetic: "Select a row above.",
            ui.whatif: whatif_markdown(groups, labels.index(chosen)),
        }

    ui.group.input(
        pick_group,
        [page.watched, ui.step, ui.group],
        [ui.group_plot, ui.table, ui.arithmetic, ui.whatif],
        api_visibility="private",
    )

    @guarded(controller, lambda msg: {ui.arithmetic: error_markdown(msg)})
    def pick_completion(name, step, label, measure, evt: gr.SelectData):
        index = evt.index[0] if evt is not None and isinstance(evt.index, list | tuple) and evt.index else None
        g, index = _completion(controller, name, step, label, index)
        if g is None:
            return {ui.arithmetic: "Select a row above.", ui.selected: None, ui.tokens: NO_TOKEN_SELECTION}
        selected = {"name": name, "step": g["step"], "label": group_label(g), "index": index}
        spans, note = token_view(controller, selected, measure)
        return {
            ui.arithmetic: arithmetic_markdown(g, index),
            ui.selected: selected,
            ui.tokens: spans,
            ui.token_note: note,
        }

    ui.table.select(
        pick_completion,
        [page.watched, ui.step, ui.group, ui.measure],
        [ui.arithmetic, ui.selected, ui.tokens, ui.token_note],
        api_name="rollouts_completion",
        api_visibility="private",
    )

    @guarded(controller, lambda msg: {ui.token_note: error_markdown(msg)})
    def pick_measure(selected, measure):
        spans, note = token_view(controller, selected, measure)
        return {ui.tokens: spans, ui.token_note: note}

    ui.measure.change(
        pick_measure,
        [ui.selected, ui.measure],
        [ui.tokens, ui.token_note],
        api_name="rollouts_token_measure",
        api_visibility="private",
    )

    @guarded(controller, lambda msg: {ui.probe_note: error_markdown(msg)})
    def refresh_prompts(name, current):
        choices = controller.heldout_choices(name)
        value = current if isinstance(current, str) and current else (choices[0] if choices else None)
        return {ui.probe_prompt: gr.Dropdown(choices=choices, value=value)}

    tab.select(
        refresh_prompts,
        [page.watched, ui.probe_prompt],
        [ui.probe_prompt, ui.probe_note],
        api_name="rollouts_prompts",
        api_visibility="private",
    )

    @guarded(controller, lambda msg: {ui.probe_view: "", ui.probe_note: error_markdown(msg)})
    def probe(cid, name, prompt, k, seed, request: gr.Request = None):
        result = controller.probe(name, prompt, k, seed, caller_of(request, cid))
        return {ui.probe_view: probe_html(result), ui.probe_note: probe_note(result)}

    ui.probe.click(
        probe,
        [page.client_id, page.watched, ui.probe_prompt, ui.probe_k, ui.probe_seed],
        [ui.probe_view, ui.probe_note],
        api_name="rollouts_probe",
        api_visibility="private",
        concurrency_id="sampling",
        concurrency_limit=1,
    )
