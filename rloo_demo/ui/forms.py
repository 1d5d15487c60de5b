"""The Train tab's form values <-> RunConfig, kept pure so the mapping is tested without a browser.

Nothing here lists a setting: the form is read from the declarations. A setting is on the form when its RunConfig
field's metadata carries a ``Widget`` (``rloo_demo.settings``); each built-in reward of ``task.rewards.REWARDS`` is a
choice of the rewards box and has a weight box; the own-rewards fold opens with its three boxes (``OWN_REWARDS``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from rloo_demo import i18n
from rloo_demo.config import MAX_REWARD_WEIGHT, RunConfig
from rloo_demo.errors import InputError
from rloo_demo.i18n import Message, in_locale
from rloo_demo.settings import Widget
from rloo_demo.task.rewards import CLASSIFIER_PREFIX, MODULE_PREFIX, REWARDS

BUILTIN_REWARDS = list(REWARDS)
# Instruct models the policy box suggests on a local server: they need the hub (or the HF cache) and a GPU.
INSTRUCT_MODELS = [
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "meta-llama/Llama-3.2-1B-Instruct",
]


@dataclass(frozen=True)
class FormField:
    """One input of the Train form: its name (the key ``form_settings`` reads), its default and its ``Widget``
    (the text key of its label, the fold it sits in, its kind). The tab builds each widget from this row."""

    name: str
    default: Callable[[RunConfig], object]  # from the defaults of RunConfig, so the form never drifts from them
    widget: Widget

    @property
    def label(self) -> str:
        return self.widget.label

    @property
    def fold(self) -> str:
        return self.widget.fold

    @property
    def number(self) -> bool:
        """Whether the field is a number box (not a switch or a text)."""
        return self.widget.kind in ("number", "whole")


# Where a field sits on the Train tab: the few settings that change what a run teaches are in sight; the rest are
# folded by purpose, each fold's title saying what is inside (its text key: ``train.fold_<name>``).
FOLDS = ("basic", "sampling", "own_rewards", "lora", "diagnostics")
FOLD_NOTES = {"own_rewards": "train.reward_help"}  # a note under a fold's fields

# The own-rewards fold's boxes, each a text beside its weight: (text field, its label key, weight field, the prefix a
# bare value gets, where it is shown: ``Widget.shown``). The extra reward is keyword:<word> or length_target:<n>; a
# module runs code, so a public server shows no box for it (and its limits refuse one anyway).
OWN_REWARDS = (
    ("custom_classifier", "train.custom_classifier", "w_custom", CLASSIFIER_PREFIX, "models"),
    ("extra_reward", "train.extra_reward", "w_extra", "", "always"),
    ("reward_module", "train.reward_module", "w_module", MODULE_PREFIX, "local"),
)


def _weight(reward: str, fallback: float):
    return lambda c: dict(zip(c.rewards, c.weights, strict=True)).get(reward, fallback)


def _setting(name: str):
    """A setting's form value in a config: a list copied, no text (None) as an empty box."""
    return lambda c: list(v) if isinstance(v := getattr(c, name), list) else "" if v is None else v


def _form_fields() -> tuple[FormField, ...]:
    """Every input of the form, fold by fold, in the order the page shows them (and the Blocks pass their values):
    the settings with a ``Widget`` in RunConfig's order, each built-in reward's weight box after the rewards box,
    and the own-rewards fold's boxes first in their fold."""
    out = []
    for fold in FOLDS:
        if fold == "own_rewards":
            for text, label, weight, _, shown in OWN_REWARDS:
                out.append(FormField(text, lambda c: "", Widget(fold, label, "text", text, shown=shown)))
                out.append(
                    FormField(weight, lambda c: 1.0, Widget(fold, "train.weight", row=text, width=80, shown=shown))
                )
        for f in fields(RunConfig):
            widget = f.metadata.get("form")
            if widget is None or widget.fold != fold:
                continue
            out.append(FormField(f.name, _setting(f.name), widget))
            if f.name == "rewards":
                out += [
                    FormField(f"w_{name}", _weight(name, reward.weight), Widget(fold, reward.label, row="w", width=80))
                    for name, reward in REWARDS.items()
                ]
    unknown = {f.widget.fold for f in out} - set(FOLDS)
    if unknown:  # a typo in a Widget's fold: the field would not be on the page at all
        raise ValueError(f"no fold {sorted(unknown)} on the Train form; folds: {', '.join(FOLDS)}")
    return tuple(out)


