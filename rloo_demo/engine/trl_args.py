"""A RunConfig as TRL sees it: its ``RLOOConfig`` and, with LoRA on, PEFT's ``LoraConfig``."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from peft import LoraConfig
from trl import RLOOConfig

from rloo_demo.config import RunConfig
from rloo_demo.errors import ConfigError
from rloo_demo.i18n import Message


def peft_config(config: RunConfig):
    """A PEFT ``LoraConfig`` when ``use_lora`` is on, else None."""
    if not config.use_lora:
        return None
    return LoraConfig(
        task_type="CAUSAL_LM",
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,  # as with dropout in the policy: no noise in the importance ratio
        target_modules=config.lora_target_modules or "all-linear",
    )


def rloo_config(config: RunConfig, trainer_dir: str | Path, num_processes: int = 1, **overrides):
    """TRL's ``RLOOConfig`` for this run (one generation per optimisation step, logging every step)."""
    return RLOOConfig(**rloo_kwargs(config, trainer_dir, num_processes, **overrides))


def rloo_kwargs(config: RunConfig, trainer_dir: str | Path, num_processes: int = 1, **overrides) -> dict:
    """The keywords of the run's ``RLOOConfig``: the one mapping of a RunConfig to TRL's names, which the trainer
    and an exported TRL project (``trl_settings``) both read."""
    batch = config.completions_per_step
    if batch % num_processes:
        raise ConfigError({"prompts_per_step": Message("trl.processes", batch=batch, processes=num_processes)})
    kwargs = dict(
        output_dir=str(trainer_dir),
        per_device_train_batch_size=batch // num_processes,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        max_completion_length=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        beta=config.beta,
        normalize_advantages=config.normalize_advantages,
        max_steps=config.max_steps,
        seed=config.seed,
        logging_steps=1,
        save_strategy="no",
        report_to=[r.strip() for r in config.report_to.split(",") if r.strip()] or "none",
        disable_dropout=True,  # dropout noise in the sequence-level importance ratio wrecks training
        # TRL turns (gradient) checkpointing on by default; on a model this small it saves no memory that matters
        # and its recomputed forward costs ~10% of a step (scripts/bench_engine.py --ablation).
        activation_checkpointing=False,
        # bf16 is autocast over fp32 master weights: matmuls run in bf16, log_softmax (and so every logprob
        # in the importance ratio and the KL) stays fp32, which avoids the known bf16 logprob pitfall.
        bf16=config.bf16,
        fp16=False,
        # vLLM in the training process, sharing the GPU with the policy (no separate `trl vllm-serve`)
        **({"use_vllm": True, "vllm_mode": "colocate"} if config.use_vllm else {}),
        project="rloo-demo",  # the project trackers (trackio, wandb) file the run under
        use_cpu=not torch.cuda.is_available(),
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    kwargs.update(overrides)
    return kwargs


# What a run's RLOOConfig holds that belongs to this app's process, not to a TRL project on another machine: where
# the trainer writes (the project has its own folder), the device (TRL picks it there) and the progress bar (the
# app draws its own; TRL's CLI shows tqdm).
PROCESS_ONLY = ("output_dir", "use_cpu", "disable_tqdm")


def trl_settings(config: RunConfig, run_name: str | None = None) -> dict:
    """The run's settings under the names of TRL's ``trl rloo`` CLI (``RLOOConfig`` and ``ModelConfig`` fields),
    for an exported project's config.yaml (``rloo_demo.store.trl_export``): ``rloo_kwargs`` with the weights the
    trainer is given, less ``PROCESS_ONLY``, and LoRA as ``ModelConfig`` spells it."""
    names = {"run_name": run_name} if run_name else {}
    kwargs = rloo_kwargs(config, "output", reward_weights=config.weights, **names)
    settings = {k: v for k, v in kwargs.items() if k not in PROCESS_ONLY}
    lora = peft_config(config)
    if lora is not None:  # ModelConfig's lora_task_type defaults to CAUSAL_LM, as peft_config's
        settings.update(
            use_peft=True,
            lora_r=lora.r,
            lora_alpha=lora.lora_alpha,
            lora_dropout=lora.lora_dropout,
            lora_target_modules=_target_modules(lora.target_modules),
        )
    return settings


def _target_modules(target: str | set[str]) -> str | list[str]:
    """LoRA's target modules as ``ModelConfig`` must be given them. "all-linear" stays a text (PEFT's shorthand);
    ModelConfig turns a one-item list into its item, which PEFT reads as a regular expression of a module's whole
    name, so one module goes as the expression that means what the list meant: the name, or a name ending in it."""
    if isinstance(target, str):
        return target
    names = sorted(target)
    return names if len(names) > 1 else rf"(.*\.)?{re.escape(names[0])}"
