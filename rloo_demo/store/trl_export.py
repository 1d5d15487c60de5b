"""A finished run as a TRL project: the files with which TRL's own ``trl rloo`` trains the run again, without this
app (a learner's next step is their own TRL training).

    <out>/
        config.yaml     for ``trl rloo --config config.yaml``: every setting of the run that TRL has, under TRL's names
                        (``rloo_demo.engine.trl_args.trl_settings``, the mapping the trainer itself uses); the app's
                        settings TRL lacks are YAML comments saying what each did
        prompts.jsonl   the run's training prompts, one ``{"prompt": ...}`` a line, as the trainer was given them
        rewards.py      the run's reward functions as plain Python (``rloo_demo.store.trl_rewards``)
        <own>.py        a user's reward module, copied beside rewards.py
        models/         the embedded policy and classifier, copied (a hub id stays an id, a local folder a path)
        README.md       the one command

Paths inside the project are relative to its folder, the working folder of ``trl rloo`` (TRL imports the reward
functions from there), so a project copied or downloaded elsewhere still runs. Only a run that ended well is
exported: a training run changes still, and a failed one may have failed because of its settings.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from rloo_demo.config import RunConfig
from rloo_demo.errors import InputError
from rloo_demo.i18n import Message
from rloo_demo.models.hub import EMBEDDED_CLASSIFIER, resolve_model
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.trl_rewards import ExportedReward, function_names, rewards_source
from rloo_demo.task.data import run_prompts
from rloo_demo.task.rewards import CLASSIFIER_PREFIX, MODULE_PREFIX
from rloo_demo.task.user_rewards import parse_spec

EXPORTABLE = ("finished", "stopped")  # a stopped run ended at a step boundary, as a finished one
PROMPTS_FILE, REWARDS_FILE, MODELS_DIR = "prompts.jsonl", "rewards.py", "models"

# The app's settings that TRL's RLOOConfig and ModelConfig lack, each with what it did: config.yaml lists them as
# comments with the run's values. Every other field of RunConfig is a TRL setting (``trl_args``) or a file here.
NOT_IN_TRL = {
    "estimator": "the advantage estimator (rloo: leave-one-out; reinforce: no baseline; grpo: TRL's GRPOTrainer); "
    "trl rloo always trains with the leave-one-out baseline",
    "reward_offset": "a constant added to every scored completion's summed reward, to show what a baseline buys; "
    "the leave-one-out baseline subtracts it again, so trl rloo's updates are the same without it",
    "variance_every": "measured the gradient variance of every estimator every N steps (a lesson, not training)",
    "record_tokens": "recorded each completion's per-token log-probabilities and KL for the Rollouts tab",
    "snapshot_every": "kept a copy of the policy every N steps for the probe",
    "output_dir": "the app's runs folder; TRL writes to output_dir above",
}
# How the app's engine trains a step faster than TRL's own loop; the same updates, so nothing to set in TRL.
SPEEDUPS = (
    "the engine's speed-ups (rloo_demo/fast): one forward pass per step for the old and new log-probabilities, "
    "a lean decode loop, generation overlapped with the backward pass, and thread counts set per model"
)
IN_FILES = {  # the fields that became a file or a path here
    "policy": "model_name_or_path",
    "rewards": "reward_funcs and rewards.py",
    "data_source": PROMPTS_FILE,
    "text_column": PROMPTS_FILE,
    "prompt_template": PROMPTS_FILE,
    "system_prompt": PROMPTS_FILE,
    "prompt_words": PROMPTS_FILE,
    "run_name": "run_name (the run folder's name)",
}


def check_exportable(run: RunFolder) -> None:
    """``InputError`` for a run that is training or did not end well (``EXPORTABLE``)."""
    status = run.status().get("status")
    if status == "running":
        raise InputError(Message("trl_export.running", name=repr(run.name)))
    if status not in EXPORTABLE:
        raise InputError(Message("trl_export.not_done", name=repr(run.name), status=str(status)))


def model_ref(name: str, out: Path) -> tuple[str, bool]:
    """``(reference, copied)``: an embedded model copied to ``models/<asset>`` under ``out`` (its path relative to
    the project), a local folder by its absolute path, and a hub id as it is."""
    if name.startswith("embedded:"):
        source = Path(resolve_model(name))
        rel = f"{MODELS_DIR}/{source.name}"
        if not (out / rel).is_dir():
            shutil.copytree(source, out / rel)
        return rel, True
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        return str(path.resolve()), False
    return name, False


def _own_file(spec: str, out: Path, taken: dict[Path, str]) -> str:
    """Copy a user's reward module beside rewards.py (once per file); its name there, suffixed where taken."""
    source = Path(parse_spec(spec)[0]).expanduser().resolve()
    if source not in taken:
        name, n = source.name, 1
        while name == REWARDS_FILE or name in taken.values():
            n += 1
            name = f"{source.stem}_{n}{source.suffix}"
        shutil.copyfile(source, out / name)
        taken[source] = name
    return taken[source]


