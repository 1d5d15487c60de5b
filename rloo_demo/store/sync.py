"""Copies of ended runs on a sync target, so that a server's history survives a restart on a fresh disk (a Hugging
Face Space loses its disk on every restart).

Why copies and not the runs folder itself on the target: a mounted Storage Bucket holds its writes in memory and
uploads a file when it is closed, appends only, and locks nothing, so a crash loses what a run appended and two
writers are not kept apart. Runs therefore train in the crash-safe local runs folder (``RLOO_RUNS_DIR``), and only a
run that has ended (finished, stopped or failed) is copied to the target, as whole files written once:

    <target>/<run name>/<every file of the run folder, at the same relative path>
    <target>/<run name>/.synced.json     the commit marker: {"files": {path: [size, mtime_ns, sha256]}, "synced"}

A copy writes config.yaml and status.json first (so that even half a copy is a listable run), then the other
files, then the marker, last: a copy cut off half-way has no marker, or a marker that the files no longer match.
A file is never rewritten in place (a mount appends only): a changed one is removed and written again. A run
already copied is copied again when one of its files changed (a note edited after the run ended, an evaluation):
only the changed files, then a new marker.

On start-up, the runs missing from the runs folder are pulled from the target: a run whose marker's files all
arrive with their sizes and hashes is restored whole, byte for byte (and with its files' times, so it is not copied
back); any other (no marker, a file missing or different) is restored with what arrived and marked failed with an
"interrupted" error, as a run whose process died is, so that it shows in the Runs list instead of being lost. A
run folder is built under a hidden name and renamed into place, so the list never shows half of one.

What this module decides about a run's life: a run in training is never on the target (so a server killed
mid-run leaves nothing of that run there, and a restart on a fresh disk does not show it); pruning old runs is the
local disk's business and deletes nothing here (the target is the archive: a pruned run comes back on a restart on
a fresh disk, and the retention rules prune it again locally); a run a person deletes is deleted here too
(``forget``), its marker first.

Targets: a folder (a mounted volume, ``DirectoryTarget``) or a Storage Bucket through huggingface_hub's bucket API
(``BucketTarget``, ``hf://buckets/<namespace>/<name>[/<prefix>]``). Pure file work: the server decides when.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from rloo_demo.config import is_valid_run_name
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.listing import list_runs

log = logging.getLogger(__name__)

MARKER = ".synced.json"
FIRST = ("config.yaml", "status.json")  # copied before the rest: half a copy with these is still a run to list
INTERRUPTED = "interrupted: its copy on the sync target was cut off before it was complete"
_IN_MEMORY_BYTES = 1 << 20  # a file up to this size is read once, hashed and written from memory (no torn copy)
_CHUNK = 1 << 20

Manifest = dict[str, list]  # relative path -> [size, mtime_ns, sha256 hex]


# ----------------------------------------------------------------------------- targets


class Target(Protocol):
    """Where copies go. Paths are a run's name and a relative POSIX path inside it."""

    def runs(self) -> dict[str, set[str]]:
        """Every run folder on the target: its name and the relative paths of its files (the marker included)."""

    def read(self, name: str, rel: str) -> bytes | None:
        """A file's bytes, None when there is none."""

    def put(self, name: str, rel: str, source: Path | bytes) -> None:
        """Write a file whole (an existing one is removed first)."""

    def get(self, name: str, rel: str, dest: Path) -> bool:
        """Copy a file to ``dest``; False when the target has none."""

    def remove(self, name: str, rels: list[str]) -> None:
        """Remove these files of a run (and, where the target has folders, the run's folder once it is empty)."""


