"""The persisted run folder: what a run leaves on disk, and how runs are listed, reloaded and pruned.

    runs/<run name>/
        config.yaml       the RunConfig, loadable with ``--config``
        status.json       {"status": running | finished | stopped | failed, "error", "reason", "step", times, the
                          identity of the process that trains it}
        metrics.jsonl     one line per optimisation step: everything TRL logs, plus step and elapsed time
        rollouts.jsonl    one line per prompt group per step: prompt, K completions, scores, KL, baseline, advantage
                          (and each completion's per-token record, ``rloo_demo.tokens``)
        snapshots/        policy snapshots every ``snapshot_every`` steps, for the probe (``rloo_demo.snapshots``)
        evaluation.json   the last base-vs-trained evaluation, when one was run
        model/            trained policy and tokenizer; appears only when complete (written to .model.tmp, renamed)

Crash safety: a run folder appears whole or not at all (it is built under a hidden name and renamed), status and
config are replaced atomically, JSON lines are appended and flushed step by step (a crash loses at most the step in
flight), and ``model/`` appears only when complete. Only the main process of a multi-process run writes here.

Readers never break on what they find: a torn last line is left for the writer to finish, a corrupt line is skipped
and counted, and a run whose files cannot be read (corrupt, not UTF-8, written by another version) is listed as
"unreadable: <reason>" instead of taking the list down with it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.config import RunConfig, atomic_write_text, is_valid_run_name
from rloo_demo.errors import DiskFull, NotFound, UserError

STATUSES = ("running", "finished", "stopped", "failed")
FINAL_STATUSES = ("finished", "stopped", "failed")


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z.]+", "-", text).strip("-.")[:40]


def default_run_name(config: RunConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    policy = _slug(config.policy.split(":")[-1].split("/")[-1]) or "policy"
    return f"{stamp}-{policy}-k{config.num_generations}-b{config.beta:g}"


# ----------------------------------------------------------------------------- JSON lines


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


# ----------------------------------------------------------------------------- the process that trains a run


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """When a process started (clock ticks since boot), from /proc; None where there is no /proc or no process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name in (...) may hold spaces
    except (IndexError, ValueError):
        return None


