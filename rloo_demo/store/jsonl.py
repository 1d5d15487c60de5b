"""Files a run writes and readers that never break on them: JSON lines, the rollout index, atomic writes.

Writers append whole lines and flush them step by step; readers take only complete lines. A torn last line (a
write in flight) is left for the writer to finish; a corrupt line (not UTF-8, not JSON, not an object) is skipped
and counted, never raised. Every JSONL reader of the package goes through ``read_jsonl_counted`` or
``RolloutIndex``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file, an fsync and a rename: a crash leaves the old file or the new, never
    half. The temporary name is unique, so two writers (the training thread and the SIGTERM handler both write
    ``status.json``) never share one; the last rename wins."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_config(config, path: str | Path) -> None:
    """Write a RunConfig as YAML (JSON for a .json path), atomically: a reader never sees half a file."""
    atomic_write_text(Path(path), config.to_text(path))


def read_jsonl_counted(path: Path, start: int = 0) -> tuple[list[dict], int, int]:
    """``(records, skipped, end)``: the complete JSON-object lines of a file from byte ``start``, how many lines
    were skipped as corrupt (not UTF-8, not JSON, not an object), and the byte offset after the last complete line.
    A last line without its newline is being written: it is neither read nor counted."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            chunk = f.read()
    except FileNotFoundError:
        return [], 0, start
    end = chunk.rfind(b"\n") + 1
    records, skipped = [], 0
    for line in chunk[:end].splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    return records, skipped, start + end


def read_jsonl(path: Path) -> list[dict]:
    """Complete JSON lines of a file; corrupt lines are skipped, a torn last line (a write in flight) waits."""
    return read_jsonl_counted(path)[0]


class RolloutIndex:
    """Byte ranges of ``rollouts.jsonl`` by step, extended incrementally, so one step is read without parsing the
    whole file: an idle page watching a finished 36 MB run costs a ``stat`` per tick, not a re-parse."""

    def __init__(self, path: Path):
        self.path = path
        self.offsets: dict[int, list[tuple[int, int]]] = {}
        self.scanned = 0
        self.skipped = 0
        self._identity: tuple | None = None
        self._lock = threading.Lock()

    def refresh(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.offsets, self.scanned, self._identity = {}, 0, None
            return
        identity = (st.st_dev, st.st_ino)
        if identity != self._identity or st.st_size < self.scanned:  # replaced or truncated: start over
            self.offsets, self.scanned, self.skipped, self._identity = {}, 0, 0, identity
        if st.st_size == self.scanned:
            return
        with open(self.path, "rb") as f:
            f.seek(self.scanned)
            chunk = f.read(st.st_size - self.scanned)
        pos = 0
        while True:
            nl = chunk.find(b"\n", pos)
            if nl < 0:
                break
            line = chunk[pos:nl]
            step = _step_of(line)
            if step is None:
                if line.strip():
                    self.skipped += 1
            else:
                self.offsets.setdefault(step, []).append((self.scanned + pos, nl - pos))
            pos = nl + 1
        self.scanned += pos

    def steps(self) -> list[int]:
        with self._lock:
            self.refresh()
            return sorted(self.offsets)

    def read(self, step: int) -> list[dict]:
        with self._lock:
            self.refresh()
            ranges = list(self.offsets.get(step, []))
        out = []
        if not ranges:
            return out
        with open(self.path, "rb") as f:
            for start, length in ranges:
                f.seek(start)
                try:
                    record = json.loads(f.read(length).decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError):
                    continue
                if isinstance(record, dict):
                    out.append(record)
        return out


_STEP = re.compile(rb'"step":\s*(\d+)')


def _step_of(line: bytes) -> int | None:
    """The step of one rollouts line. Groups are written with "step" as their first key, so a regex on the first
    bytes finds it without parsing the line; a line that does not parse is not indexed."""
    m = _STEP.search(line, 0, 64)
    if m is None:
        return None
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