FIELDS = _form_fields()
FIELD = {f.name: f for f in FIELDS}
FORM_FIELDS = [f.name for f in FIELDS]  # the order of the form's inputs


_DEFAULTS = RunConfig()


def defaults() -> dict:
    """The form's values for a new page: RunConfig's defaults, through the field table."""
    return {f.name: f.default(_DEFAULTS) for f in FIELDS}


def reward_help(locale: str = "en", public: bool = False) -> str:
    """The built-in rewards' part of the form's reward help, in ``locale``: each reward's name and what it scores
    (its own help key), those a public server offers where ``public``."""
    shown = [(name, r) for name, r in REWARDS.items() if r.public or not public]
    return " · ".join(f"**{name}**: {i18n.t(locale, r.help)}" for name, r in shown)


def _whole(value):
    """gradio's number boxes send 4.0 for 4: an integral float becomes an int; anything else is passed on as it
    is, for RunConfig's type check to refuse with a message."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _text(value):
    return value.strip() if isinstance(value, str) else value


_DEFAULT_SETTINGS = _DEFAULTS.to_dict()


def form_settings(values) -> dict:
    """RunConfig settings from the Train form's values, unchecked: the controller checks them like any request.
    Only the shape is handled here (rewards and their weights from the check boxes and the own-rewards fold, the
    number boxes' whole numbers, texts stripped, an emptied optional text as none); values pass through, and a
    field the form did not send reads as the setting's default."""
    if not isinstance(values, dict):
        raise InputError(Message("form.not_mapping"))
    chosen = values.get("rewards") if isinstance(values.get("rewards"), list) else []
    rewards = [r for r in BUILTIN_REWARDS if r in chosen]
    weights = [values.get(f"w_{r}") for r in rewards]
    for text, _, weight, prefix, _ in OWN_REWARDS:  # a bare classifier or module gets its prefix
        value = _text(values.get(text))
        if isinstance(value, str) and value:
            rewards.append(value if value.startswith(prefix) else prefix + value)
            weights.append(values.get(weight))
    settings = {"rewards": rewards, "reward_weights": weights}
    for f in FIELDS:
        if f.name == "rewards" or f.name not in _DEFAULT_SETTINGS:
            continue
        default = _DEFAULT_SETTINGS[f.name]
        value = values.get(f.name, default)  # an emptied Prompts field stays empty (``form_problems``)
        if f.widget.kind == "whole":
            value = _whole(value)
        elif f.widget.kind in ("text", "dropdown"):
            value = _text(value)
            value = None if value == "" and default is None else value  # an emptied system prompt: none
        elif f.widget.kind == "radio":
            value = value or default
        settings[f.name] = value
    return settings


# A weight box is labelled "weight" beside its reward's box: a refusal names both, or three of them would read alike.
WEIGHT_OF = {weight: text for text, _, weight, _, _ in OWN_REWARDS}
# RunConfig settings the form fills from a field of another name (the completions a step are prompts x K).
CONFIG_FIELD = {"generation_batch_size": "prompts_per_step"}


def reward_sources(values: dict) -> list[str]:
    """The form field each entry of ``form_settings(values)["rewards"]`` (and of its weights) came from, in order:
    a refusal of the rewards or their weights then names the box the user typed into."""
    chosen = values.get("rewards") if isinstance(values.get("rewards"), list) else []
    sources = [r for r in BUILTIN_REWARDS if r in chosen]
    for name, *_ in OWN_REWARDS:
        value = _text(values.get(name))
        if isinstance(value, str) and value:
            sources.append(name)
    return sources


def form_problems(values: dict) -> dict[str, Message]:
    """What the form itself refuses, by field name, before RunConfig sees the values: a box left empty, said in
    words (an emptied number box arrives as None, which RunConfig would call "not [None]"), and an emptied Prompts
    field (which would otherwise train on something the user did not choose)."""
    if not isinstance(values, dict):
        return {}
    sources = reward_sources(values)
    weights = {_weight_field(s) for s in sources}
    problems: dict[str, Message] = {}
    for f in FIELDS:
        if f.name in values and values[f.name] is None and f.number:
            if f.name.startswith("w_"):
                if f.name in weights:  # the weight of a reward not chosen is not read
                    problems[f.name] = Message("form.weight_empty")
            else:
                problems[f.name] = Message("form.number_empty")
    data = values.get("data_source", "embedded:imdb")
    if isinstance(data, str) and not data.strip():
        problems["data_source"] = Message("form.prompts_empty")
    return problems


def _bad_weight(weight) -> bool:
    number = isinstance(weight, int | float) and not isinstance(weight, bool)
    return not number or weight != weight or abs(weight) > MAX_REWARD_WEIGHT


def problem_fields(key: str, message: str, values: dict) -> list[str]:
    """The form fields a RunConfig problem is about: the field of the same name, the weight boxes that hold a bad
    weight, or the reward box whose text the message quotes; a setting the form does not show keeps its key."""
    if key == "reward_weights":
        settings = form_settings(values)
        sources = reward_sources(values)
        bad = [_weight_field(s) for s, w in zip(sources, settings["reward_weights"], strict=False) if _bad_weight(w)]
        return bad or ["rewards"]
    if key == "rewards":
        settings = form_settings(values)
        quoted = [s for s, r in zip(reward_sources(values), settings["rewards"], strict=False) if r in message]
        return quoted[:1] if quoted and quoted[0] in FIELD else ["rewards"]
    key = CONFIG_FIELD.get(key, key)
    return [key] if key in FIELD else []


def _weight_field(source: str) -> str:
    if source in BUILTIN_REWARDS:
        return f"w_{source}"
    return next(w for w, owner in WEIGHT_OF.items() if owner == source)


def field_label(name: str, locale: str = "en") -> str:
    """A form field's label as the page shows it in ``locale``; a weight box with its reward's label."""
    label = i18n.t(locale, FIELD[name].label)
    if name in WEIGHT_OF:
        label += f" ({i18n.t(locale, FIELD[WEIGHT_OF[name]].label)})"
    return label


def labelled_problems(problems: dict[str, str], values: dict, locale: str = "en") -> list[tuple[str, str]]:
    """``(label, message)`` for each problem of a config built from the form: the label the user sees beside the
    field, in the page's language, instead of RunConfig's key (``reward_weights``); a key the form has no field
    for (a limit on a setting it does not show) stays as it is."""
    out = []
    for key, message in problems.items():
        names = problem_fields(key, message, values)
        label = ", ".join(field_label(n, locale) for n in names) if names else key
        out.append((label, in_locale(message, locale)))
    return out


def without_refused(problems: dict, own: dict, values: dict) -> dict:
    """``problems`` of RunConfig less those about a field the form already refused (``form_problems``): an
    emptied weight is said once, in words, not again as RunConfig's "not [None]"."""
    return {k: v for k, v in problems.items() if not set(problem_fields(k, v, values)) & set(own)}


def config_from_form(values: dict, output_dir: str = "runs") -> RunConfig:
    """Build and validate a RunConfig from the form; raises ``ConfigError`` naming every bad field."""
    config = RunConfig.from_dict(form_settings(values))
    config.output_dir = output_dir
    return config.validate()
