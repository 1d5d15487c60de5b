"""The engine's own GPT-2 decode samples what ``generate`` samples, and says when it does not apply.

``python -m pytest tests/fast/test_lean_decode.py``
"""

import pytest
import torch
from transformers import GenerationConfig

from rloo_demo.fast.lean_decode import inverse_cdf_draw, lean_generate, lean_plan, multinomial_draw
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.models.policy import load_policy

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
@pytest.mark.parametrize("padded", [True, False, "two-token"], ids=["left-padded", "same-length", "two-token"])
def test_with_generates_draws_it_samples_generates_tokens(policy, settings, padded):
    """Same seed, same tokens: the written-out forward, positions, padding mask, logits processors and finished
    rows are generate's, or some token would differ within 16 x 24 draws."""
    model, tok = policy
    texts = {True: PROMPTS * 4, False: [PROMPTS[0]] * 16, "two-token": ["Bad"] * 16}[padded]
    ids, mask = _left_padded(tok, texts)
    assert padded != "two-token" or ids.size(1) == 2  # the smallest prefill that is still causal
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


def test_inverse_cdf_draw_takes_weights_that_do_not_sum_to_one_as_multinomial_does():
    weights = torch.tensor([0.0, 3.0, 1.0])  # softmax's output sums to 1 only up to rounding; multinomial scales
    torch.manual_seed(1)
    draws = inverse_cdf_draw(weights.repeat(40_000, 1))
    freq = torch.bincount(draws, minlength=3).double() / draws.numel()
    torch.testing.assert_close(freq, torch.tensor([0.0, 0.75, 0.25], dtype=torch.float64), atol=0.01, rtol=0)


def test_inverse_cdf_draw_refuses_what_multinomial_refuses():
    nan_last, zeros = torch.tensor([[0.2, 0.3, 0.5, float("nan")]]), torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    for bad in (torch.tensor([[float("nan"), 0.5]]), nan_last, zeros, torch.tensor([[1.5, -0.5]])):
        with pytest.raises(RuntimeError) as expected:
            torch.multinomial(bad, 1)
        with pytest.raises(RuntimeError, match="probabilit") as got:
            inverse_cdf_draw(bad)
        assert str(got.value) == str(expected.value)


def test_inverse_cdf_draw_takes_leading_zeros():
    assert inverse_cdf_draw(torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])).tolist() == [3, 2]


def test_inverse_cdf_draw_at_the_ends_of_the_uniform_range(monkeypatch):
    """A uniform of 0 or just under 1 still lands on a token that has probability, not on a zero at either end."""
    probs = torch.tensor([[0.0, 0.25, 0.75, 0.0, 0.0]])
    real_rand = torch.rand
    for value, token in ((0.0, 1), (1.0 - 2**-53, 2)):
        monkeypatch.setattr(torch, "rand", lambda *a, v=value, **k: torch.full(a, v, dtype=k.get("dtype")))
        assert inverse_cdf_draw(probs).tolist() == [token]
    monkeypatch.setattr(torch, "rand", real_rand)


_PROCESSORS = "logits processors other than temperature/top-k/top-p/min-p: "
_STOPS = "stop strings, a time limit or a cache implementation are set"


