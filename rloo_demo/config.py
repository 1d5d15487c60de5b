"""RunConfig: everything one RLOO run needs, as a plain dataclass that validates before any model loads.

It round-trips through YAML or JSON (``to_text`` / ``load``), becomes TRL's ``RLOOConfig``
(``rloo_demo.engine.trl_args``) and drives the CLI. Each setting is declared once, as TRL declares its own: one
field whose metadata carries its help (a text key, so the help reads in every language), its ``Range`` (which
``problems`` checks and the help writes out) and, for a setting on the Train form, its ``Widget``. The CLI's flags,
the form (``rloo_demo.ui.forms``) and the checks are all read from it.

The defaults are the ones that visibly learn on a 2-core CPU in about a minute while the text stays as readable as
the base model's (``scripts/bench_engine.py``): the tutorial's lr of 1e-6 and 10 steps move a small model not at
all, a higher lr (1e-3) wins reward by collapsing into a few stock phrases, and beta 0.1 makes the embedded policy
(which ends sentences readily) shorten its completions to pay less KL, summed over tokens, instead of learning.
"""

from __future__ import annotations

import json
import math
import re
import typing
from dataclasses import Field, asdict, dataclass, field, fields
from pathlib import Path

from rloo_demo.advantages import MAX_REWARD_OFFSET
from rloo_demo.chat import AUTO, CHAT
from rloo_demo.errors import ConfigError, UserError, message_of
from rloo_demo.i18n import Message, t
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.settings import POSITIVE, Range, Widget, describe, type_ok
from rloo_demo.task.data import EMBEDDED_SOURCE, TEMPLATES, is_local_file
from rloo_demo.task.rewards import REWARDS, check_reward_name, metric_name

# A run's config.yaml ends with a top-level ``launch:`` block (world size, backend, each rank's pid) written by
# ``rloo_demo.engine.distributed``; ``load`` sets it aside, so the file still loads with ``--config``.
LAUNCH_KEY = "launch"


MAX_CONFIG_CHARS = 20_000  # a RunConfig in JSON is about 700 characters
MAX_SEED = 2**32 - 1  # numpy's and torch's seeding accept [0, 2**32)
RUN_NAME_RULE = Message("cfg.run_name")  # "use 1 to 100 of A-Z a-z 0-9 . _ -, not starting with '.'"
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
            return Message("cfg.tracker_unknown", name=_short_repr(name), choices=", ".join(TRACKERS))
        if importlib.util.find_spec(TRACKERS[name]) is None:
            install = TRACKER_INSTALL.get(name, f"pip install {TRACKERS[name]}")
            return Message("cfg.tracker_missing", name=repr(name), install=install)
    return None


