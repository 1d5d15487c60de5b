"""The gradient-variance meter on a policy: replicate batches sampled, each completion's score-function gradient
taken, and every estimator's policy gradient formed from them (``rloo_demo.engine.variance`` says what is measured
and holds the pure statistics). ``TrainingMeter`` measures during training; ``measure_run`` measures a finished run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rloo_demo.advantages import combine_scores
from rloo_demo.engine.variance import (
    REPLICATES,
    GradientAccumulator,
    ReplicatePlan,
    fits_in_memory,
    is_measured,
    meter_statistics,
    metrics_record,
    summary_rows,
)
from rloo_demo.errors import NotFound
from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import sample_token_ids
from rloo_demo.models.templates import encode_prompt
from rloo_demo.task.data import run_prompts
from rloo_demo.task.rewards import WeightedReward


def trainable_parameters(model) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _batch(prompt_ids, prompt_mask, completions, device):
    """A prompt row (as the trainer padded it, with its mask) followed by each completion, right-padded."""
    prompt_mask = list(prompt_mask) if prompt_mask is not None else [1] * len(prompt_ids)
    width = max(len(c) for c in completions)
    ids = torch.zeros(len(completions), len(prompt_ids) + width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, c in enumerate(completions):
        ids[row, : len(prompt_ids) + len(c)] = torch.tensor(list(prompt_ids) + list(c), dtype=torch.long)
        mask[row, : len(prompt_ids) + len(c)] = torch.tensor(prompt_mask + [1] * len(c), dtype=torch.long)
    return ids.to(device), mask.to(device)


def _completion_logps(model, ids, mask, prompt_len: int, temperature: float):
    """Per-row sum of the completion tokens' log-probabilities; logits divided by the temperature, as TRL does."""
    logits = model(input_ids=ids, attention_mask=mask).logits[:, prompt_len - 1 : -1].float() / temperature
    logps = logits.log_softmax(-1).gather(-1, ids[:, prompt_len:, None]).squeeze(-1)
    return (logps * mask[:, prompt_len:]).sum(-1)


def score_gradient(model, params, prompt_ids, completion_ids, temperature: float = 1.0, prompt_mask=None):
    """g_i: the gradient of one completion's log-probability, flattened over the trainable parameters.

    The prompt is given as the trainer padded it (``prompt_mask`` 0 on padding), so the forward pass is the one
    TRL's loss makes. ``torch.autograd.grad`` leaves the parameters' ``.grad`` (the trainer's) untouched."""
    device = next(model.parameters()).device
    ids, mask = _batch(prompt_ids, prompt_mask, [completion_ids], device)
    with torch.enable_grad():
        logp = _completion_logps(model, ids, mask, len(prompt_ids), temperature)[0]
        grads = torch.autograd.grad(logp, params, allow_unused=True)
    flat = [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params, strict=True)]
    return torch.cat(flat)


@torch.no_grad()
def completion_logprobs(model, prompt_ids, completions, temperature: float = 1.0, prompt_mask=None) -> list[float]:
    """Log-probabilities of several completions of one prompt, in one batch (no grad)."""
    if not completions:
        return []
    ids, mask = _batch(prompt_ids, prompt_mask, completions, next(model.parameters()).device)
    return _completion_logps(model, ids, mask, len(prompt_ids), temperature).tolist()


@dataclass
class MeterInputs:
    """What the meter needs about a step: the prompts (text, and token ids as the trainer padded them, with their
    masks), K, and optionally the step's own batch (completion ids, flat and prompt-major, and the shaped rewards the
    trainer used) as the first replicate."""

    prompts: list[str]
    prompt_ids: list[list[int]]
    k: int
    prompt_masks: list[list[int]] | None = None
    completions: list[list[int]] | None = None
    rewards: list[float] | None = None

    def mask(self, p: int) -> list[int]:
        return self.prompt_masks[p] if self.prompt_masks is not None else [1] * len(self.prompt_ids[p])

    def unpadded(self, p: int) -> list[int]:
        return [t for t, m in zip(self.prompt_ids[p], self.mask(p), strict=True) if m]


@dataclass
class MeterSettings:
    """The run's sampling and reward settings the extra replicates are drawn and scored with."""

    # prompts, completion texts -> the combined reward, the run's reward_offset included (``combine_scores``)
    reward: Callable[[list[str], list[str]], list[float]]
    beta: float
    temperature: float
    top_p: float
    max_new_tokens: int
    replicates: int = REPLICATES


