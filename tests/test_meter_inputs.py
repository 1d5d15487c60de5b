"""The gradient-variance meter's plumbing (``engine/meter.measure``) with every model call replaced by a recorder:
what each call receives (the prompt unpadded for sampling, padded with its mask for scoring, the tokenizer's end
token), and the shaped reward the replicates are weighed with, ``r - beta * (log pi - log ref)``, against the
numbers the recorders gave. The statistics themselves are tests/test_variance.py's; a real policy is
tests/test_meter.py's. ``python -m pytest tests/test_meter_inputs.py``
"""

import pytest
import torch

from rloo_demo.engine import meter
from rloo_demo.engine.meter import MeterInputs, MeterSettings


def test_a_prompts_mask_is_its_own_or_all_ones_and_unpadding_drops_the_masked_tokens():
    padded = MeterInputs(prompts=["a", "b"], prompt_ids=[[0, 0, 7, 8], [3, 4, 5, 6]], k=2,
                         prompt_masks=[[0, 0, 1, 1], [1, 1, 1, 1]])
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
    inputs = MeterInputs(prompts=["first", "second"], prompt_ids=[[0, 11, 12], [21, 22, 23]], k=2,
                         prompt_masks=[[0, 1, 1], [1, 1, 1]])
    settings = MeterSettings(reward=lambda prompts, texts: [0.5] * len(texts), beta=0.2, temperature=0.7, top_p=0.9,
                             max_new_tokens=6, replicates=3)
    tokenizer = Tokenizer()
    out = meter.measure(object(), tokenizer, inputs, settings, seed=4, reference_logprobs=reference(recorded))
    # replicates 3, none from the step's own batch: 3 x K = 6 completions a prompt, the end token the tokenizer's
    assert recorded["sample"] == [([11, 12], 6, 6, 0.7, 0.9, 50256), ([21, 22, 23], 6, 6, 0.7, 0.9, 50256)]
    assert tokenizer.decoded == [{"skip_special_tokens": True}] * 2
    assert [(ids, mask) for ids, mask, _ in recorded["logprobs"]] == [([0, 11, 12], [0, 1, 1]),
                                                                      ([21, 22, 23], [1, 1, 1])]
    assert [(ids, mask) for ids, mask, _ in recorded["reference"]] == [([0, 11, 12], [0, 1, 1]),
                                                                       ([21, 22, 23], [1, 1, 1])]
    # every completion's gradient with its own prompt, padded, and that prompt's mask
    assert [(p, m) for p, _, m in recorded["gradient"][:4]] == [([0, 11, 12], [0, 1, 1])] * 2 + [
        ([21, 22, 23], [1, 1, 1])] * 2
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
    settings = MeterSettings(reward=lambda prompts, texts: [float(len(t)) for t in texts], beta=0.0, temperature=1.0,
                             top_p=1.0, max_new_tokens=4, replicates=2)
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
    flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(want, params,
                                                                                            strict=True)])
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
