"""Rollouts tab: every prompt group of a step, why each completion was pushed up or down."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

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
"""


def build() -> SimpleNamespace:
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
            with gr.Accordion("What am I looking at?", open=False):
                gr.Markdown(EXPLANATION)
    return ui
