"""RunConfig: everything one RLOO run needs, as a plain dataclass that validates before any model loads.

It round-trips through YAML or JSON (``to_text`` / ``load``), becomes TRL's ``RLOOConfig``
(``rloo_demo.engine.trl_args``) and drives the CLI, whose flags are generated from the fields and their ``help``
metadata.

The defaults are the ones that visibly learn on a 2-core CPU in about a minute while the text stays as readable as
the base model's (``scripts/bench_engine.py``): the tutorial's lr of 1e-6 and 10 steps move a small model not at
all, a higher lr (1e-3) wins reward by collapsing into a few stock phrases, and beta 0.1 makes the embedded policy
(which ends sentences readily) shorten its completions to pay less KL, summed over tokens, instead of learning.
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from rloo_demo.advantages import MAX_REWARD_OFFSET
from rloo_demo.chat import AUTO, CHAT
from rloo_demo.errors import ConfigError, UserError
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.task.data import EMBEDDED_SOURCE, TEMPLATES, is_local_file
from rloo_demo.task.rewards import check_reward_name, metric_name

# A run's config.yaml ends with a top-level ``launch:`` block (world size, backend, each rank's pid) written by
# ``rloo_demo.engine.distributed``; ``load`` sets it aside, so the file still loads with ``--config``.
LAUNCH_KEY = "launch"


MAX_CONFIG_CHARS = 20_000  # a RunConfig in JSON is about 700 characters
MAX_SEED = 2**32 - 1  # numpy's and torch's seeding accept [0, 2**32)
RUN_NAME_RULE = "use 1 to 100 of A-Z a-z 0-9 . _ -, not starting with '.'"
_RUN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
_NAME = re.compile(r"[A-Za-z0-9_.]{1,100}")
TRACKERS = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}  # report_to name -> module
ESTIMATOR_CHOICES = ("rloo", "reinforce", "grpo")  # RunConfig.estimator; the trainers are in rloo_demo.engine.trainers
TRACKER_INSTALL = {"trackio": "pip install 'rloo-demo[trackio]' (or trackio==0.43.0)"}
PROMPT_TEMPLATES = (AUTO, *TEMPLATES)
MAX_SYSTEM_PROMPT_CHARS = 4000
# Sampling temperatures accepted anywhere (training, Compare, evaluate, infer): below 0.01 the logits overflow to inf.
TEMPERATURE_RANGE = (0.01, 10.0)
# Past these a run "finishes" with NaN rewards (rewards are in [-1, 1]; 1e300 overflows float32 at once).
MAX_BETA = 100.0
MAX_REWARD_WEIGHT = 1000.0


def is_valid_run_name(name) -> bool:
    """A run name is a plain folder name: it cannot climb out of the runs folder or inject markup."""
    return isinstance(name, str) and _RUN_NAME.fullmatch(name) is not None


def tracker_problem(report_to: str) -> str | None:
    """Why ``report_to`` cannot be used here (unknown or not installed), or None."""
    import importlib.util

    for name in [r.strip() for r in report_to.split(",") if r.strip()]:
        if name == "none":
            continue
        if name not in TRACKERS:
            return f"unknown tracker {_short_repr(name)}; use none or {', '.join(TRACKERS)} (comma-separated)"
        if importlib.util.find_spec(TRACKERS[name]) is None:
            install = TRACKER_INSTALL.get(name, f"pip install {TRACKERS[name]}")
            return f"tracker {name!r} is not installed here; {install}, or use none"
    return None


def vllm_problem() -> str | None:
    """Why vLLM generation cannot run here (vllm missing, or no GPU), or None."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed here; on a machine with a GPU, pip install vllm, or leave use_vllm off"
    import torch

    if not torch.cuda.is_available():
        return "vLLM generates on a GPU and this machine has none; leave use_vllm off (transformers generates)"
    return None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def text_problem(value: str) -> str | None:
    """Why a text cannot be used: a lone surrogate ("\\ud800", JSON's escape) no file, tokenizer or answer encodes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode text (a lone surrogate at character {exc.start})"
    return None


def _short_repr(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_ok(value, hint) -> bool:
    """Whether ``value`` fits a RunConfig annotation, the way JSON would carry it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_type_ok(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and len(value) <= 64 and all(_type_ok(v, args[0]) for v in value)
    raise TypeError(f"no type check for {hint}")


def _describe(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_describe(a) for a in args)
    if origin is list:
        return f"a list of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s"
    return {
        type(None): "null",
        bool: "true or false",
        int: "a whole number",
        float: "a finite number",
        str: "a text",
    }[hint]


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
        "reward functions: vader_compound, sentiment_classifier, length_penalty, classifier:<hub id or folder>, "
        "keyword:<word>, length_target:<words> or module:<file.py>:<function> (your own, local only)",
    )
    reward_weights: list[float] | None = _f(None, "one weight per reward function, in [-1000, 1000] (default: 1 each)")
    data_source: str = _f(EMBEDDED_SOURCE, "prompts: 'embedded:imdb', a .csv/.jsonl file or a hub dataset id")
    text_column: str = _f("text", "column of the data source that holds the review text")
    prompt_template: str = _f(
        AUTO,
        "auto (chat if the policy's tokenizer has a chat template, else continuation), continuation (first words of "
        "a review), instruction (the tutorial's) or chat (the instruction as the user turn, through the chat template)",
    )
    system_prompt: str | None = _f(None, "system message of chat prompts (chat template only)")
    prompt_words: int = _f(8, "words of the review that a continuation prompt keeps")

    # --- RLOO
    num_generations: int = _f(4, "K: completions sampled per prompt (the leave-one-out group size, >= 2)")
    prompts_per_step: int = _f(4, "prompts per optimisation step; a step scores prompts_per_step x K completions")
    generation_batch_size: int | None = _f(
        None, "completions per step, TRL-style; if set it must be divisible by K and overrides prompts_per_step"
    )
    max_steps: int = _f(150, "optimisation steps")
    learning_rate: float = _f(5e-4, "AdamW learning rate (constant)")
    beta: float = _f(0.05, "KL coefficient in [0, 100]: reward -= beta * sum of (logp - logp_ref); 0 drops the ref")
    normalize_advantages: bool = _f(False, "rescale each batch's advantages to zero mean and unit std")
    max_new_tokens: int = _f(24, "tokens generated per completion")
    temperature: float = _f(1.0, "sampling temperature during training, in [0.01, 10]")
    top_p: float = _f(1.0, "nucleus sampling threshold during training (1 = off)")
    seed: int = _f(42, "random seed for sampling, prompt order and initialisation")

    # --- why leave-one-out? (docs/learning.md; rloo_demo.engine.trainers, rloo_demo.engine.variance)
    estimator: str = _f(
        "rloo",
        "rloo (this trainer), reinforce (the same trainer without a baseline: A = r) or grpo (TRL's GRPOTrainer: "
        "A = (r - group mean) / group std, beta in the loss instead of the reward)",
    )
    reward_offset: float = _f(
        0.0,
        "a constant added to every completion's reward before the KL shaping (the baseline lab): leave-one-out "
        "advantages do not change, plain REINFORCE's shift by it and grow noisier (rloo and reinforce runs)",
    )
    variance_every: int = _f(
        0,
        "gradient-variance meter: every N steps, measure each estimator's gradient variance and cosine to a 4x "
        "reference on the step's prompts (0 = off; rloo and reinforce runs)",
    )
    # --- what the run records
    record_tokens: bool = _f(
        True, "per-token log-probabilities (before and after the update), reference and entropy in rollouts.jsonl"
    )
    snapshot_every: int = _f(25, "save a policy snapshot every N steps for the Rollouts tab's probe (0 = off)")

    # --- bigger models
    use_lora: bool = _f(False, "train a LoRA adapter (PEFT) instead of all weights; the reference is the base model")
    lora_r: int = _f(8, "LoRA rank")
    lora_alpha: int = _f(16, "LoRA scaling numerator (the update is scaled by alpha / r)")
    lora_target_modules: list[str] | None = _f(None, "modules to adapt (default: all linear layers)")
    bf16: bool = _f(False, "bf16 autocast on a GPU; weights and log-probabilities stay fp32")
    use_vllm: bool = _f(False, "generate with vLLM colocated on the GPU (TRL's vllm_mode='colocate'); needs vllm")

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

    def type_problems(self) -> dict[str, str]:
        """Fields whose value has the wrong type for its annotation: JSON types, finite numbers only, and a bool is
        not a number (``true`` as a step count is refused, not read as 1)."""
        hints = typing.get_type_hints(RunConfig)
        p = {
            f.name: f"must be {_describe(hints[f.name])}, not {_short_repr(getattr(self, f.name))}"
            for f in fields(self)
            if not _type_ok(getattr(self, f.name), hints[f.name])
        }
        for f in fields(self):  # a text no file, tokenizer or answer can encode
            value = getattr(self, f.name)
            bad = [text_problem(v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]
            if any(bad) and f.name not in p:
                p[f.name] = next(b for b in bad if b)
        return p

    def problems(self, check_files: bool = True) -> dict[str, str]:
        """Every invalid setting, with how to fix it. Checks only what needs no model or network.

        ``check_files`` (off in public mode, where no path is accepted at all) looks for local model folders and
        data files; with it off, the answer never says whether a path exists on the server."""
        p = self.type_problems()

        def ok(*names: str) -> bool:
            return not any(n in p for n in names)

        if ok("num_generations") and self.num_generations < 2:
            p["num_generations"] = (
                f"K={self.num_generations}: RLOO needs at least 2 completions per prompt for a leave-one-out "
                "baseline; use 4 to 8"
            )
        if ok("generation_batch_size", "num_generations") and self.generation_batch_size is not None:
            if self.generation_batch_size <= 0:
                p["generation_batch_size"] = "must be a positive number of completions per step"
            elif "num_generations" not in p and self.generation_batch_size % self.num_generations:
                lo = self.generation_batch_size // self.num_generations * self.num_generations
                # the multiples of K either side (one only below K: "use 4 or 4" said nothing)
                near = sorted({max(lo, self.num_generations), lo + self.num_generations})
                p["generation_batch_size"] = (
                    f"the generation batch of {self.generation_batch_size} completions must be evenly divisible by "
                    f"num_generations (K={self.num_generations}); use {' or '.join(map(str, near))}"
                )
        for name in ("prompts_per_step", "max_steps", "max_new_tokens", "prompt_words", "lora_r", "lora_alpha"):
            if ok(name) and getattr(self, name) <= 0:
                p[name] = f"must be a positive whole number, not {getattr(self, name)!r}"
        if ok("snapshot_every") and self.snapshot_every < 0:
            p["snapshot_every"] = f"must be 0 (no snapshots) or a positive number of steps, not {self.snapshot_every!r}"
        if ok("seed") and not 0 <= self.seed <= MAX_SEED:
            p["seed"] = f"must be between 0 and {MAX_SEED}, not {self.seed}"
        if ok("learning_rate") and not 0 < self.learning_rate <= 1:
            p["learning_rate"] = f"must be in (0, 1], not {self.learning_rate!r} (try 5e-4 for the embedded model)"
        if ok("beta") and not 0 <= self.beta <= MAX_BETA:
            p["beta"] = f"must be >= 0 and <= {MAX_BETA:g}, not {self.beta!r} (0 turns the KL penalty off)"
        lo, hi = TEMPERATURE_RANGE
        if ok("temperature") and not lo <= self.temperature <= hi:
            p["temperature"] = f"must be in [{lo:g}, {hi:g}], not {self.temperature!r}"
        if ok("top_p") and not 0 < self.top_p <= 1:
            p["top_p"] = f"must be in (0, 1], not {self.top_p!r}"
        if ok("estimator") and self.estimator not in ESTIMATOR_CHOICES:
            p["estimator"] = f"unknown estimator {_short_repr(self.estimator)}; use {', '.join(ESTIMATOR_CHOICES)}"
        if ok("reward_offset") and abs(self.reward_offset) > MAX_REWARD_OFFSET:
            limit = f"{MAX_REWARD_OFFSET:g}"
            p["reward_offset"] = f"must be between -{limit} and {limit}, not {self.reward_offset!r}"
        elif ok("reward_offset", "estimator") and self.reward_offset and self.estimator == "grpo":
            p["reward_offset"] = (
                "GRPO's advantage (r - group mean) / group std removes any constant offset, so it would change "
                "nothing; use the offset with estimator rloo or reinforce, or leave it 0"
            )
        if ok("variance_every") and self.variance_every < 0:
            p["variance_every"] = f"must be 0 (off) or a number of steps, not {self.variance_every!r}"
        elif ok("variance_every", "estimator") and self.variance_every and self.estimator == "grpo":
            p["variance_every"] = "the meter measures on RLOO's captured batch: use it with estimator rloo or reinforce"
        if ok("rewards"):
            self._reward_problems(p, check_files)
        if ok("prompt_template") and self.prompt_template not in PROMPT_TEMPLATES:
            p["prompt_template"] = (
                f"unknown template {_short_repr(self.prompt_template)}; use {', '.join(PROMPT_TEMPLATES[:-1])} or "
                f"{PROMPT_TEMPLATES[-1]}"
            )
        if ok("system_prompt") and self.system_prompt is not None:
            if not 0 < len(self.system_prompt.strip()) <= MAX_SYSTEM_PROMPT_CHARS:
                p["system_prompt"] = f"give a text of 1 to {MAX_SYSTEM_PROMPT_CHARS} characters, or none"
            elif ok("prompt_template") and self.prompt_template not in (AUTO, CHAT):
                p["system_prompt"] = (
                    f"only chat prompts have a system message; use prompt_template chat or auto, not "
                    f"{self.prompt_template!r}"
                )
        for name, limit in (("policy", 300), ("data_source", 500), ("text_column", 100), ("output_dir", 4096)):
            if ok(name) and not 0 < len(getattr(self, name).strip()) <= limit:
                p[name] = f"must be a non-empty text of at most {limit} characters"
        if ok("data_source") and check_files:
            src = self.data_source
            if is_local_file(src) and not Path(src).is_file():
                p["data_source"] = f"file {src!r} does not exist; give a .csv/.jsonl path, a hub id or 'embedded:imdb'"
        if ok("policy") and check_files:
            pol = self.policy.strip()
            if pol.startswith((".", "/", "~")) and not (Path(pol).expanduser() / "config.json").is_file():
                p["policy"] = f"model folder {pol!r} does not exist or has no config.json"
        if ok("lora_target_modules") and self.lora_target_modules is not None:
            if not self.lora_target_modules or not all(_NAME.fullmatch(m) for m in self.lora_target_modules):
                p["lora_target_modules"] = "give module names such as c_attn c_proj (letters, digits, '_' and '.')"
        if ok("bf16") and self.bf16:
            import torch

            if not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
                p["bf16"] = "bf16 needs a GPU that supports it; on a CPU leave it off (fp32)"
        if ok("use_vllm") and self.use_vllm:
            problem = vllm_problem()
            if problem:
                p["use_vllm"] = problem
        if ok("run_name") and self.run_name is not None and not is_valid_run_name(self.run_name):
            p["run_name"] = RUN_NAME_RULE
        if ok("report_to"):
            problem = tracker_problem(self.report_to)
            if problem:
                p["report_to"] = problem
        return p

    def _reward_problems(self, p: dict[str, str], check_files: bool = True) -> None:
        if not self.rewards:
            p["rewards"] = "give at least one reward function, e.g. vader_compound"
            return
        for name in self.rewards:
            try:
                check_reward_name(name, check_files=check_files)
            except UserError as exc:
                p["rewards"] = str(exc)
                return
        if len(set(self.reward_metric_names)) != len(self.rewards):
            p["rewards"] = "each reward function may appear only once"
        elif "reward_weights" not in p and self.reward_weights is not None:
            if len(self.reward_weights) != len(self.rewards):
                p["reward_weights"] = (
                    f"{len(self.rewards)} reward function(s) but {len(self.reward_weights)} weight(s); give one each"
                )
            elif wild := [w for w in self.reward_weights if abs(w) > MAX_REWARD_WEIGHT]:
                p["reward_weights"] = (
                    f"each weight must be in [-{MAX_REWARD_WEIGHT:g}, {MAX_REWARD_WEIGHT:g}], not {wild[0]!r} "
                    "(rewards are in [-1, 1]; a weight that large overflows the advantages to NaN)"
                )

    def validate(self, check_files: bool = True) -> RunConfig:
        problems = self.problems(check_files)
        if problems:
            raise ConfigError(problems)
        return self

    # ------------------------------------------------------------------ (de)serialisation

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data) -> RunConfig:
        """A RunConfig from a mapping of settings; unknown keys are refused (types are checked by ``problems``)."""
        if not isinstance(data, dict):
            raise ConfigError({"config": f"must be a mapping of settings, not {type(data).__name__}"})
        known = {f.name for f in fields(cls)}
        unknown = sorted((k if isinstance(k, str) else repr(k)) for k in data if k not in known)
        if unknown:
            hint = f"unknown setting; known settings are {', '.join(sorted(known))}"
            raise ConfigError({_short_repr(k, 40): hint for k in unknown[:5]})
        return cls(**data)

    @classmethod
    def from_json(cls, text) -> RunConfig:
        """A RunConfig from JSON text, as the named API receives it (missing keys take defaults)."""
        if text is None or (isinstance(text, str) and not text.strip()):
            return cls()
        if not isinstance(text, str):
            raise ConfigError({"config": f"must be JSON text, not {type(text).__name__}"})
        if len(text) > MAX_CONFIG_CHARS:
            raise ConfigError({"config": f"is {len(text)} characters long; at most {MAX_CONFIG_CHARS} are read"})
        try:
            # over 4,300 digits int() refuses to read at all: such a number reads as inf, which its field refuses
            data = json.loads(text, parse_int=lambda digits: int(digits) if len(digits) <= 100 else math.inf)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise ConfigError({"config": f"is not valid JSON ({_first_line(exc)})"}) from None
        return cls.from_dict(data)

    def to_text(self, path: str | Path) -> str:
        """The file text for ``path``: YAML, or JSON for a .json path (``rloo_demo.store.jsonl.save_config`` writes
        it atomically)."""
        if Path(path).suffix.lower() == ".json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        path = Path(path)
        if not path.is_file():
            raise ConfigError({"config": f"config file {str(path)!r} does not exist"})
        try:
            text = path.read_text(encoding="utf-8")
            if path.suffix.lower() == ".json":
                data = json.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text) or {}
        except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
            raise ConfigError({"config": f"{path.name} cannot be read: {_first_line(exc)}"}) from None
        except Exception as exc:  # yaml.YAMLError and its subclasses
            if type(exc).__module__.startswith("yaml"):
                raise ConfigError({"config": f"{path.name} is not valid YAML: {_first_line(exc)}"}) from None
            raise
        if not isinstance(data, dict):
            raise ConfigError({"config": f"{path.name} must hold a mapping of settings"})
        data.pop(LAUNCH_KEY, None)  # a run folder's record of how it was launched, not a setting
        return cls.from_dict(data)

    # ------------------------------------------------------------------ TRL
