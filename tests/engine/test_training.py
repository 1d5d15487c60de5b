"""The RLOO engine on the embedded defaults: parity with TRL, live metrics, stop, run folders, crashes, CLI.

``python -m pytest tests/engine/test_training.py`` (about a minute on 2 cores).

The engine's small pieces without training: how a failure is recorded, what ``TrainingJob.start`` does before
its thread runs, a subscriber's reads of the metrics channel, the GRPO config built from RLOO's, REINFORCE's
advantages for one rank of the batch, and the CLI's progress bar. Each is checked against values the test
works out itself (the message word for word, the sample std by hand, which settings GRPO keeps of its own).
Also `train()`, `build_trainer` and `check_resources` on recorders: what each hands on, and in which order."""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine import training
from rloo_demo.engine.callbacks import MetricsChannel
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.trainers import _ALWAYS, _DERIVED, ReinforceTrainer, grpo_config
from rloo_demo.engine.training import RunState, TqdmProgress, TrainingJob, _record_failure, build_trainer, train
from rloo_demo.errors import ConfigError, DiskFull
from rloo_demo.eval.evaluation import heldout_prompts
from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import sample
from rloo_demo.store.folder import RunFolder, open_run
from rloo_demo.store.listing import list_runs
from rloo_demo.task import rewards as rewards_module

# ----------------------------------------------------------------------------- engine


STEP_KEYS = [
    "reward",
    "reward_std",
    "kl",
    "entropy",
    "loss",
    "completions/mean_length",
    "frac_reward_zero_std",
    "step_time",
    "learning_rate",
    "rewards/vader_compound/mean",
    "rewards/vader_compound/std",
]


