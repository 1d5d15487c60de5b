"""Loading models, in this process: names resolved (with the hub's download replaced by a recorder), the policy's
module names for LoRA, a policy's files that cannot be read, and sizes from safetensors headers the test writes.

test_hub.py runs the real hub client against a cache it lays out, in fresh interpreters; these are the same paths
with every message word for word. ``python -m pytest tests/models/test_policy.py`` (a few seconds).
"""

import json
import shutil
import struct
from pathlib import Path

import huggingface_hub
import pytest

from rloo_demo.config import RunConfig
from rloo_demo.errors import ConfigError, NotFound
from rloo_demo.models import hub, model_size, modules
from rloo_demo.models.hub import ResolveError, resolve_dataset, resolve_model
from rloo_demo.models.policy import load_policy

EMBEDDED = Path(resolve_model("embedded:tiny-imdb-gpt2"))


def _message(call, *args):
    with pytest.raises(ResolveError) as err:
        call(*args)
    return str(err.value)


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize("word", ["1", "true", " TRUE ", "yes", "On"])
def test_the_hub_is_offline_for_each_word_that_means_yes(monkeypatch, word):
    monkeypatch.setenv("HF_HUB_OFFLINE", word)
    assert hub.is_offline() is True


@pytest.mark.parametrize("word", ["", "0", "false", "off", "2"])
def test_the_hub_is_online_for_anything_else(monkeypatch, word):
    monkeypatch.setenv("HF_HUB_OFFLINE", word)
    assert hub.is_offline() is False
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert hub.is_offline() is False


def test_no_name_is_refused_with_the_alternative_named():
    assert _message(resolve_model, "") == "no model given; use 'embedded:tiny-imdb-gpt2'"
    assert _message(resolve_model, "  ", "embedded:judge") == "no model given; use 'embedded:judge'"


def test_an_embedded_name_is_its_assets_folder_and_a_missing_one_says_how_to_rebuild(monkeypatch, tmp_path):
    assert resolve_model(" embedded:tiny-imdb-gpt2 ") == str(hub.ASSETS_DIR / "tiny-imdb-gpt2")
    assert _message(resolve_model, "embedded:nothing") == (
        "embedded model 'embedded:nothing' is missing from the assets folder; rebuild it with the script in "
        "scripts/ or set RLOO_DEMO_ASSETS to the folder that holds it"
    )
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text("{}")
    monkeypatch.setattr(hub, "ASSETS_DIR", tmp_path)
    assert resolve_model("embedded:tiny") == str(tmp_path / "tiny")


def test_a_local_folder_needs_a_config_and_a_path_like_name_is_never_a_hub_id(tmp_path, monkeypatch):
    folder = tmp_path / "m"
    folder.mkdir()
    assert _message(resolve_model, str(folder)) == f"model folder {str(folder)!r} does not exist or has no config.json"
    (folder / "config.json").write_text("{}")
    assert resolve_model(f" {folder} ") == str(folder)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model("~/m") == str(folder)
    for name in ("./nowhere", "/nowhere/at/all", "~/nowhere"):
        assert _message(resolve_model, name) == f"model folder {name!r} does not exist or has no config.json"


class _Hub:
    """``snapshot_download`` as the test wants it: cached or not, reachable or not; every call recorded."""

    def __init__(self, cached=None, online=None, error=OSError):
        self.calls, self.cached, self.online, self.error = [], cached, online, error

    def __call__(self, repo_id, **kw):
        self.calls.append((repo_id, kw))
        answer = self.cached if kw.get("local_files_only") else self.online
        if answer is None:
            raise self.error("no")
        return answer


def test_a_cached_hub_id_is_its_snapshot_without_asking_the_hub(monkeypatch):
    fake = _Hub(cached="/cache/snap")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert resolve_model("org/model") == "/cache/snap"
    assert fake.calls == [("org/model", {"repo_type": "model", "local_files_only": True})]
    assert resolve_dataset("org/data") == "/cache/snap"
    assert fake.calls[-1] == ("org/data", {"repo_type": "dataset", "local_files_only": True})


def test_an_uncached_id_offline_names_itself_the_cache_and_the_embedded_alternative(monkeypatch):
    fake = _Hub()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert _message(resolve_model, "org/model") == (
        "model 'org/model' is not in the local Hugging Face cache and the hub cannot be reached (HF_HUB_OFFLINE=1). "
        "Use the embedded model 'embedded:tiny-imdb-gpt2', or download 'org/model' on a machine with network access "
        "into HF_HOME first."
    )
    assert _message(resolve_dataset, "org/data").startswith(
        "dataset 'org/data' is not in the local Hugging Face cache and the hub cannot be reached (HF_HUB_OFFLINE=1). "
        "Use the embedded dataset 'embedded:imdb'"
    )
    assert len(fake.calls) == 2  # the cache was asked, the hub never