def vllm_problem() -> str | None:
    """Why vLLM generation cannot run here (vllm missing, or no GPU), or None."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return Message("cfg.vllm_missing")
    import torch

    if not torch.cuda.is_available():
        return Message("cfg.vllm_no_gpu")
    return None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def text_problem(value: str) -> str | None:
    """Why a text cannot be used: a lone surrogate ("\\ud800", JSON's escape) no file, tokenizer or answer encodes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return Message("cfg.surrogate", at=exc.start)
    return None


def _short_repr(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _f(default, help: str, **kw):  # noqa: A002 - TRL's "help" metadata, here a text key (``help_text``)
    """A setting: its default and its help key, and in ``kw`` its ``range``, ``chars`` (most characters of a text),
    ``choices`` and ``form`` (a ``Widget``)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class RunConfig:
    # --- model, reward, data
    policy: str = _f(EMBEDDED_POLICY, "help.policy", chars=300, form=Widget("basic", "train.policy", "dropdown"))
    rewards: list[str] = _f(["vader_compound"], "help.rewards", form=Widget("basic", "train.rewards", "choices"))
    reward_weights: list[float] | None = _f(
        None, "help.reward_weights", range=Range(-MAX_REWARD_WEIGHT, MAX_REWARD_WEIGHT, "cfg.weight_range")
    )
    data_source: str = _f(
        EMBEDDED_SOURCE, "help.data_source", chars=500, form=Widget("sampling", "train.prompts", "text")
    )
    text_column: str = _f("text", "help.text_column", chars=100)
    prompt_template: str = _f(
        AUTO,
        "help.prompt_template",
        choices=PROMPT_TEMPLATES,
        form=Widget("sampling", "train.template", "radio", info="train.template_info"),
    )
    system_prompt: str | None = _f(None, "help.system_prompt", form=Widget("sampling", "train.system_prompt", "text"))
    prompt_words: int = _f(8, "help.prompt_words", range=POSITIVE)

    # --- RLOO
    num_generations: int = _f(
        4,
        "help.num_generations",
        range=Range(2, problem="cfg.k_min"),
        form=Widget("basic", "train.k", "whole", "batch", "k-input"),
    )
    prompts_per_step: int = _f(
        4, "help.prompts_per_step", range=POSITIVE, form=Widget("basic", "train.prompts_per_step", "whole", "batch")
    )
    generation_batch_size: int | None = _f(
        None, "help.generation_batch_size", range=Range(1, problem="cfg.batch_positive")
    )
    max_steps: int = _f(
        150, "help.max_steps", range=POSITIVE, form=Widget("basic", "train.steps", "whole", "steps", "steps-input")
    )
    learning_rate: float = _f(
        5e-4,
        "help.learning_rate",
        range=Range(0, 1, "cfg.learning_rate", open_lo=True),
        form=Widget("basic", "train.learning_rate", row="steps"),
    )
    beta: float = _f(
        0.05,
        "help.beta",
        range=Range(0, MAX_BETA, "cfg.beta"),
        form=Widget("basic", "train.beta", row="steps", info="train.beta_info"),
    )
    normalize_advantages: bool = _f(
        False, "help.normalize_advantages", form=Widget("lora", "train.normalize", "checkbox", "lora")
    )
    max_new_tokens: int = _f(
        24, "help.max_new_tokens", range=POSITIVE, form=Widget("sampling", "common.max_new_tokens", "whole", "sample")
    )
    temperature: float = _f(
        1.0,
        "help.temperature",
        range=Range(*TEMPERATURE_RANGE),
        form=Widget("sampling", "common.temperature", row="sample"),
    )
    top_p: float = _f(1.0, "help.top_p", range=Range(0, 1, "cfg.top_p", open_lo=True))
    seed: int = _f(
        42, "help.seed", range=Range(0, MAX_SEED, "cfg.seed"), form=Widget("sampling", "common.seed", "whole", "sample")
    )

    # --- why leave-one-out? (docs/learning.md; rloo_demo.engine.trainers, rloo_demo.engine.variance)
    estimator: str = _f("rloo", "help.estimator", choices=ESTIMATOR_CHOICES)
    reward_offset: float = _f(
        0.0,
        "help.reward_offset",
        range=Range(-MAX_REWARD_OFFSET, MAX_REWARD_OFFSET, "cfg.between"),
        form=Widget("own_rewards", "train.reward_offset", info="train.reward_offset_info"),
    )
    variance_every: int = _f(
        0,
        "help.variance_every",
        range=Range(0, problem="cfg.variance_every"),
        form=Widget("diagnostics", "train.variance_every", "whole"),
    )
    # --- what the run records
    record_tokens: bool = _f(True, "help.record_tokens")
    snapshot_every: int = _f(25, "help.snapshot_every", range=Range(0, problem="cfg.snapshot_every"))

    # --- bigger models
    use_lora: bool = _f(False, "help.use_lora", form=Widget("lora", "train.lora", "checkbox", "lora"))
    lora_r: int = _f(8, "help.lora_r", range=POSITIVE, form=Widget("lora", "train.lora_r", "whole", "lora", width=80))
    lora_alpha: int = _f(16, "help.lora_alpha", range=POSITIVE)
    lora_target_modules: list[str] | None = _f(None, "help.lora_target_modules")
    bf16: bool = _f(False, "help.bf16", form=Widget("lora", "train.bf16", "checkbox", "gpu", shown="local"))
    use_vllm: bool = _f(False, "help.use_vllm", form=Widget("lora", "train.vllm", "checkbox", "gpu", shown="local"))

    # --- output
    output_dir: str = _f("runs", "help.output_dir", chars=4096)
    run_name: str | None = _f(None, "help.run_name")
    # on the form of a local server only, as a choice of the installed trackers (ui.tabs.train_form._trackers)
    report_to: str = _f(
        "none",
        "help.report_to",
        form=Widget("diagnostics", "train.report_to", "dropdown", info="train.report_to_info", shown="local"),
    )

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
            f.name: Message("cfg.type", kind=describe(hints[f.name]), value=_short_repr(getattr(self, f.name)))
            for f in fields(self)
            if not type_ok(getattr(self, f.name), hints[f.name])
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

        for f in fields(self):  # the ranges and lengths the fields declare (a list's items are checked below)
            value, limit, chars = getattr(self, f.name), f.metadata.get("range"), f.metadata.get("chars")
            if not ok(f.name) or value is None or isinstance(value, list):
                continue
            if limit is not None and not limit.holds(value):
                p[f.name] = limit.refusal(value)
            elif chars is not None and not 0 < len(value.strip()) <= chars:
                p[f.name] = Message("cfg.text_length", max=chars)
        batch = self.generation_batch_size
        if ok("generation_batch_size", "num_generations") and batch is not None and batch % self.num_generations:
            lo = batch // self.num_generations * self.num_generations
            # the multiples of K either side (one only below K: "use 4 or 4" said nothing)
            near = sorted({max(lo, self.num_generations), lo + self.num_generations})
            p["generation_batch_size"] = Message(
                "cfg.batch_divisible",
                batch=batch,
                k=self.num_generations,
                near=near[0] if len(near) == 1 else Message("cfg.either", a=near[0], b=near[1]),
            )
        if ok("estimator") and self.estimator not in ESTIMATOR_CHOICES:
            p["estimator"] = Message(
                "cfg.estimator", name=_short_repr(self.estimator), choices=", ".join(ESTIMATOR_CHOICES)
            )
        if ok("reward_offset", "estimator") and self.reward_offset and self.estimator == "grpo":
            p["reward_offset"] = Message("cfg.offset_grpo")
        if ok("variance_every", "estimator") and self.variance_every and self.estimator == "grpo":
            p["variance_every"] = Message("cfg.variance_grpo")
        if ok("rewards"):
            self._reward_problems(p, check_files)
        if ok("prompt_template") and self.prompt_template not in PROMPT_TEMPLATES:
            p["prompt_template"] = Message(
                "cfg.template",
                name=_short_repr(self.prompt_template),
                choices=", ".join(PROMPT_TEMPLATES[:-1]),
                last=PROMPT_TEMPLATES[-1],
            )
        if ok("system_prompt") and self.system_prompt is not None:
            if not 0 < len(self.system_prompt.strip()) <= MAX_SYSTEM_PROMPT_CHARS:
                p["system_prompt"] = Message("cfg.system_prompt", max=MAX_SYSTEM_PROMPT_CHARS)
            elif ok("prompt_template") and self.prompt_template not in (AUTO, CHAT):
                p["system_prompt"] = Message("cfg.system_prompt_chat", template=repr(self.prompt_template))
        if ok("data_source") and check_files:
            src = self.data_source
            if is_local_file(src) and not Path(src).is_file():
                p["data_source"] = Message("cfg.data_missing", path=repr(src))
        if ok("policy") and check_files:
            pol = self.policy.strip()
            if pol.startswith((".", "/", "~")) and not (Path(pol).expanduser() / "config.json").is_file():
                p["policy"] = Message("cfg.policy_missing", path=repr(pol))
        if ok("lora_target_modules") and self.lora_target_modules is not None:
            if not self.lora_target_modules or not all(_NAME.fullmatch(m) for m in self.lora_target_modules):
                p["lora_target_modules"] = Message("cfg.lora_modules")
        if ok("bf16") and self.bf16:
            import torch

            if not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
                p["bf16"] = Message("cfg.bf16")
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
            p["rewards"] = Message("cfg.no_reward")
            return
        for name in self.rewards:
            try:
                check_reward_name(name, check_files=check_files)
            except UserError as exc:
                p["rewards"] = message_of(exc)
                return
        if len(set(self.reward_metric_names)) != len(self.rewards):
            p["rewards"] = Message("cfg.reward_twice")
        elif "reward_weights" not in p and self.reward_weights is not None:
            if len(self.reward_weights) != len(self.rewards):
                p["reward_weights"] = Message(
                    "cfg.weights_count", rewards=len(self.rewards), weights=len(self.reward_weights)
                )
            elif wild := [w for w in self.reward_weights if not setting("reward_weights").metadata["range"].holds(w)]:
                p["reward_weights"] = setting("reward_weights").metadata["range"].refusal(wild[0])

    def validate(self, check_files: bool = True, found: dict | None = None) -> RunConfig:
        """Every problem (``found`` by a checker, else looked for here) in a ``ConfigError``, or these values marked."""
        if found is None:  # values checked already are trusted: a run is checked once on its way down
            found = {} if self.checked() else self.problems(check_files)
        if found:
            raise ConfigError(found)
        self._checked = self.to_dict()  # beside the fields, not one of them
        return self

    def checked(self) -> bool:  # whether these values passed a check: any change since (a list's too) unmarks them
        return getattr(self, "_checked", None) == self.to_dict()

    # ------------------------------------------------------------------ (de)serialisation

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data) -> RunConfig:
        """A RunConfig from a mapping of settings; unknown keys are refused (types are checked by ``problems``)."""
        if not isinstance(data, dict):
            raise ConfigError({"config": Message("cfg.not_mapping", type=type(data).__name__)})
        known = {f.name for f in fields(cls)}
        unknown = sorted((k if isinstance(k, str) else repr(k)) for k in data if k not in known)
        if unknown:
            hint = Message("cfg.unknown_setting", known=", ".join(sorted(known)))
            raise ConfigError({_short_repr(k, 40): hint for k in unknown[:5]})
        return cls(**data)

    @classmethod
    def from_json(cls, text) -> RunConfig:
        """A RunConfig from JSON text, as the named API receives it (missing keys take defaults)."""
        if text is None or (isinstance(text, str) and not text.strip()):
            return cls()
        if not isinstance(text, str):
            raise ConfigError({"config": Message("cfg.not_json_text", type=type(text).__name__)})
        if len(text) > MAX_CONFIG_CHARS:
            raise ConfigError({"config": Message("cfg.config_long", chars=len(text), max=MAX_CONFIG_CHARS)})
        try:
            # over 4,300 digits int() refuses to read at all: such a number reads as inf, which its field refuses
            data = json.loads(text, parse_int=lambda digits: int(digits) if len(digits) <= 100 else math.inf)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise ConfigError({"config": Message("cfg.bad_json", detail=_first_line(exc))}) from None
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
            raise ConfigError({"config": Message("cfg.file_missing", path=repr(str(path)))})
        try:
            text = path.read_text(encoding="utf-8")
            if path.suffix.lower() == ".json":
                data = json.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text) or {}
        except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
            raise ConfigError(
                {"config": Message("cfg.file_unreadable", file=path.name, detail=_first_line(exc))}
            ) from None
        except Exception as exc:  # yaml.YAMLError and its subclasses
            if type(exc).__module__.startswith("yaml"):
                raise ConfigError(
                    {"config": Message("cfg.bad_yaml", file=path.name, detail=_first_line(exc))}
                ) from None
            raise
        if not isinstance(data, dict):
            raise ConfigError({"config": Message("cfg.file_not_mapping", file=path.name)})
        data.pop(LAUNCH_KEY, None)  # a run folder's record of how it was launched, not a setting
        return cls.from_dict(data)


def setting(name: str) -> Field:
    """A setting's declaration: its RunConfig field, with its default and its metadata."""
    return next(f for f in fields(RunConfig) if f.name == name)


def help_text(name: str, locale: str = "en") -> str:
    """A setting's help in ``locale`` (the CLI's ``--help`` in English): its field's help key, with the field's range
    and the built-in rewards' names written in, so neither is copied out by hand."""
    metadata = setting(name).metadata
    limit = metadata.get("range")
    return t(locale, metadata["help"], range=limit.text() if limit else "", rewards=", ".join(REWARDS))