def measure(
    policy,
    tokenizer,
    inputs: MeterInputs,
    settings: MeterSettings,
    seed: int,
    reference_logprobs: Callable[[list[int], list[int], list[list[int]]], list[float]] | None = None,
) -> dict:
    """Measure every estimator on one step: ``{"stats": {estimator: {...}}, "seconds", "samples"}``.

    ``reference_logprobs(prompt_ids, prompt_mask, completions)`` gives the reference model's log-probabilities (for
    the KL term of the shaped reward); it is needed when ``settings.beta != 0``."""

    start = time.perf_counter()
    k, prompts = inputs.k, inputs.prompt_ids
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    replicates: list[list[list[int]]] = []
    rewards: list[list[float]] = []
    if inputs.completions is not None:
        replicates.append([list(c) for c in inputs.completions])
        rewards.append([float(r) for r in inputs.rewards])
    eos = tokenizer.eos_token_id
    extra = settings.replicates - len(replicates)
    per_prompt, shaped = [], []  # per prompt: extra * K completions (one sampling call) and their shaped rewards
    for p, ids in enumerate(prompts):
        batch = sample_token_ids(
            policy,
            inputs.unpadded(p),
            extra * k,
            settings.max_new_tokens,
            settings.temperature,
            settings.top_p,
            generator,
            eos,
        )
        texts = tokenizer.batch_decode(batch, skip_special_tokens=True)
        reward = settings.reward([inputs.prompts[p]] * len(batch), texts)
        if settings.beta:
            pol = completion_logprobs(policy, ids, batch, settings.temperature, inputs.mask(p))
            ref = reference_logprobs(ids, inputs.mask(p), batch)
            reward = [r - settings.beta * (a - b) for r, a, b in zip(reward, pol, ref, strict=True)]
        per_prompt.append(batch)
        shaped.append(list(reward))
    for j in range(extra):  # replicate j takes the j-th K completions of every prompt
        replicates.append([c for batch in per_prompt for c in batch[j * k : (j + 1) * k]])
        rewards.append([r for values in shaped for r in values[j * k : (j + 1) * k]])
    plan = ReplicatePlan.from_rewards(rewards, k)
    params = trainable_parameters(policy)
    accumulator = GradientAccumulator(plan, sum(p.numel() for p in params))
    for j, completions in enumerate(replicates):
        gradients = torch.stack(
            [
                score_gradient(policy, params, prompts[i // k], c, settings.temperature, inputs.mask(i // k))
                for i, c in enumerate(completions)
            ]
        )
        accumulator.add_replicate(j, gradients)
    stats = meter_statistics(accumulator.estimates, accumulator.references, plan.estimators)
    samples = sum(len(c) for c in replicates)
    return {"stats": stats, "seconds": time.perf_counter() - start, "samples": samples}


# ----------------------------------------------------------------------------- during training


class TrainingMeter:
    """A batch observer for ``CapturingRLOOTrainer.batch_observers``: measures on steps every, 2·every, ... and
    returns the metrics to log with the step (``variance/<e>``, ``cosine/<e>``, ...).

    It runs inside the trainer's batch preparation, on the training thread: after the batch is scored and before
    the loss, so never while the optimiser changes the weights, and it leaves the parameters' ``.grad`` and torch's
    global random state alone. Skipped (with one log line) in multi-process runs and for policies too large for
    its accumulators."""

    def __init__(self, every: int, seed: int):
        self.every = every
        self.seed = seed
        self._warned: set[str] = set()

    def due(self, step: int) -> bool:
        return is_measured(step, self.every)

    def _skip(self, reason: str) -> None:
        if reason not in self._warned:
            import logging

            logging.getLogger(__name__).warning("gradient-variance meter skipped: %s", reason)
            self._warned.add(reason)

    def __call__(self, trainer, output: dict) -> dict[str, float] | None:
        step = trainer.state.global_step + 1
        if not self.due(step):
            return None
        acc = trainer.accelerator
        if acc.num_processes > 1:
            self._skip("a multi-process run holds only a slice of each batch per rank")
            return None
        model = acc.unwrap_model(trainer.model)
        if not fits_in_memory(sum(p.numel() for p in trainable_parameters(model))):
            self._skip("the policy has too many trainable parameters for the meter's accumulators (try LoRA)")
            return None
        k = trainer.num_generations
        groups = trainer.last_rollouts
        prompt_ids, prompt_mask = output["prompt_ids"].cpu(), output["prompt_mask"].cpu()
        completion_ids, completion_mask = output["completion_ids"].cpu(), output["completion_mask"].cpu().bool()
        inputs = MeterInputs(
            prompts=[g["prompt"] for g in groups],
            prompt_ids=[prompt_ids[p * k].tolist() for p in range(len(groups))],
            prompt_masks=[prompt_mask[p * k].tolist() for p in range(len(groups))],
            k=k,
            completions=[row[m].tolist() for row, m in zip(completion_ids, completion_mask, strict=True)],
            rewards=[c["shaped_reward"] for g in groups for c in g["completions"]],
        )
        settings = MeterSettings(
            reward=_trainer_reward(trainer),
            beta=trainer.beta,
            temperature=trainer.temperature,
            top_p=trainer.top_p,
            max_new_tokens=trainer.max_completion_length,
        )
        seed = (self.seed * 1_000_003 + step) % 2**63
        result = measure(model, trainer.processing_class, inputs, settings, seed, _reference(trainer, model))
        return metrics_record(result["stats"], result["seconds"], result["samples"])


def _trainer_reward(trainer) -> Callable[[list[str], list[str]], list[float]]:
    """The trainer's own reward: its functions' scores combined with its weights, clip range and reward offset by
    ``combine_scores``, the definition the trainer's record uses, so the extra replicates are scored as the step's
    own batch was (NaN for a completion no function scored; the estimators give it advantage 0)."""
    weights = trainer.reward_weights.float().cpu().tolist()[: len(trainer.reward_funcs)]  # not the offset's column
    offset = getattr(trainer, "reward_offset", 0.0)

    def reward(prompts: list[str], texts: list[str]) -> list[float]:
        columns = [fn(prompts=prompts, completions=texts) for fn in trainer.reward_funcs]
        return combine_scores(columns, weights, trainer.reward_clip_range, offset)

    return reward


def _reference(trainer, model):
    """The reference model's log-probabilities, as the trainer gets them (a separate model, or the base of a LoRA
    adapter), or None when beta = 0 and no reference is loaded."""
    if trainer.beta == 0.0:
        return None
    temperature = trainer.temperature
    if trainer.ref_model is not None:
        ref = trainer.ref_model
        return lambda ids, mask, batch: completion_logprobs(ref, ids, batch, temperature, mask)
    from trl.trainer.utils import use_adapter

    def adapter_off(ids, mask, batch):
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return completion_logprobs(model, ids, batch, temperature, mask)

    return adapter_off


# ----------------------------------------------------------------------------- after training (the CLI)


def left_padded(tokenizer, prompts: Sequence) -> tuple[list[list[int]], list[list[int]]]:
    """Prompt ids left-padded to a common width with their masks, as TRL batches them (the meter scores each
    completion after its prompt row exactly as the trainer's loss would)."""

    ids = [encode_prompt(tokenizer, p) for p in prompts]
    width = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return [[pad] * (width - len(x)) + x for x in ids], [[0] * (width - len(x)) + [1] * len(x) for x in ids]


def measure_run(
    run, steps: int = 5, at: str = "trained", seed: int = 0, progress=None, reward_offset: float | None = None
) -> dict:
    """The meter on a run's policy, outside training: ``steps`` batches of the run's training prompts
    (``prompts_per_step`` each, K completions per prompt, all R replicates sampled fresh), scored with the run's
    rewards, beta, sampling settings and reference (the base policy). ``at``: the trained model or the base.
    ``reward_offset`` replaces the run's own (``RunConfig.reward_offset``): the same policy and draws measured under
    another constant added to every reward, where REINFORCE's variance grows and leave-one-out's does not."""

    config = run.config()
    offset = config.reward_offset if reward_offset is None else float(reward_offset)
    if at == "trained" and run.model_dir is None:
        raise NotFound(f"run {run.name!r} has no trained model yet; use --at base or train it first")
    policy, tokenizer = load_policy(str(run.model_dir) if at == "trained" else config.policy)
    reference = load_policy(config.policy)[0] if config.beta else None
    params = trainable_parameters(policy)
    if not fits_in_memory(sum(p.numel() for p in params)):
        raise NotFound("this policy has too many parameters for the meter's accumulators")
    n = (
        config.prompts_per_step
        if config.generation_batch_size is None
        else config.completions_per_step // config.num_generations
    )
    # The run's own template (``auto`` resolved against its policy), so the meter sees the prompts it trained on.
    prompts = run_prompts(config, "train", steps * n)["prompt"]
    reward = WeightedReward.from_names(config.rewards, config.weights)
    settings = MeterSettings(
        reward=lambda p, t: combine_scores(
            list(reward.score_each(p, t).values()), reward.weights, reward.clip_range, offset
        ),
        beta=config.beta,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
    )
    ref = (
        (lambda ids, mask, batch: completion_logprobs(reference, ids, batch, config.temperature, mask))
        if reference is not None
        else None
    )
    per_step = []
    seconds = 0.0
    for s in range(steps):
        batch = list(prompts[s * n : (s + 1) * n])
        if not batch:
            break
        ids, masks = left_padded(tokenizer, batch)
        inputs = MeterInputs(prompts=batch, prompt_ids=ids, prompt_masks=masks, k=config.num_generations)
        result = measure(policy, tokenizer, inputs, settings, seed * 1_000_003 + s, ref)
        per_step.append(result["stats"])
        seconds += result["seconds"]
        if progress:
            progress(s + 1, steps)
    return {
        "run": run.name,
        "at": at,
        "steps": len(per_step),
        "prompts_per_step": n,
        "k": config.num_generations,
        "replicates": REPLICATES,
        "reward_offset": offset,
        "seconds": seconds,
        "rows": summary_rows(per_step),
        "per_step": per_step,
    }
