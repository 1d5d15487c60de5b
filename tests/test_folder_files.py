"""The files a run folder writes besides its records (store/folder.py, store/modelcard.py), read back and compared
with what the test expects line for line: the model card with an evaluation, the adapter's portable base, an
evaluation's JSON, the rollouts of one step, and the refusal of a folder that is not a run."""

import json
from pathlib import Path

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


# ----------------------------------------------------------------------------- the model folder, the run's name


def _tiny_policy():
    from rloo_demo.models.policy import load_policy

    return load_policy(RunConfig().policy)


def test_a_saved_model_is_complete_replaces_the_old_one_and_holds_the_weights_it_was_given(tmp_path):
    import torch
    from safetensors.torch import load_file

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="saved"))
    model, tokenizer = _tiny_policy()
    first = run.save_model(model, tokenizer)
    (first / "stale-marker").write_text("from the first save")
    state = {k: v.clone() * 0.5 for k, v in model.state_dict().items()}  # the weights a sharded engine gathered
    final = run.save_model(model, tokenizer, state_dict=state)
    assert final == run.path / "model" and run.model_dir == final
    names = {p.name for p in final.iterdir()}
    assert {"config.json", "model.safetensors", "README.md", "tokenizer_config.json"} <= names
    assert "stale-marker" not in names  # the second save replaced the first whole
    assert not (run.path / ".model.tmp").exists() and not (run.path / ".model.old").exists()
    saved = load_file(final / "model.safetensors")
    some = next(k for k in saved if k.endswith("c_attn.weight"))
    torch.testing.assert_close(saved[some], state[some])


def test_a_lora_model_keeps_its_adapter_with_a_portable_base_beside_the_merged_model(tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model

    config = RunConfig(output_dir=str(tmp_path), run_name="lora")
    run = RunFolder.create(config)
    base, tokenizer = _tiny_policy()
    torch.manual_seed(0)
    lora = get_peft_model(base, LoraConfig(r=2, target_modules=["c_attn"], init_lora_weights=False))
    ids = tokenizer("A film", return_tensors="pt").input_ids
    with torch.no_grad():
        expected = lora(ids).logits
    final = run.save_model(lora, tokenizer)
    adapter = json.loads((final / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == config.policy
    assert (final / "adapter" / "tokenizer_config.json").is_file() and (final / "config.json").is_file()
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(final)
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, expected, atol=1e-4, rtol=1e-4)


def test_a_full_disk_during_the_save_leaves_no_half_model_and_another_error_passes_through(tmp_path):
    import errno

    from rloo_demo.store.folder import DiskFull

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="full"))
    _, tokenizer = _tiny_policy()

    class Failing:
        def __init__(self, exc):
            self.exc = exc

        def save_pretrained(self, path, **kwargs):
            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "half.bin").write_bytes(b"x" * 10)
            raise self.exc

    with pytest.raises(DiskFull, match="^disk full: the server's disk filled up while the trained model was saved"):
        run.save_model(Failing(OSError(errno.ENOSPC, "No space left on device")), tokenizer)
    assert not (run.path / ".model.tmp").exists() and run.model_dir is None
    with pytest.raises(PermissionError):
        run.save_model(Failing(PermissionError(errno.EACCES, "denied")), tokenizer)


def test_which_failures_mean_a_full_disk():
    import errno

    from rloo_demo.store.folder import DiskFull, is_disk_full_error

    class SafetensorError(Exception):
        pass

    def wrapped(exc, depth):
        for _ in range(depth):
            try:
                raise RuntimeError("wrapper") from exc
            except RuntimeError as outer:
                exc = outer
        return exc

    assert is_disk_full_error(OSError(errno.ENOSPC, "x")) and is_disk_full_error(OSError(errno.EDQUOT, "x"))
    assert is_disk_full_error(DiskFull("x"))
    assert is_disk_full_error(SafetensorError("I/O error: No space left on device (os error 28)"))
    assert is_disk_full_error(SafetensorError("os error 28"))
    assert is_disk_full_error(SafetensorError("No space left on device"))  # either wording
    assert not is_disk_full_error(SafetensorError("invalid header"))
    assert not is_disk_full_error(RuntimeError("No space left (os error 28)"))  # the text alone is not enough
    assert not is_disk_full_error(OSError(errno.EACCES, "x")) and not is_disk_full_error(None)
    assert is_disk_full_error(wrapped(OSError(errno.ENOSPC, "x"), 7))  # the cause of a cause ... 7 deep
    assert not is_disk_full_error(wrapped(OSError(errno.ENOSPC, "x"), 8))  # 8 deep: past the chain followed


def test_a_runs_default_name_is_its_time_policy_k_and_beta(monkeypatch):
    import time

    from rloo_demo.store.folder import default_run_name

    monkeypatch.setattr(time, "strftime", lambda fmt: "20261201-153000" if fmt == "%Y%m%d-%H%M%S" else "?")
    named = RunConfig(policy="org/Some_Model v2.1", num_generations=6, beta=0.025)
    assert default_run_name(named) == "20261201-153000-Some-Model-v2.1-k6-b0.025"
    assert default_run_name(RunConfig(policy="embedded:tiny-imdb-gpt2")) == (
        f"20261201-153000-tiny-imdb-gpt2-k{RunConfig().num_generations}-b{RunConfig().beta:g}"
    )
    assert default_run_name(RunConfig(policy="org/+++")).startswith("20261201-153000-policy-")
    long = default_run_name(RunConfig(policy="x" * 60 + ".-"))
    assert long.split("-k")[0] == "20261201-153000-" + "x" * 40


def test_a_cards_config_block_keeps_the_field_order_and_missing_figures_read_as_such(tmp_path):
    config = RunConfig(output_dir=str(tmp_path), **CONFIG)
    card = model_card(config, [{"step": 4}], {**EVALUATION, "heldout_scorers": []})
    block = yaml.safe_dump(config.to_dict(), sort_keys=False).strip()  # the fields in RunConfig's order
    assert card.endswith("## Config\n\n```yaml\n" + block + "\n```\n")
    assert "- training reward +nan (step 1) -> +nan (step 4), KL to reference 0.000 nats/token" in card
    bare = {k: v for k, v in EVALUATION.items() if k != "heldout_scorers"}
    assert "(not trained on)" not in model_card(config, [], bare)


def test_notes_are_written_cut_and_on_one_line_where_a_label_must_be(tmp_path):
    from rloo_demo.store import labels

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="n"))
    got = labels.write_notes(run, label="a\nb" + "L" * 100, note="x\ny" + "N" * 3000)
    assert got == {"label": ("a b" + "L" * 100)[:80], "note": ("x\ny" + "N" * 3000)[:2000]}
    stored = (run.path / labels.NOTES_FILE).read_text()
    assert stored.startswith('{\n  "label": "a bLLL') and stored.endswith("\n}\n")  # indented by two


def test_rollouts_are_written_without_blanks_after_separators(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="c"))
    group = {"step": 1, "group": 0, "completions": [{"text": "a, b: c", "token_logp": [-1.5, -0.25]}]}
    run.append_rollouts(1, [group])
    assert (run.path / "rollouts.jsonl").read_text() == json.dumps(group, separators=(",", ":")) + "\n"
