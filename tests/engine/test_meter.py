"""The gradient-variance meter and the per-step diagnostics inside real training runs.

``python -m pytest tests/engine/test_meter.py`` (two 2-step runs of the embedded policy, about a minute on 2 cores).

The gradient-variance meter's plumbing (``engine/meter.measure``) with every model call replaced by a recorder:
what each call receives (the prompt unpadded for sampling, padded with its mask for scoring, the tokenizer's end
token), and the shaped reward the replicates are weighed with, ``r - beta * (log pi - log ref)``, against the
numbers the recorders gave. The statistics themselves are tests/engine/test_variance.py's; a real policy is
tests/engine/test_meter.py's. ``python -m pytest tests/engine/test_meter.py``

The meter on a finished run (``engine.meter.measure_run``, what ``python -m rloo_demo meter`` prints) against
the same measurement put together here from its pieces: the run's own prompts, a seed per step, the run's rewards
with another offset, β and its reference, the prompts left-padded as TRL pads them. A tiny run, two steps: seconds."""

import json

import pytest
import torch

from rloo_demo.advantages import ESTIMATORS, combine_scores
from rloo_demo.config import RunConfig
from rloo_demo.engine import meter
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.meter import MeterInputs, MeterSettings, TrainingMeter, completion_logprobs
from rloo_demo.engine.training import RunState, build_trainer
from rloo_demo.errors import NotFound
from rloo_demo.models.policy import load_policy
from rloo_demo.store.folder import RunFolder
from rloo_demo.task.data import run_prompts
from rloo_demo.task.rewards import WeightedReward

# ----------------------------------------------------------------------------- meter


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
    config = RunConfig(
        max_steps=3,
        prompts_per_step=2,
        max_new_tokens=6,
        variance_every=2,
        seed=11,
        beta=0.05,
        output_dir=str(tmp_path),
    )
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
    assert caplog.messages == [
        "gradient-variance meter skipped: the policy has too many trainable parameters for "
        "the meter's accumulators (try LoRA)"
    ]


# ----------------------------------------------------------------------------- meter inputs


def test_a_prompts_mask_is_its_own_or_all_ones_and_unpadding_drops_the_masked_tokens():
    padded = MeterInputs(
        prompts=["a", "b"], prompt_ids=[[0, 0, 7, 8], [3, 4, 5, 6]], k=2, prompt_masks=[[0, 0, 1, 1], [1, 1, 1, 1]]
    )
    assert padded.mask(0) == [0, 0, 1, 1] and padded.unpadded(0) == [7, 8] and padded.unpadded(1) == [3, 4, 5, 6]
    plain = MeterInputs(prompts=["a"], prompt_ids=[[9, 8, 7]], k=2)
    assert plain.mask(0) == [1, 1, 1] and plain.unpadded(0) == [9, 8, 7]
    with pytest.raises(ValueError):  # a mask of another length is a bug upstream, not a silent cut
        MeterInputs(prompts=["a"], prompt_ids=[[1, 2, 3]], k=2, prompt_masks=[[1, 1]]).unpadded(0)


class Tokenizer:
    eos_token_id = 50256

    def __init__(self):
        self.decoded = []

    def batch_decode(self, batch, **kwargs):
        self.decoded.append(kwargs)
        return [" ".join(map(str, c)) for c in batch]


@pytest.fixture()
def recorded(monkeypatch):
    calls = {"sample": [], "logprobs": [], "reference": [], "gradient": [], "rewards": []}

    def sample(policy, prompt, n, max_new, temperature, top_p, generator, eos):
        calls["sample"].append((list(prompt), n, max_new, temperature, top_p, eos))
        return [[prompt[-1] + i, 100 + i] for i in range(n)]  # n completions that name their prompt and index

    def logprobs(policy, ids, batch, temperature, mask):
        calls["logprobs"].append((list(ids), mask, temperature))
        return [-0.1 * c[0] for c in batch]

    def gradient(policy, params, prompt, completion, temperature, mask):
        calls["gradient"].append((list(prompt), list(completion), mask))
        return torch.tensor([float(completion[0]), float(len(completion)), 1.0])

    real_plan = meter.ReplicatePlan.from_rewards

    def plan(rewards, k, *args, **kwargs):
        calls["rewards"].append([list(r) for r in rewards])
        return real_plan(rewards, k, *args, **kwargs)

    monkeypatch.setattr(meter, "sample_token_ids", sample)
    monkeypatch.setattr(meter, "completion_logprobs", logprobs)
    monkeypatch.setattr(meter, "score_gradient", gradient)
    monkeypatch.setattr(meter, "trainable_parameters", lambda policy: [torch.zeros(3)])
    monkeypatch.setattr(meter.ReplicatePlan, "from_rewards", staticmethod(plan))
    return calls


