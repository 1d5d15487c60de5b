"""Tiny-scale runs of the asset build scripts, to show they still work.

``python -m pytest tests/project/test_build_scripts.py``
"""

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, pipeline

from rloo_demo.task.data import load_embedded, split

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import bench_generate  # noqa: E402
import build_policy  # noqa: E402
import build_reward_model  # noqa: E402
import eval_policy  # noqa: E402
import grow_policy  # noqa: E402

LABELS = {0: "NEGATIVE", 1: "POSITIVE"}


@pytest.mark.slow
def test_build_policy_tiny(tmp_path):
    out = tmp_path / "policy"
    build_policy.main(
        [
            "--out",
            str(out),
            "--steps",
            "4",
            "--max-texts",
            "300",
            "--vocab-size",
            "400",
            "--n-embd",
            "32",
            "--n-layer",
            "1",
            "--n-head",
            "2",
            "--block",
            "32",
            "--batch",
            "4",
            "--rt-repeat",
            "1",
        ]
    )
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|pad|>" and tok.pad_token_id != tok.eos_token_id
    assert (out / "model.safetensors").is_file()
    assert model.config.resid_pdrop == 0.0
    ids = model.generate(
        **tok("This movie", return_tensors="pt"), max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id
    )
    assert ids.shape[1] > 2
    stats = json.loads((out / "training_stats.json").read_text())
    # with --rt-repeat 1 the stream holds the IMDB train reviews and the RT train sentences, each ending in EOS
    texts = (
        split(load_embedded("imdb"), "train")["text"][:300]
        + split(load_embedded("rotten_tomatoes"), "train")["text"][:300]
    )
    assert stats["rt_repeat"] == 1
    assert stats["stream_tokens"] == sum(len(ids) + 1 for ids in tok(texts)["input_ids"])
    # the reported perplexity is the saved model's on held-out reviews, and better than a uniform guess
    heldout = split(load_embedded("imdb"), "heldout")["text"][:300]
    ppl = build_policy.perplexity(model, build_policy.token_stream(tok, heldout), 32)
    assert stats["heldout_perplexity"] == pytest.approx(ppl, abs=0.01)
    assert ppl < len(tok)


@pytest.mark.slow
def test_build_reward_model_tiny(tmp_path):
    out = tmp_path / "clf"
    build_reward_model.main(
        [
            "--out",
            str(out),
            "--epochs",
            "0.2",
            "--max-texts",
            "300",
            "--vocab-size",
            "500",
            "--hidden",
            "32",
            "--layers",
            "1",
            "--max-length",
            "64",
        ]
    )
    pipe = pipeline("sentiment-analysis", model=str(out))
    assert pipe.model.config.id2label == LABELS
    result = pipe(["a fine film"])[0]
    with torch.no_grad():
        probs = pipe.model(**pipe.tokenizer(["a fine film"], return_tensors="pt")).logits.softmax(-1)[0]
    assert result == {"label": LABELS[int(probs.argmax())], "score": pytest.approx(float(probs.max()))}
    stats = json.loads((out / "training_stats.json").read_text())
    # the reported accuracy is the saved model's on the first 300 held-out reviews
    heldout = split(load_embedded("imdb"), "heldout")[:300]
    acc = build_reward_model.accuracy(pipe.model, pipe.tokenizer, heldout["text"], heldout["label"], 64)
    assert stats["heldout_imdb_accuracy"] == pytest.approx(acc, abs=1e-4)


def test_embedded_policy_generates_review_text():
    from rloo_demo.models.policy import load_policy
    from rloo_demo.models.sampling import sample

    model, tok = load_policy("embedded:tiny-imdb-gpt2")
    assert tok.eos_token is not None and tok.pad_token is not None and tok.padding_side == "left"
    assert not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
    samples = sample(model, tok, "This movie was", num_samples=4, max_new_tokens=20, seed=1)
    assert len(samples) == 4
    words = " ".join(s["text"] for s in samples).split()
    assert len(words) >= 20
    # mostly real English words from the review vocabulary, not byte soup
    common = {"the", "a", "and", "of", "to", "is", "it", "in", "this", "that", "was", "movie", "film", "i"}
    assert sum(w.lower().strip(".,!?\"'") in common for w in words) >= len(words) // 8
    again = sample(model, tok, "This movie was", num_samples=4, max_new_tokens=20, seed=1)
    assert [s["text"] for s in again] == [s["text"] for s in samples]  # seeded sampling is reproducible


def test_grow_policy_from_scratch_writes_the_configured_model(tmp_path):
    out = tmp_path / "policy"
    grow_policy.main(
        [
            "--out",
            str(out),
            "--init-from",
            "none",
            "--steps",
            "4",
            "--max-texts",
            "300",
            "--vocab-size",
            "400",
            "--n-embd",
            "32",
            "--n-layer",
            "2",
            "--n-head",
            "2",
            "--n-positions",
            "64",
            "--block",
            "32",
            "--batch",
            "4",
        ]
    )
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|pad|>" and tok.pad_token_id != tok.eos_token_id
    c = model.config
    assert (c.n_layer, c.n_embd, c.n_head, c.n_positions, c.vocab_size) == (2, 32, 2, 64, 400)
    assert c.resid_pdrop == c.embd_pdrop == c.attn_pdrop == 0.0
    assert load_file(out / "model.safetensors")["transformer.wte.weight"].dtype == torch.float16  # fp16 on disk
    assert model.dtype == torch.float32  # ... loaded as fp32 by default
    stats = json.loads((out / "training_stats.json").read_text())
    assert stats["steps"] == 4 and stats["tokens_seen"] == 4 * 4 * 32 and stats["final"] is True
    # 4 steps from a random init: still close to a uniform guess over the 400 tokens, and not worse than 2x that
    assert 100 < stats["heldout_perplexity_per_token"] < 800
    ids = model.generate(
        **tok("This movie", return_tensors="pt"), max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id
    )
    assert ids.shape[1] > 2


