"""The Train tab's form values <-> RunConfig, kept pure so the mapping is tested without a browser."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rloo_demo import i18n
from rloo_demo.config import MAX_REWARD_WEIGHT, RunConfig
from rloo_demo.errors import InputError

BUILTIN_REWARDS = ["vader_compound", "sentiment_classifier", "length_penalty"]
PROMPT_TEMPLATES = ["auto", "continuation", "instruction", "chat"]
# Instruct models the policy box suggests on a local server: they need the hub (or the HF cache) and a GPU.
INSTRUCT_MODELS = [
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "meta-llama/Llama-3.2-1B-Instruct",
]


@dataclass(frozen=True)
class FormField:
    """One input of the Train form: its name (the key ``form_settings`` reads), its default, the text key of its
    label and the fold it sits in (``FOLDS``). The tab builds each widget from this row."""

    name: str
    default: Callable[[RunConfig], object]  # from the defaults of RunConfig, so the form never drifts from them
    label: str
    fold: str


# Where a field sits on the Train tab: the few settings that change what a run teaches are in sight; the rest are
# folded by purpose, each fold's title saying what is inside.
FOLDS = ("basic", "sampling", "own_rewards", "lora", "diagnostics")


def _weight(reward: str, fallback: float):
    return lambda c: dict(zip(c.rewards, c.weights, strict=True)).get(reward, fallback)


# Every input of the form, once, in the order the Blocks pass their values.
FIELDS = (
    FormField("policy", lambda c: c.policy, "train.policy", "basic"),
    FormField("rewards", lambda c: list(c.rewards), "train.rewards", "basic"),
    FormField("w_vader_compound", _weight("vader_compound", 1.0), "train.w_vader", "basic"),
    FormField("w_sentiment_classifier", _weight("sentiment_classifier", 1.0), "train.w_classifier", "basic"),
    FormField("w_length_penalty", _weight("length_penalty", 0.5), "train.w_length", "basic"),
    FormField("custom_classifier", lambda c: "", "train.custom_classifier", "own_rewards"),
    FormField("w_custom", lambda c: 1.0, "train.weight", "own_rewards"),
    FormField("extra_reward", lambda c: "", "train.extra_reward", "own_rewards"),
    FormField("w_extra", lambda c: 1.0, "train.weight", "own_rewards"),
    FormField("reward_module", lambda c: "", "train.reward_module", "own_rewards"),
    FormField("w_module", lambda c: 1.0, "train.weight", "own_rewards"),
    FormField("reward_offset", lambda c: c.reward_offset, "train.reward_offset", "own_rewards"),
    FormField("data_source", lambda c: c.data_source, "train.prompts", "sampling"),
    FormField("prompt_template", lambda c: c.prompt_template, "train.template", "sampling"),
    FormField("system_prompt", lambda c: c.system_prompt or "", "train.system_prompt", "sampling"),
    FormField("num_generations", lambda c: c.num_generations, "train.k", "basic"),
    FormField("prompts_per_step", lambda c: c.prompts_per_step, "train.prompts_per_step", "basic"),
    FormField("max_steps", lambda c: c.max_steps, "train.steps", "basic"),
    FormField("learning_rate", lambda c: c.learning_rate, "train.learning_rate", "basic"),
    FormField("beta", lambda c: c.beta, "train.beta", "basic"),
    FormField("max_new_tokens", lambda c: c.max_new_tokens, "common.max_new_tokens", "sampling"),
    FormField("temperature", lambda c: c.temperature, "common.temperature", "sampling"),
    FormField("seed", lambda c: c.seed, "common.seed", "sampling"),
    FormField("normalize_advantages", lambda c: c.normalize_advantages, "train.normalize", "lora"),
    FormField("use_lora", lambda c: c.use_lora, "train.lora", "lora"),
    FormField("lora_r", lambda c: c.lora_r, "train.lora_r", "lora"),
    FormField("variance_every", lambda c: c.variance_every, "train.variance_every", "diagnostics"),
    FormField("bf16", lambda c: c.bf16, "train.bf16", "lora"),
    FormField("use_vllm", lambda c: c.use_vllm, "train.vllm", "lora"),
)
FIELD = {f.name: f for f in FIELDS}
FORM_FIELDS = [f.name for f in FIELDS]  # the order of the form's inputs


def defaults() -> dict:
    """The form's values for a new page: RunConfig's defaults, through the field table."""
    config = RunConfig()
    return {f.name: f.default(config) for f in FIELDS}


def _whole(value):
    """gradio's number boxes send 4.0 for 4: an integral float becomes an int; anything else is passed on as it
    is, for RunConfig's type check to refuse with a message."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _text(value):
    return value.strip() if isinstance(value, str) else value