def reference(calls):
    def ref(ids, mask, batch):
        calls["reference"].append((list(ids), mask, [list(c) for c in batch]))
        return [-0.05 * c[0] - 1.0 for c in batch]

    return ref


def test_the_meter_samples_the_unpadded_prompt_and_scores_the_padded_one_with_its_mask(recorded):
    inputs = MeterInputs(
        prompts=["first", "second"], prompt_ids=[[0, 11, 12], [21, 22, 23]], k=2, prompt_masks=[[0, 1, 1], [1, 1, 1]]
    )
    settings = MeterSettings(
        reward=lambda prompts, texts: [0.5] * len(texts),
        beta=0.2,
        temperature=0.7,
        top_p=0.9,
        max_new_tokens=6,
        replicates=3,
    )
    tokenizer = Tokenizer()
    out = meter.measure(object(), tokenizer, inputs, settings, seed=4, reference_logprobs=reference(recorded))
    # replicates 3, none from the step's own batch: 3 x K = 6 completions a prompt, the end token the tokenizer's
    assert recorded["sample"] == [([11, 12], 6, 6, 0.7, 0.9, 50256), ([21, 22, 23], 6, 6, 0.7, 0.9, 50256)]
    assert tokenizer.decoded == [{"skip_special_tokens": True}] * 2
    assert [(ids, mask) for ids, mask, _ in recorded["logprobs"]] == [
        ([0, 11, 12], [0, 1, 1]),
        ([21, 22, 23], [1, 1, 1]),
    ]
    assert [(ids, mask) for ids, mask, _ in recorded["reference"]] == [
        ([0, 11, 12], [0, 1, 1]),
        ([21, 22, 23], [1, 1, 1]),
    ]
    # every completion's gradient with its own prompt, padded, and that prompt's mask
    assert [(p, m) for p, _, m in recorded["gradient"][:4]] == [([0, 11, 12], [0, 1, 1])] * 2 + [
        ([21, 22, 23], [1, 1, 1])
    ] * 2
    assert len(recorded["gradient"]) == 3 * 4 and out["samples"] == 3 * 4

    # shaped: 0.5 - 0.2 * (log pi - log ref), log pi = -0.1 c0, log ref = -0.05 c0 - 1
    def shaped(c0):
        return 0.5 - 0.2 * ((-0.1 * c0) - (-0.05 * c0 - 1.0))

    (rewards,) = recorded["rewards"]
    want = [[shaped(12 + 2 * j), shaped(13 + 2 * j), shaped(23 + 2 * j), shaped(24 + 2 * j)] for j in range(3)]
    assert len(rewards) == 3 and all(r == pytest.approx(w, abs=1e-12) for r, w in zip(rewards, want, strict=True))
    assert rewards[0][0] != pytest.approx(0.5)  # the KL term is in


def test_with_beta_zero_the_reward_is_the_reward_and_no_reference_is_asked(recorded):
    inputs = MeterInputs(prompts=["p"], prompt_ids=[[5, 6]], k=3, completions=[[1], [2], [3]], rewards=[0.1, 0.2, 0.3])
    settings = MeterSettings(
        reward=lambda prompts, texts: [float(len(t)) for t in texts],
        beta=0.0,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=4,
        replicates=2,
    )
    meter.measure(object(), Tokenizer(), inputs, settings, seed=1)
    # the step's own batch is the first replicate, with the trainer's rewards; one more is drawn
    assert recorded["sample"] == [([5, 6], 3, 4, 1.0, 1.0, 50256)] and recorded["logprobs"] == []
    texts = [f"{6 + i} {100 + i}" for i in range(3)]
    assert recorded["rewards"] == [[[0.1, 0.2, 0.3], [float(len(t)) for t in texts]]]
    assert [c for _, c, _ in recorded["gradient"]] == [[1], [2], [3], [6, 100], [7, 101], [8, 102]]


