"""What a person adds to a run after the fact: a display name (the label) and a note, in ``notes.json`` in the run's
folder, and deleting a run's folder as a whole.

The run's name, its folder, stays what it was: rollouts links, arenas and the CLI name a run by it, so renaming
writes a label beside it instead of moving the folder. ``notes.json`` is replaced atomically (``atomic_write_text``),
so a reader sees the old label or the new one, and it survives a restart with the folder. Readers never break on it:
a missing, corrupt or oversized file reads as no label and no note.

Who may change or delete which run is the server's business (``rloo_demo.server.manage``); this module only writes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import unicodedata
import uuid
from pathlib import Path

from rloo_demo.store.folder import RunFolder
from rloo_demo.store.jsonl import atomic_write_text

NOTES_FILE = "notes.json"
MAX_LABEL_CHARS = 80
MAX_NOTE_CHARS = 2000
_MAX_FILE_BYTES = 64_000  # a notes.json past this was not written here: read as none rather than parsed


def clean_text(value: str, limit: int, one_line: bool) -> str:
    """A label or a note as stored: control characters out (a newline kept in a note), blanks trimmed. Refusing
    what is too long is the caller's job; ``limit`` only guards this layer against a caller that skipped it."""
    keep = {"\n"} if not one_line else set()
    out = "".join(c if c in keep or unicodedata.category(c)[0] != "C" else " " for c in value.replace("\r\n", "\n"))
    return out.strip()[:limit]


def read_notes(run: RunFolder) -> dict:
    """``{"label": str, "note": str}`` of a run; empty texts where it has none (or ``notes.json`` is unreadable)."""
    out = {"label": "", "note": ""}
    path = run.path / NOTES_FILE
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            return out
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return out
    if isinstance(data, dict):
        for key, limit, one_line in (("label", MAX_LABEL_CHARS, True), ("note", MAX_NOTE_CHARS, False)):
            if isinstance(data.get(key), str):
                out[key] = clean_text(data[key], limit, one_line)
    return out


def write_notes(run: RunFolder, label: str | None = None, note: str | None = None) -> dict:
    """Set a run's label and/or note (None: keep what it has; an empty text clears it); returns what is stored."""
    data = read_notes(run)
    if label is not None:
        data["label"] = clean_text(label, MAX_LABEL_CHARS, one_line=True)
    if note is not None:
        data["note"] = clean_text(note, MAX_NOTE_CHARS, one_line=False)
    atomic_write_text(run.path / NOTES_FILE, json.dumps({**data, "updated": time.time()}, indent=2) + "\n")
    return data


def notes_stamp(run: RunFolder) -> tuple[int, int, int]:
    """The stamp of ``notes.json``: a cached listing is fresh while it is equal."""
    try:
        st = os.stat(run.path / NOTES_FILE)
    except OSError:
        return (0, 0, 0)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def delete_folder(run: RunFolder) -> None:
    """Remove a run's folder: first renamed to a hidden name in the same runs folder (one atomic step, after which
    no listing shows it), then removed. A crash between the two leaves a hidden folder, which is not a run."""
    path = Path(run.path)
    hidden = path.with_name(f".deleting-{uuid.uuid4().hex[:12]}")
    os.rename(path, hidden)
    shutil.rmtree(hidden, ignore_errors=True)
