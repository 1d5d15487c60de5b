"""What the capturing trainer records for each completion, checked against the inputs it was given.

``python -m pytest tests/engine/test_capture.py`` (about 30 s: two short training steps, the rest is arithmetic).

The first tests feed ``CapturingRLOOTrainer`` hand-made tensors, standing in for TRL's, and check every recorded
number against arithmetic written out here. The last ones train two real steps with a probe reward that hashes
(prompt, completion): a completion text or a group prompt recorded against the wrong row then scores differently.
"""

import hashlib
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl import RLOOTrainer

from rloo_demo.advantages import NORMALIZE_EPS, normalize
from rloo_demo.chat import completion_text
from rloo_demo.config import RunConfig
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.training import RunState, build_trainer
from rloo_demo.task import rewards as rewards_module
from rloo_demo.task.rewards import length_penalty

# --- hand-made batches --------------------------------------------------------------------------------------------

K = 3
PROMPTS = ["first prompt"] * K + ["second prompt"] * K
TEXTS = [f"completion {i}" for i in range(2 * K)]
RAW = [[0.5, -1.0], [0.1, 0.0], [-0.3, -0.5], [0.9, -0.25], [0.0, -1.0], [0.2, float("nan")]]  # NaN: no score
WEIGHTS = [1.0, 0.5]
MASK = [[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]


class OneProcess:
    num_processes = 1
    is_main_process = True

    @staticmethod
    def gather(tensor):
        return tensor


def fake_trainer(beta=0.2, normalize_advantages=False, clip=None, global_step=6):
    trainer = CapturingRLOOTrainer.__new__(CapturingRLOOTrainer)  # no model, no TRL set-up: only what _record reads
    trainer.accelerator = OneProcess()
    trainer.beta = beta
    trainer.normalize_advantages = normalize_advantages
    trainer.reward_clip_range = clip
    trainer.reward_weights = torch.tensor(WEIGHTS)
    trainer.reward_func_names = ["probe", "length_penalty"]
    trainer.num_generations = K
    trainer.state = SimpleNamespace(global_step=global_step)
    trainer.sinks = []
    trainer.rollout_sink = lambda step, groups: trainer.sinks.append((step, groups))
    trainer.last_rollouts, trainer.last_completion_ids = [], None
    trainer.record_tokens = False  # the per-token lists have their own tests (tests/store/test_tokens.py)
    trainer._pending = None
    trainer.batch_observers = []
    trainer.reuse_policy_forward = False  # TRL's own scoring calls (rloo_demo.fast.fast_step has its own tests)
    trainer._scoring_calls = trainer._kept = None
    trainer._metrics = {"train": defaultdict(list)}
    return trainer


def with_prompts(output: dict) -> dict:
    """A scored batch as TRL returns it: the step boundary also keeps its prompt ids and mask."""
    rows = output["completion_mask"].size(0)
    return output | {"prompt_ids": torch.zeros(rows, 2, dtype=torch.long), "prompt_mask": torch.ones(rows, 2)}


def expected_rows(beta, clip=None):
    """Every recorded number of the hand-made batch, computed here in plain Python."""
    gen = torch.Generator().manual_seed(0)
    policy, ref = torch.randn(6, 4, generator=gen), torch.randn(6, 4, generator=gen)
    kl = [sum(float(policy[i, t] - ref[i, t]) for t in range(4) if MASK[i][t]) for i in range(6)]
    weighted = [sum(w * s for w, s in zip(WEIGHTS, row, strict=True) if s == s) for row in RAW]  # NaN skipped
    if clip:
        weighted = [min(max(w, clip[0]), clip[1]) for w in weighted]
    shaped = [w - beta * k for w, k in zip(weighted, kl, strict=True)]
    baseline = [(sum(shaped[g * K : (g + 1) * K]) - shaped[i]) / (K - 1) for i in range(6) for g in [i // K]]
    raw_adv = [s - b for s, b in zip(shaped, baseline, strict=True)]
    return policy, ref, kl, weighted, shaped, baseline, raw_adv


def record(trainer, policy, ref, advantages, boundary=True):
    """The hand-made batch recorded; ``boundary``: then the step boundary, which hands the groups to the sink (and,
    with the tokens recorded, starts the after pass, which needs a model)."""
    trainer._record(
        {"rewards_per_func": torch.tensor(RAW), "prompts": PROMPTS, "completions": TEXTS, "logps": [policy, ref]},
        {
            "completion_mask": torch.tensor(MASK),
            "advantages": torch.tensor(advantages),
            "completion_ids": torch.arange(24).view(6, 4),
            "prompt_ids": torch.zeros(6, 2, dtype=torch.long),
            "prompt_mask": torch.ones(6, 2, dtype=torch.long),
        },
    )
    if boundary:
        trainer._finish_step()  # the step boundary: the step's groups go to the sink once the update is done
    return trainer.last_rollouts


def test_record_every_number_of_every_row():
    trainer = fake_trainer(beta=0.2)
    policy, ref, kl, weighted, shaped, baseline, raw_adv = expected_rows(0.2)
    groups = record(trainer, policy, ref, raw_adv)
    assert trainer.sinks == [(7, groups)]  # the step being optimised: global_step + 1
    assert torch.equal(trainer.last_completion_ids, torch.arange(24).view(6, 4))
    assert [g["prompt"] for g in groups] == ["first prompt", "second prompt"]
    for g, group in enumerate(groups):
        assert {k: v for k, v in group.items() if k != "completions"} == {
            "step": 7,
            "group": g,
            "prompt": PROMPTS[g * K],
            "k": K,
            "beta": 0.2,
            "normalize_advantages": False,
            "weights": {"probe": 1.0, "length_penalty": 0.5},
            "baseline_kind": "leave-one-out",
            "parity_error": pytest.approx(0.0, abs=1e-6),
        }
        for j, row in enumerate(group["completions"]):
            i = g * K + j
            assert row["text"] == TEXTS[i]
            assert row["num_tokens"] == sum(MASK[i])
            assert row["scores"]["probe"] == pytest.approx(RAW[i][0])
            assert row["scores"]["length_penalty"] == pytest.approx(RAW[i][1], nan_ok=True)
            assert row["weighted_reward"] == pytest.approx(weighted[i])
            assert row["kl"] == pytest.approx(kl[i], abs=1e-5)
            assert row["kl_penalty"] == pytest.approx(-0.2 * kl[i], abs=1e-5)
            assert row["shaped_reward"] == pytest.approx(shaped[i], abs=1e-5)
            assert row["shaped_reward"] == pytest.approx(row["weighted_reward"] + row["kl_penalty"], abs=1e-6)
            assert row["baseline"] == pytest.approx(baseline[i], abs=1e-5)
            assert row["raw_advantage"] == pytest.approx(raw_adv[i], abs=1e-5)
            assert row["advantage"] == pytest.approx(raw_adv[i], abs=1e-6)
    assert any(abs(r["kl"]) > 0.5 for g in groups for r in g["completions"])  # so a sign error shows


def test_record_adds_k2_k3_the_rank_the_offset_the_tokens_and_logs_the_step_metrics():
    """Beyond test_record_every_number_of_every_row: each row's k2 and k3 by hand, its process (0: one process), the
    offset added to every scorable reward (it cancels in the advantage), the per-token lists when recorded, and the
    step's metrics logged for TRL: the batch means of k1..k3 and the seconds the diagnostics took."""
    import math
    import time

    trainer = fake_trainer(beta=0.2)
    trainer.reward_offset = 0.25
    trainer.record_tokens, trainer.processing_class = True, _Pieces()
    policy, ref, kl, weighted, shaped, _, raw_adv = expected_rows(0.2)
    before = time.perf_counter()
    rows = [r for g in record(trainer, policy, ref, raw_adv, boundary=False) for r in g["completions"]]
    elapsed = time.perf_counter() - before
    d = [[float(policy[i, t] - ref[i, t]) for t in range(4) if MASK[i][t]] for i in range(6)]
    k2 = [sum(0.5 * x * x for x in row) for row in d]
    k3 = [sum(math.exp(-x) - 1 + x for x in row) for row in d]
    assert [r["kl_k2"] for r in rows] == pytest.approx(k2, abs=1e-5)
    assert [r["kl_k3"] for r in rows] == pytest.approx(k3, abs=1e-5)
    assert max(abs(a - b) for a, b in zip(k2, k3, strict=True)) > 0.05  # so k2 and k3 swapped would show
    assert [r["rank"] for r in rows] == [0] * 6 and all(type(r["rank"]) is int for r in rows)
    assert [r["weighted_reward"] for r in rows] == pytest.approx([w + 0.25 for w in weighted])
    assert [r["shaped_reward"] for r in rows] == pytest.approx([s + 0.25 for s in shaped], abs=1e-5)
    assert [r["raw_advantage"] for r in rows] == pytest.approx(raw_adv, abs=1e-5)
    ids = torch.arange(24).view(6, 4)
    assert [r["token_texts"] for r in rows] == [
        [f"<{int(ids[i, t])}>" for t in range(4) if MASK[i][t]] for i in range(6)
    ]
    metrics = trainer._metrics["train"]
    assert metrics["kl_k1"] == pytest.approx([sum(kl) / 6], abs=1e-5)
    assert metrics["kl_k2"] == pytest.approx([sum(k2) / 6], abs=1e-5)
    assert metrics["kl_k3"] == pytest.approx([sum(k3) / 6], abs=1e-5)
    (seconds,) = metrics["diagnostics/seconds"]
    assert 0.0 <= seconds <= elapsed


def test_record_reports_a_gap_to_trl_advantages():
    trainer = fake_trainer(beta=0.2)
    policy, ref, *_, raw_adv = expected_rows(0.2)
    off = list(raw_adv)
    off[4] += 0.25  # TRL's tensor disagrees with our arithmetic on one completion of the second group
    groups = record(trainer, policy, ref, off)
    assert groups[0]["parity_error"] == pytest.approx(0.0, abs=1e-6)
    assert groups[1]["parity_error"] == pytest.approx(0.25, abs=1e-5)
    assert groups[1]["completions"][1]["advantage"] == pytest.approx(off[4])  # TRL's number is what is recorded


def test_record_normalized_advantages_and_their_statistics():
    trainer = fake_trainer(beta=0.2, normalize_advantages=True)
    policy, ref, *_, raw_adv = expected_rows(0.2)
    groups = record(trainer, policy, ref, normalize(raw_adv))
    mean = sum(raw_adv) / 6
    std = (sum((r - mean) ** 2 for r in raw_adv) / 5) ** 0.5
    for group in groups:
        assert group["normalize_advantages"] is True
        assert group["parity_error"] == pytest.approx(0.0, abs=1e-5)
        assert group["normalization"] == {
            "mean": pytest.approx(mean, abs=1e-6),
            "std": pytest.approx(std, abs=1e-6),
            "eps": NORMALIZE_EPS,
        }
    rows = [r for g in groups for r in g["completions"]]
    assert [r["advantage"] for r in rows] == pytest.approx([(a - mean) / (std + NORMALIZE_EPS) for a in raw_adv])
    assert [r["raw_advantage"] for r in rows] == pytest.approx(raw_adv, abs=1e-5)


def test_record_without_kl_and_with_clipping():
    trainer = fake_trainer(beta=0.0, clip=(-0.5, 0.6))
    _, _, _, weighted, shaped, _, raw_adv = expected_rows(0.0, clip=(-0.5, 0.6))
    trainer._record(  # with beta = 0 TRL computes no reference log-probabilities
        {"rewards_per_func": torch.tensor(RAW), "prompts": PROMPTS, "completions": TEXTS, "logps": []},
        with_prompts(
            {
                "completion_mask": torch.tensor(MASK),
                "advantages": torch.tensor(raw_adv),
                "completion_ids": torch.zeros(6),
            }
        ),
    )
    rows = [r for g in trainer.last_rollouts for r in g["completions"]]
    assert [r["kl"] for r in rows] == [0.0] * 6 and [r["kl_penalty"] for r in rows] == [0.0] * 6
    assert [r["weighted_reward"] for r in rows] == pytest.approx(weighted)
    assert max(r["weighted_reward"] for r in rows) == pytest.approx(0.6)  # 0.9 - 0.125 was clipped
    assert min(r["weighted_reward"] for r in rows) == pytest.approx(-0.5)  # and -0.3 - 0.25
    assert [r["shaped_reward"] for r in rows] == pytest.approx(shaped)
    assert "normalization" not in trainer.last_rollouts[0]


def test_record_normalizes_a_batch_of_one_pair():
    """The smallest batch RLOO allows, one prompt and K = 2, normalised with the sample standard deviation."""
    trainer = fake_trainer(beta=0.0, normalize_advantages=True)
    trainer.num_generations = 2
    trainer.reward_func_names, trainer.reward_weights = ["probe"], torch.tensor([1.0])
    raw_adv = [0.5 - 0.1, 0.1 - 0.5]
    trainer._record(
        {"rewards_per_func": torch.tensor([[0.5], [0.1]]), "prompts": ["p", "p"], "completions": ["a", "b"]},
        with_prompts(
            {
                "completion_mask": torch.ones(2, 3),
                "advantages": torch.tensor(normalize(raw_adv)),
                "completion_ids": torch.zeros(2, 3),
            }
        ),
    )
    (group,) = trainer.last_rollouts
    std = (2 * 0.4**2) ** 0.5  # mean 0, n - 1 = 1
    assert group["normalization"] == {"mean": pytest.approx(0.0), "std": pytest.approx(std), "eps": NORMALIZE_EPS}
    assert group["parity_error"] == pytest.approx(0.0, abs=1e-6)


def test_record_gathers_the_texts_of_every_process_in_the_tensors_order(monkeypatch):
    """Two processes, played by stand-ins for accelerate: each holds one prompt group; the tensors and the texts are
    gathered, and a row's text stays with its numbers."""
    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, "gather_object", lambda items: list(items) + [f"other {x}" for x in items])
    trainer = fake_trainer(beta=0.2)
    trainer.accelerator = SimpleNamespace(num_processes=2, is_main_process=True, gather=lambda t: torch.cat([t, t]))
    policy, ref, kl, *_ = expected_rows(0.2)
    trainer._record(  # the local half of the batch; TRL's raw rewards are already gathered
        {
            "rewards_per_func": torch.tensor(RAW),
            "prompts": PROMPTS[:K],
            "completions": TEXTS[:K],
            "logps": [policy[:K], ref[:K]],
        },
        with_prompts(
            {
                "completion_mask": torch.tensor(MASK[:K]),
                "advantages": torch.zeros(K),
                "completion_ids": torch.zeros(K, 4),
            }
        ),
    )
    first, second = trainer.last_rollouts
    assert (first["prompt"], second["prompt"]) == ("first prompt", "other first prompt")
    assert [c["text"] for c in second["completions"]] == [f"other {t}" for t in TEXTS[:K]]
    assert [c["kl"] for c in second["completions"]] == pytest.approx(kl[:K], abs=1e-5)  # the other process's rows
    assert [c["num_tokens"] for c in second["completions"]] == [sum(m) for m in MASK[:K]]
    assert [c["rank"] for g in (first, second) for c in g["completions"]] == [0] * K + [1] * K


def test_constructor_hands_everything_but_the_sink_to_trl(monkeypatch):
    got = {}
    monkeypatch.setattr(RLOOTrainer, "__init__", lambda self, *args, **kwargs: got.update(args=args, kwargs=kwargs))
    callbacks = []
    monkeypatch.setattr(RLOOTrainer, "add_callback", lambda self, callback: callbacks.append(callback))

    def sink(step, groups):
        pass

    trainer = CapturingRLOOTrainer("a model", args="its config", rollout_sink=sink)
    assert got == {"args": ("a model",), "kwargs": {"args": "its config"}}
    assert trainer.rollout_sink is sink
    assert (trainer._capture, trainer.last_rollouts, trainer.last_completion_ids) == (None, [], None)
    assert [type(c).__name__ for c in callbacks] == ["_StepBoundary"] and callbacks[0].trainer is trainer
    assert trainer.record_tokens is True and trainer.reward_offset == 0.0  # the token record is on by default
    assert trainer._pending is None and trainer.batch_observers == []  # nothing to deliver before a first step


def test_an_offset_adds_a_column_of_weight_one_beside_the_reward_functions_own(monkeypatch):
    def trl_init(self, *args, **kwargs):
        self.reward_weights = torch.tensor([0.5, 2.0], dtype=torch.float64)

    monkeypatch.setattr(RLOOTrainer, "__init__", trl_init)
    monkeypatch.setattr(RLOOTrainer, "add_callback", lambda self, callback: None)
    trainer = CapturingRLOOTrainer(reward_offset=3, record_tokens=False)
    assert trainer.reward_offset == 3.0 and type(trainer.reward_offset) is float and trainer.record_tokens is False
    assert trainer.reward_weights.tolist() == [0.5, 2.0, 1.0] and trainer.reward_weights.dtype == torch.float64
    assert CapturingRLOOTrainer().reward_weights.tolist() == [0.5, 2.0]  # no offset: no column


def test_record_on_another_process_keeps_the_rows_but_writes_nothing():
    trainer = fake_trainer()
    trainer.accelerator = SimpleNamespace(gather=OneProcess.gather, num_processes=1, is_main_process=False)
    policy, ref, *_, raw_adv = expected_rows(0.2)
    groups = record(trainer, policy, ref, raw_adv)
    assert len(groups) == 2 and trainer.sinks == []


def test_hooks_capture_what_trl_computes_while_scoring(monkeypatch):
    """The three hooks around TRL's methods, with TRL's methods replaced by a stand-in that plays their order."""
    policy, ref, *_, raw_adv = expected_rows(0.2)
    mask = torch.tensor(MASK)

    def fake_logps(self, model, *args, **kwargs):
        return (policy if model == "policy" else ref), None, None

    raw = torch.tensor(RAW)

    def fake_rewards(self, inputs, prompts, completions, completion_ids_list):
        return raw

    def fake_generate(self, inputs):
        with torch.no_grad():
            self._get_per_token_logps_and_entropies("policy", None, None, 4)
            self._get_per_token_logps_and_entropies("reference", None, None, 4)
        self._calculate_rewards(inputs, PROMPTS, [[{"content": t}] for t in TEXTS[:-1]] + [TEXTS[-1]], None)
        return with_prompts(
            {"completion_mask": mask, "advantages": torch.tensor(raw_adv), "completion_ids": torch.zeros(6, 4)}
        )

    monkeypatch.setattr(RLOOTrainer, "_get_per_token_logps_and_entropies", fake_logps)
    monkeypatch.setattr(RLOOTrainer, "_calculate_rewards", fake_rewards)
    monkeypatch.setattr(RLOOTrainer, "_generate_and_score_completions", fake_generate)
    trainer = fake_trainer(beta=0.2)
    trainer._capture = None
    trainer.model = torch.nn.Linear(1, 1).train()

    # outside a scoring pass nothing is captured, and log-probabilities with gradients (the loss's) never are
    # TRL's scores come back as they were, in float64: TRL's reward arithmetic then runs in it (the reward offset's
    # cancellation in the baseline, rloo_demo.engine.capture)
    scored = trainer._calculate_rewards(None, PROMPTS, TEXTS, None)
    assert scored.dtype == torch.float64 and torch.equal(scored.nan_to_num(9.0), raw.double().nan_to_num(9.0))
    assert trainer._get_per_token_logps_and_entropies("policy", None, None, 4)[0] is policy
    trainer._capture = {"logps": []}
    with torch.enable_grad():
        trainer._get_per_token_logps_and_entropies("policy", None, None, 4)
    assert trainer._capture == {"logps": []}
    trainer._capture = None

    out = trainer._generate_and_score_completions({})
    assert out["completion_mask"] is mask
    assert trainer._capture is None  # cleared after each pass
    rows = [r for g in trainer.last_rollouts for r in g["completions"]]
    assert [r["text"] for r in rows] == TEXTS  # a chat reply's messages are recorded as the reply's text
    assert [r["shaped_reward"] for r in rows] == pytest.approx(expected_rows(0.2)[4], abs=1e-5)
    assert [g["prompt"] for g in trainer.last_rollouts] == ["first prompt", "second prompt"]
    assert trainer.sinks == []  # the groups wait for the step's update ...
    trainer._finish_step()
    assert len(trainer.sinks) == 1  # ... and reach the sink at the step boundary

    trainer.model.eval()  # an evaluation pass is scored but not recorded
    trainer._generate_and_score_completions({})
    trainer._finish_step()
    assert len(trainer.sinks) == 1 and trainer._capture is None

    def failing_generate(self, inputs):
        raise RuntimeError("generation failed")

    monkeypatch.setattr(RLOOTrainer, "_generate_and_score_completions", failing_generate)
    trainer.model.train()
    with pytest.raises(RuntimeError, match="generation failed"):
        trainer._generate_and_score_completions({})
    assert trainer._capture is None  # a failed pass leaves no capture behind for the next one


def test_the_first_scoring_call_asks_for_entropies_only_when_tokens_are_recorded_and_not_passed_positionally(
    monkeypatch,
):
    """TRL's signature is (model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, ...): the
    entropies are asked for by keyword on the policy's first no-grad call with fewer than five positional arguments,
    and kept (in float32) only when the call returned them."""
    calls = []
    entropy = torch.full((6, 4), 0.75, dtype=torch.bfloat16)

    def fake_logps(self, model, *args, **kwargs):
        calls.append((model, len(args), kwargs.get("compute_entropy")))
        return torch.zeros(6, 4), (entropy if kwargs.get("compute_entropy") or model == "eager" else None), None

    monkeypatch.setattr(RLOOTrainer, "_get_per_token_logps_and_entropies", fake_logps)
    trainer = fake_trainer(beta=0.2)
    trainer.record_tokens = True

    def score(*models_args):
        trainer._capture = {"logps": []}
        calls.clear()
        with torch.no_grad():
            for model, *args in models_args:
                trainer._get_per_token_logps_and_entropies(model, *args)
        return trainer._capture

    cap = score(("policy", None, None, 4), ("reference", None, None, 4))
    assert calls == [("policy", 3, True), ("reference", 3, None)] and len(cap["logps"]) == 2
    assert cap["entropy"].dtype == torch.float32 and torch.equal(cap["entropy"], torch.full((6, 4), 0.75))
    assert score(("policy", None, None, 4, 2))["entropy"].shape == (6, 4) and calls == [("policy", 4, True)]
    cap = score(("policy", None, None, 4, 2, True))  # compute_entropy given positionally: not asked again
    assert calls == [("policy", 5, None)] and "entropy" not in cap
    trainer.record_tokens = False  # nothing to show them in: not asked, and not kept when a call returns them
    cap = score(("policy", None, None, 4), ("eager", None, None, 4))
    assert calls == [("policy", 3, None), ("eager", 3, None)] and "entropy" not in cap


def test_a_recorded_batch_goes_to_the_observers_whose_numbers_join_the_steps_metrics(monkeypatch):
    output = with_prompts(
        {
            "completion_mask": torch.tensor(MASK),
            "advantages": torch.zeros(6, dtype=torch.float64),
            "completion_ids": torch.zeros(6, 4),
        }
    )
    monkeypatch.setattr(RLOOTrainer, "_generate_and_score_completions", lambda self, inputs: output)
    trainer = fake_trainer(beta=0.2)
    trainer.model = torch.nn.Linear(1, 1).train()
    recorded, seen = [], []
    trainer._record = lambda cap, out: recorded.append((cap, out))
    trainer.batch_observers = [
        lambda tr, out: seen.append((tr, out)) or {"meter/variance": 2.5},
        lambda tr, out: None,  # an observer with nothing to log this step
    ]
    out = trainer._generate_and_score_completions({})
    assert out is output and out["advantages"].dtype == torch.float32  # the loss's dtype
    assert recorded == [({"logps": []}, output)]
    assert len(seen) == 1 and seen[0][0] is trainer and seen[0][1] is output
    assert dict(trainer._metrics["train"]) == {"meter/variance": [2.5]}


# --- two real training steps --------------------------------------------------------------------------------------


def probe_score(prompt: str, completion: str) -> float:
    """A number in [0, 1) that changes with any change of the prompt or of the completion."""
    return int.from_bytes(hashlib.sha1(f"{prompt}\x00{completion}".encode()).digest()[:4], "big") / 2**32


def train_two_steps(tmp_path, monkeypatch):
    """Two real RLOO steps whose first reward function is the probe; returns the trainer, its rollouts by step, and
    what TRL passed to the probe in each call: (prompts, texts, completion_ids)."""
    calls = []

    def prompt_completion_probe(prompts, completions, completion_ids=None, **columns):
        texts = [completion_text(c) for c in completions]
        calls.append((list(prompts), texts, completion_ids))
        return [probe_score(p, t) for p, t in zip(prompts, texts, strict=True)]

    monkeypatch.setitem(
        rewards_module.REWARDS,
        "prompt_completion_probe",
        rewards_module.BuiltinReward(lambda: prompt_completion_probe, "train.w_vader", "reward.help.vader_compound"),
    )
    config = RunConfig(
        max_steps=2,
        prompts_per_step=3,
        num_generations=3,
        max_new_tokens=8,
        beta=0.1,
        learning_rate=5e-3,
        rewards=["prompt_completion_probe", "length_penalty"],
        reward_weights=[1.0, 0.5],
        output_dir=str(tmp_path),
    )
    state = RunState(config)
    trainer = build_trainer(config, state)
    assert (trainer._capture, trainer.last_rollouts, trainer.last_completion_ids) == (None, [], None)
    trainer.train()
    return trainer, state.rollouts, calls


def test_two_real_steps_record_what_trl_scored(tmp_path, monkeypatch):
    """One test rather than five on a shared fixture, so that the training runs in the test itself: mutmut orders
    tests by their own duration, and the fast tests above then run first (see scripts/mutation.sh)."""
    trainer, rollouts, calls = train_two_steps(tmp_path, monkeypatch)
    check_every_step_and_group_is_recorded(rollouts, calls)
    check_each_text_rescored_gives_its_recorded_score(rollouts)
    check_each_group_prompt_is_the_prompt_its_completions_were_scored_with(rollouts, calls)
    check_texts_are_the_decoded_completion_tokens(trainer, rollouts, calls)
    check_kl_penalty_is_minus_beta_times_kl(rollouts)


def check_every_step_and_group_is_recorded(rollouts, calls):
    assert sorted(rollouts) == [1, 2] and len(calls) == 2  # one scored batch per step
    for step, groups in rollouts.items():
        assert [(g["step"], g["group"], len(g["completions"])) for g in groups] == [(step, i, 3) for i in range(3)]
        assert len({g["prompt"] for g in groups}) == 3  # distinct prompts, so a shifted prompt would show


def check_each_text_rescored_gives_its_recorded_score(rollouts):
    for groups in rollouts.values():
        for g in groups:
            texts = [c["text"] for c in g["completions"]]
            assert len(set(texts)) > 1  # so a text taken from a sibling row would show
            for c in g["completions"]:
                assert c["scores"]["prompt_completion_probe"] == pytest.approx(probe_score(g["prompt"], c["text"]))
                assert c["scores"]["length_penalty"] == pytest.approx(length_penalty(None, [c["text"]])[0])


def check_each_group_prompt_is_the_prompt_its_completions_were_scored_with(rollouts, calls):
    for (prompts, texts, _), step in zip(calls, sorted(rollouts), strict=True):
        for g in rollouts[step]:
            rows = range(g["group"] * 3, g["group"] * 3 + 3)
            assert {prompts[i] for i in rows} == {g["prompt"]}
            assert [texts[i] for i in rows] == [c["text"] for c in g["completions"]]


def check_texts_are_the_decoded_completion_tokens(trainer, rollouts, calls):
    tok = trainer.processing_class
    rows = [c for g in rollouts[2] for c in g["completions"]]
    ids = trainer.last_completion_ids.tolist()
    assert [tok.decode(row, skip_special_tokens=True) for row in ids] == [c["text"] for c in rows]
    _, texts, completion_ids = calls[-1]  # the reward functions were given the same tokens
    assert [tok.decode(row, skip_special_tokens=True) for row in completion_ids] == texts
    assert [c["num_tokens"] for c in rows] == [len([t for t in row if t != tok.pad_token_id]) for row in ids]


def check_kl_penalty_is_minus_beta_times_kl(rollouts):
    rows = [c for groups in rollouts.values() for g in groups for c in g["completions"]]
    assert any(abs(c["kl"]) > 1e-3 for c in rows)  # the policy moved after step 1, so the sign is visible
    for c in rows:
        assert c["kl_penalty"] == pytest.approx(-0.1 * c["kl"], abs=1e-7)
        assert c["shaped_reward"] == pytest.approx(c["weighted_reward"] + c["kl_penalty"], abs=1e-5)


# --- the per-token lists, the step boundary and the end of training, on stand-ins ----------------------------------


class _Pieces:
    """A tokenizer whose piece for token id n is "<n>"."""

    def batch_decode(self, rows, skip_special_tokens, clean_up_tokenization_spaces):
        assert (skip_special_tokens, clean_up_tokenization_spaces) == (False, False)  # every piece as it is
        return [f"<{row[0]}>" for row in rows]


@pytest.mark.parametrize("beta", [0.0, 0.25])
def test_the_token_lists_keep_the_masked_tokens_of_each_row_with_their_own_measures(beta):
    trainer = fake_trainer(beta=beta)
    trainer.processing_class = _Pieces()
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    ids = torch.tensor([[7, 8, 0], [9, 0, 0]])
    policy = torch.tensor([[-0.5, -1.25, -9.0], [-0.75, -9.0, -9.0]])
    ref = torch.tensor([[-0.25, -2.0, -9.0], [-1.5, -9.0, -9.0]])
    entropy = torch.tensor([[1.5, 0.5, 9.0], [2.0, 9.0, 9.0]])
    cap = {"logps": [policy, ref], "entropy": entropy}
    rows = trainer._token_lists(cap, {"completion_mask": mask, "completion_ids": ids})
    first = {"token_texts": ["<7>", "<8>"], "token_logp": [-0.5, -1.25], "token_entropy": [1.5, 0.5]}
    second = {"token_texts": ["<9>"], "token_logp": [-0.75], "token_entropy": [2.0]}
    if beta:  # the reference's log-probabilities only where TRL scored a reference (the second scoring call)
        first["token_ref_logp"], second["token_ref_logp"] = [-0.25, -2.0], [-1.5]
    assert rows == [first, second]
    del cap["entropy"]  # no entropies computed (a scoring call that passed its arguments positionally)
    assert all(
        "token_entropy" not in row
        for row in trainer._token_lists(cap, {"completion_mask": mask, "completion_ids": ids})
    )


def test_the_step_boundary_delivers_in_the_background_and_a_direct_call_on_the_training_thread():
    from rloo_demo.engine.capture import _StepBoundary

    trainer = fake_trainer()
    delivered = []
    trainer._deliver_after = lambda pending, background: delivered.append((pending, background))
    trainer._after = None
    trainer._pending = {"step": 1}
    trainer._finish_step()
    trainer._pending = {"step": 2}
    _StepBoundary(trainer).on_step_end(None, None, None)
    assert delivered == [({"step": 1}, False), ({"step": 2}, True)] and trainer._pending is None
    trainer._finish_step()  # nothing pending: nothing delivered
    assert len(delivered) == 2


class _Job:
    def __init__(self, error=None):
        self.error, self.calls = error, []

    def result(self):
        self.calls.append("result")
        if self.error:
            raise self.error

    def wait(self):
        self.calls.append("wait")


def test_the_step_boundary_raises_what_the_after_pass_raised_before_the_update_and_at_the_end():
    """A full disk in the background pass must reach the training thread as it was, at the next step boundary,
    before the optimiser changes the weights, and at the end of training (the default of ``_await_after``)."""
    from rloo_demo.engine.capture import _StepBoundary

    trainer = fake_trainer()
    boundary = _StepBoundary(trainer)
    for hook in (boundary.on_pre_optimizer_step, boundary.on_train_end):
        job = trainer._after = _Job(OSError(28, "No space left on device"))
        with pytest.raises(OSError, match="No space left"):
            hook(None, None, None)
        assert job.calls == ["result"] and trainer._after is None
    job = trainer._after = _Job(OSError(28, "No space left on device"))
    with pytest.raises(OSError, match="No space left"):
        trainer._finish_step()  # the next step's boundary waits for the last one's pass first
    assert job.calls == ["result"]


def test_train_hands_trl_its_arguments_and_waits_for_the_after_pass_letting_a_training_error_win(monkeypatch):
    import transformers

    trainer, seen = fake_trainer(), []

    def trl_train(self, *args, **kwargs):
        seen.append((args, kwargs))
        if kwargs.get("fail"):
            raise RuntimeError("the step failed")
        return "trained"

    monkeypatch.setattr(transformers.Trainer, "train", trl_train)
    job = trainer._after = _Job(OSError(28, "No space left on device"))
    with pytest.raises(OSError, match="No space left"):  # after a good training: the pass's own error, as it was
        trainer.train("a checkpoint", trial=None)
    assert seen == [(("a checkpoint",), {"trial": None})] and job.calls == ["result"] and trainer._after is None
    job = trainer._after = _Job(OSError(28, "No space left on device"))
    with pytest.raises(RuntimeError, match="the step failed"):  # the training error wins; the pass is awaited
        trainer.train(fail=True)
    assert job.calls == ["wait"]
    trainer._after = _Job()
    assert trainer.train() == "trained"


def test_the_after_pass_scores_prompt_and_completion_under_the_new_weights_and_keeps_the_masked_tokens(monkeypatch):
    import contextlib

    from rloo_demo.engine import capture

    trainer = fake_trainer()
    trainer.model = "the policy"
    trainer.args = SimpleNamespace(per_device_train_batch_size=3, gradient_checkpointing_kwargs={"use_reentrant": 0})
    calls = []

    def score(model, input_ids, attention_mask, logits_to_keep, batch_size):
        calls.append(
            (model, input_ids.tolist(), attention_mask.tolist(), logits_to_keep, batch_size, torch.is_grad_enabled())
        )
        return torch.tensor([[-0.5, -0.25, -9.0], [-1.5, -9.0, -9.0]]), None, None

    @contextlib.contextmanager
    def no_checkpointing(model, kwargs):
        calls.append(("checkpointing off", model, kwargs))
        yield

    monkeypatch.setattr(capture, "trl_scoring", lambda t: score if t is trainer else None)
    monkeypatch.setattr(capture, "disable_gradient_checkpointing", no_checkpointing)
    groups = [{"completions": [{"text": "a"}]}, {"completions": [{"text": "b"}]}]
    batch = {
        "prompt_ids": torch.tensor([[1, 2], [3, 4]]),
        "prompt_mask": torch.tensor([[0, 1], [1, 1]]),
        "completion_ids": torch.tensor([[5, 6, 0], [7, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0]]),
    }
    trainer._record_after({"groups": groups, "batch": batch})
    assert calls == [
        ("checkpointing off", "the policy", {"use_reentrant": 0}),
        ("the policy", [[1, 2, 5, 6, 0], [3, 4, 7, 0, 0]], [[0, 1, 1, 1, 0], [1, 1, 1, 0, 0]], 3, 3, False),
    ]
    assert [c["token_logp_after"] for g in groups for c in g["completions"]] == [[-0.5, -0.25], [-1.5]]


def test_the_rewards_are_kept_for_the_record_and_handed_on_in_float64_with_the_offset_column(monkeypatch):
    scores = torch.tensor([[0.5, 1.0], [float("nan"), float("nan")], [float("nan"), -2.0]], dtype=torch.float32)
    monkeypatch.setattr(RLOOTrainer, "_calculate_rewards", lambda self, inputs, prompts, completions, ids: scores)
    trainer = fake_trainer()
    trainer.reward_offset = 2.5
    trainer._capture = {"logps": []}
    prompts = ["plain", [{"role": "user", "content": "a chat turn"}], "third"]
    completions = ["one", [{"role": "assistant", "content": "a reply"}], "three"]
    out = trainer._calculate_rewards(None, prompts, completions, None)
    assert out.dtype == torch.float64 and out.shape == (3, 3)
    nan = float("nan")
    expected = [[0.5, 1.0, 2.5], [nan, nan, nan], [nan, -2.0, 2.5]]  # the row no function scored stays unscorable
    assert torch.equal(out.isnan(), torch.tensor(expected).isnan())
    assert torch.equal(out.nan_to_num(0.0), torch.tensor(expected, dtype=torch.float64).nan_to_num(0.0))
    kept = trainer._capture["rewards_per_func"]
    assert kept.dtype == torch.float32 and kept.shape == (3, 2)  # the functions' own scores, without the offset
    assert trainer._capture["prompts"] == ["plain", "a chat turn", "third"]
    assert trainer._capture["completions"] == ["one", "a reply", "three"]
    trainer.reward_offset, trainer._capture = 0.0, None  # no offset, not recording (an evaluation): two columns
    assert trainer._calculate_rewards(None, prompts, completions, None).shape == (3, 2)


def test_with_two_processes_the_token_lists_and_the_after_pass_gather_every_ranks_rows(monkeypatch):
    import contextlib

    import accelerate.utils

    from rloo_demo.engine import capture

    other_rank = [{"ids": [4], "token_logp": [-2.0]}]
    sent = []
    monkeypatch.setattr(
        accelerate.utils,
        "gather_object",
        lambda rows: sent.append(rows) or list(rows) + (other_rank if "ids" in rows[0] else [[-3.0]]),
    )
    trainer = fake_trainer(beta=0.0)
    trainer.accelerator = SimpleNamespace(num_processes=2, is_main_process=True)
    trainer._tokenizer = _Pieces()  # TRL's own tokenizer where it keeps one (a processor's), before processing_class
    trainer.processing_class = None
    mask, ids = torch.tensor([[1, 1]]), torch.tensor([[7, 8]])
    rows = trainer._token_lists(
        {"logps": [torch.tensor([[-0.5, -1.0]])]}, {"completion_mask": mask, "completion_ids": ids}
    )
    assert sent == [[{"ids": [7, 8], "token_logp": [-0.5, -1.0]}]]
    assert rows == [
        {"token_texts": ["<7>", "<8>"], "token_logp": [-0.5, -1.0]},
        {"token_texts": ["<4>"], "token_logp": [-2.0]},
    ]  # this rank's, then the other's
    trainer.model, trainer.args = (
        "policy",
        SimpleNamespace(per_device_train_batch_size=1, gradient_checkpointing_kwargs=None),
    )
    monkeypatch.setattr(capture, "trl_scoring", lambda t: lambda *a: (torch.tensor([[-0.25, -9.0]]), None, None))
    monkeypatch.setattr(capture, "disable_gradient_checkpointing", lambda m, kw: contextlib.nullcontext())
    groups = [{"completions": [{"text": "mine"}, {"text": "the other rank's"}]}]
    batch = {
        "prompt_ids": torch.tensor([[1]]),
        "prompt_mask": torch.tensor([[1]]),
        "completion_ids": torch.tensor([[5, 0]]),
        "completion_mask": torch.tensor([[1, 0]]),
    }
    trainer._record_after({"groups": groups, "batch": batch})
    assert sent[-1] == [[-0.25]]
    assert [c["token_logp_after"] for c in groups[0]["completions"]] == [[-0.25], [-3.0]]
