"""The files a run folder writes besides its records (store/folder.py, store/modelcard.py), read back and compared
with what the test expects line for line: the model card with an evaluation, the adapter's portable base, an
evaluation's JSON, the rollouts of one step, and the refusal of a folder that is not a run."""

import json

import pytest
import yaml

from rloo_demo.config import RunConfig
from rloo_demo.errors import NotFound
from rloo_demo.store.folder import RunFolder, open_run, portable_adapter_config
from rloo_demo.store.modelcard import model_card

CONFIG = dict(rewards=["vader_compound", "length_penalty"], reward_weights=[1.0, 0.25], num_generations=3,
              max_steps=9, learning_rate=3e-5, beta=0.02, prompt_template="plain")
EVALUATION = {
    "base_mean_reward": 0.11111, "trained_mean_reward": 0.55556, "difference": 0.44446, "difference_ci95": [0.3, 0.6],
    "num_prompts": 12, "heldout_scorers": ["classifier"],
    "per_function": {"vader_compound": {"base": 0.2, "trained": 0.7}, "classifier": {"base": -0.1, "trained": 0.05}},
}


def test_the_model_card_line_for_line(tmp_path):
    config = RunConfig(output_dir=str(tmp_path), **CONFIG)
    metrics = [
        {"step": 1, "reward": -0.125, "kl": 0.0}, {"step": 2, "reward": 0.0}, {"step": 3, "reward": 0.5, "kl": 0.0375}
    ]
    card = model_card(config, metrics, EVALUATION)
    head, config_block = card.split("\n## Config\n", 1)
    base = config.policy.removeprefix("embedded:")
    assert head.split("\n") == [
        "---",
        f"base_model: {base}",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        "tags:",
        "- trl",
        "- rloo",
        "- rloo-demo",
        "---",
        f"# {base} trained with RLOO",
        "",
        f"`{base}` post-trained with RLOO (REINFORCE Leave-One-Out) through TRL's `RLOOTrainer` by rloo-demo.",
        "",
        "- reward: 1 x vader_compound + 0.25 x length_penalty",
        f"- K = 3 completions per prompt, {config.prompts_per_step} prompts per step, 3 of 9 steps, lr 3e-05, "
        "beta 0.02",
        f"- prompts: {config.data_source} (plain template)",
        "- training reward -0.125 (step 1) -> +0.500 (step 3), KL to reference 0.037 nats/token",
        "",
        "## Evaluation (held-out prompts, same sampling seed for base and trained)",
        "",
        "- base_mean_reward=0.1111",
        "- trained_mean_reward=0.5556",
        "- difference +0.4445, 95% bootstrap CI [+0.3000, +0.6000] over 12 prompts",
        "- vader_compound: base +0.2000, trained +0.7000",
        "- classifier (not trained on): base -0.1000, trained +0.0500",
        "",
    ]
    yaml_text = config_block.split("```yaml\n", 1)[1].split("\n```", 1)[0]
    assert yaml.safe_load(yaml_text) == config.to_dict()
    lora = model_card(RunConfig(use_lora=True), [], None)
    assert "- lora\n- peft\n---" in lora and "training reward" not in lora and "## Evaluation" not in lora
    assert "0 of 150 steps" in lora or f"0 of {RunConfig().max_steps} steps" in lora


def test_an_evaluation_is_saved_and_written_into_the_model_card(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="ev", **CONFIG))
    run.write_evaluation(EVALUATION)  # no model yet: the JSON alone
    assert run.evaluation() == EVALUATION and not (run.path / "model").exists()
    assert (run.path / "evaluation.json").read_text() == json.dumps(EVALUATION, indent=2) + "\n"
    (run.path / "model").mkdir()
    (run.path / "model" / "config.json").write_text("{}")
    run.write_evaluation({**EVALUATION, "num_prompts": 7})
    card = (run.path / "model" / "README.md").read_text()
    assert "over 7 prompts" in card and "- trained_mean_reward=0.5556" in card


def test_an_adapters_base_is_the_policys_name_not_a_local_folder(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 4, "base_model_name_or_path": "/root/.cache/x"}))
    portable_adapter_config(tmp_path, "embedded:tiny-imdb-gpt2")
    text = (tmp_path / "adapter_config.json").read_text()
    assert json.loads(text) == {"base_model_name_or_path": "embedded:tiny-imdb-gpt2", "r": 4}
    assert text == json.dumps({"base_model_name_or_path": "embedded:tiny-imdb-gpt2", "r": 4}, indent=2) + "\n"


def test_the_rollouts_of_one_step(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="ro"))
    run.append_rollouts(1, [{"step": 1, "group": 0}, {"step": 1, "group": 1}])  # each group carries its step
    run.append_rollouts(2, [{"step": 2, "group": 0}])
    assert [(r["step"], r["group"]) for r in run.rollouts()] == [(1, 0), (1, 1), (2, 0)]
    assert [(r["step"], r["group"]) for r in run.rollouts(2)] == [(2, 0)]
    assert run.rollouts(5) == []


def test_a_folder_without_a_config_is_not_a_run(tmp_path):
    with pytest.raises(NotFound, match=r"^'.*nothing' is not a run folder \(no config\.yaml\)$"):
        open_run(tmp_path / "nothing")
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="here"))
    assert open_run(run.path).path == run.path and open_run(str(run.path)).name == "here"