def export_rewards(config: RunConfig, out: Path) -> list[ExportedReward]:
    """The run's rewards as rewards.py's functions, with their classifiers copied and their modules beside."""
    exported, taken = [], {}
    for name, function in zip(config.rewards, function_names(config.rewards), strict=True):
        if name == "sentiment_classifier" or name.startswith(CLASSIFIER_PREFIX):
            classifier = EMBEDDED_CLASSIFIER if name == "sentiment_classifier" else name[len(CLASSIFIER_PREFIX) :]
            exported.append(ExportedReward(name, function, *model_ref(classifier, out)))
        elif name.startswith(MODULE_PREFIX):
            own = _own_file(name.removeprefix(MODULE_PREFIX), out, taken)
            exported.append(ExportedReward(name, function, own_file=own))
        else:
            exported.append(ExportedReward(name, function))
    return exported


def config_yaml(config: RunConfig, run_name: str, settings: dict, policy: str, functions: list[str]) -> str:
    """config.yaml: the script's and the model's arguments, then TRL's training settings, then comments."""
    script = {
        "model_name_or_path": policy,
        "datasets": [{"path": "json", "data_files": PROMPTS_FILE}],
        "reward_funcs": [f"rewards.{f}" for f in functions],
        "output_dir": "output",
    }
    lines = [
        f"# The rloo-demo run {run_name!r} as a TRL project: run it from this folder with",
        "#   trl rloo --config config.yaml",
        "# (TRL imports reward_funcs from rewards.py here; the paths below are relative to this folder)",
        yaml.safe_dump(script, sort_keys=False, allow_unicode=True).rstrip(),
        "# the run's settings under TRL's names (RLOOConfig, and ModelConfig for LoRA)",
        yaml.safe_dump(settings, sort_keys=False, allow_unicode=True).rstrip(),
        "#",
        "# The app's settings that TRL lacks, with this run's values and what each did:",
    ]
    for name, what in NOT_IN_TRL.items():  # the runs folder's path is the server's, not the project's to show
        value = "" if name == "output_dir" else f": {json.dumps(getattr(config, name))}"
        lines.append(f"#   {name}{value}  ({what})")
    lines.append(f"#   and {SPEEDUPS}.")
    lines.append(
        f"# The prompts ({PROMPTS_FILE}) were built from data_source {json.dumps(config.data_source)} with "
        f"prompt_template {json.dumps(config.prompt_template)}, prompt_words {config.prompt_words}."
    )
    return "\n".join(lines) + "\n"


README = """# The rloo-demo run `{run}` as a TRL project

Train it again with TRL's own RLOO script, from this folder:

```bash
cd {folder_hint}
pip install "trl=={trl}"{extras}
trl rloo --config config.yaml
```

- `config.yaml`: every setting of the run that TRL has; the app's settings TRL lacks are comments at its end.
- `{prompts}`: the run's {count} training prompts (a `prompt` column), as the app gave them to its trainer.
- `rewards.py`: the run's reward functions ({functions}), in TRL's signature; `reward_weights` in config.yaml
  weighs them.{own}
- The policy: {policy}.{classifiers}

`per_device_train_batch_size` is the run's completions per step on one process: divide it by the number of
processes if you launch several (`accelerate launch ... trl rloo`). Flags after `--config` override the file, for
example `trl rloo --config config.yaml --max_steps 2` for a quick check.
"""


def _where(ref: str, copied: bool) -> str:
    return f"copied into this project, `{ref}`" if copied else f"`{ref}`"


def write_trl_project(run: RunFolder, out: Path, settings: dict, trl_version: str) -> list[Path]:
    """Write the TRL project of ``run`` into ``out`` (a new or empty folder) from ``settings``, the run's TRL
    settings (``trl_args.trl_settings``); the files written, sorted. Refuses a run that did not end well."""
    check_exportable(run)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(Message("trl_export.not_empty", path=repr(str(out))))
    config = run.config()
    out.mkdir(parents=True, exist_ok=True)
    policy, policy_copied = model_ref(config.policy, out)
    prompts = run_prompts(config, "train")["prompt"]  # as the trainer got them (rloo_demo.engine.training)
    with open(out / PROMPTS_FILE, "w", encoding="utf-8") as f:
        for prompt in prompts:
            f.write(json.dumps({"prompt": prompt}, ensure_ascii=False) + "\n")
    rewards = export_rewards(config, out)
    functions = [r.function for r in rewards]
    (out / REWARDS_FILE).write_text(rewards_source(run.name, rewards, config.weights), encoding="utf-8")
    (out / "config.yaml").write_text(config_yaml(config, run.name, settings, policy, functions), encoding="utf-8")
    classifiers = [_where(r.model, r.copied) for r in rewards if r.model]
    own = sorted({r.own_file for r in rewards if r.own_file})
    (out / "README.md").write_text(
        README.format(
            run=run.name,
            folder_hint=out.name,
            trl=trl_version,
            extras=" vaderSentiment" * ("vader_compound" in config.rewards) + " peft" * bool(settings.get("use_peft")),
            prompts=PROMPTS_FILE,
            count=len(prompts),
            functions=", ".join(f"`{f}`" for f in functions),
            own=f" Your own reward module{'s' if len(own) > 1 else ''}, copied: {', '.join(own)}." if own else "",
            policy=_where(policy, policy_copied),
            classifiers="".join(f"\n- A classifier: {c}." for c in classifiers),
        ),
        encoding="utf-8",
    )
    return sorted(p for p in out.rglob("*") if p.is_file())