def test_an_uncached_id_online_is_downloaded_and_a_failed_download_says_why(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    fake = _Hub(online="/downloaded")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert resolve_model("org/model", "embedded:x") == "/downloaded"
    assert fake.calls[1] == ("org/model", {"repo_type": "model", "etag_timeout": 5})
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _Hub(error=ConnectionError))
    assert _message(resolve_model, "org/model", "embedded:x") == (
        "model 'org/model' could not be fetched: the Hugging Face Hub could not be reached or has no such repo "
        "(ConnectionError). Use the embedded model 'embedded:x', or check the id."
    )


def test_a_name_that_is_no_hub_id_is_refused_before_the_hub_is_asked(monkeypatch):
    fake = _Hub(cached="/never")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    message = _message(resolve_model, "bad name!")
    assert message.startswith("'bad name!' is neither a local folder nor a valid hub model id (")
    assert _message(resolve_dataset, "a--b").startswith("'a--b' is neither a local folder nor a valid hub dataset id")
    assert fake.calls == []


def test_a_hub_dataset_is_loaded_from_its_snapshot(monkeypatch):
    import datasets

    monkeypatch.setattr(huggingface_hub, "snapshot_download", _Hub(cached="/cache/data"))
    loaded = []
    monkeypatch.setattr(datasets, "load_dataset", lambda folder, split: loaded.append((folder, split)) or "rows")
    assert hub.load_hub_dataset("org/data", split="test") == "rows" and loaded == [("/cache/data", "test")]
    assert hub.load_hub_dataset("org/data") == "rows" and loaded[-1] == ("/cache/data", "train")


# ----------------------------------------------------------------------------- LoRA's module names

ADAPTABLE = "c_attn, c_fc, c_proj, lm_head, wpe, wte"  # GPT-2's linear, Conv1D and embedding layers


def test_the_policys_modules_are_named_from_its_config_alone():
    types_ = dict(modules.module_types(str(EMBEDDED)))
    assert types_["transformer.h.0.attn.c_attn"] == "Conv1D" and types_["transformer.wte"] == "Embedding"
    assert types_["transformer.h.0.attn"] == "GPT2Attention" and types_["lm_head"] == "Linear"
    assert "" not in types_  # the model itself is not one of its modules
    layers = json.loads((EMBEDDED / "config.json").read_text())["n_layer"]
    assert sum(name.endswith(".attn.c_attn") for name in types_) == layers


def test_a_name_matches_a_module_whole_or_as_its_last_dotted_parts():
    assert modules.matches("transformer.h.0.attn.c_attn", "c_attn")
    assert modules.matches("transformer.h.0.attn.c_attn", "attn.c_attn")
    assert modules.matches("c_attn", "c_attn")
    assert not modules.matches("transformer.h.0.attn.xc_attn", "c_attn")
    assert not modules.matches("transformer.h.0.attn.c_attn", "c_att")


def test_lora_targets_that_do_not_fit_the_policy_are_told_what_it_has():
    folder = str(EMBEDDED)
    assert modules.lora_target_problem(folder, ["c_attn", "h.0.mlp.c_fc"]) is None
    assert modules.lora_target_problem(folder, ["c_attn", "q_proj"]) == (
        f"the policy has no module named 'q_proj'; this policy's adaptable layers are {ADAPTABLE} (or leave it "
        "empty: every linear layer)"
    )
    assert modules.lora_target_problem(folder, ["attn"]) == (
        f"'attn' names a GPT2Attention block, which LoRA cannot adapt; this policy's adaptable layers are {ADAPTABLE}"
    )
    assert modules.lora_target_problem(folder, ["wte", "h.0"]) == (
        f"'h.0' names a GPT2Block block, which LoRA cannot adapt; this policy's adaptable layers are {ADAPTABLE}"
    )


def test_more_than_twenty_adaptable_names_are_cut_with_an_ellipsis(monkeypatch):
    many = tuple((f"layer.n{i:02d}", "Linear") for i in range(25)) + (("layer", "Block"),)
    monkeypatch.setattr(modules, "module_types", lambda folder: many)
    names = ", ".join(f"n{i:02d}" for i in range(20))
    assert modules.lora_target_problem("x", ["layer"]) == (
        f"'layer' names a Block block, which LoRA cannot adapt; this policy's adaptable layers are {names} ..."
    )
    exactly = tuple((f"layer.n{i:02d}", "Linear") for i in range(20)) + (("layer", "Block"),)
    monkeypatch.setattr(modules, "module_types", lambda folder: exactly)
    assert modules.lora_target_problem("x", ["layer"]).endswith(f"adaptable layers are {names}")


