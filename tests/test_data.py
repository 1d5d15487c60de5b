"""Embedded data, the split and the prompt templates: ``python -m pytest tests/test_data.py``."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from rloo_demo.errors import DataError
from rloo_demo.task.data import (
    INSTRUCTION_TEMPLATE,
    clean_text,
    continuation_prompt,
    instruction_prompt,
    is_heldout,
    load_embedded,
    load_texts,
    prompt_dataset,
    split,
)


def test_embedded_imdb_is_complete_and_clean():
    imdb = load_embedded("imdb")
    assert len(imdb) == 25_000
    assert sorted(set(imdb["label"])) == [0, 1]
    assert not any("<br" in t for t in imdb["text"][:5000])
    rt = load_embedded("rotten_tomatoes")
    assert len(rt) == 8_530


def test_clean_text():
    assert clean_text("Great.<br /><br />Really   great<BR/>!") == "Great. Really great !"


def test_split_is_deterministic_and_disjoint():
    imdb = load_embedded("imdb")
    train, held = split(imdb, "train"), split(imdb, "heldout")
    assert len(train) + len(held) == len(imdb)
    assert 0.08 < len(held) / len(imdb) < 0.12
    assert not set(train["text"]) & set(held["text"])  # duplicates land on one side
    assert all(is_heldout(t) for t in held["text"][:200]) and not any(is_heldout(t) for t in train["text"][:200])


def test_split_is_the_same_in_another_process():
    """The split is a pure function of each text: a fresh process, with another string-hash seed and nothing
    cached, puts the same reviews on the held-out side."""
    code = (
        "import hashlib; from rloo_demo.task.data import load_embedded, split; "
        "held = split(load_embedded('imdb'), 'heldout')['text']; "
        "print(len(held), hashlib.sha1('\\n'.join(held).encode()).hexdigest())"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    held = split(load_embedded("imdb"), "heldout")["text"]
    assert out.split() == [str(len(held)), hashlib.sha1("\n".join(held).encode()).hexdigest()]


def test_heldout_prompts_are_disjoint_from_training_prompts():
    train = set(prompt_dataset(part="train")["prompt"])
    held = prompt_dataset(part="heldout")["prompt"]
    assert len(held) > 1000
    assert not train & set(held)


def test_continuation_template():
    assert continuation_prompt("one two three four five", 3) == "one two three"
    ds = prompt_dataset(template="continuation", num_words=6, limit=20)
    assert len(ds) == 20
    assert all(len(p.split()) <= 6 for p in ds["prompt"])


def test_instruction_template():
    p = instruction_prompt("A warm film with a great cast. " * 50)
    assert p.startswith("Write one short, clearly positive movie comment in English.")
    assert p.endswith("Positive comment:")
    assert len(p) < len(INSTRUCTION_TEMPLATE) + 710
    ds = prompt_dataset(template="instruction", limit=3)
    assert all("IMDB review excerpt" in x for x in ds["prompt"])


def test_unknown_template():
    with pytest.raises(ValueError, match="unknown prompt template"):
        prompt_dataset(template="bogus", limit=1)
    with pytest.raises(ValueError, match="unknown prompt template"):  # "auto" is resolved before a dataset is built
        prompt_dataset(template="auto", limit=1)


def test_local_csv_and_jsonl_sources(tmp_path):
    csv_path = tmp_path / "r.csv"
    csv_path.write_text("id,body\n" + "\n".join(f"{i},review number {i} was a lovely film" for i in range(40)))
    ds = load_texts(str(csv_path), text_column="body")
    assert len(ds) == 40 and "heldout" in ds.column_names
    jl = tmp_path / "r.jsonl"
    jl.write_text("\n".join(json.dumps({"text": f"line {i} of a review"}) for i in range(30)))
    prompts = prompt_dataset(str(jl), part="train", num_words=2)["prompt"]
    assert prompts and all(p.startswith("line") for p in prompts)
    with pytest.raises(DataError, match="no column 'text'"):
        load_texts(str(csv_path))
    with pytest.raises(DataError, match="does not exist"):
        load_texts(str(tmp_path / "missing.csv"))


def test_prompts_are_built_once_per_source_version(tmp_path, monkeypatch):
    """The web app asks for held-out prompts on every Compare and Evaluate; building them is ~0.5 s of pure Python
    that stalls a training thread next door (measured: a Compare tab refresh slowed the next steps 3-6x). They are
    built once; a local file that changes is read again."""
    import rloo_demo.task.data as data

    calls = []
    real = data.build_prompt
    monkeypatch.setattr(data, "build_prompt", lambda *a, **k: calls.append(1) or real(*a, **k))
    data._prompt_list.cache_clear()
    first = prompt_dataset(part="heldout", limit=7)["prompt"]
    built = len(calls)
    assert built > 1000  # the first call builds every training prompt, to keep held-out prompts disjoint
    assert prompt_dataset(part="heldout", limit=7)["prompt"] == first
    assert len(calls) == built  # the second builds none

    jl = tmp_path / "r.jsonl"
    jl.write_text("\n".join(json.dumps({"text": f"old line {i} of a review"}) for i in range(30)))
    assert all(p.startswith("old") for p in prompt_dataset(str(jl), part="train", num_words=2)["prompt"])
    jl.write_text("\n".join(json.dumps({"text": f"new line {i} of a longer review"}) for i in range(31)))
    assert all(p.startswith("new") for p in prompt_dataset(str(jl), part="train", num_words=2)["prompt"])


def test_cached_chat_prompts_cannot_be_changed_by_a_caller():
    """A caller that edits the messages it got back must not change what the next caller gets."""
    first = prompt_dataset(part="heldout", template="chat", limit=2, system_prompt="Be kind.")["prompt"]
    first[0][0]["content"] = "edited"
    again = prompt_dataset(part="heldout", template="chat", limit=2, system_prompt="Be kind.")["prompt"]
    assert again[0][0]["content"] == "Be kind."
