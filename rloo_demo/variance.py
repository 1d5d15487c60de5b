"""The gradient-variance meter: how noisy is each estimator's policy gradient, measured on the run's own policy?

Every estimator in ``rloo_demo.advantages.ESTIMATORS`` turns a batch of rewards into advantages ``A_i``; the
policy-gradient estimate is then

    g_hat = (1/N) * sum_i A_i * g_i,    g_i = grad_theta sum_t log pi(y_t | x, y_<t)

with ``g_i`` the score-function gradient of completion i (one backward pass per completion). With one optimisation
step per batch and the importance ratio at 1, this is the gradient of TRL's surrogate loss up to its sign.

The meter draws ``REPLICATES - 1`` more batches of K completions for the same prompts from the same policy (the
step's own batch is the first replicate), so it holds ``REPLICATES`` independent estimates of each estimator on the
same prompts. For every estimator it reports:

- ``variance``: the trace of the covariance of g_hat, ``sum_j ||g_hat_j - mean||^2 / (R - 1)`` over the replicates.
  The prompts are held fixed, so this is the noise that the choice of baseline controls; the spread due to which
  prompts were drawn is the same for every unbiased estimator and is left out.
- ``cosine``: the cosine similarity of g_hat_j to a reference gradient, the leave-one-out estimate pooled over the
  *other* R - 1 replicates ((R-1)·K completions per prompt, 4x the step's batch with R = 5), averaged over j. The
  reference never contains the batch it is compared with, so a noisy estimate cannot look good by overlap.
- ``noise_to_signal``: variance / ||mean of g_hat||^2. Scaling an estimator's advantages by c scales its variance by
  c^2 but not its direction: Dr. GRPO's advantages are exactly (K-1)/K times RLOO's, so its raw variance is lower
  while its direction is the same. This ratio does not depend on scale.

Cost: the extra generation and one backward pass per completion, (R·N of them). The meter runs every
``RunConfig.variance_every`` steps, on the training thread between two optimiser steps (so never during one), with
its own random generator, so training draws exactly what it would draw without it. It runs on single-process runs
only: in a data-parallel run each rank holds only its slice of the batch, and the meter is skipped there.

``meter_statistics`` and ``ReplicatePlan`` are the pure core, tested against a toy softmax policy whose variances
are known exactly (``tests/test_variance.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rloo_demo.advantages import ESTIMATORS, leave_one_out_advantages

REPLICATES = 5  # the step's batch and 4 fresh ones: the reference for each is 4x the step's completions
# One measurement costs about this many training steps of the same run: 4 extra batches to sample and score, and one
# backward pass per completion of all 5 (scripts/bench_engine.py --variance-every 10 --max-steps 30 --no-eval: 7.75 on
# the default run). Every N steps the meter so adds about METER_COST_STEPS / N to the training time: N >= 55 keeps it
# under 15% (the public limit, rloo_demo.limits).
METER_COST_STEPS = 8.0
MAX_METER_FLOATS = 2**28  # accumulators of (estimators + 1) x R x parameters floats: 1 GiB; beyond, the meter skips
METRIC_PREFIXES = ("variance/", "cosine/", "noise_to_signal/")


# ----------------------------------------------------------------------------- the pure core


@dataclass
class ReplicatePlan:
    """The weight of every completion's gradient in every estimate, decided from the rewards before any backward.

    ``estimates[e, j, i]``: weight of completion i of replicate j in estimator e's g_hat_j (``A_i / N``).
    ``references[j, j2, i]``: weight of completion i of replicate j2 in the reference for replicate j (zero when
    j2 == j): the leave-one-out advantage within the pooled group of the other replicates, over their count.
    """

    estimators: list[str]
    estimates: torch.Tensor  # (E, R, N)
    references: torch.Tensor | None  # (R, R, N); None when not asked for

    @classmethod
    def from_rewards(
        cls,
        rewards: Sequence[Sequence[float]],
        k: int,
        estimators: Sequence[str] | None = None,
        with_references: bool = True,
    ) -> ReplicatePlan:
        """``rewards[j]``: replicate j's rewards, flat and prompt-major (the same prompts in the same order)."""
        names = list(estimators or ESTIMATORS)
        r, n = len(rewards), len(rewards[0])
        if r < 2 or any(len(x) != n for x in rewards):
            raise ValueError("the meter needs at least 2 replicates of the same size")
        estimates = torch.zeros(len(names), r, n, dtype=torch.float64)
        for e, name in enumerate(names):
            for j in range(r):
                estimates[e, j] = torch.tensor(ESTIMATORS[name](rewards[j], k), dtype=torch.float64) / n
        if not with_references:
            return cls(names, estimates, None)
        references = torch.zeros(r, r, n, dtype=torch.float64)
        for j in range(r):
            others = [j2 for j2 in range(r) if j2 != j]
            for p in range(n // k):
                pooled = [rewards[j2][p * k + c] for j2 in others for c in range(k)]
                advantages = leave_one_out_advantages(pooled)
                for slot, (j2, c) in enumerate((j2, c) for j2 in others for c in range(k)):
                    references[j, j2, p * k + c] = advantages[slot] / (len(others) * n)
        return cls(names, estimates, references)


class GradientAccumulator:
    """Sums the completions' gradients, weighted by the plan, into every estimate and reference. Gradients arrive
    one replicate at a time (N x P) and are folded in with two matrix products, so only one replicate's gradients
    are held at once, plus (E + 1) x R parameter vectors."""

    def __init__(self, plan: ReplicatePlan, num_params: int, dtype=torch.float32):
        self.plan = plan
        e, r, _ = plan.estimates.shape
        self.estimates = torch.zeros(e, r, num_params, dtype=dtype)
        self.references = torch.zeros(r, num_params, dtype=dtype) if plan.references is not None else None
        self._est = plan.estimates.to(dtype)
        self._ref = plan.references.to(dtype) if plan.references is not None else None

    def add_replicate(self, replicate: int, gradients: torch.Tensor) -> None:
        """Fold in the score-function gradients (N x P, in batch order) of every completion of one replicate."""
        g = gradients.to(self.estimates.dtype)
        self.estimates[:, replicate] += self._est[:, replicate] @ g
        if self.references is not None:
            self.references += self._ref[:, replicate] @ g


def meter_statistics(estimates: torch.Tensor, references: torch.Tensor | None, estimators: Sequence[str]) -> dict:
    """Per estimator, ``variance`` (trace of the covariance over replicates), ``cosine`` (to the held-out reference,
    averaged over replicates; NaN without references) and ``noise_to_signal``, from estimates (E, R, P) and
    references (R, P), in the accumulators' precision (float32 for a model; the sums are BLAS matrix products)."""
    r = estimates.shape[1]
    ref_norms = torch.linalg.vector_norm(references, dim=1) if references is not None else None
    out = {}
    for e, name in enumerate(estimators):
        mean = estimates[e].mean(0)
        deviations = estimates[e] - mean
        variance = float((deviations @ deviations.T).diagonal().sum()) / (r - 1)  # matmul: fast and well summed
        cosines = []
        if references is not None:
            dots = (estimates[e] @ references.T).diagonal()
            norms = torch.linalg.vector_norm(estimates[e], dim=1) * ref_norms
            cosines = [float(dots[j] / norms[j]) for j in range(r) if norms[j] > 0]
        signal = float(mean @ mean)
        out[name] = {
            "variance": variance,
            "cosine": sum(cosines) / len(cosines) if cosines else math.nan,
            "noise_to_signal": variance / signal if signal > 0 else math.nan,
        }
    return out


def is_measured(step: int, every: int) -> bool:
    """The meter measures steps every, 2·every, ... (so a run's share of meter time never exceeds the average)."""
    return every > 0 and step % every == 0


def measurements(max_steps: int, every: int) -> int:
    """How many steps of a run the meter measures."""
    return max_steps // every if every > 0 and max_steps > 0 else 0


def metrics_record(stats: dict, seconds: float, samples: int) -> dict[str, float]:
    """The step-metric keys the meter logs: ``variance/<e>``, ``cosine/<e>``, ``noise_to_signal/<e>``, and its
    cost (``variance/seconds``) and sample count."""
    record = {"variance/seconds": seconds, "variance/samples": float(samples)}
    for name, s in stats.items():
        record[f"variance/{name}"] = s["variance"]
        record[f"cosine/{name}"] = s["cosine"]
        record[f"noise_to_signal/{name}"] = s["noise_to_signal"]
    return record


def summary_rows(stats_per_step: Sequence[dict]) -> list[dict]:
    """One row per estimator over several measured steps: variance relative to RLOO's (ratio of the mean variances),
    mean cosine to the reference, and noise-to-signal relative to RLOO's."""
    names = list(stats_per_step[0])

    def mean(name, key):
        values = [s[name][key] for s in stats_per_step if math.isfinite(s[name][key])]
        return sum(values) / len(values) if values else math.nan

    rloo_var, rloo_nts = mean("rloo", "variance"), mean("rloo", "noise_to_signal")
    return [
        {
            "estimator": name,
            "variance_vs_rloo": mean(name, "variance") / rloo_var if rloo_var > 0 else math.nan,
            "cosine_to_reference": mean(name, "cosine"),
            "noise_to_signal_vs_rloo": mean(name, "noise_to_signal") / rloo_nts if rloo_nts > 0 else math.nan,
            "variance": mean(name, "variance"),
        }
        for name in names
    ]


def markdown_table(rows: Sequence[dict]) -> str:
    """The CLI's table: one row per estimator."""
    lines = [
        "| estimator | variance_vs_rloo | cosine_to_reference | noise_to_signal_vs_rloo | variance |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['estimator']} | {row['variance_vs_rloo']:.3f} | {row['cosine_to_reference']:.3f} | "
            f"{row['noise_to_signal_vs_rloo']:.3f} | {row['variance']:.4g} |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the model side


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

    reward: Callable[[list[str], list[str]], list[float]]  # prompts, completion texts -> weighted raw reward
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
    from rloo_demo.sampling import sample_token_ids

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


def fits_in_memory(num_params: int, replicates: int = REPLICATES) -> bool:
    """Whether the accumulators of a policy with ``num_params`` trainable parameters stay under the meter's cap."""
    return (len(ESTIMATORS) + 1) * replicates * num_params <= MAX_METER_FLOATS


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
    """The trainer's own reward: its functions' weighted sum (and its clip range), as ``RLOOTrainer`` adds them."""
    weights = trainer.reward_weights.float().cpu().tolist()

    def reward(prompts: list[str], texts: list[str]) -> list[float]:
        total = [0.0] * len(texts)
        for fn, w in zip(trainer.reward_funcs, weights, strict=True):
            scores = fn(prompts=prompts, completions=texts)
            total = [t + w * (s if s is not None else 0.0) for t, s in zip(total, scores, strict=True)]
        if trainer.reward_clip_range:
            lo, hi = trainer.reward_clip_range
            total = [min(max(t, lo), hi) for t in total]
        return total

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
    from rloo_demo.prompts import encode_prompt

    ids = [encode_prompt(tokenizer, p) for p in prompts]
    width = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return [[pad] * (width - len(x)) + x for x in ids], [[0] * (width - len(x)) + [1] * len(x) for x in ids]


def measure_run(run, steps: int = 5, at: str = "trained", seed: int = 0, progress=None) -> dict:
    """The meter on a run's policy, outside training: ``steps`` batches of the run's training prompts
    (``prompts_per_step`` each, K completions per prompt, all R replicates sampled fresh), scored with the run's
    rewards, beta, sampling settings and reference (the base policy). ``at``: the trained model or the base."""
    from rloo_demo.errors import NotFound
    from rloo_demo.prompts import run_prompts
    from rloo_demo.rewards import WeightedReward
    from rloo_demo.training import load_policy

    config = run.config()
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
        reward=lambda p, t: reward(p, t),
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
        "seconds": seconds,
        "rows": summary_rows(per_step),
        "per_step": per_step,
    }
