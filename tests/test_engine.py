"""The RLOO engine on the embedded defaults: parity with TRL, live metrics, stop, run folders, crashes, CLI.

``python -m pytest tests/test_engine.py`` (about a minute on 2 cores).
"""

import json
import os
import statistics
import threading
from collections import defaultdict

import pytest
import torch
from transformers import AutoModelForCausalLM

from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine.callbacks import MetricsChannel
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.training import RunState, TrainingJob, build_trainer, train
from rloo_demo.eval.evaluation import heldout_prompts
from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import sample
from rloo_demo.store.folder import RunFolder, open_run
from rloo_demo.store.listing import list_runs
from rloo_demo.task import rewards as rewards_module

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

    monkeypatch.setitem(rewards_module.REWARDS, "exploding_reward", lambda: exploding_reward)
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
