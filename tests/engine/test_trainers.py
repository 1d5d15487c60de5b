"""What-if advantages and the trainers behind them: ``python -m pytest tests/engine/test_trainers.py``.

The pure estimators in ``rloo_demo.advantages`` are checked against their definitions, and the GRPO and Dr. GRPO ones
against the advantages TRL's own ``GRPOTrainer`` feeds its loss on the same rewards (a parity test, like the RLOO
one in ``tests/engine/test_training.py``). The ``reinforce`` trainer is checked to feed its loss the shaped rewards
themselves. About a minute on 2 cores.
"""

from collections import defaultdict

import pytest
from trl import GRPOTrainer

from rloo_demo.advantages import (
    ESTIMATORS,
    batch_mean_advantages,
    dr_grpo_advantages,
    grpo_advantages,
    reinforce_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    what_if,
)
from rloo_demo.config import RunConfig
from rloo_demo.engine.trainers import ReinforceTrainer, grpo_config, trainer_for, with_speedups
from rloo_demo.engine.training import RunState, build_trainer
from rloo_demo.engine.trl_args import rloo_config
from rloo_demo.store.folder import RunFolder

REWARDS = [0.9, 0.1, 0.5, 0.5, -0.2, 0.4, 0.4, 0.0, 0.3, 0.3, 0.3, 0.3]
K = 4


def groups(values):
    return [values[i : i + K] for i in range(0, len(values), K)]


def test_every_estimator_is_listed_and_keeps_the_batch_shape():
    assert list(ESTIMATORS) == ["rloo", "grpo", "dr_grpo", "reinforce_pp", "batch_mean", "reinforce"]
    table = what_if(REWARDS, K)
    assert list(table) == list(ESTIMATORS)
    assert all(len(v) == len(REWARDS) for v in table.values())


def test_group_baselines_sum_to_zero_and_dr_grpo_is_a_scaled_rloo():
    rloo, dr, grpo = rloo_advantages(REWARDS, K), dr_grpo_advantages(REWARDS, K), grpo_advantages(REWARDS, K)
    for name, adv in (("rloo", rloo), ("dr_grpo", dr), ("grpo", grpo)):
        assert len(adv) == len(REWARDS) and len(groups(adv)) == 3, name
        for g in groups(adv):
            assert sum(g) == pytest.approx(0.0, abs=1e-12), name
    # A_rloo = K/(K-1) * (r - group mean) = K/(K-1) * A_dr_grpo
    assert rloo == pytest.approx([K / (K - 1) * a for a in dr], abs=1e-12)
    # a group whose rewards are all equal gets zero advantages from every group baseline, GRPO's std included
    assert groups(grpo)[2] == [0.0] * K and groups(rloo)[2] == pytest.approx([0.0] * K)


def test_grpo_divides_by_the_sample_std_and_batch_estimators_use_the_whole_batch():
    g = REWARDS[:K]
    mean = sum(g) / K
    std = (sum((r - mean) ** 2 for r in g) / (K - 1)) ** 0.5
    assert grpo_advantages(REWARDS, K)[:K] == pytest.approx([(r - mean) / (std + 1e-4) for r in g])
    batch = sum(REWARDS) / len(REWARDS)
    assert batch_mean_advantages(REWARDS, K) == pytest.approx([r - batch for r in REWARDS])
    pp = reinforce_pp_advantages(REWARDS, K)
    assert sum(pp) == pytest.approx(0.0, abs=1e-12)
    assert (sum(a * a for a in pp) / (len(pp) - 1)) ** 0.5 == pytest.approx(1.0, rel=1e-3)
    assert reinforce_advantages(REWARDS, K) == REWARDS


# --- parity with TRL's GRPOTrainer ---------------------------------------------------------------------------------


class GRPORecorder(GRPOTrainer):
    """Keeps the rewards TRL computed and the advantages it handed to its loss."""

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weighted = (out * self.reward_weights.to(out.device).unsqueeze(0)).nansum(dim=1)
        self.rewards_seen.append(weighted.detach().cpu().tolist())
        return out

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.scored.append((out["completion_ids"].detach().cpu(), out["advantages"].detach().cpu().tolist()))
        return out

    def _compute_loss(self, model, inputs):
        self.loss_inputs.append((inputs["completion_ids"].detach().cpu(), inputs["advantages"].detach().cpu()))
        return super()._compute_loss(model, inputs)