class LossInputRecorder(CapturingRLOOTrainer):
    """Keeps every batch that reached the loss, to compare with what the capture recorded."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.loss_batches, self.captured = [], []

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.captured.append(
            (self.last_completion_ids.clone(), [c for g in self.last_rollouts for c in g["completions"]])
        )
        return out

    def _compute_loss(self, model, inputs):
        self.loss_batches.append((inputs["completion_ids"].detach().clone(), inputs["advantages"].detach().clone()))
        return super()._compute_loss(model, inputs)


def run_parity(tmp_path, normalize):
    config = RunConfig(
        max_steps=3,
        prompts_per_step=3,
        num_generations=4,
        max_new_tokens=8,
        beta=0.05,
        learning_rate=5e-3,
        normalize_advantages=normalize,
        output_dir=str(tmp_path),
        rewards=["vader_compound", "length_penalty"],
        reward_weights=[1.0, 0.5],
    )
    state = RunState(config)
    state.run = RunFolder.create(config)
    trainer = build_trainer(config, state, trainer_cls=LossInputRecorder)
    trainer.loss_batches, trainer.captured = [], []
    trainer.train()
    return trainer, state


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "normalized"])
def test_captured_advantages_equal_what_the_loss_saw(tmp_path, normalize):
    trainer, state = run_parity(tmp_path, normalize)
    assert len(trainer.loss_batches) == 3 and len(trainer.captured) == 3
    for (loss_ids, loss_adv), (cap_ids, cap_rows) in zip(trainer.loss_batches, trainer.captured, strict=True):
        by_completion = defaultdict(list)
        for ids, row in zip(cap_ids.tolist(), cap_rows, strict=True):
            by_completion[tuple(ids)].append(row["advantage"])
        seen = defaultdict(list)
        for ids, adv in zip(loss_ids.tolist(), loss_adv.tolist(), strict=True):
            seen[tuple(ids)].append(adv)
        assert seen.keys() == by_completion.keys()
        for key, advs in seen.items():
            assert sorted(advs) == pytest.approx(sorted(by_completion[key]), abs=1e-5)
    groups = state.run.rollouts()
    assert len(groups) == 3 * 3
    for g in groups:
        assert g["parity_error"] < 1e-5  # our leave-one-out arithmetic reproduces TRL's tensor
        rows = g["completions"]
        assert len(rows) == 4
        for i, c in enumerate(rows):
            others = [r["shaped_reward"] for j, r in enumerate(rows) if j != i]
            assert c["baseline"] == pytest.approx(sum(others) / 3, abs=1e-6)
            assert c["shaped_reward"] == pytest.approx(c["weighted_reward"] - 0.05 * c["kl"], abs=1e-6)
            assert c["weighted_reward"] == pytest.approx(
                c["scores"]["vader_compound"] + 0.5 * c["scores"]["length_penalty"], abs=1e-6
            )
        if not normalize:
            assert sum(c["advantage"] for c in rows) == pytest.approx(0.0, abs=1e-5)
    # the policy moved away from the reference after the first update, so the KL term is real
    assert any(abs(c["kl"]) > 1e-4 for g in groups if g["step"] > 1 for c in g["completions"])


def test_channel_fans_out_to_threads():
    channel = MetricsChannel()
    got = defaultdict(list)

    def reader(name):
        for record in channel.subscribe():
            got[name].append(record["step"])

    threads = [threading.Thread(target=reader, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for step in range(1, 6):
        channel.publish({"step": step})
    channel.close()
    for t in threads:
        t.join(5)
    assert got["a"] == got["b"] == [1, 2, 3, 4, 5]
    late = channel.subscribe().poll()
    assert [r["step"] for r in late] == [1, 2, 3, 4, 5]  # a late subscriber (a reloaded page) sees it all


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    config = RunConfig(
        max_steps=3, prompts_per_step=2, max_new_tokens=8, output_dir=str(tmp_path_factory.mktemp("runs"))
    )
    renames = []
    real_replace = os.replace

    def recording_replace(src, dst, **kwargs):
        renames.append((str(src), str(dst)))
        return real_replace(src, dst, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(os, "replace", recording_replace)
    job = TrainingJob(config).start()
    assert job.thread.is_alive()  # start() returns while training goes on
    subscribers = [job.state.channel.subscribe() for _ in range(2)]
    received = [[], []]

    def read(i):
        for r in subscribers[i]:
            received[i].append(r)

    readers = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for t in readers:
        t.start()
    try:
        assert job.join(timeout=300)
    finally:
        mp.undo()
    for t in readers:
        t.join(10)
    job.renames = renames
    return job, config, received


def test_live_metrics_reach_every_subscriber(finished_run):
    job, config, received = finished_run
    assert job.state.status == "finished", job.state.error
    for records in received:
        assert [r["step"] for r in records] == [1, 2, 3]
        for key in STEP_KEYS:
            assert key in records[-1], key


def test_run_folder_is_complete(finished_run):
    job, config, _ = finished_run
    run = open_run(job.run.path)
    assert run.config() == config
    assert run.status()["status"] == "finished"
    assert [m["step"] for m in run.metrics()] == [1, 2, 3]
    rollouts = run.rollouts()
    assert len(rollouts) == 3 * config.prompts_per_step
    assert {r["step"] for r in rollouts} == {1, 2, 3}
    # model/ was written as .model.tmp and renamed into place, so it never exists half-written
    assert (str(run.path / ".model.tmp"), str(run.path / "model")) in job.renames
    assert run.model_dir is not None and not (run.path / ".model.tmp").exists()
    model = AutoModelForCausalLM.from_pretrained(run.model_dir)
    assert model.config.n_layer >= 1
    assert [r.name for r in list_runs(config.output_dir)] == [run.name]
    assert run.summary()["steps"] == 3


def test_cli_evaluate_and_infer(finished_run, capsys):
    job, config, _ = finished_run
    assert cli_main(["evaluate", "--run", str(job.run.path), "--num-prompts", "4", "--samples-per-prompt", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    saved = json.loads((job.run.path / "evaluation.json").read_text())
    # the report prints the saved numbers, and they are the means of the saved per-completion rewards
    assert len(saved["base_rewards"]) == len(saved["trained_rewards"]) == 4
    assert lines[0] == f"base_mean_reward={statistics.fmean(saved['base_rewards']):.4f}"
    assert lines[1] == f"trained_mean_reward={statistics.fmean(saved['trained_rewards']):.4f}"
    m = saved["per_function"]["sentiment_classifier"]
    assert (
        f"  {'sentiment_classifier':<24} base {m['base']:+.4f}  trained {m['trained']:+.4f}  (held-out scorer)" in lines
    )
    # the trained column is sampled from the run's model, the base column from the policy it started from
    trained, tok = load_policy(str(job.run.model_dir))
    base, _ = load_policy(config.policy)
    first = heldout_prompts(config, 1)[0]
    assert saved["samples"][0]["prompt"] == first
    assert saved["samples"][0]["trained"] == sample(trained, tok, first, 1, config.max_new_tokens, seed=0)[0]["text"]
    assert saved["samples"][0]["base"] == sample(base, tok, first, 1, config.max_new_tokens, seed=0)[0]["text"]

    assert cli_main(["infer", "--run", str(job.run.path), "--prompt", "This film is", "--num-samples", "2"]) == 0
    expected = sample(trained, tok, "This film is", 2, 40, 0.8, 0.95, seed=0)  # the CLI's defaults
    assert capsys.readouterr().out == "".join(f"This film is{s['text']}\n" for s in expected)


def test_cli_user_errors_are_one_line(tmp_path, capsys):
    assert cli_main(["train", "--num-generations", "3", "--generation-batch-size", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: generation_batch_size: the generation batch of 10 completions must be evenly")
    assert len(err.strip().splitlines()) == 1
    assert cli_main(["evaluate", "--run", str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert cli_main(["train", "--config", str(tmp_path / "nope.yaml")]) == 2


def test_stop_is_honoured_at_a_step_boundary(tmp_path):
    job = TrainingJob(RunConfig(max_steps=200, prompts_per_step=2, max_new_tokens=8, output_dir=str(tmp_path))).start()
    first = job.state.channel.wait_for(0, timeout=120)
    assert first, "no step arrived"
    job.stop()
    assert job.join(timeout=120)
    status = job.run.status()
    assert status["status"] == "stopped"
    steps = [m["step"] for m in job.run.metrics()]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 200
    assert status["step"] == steps[-1]  # stopped after a whole step: every logged step is complete
    assert job.run.model_dir is not None


def test_crash_in_a_reward_function_fails_the_run_and_keeps_metrics(tmp_path, monkeypatch):
    calls = {"n": 0}

    def exploding_reward(prompts, completions, **kw):
        calls["n"] += 1
        if calls["n"] >= 3:
            raise RuntimeError("reward server went away")
        return [0.0] * len(completions)

    monkeypatch.setitem(
        rewards_module.REWARDS,
        "exploding_reward",
        rewards_module.BuiltinReward(lambda: exploding_reward, "train.w_vader", "reward.help.vader_compound"),
    )
    config = RunConfig(
        max_steps=5, prompts_per_step=2, max_new_tokens=8, output_dir=str(tmp_path), rewards=["exploding_reward"]
    )
    state = train(config)
    assert state.status == "failed"
    assert "reward server went away" in state.error
    status = state.run.status()
    assert status["status"] == "failed" and "RuntimeError: reward server went away" in status["error"]
    assert [m["step"] for m in state.run.metrics()] == [1, 2]
    assert state.run.model_dir is None


def test_policy_snapshot_is_a_private_copy(tmp_path):
    job = TrainingJob(RunConfig(max_steps=200, prompts_per_step=2, max_new_tokens=8, output_dir=str(tmp_path))).start()
    assert job.state.channel.wait_for(0, timeout=120), "no step arrived"
    snap = job.state.policy_snapshot()
    live = job.state.trainer.accelerator.unwrap_model(job.state.trainer.model)
    assert snap is not live and not snap.training
    before = {k: v.clone() for k, v in snap.state_dict().items()}
    assert job.state.channel.wait_for(len(job.state.channel) + 1, timeout=60), "no further step arrived"
    job.stop()
    assert job.join(timeout=120)
    live_after = live.state_dict()
    assert any(not torch.equal(before[k], live_after[k]) for k in before)  # the live policy trained on
    assert all(torch.equal(before[k], v) for k, v in snap.state_dict().items())  # but the snapshot did not change


# ----------------------------------------------------------------------------- engine units


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

    def run_training(state):
        events.append(("train", state.config, state, threading.current_thread().daemon))
        trained.set()

    monkeypatch.setattr(training, "run_training", run_training)
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
        "digest-of-the-starter"
    )
    events.clear()
    other = TrainingJob(RunConfig(output_dir=str(tmp_path), run_name="job-b", max_steps=2))
    other.start(resources_checked=True)  # the runner checked them before it took its lock
    assert other.join(30) and [e[0] for e in events] == ["train"]


def test_the_engine_trusts_a_checked_config_and_still_checks_one_that_is_not(tmp_path, monkeypatch):
    """A config checked above the engine (the controller's check, the CLI's ``validate``) is trusted by the job and
    by the training thread: one check in all, one check of the resources (the caller's flag reaches the thread) and
    one run folder. An unchecked config, or one changed after its check, is checked and refused before anything is
    written."""
    calls = []
    real = RunConfig.problems
    monkeypatch.setattr(RunConfig, "problems", lambda self, *a, **k: calls.append("check") or real(self, *a, **k))
    monkeypatch.setattr(training, "check_resources", lambda config: calls.append("resources"))
    real_create = RunFolder.create.__func__
    monkeypatch.setattr(
        RunFolder, "create", classmethod(lambda cls, c, **kw: calls.append("folder") or real_create(cls, c, **kw))
    )

    def no_model(config, state, **kwargs):
        calls.append("build")
        raise RuntimeError("no model in this test")

    monkeypatch.setattr(training, "build_trainer", no_model)
    config = RunConfig(output_dir=str(tmp_path), run_name="checked", max_steps=2).validate()
    assert calls == ["check"]
    job = TrainingJob(config).start(resources_checked=True)  # the runner checked them before it took its lock
    assert job.join(30) and job.state.error == "RuntimeError: no model in this test"
    assert calls == ["check", "folder", "build"]  # the thread reached the trainer without a check of its own
    calls.clear()
    state = training.train(RunConfig(output_dir=str(tmp_path), run_name="plain", max_steps=2))  # the CLI's way
    assert calls == ["check", "resources", "folder", "build"] and state.status == "failed"
    changed = RunConfig(output_dir=str(tmp_path), run_name="changed", max_steps=2).validate()
    changed.max_steps = 0
    for make in (lambda c: TrainingJob(c), training.train):
        with pytest.raises(ConfigError) as refused:
            make(changed)
        assert list(refused.value.problems) == ["max_steps"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checked", "plain"]  # nothing written for the refused


# ------------------------------------------------------------------ a subscriber of the metrics channel


def test_a_poll_without_a_timeout_never_waits_and_one_with_a_timeout_waits_that_long(monkeypatch):
    channel = MetricsChannel()
    for step in (1, 2, 3):
        channel.publish({"step": step})
    sub = channel.subscribe()
    waits = []
    real_wait = channel.wait_for
    monkeypatch.setattr(
        channel, "wait_for", lambda start, timeout=None: waits.append((start, timeout)) or real_wait(start, timeout)
    )
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


def test_a_wait_ends_at_its_timeout_with_nothing_new_and_a_snapshot_reads_from_its_start():
    channel = MetricsChannel()
    for step in (1, 2, 3):
        channel.publish({"step": step})
    assert (
        len(channel) == 3
        and channel.snapshot(1) == [{"step": 2}, {"step": 3}]
        and channel.snapshot() == [{"step": 1}, {"step": 2}, {"step": 3}]
    )
    assert channel.wait_for(3, timeout=0.01) == [] and not channel.closed  # nothing after the third: timed out
    assert channel.wait_for(2) == [{"step": 3}]  # one record there: no wait
    channel.close()
    assert channel.closed and channel.wait_for(3) == []  # closed: a wait with no timeout ends at once


# ------------------------------------------------------------------ the live-metrics callback


def _live(clock=None, **kwargs):
    from rloo_demo.engine.callbacks import LiveMetricsCallback

    channel = MetricsChannel()
    if clock is not None:
        kwargs["clock"] = lambda: clock[0]
    return LiveMetricsCallback(channel, **kwargs), channel


def test_a_logged_step_is_published_with_its_times_and_every_number_trl_logged():
    records = []
    cb, channel = _live(on_record=records.append)
    assert cb.phase == "preparing"
    state = SimpleNamespace(global_step=7, max_steps=20, is_world_process_zero=True)
    cb.started = time.time() - 10.0  # training began 10 s ago
    before = time.time()
    cb.on_log(None, state, None, logs={"reward": 0.5, "kl": 2, "loss": -0.25, "note": "a string", "flag": True})
    after = time.time()
    [record] = channel.snapshot()
    assert records == [record] and cb.phase == "training"
    assert before <= record.pop("logged_at") <= after
    assert before - cb.started <= record.pop("time") <= after - cb.started
    assert record == {"step": 7, "max_steps": 20, "reward": 0.5, "kl": 2.0, "loss": -0.25, "flag": 1.0}
    assert type(record["kl"]) is float
    # not step records: the end-of-training summary, an evaluation's log, a log on another rank
    cb.on_log(None, state, None, logs={"reward": 1.0, "train_runtime": 3.0})
    cb.on_log(None, state, None, logs={"eval_loss": 1.0})
    cb.on_log(None, state, None, logs={})
    cb.on_log(
        None, SimpleNamespace(global_step=8, max_steps=20, is_world_process_zero=False), None, logs={"reward": 1.0}
    )
    assert len(channel) == 1 and len(records) == 1


def test_training_begins_the_clock_and_the_budget_runs_from_the_jobs_start_when_it_has_one():
    clock = [50.0]
    cb, _ = _live(clock)
    assert cb.started == 50.0
    clock[0] = 58.0
    cb.on_train_begin(None, None, None)
    assert (cb.phase, cb.started, cb.budget_started) == ("first_step", 58.0, 58.0)  # no job start: from here
    cb, _ = _live(clock, budget_started=40.0, budget_seconds=30.0)
    cb.on_train_begin(None, None, None)
    assert (cb.started, cb.budget_started) == (58.0, 40.0)
    # deadline 70: at 58 with no step measured yet, 58 + 0 + reserve < 70 ... until the reserve reaches it
    from rloo_demo.engine.callbacks import SAVE_RESERVE_SECONDS

    clock[0] = 70.0 - SAVE_RESERVE_SECONDS - 0.001
    assert not cb.out_of_budget()
    clock[0] = 70.0 - SAVE_RESERVE_SECONDS  # exactly at the edge: out (the save must fit inside)
    assert cb.out_of_budget()
    cb.last_step_seconds = 5.0
    clock[0] = 70.0 - SAVE_RESERVE_SECONDS - 5.001
    assert not cb.out_of_budget()
    clock[0] += 0.002
    assert cb.out_of_budget()
    cb.budget_started = None  # from the callback's own start then: deadline 58 + 30
    assert not cb.out_of_budget()
    assert not _live(clock)[0].out_of_budget()  # no budget: never out


def test_a_step_end_stops_on_a_request_a_stop_file_or_the_budget_and_says_why_only_for_the_budget(tmp_path):
    one = SimpleNamespace(world_size=1)
    reasons = []
    clock = [0.0]
    stop_file = tmp_path / "STOP"
    cb, _ = _live(clock, stop_file=str(stop_file), budget_seconds=100.0, on_stop=reasons.append)
    cb.on_train_begin(one, None, None)

    def step(seconds):
        control = SimpleNamespace(should_training_stop=False)
        cb.on_step_begin(one, None, control)
        clock[0] += seconds
        assert cb.on_step_end(one, None, control) is control
        return control.should_training_stop

    clock[0] = 7.0  # the first step begins 7 s in: its length is the difference of two readings, not the last
    assert not step(2.0) and cb.last_step_seconds == 2.0 and not cb.stop_event.is_set()
    stop_file.write_text("")
    assert step(3.0) and cb.stop_event.is_set() and reasons == []  # another process asked: no reason given here
    stop_file.unlink()
    cb.stop_event.clear()
    assert not step(1.0)
    cb.stop_event.set()
    clock[0] = 99.0  # out of budget as well: the request came first, and the budget is not named
    assert step(1.0) and reasons == []
    cb.stop_event.clear()
    assert step(1.0) and reasons == ["it reached this server's compute budget of 100 s"]
    assert cb.stop_event.is_set()


def test_with_several_processes_rank_0_decides_for_all(monkeypatch):
    import torch.distributed as dist

    sent = []

    def broadcast(flag, src):
        sent.append((int(flag.item()), src))
        flag.fill_(1)  # rank 0 says stop

    monkeypatch.setattr(dist, "broadcast", broadcast)
    cb, _ = _live()
    control = SimpleNamespace(should_training_stop=False)
    cb.on_step_end(SimpleNamespace(world_size=2), None, control)
    assert sent == [(0, 0)] and control.should_training_stop and cb.stop_event.is_set()  # this rank saw no reason


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
        f.name for f in dataclasses.fields(GRPOConfig) if f.init
    }
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


# ------------------------------------------------------------------ train(): the order of its records


class _Run(_Folder):
    """A run folder that records what train() writes into it, its model too."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        (path / "trainer").mkdir(parents=True)

    def save_model(self, model, tokenizer, state_dict=None):
        self.calls.append(("save_model", {"model": model, "tokenizer": tokenizer, "state_dict": state_dict}))


class _Trainer:
    """What train() reads of a trainer: its accelerator (the model wrapped and unwrapped), its step, its output."""

    def __init__(self, state, steps, stop_at=None, engine="NO", output_dir=None):
        self.run_state, self.steps, self.stop_at = state, steps, stop_at
        self.model, self.model_wrapped, self.inner = object(), object(), object()
        self.processing_class = "the tokenizer"
        self.accelerator = SimpleNamespace(
            unwrap_model=lambda model: self.inner if model is self.model else None,
            distributed_type=SimpleNamespace(value=engine),
            get_state_dict=lambda model: {"gathered from": model},
        )
        self.state = SimpleNamespace(global_step=0)
        self.args = SimpleNamespace(output_dir=output_dir)
        self.seen_status = None

    def train(self):
        self.seen_status = self.run_state.status
        for step in range(1, self.steps + 1):
            self.state.global_step = step
            if step == self.stop_at:
                self.run_state.request_stop("the budget ran out")
                return


def _fake_engine(monkeypatch, make_trainer, is_main=True):
    """train()'s collaborators replaced by recorders: every call lands in ``calls`` in order."""
    calls = []
    monkeypatch.setattr(training, "check_resources", lambda config: calls.append(("check", config)))
    monkeypatch.setattr(
        training.distributed, "init_distributed", lambda: SimpleNamespace(is_main_process=is_main, num_processes=1)
    )
    monkeypatch.setattr(training.RunFolder, "create", lambda config: calls.append(("create", config)) or "created")
    monkeypatch.setattr(training, "process_identity", lambda: {"pid": 4242})
    monkeypatch.setattr(training, "models_held", lambda trainer: {"held by": trainer})

    def build(config, state, **kwargs):
        calls.append(("build", kwargs))
        return make_trainer(state)

    def launch_record(acc, model):
        calls.append(("launch", model))
        return {"launch of": model}

    monkeypatch.setattr(training, "build_trainer", build)
    monkeypatch.setattr(training.distributed, "launch_record", launch_record)
    monkeypatch.setattr(
        training.distributed, "write_launch_block", lambda path, launch: calls.append(("launch block", path, launch))
    )
    monkeypatch.setattr(
        training.distributed,
        "record_final_params",
        lambda launch, model, step: calls.append(("final params", model, step)),
    )
    return calls


def test_train_records_running_then_its_models_then_the_end_with_the_step_it_reached(tmp_path, monkeypatch):
    config = RunConfig(output_dir=str(tmp_path), max_steps=5)
    state = RunState(config, run=_Run(tmp_path / "run"))
    made, elsewhere = [], tmp_path / "trl-output"
    elsewhere.mkdir()
    calls = _fake_engine(monkeypatch, lambda s: made.append(_Trainer(s, 5, output_dir=str(elsewhere))) or made[-1])
    before = time.time()
    assert (
        training.train(config, state, progress=True, stop_file="/somewhere/STOP", trainer_cls=ReinforceTrainer) is state
    )
    [trainer] = made
    assert trainer.seen_status == "running" and state.status == "finished" and state.error is None
    assert before <= state.started <= state.finished <= time.time()
    assert calls == [
        ("check", config),
        ("build", {"progress": True, "stop_file": "/somewhere/STOP", "trainer_cls": ReinforceTrainer}),
        ("launch", trainer.inner),  # the unwrapped model: its parameters, not the wrapper's
        ("launch block", state.run.path / "config.yaml", {"launch of": trainer.inner}),
        ("final params", trainer.inner, 5),
    ]  # a folder given with the state is the run's: no other is created
    launch = {"launch of": trainer.inner}
    [first, second, saved, last] = state.run.calls
    assert first == ("running", {"started": state.started, "pid": 4242})
    assert second == ("running", {"launch": launch, "models": {"held by": trainer}})
    assert saved == ("save_model", {"model": trainer.inner, "tokenizer": "the tokenizer", "state_dict": None})
    assert last[0] == "finished" and last[1].pop("finished") >= state.started
    assert last[1] == {"step": 5, "reason": None, "launch": launch}
    assert not (state.run.path / "trainer").exists()  # TRL's output_dir held nothing: removed
    assert elsewhere.is_dir()  # the main process's output_dir is the run's: only another rank's scratch is removed


class _Crash(_Trainer):
    def __init__(self, state, exc):
        super().__init__(state, 0)
        self.exc = exc

    def train(self):
        self.run_state.weights.on_pre_optimizer_step(None, None, None)  # raised inside the optimiser step
        raise self.exc


def test_a_crash_in_training_is_recorded_releases_the_weights_and_closes_the_channel(tmp_path, monkeypatch):
    config = RunConfig(output_dir=str(tmp_path), max_steps=2)
    state = RunState(config, run=_Run(tmp_path / "crash"))
    _fake_engine(monkeypatch, lambda s: _Crash(s, ValueError("the reward function raised")))
    assert training.train(config, state) is state  # recorded, not raised
    assert (state.status, state.error) == ("failed", "ValueError: the reward function raised")
    assert state.run.calls[-1][0] == "failed" and state.run.calls[-1][1]["error"] == state.error
    assert state.weights.lock.acquire(blocking=False)  # released: a reader copying the policy never waits for ever
    assert state.channel.closed and state.finished >= state.started
    # A BaseException (SystemExit, KeyboardInterrupt) ends the thread: it propagates, and the run still reads failed.
    state = RunState(config, run=_Run(tmp_path / "exit"))
    _fake_engine(monkeypatch, lambda s: _Crash(s, SystemExit(3)))
    with pytest.raises(SystemExit):
        training.train(config, state)
    assert (state.status, state.error) == ("failed", "training ended without a status")
    assert state.weights.lock.acquire(blocking=False) and state.channel.closed and state.finished >= state.started


def test_a_run_that_stops_early_says_stopped_with_its_reason_and_one_stopped_at_its_last_step_finished(
    tmp_path, monkeypatch
):
    config = RunConfig(output_dir=str(tmp_path), max_steps=5)
    for stop_at, status, reason in ((3, "stopped", "the budget ran out"), (5, "finished", None)):
        state = RunState(config, run=_Run(tmp_path / f"run-{stop_at}"))
        (state.run.path / "trainer" / "trackio.log").write_text("a tracker's log")
        _fake_engine(monkeypatch, lambda s, stop_at=stop_at: _Trainer(s, steps=5, stop_at=stop_at))
        training.train(config, state)
        assert state.status == status and state.stop_reason == "the budget ran out"
        last = state.run.calls[-1]
        assert (last[0], last[1]["step"], last[1]["reason"]) == (status, stop_at, reason)
        assert (state.run.path / "trainer" / "trackio.log").is_file()  # a folder with a tracker's files stays
    # a trainer that ends short of max_steps with no stop asked for (TRL's own early end): finished, not stopped
    state = RunState(config, run=_Run(tmp_path / "run-short"))
    _fake_engine(monkeypatch, lambda s: _Trainer(s, steps=2))
    training.train(config, state)
    assert state.status == "finished" and state.run.calls[-1][1]["step"] == 2


def test_a_sharded_engine_saves_the_weights_every_rank_gathered(tmp_path, monkeypatch):
    config = RunConfig(output_dir=str(tmp_path), max_steps=2)
    for engine, gathered in (("FSDP", True), ("DEEPSPEED", True), ("MULTI_GPU", False)):
        state = RunState(config, run=_Run(tmp_path / engine))
        made = []
        _fake_engine(monkeypatch, lambda s, e=engine, m=made: m.append(_Trainer(s, 2, engine=e)) or m[-1])
        training.train(config, state)
        [saved] = [extra for status, extra in state.run.calls if status == "save_model"]
        assert saved["state_dict"] == ({"gathered from": made[-1].model_wrapped} if gathered else None), engine


def test_train_makes_the_folder_on_the_main_process_only_and_other_ranks_remove_their_scratch(tmp_path, monkeypatch):
    config = RunConfig(output_dir=str(tmp_path), max_steps=2)
    scratch = tmp_path / "rank-1"
    scratch.mkdir()
    calls = _fake_engine(monkeypatch, lambda s: _Trainer(s, 2, output_dir=str(scratch)), is_main=False)
    state = training.train(config, progress=False)  # no state given: train() makes its own for this config
    assert state.config is config and state.run is None and state.status == "finished"
    assert [c[0] for c in calls] == ["check", "build", "launch", "final params"]  # no folder, no launch block
    assert calls[1] == ("build", {"progress": False, "stop_file": None, "trainer_cls": None})
    assert not scratch.exists()
    calls = _fake_engine(monkeypatch, lambda s: _Trainer(s, 2), is_main=True)
    made = _Run(tmp_path / "made")
    monkeypatch.setattr(training.RunFolder, "create", lambda c: calls.append(("create", c)) or made)
    state = training.train(config)
    assert [c[0] for c in calls[:3]] == ["check", "create", "build"] and state.run is made  # before anything runs
    assert calls[2][1]["progress"] is False  # no bar unless asked for (the CLI asks)
    assert made.calls[-1][0] == "finished"


def test_check_resources_reads_one_prompt_with_the_resolved_policy_folder(monkeypatch):
    calls = []
    config = RunConfig(rewards=["vader_compound", "length"], reward_weights=[1.0, 0.5])
    monkeypatch.setattr(training, "check_policy_fits", lambda c: calls.append(("fits", c)))
    monkeypatch.setattr(training, "resolve_model", lambda name: calls.append(("resolve", name)) or "/the/policy")
    monkeypatch.setattr(training, "check_lora_targets", lambda c, folder: calls.append(("lora", c, folder)))
    monkeypatch.setattr(training, "build_reward", lambda name: calls.append(("reward", name)))
    monkeypatch.setattr(training, "check_template", lambda c, folder: calls.append(("template", c, folder)))
    monkeypatch.setattr(training, "run_prompts", lambda *args: calls.append(("prompts", *args)))
    training.check_resources(config)
    assert calls == [
        ("fits", config),  # first: from the file headers, before anything is read whole
        ("resolve", config.policy),
        ("lora", config, "/the/policy"),
        ("reward", "vader_compound"),
        ("reward", "length"),
        ("template", config, "/the/policy"),
        ("prompts", config, "train", 1, "/the/policy"),  # one prompt is enough to prove the data reads
    ]


def test_the_first_stop_reason_is_the_one_kept_and_a_jobs_own_stop_names_its_starter():
    state = RunState(RunConfig())
    state.request_stop("the page was abandoned")
    state.request_stop("the budget ran out")
    assert state.stop_event.is_set() and state.stop_reason == "the page was abandoned"
    job = TrainingJob(RunConfig())
    assert job.thread is None and not job.done and job.join(0) is False  # not started: not done, nothing to wait
    job.stop()
    assert job.state.stop_reason == "its starter asked it to stop" and job.state.stop_event.is_set()
    other = TrainingJob(RunConfig())
    other.stop("a visitor's quota")
    assert other.state.stop_reason == "a visitor's quota"


def test_join_waits_no_longer_than_its_timeout():
    job, release = TrainingJob(RunConfig()), threading.Event()
    job.thread = threading.Thread(target=release.wait, args=(30,), daemon=True)
    job.thread.start()
    try:
        assert job.join(0.05) is False and not job.done  # still running after the timeout: join returned anyway
    finally:
        release.set()
    assert job.join(30) is True and job.done


def test_a_fields_default_is_its_value_or_its_factorys_or_missing():
    from rloo_demo.engine.trainers import _default

    @dataclasses.dataclass
    class Toy:
        needed: int
        plain: float = 0.25
        made: list = dataclasses.field(default_factory=lambda: [1, 2])

    needed, plain, made = dataclasses.fields(Toy)
    assert _default(needed) is dataclasses.MISSING and _default(plain) == 0.25 and _default(made) == [1, 2]


# ------------------------------------------------------------------ the models a trainer holds


class _Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(3, 4)  # 16 parameters
        self.head = torch.nn.Linear(4, 2)  # 10, frozen below
        self.head.requires_grad_(False)


def _holder(policy, beta, ref_model, rewards):
    wrapper = object()
    return SimpleNamespace(
        model=wrapper,
        beta=beta,
        ref_model=ref_model,
        reward_funcs=rewards,
        accelerator=SimpleNamespace(unwrap_model=lambda m: policy if m is wrapper else None),
    )


def test_models_held_counts_the_policy_its_reference_and_each_kind_of_reward(monkeypatch):
    from rloo_demo.engine import trainers

    def vader_compound(completions, **kw): ...

    def length_reward(completions, **kw): ...

    def classifier(completions, **kw): ...

    classifier.model_folder = "/models/sentiment"
    read = []
    monkeypatch.setattr(
        trainers,
        "sentiment_pipeline",
        lambda folder: read.append(folder) or SimpleNamespace(model=torch.nn.Linear(5, 1)),
    )  # 6 parameters
    scorer = torch.nn.Linear(2, 2)  # a reward that is a model itself: 6 parameters
    policy = _Policy()
    held = trainers.models_held(
        _holder(policy, 0.05, torch.nn.Linear(7, 1), [vader_compound, length_reward, classifier, scorer])
    )
    assert held == {
        "policy": 26,
        "trainable": 16,
        "reference": {"kind": "separate copy", "parameters": 8},
        "rewards": [
            {"name": "vader_compound", "kind": "lexicon", "parameters": 0},
            {"name": "length_reward", "kind": "rule", "parameters": 0},
            {"name": "classifier", "kind": "classifier", "parameters": 6},
            {"name": "Linear", "kind": "model", "parameters": 6},
        ],
    }
    assert read == ["/models/sentiment"]
    # beta = 0: TRL loads no reference at all, even where a copy was made
    assert trainers.models_held(_holder(policy, 0.0, torch.nn.Linear(7, 1), []))["reference"] is None
    assert trainers.models_held(_holder(policy, 0.05, None, []))["reference"] is None  # no copy, no adapter


def test_a_lora_policys_reference_is_its_base_with_the_adapter_off():
    from peft import LoraConfig, get_peft_model

    from rloo_demo.engine.trainers import models_held

    policy = get_peft_model(_Policy(), LoraConfig(r=2, target_modules=["body"]))
    held = models_held(_holder(policy, 0.1, None, []))
    assert held["reference"] == {"kind": "the policy's base, adapter off (no copy)", "parameters": 0}
    lora = 2 * 3 + 4 * 2  # A: r x in, B: out x r
    assert (held["policy"], held["trainable"]) == (26 + lora, lora)


# ------------------------------------------------------------------ build_trainer's wiring, on recorders


class _Built(CapturingRLOOTrainer):
    """Records what build_trainer hands the trainer; TRL's constructor is not run."""

    def __init__(self, **kwargs):
        self.kwargs, self.batch_observers, self.removed, self.added = kwargs, [], [], []
        self.model = "the wrapped policy"
        self.accelerator = SimpleNamespace(
            distributed_type=SimpleNamespace(value=_Built.engine), unwrap_model=lambda m: f"unwrapped {m}"
        )

    def remove_callback(self, callback):
        self.removed.append(callback)

    def add_callback(self, callback):
        self.added.append(callback)


def _wire(monkeypatch, calls, processes=1):
    monkeypatch.setattr(training, "load_policy", lambda name: ("the policy", "the tokenizer"))
    monkeypatch.setattr(training, "set_step_threads", lambda name: calls.append(("step threads", name)))
    monkeypatch.setattr(training, "build_reward", lambda name: f"reward {name}")
    monkeypatch.setattr(training, "run_prompts", lambda config, split: calls.append(("prompts", split)) or "prompts")
    monkeypatch.setattr(training.distributed, "init_distributed", lambda: SimpleNamespace(num_processes=processes))
    monkeypatch.setattr(
        training,
        "rloo_config",
        lambda config, trainer_dir, **kw: calls.append(("args", trainer_dir, kw)) or "rloo args",
    )

    def trainer_for(estimator, args, kwargs, trainer_cls=None):
        calls.append(("trainer_for", estimator, args, trainer_cls))
        calls.append(("sink", kwargs))
        return _Built, "estimator args", {"extra": 1}

    monkeypatch.setattr(training, "trainer_for", trainer_for)
    monkeypatch.setattr(
        training,
        "set_backward_threads",
        lambda trainer, name, n: calls.append(("backward", type(trainer).__name__, name, n)),
    )
    monkeypatch.setattr(training, "TrainingMeter", lambda every, seed: ("meter", every, seed))
    monkeypatch.setattr(training, "SnapshotCallback", lambda path, every, policy: ("snapshots", path, every, policy()))


def test_build_trainer_wires_the_run_folder_budget_stop_file_and_settings_into_the_trainer(tmp_path, monkeypatch):
    from rloo_demo.engine.callbacks import LiveMetricsCallback

    calls = []
    _wire(monkeypatch, calls, processes=2)
    _Built.engine = "MULTI_CPU"
    config = RunConfig(
        output_dir=str(tmp_path),
        rewards=["length", "vader_compound"],
        reward_weights=[0.5, 2.0],
        estimator="reinforce",
        record_tokens=True,
        reward_offset=1.5,
        variance_every=3,
        seed=11,
        snapshot_every=4,
    )
    run = RunFolder.create(config)
    state = RunState(config, run=run, budget_seconds=90.0, budget_started=1234.0)
    trainer = training.build_trainer(config, state, progress=True, stop_file="/x/STOP", trainer_cls=ReinforceTrainer)
    assert isinstance(trainer, _Built)
    assert calls[:3] == [
        ("step threads", config.policy),
        ("prompts", "train"),
        ("args", run.path / "trainer", {"num_processes": 2, "reward_weights": [0.5, 2.0], "run_name": run.name}),
    ]
    assert calls[3] == ("trainer_for", "reinforce", "rloo args", ReinforceTrainer)
    sink = calls[4][1]
    assert (sink["record_tokens"], sink["reward_offset"]) == (True, 1.5)
    assert calls[5:] == [("backward", "_Built", config.policy, 2)]  # the trainer's own backward threads
    kw = trainer.kwargs
    assert (kw["model"], kw["args"], kw["processing_class"], kw["train_dataset"], kw["extra"]) == (
        "the policy",
        "estimator args",
        "the tokenizer",
        "prompts",
        1,
    )
    assert kw["reward_funcs"] == ["reward length", "reward vader_compound"] and kw["peft_config"] is None
    live, lock, bar = kw["callbacks"]
    assert isinstance(live, LiveMetricsCallback) and lock is state.weights and isinstance(bar, TqdmProgress)
    assert (live.channel, live.stop_event, live.stop_file) == (state.channel, state.stop_event, "/x/STOP")
    assert (live.budget_seconds, live.budget_started) == (90.0, 1234.0)
    live.on_stop("a reason")
    assert state.stop_reason == "a reason"
    live.on_record({"step": 1, "reward": 0.5})
    assert [r["reward"] for r in run.metrics()] == [0.5]  # the records go to the run's metrics.jsonl
    # the sink writes a step's groups to the folder and keeps them in memory under that step
    groups = [{"step": 3, "prompt": "p", "completions": []}]
    sink["rollout_sink"](3, groups)
    assert list(state.rollouts) == [3] and state.rollouts[3] == groups and state.rollout_steps == [3]
    assert run.rollouts() == groups
    from transformers.trainer_callback import PrinterCallback

    assert trainer.removed == [PrinterCallback] and trainer.batch_observers == [("meter", 3, 11)]
    assert trainer.added == [("snapshots", run.path, 4, "unwrapped the wrapped policy")]


def test_another_rank_trains_in_a_scratch_folder_without_a_name_a_bar_or_snapshots(tmp_path, monkeypatch, caplog):
    calls = []
    _wire(monkeypatch, calls)
    _Built.engine = "FSDP"
    config = RunConfig(output_dir=str(tmp_path), snapshot_every=2)
    trainer = training.build_trainer(config, RunState(config))
    [(_, trainer_dir, kw)] = [c for c in calls if c[0] == "args"]
    assert kw == {"num_processes": 1, "reward_weights": [1.0] * len(config.rewards)}  # no run name to report
    assert str(trainer_dir).startswith(tempfile.gettempdir() + "/rloo-rank-") and os.path.isdir(trainer_dir)
    os.rmdir(trainer_dir)
    assert len(trainer.kwargs["callbacks"]) == 2 and trainer.added == [] and trainer.batch_observers == []
    # the main rank under FSDP or DeepSpeed: its snapshots are skipped (each rank holds a slice), with a warning
    for engine in ("FSDP", "DEEPSPEED"):
        _Built.engine = engine
        caplog.clear()
        run = RunFolder.create(config)
        assert training.build_trainer(config, RunState(config, run=run)).added == []
        assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
            ("rloo_demo.engine.training", "WARNING", "snapshot_every is ignored under FSDP / DeepSpeed: no snapshots")
        ]


