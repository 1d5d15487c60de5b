"""The single-forward RLOO step makes TRL's update, with one policy forward fewer; and the engine's TRL settings.

``python -m pytest tests/test_fast_step.py``
"""

import pytest
import torch
from trl import RLOOTrainer

from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import rloo_config
from rloo_demo.fast.fast_step import SingleForwardRLOOTrainer, match_rows
from rloo_demo.fast.lean_decode import multinomial_draw
from rloo_demo.models.policy import load_policy
from rloo_demo.task.data import run_prompts
from rloo_demo.task.rewards import build_reward


def test_match_rows_finds_the_permutation():
    ref = torch.tensor([[1, 2], [3, 4], [5, 6], [3, 4]])
    rows = ref[torch.tensor([2, 0, 3, 1])]
    idx = match_rows(ref, rows)
    assert torch.equal(ref[idx], rows)
    assert match_rows(ref, torch.tensor([[1, 2], [9, 9], [5, 6], [3, 4]])) is None
    assert match_rows(ref, ref[:2]) is None


def _train(trainer_cls, tmp_path, steps=3, draw=None, **overrides):
    config = RunConfig(max_steps=steps, prompts_per_step=3, max_new_tokens=8, beta=0.1, learning_rate=5e-3)
    torch.manual_seed(0)
    model, tok = load_policy(config.policy)
    args = rloo_config(config, tmp_path / trainer_cls.__name__, reward_weights=config.weights, **overrides)
    trainer = trainer_cls(
        model=model,
        args=args,
        reward_funcs=[build_reward(n) for n in config.rewards],
        train_dataset=run_prompts(config, "train"),
        processing_class=tok,
    )
    if draw is not None:
        trainer.lean_draw = draw
    trainer.train()
    keys = ("loss", "grad_norm", "kl", "entropy")
    logged = [{k: h.get(k) for k in keys} for h in trainer.state.log_history if "loss" in h]
    return trainer, logged


def test_single_forward_step_makes_trls_update(tmp_path):
    """Same seed, same samples: TRL's two-forward step and ours log the same figures and end with the same weights.

    Plain SGD, because Adam divides by the gradient's running scale: for weights whose true gradient is 0 (the
    attention's key bias) it would blow float noise of 1e-10 up to full-size steps in either implementation."""
    plain, plain_logs = _train(RLOOTrainer, tmp_path, optim="sgd")
    fast, fast_logs = _train(SingleForwardRLOOTrainer, tmp_path, optim="sgd", draw=multinomial_draw)
    assert fast.forward_passes_saved == 3  # one per step
    assert fast.lean_generate_calls == 3  # its own decode, drawing as generate does: the same samples
    assert not fast.model.is_gradient_checkpointing  # the engine's setting, in effect
    for a, b in zip(plain_logs, fast_logs, strict=True):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-6)
    for (name, a), b in zip(plain.model.named_parameters(), fast.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


def test_single_forward_falls_back_with_several_steps_per_generation(tmp_path):
    fast, _ = _train(SingleForwardRLOOTrainer, tmp_path, steps=2, steps_per_generation=2, per_device_train_batch_size=4)
    assert not fast.reuses_policy_forward and fast.forward_passes_saved == 0


def test_engine_turns_gradient_checkpointing_off_for_the_embedded_policy(tmp_path):
    args = rloo_config(RunConfig(), tmp_path)
    assert args.activation_checkpointing is False and args.gradient_checkpointing is False
    from trl import RLOOConfig

    trl_default = RLOOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    assert trl_default.gradient_checkpointing is True  # what we override


def test_thread_counts_for_the_step_and_its_backward(monkeypatch):
    from rloo_demo.fast.fast_step import TORCH_DEFAULT_THREADS, backward_threads, engine_threads

    monkeypatch.delenv("RLOO_TORCH_THREADS", raising=False)
    embedded, hub = "embedded:tiny-imdb-gpt2", "openai-community/gpt2"
    assert engine_threads(embedded) == 1 and backward_threads(embedded) == min(2, TORCH_DEFAULT_THREADS)
    assert engine_threads(hub) == backward_threads(hub) == TORCH_DEFAULT_THREADS
    assert backward_threads(embedded, num_processes=2) == 1  # the processes share out the cores already
    monkeypatch.setenv("RLOO_TORCH_THREADS", "3")
    assert engine_threads(embedded) == backward_threads(embedded) == 3  # one count, the user's, for the whole step


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="one core: the backward has no second thread to use")
def test_the_backward_runs_on_two_threads_and_the_rest_of_the_step_on_one(tmp_path, monkeypatch):
    from rloo_demo.engine.training import RunState, build_trainer

    monkeypatch.delenv("RLOO_TORCH_THREADS", raising=False)
    config = RunConfig(output_dir=str(tmp_path), max_steps=2, prompts_per_step=2, max_new_tokens=8)
    trainer = build_trainer(config, RunState(config))
    seen = {"generate": [], "backward": []}
    generate, backward = trainer._generate, torch.autograd.backward

    def counting_generate(*args, **kwargs):
        seen["generate"].append(torch.get_num_threads())
        return generate(*args, **kwargs)

    def counting_backward(*args, **kwargs):
        seen["backward"].append(torch.get_num_threads())
        return backward(*args, **kwargs)

    monkeypatch.setattr(trainer, "_generate", counting_generate)
    monkeypatch.setattr(torch.autograd, "backward", counting_backward)
    trainer.train()
    assert seen == {"generate": [1, 1], "backward": [2, 2]}
    assert torch.get_num_threads() == 1  # put back after each backward


def test_the_engine_samples_with_its_own_decode_and_falls_back_to_generate(tmp_path, monkeypatch):
    """The engine's trainer decodes the embedded policy itself (never calling generate); a setting the decode does
    not cover (a repetition penalty) goes to generate, with the reason kept."""
    from transformers import GPT2LMHeadModel

    from rloo_demo.engine.training import RunState, build_trainer

    calls = []
    generate = GPT2LMHeadModel.generate

    def counting(self, *args, **kwargs):
        calls.append(kwargs.get("generation_config"))
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(GPT2LMHeadModel, "generate", counting)
    config = RunConfig(output_dir=str(tmp_path), max_steps=2, prompts_per_step=2, max_new_tokens=8)
    trainer = build_trainer(config, RunState(config))
    trainer.train()
    assert trainer.lean_generate_calls == 2 and trainer.lean_generation_skipped is None and calls == []
    assert "generate" not in trainer.model.__dict__  # put back after each step

    penalised, _ = _train(SingleForwardRLOOTrainer, tmp_path, steps=1, repetition_penalty=1.2)
    assert penalised.lean_generate_calls == 0 and "RepetitionPenalty" in penalised.lean_generation_skipped
    assert len(calls) == 1 and calls[0].repetition_penalty == 1.2  # generate sampled it, with the penalty
