"""The other estimators a run can train with (``RunConfig.estimator``), on the same prompts, models and budget.

- ``rloo``: this app's trainer, ``CapturingRLOOTrainer`` (TRL's ``RLOOTrainer``): A_i = r_i - mean of its K-1
  siblings, with ``beta`` * KL subtracted from the reward r_i.
- ``reinforce``: the same trainer with the baseline removed, A_i = r_i (the shaped reward; 0 for a completion no
  reward function scored, as RLOO gives it). Only the advantage step changes (``ReinforceTrainer`` overrides the
  capture's two hooks); TRL does everything else, so a difference between ``rloo`` and ``reinforce`` runs is the
  baseline's doing. Under a ``reward_offset`` C its advantages are r_i + C: the offset REINFORCE cannot remove,
  where RLOO's leave-one-out baseline removes it exactly.
- ``grpo``: TRL's own ``GRPOTrainer`` with ``scale_rewards="group"``: A_i = (r_i - group mean) / group std. Here
  ``beta`` enters the *loss* (a per-token k3 KL term against the reference), not the reward as in RLOO; the other
  GRPO settings keep TRL's defaults (``loss_type="dapo"``, token-level importance ratios). Every setting the run's
  ``RLOOConfig`` sets is carried over, so both trainers see the same batch sizes, sampling, learning rate and seed.
  A ``reward_offset`` is refused for GRPO (``RunConfig.problems``): its group mean removes any constant.

GRPO runs train and log like any run (metrics, model, evaluation), but record no rollouts: the rollout capture and
the gradient-variance meter are RLOO's (``rloo_demo.engine.capture``).

The engine's RLOO and REINFORCE trainers are the capture class with the optional speed-ups of ``rloo_demo.fast``
composed in (``with_speedups``): one policy forward per step and the engine's own decode below the recording hooks,
and the token record's after-update pass on a worker thread. This module is the one place that composes them.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from rloo_demo.advantages import final_advantages
from rloo_demo.config import ESTIMATOR_CHOICES
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.fast.fast_step import SingleForwardRLOOTrainer, backward_threads, engine_threads
from rloo_demo.fast.overlap import BackgroundAfterPass
from rloo_demo.task.rewards import sentiment_pipeline

# RLOOConfig fields that __post_init__ derives from others: GRPOConfig derives its own (setting both is an error).
_DERIVED = {"generation_batch_size", "steps_per_generation"}
# What GRPO needs set whatever RLOO's defaults are (GRPOConfig's beta defaults to 0, RLOO's does not).
_ALWAYS = (
    "beta",
    "num_generations",
    "max_completion_length",
    "temperature",
    "top_p",
    "learning_rate",
    "seed",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
)


class ReinforceTrainer(CapturingRLOOTrainer):
    """RLOO's trainer without a baseline: every completion's advantage is its own shaped reward."""

    baseline_kind = "none"

    def _baselines(self, rewards: list[float]) -> list[float]:
        return [0.0] * len(rewards)

    def _replace_advantages(self, output: dict, shaped: list[float]) -> None:
        # An unscorable completion's shaped reward is NaN (no reward function scored it): advantage 0, as TRL gives
        # it, not the -beta * KL that counting its missing reward as 0 would leave. The normalisation, if asked, is
        # TRL's after its baseline, over the scorable completions only.
        advantages = torch.tensor(final_advantages(shaped, self.normalize_advantages), dtype=torch.float32)
        rows = output["advantages"].size(0)
        start = self.accelerator.process_index * rows  # this rank's slice of the gathered batch
        output["advantages"] = advantages[start : start + rows].to(output["advantages"].device)


def grpo_config(rloo_args):
    """TRL's ``GRPOConfig`` carrying every setting the run's ``RLOOConfig`` changed from RLOO's defaults (batch,
    sampling, optimiser, logging, devices) and the shared algorithm settings, with ``scale_rewards="group"``."""
    from trl import GRPOConfig

    grpo_fields = {f.name for f in dataclasses.fields(GRPOConfig) if f.init}
    kwargs = {}
    for f in dataclasses.fields(type(rloo_args)):
        if not f.init or f.name in _DERIVED or f.name not in grpo_fields:
            continue
        value = getattr(rloo_args, f.name)
        if f.name in _ALWAYS or value != _default(f):
            kwargs[f.name] = value
    kwargs["scale_rewards"] = "group"
    return GRPOConfig(**kwargs)


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@functools.cache
def with_speedups(cls: type) -> type:
    """``cls`` (``CapturingRLOOTrainer`` or a subclass) with the speed-ups composed in. The method order is
    ``BackgroundAfterPass, cls, ..., SingleForwardRLOOTrainer, RLOOTrainer``: the recording hooks of ``cls`` see what
    the single-forward step returns, exactly as they see TRL's own."""
    if not issubclass(cls, CapturingRLOOTrainer):
        raise TypeError(f"{cls.__name__} is not a CapturingRLOOTrainer")
    return type(cls.__name__, (BackgroundAfterPass, cls, SingleForwardRLOOTrainer), {"__module__": cls.__module__})


