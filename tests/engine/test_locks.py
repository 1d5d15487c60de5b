"""The weights lock: a copy of the policy taken while it trains is the policy between two optimiser steps.

``python -m pytest tests/engine/test_locks.py`` (about 30 s: three short training steps).

The training test makes a race certain instead of hoping for one: inside every optimiser step, after the update, it
puts the old values back into half of the tensors (a half-updated model, as a reader could meet mid-step), asks for
a snapshot from another thread, waits a moment, and only then restores the update. A snapshot that does not wait for
the lock copies that half-updated model, whose checksum matches the weights neither before nor after the step.
"""

import hashlib
import threading
from types import SimpleNamespace

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from rloo_demo.config import RunConfig
from rloo_demo.engine.training import RunState, WeightsLock, build_trainer


def checksum(parameters) -> str:
    digest = hashlib.sha1()
    for p in parameters:
        digest.update(p.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def test_snapshot_waits_for_the_weights_lock():
    state = RunState(RunConfig())
    assert state.policy_snapshot() is None  # no trainer yet
    model = torch.nn.Linear(3, 2).train()
    state.trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m))
    got = []
    with state.weights.lock:  # an optimiser step in progress
        reader = threading.Thread(target=lambda: got.append(state.policy_snapshot()))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and not got  # the copy waits for the step to end
        with torch.no_grad():
            model.weight.add_(1.0)  # the step's update
    reader.join(10)
    snap = got[0]
    assert snap is not model and not snap.training and model.training
    assert torch.equal(snap.weight, model.weight)  # it saw the update, made after it asked
    with torch.no_grad():
        model.weight.add_(1.0)
    assert not torch.equal(snap.weight, model.weight)  # a private copy


def test_weights_lock_is_held_from_before_to_after_the_optimiser_step():
    lock = WeightsLock()
    assert not lock.lock.locked()
    lock.on_pre_optimizer_step(None, None, None)
    assert lock.lock.locked()
    lock.on_optimizer_step(None, None, None)
    assert not lock.lock.locked()


def run_race(tmp_path):
    """Three training steps with a reader asking for a snapshot in the middle of each optimiser step."""
    config = RunConfig(
        max_steps=3,
        prompts_per_step=2,
        num_generations=4,  # with K = 2, both completions of a prompt often score the same: no step at all
        max_new_tokens=6,
        learning_rate=1e-2,
        output_dir=str(tmp_path),
    )
    state = RunState(config)
    trainer = build_trainer(config, state)
    state.trainer = trainer
    live = trainer.accelerator.unwrap_model(trainer.model)
    seen = {"locked": [], "before": [], "after": [], "snapshots": [], "copied_mid_step": [], "readers": []}

    def pre_step(optimizer, args, kwargs):
        seen["locked"].append(state.weights.lock.locked())
        seen["before"].append(checksum(live.parameters()))

    def post_step(optimizer, args, kwargs):
        params = list(live.parameters())
        seen["after"].append(checksum(params))
        updated = [p.detach().clone() for p in params[::2]]
        with torch.no_grad():  # undo half of the update, as a reader could find it in the middle of a step
            for p, old in zip(params[::2], seen["old"], strict=True):
                p.copy_(old)
        reader = threading.Thread(
            target=lambda: seen["snapshots"].append(checksum(state.policy_snapshot().parameters()))
        )
        reader.start()
        reader.join(0.5)
        seen["copied_mid_step"].append(not reader.is_alive())
        seen["readers"].append(reader)
        with torch.no_grad():
            for p, new in zip(params[::2], updated, strict=True):
                p.copy_(new)

    def remember_old(optimizer, args, kwargs):
        seen["old"] = [p.detach().clone() for p in list(live.parameters())[::2]]

    handles = [
        register_optimizer_step_pre_hook(pre_step),
        register_optimizer_step_pre_hook(remember_old),
        register_optimizer_step_post_hook(post_step),
    ]
    try:
        trainer.train()
    finally:
        for h in handles:
            h.remove()
        for r in seen["readers"]:
            r.join(30)
    return seen


def test_a_snapshot_asked_for_during_a_step_is_the_model_after_it(tmp_path):
    """The training runs in the test itself, not in a fixture: mutmut orders tests by their own duration, and the
    fast tests above then run first (see scripts/mutation.sh)."""
    race = run_race(tmp_path)
    assert race["locked"] == [True, True, True]  # the lock is held during every optimiser step
    assert len(race["snapshots"]) == 3
    assert race["copied_mid_step"] == [False, False, False]  # each reader waited for the step to end
    assert race["snapshots"] == race["after"]  # and copied the whole update, not half of it
    assert race["before"][1:] == race["after"][:-1] and race["after"][0] != race["before"][0]  # the steps moved it


class _FailInTheUpdate:
    """A callback that raises inside the optimiser step, after the weights lock was taken."""

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        raise RuntimeError("the optimiser step failed")

    def __getattr__(self, name):  # every other hook: nothing
        return lambda *a, **k: None


def test_a_failed_optimiser_step_releases_the_weights_lock(tmp_path):
    """An error between the lock's two hooks must not leave it held: every later reader (Compare, the probe, a
    snapshot) would wait on it for ever."""
    from rloo_demo.engine.capture import CapturingRLOOTrainer
    from rloo_demo.engine.training import train

    class FailsInTheUpdate(CapturingRLOOTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(_FailInTheUpdate())  # after the engine's callbacks, the weights lock among them

    config = RunConfig(max_steps=2, prompts_per_step=2, num_generations=2, max_new_tokens=6, output_dir=str(tmp_path))
    state = train(config, RunState(config), trainer_cls=FailsInTheUpdate)
    assert state.status == "failed" and "the optimiser step failed" in state.error
    assert state.weights.lock.acquire(blocking=False), "the weights lock is still held after the failed step"
    state.weights.lock.release()