def process_identity(pid: int | None = None) -> dict:
    """Who trains a run: the pid alone is not enough, because in a container the app is PID 1 on every boot. The
    boot id and the process's start time tell a restarted server from the one that wrote the status."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "boot_id": _boot_id(), "pid_start": _start_ticks(pid)}


def is_alive(status: dict) -> bool:
    """Whether the process recorded in a status is still the one running."""
    pid = status.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    boot = status.get("boot_id")
    if boot and _boot_id() and boot != _boot_id():
        return False
    recorded = status.get("pid_start")
    if isinstance(recorded, int):
        return _start_ticks(pid) == recorded
    try:  # a status written without /proc: the pid is all there is
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ----------------------------------------------------------------------------- the run folder


def _is_disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


@dataclass
class RunFolder:
    path: Path

    # ------------------------------------------------------------------ creation

    @classmethod
    def create(cls, config: RunConfig, **status) -> RunFolder:
        """A new run folder with config.yaml and status.json, made under a hidden name and renamed into place, so
        that it appears complete or not at all. Never overwrites an earlier run: a taken name gets a suffix."""
        root = Path(config.output_dir)
        name = config.run_name or default_run_name(config)
        if not is_valid_run_name(name):
            raise UserError(f"run name {name!r} is not allowed")
        try:
            root.mkdir(parents=True, exist_ok=True)
            tmp = root / f".creating-{uuid.uuid4().hex[:12]}"
            tmp.mkdir()
            try:
                config.save(tmp / "config.yaml")
                RunFolder(tmp).set_status("running", **process_identity(), **status)
                path = cls._claim(root, name, tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        except OSError as exc:
            if _is_disk_full(exc):
                raise DiskFull("the server's disk is full: no new run can be saved until space is freed") from None
            raise
        return cls(path)

    @staticmethod
    def _claim(root: Path, name: str, tmp: Path) -> Path:
        suffix = 1
        while True:
            path = root / (name if suffix == 1 else f"{name}-{suffix}")
            if not path.exists():
                try:
                    os.rename(tmp, path)  # fails if another process made a non-empty folder of that name meanwhile
                    return path
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
            suffix += 1

    @property
    def name(self) -> str:
        return self.path.name

    # ------------------------------------------------------------------ writing

    def set_status(self, status: str, error: str | None = None, **extra) -> None:
        """Replace status.json atomically (readers never see half a status); earlier keys are kept."""
        assert status in STATUSES, status
        now = time.time()
        data = self.status() if (self.path / "status.json").is_file() else {"created": now}
        data.pop("unreadable", None)
        data.update(status=status, error=error, updated=now, **extra)
        atomic_write_text(self.path / "status.json", json.dumps(data, indent=2) + "\n")

    _lock = threading.Lock()

    def _append(self, filename: str, records: list[dict], compact: bool = False) -> None:
        separators = (",", ":") if compact else None
        with self._lock, open(self.path / filename, "a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, separators=separators) + "\n")
            f.flush()

    def append_metrics(self, record: dict) -> None:
        self._append("metrics.jsonl", [record])

    def append_rollouts(self, step: int, groups: list[dict]) -> None:
        # Without the blanks after ',' and ':' the per-token lists take about a tenth less room.
        self._append("rollouts.jsonl", groups, compact=True)

    def save_model(self, model, tokenizer, state_dict: dict | None = None) -> Path:
        """Write ``model/`` so that it exists only when complete: write to a temporary folder, then rename.
        ``state_dict``: the full weights, gathered from the ranks of a sharded engine (FSDP, ZeRO-3)."""
        final = self.path / "model"
        tmp = self.path / ".model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        if hasattr(model, "merge_and_unload"):  # a PEFT model: keep the adapter, and a merged model that loads alone
            model.save_pretrained(tmp / "adapter")
            tokenizer.save_pretrained(tmp / "adapter")
            portable_adapter_config(tmp / "adapter", self.config().policy)
            model = model.merge_and_unload()
        model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)
        self._write_card(tmp)
        if final.exists():
            old = self.path / ".model.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        return final

    def _write_card(self, folder: Path) -> None:
        from rloo_demo.modelcard import model_card

        (folder / "README.md").write_text(model_card(self.config(), self.metrics(), self.evaluation()))

    def write_evaluation(self, result: dict) -> None:
        """Save an evaluation and add its figures to the model card."""
        self.write_json("evaluation.json", result)
        if self.model_dir is not None:
            self._write_card(self.model_dir)

    def write_json(self, filename: str, data: dict) -> None:
        atomic_write_text(self.path / filename, json.dumps(data, indent=2) + "\n")

    # ------------------------------------------------------------------ reading

    def config(self) -> RunConfig:
        return RunConfig.load(self.path / "config.yaml")

    def status(self) -> dict:
        """The status; a missing or corrupt status.json reads as failed, with ``unreadable`` saying why."""
        try:
            data = json.loads((self.path / "status.json").read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return {"status": "failed", "error": "status.json is missing", "unreadable": "status.json is missing"}
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            reason = f"status.json is corrupt ({type(exc).__name__})"
            return {"status": "failed", "error": reason, "unreadable": reason}
        if not isinstance(data, dict) or data.get("status") not in STATUSES:
            reason = "status.json has no valid status"
            return {"status": "failed", "error": reason, "unreadable": reason}
        return data

    def metrics(self) -> list[dict]:
        return read_jsonl(self.path / "metrics.jsonl")

    def rollouts(self, step: int | None = None) -> list[dict]:
        rows = read_jsonl(self.path / "rollouts.jsonl")
        return rows if step is None else [r for r in rows if r.get("step") == step]

    def evaluation(self) -> dict | None:
        p = self.path / "evaluation.json"
        try:
            data = json.loads(p.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    @property
    def model_dir(self) -> Path | None:
        p = self.path / "model"
        return p if (p / "config.json").is_file() else None

    def unreadable(self) -> str | None:
        """Why this run cannot be shown (a corrupt, old or non-UTF-8 file), or None when it can."""
        reason = self.status().get("unreadable")
        if reason:
            return reason
        try:
            self.config()
        except UserError as exc:
            return f"config.yaml: {exc}"
        except OSError as exc:
            return f"config.yaml: {exc.strerror or type(exc).__name__}"
        return None

    def summary(self) -> dict:
        """Key figures for a run list: status, steps, first and last reward, KL. Never raises."""
        st = self.status()
        reason = self.unreadable()
        out = {
            "name": self.name,
            "status": f"unreadable: {reason}" if reason else st.get("status"),
            "error": st.get("error"),
            "reason": st.get("reason"),
            "steps": 0,
            "max_steps": None,
            "reward_first": None,
            "reward_last": None,
            "kl_last": None,
            "created": st.get("created") if isinstance(st.get("created"), int | float) else None,
            "has_model": self.model_dir is not None,
        }
        if reason:
            return out
        metrics, skipped, _ = read_jsonl_counted(self.path / "metrics.jsonl")
        first, last = (metrics[0], metrics[-1]) if metrics else ({}, {})
        out.update(
            steps=_number(last.get("step")) or 0,
            max_steps=_number(last.get("max_steps")),
            reward_first=_number(first.get("reward")),
            reward_last=_number(last.get("reward")),
            kl_last=_number(last.get("kl")),
            skipped_lines=skipped,
        )
        return out


def portable_adapter_config(folder: Path, base_model: str) -> None:
    """PEFT writes the base model's local folder (an HF cache snapshot, or this checkout's assets) into
    ``adapter_config.json``; record the policy's name instead (a hub id, or ``embedded:<asset>``, which
    ``rloo_demo.hub.resolve_model`` turns into a folder), so the adapter loads on another machine."""
    path = folder / "adapter_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["base_model_name_or_path"] = base_model
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _number(value):
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def open_run(path: str | Path) -> RunFolder:
    """A run folder given its path; raises ``NotFound`` with a clear message if it is not one."""
    p = Path(path)
    if not (p / "config.yaml").is_file():
        raise NotFound(f"{str(p)!r} is not a run folder (no config.yaml)")
    return RunFolder(p)


def list_runs(root: str | Path = "runs") -> list[RunFolder]:
    """Run folders under ``root``, newest first. Hidden folders (runs being made, exports) are not runs."""
    root = Path(root)
    try:
        candidates = [p for p in root.iterdir() if not p.name.startswith(".") and (p / "config.yaml").is_file()]
    except OSError:
        return []
    runs = [RunFolder(p) for p in candidates]

    def created(run: RunFolder) -> float:
        value = run.status().get("created")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            return run.path.stat().st_mtime
        except OSError:
            return 0.0

    return sorted(runs, key=created, reverse=True)


def mark_interrupted(root: str | Path = "runs") -> list[str]:
    """Runs left 'running' by a process that is gone (a server restart, a crash): mark them failed."""
    names = []
    for run in list_runs(root):
        st = run.status()
        if st.get("status") == "running" and not st.get("unreadable") and not is_alive(st):
            try:
                run.set_status("failed", error="interrupted: the process that ran it exited before it finished")
            except OSError:
                continue
            names.append(run.name)
    return names


def folder_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def prune_runs(root: str | Path, keep: int | None, max_mb: float | None, protect: set[str] = frozenset()) -> list[str]:
    """Delete the oldest runs that are not running until at most ``keep`` remain and they take at most ``max_mb``.
    A run in training (or named in ``protect``) is never deleted. Returns the names deleted."""
    if keep is None and max_mb is None:
        return []
    runs = list_runs(root)  # newest first
    sizes = {r.name: folder_bytes(r.path) for r in runs}
    total = sum(sizes.values())
    deleted = []
    for run in reversed(runs):
        too_many = keep is not None and len(runs) - len(deleted) > keep
        too_big = max_mb is not None and total > max_mb * 1e6
        if not (too_many or too_big):
            break
        st = run.status()
        if run.name in protect or (st.get("status") == "running" and is_alive(st)):
            continue
        shutil.rmtree(run.path, ignore_errors=True)
        total -= sizes[run.name]
        deleted.append(run.name)
    return deleted