def test_lora_targets_are_checked_only_when_lora_is_on_and_names_some():
    folder = str(EMBEDDED)
    modules.check_lora_targets(RunConfig(use_lora=False, lora_target_modules=["q_proj"]), folder)
    modules.check_lora_targets(RunConfig(use_lora=True, lora_target_modules=None), folder)
    modules.check_lora_targets(RunConfig(use_lora=True, lora_target_modules=["c_attn"]), folder)
    with pytest.raises(ConfigError) as err:
        modules.check_lora_targets(RunConfig(use_lora=True, lora_target_modules=["c_attn", "q_proj"]), EMBEDDED)
    assert list(err.value.problems) == ["lora_target_modules"]
    assert err.value.problems["lora_target_modules"].startswith("the policy has no module named 'q_proj'")


# ----------------------------------------------------------------------------- a policy's files


def _copy_policy(to: Path) -> Path:
    shutil.copytree(EMBEDDED, to)
    return to


def test_a_policy_loads_with_left_padding_and_a_pad_token(tmp_path):
    folder = _copy_policy(tmp_path / "policy")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("pad_token", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    model, tokenizer = load_policy(str(folder))
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == tokenizer.eos_token
    assert next(model.parameters()).dtype.is_floating_point and str(next(model.parameters()).dtype) == "torch.float32"


@pytest.mark.parametrize(("name", "what"), [("policy", "the model {name!r}"), ("model", "this run's model")])
def test_a_policy_whose_weights_cannot_be_read_is_not_found_saying_so(tmp_path, name, what):
    folder = _copy_policy(tmp_path / name)
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(NotFound) as err:
        load_policy(str(folder))
    text = str(err.value)
    assert text.startswith(what.format(name=str(folder)) + " cannot be read (")
    assert text.endswith("); its files are corrupt or incomplete")
    reason = text.removeprefix(what.format(name=str(folder)) + " cannot be read (").split(")")[0]
    assert ": " in reason and len(reason.split(": ", 1)[1]) <= 120  # the loader's type, then its first line


def test_a_policy_whose_error_has_no_text_is_told_by_its_type(tmp_path, monkeypatch):
    import transformers

    folder = _copy_policy(tmp_path / "policy")

    def fail(*a, **k):
        raise ValueError("   ")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fail)
    with pytest.raises(NotFound) as err:
        load_policy(str(folder))
    expected = f"the model {str(folder)!r} cannot be read (ValueError); its files are corrupt or incomplete"
    assert str(err.value) == expected

    def long(*a, **k):
        raise ValueError("x" * 300 + "\nsecond line")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", long)
    with pytest.raises(NotFound) as err:
        load_policy(str(folder))
    assert f"(ValueError: {'x' * 120}); its files" in str(err.value)


# ----------------------------------------------------------------------------- sizes


def _safetensors(path: Path, tensors: dict, length=None) -> Path:
    header = json.dumps(tensors).encode()
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header)
    return path


def test_parameters_are_the_products_of_the_shapes_of_every_shard(tmp_path):
    _safetensors(
        tmp_path / "a.safetensors",
        {"__metadata__": {"format": "pt"}, "w": {"shape": [3, 5]}, "b": {"shape": [7]}, "odd": "not a dict"},
    )
    _safetensors(tmp_path / "b.safetensors", {"s": {"shape": []}, "x": {"shape": [2, 2, 2]}})
    assert model_size.safetensors_parameters(tmp_path / "a.safetensors") == 15 + 7
    assert model_size.folder_parameters(tmp_path) == 22 + 1 + 8  # a scalar is one parameter
    bins = tmp_path / "bins"
    bins.mkdir()
    (bins / "pytorch_model.bin").write_bytes(b"\0" * 40)
    (bins / "extra.pt").write_bytes(b"\0" * 8)
    (bins / "notes.txt").write_bytes(b"\0" * 400)
    assert model_size.folder_parameters(bins) == 12  # 48 bytes of weights as fp32
    (tmp_path / "empty").mkdir()
    assert model_size.folder_parameters(tmp_path / "empty") is None


