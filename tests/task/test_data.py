"""Embedded data, the split and the prompt templates: ``python -m pytest tests/task/test_data.py``."""

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


# ----------------------------------------------------------------------------- local files, against what the test wrote


def _expected_prompts(texts, part, num_words):
    """The prompts of ``part`` worked out here: the hash rule's part, the first words, no repeats, in file order."""
    out = []
    for t in texts:
        prompt = " ".join(clean_text(t).split()[:num_words])
        if is_heldout(clean_text(t)) == (part == "heldout") and prompt not in out:
            out.append(prompt)
    return out


@pytest.mark.parametrize("kind", ["csv", "jsonl", "json-list", "json-object"])
def test_a_local_file_of_each_kind_gives_the_prompts_worked_out_here(tmp_path, kind):
    texts = [f"Review {i}<br />number {i % 7} was a <br /> film of {i} parts" for i in range(60)]
    rows = [{"body": t, "id": str(i)} for i, t in enumerate(texts)]
    if kind == "csv":
        path = tmp_path / "r.CSV"  # the suffix in any case
        path.write_text("id,body\n" + "".join(f'{r["id"]},"{r["body"]}"\n' for r in rows), encoding="utf-8")
    elif kind == "jsonl":
        path = tmp_path / "r.jsonl"
        path.write_text("\n\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")  # blank lines skipped
    else:
        path = tmp_path / "r.json"
        path.write_text(json.dumps(rows if kind == "json-list" else {"data": rows}), encoding="utf-8")
    for part in ("train", "heldout"):
        got = prompt_dataset(str(path), part=part, num_words=4, text_column="body")["prompt"]
        assert got == _expected_prompts(texts, part, 4), (kind, part)
    assert len(_expected_prompts(texts, "heldout", 4)) > 0  # both parts non-empty: the split is exercised


def test_a_file_of_finished_prompts_keeps_texts_and_messages_and_names_a_bad_row(tmp_path):
    given = [f"  Tell me about film {i}. " for i in range(40)] + [""] * 3
    chat = [[{"role": "user", "content": f"Film {i}?", "extra": 1}] for i in range(40)]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in given + chat), encoding="utf-8")
    got = prompt_dataset(str(path), part="train", template="chat", system_prompt="Be brief.")["prompt"]
    texts = [p.strip() for p in given if p.strip()] + [[{"role": "user", "content": m[0]["content"]}] for m in chat]
    from rloo_demo.chat import prompt_key

    expected = [
        [{"role": "system", "content": "Be brief."}, *([{"role": "user", "content": p}] if isinstance(p, str) else p)]
        for p in texts
        if not is_heldout(prompt_key(p))
    ]
    assert got == expected and len(expected) > 40
    with pytest.raises(DataError, match="need the chat template"):
        prompt_dataset(str(path), part="train", template="continuation")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": 7}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"^row 2 of '.*bad\.jsonl': a prompt must be a text or a list of messages"):
        prompt_dataset(str(bad))


@pytest.mark.parametrize(
    "name, body, needle",
    [
        ("a.csv", b"\xff\xfe,x\n", r"^data file 'a\.csv' cannot be read as csv: "),
        ("a.json", b"{", r"^data file 'a\.json' cannot be read as json: "),
        ("b.json", b"{}", r"^data file 'b\.json' cannot be read as json: "),  # an object without a list in it
        ("a.jsonl", b'{"text": 1}\n{oops\n', r"^data file 'a\.jsonl' cannot be read as jsonl: "),
        ("e.jsonl", b"\n\n", r"^data source '.*e\.jsonl' has no rows$"),
    ],
    ids=["csv-bytes", "json-syntax", "json-empty-object", "jsonl-line", "no-rows"],
)
def test_an_unreadable_local_file_is_named_with_its_kind(tmp_path, name, body, needle):
    (tmp_path / name).write_bytes(body)
    with pytest.raises(DataError, match=needle):
        load_texts(str(tmp_path / name))


def test_a_missing_column_names_the_columns_there_are(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"zeta": "x", "alpha": "y"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_texts(str(path), text_column="body")
    assert "has no column 'body'; its columns are ['alpha', 'zeta']. Pass --text-column" in str(err.value)
    path.write_text(json.dumps({"body": ""}) + "\n" + json.dumps({"body": "a <br />b"}) + "\n", encoding="utf-8")
    ds = load_texts(str(path), text_column="body")
    assert ds["text"] == ["a b"] and ds["heldout"] == [is_heldout("a b")]


def test_a_typed_prompt_as_the_run_saw_its_prompts(tmp_path):
    from rloo_demo.config import RunConfig
    from rloo_demo.task.data import as_run_prompt, run_prompts

    chat = RunConfig(prompt_template="chat", system_prompt="Be kind.", output_dir=str(tmp_path))
    assert as_run_prompt(chat, "Hi?", folder=tmp_path) == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi?"},
    ]
    plain = RunConfig(prompt_template="continuation")
    assert as_run_prompt(plain, "Hi?") == "Hi?"
    # auto: the folder's tokenizer decides (no chat template there: the text itself)
    assert as_run_prompt(RunConfig(prompt_template="auto"), "Hi?", folder=tmp_path) == "Hi?"
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    assert as_run_prompt(RunConfig(prompt_template="auto"), "Hi?", folder=tmp_path) == [
        {"role": "user", "content": "Hi?"}
    ]
    given = run_prompts(RunConfig(prompt_words=3), "heldout", limit=4)["prompt"]
    assert given == prompt_dataset(part="heldout", num_words=3, limit=4)["prompt"] and len(given) == 4
