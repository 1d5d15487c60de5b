"""The reward offset (``RunConfig.reward_offset``): a constant C added to every completion's reward before the KL
shaping, inside TRL's own trainer. ``python -m pytest tests/engine/test_reward_offset.py`` (two 20-step runs of the
embedded policy at tiny settings and two 1-step ones: about a minute on 2 cores).

The leave-one-out baseline removes C exactly, so an RLOO run with C = 1 samples the same completions and hands its
loss the same advantages as the run with C = 0 and the same seed, step after step, while its shaped rewards, its
baselines and TRL's logged ``reward`` sit exactly C higher. An offset added after the baseline (to the advantages)
would move every advantage by C and, from the second step on, the samples; one added only to the record (not to the
rewards TRL's baseline saw) would leave TRL's ``reward`` where it was: either way a check below fails. REINFORCE has
no baseline: its advantages move by exactly C.
"""

import math
from types import SimpleNamespace

import pytest
import torch
from trl import RLOOTrainer

from rloo_demo.config import RunConfig
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.meter import _trainer_reward
from rloo_demo.engine.trainers import ReinforceTrainer
from rloo_demo.engine.training import RunState, build_trainer
from rloo_demo.errors import ConfigError

STEPS = 20


class _Records:
    """Keeps what each step's loss will see: the completion ids, TRL's advantages and the recorded groups."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.seen.append(
                {
                    "ids": out["completion_ids"].detach().cpu().clone(),
                    "advantages": out["advantages"].detach().cpu().clone(),
                    "groups": self.last_rollouts,
                }
            )
        return out


class RLOORecorder(_Records, CapturingRLOOTrainer):
    pass


class ReinforceRecorder(_Records, ReinforceTrainer):
    pass


def train(tmp_path, offset, estimator="rloo", steps=STEPS):
    config = RunConfig(
        estimator=estimator,
        max_steps=steps,
        prompts_per_step=2,
        num_generations=4,
        max_new_tokens=8,
        reward_offset=offset,
        record_tokens=False,
        snapshot_every=0,
        output_dir=str(tmp_path),
    )
    state = RunState(config.validate())
    trainer = build_trainer(config, state, trainer_cls=RLOORecorder if estimator == "rloo" else ReinforceRecorder)
    trainer.seen = []
    trainer.train()
    state.channel.close()
    return trainer.seen, state.channel.snapshot()


@pytest.fixture(scope="module")
def rloo_runs(tmp_path_factory):
    return train(tmp_path_factory.mktemp("c0"), 0.0), train(tmp_path_factory.mktemp("c1"), 1.0)


def completions(group):
    return group["completions"]


def test_an_rloo_run_under_an_offset_samples_the_same_and_gets_the_same_advantages(rloo_runs):
    (plain, plain_log), (offset, offset_log) = rloo_runs
    assert len(plain) == len(offset) == STEPS
    for step, (a, b) in enumerate(zip(plain, offset, strict=True), 1):
        assert torch.equal(a["ids"], b["ids"]), f"step {step}: other completions were sampled"
        assert torch.allclose(a["advantages"], b["advantages"], atol=1e-6, rtol=0), f"step {step}"
        assert a["advantages"].abs().max() > 1e-3  # a batch with something to learn
        for ga, gb in zip(a["groups"], b["groups"], strict=True):
            for ca, cb in zip(completions(ga), completions(gb), strict=True):
                assert ca["text"] == cb["text"]
                assert cb["scores"] == pytest.approx(ca["scores"], abs=1e-6)  # the functions' own scores
                # the offset is in the reward before the baseline: shaped reward and baseline move by exactly C
                for key in ("weighted_reward", "shaped_reward", "baseline"):
                    assert cb[key] - ca[key] == pytest.approx(1.0, abs=1e-5), (step, key)
                assert cb["raw_advantage"] == pytest.approx(ca["raw_advantage"], abs=1e-6)
            assert ga["parity_error"] < 1e-5 and gb["parity_error"] < 1e-5  # our arithmetic is TRL's, offset and all
    # TRL's own reward, the one its baseline subtracted from, carried the offset; its spread and the scores did not
    assert len(plain_log) == len(offset_log) == STEPS
    for a, b in zip(plain_log, offset_log, strict=True):
        assert b["reward"] - a["reward"] == pytest.approx(1.0, abs=1e-5)
        assert b["reward_std"] == pytest.approx(a["reward_std"], abs=1e-5)
        assert b["rewards/vader_compound/mean"] == pytest.approx(a["rewards/vader_compound/mean"], abs=1e-6)
        assert b["frac_reward_zero_std"] == a["frac_reward_zero_std"]


def test_reinforce_advantages_move_by_the_offset(tmp_path):
    (plain,), _ = train(tmp_path / "c0", 0.0, "reinforce", steps=1)
    (offset,), _ = train(tmp_path / "c1", 1.0, "reinforce", steps=1)
    assert torch.equal(plain["ids"], offset["ids"])  # the first step samples from the same initial policy
    assert torch.allclose(offset["advantages"] - plain["advantages"], torch.ones_like(plain["advantages"]), atol=1e-5)
    shaped = [c["shaped_reward"] for g in offset["groups"] for c in completions(g)]
    assert offset["advantages"].tolist() == pytest.approx(shaped, abs=1e-6)  # A = r + C, no baseline


# --- the offset column, by hand ------------------------------------------------------------------------------------


def bare_trainer(offset, weights=(1.0, 0.5)):
    trainer = CapturingRLOOTrainer.__new__(CapturingRLOOTrainer)  # no model: only what the hooks read
    trainer.reward_offset = offset
    trainer.reward_weights = torch.tensor([*weights, 1.0] if offset else list(weights))
    trainer._capture = {}
    return trainer


def test_the_offset_column_keeps_an_unscorable_completion_unscorable(monkeypatch):
    raw = torch.tensor([[0.5, -1.0], [math.nan, 0.2], [math.nan, math.nan]])
    monkeypatch.setattr(RLOOTrainer, "_calculate_rewards", lambda self, *args: raw.clone())
    trainer = bare_trainer(2.5)
    out = trainer._calculate_rewards({}, ["p"] * 3, ["a", "b", "c"], [[1], [2], [3]])
    assert out.shape == (3, 3)
    assert out[:2, 2].tolist() == [2.5, 2.5]
    assert math.isnan(out[2, 2])  # no function scored it: the offset does not score it either
    # the record keeps the functions' own columns
    assert torch.equal(trainer._capture["rewards_per_func"].nan_to_num(9.0), raw.nan_to_num(9.0))
    # TRL's combination of the columns (weighted nansum, NaN where nothing scored) gives score + C
    summed = (out * trainer.reward_weights).nansum(dim=1)
    assert summed[:2].tolist() == pytest.approx([0.5 - 0.5 + 2.5, 0.1 + 2.5])
    assert torch.isnan(out).all(dim=1).tolist() == [False, False, True]
    # with no offset, TRL sees exactly what its reward functions returned
    plain = bare_trainer(0.0)._calculate_rewards({}, ["p"] * 3, ["a", "b", "c"], [[1], [2], [3]])
    assert plain.dtype == torch.float64 and torch.equal(plain.nan_to_num(9.0), raw.double().nan_to_num(9.0))


def test_the_meter_scores_its_replicates_with_the_offset():
    functions = [lambda prompts, completions: [0.5, None], lambda prompts, completions: [-1.0, None]]
    trainer = SimpleNamespace(
        reward_funcs=functions,
        reward_weights=torch.tensor([1.0, 0.5, 1.0]),
        reward_clip_range=None,
        reward_offset=2.0,
    )
    values = _trainer_reward(trainer)(["p", "p"], ["a", "b"])
    assert values[0] == pytest.approx(0.5 - 0.5 + 2.0)
    assert math.isnan(values[1])


def test_the_offset_is_checked_and_grpo_refuses_it():
    assert RunConfig(reward_offset=-100.0).problems() == {}
    for bad in (100.5, -1e9, math.inf, math.nan, True, "1"):
        assert "reward_offset" in RunConfig(reward_offset=bad).problems(), bad
    with pytest.raises(ConfigError) as exc:
        RunConfig(estimator="grpo", reward_offset=1.0).validate()
    assert "removes any constant offset" in str(exc.value)
    assert RunConfig(estimator="grpo", reward_offset=0.0).problems() == {}