@pytest.mark.parametrize(
    "settings, reason",
    [
        ({"repetition_penalty": 1.3}, _PROCESSORS + "RepetitionPenaltyLogitsProcessor"),
        ({"no_repeat_ngram_size": 2}, _PROCESSORS + "NoRepeatNGramLogitsProcessor"),
        ({"min_new_tokens": 4}, _PROCESSORS + "MinNewTokensLengthLogitsProcessor"),
        # generate hands a decoder-only model's prompt in as its "encoder" ids: these apply there too
        ({"encoder_repetition_penalty": 1.5}, _PROCESSORS + "EncoderRepetitionPenaltyLogitsProcessor"),
        (
            {"encoder_repetition_penalty": 1.5, "repetition_penalty": 1.3},
            _PROCESSORS + "EncoderRepetitionPenaltyLogitsProcessor, RepetitionPenaltyLogitsProcessor",
        ),
        ({"encoder_no_repeat_ngram_size": 2}, _PROCESSORS + "EncoderNoRepeatNGramLogitsProcessor"),
        ({"do_sample": False}, "not plain sampling"),
        ({"num_beams": 2}, "not plain sampling"),
        ({"num_return_sequences": 2}, "not plain sampling"),
        ({"stop_strings": ["."]}, _STOPS),
        ({"max_time": 5.0}, _STOPS),
        ({"cache_implementation": "static"}, _STOPS),
        ({"output_scores": True}, "scores or a dict output were asked for"),
        ({"output_logits": True}, "scores or a dict output were asked for"),
        ({"return_dict_in_generate": True}, "scores or a dict output were asked for"),
        ({"max_new_tokens": None, "max_length": 30}, "max_new_tokens and pad_token_id must be set"),
        # 8 + 249 > 256 positions
        ({"max_new_tokens": 249}, "prompt and completion are longer than the model's context"),
    ],
)
def test_each_setting_the_decode_does_not_cover_sends_it_to_generate(policy, settings, reason):
    model, tok = policy
    config = _config(tok)
    for key, value in settings.items():
        setattr(config, key, value)
    assert lean_plan(model, config, 8) == reason


def test_a_transformers_whose_generation_helpers_fail_goes_to_generate_and_says_how(policy, monkeypatch):
    model, tok = policy

    def changed(*args, **kwargs):
        raise TypeError("an unexpected keyword")

    monkeypatch.setattr(model, "_prepare_generation_config", changed)
    expected = "transformers' generation helpers changed (TypeError: an unexpected keyword)"
    assert lean_plan(model, _config(tok), 8) == expected


def _tiny_gpt2(**config):
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2, **config)).eval()


def test_a_model_with_no_eos_anywhere_samples_to_max_new_tokens():
    model = _tiny_gpt2()
    model.generation_config.eos_token_id = None
    plan = lean_plan(model, GenerationConfig(do_sample=True, top_k=0, max_new_tokens=4, pad_token_id=1), 8)
    assert not isinstance(plan, str) and plan.eos_token_ids == [] and plan.max_new_tokens == 4


def test_each_gpt2_the_decode_does_not_write_out_is_named_with_its_reason(policy):
    _, tok = policy
    assert lean_plan(_tiny_gpt2(add_cross_attention=True), _config(tok), 8) == "its GPT-2 config changes the attention"
    assert lean_plan(_tiny_gpt2(reorder_and_upcast_attn=True), _config(tok), 8) == "reorder_and_upcast_attn is set"
    quantized = _tiny_gpt2()
    quantized.hf_quantizer = object()  # what from_pretrained leaves on a model it quantized
    assert lean_plan(quantized, _config(tok), 8) == "the model is quantized"
    assert not isinstance(lean_plan(_tiny_gpt2(), _config(tok), 8), str)  # the same model, not quantized


def test_the_plan_takes_the_whole_context_and_any_form_of_eos(policy):
    model, tok = policy
    full = lean_plan(model, _config(tok, max_new_tokens=model.config.n_positions - 8), 8)
    assert not isinstance(full, str) and full.max_new_tokens == model.config.n_positions - 8
    assert lean_plan(model, _config(tok, eos=tok.eos_token_id), 8).eos_token_ids == [tok.eos_token_id]
    assert lean_plan(model, _config(tok, eos=[3, 5]), 8).eos_token_ids == [3, 5]


@pytest.mark.parametrize(
    "change", ["add_cross_attention", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"]
)
def test_a_gpt2_whose_attention_differs_goes_to_generate(policy, change):
    _, tok = policy
    assert isinstance(lean_plan(_tiny_gpt2(**{change: True}), _config(tok), 8), str)
    assert "attention" in lean_plan(_tiny_gpt2(scale_attn_weights=False), _config(tok), 8)


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
    assert lean_plan(llama, _config(tok), 8) == "LlamaForCausalLM is not a plain GPT2LMHeadModel"

    with_dropout, _ = load_policy(EMBEDDED_POLICY)
    with_dropout.transformer.drop.p = 0.1
    with_dropout.train()
    assert lean_plan(with_dropout, _config(tok), 8) == "dropout is active"
    with_dropout.eval()  # dropout is off in eval mode, so the decode applies again
    assert not isinstance(lean_plan(with_dropout, _config(tok), 8), str)