@dataclass
class DirectoryTarget:
    """A folder: a mounted volume (a Space's Storage Bucket mount, a network share) or any other directory."""

    root: Path

    def __post_init__(self):
        self.root = Path(self.root)

    def _path(self, name: str, rel: str) -> Path:
        return self.root / name / PurePosixPath(rel)

    def runs(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        try:
            names = [e.name for e in os.scandir(self.root) if e.is_dir() and not e.name.startswith(".")]
        except OSError:
            return out
        for name in names:
            base = self.root / name
            out[name] = {Path(d, f).relative_to(base).as_posix() for d, _, files in os.walk(base) for f in files}
        return out

    def read(self, name: str, rel: str) -> bytes | None:
        try:
            return self._path(name, rel).read_bytes()
        except OSError:
            return None

    def put(self, name: str, rel: str, source: Path | bytes) -> None:
        path = self._path(name, rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # a mount appends only: a file is written anew, never over
        if isinstance(source, bytes):
            with open(path, "wb") as f:
                f.write(source)
        else:
            with open(source, "rb") as src, open(path, "wb") as f:
                shutil.copyfileobj(src, f, _CHUNK)

    def get(self, name: str, rel: str, dest: Path) -> bool:
        try:
            shutil.copyfile(self._path(name, rel), dest)
        except FileNotFoundError:
            return False
        return True

    def remove(self, name: str, rels: list[str]) -> None:
        for rel in rels:
            self._path(name, rel).unlink(missing_ok=True)
        base = self.root / name
        for d, _, _ in sorted(os.walk(base), key=lambda w: len(w[0]), reverse=True):  # empty folders, deepest first
            try:
                os.rmdir(d)
            except OSError:
                pass


@dataclass
class BucketTarget:
    """A Hugging Face Storage Bucket through huggingface_hub's bucket API (``list_bucket_tree``,
    ``batch_bucket_files``, ``download_bucket_files``). Not run here (no machine of this project reaches the Hub):
    ``tests/store/test_sync.py`` pins the calls' names and parameters, and its round trip skips offline."""

    bucket_id: str
    prefix: str = ""
    api: object = None

    def __post_init__(self):
        if self.api is None:
            from huggingface_hub import HfApi  # only a server that syncs to a bucket builds a Hub client

            self.api = HfApi()

    def _path(self, name: str, rel: str) -> str:
        return "/".join(p for p in (self.prefix, name, rel) if p)

    def runs(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        head = f"{self.prefix}/" if self.prefix else ""
        for item in self.api.list_bucket_tree(self.bucket_id, prefix=self.prefix or None, recursive=True):
            if getattr(item, "type", None) != "file":  # a BucketFolder: its files are listed themselves
                continue
            path = item.path.removeprefix(head)  # the bucket's full path (were it the prefix's own, kept as it is)
            name, _, rel = path.partition("/")
            if rel:
                out.setdefault(name, set()).add(rel)
        return out

    def read(self, name: str, rel: str) -> bytes | None:
        with tempfile.TemporaryDirectory(prefix="rloo-sync-") as folder:
            tmp = Path(folder) / "file"
            return tmp.read_bytes() if self.get(name, rel, tmp) else None

    def put(self, name: str, rel: str, source: Path | bytes) -> None:
        self.api.batch_bucket_files(self.bucket_id, add=[(source, self._path(name, rel))])

    def get(self, name: str, rel: str, dest: Path) -> bool:
        from huggingface_hub.errors import EntryNotFoundError

        try:
            self.api.download_bucket_files(
                self.bucket_id, [(self._path(name, rel), str(dest))], raise_on_missing_files=True
            )
        except EntryNotFoundError:
            return False
        return dest.is_file()

    def remove(self, name: str, rels: list[str]) -> None:
        if rels:
            self.api.batch_bucket_files(self.bucket_id, delete=[self._path(name, r) for r in rels])


def open_target(spec: str, runs_dir: str | Path) -> Target | None:
    """The target ``RLOO_SYNC`` names: ``hf://buckets/<namespace>/<name>[/<prefix>]`` or a folder; None if empty.
    A malformed bucket address, or a folder that holds the runs folder or lies in it, stops the server with a clear
    error (an operator's setting, read at start-up): a copy onto its own source would remove the run's files."""
    spec = (spec or "").strip()
    if not spec:
        return None
    if spec.startswith("hf://"):
        parts = [p for p in spec.removeprefix("hf://").split("/") if p]
        if len(parts) < 3 or parts[0] != "buckets":
            raise SystemExit(f"error: RLOO_SYNC={spec!r}: a bucket is hf://buckets/<namespace>/<name>[/<prefix>]")
        return BucketTarget(f"{parts[1]}/{parts[2]}", "/".join(parts[3:]))
    root, runs = Path(spec).resolve(), Path(runs_dir).resolve()
    if root == runs or root in runs.parents or runs in root.parents:
        raise SystemExit(
            f"error: RLOO_SYNC={spec!r} and RLOO_RUNS_DIR={str(runs_dir)!r} overlap: runs train in a local folder "
            "and their copies go to another (docs/operating.md, 'History that survives a restart')"
        )
    return DirectoryTarget(root)


# ----------------------------------------------------------------------------- a run's files


def local_files(path: Path) -> dict[str, tuple[int, int]]:
    """A run folder's files: relative POSIX path -> (size, mtime_ns). Hidden names (a model being written, an atomic
    write's temporary file) are not the run's."""
    out = {}
    for d, dirs, files in os.walk(path):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for f in files:
            if f.startswith("."):
                continue
            p = Path(d, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not os.path.islink(p):
                out[p.relative_to(path).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _copy_order(rels) -> list[str]:
    return [r for r in FIRST if r in rels] + sorted(r for r in rels if r not in FIRST)


def _safe(rel: str) -> bool:
    """A marker's path names a visible file inside the run folder (a marker is read from elsewhere: no ``/x``, and
    no part starting with a dot, ``..`` included)."""
    p = PurePosixPath(rel)
    return bool(rel) and not p.is_absolute() and not any(x.startswith(".") for x in p.parts)


def read_marker(target: Target, name: str) -> Manifest | None:
    """The manifest a run's marker holds, None when it has none (or one that is not a manifest)."""
    raw = target.read(name, MARKER)
    try:
        files = json.loads(raw.decode("utf-8"))["files"] if raw is not None else None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(files, dict):
        return None
    ok = {k: v for k, v in files.items() if _safe(k) and _entry(v)}
    return ok if len(ok) == len(files) else None


def _entry(value) -> bool:
    """``[size, mtime_ns, sha256]``, as ``push_run`` writes it."""
    if not (isinstance(value, list) and len(value) == 3):
        return False
    size, mtime, digest = value
    whole = all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (size, mtime))
    return whole and isinstance(digest, str) and len(digest) == 64


def push_run(target: Target, run: RunFolder, manifest: Manifest | None = None) -> tuple[Manifest, bool]:
    """Copy an ended run to the target: the files that changed since ``manifest`` (the target's marker as last
    written; None: read it), FIRST ones first, the marker last, then the files no longer in the run removed.
    Returns the marker's manifest and whether anything was written."""
    old = read_marker(target, run.name) if manifest is None else manifest
    files = local_files(run.path)
    new: Manifest = {}
    changed = old is None
    for rel in _copy_order(files):
        size, mtime = files[rel]
        before = (old or {}).get(rel)
        if before is not None and before[0] == size and before[1] == mtime:
            new[rel] = before  # unchanged since its copy
            continue
        path = run.path / PurePosixPath(rel)
        if size <= _IN_MEMORY_BYTES:  # the bytes hashed are the bytes written, even if the file is replaced now
            data = path.read_bytes()
            target.put(run.name, rel, data)
            new[rel] = [len(data), mtime, hashlib.sha256(data).hexdigest()]
        else:  # large files (weights) are written once and never replaced
            new[rel] = [size, mtime, sha256_file(path)]
            target.put(run.name, rel, path)
        changed = True
    stale = sorted(set(old or {}) - set(new))
    if not (changed or stale):
        return old, False
    marker = {"files": new, "synced": time.time()}
    target.put(run.name, MARKER, (json.dumps(marker, indent=1, sort_keys=True) + "\n").encode())
    if stale:
        target.remove(run.name, stale)
    return new, True


def pull_run(target: Target, name: str, rels: set[str], runs_dir: Path) -> RunFolder | None:
    """Restore one run from the target into ``runs_dir`` (where it must be missing): whole when its marker's files
    all arrive as the marker says, else what arrived, marked failed as interrupted. None when not even its
    config.yaml is there (nothing to list) or the name is taken meanwhile."""
    manifest = read_marker(target, name)
    tmp = runs_dir / f".restoring-{uuid.uuid4().hex[:12]}"
    tmp.mkdir(parents=True)
    try:
        whole = manifest is not None
        wanted = manifest if manifest is not None else {r: None for r in rels if _safe(r)}
        for rel, entry in wanted.items():
            dest = tmp / PurePosixPath(rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not target.get(name, rel, dest):
                whole = False
                continue
            if entry is not None:
                size, mtime, digest = entry
                if dest.stat().st_size != size or sha256_file(dest) != digest:
                    whole = False
                os.utime(dest, ns=(mtime, mtime))  # its time as copied: the restored run is not copied back
        if not (tmp / "config.yaml").is_file():
            log.warning("sync: %s on the target has no config.yaml; left there, not restored", name)
            return None
        if not whole:
            run, st = RunFolder(tmp), RunFolder(tmp).status()
            before = None if st.get("unreadable") else st.get("status")  # what the copied status said, if it came
            run.set_status("failed", error=INTERRUPTED, status_before=before, finished=time.time())
        try:
            os.rename(tmp, runs_dir / name)
        except OSError:
            return None
        return RunFolder(runs_dir / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ended(run: RunFolder) -> bool:
    """Whether a run has ended, as its folder says (finished, stopped or failed, and readable). A run left 'running'
    by a process that is gone has not: the server marks it interrupted (failed) at start-up, and then it has."""
    st = run.status()
    return st.get("status") != "running" and not st.get("unreadable")


# ----------------------------------------------------------------------------- a server's sync


@dataclass
class RunSync:
    """One server's sync to one target: what it copied (each run's files as they were then), so that a round costs
    a ``stat`` of each ended run's files and copies only what changed."""

    target: Target
    _copied: dict[str, dict] = field(default_factory=dict)  # run name -> local_files() when last copied
    _manifests: dict[str, Manifest] = field(default_factory=dict)  # run name -> its marker on the target
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def restore(self, runs_dir: str | Path) -> list[str]:
        """Pull the runs the target has and ``runs_dir`` lacks; returns their names (whole and interrupted)."""
        runs_dir = Path(runs_dir)
        runs_dir.mkdir(parents=True, exist_ok=True)
        restored = []
        for name, rels in sorted(self.target.runs().items()):
            if not is_valid_run_name(name) or (runs_dir / name).exists():
                continue
            try:
                run = pull_run(self.target, name, rels, runs_dir)
            except OSError as exc:
                log.warning("sync: could not restore %s: %s", name, exc)
                continue
            if run is not None:
                restored.append(name)
        return restored

    def push_ended(self, runs_dir: str | Path, training: set[str] = frozenset()) -> list[str]:
        """Copy every ended run whose files changed since its last copy (never one named in ``training``); returns
        the names copied. A run that fails to copy is tried again on the next round."""
        pushed = []
        for run in list_runs(runs_dir):
            if run.name in training or not ended(run):
                continue
            files = local_files(run.path)
            if self._copied.get(run.name) == files:
                continue
            with self._lock:
                if not (run.path / "config.yaml").is_file():  # deleted meanwhile (``forget`` ran): no empty copy
                    continue
                try:
                    manifest, wrote = push_run(self.target, run, self._manifests.get(run.name))
                except OSError as exc:
                    log.warning("sync: could not copy %s: %s", run.name, exc)
                    continue
                self._manifests[run.name] = manifest
                self._copied[run.name] = files
                if wrote:
                    pushed.append(run.name)
        return pushed

    def forget(self, name: str) -> None:
        """Delete a run's copy (a person deleted the run): its marker first, so a cut-off delete reads as
        interrupted, never as a whole run."""
        with self._lock:
            self._copied.pop(name, None)
            self._manifests.pop(name, None)
            rels = self.target.runs().get(name, set())
            self.target.remove(name, [MARKER])
            self.target.remove(name, sorted(rels - {MARKER}))


def describe(target: Target) -> str:
    """The target for a log line."""
    if isinstance(target, BucketTarget):
        return f"hf://buckets/{target.bucket_id}" + (f"/{target.prefix}" if target.prefix else "")
    return str(getattr(target, "root", target))
