"""Bigger-model options on the tiny policy: LoRA through PEFT (the reference is the adapter-disabled base, no second
copy), TRL trackers through report_to, bf16 validation, and the model card in every trained model folder.

``python -m pytest tests/engine/test_scale.py``
"""

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from rloo_demo.config import RunConfig
from rloo_demo.engine.training import RunState, build_trainer, train
from rloo_demo.store.folder import RunFolder


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


def held_params(trainer) -> int:
    """Parameters the trainer keeps in memory for policy and reference."""
    return n_params(trainer.model) + n_params(trainer.ref_model)


def make_trainer(tmp_path, **kw):
    config = RunConfig(max_steps=2, prompts_per_step=2, max_new_tokens=8, output_dir=str(tmp_path), **kw)
    state = RunState(config)
    state.run = RunFolder.create(config)
    return build_trainer(config, state)


def test_lora_uses_the_adapter_disabled_base_as_reference(tmp_path):
    full = make_trainer(tmp_path / "full")
    lora = make_trainer(tmp_path / "lora", use_lora=True, lora_r=4)
    base = n_params(AutoModelForCausalLM.from_pretrained(full.accelerator.unwrap_model(full.model).name_or_path))
    assert full.ref_model is not None and held_params(full) == 2 * base  # policy + a full reference copy
    assert lora.ref_model is None  # the reference is the base with the adapter disabled
    adapter = sum(p.numel() for p in lora.model.parameters() if p.requires_grad)
    assert 0 < adapter < 0.1 * base
    assert held_params(lora) == base + adapter  # one copy of the base weights, not two
    frozen = [p for n, p in lora.model.named_parameters() if "lora_" not in n]
    assert frozen and not any(p.requires_grad for p in frozen)


@pytest.mark.slow
def test_lora_run_saves_adapter_and_merged_model(tmp_path):
    config = RunConfig(
        max_steps=3, prompts_per_step=2, max_new_tokens=8, output_dir=str(tmp_path), use_lora=True, learning_rate=5e-3
    )
    state = train(config)
    assert state.status == "finished", state.error
    model_dir = state.run.model_dir
    assert (model_dir / "adapter" / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(
        state.trainer.accelerator.unwrap_model(state.trainer.model).name_or_path
    )
    diffs = [
        not torch.equal(a, b) for a, b in zip(merged.state_dict().values(), base.state_dict().values(), strict=True)
    ]
    assert any(diffs)  # the merged adapter changed the weights


def test_model_card_and_tensorboard_tracker(tmp_path):
    config = RunConfig(
        max_steps=2, prompts_per_step=2, max_new_tokens=8, output_dir=str(tmp_path), report_to="tensorboard"
    )
    state = train(config)
    assert state.status == "finished", state.error
    card = (state.run.model_dir / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["base_model"] == "tiny-imdb-gpt2" and meta["library_name"] == "transformers"
    assert {"trl", "rloo"} <= set(meta["tags"])
    assert "vader_compound" in card and "num_generations: 4" in card
    events = list((state.run.path / "trainer").rglob("events.out.tfevents.*"))
    assert events, "TensorBoard wrote no event file"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert "train/reward" in acc.Tags()["scalars"]
    state.run.write_evaluation(
        {
            "base_mean_reward": 0.1,
            "trained_mean_reward": 0.5,
            "difference": 0.4,
            "difference_ci95": [0.3, 0.5],
            "num_prompts": 64,
            "heldout_scorers": [],
            "per_function": {"vader_compound": {"base": 0.1, "trained": 0.5}},
        }
    )
    card = (state.run.model_dir / "README.md").read_text()
    assert "trained_mean_reward=0.5000" in card and "[+0.3000, +0.5000]" in card


def test_bf16_needs_a_gpu():
    problems = RunConfig(bf16=True).problems()
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        assert "bf16" not in problems
    else:
        assert "needs a GPU" in problems["bf16"]