def test_grown_policy_computes_what_the_old_one_did():
    """New blocks start as the identity: the grown model's logits are the old model's, and the new blocks train."""
    config = GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2)
    torch.manual_seed(0)
    old = GPT2LMHeadModel(config).eval()
    grown = grow_policy.grow(old, 4).eval()
    ids = torch.randint(0, 50, (3, 10))
    assert grown.config.n_layer == 4 and old.config.n_layer == 2
    torch.testing.assert_close(grown(ids).logits, old(ids).logits, atol=1e-6, rtol=0)
    grown(ids, labels=ids).loss.backward()
    assert grown.transformer.h[3].attn.c_proj.weight.grad.abs().sum() > 0  # the identity blocks can learn
    with pytest.raises(SystemExit):
        grow_policy.grow(old, 1)


def test_real_word_rate_counts_alphabetic_words_found_in_the_list(tmp_path):
    words_file = tmp_path / "words"
    words_file.write_text("a\nfilm\nFine\ndon't\nmovie's\n")
    words = eval_policy.load_word_list(str(words_file))
    assert eval_policy.alphabetic_words("A fine film, don't! 10/10 movie's B-movie") == [
        "A",
        "fine",
        "film",
        "don't",
        "movie's",
        "B",
        "movie",
    ]
    # found (case ignored): A, fine, film, don't, movie's; not found: B, movie
    assert eval_policy.real_word_rate(["A fine film, don't! 10/10", "movie's B-movie"], words) == (5 / 7, 7)
    assert eval_policy.real_word_rate(["", "42 !"], words)[1] == 0


def test_heldout_nll_scores_every_token_once_with_windows():
    """A text longer than the context is scored in overlapping windows: every token once, and a text that fits
    gets exactly the NLL of one forward pass."""
    config = GPT2Config(vocab_size=300, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()

    class ByteTokenizer:
        eos_token_id = 0

        def __call__(self, text):
            return type("Enc", (), {"input_ids": [b + 1 for b in text.encode()]})()

    tok = ByteTokenizer()
    short = "ab cd"
    total, n_tokens, n_words = eval_policy.heldout_nll(model, tok, [short])
    ids = torch.tensor([[0, *tok(short).input_ids]])
    expected = -model(ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None]).sum().item()
    assert (n_tokens, n_words) == (5, 2) and total == pytest.approx(expected, rel=1e-5)
    long = "word " * 12  # 60 bytes: 5 windows of 16 with stride 8
    total, n_tokens, n_words = eval_policy.heldout_nll(model, tok, [long, short])
    assert (n_tokens, n_words) == (len(long) + 5, 14)


def test_embedded_policy_matches_its_model_card():
    """The policy asset's config is what its model card says (layers, width, heads, vocabulary, parameters), and
    the card gives the held-out perplexity and the pretraining steps its build recorded."""
    folder = Path(__file__).resolve().parents[2] / "assets" / "tiny-imdb-gpt2"
    config = json.loads((folder / "config.json").read_text())
    card = (folder / "README.md").read_text()
    stats = json.loads((folder / "training_stats.json").read_text())
    m = re.search(
        r"(\d+)-layer GPT-2 \(([\d.]+)M parameters, hidden size (\d+), (\d+) heads, context (\d+)\)"
        r".*?\(([\d,]+) tokens",
        card,
        re.S,
    )
    assert m, "model card lost its architecture sentence"
    layers, millions, width, heads, context, vocab = m.groups()
    assert (config["n_layer"], config["n_embd"], config["n_head"], config["n_positions"]) == (
        int(layers),
        int(width),
        int(heads),
        int(context),
    )
    assert config["vocab_size"] == int(vocab.replace(",", "")) and config["resid_pdrop"] == 0.0
    assert round(stats["parameters"] / 1e6, 2) == float(millions)
    assert f"{stats['heldout_perplexity']:.1f}" in card
    assert f"{stats['steps']:,} steps x {stats['batch']} sequences x {stats['block']} tokens" in card


def test_bench_generate_times_the_engines_decode_and_checks_it_against_generate(capsys, monkeypatch):
    """bench_generate's comparison means something only if the decode it times is the model's: it checks that the
    engine's decode, drawing as generate does, gives generate's tokens, and reports it."""
    monkeypatch.setattr(sys, "argv", ["bench_generate", "--completions", "3", "--new-tokens", "4", "--repeats", "1"])
    assert bench_generate.main() == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["lean_tokens_equal_generate"] is True
    timed = set(figures["seconds"])
    assert {"generate, dynamic cache (TRL's call)", "lean decode, inverse-CDF draws (engine)"} <= timed
