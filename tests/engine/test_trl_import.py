"""A config for TRL's ``trl rloo`` as the app's RunConfig (engine/trl_import.py, ``train --trl-config``): a run
exported with export-trl comes back as the same RunConfig, a hand-written TRL config gives the RunConfig of the
matching flags, and each setting the app cannot honour is refused by its name in one ``error:`` line.

``python -m pytest tests/engine/test_trl_import.py`` (about 20 s: one test trains one step)."""

import dataclasses

import pytest
import yaml
from factories import NON_DEFAULT_RUN

from rloo_demo.cli import build_parser, config_from_args
from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_import import TrlConfigError, run_config_from_trl
from rloo_demo.engine.trl_project import export_trl_project
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.trl_export import IN_FILES, NOT_IN_TRL, PROMPTS_FILE

# Non-default values throughout, each different from the others, so that a dropped or swapped one shows.
SETTINGS = NON_DEFAULT_RUN | dict(
    rewards=["vader_compound", "length_penalty", "keyword:great", "length_target:12"],
    reward_weights=[0.7, 0.2, 1.5, 0.4],
    bf16=True,
    report_to="tensorboard",
)
# What the export documents as not carried: the app's settings TRL lacks (config.yaml's comments), the prompts'
# making (prompts.jsonl holds the prompts it made) and the runs folder.
NOT_CARRIED = set(NOT_IN_TRL) | {k for k, v in IN_FILES.items() if v == PROMPTS_FILE}


def _import(path):
    return run_config_from_trl(path.read_text(), path.parent)


def test_an_exported_run_comes_back_as_the_same_run_config(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path / "runs"), run_name="done", **SETTINGS))
    run.set_status("finished")
    out = tmp_path / "project"
    export_trl_project(run, out)
    back = _import(out / "config.yaml")
    original = run.config().to_dict()
    kept = {k: v for k, v in original.items() if k not in NOT_CARRIED}
    assert {k: v for k, v in back.to_dict().items() if k not in NOT_CARRIED} == kept
    # every non-default setting of the run is among those compared (not a comparison of defaults)
    assert set(SETTINGS) - NOT_CARRIED <= set(kept) and kept["policy"] == "embedded:tiny-imdb-gpt2"
    assert back.data_source == str((out / PROMPTS_FILE).resolve())  # the prompts the run trained on
    # and exported again, it is the same config.yaml, apart from the prompts' note of the comments
    again = RunFolder.create(dataclasses.replace(back, output_dir=str(tmp_path / "runs2")))
    again.set_status("finished")
    export_trl_project(again, tmp_path / "project2")

    def settings(path):
        return [line for line in path.read_text().splitlines() if not line.startswith("#")]

    assert settings(tmp_path / "project2" / "config.yaml") == settings(out / "config.yaml")


def test_a_trl_config_is_the_run_of_the_matching_flags(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "This movie was"}\n')
    (tmp_path / "scores.py").write_text("def shout(prompts, completions, **kw):\n    return [1.0] * len(prompts)\n")
    (tmp_path / "c.yaml").write_text(
        "model_name_or_path: someone/a-model\n"
        "dataset_name: data/p.jsonl\n"
        "reward_funcs: [length_penalty, scores.shout, vader_compound]\n"
        "reward_weights: [0.25, 2.0, 0.5]\n"
        "learning_rate: 3e-4\n"  # a text to YAML: TRL's parser makes it a number, so does the import
        "per_device_train_batch_size: 12\n"
        "num_generations: 3\n"
        "max_completion_length: 9\n"
        "temperature: 0.6\n"
        "beta: 0.05\n"
        "seed: 5\n"
        "max_steps: 4\n"
        "lr_scheduler_type: constant\n"  # TRL's value that the app trains with anyway: honoured
        "report_to: [trackio, wandb]\n"
        "use_peft: true\n"
        "lora_r: 2\n"
        "lora_target_modules: [c_attn, c_proj]\n"
        "output_dir: elsewhere\n"
    )
    parse = build_parser().parse_args
    got = config_from_args(parse(["train", "--trl-config", str(tmp_path / "c.yaml")]))
    flags = ["--policy", "someone/a-model", "--data-source", str(tmp_path / "data" / "p.jsonl")]
    flags += ["--rewards", "length_penalty", f"module:{tmp_path / 'scores.py'}:shout", "vader_compound"]
    flags += ["--reward-weights", "0.25", "2.0", "0.5", "--learning-rate", "0.0003", "--prompts-per-step", "4"]
    flags += ["--num-generations", "3", "--max-new-tokens", "9", "--temperature", "0.6", "--beta", "0.05"]
    flags += ["--seed", "5", "--max-steps", "4", "--report-to", "trackio,wandb", "--use-lora", "--lora-r", "2"]
    flags += ["--lora-target-modules", "c_attn", "c_proj"]
    assert got == config_from_args(parse(["train", *flags]))
    # flags after it override it, as after --config
    over = config_from_args(parse(["train", "--trl-config", str(tmp_path / "c.yaml"), "--seed", "9"]))
    assert over == dataclasses.replace(got, seed=9)


