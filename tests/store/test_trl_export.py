"""A run as a TRL project (store/trl_export.py, store/trl_rewards.py): config.yaml read by TRL's own ``trl rloo``
parser holds the run's values, rewards.py scores as the app's rewards in a process where ``rloo_demo`` cannot be
imported, every setting of the app is placed, and a run that did not end well is refused.

``python -m pytest tests/store/test_trl_export.py`` (about 20 s: the reward check loads transformers in a
subprocess)."""

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
import yaml
from factories import NON_DEFAULT_RUN
from peft.tuners.tuners_utils import check_target_module_exists
from trl import get_peft_config
from trl.scripts.rloo import make_parser

from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import PROCESS_ONLY, peft_config, rloo_config, rloo_kwargs, trl_settings
from rloo_demo.errors import InputError
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.trl_export import IN_FILES, NOT_IN_TRL, write_trl_project
from rloo_demo.task.rewards import WeightedReward

# Non-default values throughout, so that a setting the export drops shows as TRL's default instead.
SETTINGS = NON_DEFAULT_RUN | dict(prompt_template="continuation", prompt_words=5)


def _run(root, name="done", status="finished", **changes) -> RunFolder:
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, **(SETTINGS | changes)))
    run.set_status(status)
    return run


def _export(run, out):
    return write_trl_project(run, out, trl_settings(run.config(), run.name), "1.0")


def test_config_yaml_parses_with_trls_own_parser_into_the_runs_values(tmp_path):
    rewards = ["vader_compound", "length_penalty", "keyword:great"]
    run = _run(tmp_path / "runs", rewards=rewards, reward_weights=[0.7, 0.2, 1.5])
    out = tmp_path / "project"
    _export(run, out)
    script, training, model, data = make_parser().parse_args_and_config(["--config", str(out / "config.yaml")])
    # the values by hand
    assert (training.learning_rate, training.num_generations, training.beta) == (3e-4, 3, 0.2)
    assert (training.max_steps, training.temperature, training.top_p, training.seed) == (7, 0.7, 0.9, 1234)
    assert training.max_completion_length == 11 and training.normalize_advantages is True
    assert training.per_device_train_batch_size == 2 * 3  # prompts per step times K, on one process
    assert training.reward_weights == [0.7, 0.2, 1.5]
    assert training.run_name == "done" and training.output_dir == "output"
    assert script.reward_funcs == ["rewards.vader_compound", "rewards.length_penalty", "rewards.keyword_great"]
    assert [(d.path, d.data_files) for d in data.datasets] == [("json", "prompts.jsonl")]
    assert model.model_name_or_path == "models/tiny-imdb-gpt2" and (out / "models/tiny-imdb-gpt2/config.json").is_file()
    assert (model.use_peft, model.lora_r, model.lora_alpha, model.lora_dropout) == (True, 4, 12, 0.0)
    # LoRA on the modules the app's trainer puts it on (TRL turns a one-item list into a text PEFT reads as a pattern)
    names = ["transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn", "transformer.h.0.attn.c_proj", "c_attn"]
    names += ["transformer.h.0.mlp.c_fc", "transformer.h.0.attn.xc_attn"]
    ours, theirs = peft_config(run.config()), get_peft_config(model)
    assert [bool(check_target_module_exists(theirs, n)) for n in names] == [True, True, False, True, False, False]
    assert [bool(check_target_module_exists(ours, n)) for n in names] == [True, True, False, True, False, False]
    # and every setting the app's trainer is given, as the trainer's own RLOOConfig holds it
    app = rloo_config(run.config(), "x", reward_weights=run.config().weights, run_name="done")
    keys = [k for k in rloo_kwargs(run.config(), "x") if k not in PROCESS_ONLY]
    assert {k: getattr(training, k) for k in keys} == {k: getattr(app, k) for k in keys}
    text = (out / "config.yaml").read_text()
    assert "#   reward_offset: 0.5  (" in text and "#   snapshot_every: 0  (" in text


def test_lora_on_every_linear_layer_stays_peft_s_shorthand(tmp_path):
    """A run's LoRA on every linear layer (no target modules given) reaches TRL as PEFT's "all-linear" text: a list
    of it would name a module that does not exist."""
    settings = trl_settings(RunConfig(use_lora=True))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"model_name_or_path": "m", **settings}))
    model = make_parser().parse_args_and_config(["--config", str(tmp_path / "c.yaml")])[2]
    assert model.lora_target_modules == "all-linear"
    assert get_peft_config(model).target_modules == "all-linear"


def _changed(value, name):
    """Another valid value of a setting, of its type."""
    special = {"generation_batch_size": 12, "reward_weights": [2.0], "lora_target_modules": ["c_proj"]}
    if name in special:
        return special[name]
    if name == "report_to":
        return "tensorboard"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.25
    raise AssertionError(f"no other value for {name}={value!r}")


def test_every_setting_of_the_app_is_a_trl_setting_a_file_or_a_comment():
    """A setting not placed in a file or a comment is one that TRL has: changing it changes the exported settings
    (a new setting of RunConfig that nobody placed fails here)."""
    base = RunConfig(use_lora=True)
    before = trl_settings(base, "r")
    for field in dataclasses.fields(RunConfig):
        if field.name in NOT_IN_TRL or field.name in IN_FILES:
            continue
        other = dataclasses.replace(base, **{field.name: _changed(getattr(base, field.name), field.name)})
        assert trl_settings(other, "r") != before, f"{field.name} is neither exported nor listed as missing"


