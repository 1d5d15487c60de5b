"""The gradient-variance meter and the per-step diagnostics inside real training runs.

``python -m pytest tests/test_meter.py`` (two 2-step runs of the embedded policy, about a minute on 2 cores).
"""

import json

import pytest

from rloo_demo.advantages import ESTIMATORS
from rloo_demo.config import RunConfig
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.meter import TrainingMeter, completion_logprobs
from rloo_demo.engine.training import RunState, build_trainer
from rloo_demo.store.folder import RunFolder

STEPS = 2


class BatchRecorder(CapturingRLOOTrainer):
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.batches.append({k: out[k].detach().clone() for k in ("prompt_ids", "prompt_mask", "completion_ids")})
        self.batches[-1]["completion_mask"] = out["completion_mask"].detach().clone()
        self.batches[-1]["old_logps"] = out["old_logps"].detach().clone()
        self.batches[-1]["logps_now"] = self._meter_logps(out)
        return out

    def _meter_logps(self, out):
        """The meter's log-probabilities of the batch, from the same padded prompt rows, before the update."""
        model = self.accelerator.unwrap_model(self.model)
        k = self.num_generations
        values = []
        for p in range(out["prompt_ids"].size(0) // k):
            rows = range(p * k, (p + 1) * k)
            completions = [out["completion_ids"][i][out["completion_mask"][i].bool()].tolist() for i in rows]
            values += completion_logprobs(
                model, out["prompt_ids"][p * k].tolist(), completions, self.temperature, out["prompt_mask"][p * k]
            )
        return values


def run(tmp_path, variance_every):
    config = RunConfig(
        max_steps=STEPS,
        prompts_per_step=2,
        max_new_tokens=8,
        variance_every=variance_every,
        output_dir=str(tmp_path),
    )
    return train_recorded(config)


def train_recorded(config):
    """Train ``config`` with the batches recorded: the trainer (``trainer.batches``) and the run's state."""
    state = RunState(config)
    state.run = RunFolder.create(config)
    trainer = build_trainer(config, state, trainer_cls=BatchRecorder)
    trainer.batches = []
    trainer.train()
    state.channel.close()
    return trainer, state


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    metered = run(tmp_path_factory.mktemp("metered"), variance_every=1)
    plain = run(tmp_path_factory.mktemp("plain"), variance_every=0)
    return metered, plain


def test_meter_metrics_reach_the_channel_and_metrics_jsonl(runs):
    (trainer, state), _ = runs
    assert any(isinstance(o, TrainingMeter) for o in trainer.batch_observers)
    on_disk = state.run.metrics()
    live = state.channel.snapshot()
    assert [r["step"] for r in on_disk] == [r["step"] for r in live] == [1, 2]
    assert len(ESTIMATORS) >= 2
    for record in (on_disk[-1], live[-1]):
        measured = {k.split("/", 1)[1] for k in record if k.startswith("variance/")} - {"seconds", "samples"}
        assert measured == set(ESTIMATORS)
        for name in ESTIMATORS:
            assert record[f"variance/{name}"] > 0, name
            assert -1 <= record[f"cosine/{name}"] <= 1, name
        assert record["variance/samples"] == 5 * 2 * 4  # 5 replicates of 2 prompts x K=4
        assert record["variance/seconds"] > 0
    # Dr. GRPO's advantages are (K-1)/K times RLOO's on every replicate
    assert on_disk[0]["variance/dr_grpo"] == pytest.approx(on_disk[0]["variance/rloo"] * (3 / 4) ** 2, rel=1e-4)
    assert on_disk[0]["cosine/dr_grpo"] == pytest.approx(on_disk[0]["cosine/rloo"], abs=1e-5)


def test_the_meter_scores_the_batch_as_trls_loss_does(runs):
    (trainer, _), _ = runs
    assert len(trainer.batches) == STEPS
    for batch in trainer.batches:
        assert len(batch["logps_now"]) == batch["old_logps"].numel() == 2 * 4
        assert batch["logps_now"] == pytest.approx(batch["old_logps"].tolist(), abs=1e-4)


def test_the_meter_does_not_change_training(runs):
    (_, metered), (_, plain) = runs

    def rows(state):
        return [(c["text"], round(c["advantage"], 5)) for g in state.run.rollouts() for c in g["completions"]]

    assert len(rows(plain)) == STEPS * 2 * 4  # 2 prompts x K=4 per step: the comparison is not [] == []
    assert rows(metered) == rows(plain)
    assert "variance/rloo" not in plain.run.metrics()[0]


def test_step_diagnostics_in_metrics_and_rollouts(runs):
    (_, state), _ = runs
    records = state.run.metrics()
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for r in records:
        for key in ("frac_raw_score_zero_std", "kl_k1", "kl_k2", "kl_k3", "judges/distinct_2", "judges/repetition"):
            assert key in r, key
        assert r["frac_raw_score_zero_std"] >= r["frac_reward_zero_std"]  # shaped rewards hide equal raw scores
    for step, record in enumerate(records, 1):
        completions = [c for g in state.run.rollouts() if g["step"] == step for c in g["completions"]]
        assert len(completions) == 2 * 4
        assert all(c["kl_k2"] >= 0 and c["kl_k3"] >= 0 for c in completions)
        mean_k1 = sum(c["kl"] for c in completions) / len(completions)
        assert record["kl_k1"] == pytest.approx(mean_k1, abs=1e-6)  # k1 is the KL that shaped the reward
    line = json.loads((state.run.path / "rollouts.jsonl").read_text().splitlines()[-1])
    assert {"kl", "kl_k2", "kl_k3"} <= set(line["completions"][0])


def test_the_training_meter_measures_each_due_step_with_the_batch_it_was_given(tmp_path, monkeypatch):
    """What the meter hands ``measure`` at a due step, checked at the call: the step's own seed, the batch's prompt
    rows and masks, its completions without padding, the shaped rewards, the run's beta with a reference; steps off
    the interval are not measured. The training runs in the test itself (mutmut links a mutant to its tests)."""
    from rloo_demo.engine import meter

    calls = []
    real = meter.measure

    def spy(policy, tokenizer, inputs, settings, seed, reference=None):
        calls.append((inputs, settings, seed, reference))
        return real(policy, tokenizer, inputs, settings, seed, reference)

    monkeypatch.setattr(meter, "measure", spy)
    config = RunConfig(max_steps=3, prompts_per_step=2, max_new_tokens=6, variance_every=2, seed=11, beta=0.05,
                       output_dir=str(tmp_path))
    trainer, state = train_recorded(config)  # in the test itself: mutmut links the meter's mutants to this test
    assert len(calls) == 1  # steps 1..3 with every = 2: step 2 alone
    inputs, settings, seed, reference = calls[0]
    assert seed == (11 * 1_000_003 + 2) % 2**63
    batch, k = trainer.batches[1], config.num_generations
    assert inputs.k == k and inputs.prompt_ids == [batch["prompt_ids"][p * k].tolist() for p in range(2)]
    assert inputs.prompt_masks == [batch["prompt_mask"][p * k].tolist() for p in range(2)]
    assert inputs.completions == [
        row[m.bool()].tolist() for row, m in zip(batch["completion_ids"], batch["completion_mask"], strict=True)
    ]
    step2 = [json.loads(line) for line in (state.run.path / "rollouts.jsonl").read_text().splitlines()]
    step2 = [g for g in step2 if g["step"] == 2]
    assert inputs.rewards == [c["shaped_reward"] for g in step2 for c in g["completions"]]
    assert inputs.prompts == [g["prompt"] for g in step2]
    assert settings.beta == 0.05 and reference is not None
    assert (settings.temperature, settings.top_p, settings.max_new_tokens) == (1.0, 1.0, 6)
    logged = [r for r in state.run.metrics() if "variance/rloo" in r]
    assert [r["step"] for r in logged] == [2]


def test_a_meter_that_cannot_measure_says_why_once(caplog):
    from types import SimpleNamespace

    meter_ = TrainingMeter(every=1, seed=0)
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), accelerator=SimpleNamespace(num_processes=2))
    with caplog.at_level("WARNING", logger="rloo_demo.engine.meter"):
        assert meter_(trainer, {}) is None and meter_(trainer, {}) is None
    assert caplog.messages == [
        "gradient-variance meter skipped: a multi-process run holds only a slice of each batch per rank"
    ]
    assert meter_.due(3) and not TrainingMeter(every=2, seed=0).due(3)
    import torch

    from rloo_demo.engine import meter

    caplog.clear()
    one = SimpleNamespace(num_processes=1, unwrap_model=lambda m: m)
    big = SimpleNamespace(state=SimpleNamespace(global_step=4), accelerator=one, model=torch.nn.Linear(2, 2))
    original = meter.fits_in_memory
    meter.fits_in_memory = lambda n: n < 6  # the Linear's 6 parameters: one too many
    try:
        with caplog.at_level("WARNING", logger="rloo_demo.engine.meter"):
            assert meter_(big, {}) is None
    finally:
        meter.fits_in_memory = original
    assert caplog.messages == ["gradient-variance meter skipped: the policy has too many trainable parameters for "
                               "the meter's accumulators (try LoRA)"]