def test_trl_defaults_left_out_of_the_yaml_are_not_the_users_settings(tmp_path):
    """A YAML with the dataset alone is the app's defaults (TRL's own defaults, e.g. its 1e-6 learning rate and
    linear schedule, are not asked for), with that dataset."""
    got = run_config_from_trl("dataset_name: stanfordnlp/imdb\n", tmp_path)
    assert got == RunConfig(data_source="stanfordnlp/imdb")


@pytest.mark.parametrize(
    "text, field, reason",
    [
        ("lr_scheduler_type: cosine", "lr_scheduler_type", "rloo-demo trains with 'constant'"),
        ("warmup_ratio: 0.1", "warmup_ratio", "no such setting"),
        ("gradient_accumulation_steps: 4", "gradient_accumulation_steps", "rloo-demo trains with 1"),
        ("use_peft: true\nlora_dropout: 0.1", "lora_dropout", "rloo-demo trains with 0.0"),
        ("reward_funcs: [accuracy_reward]", "reward_funcs", "'solution' column"),
        ("reward_funcs: [nowhere.f]", "reward_funcs", "no file"),
        ("num_generations: 4\nper_device_train_batch_size: 6", "per_device_train_batch_size", "multiple"),
        ("dataset_train_split: test", "dataset_train_split", "'train' rows"),
        ("lora_r: 4", "lora_r", "use_peft: true"),
    ],
    ids=["scheduler", "unknown", "accumulation", "lora-dropout", "registry", "no-module", "batch", "split", "lora-off"],
)
def test_what_the_app_cannot_honour_is_refused_by_name_in_one_line(text, field, reason, tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("dataset_name: stanfordnlp/imdb\n" + text + "\n")
    with pytest.raises(TrlConfigError) as info:
        _import(tmp_path / "c.yaml")
    assert info.value.field == field
    assert cli_main(["train", "--trl-config", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --trl-config: {field}: ") and reason in err and err.count("\n") == 1


def test_config_and_trl_config_together_are_refused(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("dataset_name: stanfordnlp/imdb\n")
    (tmp_path / "r.yaml").write_text("seed: 3\n")
    assert cli_main(["train", "--config", str(tmp_path / "r.yaml"), "--trl-config", str(tmp_path / "c.yaml")]) == 2
    assert capsys.readouterr().err == "error: give --config or --trl-config, not both\n"


def test_the_yaml_as_written_by_hand_for_trl_parses_with_trls_parser_too(tmp_path):
    """The keys the import reads are TRL's: the same file parses with ``trl rloo``'s own parser (bf16 off: TRL
    turns it on by default, which a machine without a GPU refuses)."""
    from trl.scripts.rloo import make_parser

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"dataset_name": "x/y", "max_completion_length": 9, "bf16": False}))
    script, training, _, _ = make_parser().parse_args_and_config(["--config", str(path)])
    assert (script.dataset_name, training.max_completion_length) == ("x/y", 9)
    assert _import(path).max_new_tokens == 9


def test_train_with_an_exported_config_trains_that_run(tmp_path, capsys):
    """The flag end to end: an exported project's config.yaml trains (one step, flags on top) a run whose saved
    settings are the imported ones."""
    settings = dict(num_generations=2, prompts_per_step=2, max_new_tokens=4, learning_rate=3e-4, seed=7)
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path / "runs"), run_name="done", max_steps=3, **settings))
    run.set_status("finished")
    export_trl_project(run, tmp_path / "project")
    argv = ["train", "--trl-config", str(tmp_path / "project" / "config.yaml"), "--max-steps", "1"]
    argv += ["--output-dir", str(tmp_path / "again"), "--run-name", "again", "--snapshot-every", "0"]
    assert cli_main(argv) == 0, capsys.readouterr().err
    saved = RunFolder(tmp_path / "again" / "again").config()
    assert saved.data_source == str((tmp_path / "project" / PROMPTS_FILE).resolve())
    assert {k: getattr(saved, k) for k in settings} == settings and saved.max_steps == 1
