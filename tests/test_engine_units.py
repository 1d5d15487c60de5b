"""The engine's small pieces without training: how a failure is recorded, what ``TrainingJob.start`` does before
its thread runs, a subscriber's reads of the metrics channel, the GRPO config built from RLOO's, REINFORCE's
advantages for one rank of the batch, and the CLI's progress bar. Each is checked against values the test
works out itself (the message word for word, the sample std by hand, which settings GRPO keeps of its own)."""

from __future__ import annotations

import dataclasses
import errno
import math
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from rloo_demo.config import RunConfig
from rloo_demo.engine import training
from rloo_demo.engine.callbacks import MetricsChannel
from rloo_demo.engine.trainers import _ALWAYS, _DERIVED, ReinforceTrainer, grpo_config
from rloo_demo.engine.training import RunState, TqdmProgress, TrainingJob, _record_failure
from rloo_demo.errors import DiskFull
from rloo_demo.store.folder import RunFolder

# ------------------------------------------------------------------ a failure, in memory and on disk


class _Folder:
    def __init__(self, fails=None):
        self.calls, self.fails = [], fails

    def set_status(self, status, **extra):
        if self.fails is not None:
            raise self.fails
        self.calls.append((status, extra))


def _fail_with(exc, run=None):
    state = RunState(RunConfig(), run=run)
    try:
        raise exc
    except Exception as caught:  # as in train(): recorded inside the handler, so the traceback is this one
        _record_failure(state, caught)
    return state


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (ValueError("the reward model returned NaN"), "ValueError: the reward model returned NaN"),
        (OSError(errno.ENOSPC, "No space left on device"), "disk full: the run could not write its files"),
        (DiskFull("the disk filled while writing rollouts.jsonl"), "the disk filled while writing rollouts.jsonl"),
        (RuntimeError("wrapped"), "RuntimeError: wrapped"),
    ],
)
def test_a_failure_says_what_went_wrong_in_memory_and_in_the_folder(exc, error):
    folder = _Folder()
    before = time.time()
    state = _fail_with(exc, folder)
    assert (state.status, state.error) == ("failed", error)
    [(status, extra)] = folder.calls
    assert status == "failed" and extra["error"] == error and before <= extra["finished"] <= time.time()
    assert f"{type(exc).__name__}: {exc}" in extra["traceback"] and extra["traceback"].startswith("Traceback")
    assert sorted(extra) == ["error", "finished", "traceback"]


def test_a_failure_whose_status_cannot_be_written_says_so_after_the_first_error():
    state = _fail_with(ValueError("bad"), _Folder(fails=OSError(errno.ENOSPC, "No space left on device")))
    assert state.error == "ValueError: bad (status.json could not be updated either: No space left on device)"
    state = _fail_with(ValueError("bad"), _Folder(fails=OSError("the folder is gone")))
    assert state.error == "ValueError: bad (status.json could not be updated either: the folder is gone)"
    assert _fail_with(ValueError("early")).error == "ValueError: early"  # no folder yet: memory only


# ------------------------------------------------------------------ starting a job


def test_a_job_checks_its_resources_makes_its_folder_then_trains_in_a_daemon_thread(tmp_path, monkeypatch):
    events, trained = [], threading.Event()

    def train(config, state):
        events.append(("train", config, state, threading.current_thread().daemon))
        trained.set()

    monkeypatch.setattr(training, "train", train)
    monkeypatch.setattr(training, "check_resources", lambda config: events.append(("check", config)))
    config = RunConfig(output_dir=str(tmp_path), run_name="job-a", max_steps=2)
    job = TrainingJob(config, budget_seconds=30)
    job.status_extra = {"owner": "digest-of-the-starter"}
    before = time.time()
    assert job.start() is job
    assert trained.wait(30) and job.join(30)
    assert before <= job.state.budget_started <= time.time() and job.state.budget_seconds == 30
    assert events == [("check", job.state.config), ("train", job.state.config, job.state, True)]
    assert job.run.path == tmp_path / "job-a" and RunFolder(tmp_path / "job-a").status()["owner"] == (
        "digest-of-the-starter")
    events.clear()
    other = TrainingJob(RunConfig(output_dir=str(tmp_path), run_name="job-b", max_steps=2))
    other.start(resources_checked=True)  # the runner checked them before it took its lock
    assert other.join(30) and [e[0] for e in events] == ["train"]


# ------------------------------------------------------------------ a subscriber of the metrics channel


def test_a_poll_without_a_timeout_never_waits_and_one_with_a_timeout_waits_that_long(monkeypatch):
    channel = MetricsChannel()
    for step in (1, 2, 3):
        channel.publish({"step": step})
    sub = channel.subscribe()
    waits = []
    real_wait = channel.wait_for
    monkeypatch.setattr(channel, "wait_for", lambda start, timeout=None: waits.append((start, timeout)) or real_wait(
        start, timeout))
    assert sub.poll() == [{"step": 1}, {"step": 2}, {"step": 3}] and waits == [] and sub.position == 3
    assert sub.poll() == [] and waits == []
    channel.publish({"step": 4})
    assert sub.poll(0.25) == [{"step": 4}] and waits == [(3, 0.25)] and sub.position == 4


