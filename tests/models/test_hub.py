"""Hub ids offline: a pre-populated HF cache works, an uncached id fails fast and clearly.

``python -m pytest tests/models/test_hub.py``. Each case runs in a fresh interpreter because huggingface_hub reads
HF_HOME when it is imported.

A LoRA run's adapter names its base by the policy's name (a hub id or ``embedded:<asset>``), not by a folder of
this machine, and loads from that name. ``python -m pytest tests/models/test_hub.py`` (under a minute)."""

import json
import subprocess
import sys

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from rloo_demo.config import RunConfig
from rloo_demo.engine.training import train
from rloo_demo.models.hub import resolve_model

# ----------------------------------------------------------------------------- hub


REV = "5f91d94bd9cd7190a9f3216ff93cd1dd95f2c7be"


def populate_cache(home, repo_id="sshleifer/tiny-gpt2"):
    """Lay out ``hub/models--ORG--NAME/snapshots/REV`` and ``refs/main`` as the hub client does, with a tiny
    GPT-2 and the embedded tokenizer inside."""
    from transformers import AutoTokenizer

    repo = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / REV
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    tok = AutoTokenizer.from_pretrained(resolve_model("embedded:tiny-imdb-gpt2"))
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=8, n_layer=1, n_head=2, n_positions=64)).save_pretrained(
        snap
    )
    tok.save_pretrained(snap)
    return snap


def run_py(code, home):
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_cached_hub_id_loads_offline(tmp_path):
    snap = populate_cache(tmp_path)
    code = (
        "from rloo_demo.models.policy import load_policy;"
        "from rloo_demo.models.hub import resolve_model;"
        "m, t = load_policy('sshleifer/tiny-gpt2');"
        "import json; print(json.dumps([resolve_model('sshleifer/tiny-gpt2'), m.config.n_layer, t.padding_side]))"
    )
    out = run_py(code, tmp_path)
    assert out.returncode == 0, out.stderr
    folder, n_layer, side = json.loads(out.stdout.strip().splitlines()[-1])
    assert folder == str(snap) and n_layer == 1 and side == "left"


def test_uncached_id_fails_fast_with_a_clear_message(tmp_path):
    code = (
        "import sys\n"
        "from rloo_demo.models.hub import resolve_model, ResolveError\n"
        "try:\n    resolve_model('someone/not-cached-model')\n"
        "except ResolveError as e:\n    print('torch' in sys.modules); print(e)\n"
    )
    out = run_py(code, tmp_path)
    assert out.returncode == 0, out.stderr
    torch_loaded, message = out.stdout.strip().split("\n", 1)
    assert torch_loaded == "False"  # it failed before any model (or torch) was loaded
    assert "'someone/not-cached-model'" in message
    assert "hub cannot be reached" in message
    assert "embedded:tiny-imdb-gpt2" in message


def test_train_refuses_uncached_policy_before_loading(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rloo_demo",
            "train",
            "--policy",
            "nobody/missing",
            "--output-dir",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: model 'nobody/missing' is not in the local Hugging Face cache")
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()  # no run folder for a run that never started


def test_bad_names():
    from rloo_demo.models.hub import ResolveError

    with pytest.raises(ResolveError, match="not a valid hub model id|neither a local folder"):
        resolve_model("not a valid id!!")
    with pytest.raises(ResolveError, match="no model given"):
        resolve_model("  ")


# ----------------------------------------------------------------------------- lora adapter


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
