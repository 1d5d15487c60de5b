"""Snapshots and the probe (engine/snapshots.py) against values worked out here: the spacing on steps that do not
divide evenly, what is listed and what is not, a save over an older one, a LoRA snapshot merged as PEFT merges it,
a bf16 save read back in fp32, and the probe's default sampling. Tiny models only: about two seconds."""

import logging

import pytest
import torch

from rloo_demo.config import RunConfig
from rloo_demo.engine import snapshots
from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import sample

POLICY = RunConfig().policy


class FakeModel:
    """Writes a config.json (what list_snapshots looks for) holding ``tag``; keeps the keywords it was saved with."""

    def __init__(self, tag="a"):
        self.tag, self.saved_with = tag, []

    def save_pretrained(self, path, **kwargs):
        self.saved_with.append(kwargs)
        path.mkdir(parents=True)
        (path / "config.json").write_text(self.tag)


def test_the_spacing_doubles_only_past_the_cap_and_counts_whole_multiples():
    # 210 // 25 = 8 multiples: still within a cap of 8 (210 / 25 = 8.4 would wrongly double it)
    assert snapshots.spacing(210, 25, 8) == 25
    assert snapshots.spacing(1000, 25, 8) == 200  # 40 > 8, 20 > 8, 10 > 8, 5: three doublings
    assert snapshots.spacing(30, 10, 2) == 20 and snapshots.spacing(30, 0, 100) == 1


def test_only_complete_step_folders_are_listed(tmp_path):
    root = tmp_path / "snapshots"
    for name, marker in (
        ("step-000004", "adapter_config.json"),
        ("step-000012", "config.json"),
        ("other", "config.json"),
        ("step-000007", None),
        (".step-000009.ab.tmp", "config.json"),
    ):
        (root / name).mkdir(parents=True)
        if marker:
            (root / name / marker).write_text("{}")
    assert snapshots.list_snapshots(tmp_path) == [(4, root / "step-000004"), (12, root / "step-000012")]
    assert snapshots.list_snapshots(tmp_path / "nowhere") == []


def test_a_step_off_the_interval_or_no_interval_changes_nothing(tmp_path):
    for step in (10, 20, 30):
        snapshots.save_snapshot(tmp_path, FakeModel(), step)
    called = []
    # keep = 1 would thin these to one if the step counted; 35 is not a multiple of 10, and every = 0 is off
    snapshots.keep_history(tmp_path, lambda: called.append(1), 35, every=10, keep=1)
    snapshots.keep_history(tmp_path, lambda: called.append(1), 40, every=0, keep=1)
    assert called == [] and [s for s, _ in snapshots.list_snapshots(tmp_path)] == [10, 20, 30]


def test_the_callback_passes_its_cap_on(tmp_path):
    class State:
        is_world_process_zero = True
        global_step = 0

    callback = snapshots.SnapshotCallback(tmp_path, every=1, model=lambda: FakeModel(), keep=2)
    state = State()
    for step in range(1, 6):
        state.global_step = step
        callback.on_step_end(None, state, None)
    # cap 2: by step 5 the spacing is 2 (5 // 1 = 5 is past the cap, 5 // 2 = 2 is not): 2 and 4 stay; the default
    # cap of 8 would have kept all five
    assert [s for s, _ in snapshots.list_snapshots(tmp_path)] == [2, 4]


def test_a_step_saved_again_replaces_the_old_snapshot_in_safetensors(tmp_path):
    first, second = FakeModel("old"), FakeModel("new")
    snapshots.save_snapshot(tmp_path, first, 5)
    final = snapshots.save_snapshot(tmp_path, second, 5)
    assert (final / "config.json").read_text() == "new"
    assert second.saved_with == [{"safe_serialization": True}]
    assert [p.name for p in (tmp_path / "snapshots").iterdir()] == ["step-000005"]  # no hidden folder left


def test_a_bf16_snapshot_is_read_back_in_fp32(tmp_path):
    model, _ = load_policy(POLICY)
    folder = snapshots.save_snapshot(tmp_path, model.to(torch.bfloat16), 3)
    loaded = snapshots.load_snapshot(folder, POLICY)
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    assert not loaded.training


def test_a_lora_snapshot_is_its_base_with_the_adapter_merged(tmp_path):
    from peft import LoraConfig, get_peft_model

    base, tokenizer = load_policy(POLICY)
    torch.manual_seed(3)
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], init_lora_weights=False))
    ids = tokenizer("This movie was", return_tensors="pt").input_ids
    with torch.no_grad():
        expected = lora(ids).logits
        fresh, _ = load_policy(POLICY)
        assert not torch.allclose(fresh(ids).logits, expected, atol=1e-4)  # the adapter changes the outputs
    folder = snapshots.save_snapshot(tmp_path, lora, 8)
    assert (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file()
    merged = snapshots.load_snapshot(folder, POLICY)
    assert not hasattr(merged, "peft_config")  # merged into a plain model, not a PEFT wrapper
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, expected, atol=1e-4, rtol=1e-4)


def test_the_probe_samples_at_temperature_one_without_nucleus_by_default_and_skips_a_vanished_snapshot(caplog):
    model, tokenizer = load_policy(POLICY)

    def gone():
        raise FileNotFoundError("thinned")

    def scorer(prompts, texts):
        assert prompts == ["This movie was"] * len(texts)
        return {}, [float(len(t)) for t in texts]

    with caplog.at_level(logging.INFO, logger="rloo_demo.engine.snapshots"):
        policies = [(0, "base", lambda: model), (7, "step 7", gone), (9, "step 9", lambda: model)]
        out = snapshots.probe(policies, tokenizer, "This movie was", 3, 8, seed=5, scorer=scorer)
    expected = [s["text"] for s in sample(model, tokenizer, "This movie was", 3, 8, 1.0, 1.0, 5)]
    assert [entry["label"] for entry in out] == ["base", "step 9"]  # the one after a vanished snapshot too
    assert [s["text"] for s in out[0]["samples"]] == expected
    assert out[0]["mean_reward"] == pytest.approx(sum(len(t) for t in expected) / 3)
    assert "snapshot of step 7 went away before the probe reached it" in caplog.messages
