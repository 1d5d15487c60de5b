"""The engine's own GPT-2 decode samples what ``generate`` samples, and says when it does not apply.

``python -m pytest tests/test_lean_decode.py``
"""

import pytest
import torch
from transformers import GenerationConfig

from rloo_demo.hub import EMBEDDED_POLICY
from rloo_demo.lean_decode import inverse_cdf_draw, lean_generate, lean_plan, multinomial_draw
from rloo_demo.training import load_policy

PROMPTS = ["This movie was really one of the", "I hated", "A slow, quiet and sometimes very funny film about", "Bad"]


@pytest.fixture(scope="module")
def policy():
    model, tok = load_policy(EMBEDDED_POLICY)
    model.train()  # as TRL generates: the embedded policy has no dropout, so training mode changes nothing
    return model, tok


def _left_padded(tok, texts):
    ids = [tok(t).input_ids for t in texts]
    width = max(map(len, ids))
    input_ids = torch.tensor([[tok.pad_token_id] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
    return input_ids, mask


def _config(tok, eos=None, **settings):
    eos = [tok.eos_token_id] if eos is None else eos
    settings = {"top_k": 0, "max_new_tokens": 24, **settings}
    return GenerationConfig(do_sample=True, pad_token_id=tok.pad_token_id, eos_token_id=eos, **settings)


@pytest.mark.parametrize(
    "settings",
    [{}, {"temperature": 0.7, "top_k": 20, "top_p": 0.9}, {"min_p": 0.05}],
    ids=["T=1", "T=0.7,top-k,top-p", "min-p"],
)
@pytest.mark.parametrize("padded", [True, False], ids=["left-padded", "same-length"])
def test_with_generates_draws_it_samples_generates_tokens(policy, settings, padded):
    """Same seed, same tokens: the written-out forward, positions, padding mask, logits processors and finished
    rows are generate's, or some token would differ within 16 x 24 draws."""
    model, tok = policy
    ids, mask = _left_padded(tok, (PROMPTS * 4) if padded else [PROMPTS[0]] * 16)
    config = _config(tok, **settings)
    plan = lean_plan(model, config, ids.size(1))
    assert not isinstance(plan, str), plan
    torch.manual_seed(3)
    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    torch.manual_seed(3)
    got = lean_generate(model, ids, mask, plan, multinomial_draw)
    assert got.shape == expected.shape == (16, ids.size(1) + 24)
    assert torch.equal(got, expected)


def test_rows_that_end_are_padded_and_the_loop_stops_when_all_have_ended(policy):
    model, tok = policy
    ids, mask = _left_padded(tok, PROMPTS * 4)
    common = [tok(w).input_ids[0] for w in (" the", ".", ",", " a", " and", " of", " is")]
    config = _config(tok, eos=[tok.eos_token_id, *common], max_new_tokens=60)
    plan = lean_plan(model, config, ids.size(1))
    torch.manual_seed(5)
    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    torch.manual_seed(5)
    got = lean_generate(model, ids, mask, plan, multinomial_draw)
    assert torch.equal(got, expected)
    completions = got[:, ids.size(1) :]
    ended = torch.isin(completions, torch.tensor(plan.eos_token_ids))
    assert ended.any(1).all() and completions.size(1) < 60  # every row ended, so the loop stopped early
    first = ended.int().argmax(1)
    for row, end in zip(completions, first, strict=True):
        assert (row[end + 1 :] == tok.pad_token_id).all()  # padded after its end


def test_inverse_cdf_draw_follows_the_distribution_and_never_draws_a_zero():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.3, 0.0])
    torch.manual_seed(0)
    draws = inverse_cdf_draw(probs.repeat(100_000, 1))
    freq = torch.bincount(draws, minlength=6).double() / draws.numel()
    assert freq[probs == 0].sum() == 0
    torch.testing.assert_close(freq, probs.double(), atol=0.005, rtol=0)


def test_inverse_cdf_draw_refuses_what_multinomial_refuses():
    for bad in (torch.tensor([[0.5, float("nan")]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[1.5, -0.5]])):
        with pytest.raises(RuntimeError) as expected:
            torch.multinomial(bad, 1)
        with pytest.raises(RuntimeError, match="probabilit") as got:
            inverse_cdf_draw(bad)
        assert str(got.value) == str(expected.value)


def test_inverse_cdf_draw_at_the_ends_of_the_uniform_range(monkeypatch):
    """A uniform of 0 or just under 1 still lands on a token that has probability, not on a zero at either end."""
    probs = torch.tensor([[0.0, 0.25, 0.75, 0.0, 0.0]])
    real_rand = torch.rand
    for value, token in ((0.0, 1), (1.0 - 2**-53, 2)):
        monkeypatch.setattr(torch, "rand", lambda *a, v=value, **k: torch.full(a, v, dtype=k.get("dtype")))
        assert inverse_cdf_draw(probs).tolist() == [token]
    monkeypatch.setattr(torch, "rand", real_rand)


def test_the_plan_says_why_it_does_not_apply(policy):
    model, tok = policy
    assert "RepetitionPenalty" in lean_plan(model, _config(tok, repetition_penalty=1.3), 8)
    assert "context" in lean_plan(model, _config(tok, max_new_tokens=model.config.n_positions), 8)
    assert "cache implementation" in lean_plan(model, _config(tok, cache_implementation="static"), 8)

    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    )
    assert "not a plain GPT2LMHeadModel" in lean_plan(llama, _config(tok), 8)

    with_dropout, _ = load_policy(EMBEDDED_POLICY)
    with_dropout.transformer.drop.p = 0.1
    with_dropout.train()
    assert lean_plan(with_dropout, _config(tok), 8) == "dropout is active"
    with_dropout.eval()  # dropout is off in eval mode, so the decode applies again
    assert not isinstance(lean_plan(with_dropout, _config(tok), 8), str)
