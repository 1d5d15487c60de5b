"""A config written for TRL's own ``trl rloo --config config.yaml`` as this app's RunConfig (``python -m rloo_demo
train --trl-config config.yaml``): the way back of ``trl_args.trl_settings``, which the export writes.

The mapping is not written a second time here. The names that carry a RunConfig field unchanged are found by
asking ``trl_settings`` itself (``direct_names``); the few that TRL spells otherwise (the batch, LoRA, the trackers)
are turned back by hand; and then ``trl_settings`` of the result must give every TRL setting the YAML holds, the
same value, or the import is refused by that setting's name. So a value the app cannot honour (a scheduler other
than its constant one, a dropout in LoRA) is refused, never dropped. Only keys present in the YAML count: TRL's
own defaults for the keys it leaves out are not the user's choice.

Local paths (a ``.jsonl`` of prompts, a model folder, a reward module) are read against the config's folder, as
``trl rloo`` run from that folder reads them. CLI only: a public server never reads a config file of a visitor.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from pathlib import Path

import yaml

from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import PROCESS_ONLY, trl_settings
from rloo_demo.errors import ConfigError, UserError
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.task.data import is_local_file
from rloo_demo.task.rewards import CLASSIFIER_PREFIX, MODULE_PREFIX, REWARDS, metric_name

EXPORT_HEAD = '"""The reward functions of the rloo-demo run'  # how an exported rewards.py begins (store.trl_rewards)
# The keys a config may hold that the app needs not honour: where TRL writes (the app writes its run folder) and
# what TRL's loop picks on its own machine (``trl_args.PROCESS_ONLY``).
IGNORED = {"output_dir": "the app writes its runs folder (--output-dir)", **{k: "" for k in PROCESS_ONLY}}
# TRL's named rewards (its script's registry), which the app cannot score with, and why.
TRL_REGISTRY = {
    "accuracy_reward": "it compares with a 'solution' column, which the app's prompts do not carry",
    "reasoning_accuracy_reward": "it compares with a 'solution' column, which the app's prompts do not carry",
    "think_format_reward": "it scores <think> blocks of reasoning models; give it as module:FILE.py:FUNCTION",
    "get_soft_overlong_punishment": "TRL builds it for 1280-token completions; use the app's length_penalty",
}


class TrlConfigError(UserError):
    """A TRL config the app cannot run as it was written; the message names the field and why."""

    def __init__(self, field: str, reason: str):
        self.field = field
        super().__init__(f"--trl-config: {field}: {reason}")


def _sentinel(value):
    """A distinctive value of a field's type, that no other TRL setting holds by chance."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return 7919
    if isinstance(value, float):
        return 0.3779
    return None


@cache
def direct_names() -> dict[str, str]:
    """TRL's name -> RunConfig's field, for each field that ``trl_settings`` passes on unchanged under one name:
    found by setting the field alone to a distinctive value and looking for the one TRL setting that holds it."""
    base = RunConfig(use_lora=True)  # LoRA's fields reach TRL only with LoRA on
    before = trl_settings(base)
    names = {}
    for f in dataclasses.fields(RunConfig):
        value = _sentinel(getattr(base, f.name))
        if value is None or f.name == "use_lora":
            continue
        after = trl_settings(dataclasses.replace(base, **{f.name: value}))
        hits = [k for k, v in after.items() if type(v) is type(value) and v == value and before.get(k) != v]
        if len(hits) == 1:
            names[hits[0]] = f.name
    return names


def _target_modules(value) -> list[str] | None:
    """LoRA's target modules as RunConfig holds them: the way back of ``trl_args._target_modules``."""
    if value in (None, "all-linear"):
        return None
    if isinstance(value, str):
        one = re.fullmatch(r"\(\.\*\\\.\)\?(.+)", value)
        return [re.sub(r"\\(.)", r"\1", one.group(1)) if one else value]
    return list(value)


def _local(path: str, base_dir: Path) -> str:
    """A local path read against the config's folder, absolute; a name that is not there stays as it is."""
    candidate = (base_dir / Path(path).expanduser()).resolve()
    return str(candidate) if candidate.exists() or path.startswith((".", "/", "~")) else path


def _policy(name: str, base_dir: Path) -> str:
    """The policy: the export's copy of the embedded policy is the embedded policy again, else a path or an id."""
    ref = _local(name, base_dir)
    if Path(ref).parent == (base_dir / "models").resolve() and Path(ref).name == EMBEDDED_POLICY.split(":", 1)[1]:
        return EMBEDDED_POLICY
    return ref


def _dataset(data: dict, base_dir: Path) -> str:
    """The data source of ``dataset_name`` or of one entry of ``datasets`` (a local file or a hub id)."""
    if "datasets" in data:
        entries = data["datasets"]
        if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
            raise TrlConfigError("datasets", "the app reads one dataset; give one entry (or dataset_name)")
        entry = entries[0]
        extra = set(entry) - {"path", "data_files", "split"}
        if extra:
            raise TrlConfigError("datasets", f"the app cannot honour {', '.join(sorted(extra))} of a dataset")
        files = entry.get("data_files")
        if entry.get("path") in ("json", "csv") and isinstance(files, str):
            return _local(files, base_dir)
        if files is not None:
            raise TrlConfigError("datasets", "give one local .jsonl/.json/.csv file as data_files, or a hub id as path")
        source = str(entry.get("path"))
    elif "dataset_name" in data:
        source = str(data["dataset_name"])
    else:
        raise TrlConfigError("dataset_name", "missing: give dataset_name (a hub id or a local file) or datasets")
    return _local(source, base_dir) if is_local_file(source) else source


