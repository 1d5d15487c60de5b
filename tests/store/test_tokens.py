"""Token by token, the engine side: the per-token record of every completion agrees with the numbers
TRL used, the update's effect is measured under the right weights, the record can be turned off, snapshots are
saved every N steps (atomically, thinned to a cap), and the probe samples them through the sampling gate.

``python -m pytest tests/store/test_tokens.py`` (a few minutes on 2 busy cores: four tiny trainings).
"""

import json
import threading
import time
from collections import defaultdict
from dataclasses import replace

import pytest
import torch

from rloo_demo.config import RunConfig
from rloo_demo.engine import snapshots
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.training import RunState, build_trainer, train
from rloo_demo.errors import RateLimited
from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import sample
from rloo_demo.public.gates import Caller
from rloo_demo.public.limits import LOCAL
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.tokens import TOKEN_KEYS, round_keeping_sum
from rloo_demo.ui.controller import Controller

TINY = {"prompts_per_step": 2, "num_generations": 4, "max_new_tokens": 8}
VISITOR = Caller("visitor", "10.0.0.9")


class LossInputRecorder(CapturingRLOOTrainer):
    """Keeps, per step, the batch as generated (padded as TRL padded it) with the records the capture made, and what
    reached TRL's loss."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        rows = [c for g in self.last_rollouts for c in g["completions"]]
        batch = {k: out[k].detach().clone() for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
        self.captured.append((self.last_rollouts[0]["step"], batch, rows))
        return out

    def _compute_loss(self, model, inputs):
        self.loss_batches.append((inputs["completion_ids"].detach().clone(), inputs["old_logps"].detach().clone()))
        return super()._compute_loss(model, inputs)


@torch.no_grad()
def sequence_logps(model, batch) -> list[float]:
    """Σ log p(completion token) per row, written out here with a plain forward and log_softmax on the batch as TRL
    padded it (the left padding of the prompts shifts GPT-2's positions, so an unpadded recomputation differs)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    n = batch["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -n - 1 : -1].float()
    per_token = logits.log_softmax(-1).gather(-1, batch["completion_ids"][..., None]).squeeze(-1)
    return (per_token * batch["completion_mask"]).sum(-1).tolist()


def recorded_run(root, recorder=None, release=None, **settings):
    config = RunConfig(output_dir=str(root), **(TINY | settings))
    state = RunState(config)
    state.run = RunFolder.create(config)
    trainer = build_trainer(config, state, trainer_cls=recorder or LossInputRecorder)
    trainer.loss_batches, trainer.captured = [], []
    trainer.release, trainer.released, trainer.after_threads = release, [], []
    trainer.train()
    trainer._finish_step()  # nothing pending after the last step: a no-op, checked below
    return trainer, state


@pytest.fixture(scope="module")
def kl_run(tmp_path_factory):
    """Two steps with beta > 0 and a snapshot after every step."""
    return recorded_run(tmp_path_factory.mktemp("runs"), max_steps=2, beta=0.1, snapshot_every=1)


def completions(run: RunFolder) -> list[tuple[int, dict]]:
    return [(g["step"], c) for g in run.rollouts() for c in g["completions"]]


# ----------------------------------------------------------------------------- the record


def test_every_list_has_one_entry_per_completion_token(kl_run):
    _, state = kl_run
    rows = completions(state.run)
    assert len(rows) == 2 * 2 * 4
    for _, c in rows:
        for key in TOKEN_KEYS:
            assert len(c[key]) == c["num_tokens"], key
        assert all(isinstance(t, str) for t in c["token_texts"])
        assert "".join(c["token_texts"]).replace("<|endoftext|>", "") == c["text"]  # the pieces make the text
        assert all(v >= 0 for v in c["token_entropy"])


def test_the_sums_agree_with_the_completions_own_figures(kl_run):
    """Σ(log π_old − log π_ref) is the completion's kl, as TRL put it into the shaped reward, after rounding."""
    _, state = kl_run
    nonzero = 0
    for _, c in completions(state.run):
        kl = sum(c["token_logp"]) - sum(c["token_ref_logp"])
        assert kl == pytest.approx(c["kl"], abs=1e-3)
        nonzero += abs(c["kl"]) > 0.01
    assert nonzero > 0  # step 2's policy has moved from the reference: the check is not 0 == 0


def test_token_logps_are_the_ones_trl_used(kl_run):
    """Σ token_logp is TRL's old_logps of the same completion (what its importance ratio divides by)."""
    trainer, _ = kl_run
    assert len(trainer.captured) == len(trainer.loss_batches) == 2
    for (_, batch, rows), (loss_ids, old_logps) in zip(trainer.captured, trainer.loss_batches, strict=True):
        assert len(rows) == len(loss_ids) == 2 * 4  # 2 prompts x K=4
        ours = defaultdict(list)
        for row_ids, c in zip(batch["completion_ids"].tolist(), rows, strict=True):
            ours[tuple(row_ids)].append(sum(c["token_logp"]))
        theirs = defaultdict(list)
        for row_ids, value in zip(loss_ids.tolist(), old_logps.tolist(), strict=True):
            theirs[tuple(row_ids)].append(value)
        assert ours.keys() == theirs.keys()
        for key, values in theirs.items():
            assert sorted(ours[key]) == pytest.approx(sorted(values), abs=1e-3)


def test_entropy_is_the_one_trl_logged(kl_run):
    """The token-weighted mean of token_entropy over a step is TRL's logged entropy of that step."""
    _, state = kl_run
    by_step = defaultdict(list)
    for step, c in completions(state.run):
        by_step[step] += c["token_entropy"]
    metrics = state.run.metrics()
    assert [r["step"] for r in metrics] == [1, 2]
    for record in metrics:
        values = by_step[record["step"]]
        assert sum(values) / len(values) == pytest.approx(record["entropy"], abs=1e-3)


def test_after_is_the_policy_right_after_the_steps_update(kl_run):
    """Recomputed independently: Σ token_logp under the snapshot saved at the end of step s-1 (the base for s=1),
    Σ token_logp_after under the snapshot saved at the end of step s."""
    assert_after_is_right_after_the_update(*kl_run)


def assert_after_is_right_after_the_update(trainer, state):
    policy = state.config.policy
    saved = dict(snapshots.list_snapshots(state.run.path))
    models = {0: load_policy(policy)[0]} | {s: snapshots.load_snapshot(saved[s], policy) for s in (1, 2)}
    checked = 0
    for step, batch, rows in trainer.captured:
        before, after = sequence_logps(models[step - 1], batch), sequence_logps(models[step], batch)
        for c, b, a in zip(rows, before, after, strict=True):
            assert sum(c["token_logp"]) == pytest.approx(b, abs=1e-3)
            assert sum(c["token_logp_after"]) == pytest.approx(a, abs=1e-3)
            assert abs(a - b) > 1e-3  # the update moved it: before and after are not the same number twice
            checked += 1
    assert checked == 16


class SlowAfter(LossInputRecorder):
    """Its "after" pass waits until something else happens (the next step starts generating, or the training thread
    waits for the pass), then lingers: an update that did not wait for it would change the weights under it."""

    def _generate(self, *args, **kwargs):
        self.released_by = "the next step's generation"
        self.release.set()
        return super()._generate(*args, **kwargs)

    def _await_after(self, raise_errors=True):
        if not self.release.is_set():
            self.released_by = "the training thread waiting for it"
            self.release.set()
        super()._await_after(raise_errors)
        self.release.clear()  # for the next step's pass

    def _record_after(self, pending):
        self.after_threads.append(threading.current_thread())
        if not self.release.wait(timeout=10):  # run in the training thread, nothing can release it: give up
            self.released_by = "a timeout"
        self.released.append(self.released_by)
        time.sleep(0.5)
        super()._record_after(pending)


def test_the_after_pass_runs_beside_the_next_step_and_the_update_waits_for_it(tmp_path):
    """The token record's extra forward runs on a worker thread while the next step generates, and the next update
    waits for it: its values are still those of the weights right after the step's own update."""
    trainer, state = recorded_run(
        tmp_path, max_steps=2, beta=0.1, snapshot_every=1, recorder=SlowAfter, release=threading.Event()
    )
    assert len(trainer.after_threads) == 2
    assert threading.current_thread() not in trainer.after_threads  # the training ran in this thread
    assert trainer.released == ["the next step's generation", "the training thread waiting for it"]
    assert_after_is_right_after_the_update(trainer, state)
    assert state.rollout_steps == [1, 2]


def test_an_error_in_the_after_pass_fails_the_run(tmp_path):
    class Failing(LossInputRecorder):
        def _record_after(self, pending):
            raise ValueError("the after pass broke")

    with pytest.raises(ValueError, match="the after pass broke"):  # raised in the training thread, as it was
        recorded_run(tmp_path, max_steps=2, snapshot_every=0, recorder=Failing)


def test_rollouts_of_a_step_are_written_with_its_update(kl_run):
    """The write moved to the step boundary: every line on disk has its 'after' list, and the live state too."""
    trainer, state = kl_run
    assert trainer._pending is None
    assert state.rollout_steps == [1, 2]
    for step in (1, 2):
        assert len(state.rollouts[step]) == 2 and all(len(g["completions"]) == 4 for g in state.rollouts[step])
        assert all("token_logp_after" in c for g in state.rollouts[step] for c in g["completions"])
    lines = (state.run.path / "rollouts.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 1, 2, 2]


def test_without_beta_there_is_no_reference_list(tmp_path):
    _, state = recorded_run(tmp_path, max_steps=1, beta=0.0, snapshot_every=0)
    assert len(completions(state.run)) == 2 * 4  # 1 step, 2 prompts x K=4
    for _, c in completions(state.run):
        assert "token_ref_logp" not in c
        assert {"token_texts", "token_logp", "token_entropy", "token_logp_after"} <= set(c)
        assert c["kl"] == 0.0


def test_record_tokens_off_writes_no_token_lists(tmp_path):
    config = RunConfig(output_dir=str(tmp_path), max_steps=1, record_tokens=False, snapshot_every=0, **TINY)
    state = train(config)
    assert state.status == "finished", state.error
    rows = completions(state.run)
    assert rows
    for _, c in rows:
        assert not set(TOKEN_KEYS) & set(c)
    assert not (state.run.path / "snapshots").exists()


def test_a_large_learning_rate_raises_what_had_a_positive_advantage(tmp_path):
    """One step at 4x the default learning rate (seed 1, 4 prompts x 4 completions). The criterion: every
    completion with an advantage above 0.25 gains log-probability in total (Σ Δ log π > 0), and the
    advantage-weighted sum Σ A·Σ Δ log π over the batch is positive (what the surrogate raises, to first order).
    Completions with a small advantage are left out: the pull of their siblings on the shared weights can outweigh
    their own. In this very batch, one at A = +0.13 that opens with the same word as two siblings at A = -0.24
    lost 12 nats in total."""
    config = RunConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        learning_rate=2e-3,
        seed=1,
        snapshot_every=0,
        **(TINY | {"prompts_per_step": 4}),
    )
    state = train(config)
    assert state.status == "finished", state.error
    pushed, weighted = [], 0.0
    for _, c in completions(state.run):
        gain = sum(a - b for a, b in zip(c["token_logp_after"], c["token_logp"], strict=True))
        weighted += c["advantage"] * gain
        if c["advantage"] > 0.25:
            pushed.append(gain)
    assert len(pushed) >= 3, "too few clearly positive advantages for the check to mean anything"
    assert all(g > 0 for g in pushed), pushed
    assert weighted > 0


def test_rounding_keeps_every_prefix_sum():
    values = [0.123456, -1.987654, 3.000049, -0.00005, 2.5e-5] * 20
    rounded = round_keeping_sum(values)
    for n in range(1, len(values) + 1):
        assert sum(rounded[:n]) == pytest.approx(round(sum(values[:n]), 4), abs=1e-9)
    assert all(abs(r - v) <= 1e-4 + 1e-12 for r, v in zip(rounded, values, strict=True))
    assert all(len(repr(r).split(".")[-1]) <= 4 for r in rounded)  # 4 decimals in the file, no float noise
    assert round_keeping_sum([1.0, float("nan"), float("-inf"), 2.0]) == [1.0, None, None, 2.0]


# ----------------------------------------------------------------------------- snapshots


def test_snapshots_are_saved_every_n_steps(kl_run):
    trainer, state = kl_run
    assert [s for s, _ in snapshots.list_snapshots(state.run.path)] == [1, 2]
    assert not [p for p in (state.run.path / "snapshots").iterdir() if p.name.startswith(".")]
    model = snapshots.load_snapshot(state.run.path / "snapshots" / "step-000002", state.config.policy)
    final = trainer.accelerator.unwrap_model(trainer.model).state_dict()
    assert len(model.state_dict()) > 0
    for name, weights in model.state_dict().items():
        assert torch.equal(weights, final[name]), name  # the last snapshot is the policy as training left it


def test_snapshot_cap_keeps_them_evenly_spread_over_the_run(tmp_path):
    model, _ = load_policy(RunConfig().policy)
    saved = []

    def policy():
        saved.append(step)
        return model

    for step in range(1, 151):  # a snapshot every 10 steps, at most 4 kept
        snapshots.keep_history(tmp_path, policy, step, every=10, keep=4)
        assert len(snapshots.list_snapshots(tmp_path)) <= 4
    kept = [s for s, _ in snapshots.list_snapshots(tmp_path)]
    assert kept == [40, 80, 120]  # every 40 steps: the spacing doubled twice, and the whole run is covered
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == [f"step-{s:06d}" for s in kept]
    assert saved == [10, 20, 30, 40, 60, 80, 120]  # off-spacing steps are not written at all
    assert [snapshots.spacing(s, 25) for s in (25, 200, 225, 400, 450)] == [25, 25, 50, 50, 100]
    assert snapshots.steps_to_drop([25, 50, 75, 100], 50) == [25, 75]


def test_a_snapshot_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    model, _ = load_policy(RunConfig().policy)

    def torn(folder, **kwargs):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        raise OSError("disk full")

    monkeypatch.setattr(model, "save_pretrained", torn)
    with pytest.raises(OSError):
        snapshots.save_snapshot(tmp_path, model, 25)
    assert list((tmp_path / "snapshots").iterdir()) == []  # neither the snapshot nor its temporary folder
    assert snapshots.list_snapshots(tmp_path) == []


# ----------------------------------------------------------------------------- the probe


@pytest.fixture
def probe_controller(kl_run):
    _, state = kl_run
    limits = replace(LOCAL, sampling_per_minute=1)
    controller = Controller(Runner(str(state.run.path.parent), limits=limits, watchdog=False))
    yield controller, state.run.name, state.config
    controller.close()


def test_probe_samples_every_snapshot_with_the_same_seed(probe_controller):
    controller, name, config = probe_controller
    out = controller.probe(name, "This movie was", 3, 7, VISITOR)
    assert [s["step"] for s in out["steps"]] == [0, 1, 2]  # base, snapshots; the final model is step 2's snapshot
    assert all(len(s["samples"]) == 3 for s in out["steps"])
    base, tok = load_policy(config.policy)
    kept = snapshots.list_snapshots(controller.runner.run(name).path)
    assert [step for step, _ in kept] == [1, 2]
    models = [base] + [snapshots.load_snapshot(folder, config.policy) for _, folder in kept]
    columns = []
    for column, model in zip(out["steps"], models, strict=True):  # every policy, each its own, with the same seed
        expected = sample(model, tok, "This movie was", 3, config.max_new_tokens, config.temperature, config.top_p, 7)
        columns.append([e["text"] for e in expected])
        assert [s["text"] for s in column["samples"]] == columns[-1], column["label"]
    assert len({tuple(c) for c in columns}) == 3  # the three policies sample differently: a column loaded from the
    # wrong snapshot (every column the last one, say) cannot pass
    assert out["seed"] == 7 and out["num_samples"] == 3 and out["snapshot_every"] == 1
    for s in out["steps"]:
        assert s["mean_reward"] == pytest.approx(sum(x["reward"] for x in s["samples"]) / 3)


def test_probe_goes_through_the_sampling_gate(probe_controller):
    controller, name, _ = probe_controller
    controller.probe(name, "A film", 1, 0, VISITOR)
    with pytest.raises(RateLimited):
        controller.probe(name, "A film", 1, 0, VISITOR)  # one sampling job a minute for this visitor
    controller.probe(name, "A film", 1, 0, Caller("someone-else", "10.0.0.10"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("RUN", "", 2, 0), "pick a held-out prompt"),
        (("RUN", None, 2, 0), "must be a text"),
        (("RUN", "x" * 5000, 2, 0), "at most 4000"),
        (("RUN", "A film", 0, 0), "between 1 and 32"),
        (("RUN", "A film", True, 0), "whole number"),
        (("RUN", "A film", 2, -1), "seed must be between 0"),
        (("..", "A film", 2, 0), "no such run"),
        ((None, "A film", 2, 0), "pick a run"),
    ],
)
def test_probe_refuses_bad_requests_before_sampling(probe_controller, args, needle):
    controller, name, _ = probe_controller
    args = tuple(name if a == "RUN" else a for a in args)
    with pytest.raises(Exception) as info:
        controller.probe(*args, VISITOR)
    assert needle in str(info.value)
    controller.probe(name, "A film", 1, 0, VISITOR)  # and a refusal cost the visitor none of its rate