def test_rollouts_in_memory_keep_the_latest_steps_in_order_and_list_every_step_once():
    state = RunState(RunConfig())
    limit = training.ROLLOUT_MEMORY_STEPS
    for step in range(1, limit + 3):
        state.keep_rollouts(step, [{"step": step}])
    state.keep_rollouts(limit + 2, [{"step": "again"}])  # the same step twice (a second batch of it)
    assert list(state.rollouts) == list(range(3, limit + 3))  # the oldest two left memory
    assert state.rollouts[limit + 2] == [{"step": "again"}]
    assert state.rollout_steps == list(range(1, limit + 3))


# ------------------------------------------------------------------ which trainer an estimator gets


def test_each_estimator_gets_its_class_a_stand_in_must_subclass_it_and_an_unknown_one_is_named(tmp_path):
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig

    from rloo_demo.engine.trainers import trainer_for, with_speedups
    from rloo_demo.fast.fast_step import SingleForwardRLOOTrainer
    from rloo_demo.fast.overlap import BackgroundAfterPass

    rloo = RLOOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False)
    kwargs = {"rollout_sink": None}
    cls, args, extra = trainer_for("rloo", rloo, kwargs)
    assert cls is with_speedups(CapturingRLOOTrainer) and (args, extra) == (rloo, kwargs)
    assert cls.__mro__[:4] == (cls, BackgroundAfterPass, CapturingRLOOTrainer, SingleForwardRLOOTrainer)
    assert cls.__name__ == "CapturingRLOOTrainer"
    assert trainer_for("reinforce", rloo, kwargs, speedups=False)[0] is ReinforceTrainer
    assert trainer_for("reinforce", rloo, kwargs)[0].__mro__[2] is ReinforceTrainer

    class Recorder(ReinforceTrainer):
        pass

    assert trainer_for("reinforce", rloo, kwargs, trainer_cls=Recorder, speedups=False)[0] is Recorder
    with pytest.raises(TypeError, match=r"^Recorder does not subclass GRPOTrainer$"):
        trainer_for("grpo", rloo, kwargs, trainer_cls=Recorder)

    class GrpoRecorder(GRPOTrainer):
        pass

    cls, args, extra = trainer_for("grpo", rloo, kwargs, trainer_cls=GrpoRecorder)
    assert cls is GrpoRecorder and isinstance(args, GRPOConfig) and extra == {}  # GRPO takes no capture keywords
    assert trainer_for("grpo", rloo, kwargs)[0] is GRPOTrainer
    with pytest.raises(ValueError, match=r"^unknown estimator 'ppo'; use rloo, reinforce, grpo$"):
        trainer_for("ppo", rloo, kwargs)
    with pytest.raises(TypeError, match=r"^GrpoRecorder is not a CapturingRLOOTrainer$"):
        with_speedups(GrpoRecorder)


