"""RunConfig: everything one RLOO run needs, as a plain dataclass that validates before any model loads.

It round-trips through YAML or JSON (``save`` / ``load``), becomes TRL's ``RLOOConfig`` (``to_rloo_config``) and
drives the CLI, whose flags are generated from the fields and their ``help`` metadata.

The defaults are the ones that visibly learn on a 2-core CPU in under a minute while the text stays as readable as
the base model's (``scripts/bench_engine.py``): the tutorial's lr of 1e-6 and 10 steps move a small model not at
all, and a lower beta (0.05) or higher lr (1e-3) wins more reward by collapsing into a few stock phrases.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from rloo_demo.data import EMBEDDED_SOURCE, TEMPLATES
from rloo_demo.hub import EMBEDDED_POLICY
from rloo_demo.rewards import check_reward_name, metric_name


class ConfigError(ValueError):
    """One or more invalid settings; ``problems`` maps each field to a message that says how to fix it."""

    def __init__(self, problems: dict[str, str]):
        self.problems = problems
        super().__init__("; ".join(f"{k}: {v}" for k, v in problems.items()))


def _f(default, help: str, **kw):  # noqa: A002 - mirrors argparse / TRL's "help" metadata
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class RunConfig:
    # --- model, reward, data
    policy: str = _f(EMBEDDED_POLICY, "policy to train: 'embedded:tiny-imdb-gpt2', a local folder or a hub id")
    rewards: list[str] = _f(
        ["vader_compound"],
        "reward functions: vader_compound, sentiment_classifier, length_penalty or classifier:<hub id or folder>",
    )
    reward_weights: list[float] | None = _f(None, "one weight per reward function (default: 1 each)")
    data_source: str = _f(EMBEDDED_SOURCE, "prompts: 'embedded:imdb', a .csv/.jsonl file or a hub dataset id")
    text_column: str = _f("text", "column of the data source that holds the review text")
    prompt_template: str = _f("continuation", "continuation (first words of a review) or instruction (tutorial)")
    prompt_words: int = _f(8, "words of the review that a continuation prompt keeps")

    # --- RLOO
    num_generations: int = _f(4, "K: completions sampled per prompt (the leave-one-out group size, >= 2)")
    prompts_per_step: int = _f(4, "prompts per optimisation step; a step scores prompts_per_step x K completions")
    generation_batch_size: int | None = _f(
        None, "completions per step, TRL-style; if set it must be divisible by K and overrides prompts_per_step"
    )
    max_steps: int = _f(150, "optimisation steps")
    learning_rate: float = _f(5e-4, "AdamW learning rate (constant)")
    beta: float = _f(0.1, "KL coefficient: reward -= beta * sum over tokens of (logp - logp_ref); 0 drops the ref")
    normalize_advantages: bool = _f(False, "rescale each batch's advantages to zero mean and unit std")
    max_new_tokens: int = _f(24, "tokens generated per completion")
    temperature: float = _f(1.0, "sampling temperature during training")
    top_p: float = _f(1.0, "nucleus sampling threshold during training (1 = off)")
    seed: int = _f(42, "random seed for sampling, prompt order and initialisation")

    # --- bigger models
    use_lora: bool = _f(False, "train a LoRA adapter (PEFT) instead of all weights; the reference is the base model")
    lora_r: int = _f(8, "LoRA rank")
    lora_alpha: int = _f(16, "LoRA scaling numerator (the update is scaled by alpha / r)")
    lora_target_modules: list[str] | None = _f(None, "modules to adapt (default: all linear layers)")
    bf16: bool = _f(False, "bf16 autocast on a GPU; weights and log-probabilities stay fp32")

    # --- output
    output_dir: str = _f("runs", "folder that holds one sub-folder per run")
    run_name: str | None = _f(None, "name of the run folder (default: time stamp and settings)")
    report_to: str = _f("none", "TRL trackers: none, tensorboard, trackio, wandb (comma-separated)")

    # ------------------------------------------------------------------ derived

    @property
    def completions_per_step(self) -> int:
        if self.generation_batch_size is not None:
            return self.generation_batch_size
        return self.prompts_per_step * self.num_generations

    @property
    def weights(self) -> list[float]:
        return list(self.reward_weights) if self.reward_weights is not None else [1.0] * len(self.rewards)

    @property
    def reward_metric_names(self) -> list[str]:
        return [metric_name(r) for r in self.rewards]

    # ------------------------------------------------------------------ validation

    def problems(self) -> dict[str, str]:
        """Every invalid setting, with how to fix it. Checks only what needs no model or network."""
        p: dict[str, str] = {}
        if not isinstance(self.num_generations, int) or self.num_generations < 2:
            p["num_generations"] = (
                f"K={self.num_generations}: RLOO needs at least 2 completions per prompt for a leave-one-out "
                "baseline; use 4 to 8"
            )
        if self.generation_batch_size is not None:
            if self.generation_batch_size <= 0:
                p["generation_batch_size"] = "must be a positive number of completions per step"
            elif "num_generations" not in p and self.generation_batch_size % self.num_generations:
                lo = self.generation_batch_size // self.num_generations * self.num_generations
                p["generation_batch_size"] = (
                    f"the generation batch of {self.generation_batch_size} completions must be evenly divisible by "
                    f"num_generations (K={self.num_generations}); use {max(lo, self.num_generations)} or "
                    f"{lo + self.num_generations}"
                )
        for name in ("prompts_per_step", "max_steps", "max_new_tokens", "prompt_words"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                p[name] = f"must be a positive whole number, not {value!r}"
        if not self.learning_rate > 0:
            p["learning_rate"] = f"must be > 0, not {self.learning_rate!r} (try 5e-4 for the embedded model)"
        if self.beta < 0:
            p["beta"] = f"must be >= 0, not {self.beta!r} (0 turns the KL penalty off)"
        if not self.temperature > 0:
            p["temperature"] = f"must be > 0, not {self.temperature!r}"
        if not 0 < self.top_p <= 1:
            p["top_p"] = f"must be in (0, 1], not {self.top_p!r}"
        if not self.rewards:
            p["rewards"] = "give at least one reward function, e.g. vader_compound"
        for name in self.rewards:
            try:
                check_reward_name(name)
            except ValueError as exc:
                p["rewards"] = str(exc)
        if len(set(self.reward_metric_names)) != len(self.rewards):
            p["rewards"] = "each reward function may appear only once"
        if self.reward_weights is not None and len(self.reward_weights) != len(self.rewards):
            p["reward_weights"] = (
                f"{len(self.rewards)} reward function(s) but {len(self.reward_weights)} weight(s); give one each"
            )
        if self.prompt_template not in TEMPLATES:
            p["prompt_template"] = f"unknown template {self.prompt_template!r}; use {' or '.join(TEMPLATES)}"
        src = self.data_source
        if Path(src).suffix.lower() in (".csv", ".jsonl", ".json") and not Path(src).is_file():
            p["data_source"] = f"file {src!r} does not exist; give a .csv/.jsonl path, a hub id or 'embedded:imdb'"
        pol = self.policy.strip()
        if not pol:
            p["policy"] = f"give a policy, e.g. {EMBEDDED_POLICY!r}"
        elif pol.startswith((".", "/", "~")) and not (Path(pol).expanduser() / "config.json").is_file():
            p["policy"] = f"model folder {pol!r} does not exist or has no config.json"
        if self.use_lora and (self.lora_r < 1 or self.lora_alpha < 1):
            p["lora_r"] = "lora_r and lora_alpha must be positive whole numbers (try 8 and 16)"
        if self.bf16:
            import torch

            if not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
                p["bf16"] = "bf16 needs a GPU that supports it; on a CPU leave it off (fp32)"
        if self.run_name is not None and ("/" in self.run_name or self.run_name in ("", ".", "..")):
            p["run_name"] = "must be a plain folder name without '/'"
        return p

    def validate(self) -> RunConfig:
        problems = self.problems()
        if problems:
            raise ConfigError(problems)
        return self

    # ------------------------------------------------------------------ (de)serialisation

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError({k: f"unknown setting; known settings are {', '.join(sorted(known))}" for k in unknown})
        return cls(**data)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        if path.suffix.lower() == ".json":
            path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        else:
            import yaml

            path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        path = Path(path)
        if not path.is_file():
            raise ConfigError({"config": f"config file {str(path)!r} does not exist"})
        text = path.read_text()
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ConfigError({"config": f"{str(path)!r} must hold a mapping of settings"})
        return cls.from_dict(data)

    # ------------------------------------------------------------------ TRL

    def peft_config(self):
        """A PEFT ``LoraConfig`` when ``use_lora`` is on, else None."""
        if not self.use_lora:
            return None
        from peft import LoraConfig

        return LoraConfig(
            task_type="CAUSAL_LM",
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=0.0,  # as with dropout in the policy: no noise in the importance ratio
            target_modules=self.lora_target_modules or "all-linear",
        )

    def to_rloo_config(self, trainer_dir: str | Path, num_processes: int = 1, **overrides):
        """TRL's ``RLOOConfig`` for this run (one generation per optimisation step, logging every step)."""
        import torch
        from trl import RLOOConfig

        batch = self.completions_per_step
        if batch % num_processes:
            raise ConfigError(
                {
                    "prompts_per_step": f"{batch} completions per step do not split over {num_processes} processes; "
                    f"make prompts_per_step x K a multiple of {num_processes}"
                }
            )
        kwargs = dict(
            output_dir=str(trainer_dir),
            per_device_train_batch_size=batch // num_processes,
            gradient_accumulation_steps=1,
            num_generations=self.num_generations,
            max_completion_length=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            learning_rate=self.learning_rate,
            lr_scheduler_type="constant",
            beta=self.beta,
            normalize_advantages=self.normalize_advantages,
            max_steps=self.max_steps,
            seed=self.seed,
            logging_steps=1,
            save_strategy="no",
            report_to=[r.strip() for r in self.report_to.split(",") if r.strip()] or "none",
            disable_dropout=True,  # dropout noise in the sequence-level importance ratio wrecks training
            # TRL turns (gradient) checkpointing on by default; on a model this small it saves no memory that matters
            # and its recomputed forward costs ~10% of a step (scripts/bench_engine.py --ablation).
            activation_checkpointing=False,
            # bf16 is autocast over fp32 master weights: matmuls run in bf16, log_softmax (and so every logprob
            # in the importance ratio and the KL) stays fp32, which avoids the known bf16 logprob pitfall.
            bf16=self.bf16,
            fp16=False,
            use_cpu=not torch.cuda.is_available(),
            remove_unused_columns=False,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        kwargs.update(overrides)
        return RLOOConfig(**kwargs)