# "greatest" is no whole-word "great"; an empty completion is one the own function does not score (None)
COMPLETIONS = [
    "What a great, wonderful film. Great!",
    "",
    "A terrible bore, the greatest bore",
    "great great great fun",
]
PROMPTS = ["The plot", "I went", "A long prompt about the actors and", "Why"]
# the same batch as TRL gives a chat run's: prompts and completions as messages (scored by their text)
CHAT_PROMPTS = [[{"role": "system", "content": "Be kind."}, {"role": "user", "content": p}] for p in PROMPTS]
CHAT_COMPLETIONS = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
OWN = """
def echo_len(prompts, completions, **kwargs):
    assert "completion_ids" in kwargs  # TRL's keywords reach it
    return [None if not c.strip() else len(p) / 100 + len(c) / 1000 for p, c in zip(prompts, completions)]
"""
# Run with the package unimportable, from the project folder (TRL puts the working folder first on sys.path)
CALL_AS_TRL = """
import importlib, json, sys
sys.modules["rloo_demo"] = None
sys.path.insert(0, ".")
import yaml
config = yaml.safe_load(open("config.yaml"))
answers = []
for prompts, completions in json.loads(sys.argv[1]):
    scores = {}
    for path in config["reward_funcs"]:
        module, name = path.rsplit(".", 1)
        f = getattr(importlib.import_module(module), name)
        scores[f.__name__] = f(prompts=prompts, completions=completions, completion_ids=[[1]] * len(completions),
                               trainer_state=None, log_extra=None, log_metric=None)
    answers.append(scores)
print(json.dumps({"scores": answers, "weights": config["reward_weights"]}))
"""


def test_rewards_py_scores_as_the_apps_rewards_where_the_package_cannot_be_imported(tmp_path):
    own = tmp_path / "mine" / "own_rewards.py"
    own.parent.mkdir()
    own.write_text(OWN)
    rewards = [
        "vader_compound",
        "sentiment_classifier",
        "length_penalty",
        "keyword:great",
        "length_target:5",
        f"module:{own}:echo_len",
    ]
    weights = [0.5, 1.5, 0.25, 2.0, -0.5, 0.75]
    run = _run(tmp_path / "runs", rewards=rewards, reward_weights=weights, use_lora=False)
    out = tmp_path / "project"
    _export(run, out)
    assert (out / "own_rewards.py").read_text() == OWN  # copied beside rewards.py
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    batches = [[PROMPTS, COMPLETIONS], [CHAT_PROMPTS, CHAT_COMPLETIONS]]
    done = subprocess.run(
        [sys.executable, "-c", CALL_AS_TRL, json.dumps(batches)],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    exported = json.loads(done.stdout.strip().splitlines()[-1])
    app = WeightedReward.from_names(rewards, weights)
    names = ["vader_compound", "sentiment_classifier", "length_penalty", "keyword_great", "length_target_5", "echo_len"]
    assert exported["weights"] == weights
    for (prompts, completions), theirs in zip(batches, exported["scores"], strict=True):
        mine = app.score_each(prompts, completions)
        assert list(theirs) == list(mine) == names
        for name, scores in mine.items():
            assert theirs[name] == pytest.approx(scores, abs=1e-6), name
        assert theirs["echo_len"][1] is None and theirs["keyword_great"] == [2 / 3, 0, 0, 1]
        assert theirs["echo_len"][0] == pytest.approx(len("The plot") / 100 + len(COMPLETIONS[0]) / 1000)
        # the weights, in the functions' order: TRL's sum (None left out) as the app combines the scores
        by_hand = [
            math.fsum(w * s[i] for w, s in zip(weights, theirs.values(), strict=True) if s[i] is not None)
            for i in range(len(COMPLETIONS))
        ]
        assert by_hand == pytest.approx(app.combine(mine), abs=1e-6)


@pytest.mark.parametrize("status", ["running", "failed"])
def test_a_run_in_training_or_one_that_failed_is_refused_and_nothing_is_written(tmp_path, status):
    run = _run(tmp_path / "runs", status=status)
    with pytest.raises(InputError, match="still training" if status == "running" else "ended as failed"):
        _export(run, tmp_path / "project")
    assert not (tmp_path / "project").exists()


def test_a_folder_with_files_in_it_is_not_written_over(tmp_path):
    run = _run(tmp_path / "runs")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "mine.txt").write_text("keep")
    with pytest.raises(InputError, match="is not an empty folder"):
        _export(run, tmp_path / "project")
    assert [p.name for p in (tmp_path / "project").iterdir()] == ["mine.txt"]


def test_the_prompts_are_the_ones_the_trainer_gets(tmp_path):
    from rloo_demo.task.data import run_prompts

    run = _run(tmp_path / "runs", prompt_words=3)
    _export(run, tmp_path / "project")
    lines = (tmp_path / "project" / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["prompt"] for line in lines] == list(run_prompts(run.config(), "train")["prompt"])
    assert all(len(json.loads(line)["prompt"].split()) <= 3 for line in lines[:50])