def test_the_step_and_the_backward_get_the_thread_counts_of_the_policy_and_the_processes(monkeypatch):
    from rloo_demo.engine import trainers
    from rloo_demo.fast import fast_step
    from rloo_demo.models.hub import EMBEDDED_POLICY

    monkeypatch.delenv("RLOO_TORCH_THREADS", raising=False)
    monkeypatch.setattr(fast_step, "TORCH_DEFAULT_THREADS", 4)
    set_to = []
    monkeypatch.setattr(trainers.torch, "set_num_threads", set_to.append)
    trainers.set_step_threads(EMBEDDED_POLICY)
    trainers.set_step_threads("some/hub-model")
    assert set_to == [1, 4]

    class Engine(fast_step.SingleForwardRLOOTrainer):
        def __init__(self):
            self.asked = []

        def use_backward_threads(self, threads):
            self.asked.append(threads)

    engine = Engine()
    trainers.set_backward_threads(engine, EMBEDDED_POLICY, 1)
    trainers.set_backward_threads(engine, EMBEDDED_POLICY, 2)  # several processes share out the cores already
    assert engine.asked == [2, 1]
    trainers.set_backward_threads(SimpleNamespace(), EMBEDDED_POLICY, 1)  # GRPO's trainer: left as it is


def test_snapshots_every_n_steps_only_when_n_is_positive_and_a_lora_run_gets_its_adapter(tmp_path, monkeypatch):
    calls = []
    _wire(monkeypatch, calls)
    _Built.engine = "NO"
    for every, added in ((0, 0), (1, 1), (2, 1)):
        config = RunConfig(output_dir=str(tmp_path), snapshot_every=every)
        trainer = training.build_trainer(config, RunState(config, run=RunFolder.create(config)))
        assert [a[2] for a in trainer.added] == [every] * added, every
        assert trainer.kwargs["peft_config"] is None
    config = RunConfig(output_dir=str(tmp_path), use_lora=True, lora_r=4)
    peft = training.build_trainer(config, RunState(config, run=RunFolder.create(config))).kwargs["peft_config"]
    assert peft is not None and peft.r == 4
