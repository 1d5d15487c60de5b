"""A policy's size is known before it loads or downloads, and one that cannot fit next to its reference copy is
refused with both sizes in the message. ``python -m pytest tests/models/test_model_size.py`` (under a minute).
"""

import json
import struct
import subprocess
import sys

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.models import model_size
from rloo_demo.models.hub import resolve_model
from rloo_demo.models.model_size import TooLarge, check_policy_fits, folder_parameters, safetensors_parameters

REV = "0123456789abcdef0123456789abcdef01234567"


def fake_safetensors(path, shapes: dict[str, list[int]], dtype="BF16"):
    """A safetensors file whose header claims these tensors; the data is not there (only the header is read)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        size = 2
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


def fake_cached_model(home, repo_id, shapes):
    """``hub/models--ORG--NAME/snapshots/REV`` with a config.json and a huge-claiming safetensors file."""
    repo = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / REV
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    (snap / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    fake_safetensors(snap / "model.safetensors", shapes)
    return snap


def test_parameters_come_from_the_headers_alone(tmp_path):
    embedded = resolve_model("embedded:tiny-imdb-gpt2")
    from transformers import AutoModelForCausalLM

    real = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(embedded).parameters())
    assert folder_parameters(embedded) == real  # tied embeddings are stored once, counted once
    path = fake_safetensors(tmp_path / "m.safetensors", {"a": [1000, 1000], "b": [10]})
    assert safetensors_parameters(path) == 1_000_010
    assert path.stat().st_size < 1000  # nothing but the header was written, and nothing else was read


def test_a_policy_too_large_for_the_free_memory_is_refused_with_its_size(tmp_path, monkeypatch):
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    fake_safetensors(folder / "model-00001-of-00002.safetensors", {"w1": [50_000, 10_000]})
    fake_safetensors(folder / "model-00002-of-00002.safetensors", {"w2": [50_000, 10_000]})  # 1B parameters
    config = RunConfig(policy=str(folder))
    with pytest.raises(TooLarge) as info:
        check_policy_fits(config, free=(6 * 10**9, "RAM"))
    message = str(info.value)
    assert "1.00B parameters (4.0 GB in fp32)" in message
    assert "the policy and its reference copy need 8.0 GB" in message and "only 6.0 GB of RAM is free" in message
    # LoRA (the reference is the base with the adapter off) or beta 0 (no reference) hold one copy: it fits
    assert check_policy_fits(RunConfig(policy=str(folder), use_lora=True), free=(6 * 10**9, "RAM")) == 4 * 10**9
    assert check_policy_fits(RunConfig(policy=str(folder), beta=0.0), free=(6 * 10**9, "GPU")) == 4 * 10**9
    # the default measures this machine's free memory: pretend it has 1 GB
    monkeypatch.setattr(model_size, "free_memory", lambda: (10**9, "RAM"))
    with pytest.raises(TooLarge, match="only 1.0 GB of RAM is free"):
        check_policy_fits(RunConfig(policy=str(folder), use_lora=True))
    assert check_policy_fits(RunConfig()) is not None  # the embedded policy fits anywhere


def test_train_refuses_a_huge_cached_hub_model_before_loading_it(tmp_path):
    """The cache holds a model whose header claims 2 trillion parameters: refused in seconds, no run folder."""
    fake_cached_model(tmp_path / "hf", "big-org/huge-instruct", {"embed": [2_000_000, 1_000_000]})
    out = subprocess.run(
        [sys.executable, "-m", "rloo_demo", "train", "--policy", "big-org/huge-instruct"]
        + ["--output-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: policy 'big-org/huge-instruct' has 2000.00B parameters (8000.0 GB in fp32)")
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()


def test_an_uncached_hub_model_is_measured_before_any_download(monkeypatch):
    """Online, the hub's safetensors metadata (a few small requests) decides before snapshot_download runs."""
    import huggingface_hub

    from rloo_demo.models import model_size

    calls = []

    def snapshot_download(repo_id, local_files_only=False, **kw):
        calls.append(("download", repo_id, local_files_only))
        raise FileNotFoundError("not cached")  # local_files_only: not in the cache; a real download must not happen

    class Metadata:
        parameter_count = {"BF16": 7_000_000_000}

    def metadata(repo_id):
        calls.append(("metadata", repo_id))
        return Metadata()

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", metadata)
    monkeypatch.setattr(model_size, "is_offline", lambda: False)  # where check_policy_fits looks it up
    with pytest.raises(TooLarge, match=r"7.00B parameters \(28.0 GB in fp32\)"):
        check_policy_fits(RunConfig(policy="org/seven-b"), free=(16 * 10**9, "GPU"))
    assert calls == [("download", "org/seven-b", True), ("metadata", "org/seven-b")]