def form_settings(values) -> dict:
    """RunConfig settings from the Train form's values, unchecked: the controller checks them like any request.
    Only the shape is handled here (rewards and their weights, the optional classifier, built-in reward with a
    parameter and reward module); values pass through."""
    if not isinstance(values, dict):
        raise InputError("the form values must be a mapping of field names to values")
    chosen = values.get("rewards") if isinstance(values.get("rewards"), list) else []
    rewards = [r for r in BUILTIN_REWARDS if r in chosen]
    weights = [values.get(f"w_{r}") for r in rewards]
    custom = _text(values.get("custom_classifier"))
    if isinstance(custom, str) and custom:
        rewards.append(custom if custom.startswith("classifier:") else f"classifier:{custom}")
        weights.append(values.get("w_custom"))
    extra = _text(values.get("extra_reward"))  # keyword:<word> or length_target:<n>
    if isinstance(extra, str) and extra:
        rewards.append(extra)
        weights.append(values.get("w_extra"))
    module = _text(values.get("reward_module"))  # path.py:function (a local server only: limits refuse it elsewhere)
    if isinstance(module, str) and module:
        rewards.append(module if module.startswith("module:") else f"module:{module}")
        weights.append(values.get("w_module"))
    system = _text(values.get("system_prompt"))
    settings = {
        "policy": _text(values.get("policy")),
        "rewards": rewards,
        "reward_weights": weights,
        "data_source": _text(values.get("data_source")) or "embedded:imdb",
        "prompt_template": values.get("prompt_template") or "auto",
        "system_prompt": system if system != "" else None,
        "normalize_advantages": values.get("normalize_advantages", False),
        "use_lora": values.get("use_lora", False),
        "bf16": values.get("bf16", False),
        "use_vllm": values.get("use_vllm", False),
    }
    for k in ("num_generations", "prompts_per_step", "max_steps", "max_new_tokens", "seed", "lora_r"):
        settings[k] = _whole(values.get(k))
    settings["variance_every"] = _whole(values.get("variance_every", 0))  # a form without the meter field: off
    for k in ("learning_rate", "beta", "temperature"):
        settings[k] = values.get(k)
    settings["reward_offset"] = values.get("reward_offset", 0.0)  # a form without the offset field: none
    return settings


# A weight box is labelled "weight" beside its reward's box: a refusal names both, or three of them would read alike.
WEIGHT_OF = {"w_custom": "custom_classifier", "w_extra": "extra_reward", "w_module": "reward_module"}
# RunConfig settings the form fills from a field of another name (the completions a step are prompts x K).
CONFIG_FIELD = {"generation_batch_size": "prompts_per_step"}


def reward_sources(values: dict) -> list[str]:
    """The form field each entry of ``form_settings(values)["rewards"]`` (and of its weights) came from, in order:
    a refusal of the rewards or their weights then names the box the user typed into."""
    chosen = values.get("rewards") if isinstance(values.get("rewards"), list) else []
    sources = [r for r in BUILTIN_REWARDS if r in chosen]
    for name in ("custom_classifier", "extra_reward", "reward_module"):
        value = _text(values.get(name))
        if isinstance(value, str) and value:
            sources.append(name)
    return sources


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
        out.append((label, message))
    return out


def config_from_form(values: dict, output_dir: str = "runs") -> RunConfig:
    """Build and validate a RunConfig from the form; raises ``ConfigError`` naming every bad field."""
    config = RunConfig.from_dict(form_settings(values))
    config.output_dir = output_dir
    return config.validate()