def grpo_trainer(tmp_path, scale_rewards):
    config = RunConfig(
        estimator="grpo",
        max_steps=2,
        prompts_per_step=3,
        num_generations=K,
        max_new_tokens=8,
        learning_rate=5e-3,
        rewards=["vader_compound", "length_penalty"],
        reward_weights=[1.0, 0.5],
        output_dir=str(tmp_path),
    )
    state = RunState(config)
    state.run = RunFolder.create(config)
    assert trainer_for("grpo", rloo_config(config, tmp_path / "x"), {})[0] is GRPOTrainer
    trainer = build_trainer(config, state, trainer_cls=GRPORecorder)
    assert type(trainer) is GRPORecorder and trainer.scale_rewards == "group"
    trainer.rewards_seen, trainer.scored, trainer.loss_inputs = [], [], []
    trainer.scale_rewards = scale_rewards  # what GRPOConfig(scale_rewards=...) sets
    return trainer


@pytest.mark.parametrize("scale_rewards, estimator", [("group", "grpo"), ("none", "dr_grpo")])
def test_grpo_advantages_match_what_trls_grpo_loss_saw(tmp_path, scale_rewards, estimator):
    trainer = grpo_trainer(tmp_path, scale_rewards)
    trainer.train()
    assert len(trainer.rewards_seen) == len(trainer.scored) == len(trainer.loss_inputs) == 2
    for rewards, (ids, trl_advantages), (loss_ids, loss_advantages) in zip(
        trainer.rewards_seen, trainer.scored, trainer.loss_inputs, strict=True
    ):
        ours = ESTIMATORS[estimator](rewards, K)
        assert ours == pytest.approx(trl_advantages, abs=1e-5)
        # the loss sees the same numbers, in a shuffled order: match them by completion
        by_completion = defaultdict(list)
        for row, a in zip(ids.tolist(), ours, strict=True):
            by_completion[tuple(row)].append(a)
        seen = defaultdict(list)
        for row, a in zip(loss_ids.tolist(), loss_advantages.tolist(), strict=True):
            seen[tuple(row)].append(a)
        assert seen.keys() == by_completion.keys() and len(ids) == len(loss_ids) == 3 * K
        for key, advs in seen.items():
            assert sorted(advs) == pytest.approx(sorted(by_completion[key]), abs=1e-5)
        assert any(abs(a) > 1e-3 for a in ours)  # not a degenerate batch


def test_grpo_config_carries_the_runs_settings():
    args = rloo_config(RunConfig(beta=0.2, learning_rate=1e-3, num_generations=8, max_new_tokens=12, seed=7), "unused")
    grpo = grpo_config(args)
    for name in (
        "beta",
        "learning_rate",
        "num_generations",
        "max_completion_length",
        "seed",
        "per_device_train_batch_size",
        "generation_batch_size",
        "temperature",
        "top_p",
        "lr_scheduler_type",
        "disable_dropout",
        "max_grad_norm",
        "logging_steps",
        "max_steps",
    ):
        assert getattr(grpo, name) == getattr(args, name), name
    assert grpo.scale_rewards == "group" and grpo.num_iterations == 1


# --- reinforce: the RLOO trainer without its baseline ------------------------------------------------------------


class ReinforceRecorder(ReinforceTrainer):
    def _compute_loss(self, model, inputs):
        self.loss_inputs.append((inputs["completion_ids"].detach().cpu(), inputs["advantages"].detach().cpu()))
        return super()._compute_loss(model, inputs)


def test_reinforce_feeds_the_loss_the_shaped_rewards(tmp_path):
    config = RunConfig(
        estimator="reinforce", max_steps=2, prompts_per_step=2, max_new_tokens=8, output_dir=str(tmp_path)
    )
    state = RunState(config)
    state.run = RunFolder.create(config)
    assert trainer_for("reinforce", None, {})[0] is with_speedups(ReinforceTrainer)
    trainer = build_trainer(config, state, trainer_cls=ReinforceRecorder)
    assert isinstance(trainer, ReinforceRecorder)
    trainer.loss_inputs = []
    trainer.train()
    groups_by_step = defaultdict(list)
    rollouts = state.run.rollouts()
    assert len(rollouts) == 2 * 2  # 2 steps x 2 prompts
    for g in rollouts:
        groups_by_step[g["step"]].append(g)
    assert len(trainer.loss_inputs) == 2  # one loss per step
    for step, (_, advantages) in enumerate(trainer.loss_inputs, 1):
        shaped = sorted(c["shaped_reward"] for g in groups_by_step[step] for c in g["completions"])
        assert sorted(advantages.tolist()) == pytest.approx(shaped, abs=1e-5)
        assert any(abs(a) > 1e-3 for a in shaped)
    for g in rollouts:
        assert g["parity_error"] < 1e-5
        assert len(g["completions"]) == config.num_generations
        assert all(
            c["baseline"] == 0.0 and c["advantage"] == pytest.approx(c["shaped_reward"], abs=1e-6)
            for c in g["completions"]
        )
