"""Tiny-scale runs of the asset build scripts, to show they still work.

``python -m pytest tests/test_build_scripts.py``
"""

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

from rloo_demo.data import load_embedded, split

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import build_policy  # noqa: E402
import build_reward_model  # noqa: E402

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
    from rloo_demo.sampling import sample
    from rloo_demo.training import load_policy

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