def trainer_for(
    estimator: str, rloo_args, rloo_kwargs: dict, trainer_cls: type | None = None, speedups: bool = True
) -> tuple[type, object, dict]:
    """``(trainer class, its args, extra constructor keywords)`` for an estimator.

    ``trainer_cls`` stands in for the estimator's own class and must subclass it (a test's recorder, say);
    ``speedups`` composes ``rloo_demo.fast`` into the engine's RLOO and REINFORCE trainers."""
    if estimator == "grpo":
        from trl import GRPOTrainer  # only GRPO runs pay for importing it

        return _checked(trainer_cls, GRPOTrainer), grpo_config(rloo_args), {}
    if estimator not in ("rloo", "reinforce"):
        raise ValueError(f"unknown estimator {estimator!r}; use {', '.join(ESTIMATOR_CHOICES)}")
    cls = _checked(trainer_cls, CapturingRLOOTrainer if estimator == "rloo" else ReinforceTrainer)
    return (with_speedups(cls) if speedups else cls), rloo_args, rloo_kwargs


def _checked(trainer_cls: type | None, default: type) -> type:
    if trainer_cls is None:
        return default
    if not issubclass(trainer_cls, default):
        raise TypeError(f"{trainer_cls.__name__} does not subclass {default.__name__}")
    return trainer_cls


def set_step_threads(policy: str) -> None:
    """The step's intra-op torch threads (``rloo_demo.fast.fast_step.engine_threads``: 1 for the embedded policy)."""
    torch.set_num_threads(engine_threads(policy))


def set_backward_threads(trainer, policy: str, num_processes: int) -> None:
    """On the engine's own trainers, the backward pass's threads (2 for the embedded policy on one process)."""
    if isinstance(trainer, SingleForwardRLOOTrainer):
        trainer.use_backward_threads(backward_threads(policy, num_processes))


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def models_held(trainer) -> dict:
    """The models a trainer holds in memory, with their parameter counts: the policy, the reference (a separate copy,
    the policy's base with a LoRA adapter switched off, or none with beta = 0) and each reward function (a
    classifier's parameters; a lexicon or a rule has none). Recorded in status.json as ``models``."""
    from accelerate.utils import is_peft_model

    policy = trainer.accelerator.unwrap_model(trainer.model)
    if trainer.beta == 0.0:
        reference = None
    elif trainer.ref_model is not None:
        reference = {"kind": "separate copy", "parameters": _count(trainer.ref_model)}
    elif is_peft_model(policy):
        reference = {"kind": "the policy's base, adapter off (no copy)", "parameters": 0}
    else:
        reference = None
    rewards = []
    for fn in trainer.reward_funcs:
        name = getattr(fn, "__name__", type(fn).__name__)
        folder = getattr(fn, "model_folder", None)
        if folder is not None:
            rewards.append({"name": name, "kind": "classifier", "parameters": _count(sentiment_pipeline(folder).model)})
        elif hasattr(fn, "parameters"):
            rewards.append({"name": name, "kind": "model", "parameters": _count(fn)})
        else:
            kind = "lexicon" if name == "vader_compound" else "rule"
            rewards.append({"name": name, "kind": kind, "parameters": 0})
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    return {"policy": _count(policy), "trainable": trainable, "reference": reference, "rewards": rewards}
