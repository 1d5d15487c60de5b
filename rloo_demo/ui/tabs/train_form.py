"""The Train form's boxes: one per form field (``forms.FIELDS``), built from the ``Widget`` its setting declares, with
a hook (``SPECIAL``) for the few whose shape depends on the server: the policy's suggestions, the rewards a server
offers, the prompts' source, the own-reward boxes, the meter's limit. ``train_tab.build`` loops over the folds and
rows and asks this module for each box, its fold and its row.
"""

from __future__ import annotations

import contextlib

import gradio as gr

from rloo_demo.config import TRACKERS, setting, tracker_problem
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.task.rewards import REWARDS
from rloo_demo.ui.common import L, Page
from rloo_demo.ui.forms import FOLDS, INSTRUCT_MODELS, OWN_REWARDS, FormField


def fold(fold: str):
    """The settings that change what a run teaches are in sight; the rest folded by purpose, titled by what is in."""
    if fold == FOLDS[0]:
        return gr.Group()
    return gr.Accordion(L(f"train.fold_{fold}"), open=False, elem_id=f"fold-{fold.replace('_', '-')}")


def row(page: Page, group: list[FormField]):
    """Fields of one row side by side (a field of no row stands alone). A row a public server does not show is
    hidden there: a GPU's settings, a module reward (it runs code), an extra classifier unless the operator allows
    other models (``Widget.shown``)."""
    if group[0].widget.row is None:
        return contextlib.nullcontext()
    limits = page.controller.limits
    shown = {w.shown for w in (f.widget for f in group)}
    hidden = limits.public and ("local" in shown or ("models" in shown and not limits.allowed_models))
    return gr.Row(visible=not hidden)


def box(page: Page, f: FormField, value):
    """A form field's box: its hook's (``SPECIAL``), or one built from its ``Widget``. Number boxes, not sliders (a
    slider's box sets a value past its end to the end without a word), and none has a minimum or a maximum
    (``train_tab``'s docstring says why)."""
    if f.name in SPECIAL:
        return SPECIAL[f.name](page, f, value)
    w, label = f.widget, L(f.label)
    common = {"label": label, "info": L(w.info) if w.info else None, "elem_id": w.elem_id}
    if w.width is not None:
        common["min_width"] = w.width
    if w.kind in ("number", "whole"):
        return gr.Number(value, precision=0 if w.kind == "whole" else None, **common)
    if w.kind == "checkbox":
        return gr.Checkbox(value, **common)
    if w.kind == "radio":
        return gr.Radio(list(setting(f.name).metadata["choices"]), value=value, **common)
    return gr.Textbox(value, **common)


def _policy(page: Page, f: FormField, value):
    limits = page.controller.limits
    open_models = not limits.public  # a public server trains the embedded (or operator-allowed) models only
    suggested = [EMBEDDED_POLICY, *limits.allowed_models]
    if open_models:  # a local server suggests the instruct models (a public one offers what it allows)
        suggested += [m for m in INSTRUCT_MODELS if m not in suggested]
    info = L("train.policy_info_open" if open_models else "train.policy_info_public")
    return gr.Dropdown(suggested, value=value, allow_custom_value=open_models, label=L(f.label), info=info)


def _rewards(page: Page, f: FormField, value):
    """The built-in rewards (task.rewards.REWARDS) a server offers: on a public one, those it allows."""
    offered = [name for name, r in REWARDS.items() if r.public or not page.controller.limits.public]
    return gr.CheckboxGroup(offered, value=value, label=L(f.label))


def _weight_box(page: Page, f: FormField, value):
    """A built-in reward's weight box, hidden where its reward is not offered (a public server, a reward it does not
    allow)."""
    offered = REWARDS[f.name.removeprefix("w_")].public or not page.controller.limits.public
    return gr.Number(value, label=L(f.label), min_width=f.widget.width, visible=offered)


def _data_source(page: Page, f: FormField, value):
    limits = page.controller.limits
    info = L("train.prompts_info_public" if limits.public else "train.prompts_info_open")
    return gr.Textbox(
        value, label=L(f.label), info=info, interactive=not limits.public or bool(limits.allowed_datasets)
    )


def _reward_box(page: Page, f: FormField, value):
    """The own-rewards fold's texts, each beside its weight box (``w_custom``, ...: a weight with a scale of 1)."""
    if f.number:
        return gr.Number(value, label=L(f.label), min_width=f.widget.width, scale=1)
    public = page.controller.limits.public
    own = {
        "custom_classifier": {"placeholder": L(f"train.custom_classifier_ph_{'public' if public else 'open'}")},
        "extra_reward": {"placeholder": L("train.extra_reward_ph"), "max_length": 60},
        "reward_module": {  # a public server runs no code of its visitors: the row is hidden, the box off
            "placeholder": "examples/rewards.py:keyword_count",
            "info": L("train.module_help"),
            "interactive": not public,
            "elem_id": "reward-module",
        },
    }
    return gr.Textbox(value, label=L(f.label), scale=3, **own[f.name])


def _variance_every(page: Page, f: FormField, value):
    # the limit is filled into the translations when the app is built (app.launch_options)
    info = L("train.variance_info_min" if page.controller.limits.min_variance_every > 1 else "train.variance_info")
    return gr.Number(value, label=L(f.label), info=info, precision=0)


def _trackers(page: Page, f: FormField, value):
    """TRL's trackers a run can report to: "none" and those installed here (``config.tracker_problem``), so the
    list never offers one that the config would refuse. A public server refuses every tracker (they write files or
    reach the network: ``public.limits``), so it hides the box, which then sends "none"."""
    installed = [name for name in TRACKERS if tracker_problem(name) is None]
    public = page.controller.limits.public
    return gr.Dropdown(["none", *installed], value=value, label=L(f.label), info=L(f.widget.info), visible=not public)


# The few boxes whose shape depends on the server (its limits) or is their own; every other one is built by ``box``.
SPECIAL = {
    "policy": _policy,
    "rewards": _rewards,
    **{f"w_{name}": _weight_box for name in REWARDS},
    "data_source": _data_source,
    "system_prompt": lambda page, f, value: gr.Textbox(
        value, label=L(f.label), max_length=page.controller.limits.max_prompt_chars, lines=1
    ),
    **{name: _reward_box for text, _, weight, *_ in OWN_REWARDS for name in (text, weight)},
    "variance_every": _variance_every,
    "report_to": _trackers,
}
