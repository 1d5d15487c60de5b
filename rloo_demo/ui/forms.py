"""The Train tab's form values <-> RunConfig, kept pure so the mapping is tested without a browser."""

from __future__ import annotations

from rloo_demo.config import ConfigError, RunConfig

BUILTIN_REWARDS = ["vader_compound", "sentiment_classifier", "length_penalty"]

# Order of the form's inputs; the Blocks pass values in this order.
FORM_FIELDS = [
    "policy",
    "rewards",
    "w_vader_compound",
    "w_sentiment_classifier",
    "w_length_penalty",
    "custom_classifier",
    "w_custom",
    "data_source",
    "prompt_template",
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
        "data_source": c.data_source,
        "prompt_template": c.prompt_template,
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
    }


def _int(name: str, value, problems: dict) -> int | None:
    try:
        if value is None or float(value) != int(float(value)):
            raise ValueError
        return int(float(value))
    except (TypeError, ValueError):
        problems[name] = f"must be a whole number, not {value!r}"
        return None


def _float(name: str, value, problems: dict) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        problems[name] = f"must be a number, not {value!r}"
        return None


def config_from_form(values: dict, output_dir: str = "runs") -> RunConfig:
    """Build and validate a RunConfig from the form; raises ``ConfigError`` naming every bad field."""
    problems: dict[str, str] = {}
    rewards = [r for r in BUILTIN_REWARDS if r in (values.get("rewards") or [])]
    weights = [_float(f"weight of {r}", values.get(f"w_{r}"), problems) for r in rewards]
    custom = (values.get("custom_classifier") or "").strip()
    if custom:
        rewards.append(custom if custom.startswith("classifier:") else f"classifier:{custom}")
        weights.append(_float("weight of the custom classifier", values.get("w_custom"), problems))
    ints = {
        k: _int(k, values.get(k), problems)
        for k in ("num_generations", "prompts_per_step", "max_steps", "max_new_tokens", "seed", "lora_r")
    }
    floats = {k: _float(k, values.get(k), problems) for k in ("learning_rate", "beta", "temperature")}
    if problems:
        raise ConfigError(problems)
    config = RunConfig(
        policy=(values.get("policy") or "").strip(),
        rewards=rewards,
        reward_weights=weights,
        data_source=(values.get("data_source") or "").strip() or "embedded:imdb",
        prompt_template=values.get("prompt_template") or "continuation",
        normalize_advantages=bool(values.get("normalize_advantages")),
        use_lora=bool(values.get("use_lora")),
        output_dir=output_dir,
        **ints,
        **floats,
    )
    return config.validate()
