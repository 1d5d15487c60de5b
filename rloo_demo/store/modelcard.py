"""The model card (README.md with Hub YAML metadata) written into every trained ``model/`` folder, so the folder can
be uploaded to the Hugging Face Hub as it is."""

from __future__ import annotations

import yaml

from rloo_demo.chat import AUTO
from rloo_demo.config import RunConfig
from rloo_demo.errors import UserError
from rloo_demo.models.templates import effective_template


def _template(config: RunConfig) -> str:
    """The template the run used: ``auto`` says what it resolved to, where the policy can still be resolved."""
    if config.prompt_template != AUTO:
        return config.prompt_template
    try:
        return f"auto: {effective_template(config)}"
    except UserError:
        return config.prompt_template


def model_card(config: RunConfig, metrics: list[dict], evaluation: dict | None = None) -> str:
    base = config.policy.removeprefix("embedded:")
    meta = {
        "base_model": base,
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["trl", "rloo", "rloo-demo", *(["lora", "peft"] if config.use_lora else [])],
    }
    first, last = (metrics[0], metrics[-1]) if metrics else ({}, {})
    lines = [
        "---",
        yaml.safe_dump(meta, sort_keys=False).strip(),
        "---",
        f"# {base} trained with RLOO",
        "",
        f"`{base}` post-trained with RLOO (REINFORCE Leave-One-Out) through TRL's `RLOOTrainer` by rloo-demo.",
        "",
        f"- reward: {' + '.join(f'{w:g} x {r}' for r, w in zip(config.rewards, config.weights, strict=True))}",
        f"- K = {config.num_generations} completions per prompt, {config.prompts_per_step} prompts per step, "
        f"{len(metrics)} of {config.max_steps} steps, lr {config.learning_rate:g}, beta {config.beta:g}",
        f"- prompts: {config.data_source} ({_template(config)} template)",
    ]
    if metrics:
        r0, r1 = first.get("reward", float("nan")), last.get("reward", float("nan"))
        lines.append(
            f"- training reward {r0:+.3f} (step 1) -> {r1:+.3f} (step {last.get('step')}), "
            f"KL to reference {last.get('kl', 0.0):.3f} nats/token"
        )
    if evaluation:
        lo, hi = evaluation["difference_ci95"]
        lines += [
            "",
            "## Evaluation (held-out prompts, same sampling seed for base and trained)",
            "",
            f"- base_mean_reward={evaluation['base_mean_reward']:.4f}",
            f"- trained_mean_reward={evaluation['trained_mean_reward']:.4f}",
            f"- difference {evaluation['difference']:+.4f}, 95% bootstrap CI [{lo:+.4f}, {hi:+.4f}] over "
            f"{evaluation['num_prompts']} prompts",
        ]
        for name, m in evaluation["per_function"].items():
            held = " (not trained on)" if name in evaluation.get("heldout_scorers", []) else ""
            lines.append(f"- {name}{held}: base {m['base']:+.4f}, trained {m['trained']:+.4f}")
    lines += ["", "## Config", "", "```yaml", yaml.safe_dump(config.to_dict(), sort_keys=False).strip(), "```", ""]
    return "\n".join(lines)
