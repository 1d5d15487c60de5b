"""A LoRA run's adapter names its base by the policy's name (a hub id or ``embedded:<asset>``), not by a folder of
this machine, and loads from that name. ``python -m pytest tests/test_lora_adapter.py`` (under a minute)."""

import json

import torch

from rloo_demo.config import RunConfig
from rloo_demo.engine.training import train
from rloo_demo.models.hub import resolve_model


def test_adapter_config_records_the_policy_name_and_loads_from_it(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = RunConfig(
        use_lora=True, lora_r=4, max_steps=2, prompts_per_step=2, num_generations=2, max_new_tokens=6,
        learning_rate=5e-2, output_dir=str(tmp_path),
    )  # fmt: skip
    state = train(config)
    assert state.status == "finished", state.error
    adapter = state.run.model_dir / "adapter"
    recorded = json.loads((adapter / "adapter_config.json").read_text())
    assert recorded["base_model_name_or_path"] == "embedded:tiny-imdb-gpt2"  # not /.../assets/tiny-imdb-gpt2
    assert str(tmp_path) not in json.dumps(recorded) and "/assets/" not in json.dumps(recorded)

    base = AutoModelForCausalLM.from_pretrained(resolve_model(recorded["base_model_name_or_path"]))
    loaded = PeftModel.from_pretrained(base, adapter).eval()
    merged = AutoModelForCausalLM.from_pretrained(state.run.model_dir).eval()
    ids = torch.tensor([[10, 20, 30, 40, 50]])
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-4)
        plain = AutoModelForCausalLM.from_pretrained(resolve_model("embedded:tiny-imdb-gpt2")).eval()
        assert not torch.allclose(plain(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-4)  # it trained
