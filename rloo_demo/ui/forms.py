"""The Train tab's form values <-> RunConfig, kept pure so the mapping is tested without a browser."""

from __future__ import annotations

from rloo_demo.config import RunConfig
from rloo_demo.errors import InputError

BUILTIN_REWARDS = ["vader_compound", "sentiment_classifier", "length_penalty"]
PROMPT_TEMPLATES = ["auto", "continuation", "instruction", "chat"]
# Instruct models the policy box suggests on a local server: they need the hub (or the HF cache) and a GPU.
INSTRUCT_MODELS = [
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "meta-llama/Llama-3.2-1B-Instruct",
]

# Order of the form's inputs; the Blocks pass values in this order.
FORM_FIELDS = [
    "policy",
    "rewards",
    "w_vader_compound",
    "w_sentiment_classifier",
    "w_length_penalty",
    "custom_classifier",
    "w_custom",
    "extra_reward",
    "w_extra",
    "reward_module",
    "w_module",
    "data_source",
    "prompt_template",
    "system_prompt",
    "num_generations",
    "prompts_per_step",
    "max_steps",
    "learning_rate",
    "beta",
    "max_new_tokens",
    "temperature",
    "seed",
    "normalize_advantages",
    "use_lora",
    "lora_r",
    "variance_every",
    "bf16",
    "use_vllm",
]


def defaults() -> dict:
    c = RunConfig()
    weights = dict(zip(c.rewards, c.weights, strict=True))
    return {
        "policy": c.policy,
        "rewards": list(c.rewards),
        "w_vader_compound": weights.get("vader_compound", 1.0),
        "w_sentiment_classifier": weights.get("sentiment_classifier", 1.0),
        "w_length_penalty": weights.get("length_penalty", 0.5),
        "custom_classifier": "",
        "w_custom": 1.0,
        "extra_reward": "",
        "w_extra": 1.0,
        "reward_module": "",
        "w_module": 1.0,
        "data_source": c.data_source,
        "prompt_template": c.prompt_template,
        "system_prompt": c.system_prompt or "",
        "num_generations": c.num_generations,
        "prompts_per_step": c.prompts_per_step,
        "max_steps": c.max_steps,
        "learning_rate": c.learning_rate,
        "beta": c.beta,
        "max_new_tokens": c.max_new_tokens,
        "temperature": c.temperature,
        "seed": c.seed,
        "normalize_advantages": c.normalize_advantages,
        "use_lora": c.use_lora,
        "lora_r": c.lora_r,
        "variance_every": c.variance_every,
        "bf16": c.bf16,
        "use_vllm": c.use_vllm,
    }


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
    return settings


def config_from_form(values: dict, output_dir: str = "runs") -> RunConfig:
    """Build and validate a RunConfig from the form; raises ``ConfigError`` naming every bad field."""
    config = RunConfig.from_dict(form_settings(values))
    config.output_dir = output_dir
    return config.validate()