# ----------------------------------------------------------------------------- the log-probabilities, by hand


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM

    from rloo_demo.models.hub import ASSETS_DIR

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(ASSETS_DIR / "tiny-imdb-gpt2").eval()


def by_hand(model, prompt, mask, completion, temperature):
    """One completion alone (no right padding), the prompt padded as given: sum of log softmax(logits / T)."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids, attention_mask=torch.tensor([mask + [1] * len(completion)])).logits[0]
    steps = [logits[len(prompt) - 1 + j].float() / temperature for j in range(len(completion))]
    return sum(s.log_softmax(-1)[t] for s, t in zip(steps, completion, strict=True))


def test_completion_logprobs_are_the_padded_prompts_tokens_at_the_temperature(tiny):
    prompt, mask = [0, 0, 40, 41], [0, 0, 1, 1]  # left-padded, as the trainer pads a short prompt
    completions = [[50, 51, 52], [60]]  # of two lengths: the shorter is right-padded in the batch
    got = meter.completion_logprobs(tiny, prompt, completions, 0.7, mask)
    with torch.no_grad():
        want = [by_hand(tiny, prompt, mask, c, 0.7).item() for c in completions]
        unmasked = by_hand(tiny, prompt, [1, 1, 1, 1], completions[0], 0.7).item()
        at_one = by_hand(tiny, prompt, mask, completions[0], 1.0).item()
    assert got == pytest.approx(want, abs=1e-4)
    assert abs(unmasked - want[0]) > 1e-3 and abs(at_one - want[0]) > 1e-3  # the inputs tell both apart
    assert meter.completion_logprobs(tiny, prompt, [], 0.7, mask) == []


def test_a_score_gradient_is_the_gradient_of_that_log_probability(tiny):
    prompt, mask, completion = [0, 40, 41], [0, 1, 1], [50, 51]
    params = meter.trainable_parameters(tiny)
    got = meter.score_gradient(tiny, params, prompt, completion, 0.7, mask)
    with torch.enable_grad():
        want = torch.autograd.grad(by_hand(tiny, prompt, mask, completion, 0.7), params, allow_unused=True)
    flat = torch.cat(
        [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(want, params, strict=True)]
    )
    assert got.shape == flat.shape and torch.allclose(got, flat, atol=1e-5)
    assert all(p.grad is None for p in params)  # the trainer's .grad left alone
    plain = meter.score_gradient(tiny, params, prompt, completion, 0.7)  # no mask: every prompt token attended
    assert not torch.allclose(plain, got, atol=1e-5)


# ----------------------------------------------------------------------------- the reference the meter shapes with


def test_the_reference_is_the_trainers_ref_model_or_the_lora_base_at_the_trainers_temperature(tiny):
    """``_reference`` as TRL's trainer holds it: a separate reference model, or (LoRA) the policy with its adapter
    off; None at beta = 0. The adapter's weights are moved off zero, so the policy and its base differ."""
    import copy
    from types import SimpleNamespace

    from peft import LoraConfig, get_peft_model

    prompt, mask, completions = [0, 40, 41], [0, 1, 1], [[50, 51], [60]]
    with torch.no_grad():
        base = [by_hand(tiny, prompt, mask, c, 0.7).item() for c in completions]
    assert meter._reference(SimpleNamespace(beta=0.0, temperature=0.7, ref_model=tiny), tiny) is None
    ref = meter._reference(SimpleNamespace(beta=0.05, temperature=0.7, ref_model=tiny), None)
    assert ref(prompt, mask, completions) == pytest.approx(base, abs=1e-4)

    lora = get_peft_model(copy.deepcopy(tiny), LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"]))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
        adapted = [meter.completion_logprobs(lora, prompt, [c], 0.7, mask)[0] for c in completions]
    assert all(abs(a - b) > 1e-3 for a, b in zip(adapted, base, strict=True))  # the adapter changes the policy
    off = meter._reference(SimpleNamespace(beta=0.05, temperature=0.7, ref_model=None), lora)
    assert off(prompt, mask, completions) == pytest.approx(base, abs=1e-4)
    # and the adapter is on again afterwards
    assert meter.completion_logprobs(lora, prompt, completions, 0.7, mask) == pytest.approx(adapted, abs=1e-4)


# ----------------------------------------------------------------------------- measure run


CONFIG = dict(
    prompts_per_step=2,
    num_generations=3,
    max_new_tokens=4,
    beta=0.05,
    temperature=0.9,
    top_p=0.95,
    rewards=["vader_compound", "length_penalty"],
    reward_weights=[1.0, 0.5],
    reward_offset=0.25,
)


def _expected(run, policy, tokenizer, steps, seed, offset):
    config = run.config()
    reference = load_policy(config.policy)[0]
    prompts = run_prompts(config, "train", steps * config.prompts_per_step)["prompt"]
    reward = WeightedReward.from_names(config.rewards, config.weights)
    settings = meter.MeterSettings(
        reward=lambda p, t: combine_scores(list(reward.score_each(p, t).values()), reward.weights, None, offset),
        beta=config.beta,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
    )

    def ref(ids, mask, batch):
        return meter.completion_logprobs(reference, ids, batch, config.temperature, mask)

    out = []
    for s in range(steps):
        batch = list(prompts[s * 2 : (s + 1) * 2])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        ids = [list(tokenizer(p).input_ids) for p in batch]
        width = max(map(len, ids))
        padded = [[pad] * (width - len(x)) + x for x in ids]
        masks = [[0] * (width - len(x)) + [1] * len(x) for x in ids]
        inputs = meter.MeterInputs(prompts=batch, prompt_ids=padded, prompt_masks=masks, k=config.num_generations)
        out.append(meter.measure(policy, tokenizer, inputs, settings, seed * 1_000_003 + s, ref)["stats"])
    return out


def test_measure_run_is_the_measurement_of_the_runs_own_steps(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="m", **CONFIG))
    with pytest.raises(NotFound, match=r"^run 'm' has no trained model yet; use --at base or train it first$"):
        meter.measure_run(run)
    policy, tokenizer = load_policy(run.config().policy)
    trained_weights, _ = load_policy(run.config().policy)
    with torch.no_grad():  # a trained model that differs from the base: measuring the wrong one changes the numbers
        for param in trained_weights.parameters():
            param.mul_(1.05)
    run.save_model(trained_weights, tokenizer)
    seen = []
    got = meter.measure_run(
        run, steps=2, at="trained", seed=3, progress=lambda i, n: seen.append((i, n)), reward_offset=1.5
    )
    trained, _ = load_policy(str(run.model_dir))
    expected = _expected(run, trained, tokenizer, steps=2, seed=3, offset=1.5)
    assert got["per_step"] == expected
    assert got["rows"] == meter.summary_rows(expected)
    assert {k: got[k] for k in ("run", "at", "steps", "prompts_per_step", "k", "replicates", "reward_offset")} == {
        "run": "m",
        "at": "trained",
        "steps": 2,
        "prompts_per_step": 2,
        "k": 3,
        "replicates": meter.REPLICATES,
        "reward_offset": 1.5,
    }
    assert seen == [(1, 2), (2, 2)] and got["seconds"] > 0
    # the run's own offset when none is given; the base policy measured without a trained model's folder
    base = meter.measure_run(run, steps=1, at="base", seed=3)
    assert base["reward_offset"] == 0.25 and base["at"] == "base"
    assert base["per_step"] == _expected(run, policy, tokenizer, steps=1, seed=3, offset=0.25)


def test_prompts_are_left_padded_with_the_pad_token_or_else_the_end_of_text():
    class Tok:
        def __init__(self, pad):
            self.pad_token_id, self.eos_token_id = pad, 50

        def __call__(self, text):
            return type("Enc", (), {"input_ids": [len(w) for w in text.split()]})()

    ids, masks = meter.left_padded(Tok(pad=7), ["a bb ccc", "dddd"])
    assert ids == [[1, 2, 3], [7, 7, 4]] and masks == [[1, 1, 1], [0, 0, 1]]
    ids, _ = meter.left_padded(Tok(pad=None), ["a bb", "c"])
    assert ids == [[1, 2], [50, 1]]