def _exported_reward(function: str) -> str | None:
    """The app's reward name of an exported rewards.py's function (built-ins, keywords, length targets)."""
    for name in [*REWARDS, f"keyword:{function.removeprefix('keyword_')}"]:
        if metric_name(name) == function:
            return name
    target = re.fullmatch(r"length_target_(\d+)", function)
    return f"length_target:{target.group(1)}" if target else None


def _reward(spec: str, base_dir: Path) -> str:
    """The app's reward name of one of TRL's ``reward_funcs``."""
    if spec in TRL_REGISTRY:
        raise TrlConfigError("reward_funcs", f"TRL's {spec}: {TRL_REGISTRY[spec]}")
    if spec in REWARDS or spec.startswith((CLASSIFIER_PREFIX, MODULE_PREFIX)) or "." not in spec:
        return spec  # the app's own names; RunConfig's check refuses an unknown one with the known names
    module, function = spec.rsplit(".", 1)
    file = (base_dir / Path(*module.split("."))).with_suffix(".py").resolve()
    if not file.is_file():
        raise TrlConfigError("reward_funcs", f"{spec}: no file {file} (a dotted path is read from the config's folder)")
    if file.read_text(encoding="utf-8").startswith(EXPORT_HEAD):
        name = _exported_reward(function)
        if name:
            return name
    return f"{MODULE_PREFIX}{file}:{function}"


def _number(key: str, value, default):
    """A float setting as TRL's parser reads it: YAML reads 3e-4 as a text, and 1 as a whole number."""
    if not isinstance(default, float) or isinstance(value, (bool, float)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TrlConfigError(key, f"{value!r} is not a number") from None


def _same(wanted, got) -> bool:
    if isinstance(got, float) and isinstance(wanted, (int, float, str)) and not isinstance(wanted, bool):
        try:
            return float(wanted) == got  # YAML reads 3e-4 as a text; TRL's parser as a number
        except ValueError:
            return False
    if isinstance(got, list) and isinstance(wanted, str):
        wanted = [wanted]
    return wanted == got


def run_config_from_trl(yaml_text: str, base_dir: str | Path) -> RunConfig:
    """The RunConfig that trains the run a ``trl rloo`` config describes; ``TrlConfigError`` names a field the
    app cannot honour. ``base_dir`` is the config's folder (relative paths are read against it)."""
    base_dir = Path(base_dir).resolve()
    try:
        data = yaml.safe_load(yaml_text)
    except yaml.YAMLError as exc:
        raise TrlConfigError("config", f"not YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise TrlConfigError("config", "a TRL config is a mapping of setting names to values")
    fields: dict = {}
    if "model_name_or_path" in data:
        fields["policy"] = _policy(str(data["model_name_or_path"]), base_dir)
    fields["data_source"] = _dataset(data, base_dir)
    if data.get("dataset_train_split", "train") != "train":
        raise TrlConfigError("dataset_train_split", "the app trains on its own split of the 'train' rows")
    rewards = [_reward(str(r), base_dir) for r in data.get("reward_funcs") or []]
    if data.get("reward_model_name_or_path"):  # TRL scores with the reward model first
        model = _local(str(data["reward_model_name_or_path"]), base_dir)
        rewards.insert(0, f"{CLASSIFIER_PREFIX}{model}")
    if rewards:
        fields["rewards"] = rewards
    if data.get("reward_weights") is not None:
        fields["reward_weights"] = [float(w) for w in data["reward_weights"]]
    names = direct_names()
    fields.update({names[k]: _number(k, v, getattr(RunConfig, names[k])) for k, v in data.items() if k in names})
    if "per_device_train_batch_size" in data:  # the run's completions per step: prompts times K
        k = int(fields.get("num_generations", RunConfig.num_generations))
        batch = data["per_device_train_batch_size"]
        if not isinstance(batch, int) or batch % k:
            raise TrlConfigError("per_device_train_batch_size", f"must be a multiple of num_generations ({k})")
        fields["prompts_per_step"] = batch // k
    if "report_to" in data:
        report = data["report_to"]
        fields["report_to"] = ",".join(report) if isinstance(report, list) else str(report)
    fields["use_lora"] = bool(data.get("use_peft", False))
    if "lora_target_modules" in data:
        fields["lora_target_modules"] = _target_modules(data["lora_target_modules"])
    if "run_name" in data:
        fields["run_name"] = data["run_name"]
    try:
        config = RunConfig.from_dict(fields)
        settings = trl_settings(config, config.run_name)
    except ConfigError as exc:
        raise TrlConfigError(next(iter(exc.problems)), str(exc)) from None
    script = {"model_name_or_path", "dataset_name", "datasets", "dataset_train_split", "reward_funcs"}
    script |= {"reward_model_name_or_path", "reward_weights"}
    for key, wanted in data.items():  # every key the user set is honoured as written, or refused by name
        if key in script or key in IGNORED:
            continue
        if key not in settings:
            if key in ("use_peft", "lora_target_modules") and not fields["use_lora"]:
                continue
            if key in trl_settings(dataclasses.replace(config, use_lora=True)):
                raise TrlConfigError(key, "a LoRA setting: it needs use_peft: true")
            raise TrlConfigError(key, "rloo-demo has no such setting (its trainer keeps TRL's default)")
        if not _same(wanted, settings[key]):
            raise TrlConfigError(key, f"{wanted!r} cannot be honoured: rloo-demo trains with {settings[key]!r}")
    return config
