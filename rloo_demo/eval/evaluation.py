"""Base versus trained policy on held-out prompts, with the same sampling seed for both.

For every held-out prompt both models sample with the same seed; every completion is scored by each reward function
the run trained on and by a scorer it did not train on (VADER for a classifier-trained run, the classifier for a
VADER-trained run). A policy that games its reward shows up as a gain on the trained reward without one on the
held-out scorer.

The difference of the trained reward's means comes with a 95% paired bootstrap interval over prompts. A completion
gets the reward training would give it (``rloo_demo.advantages.combine_scores``): one that no trained function
scores (each returned ``None``) is unscorable, left out of the means as TRL leaves it out of its logged reward, and a
function's mean is over the completions it scored. ``kl`` is a Monte-Carlo estimate of KL(trained || base) per
completion: the mean over trained samples of ``log p_trained(y) - log p_base(y)``.

Reward models can be fooled together (README: at beta = 0 both score "great great great …" as glowing), so the
text itself is judged too (``rloo_demo.eval.judges``): distinct-2 and the repetition rate of each model's samples, and
the base model's per-token perplexity of them, with a plain warning when the trained samples have collapsed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from rloo_demo.advantages import is_scored
from rloo_demo.chat import prompt_text
from rloo_demo.config import RunConfig
from rloo_demo.eval.judges import collapse_warning, judge_texts
from rloo_demo.models.sampling import sample, sequence_logprob
from rloo_demo.task.data import run_prompts
from rloo_demo.task.rewards import WeightedReward, build_reward


def heldout_scorers(trained_on: Sequence[str]) -> list[str]:
    """Reward names to score with that the run did not train on."""
    extra = []
    if "vader_compound" not in trained_on:
        extra.append("vader_compound")
    if "sentiment_classifier" not in trained_on:
        extra.append("sentiment_classifier")
    return extra


class Scorer:
    """Every score a completion gets in an evaluation or a comparison: the functions the run trained on (and their
    weighted sum, the run's reward) plus the held-out scorers it did not train on."""

    def __init__(self, config: RunConfig):
        self.trained = WeightedReward.from_names(config.rewards, config.weights)
        self.extra = [build_reward(n) for n in heldout_scorers(config.rewards)]

    @property
    def heldout_names(self) -> list[str]:
        return [fn.__name__ for fn in self.extra]

    def __call__(
        self, prompts: Sequence[str], texts: Sequence[str]
    ) -> tuple[dict[str, list[float | None]], list[float]]:
        """``(scores by function name, the run's reward)`` for each completion: a score is ``None`` where its
        function does not apply, the reward NaN where no trained function applies (as in training)."""
        scores = self.trained.score_each(prompts, texts)
        for fn in self.extra:
            scores[fn.__name__] = fn(prompts=list(prompts), completions=list(texts))
        return scores, self.trained.combine(scores)


def scored_mean(values: Sequence[float | None]) -> float:
    """The mean of the scored values (not ``None``, not NaN), as TRL's ``nanmean`` of its logged rewards; NaN when
    there are none."""
    kept = [float(v) for v in values if is_scored(v)]
    return statistics.fmean(kept) if kept else math.nan


def bootstrap_interval(diffs: Sequence[float], n_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of paired differences: ``n_resamples`` resamples drawn at once
    as one (n_resamples x n) index array, their means sorted, the 2.5% and 97.5% order statistics returned."""
    values = np.asarray(diffs, dtype=np.float64)
    n = len(values)
    indices = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    means = np.sort(values[indices].mean(axis=1))
    return float(means[int(0.025 * n_resamples)]), float(means[int(0.975 * n_resamples) - 1])


def heldout_prompts(config: RunConfig, limit: int) -> list:
    """Held-out prompts in the run's template: texts, or for a chat run lists of messages."""
    return run_prompts(config, "heldout", limit)["prompt"]


def evaluate(
    base_model,
    trained_model,
    tokenizer,
    config: RunConfig,
    prompts: Sequence[str],
    samples_per_prompt: int = 2,
    seed: int = 0,
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Evaluate and return a JSON-ready dict (see module docstring)."""
    scorer = Scorer(config)
    max_new_tokens = max_new_tokens or config.max_new_tokens

    per_model: dict[str, dict] = {}
    for label, model in (("base", base_model), ("trained", trained_model)):
        texts, prompt_of, ids = [], [], []
        for i, prompt in enumerate(prompts):
            for s in sample(model, tokenizer, prompt, samples_per_prompt, max_new_tokens, temperature, top_p, seed + i):
                texts.append(s["text"])
                ids.append(s["token_ids"])
                prompt_of.append(prompt)
            if progress:
                progress(i + 1 + (len(prompts) if label == "trained" else 0), 2 * len(prompts))
        scores, reward = scorer(prompt_of, texts)
        per_model[label] = {"texts": texts, "ids": ids, "prompts": prompt_of, "scores": scores, "reward": reward}

    base, trained = per_model["base"], per_model["trained"]
    k = samples_per_prompt
    # Paired by prompt: both models saw the same prompts with the same seeds. A prompt none of whose samples one
    # model's reward could score has no difference to pair, and is left out.
    diffs = [
        scored_mean(trained["reward"][i * k : (i + 1) * k]) - scored_mean(base["reward"][i * k : (i + 1) * k])
        for i in range(len(prompts))
    ]
    diffs = [d for d in diffs if is_scored(d)]
    lo, hi = bootstrap_interval(diffs, seed=seed) if diffs else (math.nan, math.nan)
    # log p_base of every sample: the KL's second term for the trained samples, and the judges' perplexity
    base_logps = {
        label: [sequence_logprob(base_model, tokenizer, p, y) for p, y in zip(m["prompts"], m["ids"], strict=True)]
        for label, m in per_model.items()
    }
    kl = statistics.fmean(
        sequence_logprob(trained_model, tokenizer, p, y) - lp_base
        for p, y, lp_base in zip(trained["prompts"], trained["ids"], base_logps["trained"], strict=True)
    )
    judges = {}
    for label, m in per_model.items():
        tokens = sum(len(y) for y in m["ids"])
        judges[label] = judge_texts(m["texts"])
        judges[label]["base_perplexity"] = math.exp(-sum(base_logps[label]) / tokens) if tokens else None
    functions = list(trained["scores"])
    return {
        "num_prompts": len(prompts),
        "samples_per_prompt": k,
        "seed": seed,
        "trained_on": scorer.trained.names,
        "heldout_scorers": scorer.heldout_names,
        "base_mean_reward": scored_mean(base["reward"]),
        "trained_mean_reward": scored_mean(trained["reward"]),
        "difference": statistics.fmean(diffs) if diffs else math.nan,
        "difference_ci95": [lo, hi],
        "per_function": {
            name: {
                "base": scored_mean(base["scores"][name]),
                "trained": scored_mean(trained["scores"][name]),
            }
            for name in functions
        },
        "kl_trained_vs_base": kl,
        "judges": judges,
        "collapse_warning": collapse_warning(judges["trained"], judges["base"]),
        "base_rewards": base["reward"],
        "trained_rewards": trained["reward"],
        "samples": [
            {"prompt": prompt_text(base["prompts"][j]), "base": base["texts"][j], "trained": trained["texts"][j]}
            for j in range(0, min(len(base["texts"]), 8 * k), k)
        ],
    }


def format_report(result: dict) -> str:
    """The tutorial's two lines first, then the rest."""
    lines = [
        f"base_mean_reward={result['base_mean_reward']:.4f}",
        f"trained_mean_reward={result['trained_mean_reward']:.4f}",
        f"difference={result['difference']:+.4f}  95% bootstrap CI [{result['difference_ci95'][0]:+.4f}, "
        f"{result['difference_ci95'][1]:+.4f}]  ({result['num_prompts']} held-out prompts x "
        f"{result['samples_per_prompt']} samples, seed {result['seed']})",
    ]
    for name, m in result["per_function"].items():
        tag = "held-out scorer" if name in result["heldout_scorers"] else "trained on"
        lines.append(f"  {name:<24} base {m['base']:+.4f}  trained {m['trained']:+.4f}  ({tag})")
    lines.append(f"kl_trained_vs_base={result['kl_trained_vs_base']:.3f} nats per completion")
    lines += judges_lines(result)
    lines.append("")
    lines.append("Sample completions (same prompt, same seed):")
    for s in result["samples"][:4]:
        lines.append(f"  prompt : {s['prompt']}")
        lines.append(f"  base   : {s['base']}")
        lines.append(f"  trained: {s['trained']}")
    return "\n".join(lines)


def judges_lines(result: dict) -> list[str]:
    """The text judges of both models' samples, and the collapse warning if the trained samples crossed it."""
    judges = result.get("judges")
    if not isinstance(judges, dict) or "base" not in judges or "trained" not in judges:
        return []

    def fmt(value, spec):
        return format(value, spec) if isinstance(value, int | float) else "–"

    lines = [
        "judges of the text (the reward models cannot be fooled here):",
        f"  distinct-2       base {fmt(judges['base'].get('distinct_2'), '.3f')}  "
        f"trained {fmt(judges['trained'].get('distinct_2'), '.3f')}  (share of unique word bigrams)",
        f"  repetition       base {fmt(judges['base'].get('repetition'), '.3f')}  "
        f"trained {fmt(judges['trained'].get('repetition'), '.3f')}  (share of bigrams repeated within a sample)",
        f"  base perplexity  base {fmt(judges['base'].get('base_perplexity'), '.1f')}  "
        f"trained {fmt(judges['trained'].get('base_perplexity'), '.1f')}  (per token, under the base model)",
    ]
    if result.get("collapse_warning"):
        lines.append(result["collapse_warning"])
    return lines