def test_a_file_that_is_no_safetensors_is_refused_by_name(tmp_path):
    (tmp_path / "short.safetensors").write_bytes(b"1234567")
    with pytest.raises(ValueError) as err:
        model_size.safetensors_parameters(tmp_path / "short.safetensors")
    assert str(err.value) == "short.safetensors is not a safetensors file"
    big = model_size.MAX_HEADER_BYTES + 1
    _safetensors(tmp_path / "big.safetensors", {}, length=big)
    with pytest.raises(ValueError) as err:
        model_size.safetensors_parameters(tmp_path / "big.safetensors")
    assert str(err.value) == f"big.safetensors has a {big}-byte header, more than safetensors allows"
    _safetensors(tmp_path / "edge.safetensors", {"w": {"shape": [4]}})
    assert model_size.safetensors_parameters(tmp_path / "edge.safetensors") == 4


def test_a_policy_is_measured_by_its_kind_of_name(tmp_path, monkeypatch):
    _safetensors(tmp_path / "model.safetensors", {"w": {"shape": [10, 10]}})
    assert model_size.policy_parameters(f" {tmp_path} ") == 100
    assert model_size.policy_parameters(str(tmp_path / "model.safetensors")) is None  # a file, not a folder
    assert model_size.policy_parameters("./no/such/folder") is None
    assert model_size.policy_parameters("embedded:no-such-asset") is None
    assert model_size.policy_parameters("embedded:tiny-imdb-gpt2") == model_size.folder_parameters(EMBEDDED)
    asked = []
    monkeypatch.setattr(model_size, "hub_parameters", lambda name: asked.append(name) or 7)
    assert model_size.policy_parameters("org/model") == 7 and asked == ["org/model"]


def test_a_hub_model_is_measured_from_the_cache_else_online_from_its_metadata(tmp_path, monkeypatch):
    _safetensors(tmp_path / "model.safetensors", {"w": {"shape": [6]}})
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _Hub(cached=str(tmp_path)))
    assert model_size.hub_parameters("org/model") == 6
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _Hub())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_size.hub_parameters("org/model") is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    meta = type("Meta", (), {"parameter_count": {"F32": 5, "BF16": 9}})()
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda repo: meta)
    assert model_size.hub_parameters("org/model") == 14

    def missing(repo):
        raise OSError("no such repo")

    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", missing)
    assert model_size.hub_parameters("org/model") is None


@pytest.mark.parametrize(("use_lora", "beta", "held"), [(False, 0.05, 2), (True, 0.05, 1), (False, 0.0, 1)])
def test_a_run_holds_a_reference_copy_unless_lora_or_no_kl(use_lora, beta, held):
    assert model_size.copies(RunConfig(use_lora=use_lora, beta=beta)) == held


def test_sizes_are_told_in_megabytes_below_a_tenth_of_a_gigabyte():
    assert model_size._gb(99_999_999) == "100 MB" and model_size._gb(100_000_000) == "0.1 GB"
    assert model_size._gb(2.5e9) == "2.5 GB" and model_size._gb(4e6) == "4 MB"


def test_a_policy_that_fits_exactly_is_not_refused_and_one_byte_less_is_told_both_sizes(tmp_path):
    _safetensors(tmp_path / "model.safetensors", {"w": {"shape": [25_000_000, 10]}})  # 0.25B parameters, 1 GB
    config = RunConfig(policy=str(tmp_path), beta=0.05)
    assert model_size.check_policy_fits(config, free=(2_000_000_000, "RAM")) == 2_000_000_000  # x 4 bytes x 2
    with pytest.raises(model_size.TooLarge) as err:
        model_size.check_policy_fits(config, free=(1_500_000_000, "GPU"))
    assert str(err.value) == (
        f"policy {str(tmp_path)!r} has 0.25B parameters (1.0 GB in fp32); the policy and its reference copy need "
        "2.0 GB, before gradients and optimizer states, but only 1.5 GB of GPU is free here. Use a smaller model, or "
        "--use-lora (the reference is then the base model with the adapter off, not a second copy)."
    )
    lora = RunConfig(policy=str(tmp_path), use_lora=True)
    assert model_size.check_policy_fits(lora, free=(1_000_000_000, "RAM")) == 1_000_000_000
    with pytest.raises(model_size.TooLarge) as err:
        model_size.check_policy_fits(lora, free=(999_999_999, "RAM"))
    assert "; the policy need 1.0 GB, before gradients and optimizer states, but only 1.0 GB of RAM" in str(err.value)
    (tmp_path / "model.safetensors").write_bytes(b"short")  # unreadable: loading it will say what is wrong
    assert model_size.check_policy_fits(config, free=(1, "RAM")) is None


def test_free_memory_is_the_gpus_where_there_is_one_else_the_machines(monkeypatch):
    import psutil
    import torch

    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"available": 12345.0})())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert model_size.free_memory() == (12345, "RAM")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (678, 999))
    assert model_size.free_memory() == (678, "GPU")