def test_iterating_a_subscription_gives_every_record_once_and_ends_when_the_channel_closes():
    channel = MetricsChannel()
    channel.close()
    assert list(channel.subscribe()) == []  # closed and empty: the iteration ends at once
    channel = MetricsChannel()
    for step in (1, 2):
        channel.publish({"step": step})
    seen = []

    def read():
        seen.extend(r["step"] for r in channel.subscribe())

    reader = threading.Thread(target=read)
    reader.start()
    channel.publish({"step": 3})
    channel.close()
    reader.join(30)
    assert not reader.is_alive() and seen == [1, 2, 3]


# ------------------------------------------------------------------ GRPO's config from RLOO's


def test_grpo_gets_every_setting_rloo_changed_the_shared_ones_always_and_keeps_its_own_defaults(tmp_path):
    from trl import GRPOConfig, RLOOConfig

    cpu = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False)
    rloo = RLOOConfig(**cpu, weight_decay=0.125, logging_steps=3)
    grpo = grpo_config(rloo)
    assert grpo.scale_rewards == "group"
    assert (grpo.weight_decay, grpo.logging_steps) == (0.125, 3)  # changed from RLOO's defaults: carried
    for name in _ALWAYS:
        assert getattr(grpo, name) == getattr(rloo, name), name
    own = GRPOConfig(**cpu)
    shared = {f.name for f in dataclasses.fields(RLOOConfig) if f.init} & {
        f.name for f in dataclasses.fields(GRPOConfig) if f.init}
    # every setting both share runs as RLOO's (their defaults differ only in the ones always carried, like beta)
    assert len(shared - _DERIVED) > 50  # the loop below reads every setting the two configs share
    for name in sorted(shared - _DERIVED):
        assert getattr(grpo, name) == getattr(rloo, name), name
    assert RLOOConfig(**cpu).beta != own.beta  # why beta is carried even at its default


# ------------------------------------------------------------------ REINFORCE's advantages


def _reinforce(normalize, rank):
    trainer = object.__new__(ReinforceTrainer)
    trainer.normalize_advantages = normalize
    trainer.accelerator = SimpleNamespace(process_index=rank)
    return trainer


def test_reinforce_gives_each_rank_its_slice_of_the_shaped_rewards_with_nan_as_zero():
    shaped = [1.0, 2.0, 4.0, float("nan"), 0.5, -1.0]
    for rank, expected in ((0, [1.0, 2.0]), (1, [4.0, 0.0]), (2, [0.5, -1.0])):
        output = {"advantages": torch.zeros(2, dtype=torch.float64)}
        _reinforce(False, rank)._replace_advantages(output, shaped)
        assert output["advantages"].tolist() == expected and output["advantages"].dtype == torch.float32


def test_reinforce_normalises_over_the_scorable_completions_with_the_sample_std_when_asked():
    shaped = [1.0, 2.0, 4.0, float("nan")]
    mean = 7 / 3
    std = math.sqrt(((1 - mean) ** 2 + (2 - mean) ** 2 + (4 - mean) ** 2) / 2)
    output = {"advantages": torch.zeros(4)}
    _reinforce(True, 0)._replace_advantages(output, shaped)
    expected = [(v - mean) / (std + 1e-4) for v in shaped[:3]] + [0.0]
    assert output["advantages"].tolist() == pytest.approx(expected, rel=1e-5)


# ------------------------------------------------------------------ the CLI's progress bar


class _Bar:
    made = []

    def __init__(self, total, desc, unit):
        self.total, self.desc, self.unit, self.n, self.postfix, self.closed = total, desc, unit, 0, None, False
        _Bar.made.append(self)

    def set_postfix(self, postfix):
        self.postfix = dict(postfix)

    def close(self):
        self.closed = True


def test_the_cli_bar_counts_steps_and_shows_the_latest_reward_and_kl_on_the_main_process_only(monkeypatch):
    import tqdm.auto

    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    _Bar.made.clear()
    callback = TqdmProgress()
    state = SimpleNamespace(max_steps=12, is_world_process_zero=True, global_step=0)
    callback.on_train_begin(None, state, None)
    [bar] = _Bar.made
    assert (bar.total, bar.desc, bar.unit) == (12, "RLOO", "step")
    state.global_step = 4
    callback.on_log(None, state, None, logs={"loss": 0.3})  # no reward in this record: the bar is left as it is
    assert bar.n == 0 and bar.postfix is None
    callback.on_log(None, state, None, logs={"reward": 0.12345, "kl": 0.0217})
    assert bar.n == 4 and bar.postfix == {"reward": "0.123", "kl": "0.022"}
    state.global_step = 5
    callback.on_log(None, state, None, logs={"reward": -1.0})  # beta = 0: TRL logs no KL
    assert bar.n == 5 and bar.postfix == {"reward": "-1.000"}
    callback.on_log(None, state, None, logs=None)
    assert bar.n == 5
    callback.on_train_end(None, state, None)
    assert bar.closed
    other = TqdmProgress()
    other.on_train_begin(None, SimpleNamespace(max_steps=12, is_world_process_zero=False), None)
    assert other.bar is None and len(_Bar.made) == 1  # another rank draws no bar
    other.on_log(None, state, None, logs={"reward": 1.0})
    other.on_train_end(None, state, None)
