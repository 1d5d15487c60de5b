"""The persisted run folder: what a run leaves on disk, and how one run is created, written and read back.

    runs/<run name>/
        config.yaml       the RunConfig, loadable with ``--config``
        status.json       {"status": running | finished | stopped | failed, "error", "reason", "step", times, the
                          identity of the process that trains it}; "reason_message" beside a stop reason: its
                          translation key and parameters (``stop_reason`` reads both)
        metrics.jsonl     one line per optimisation step: everything TRL logs, plus step and elapsed time
        rollouts.jsonl    one line per prompt group per step: prompt, K completions, scores, KL, baseline, advantage
                          (and each completion's per-token record, ``rloo_demo.store.tokens``)
        snapshots/        policy snapshots every ``snapshot_every`` steps, for the probe (``engine.snapshots``)
        evaluation.json   the last base-vs-trained evaluation, when one was run
        notes.json        a label and a note a person gave the run (``store.labels``), when given
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
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.config import RunConfig, is_valid_run_name
from rloo_demo.errors import DiskFull, NotFound, UserError
from rloo_demo.i18n import Message, from_record, parse_english
from rloo_demo.store.jsonl import atomic_write_text, read_jsonl, read_jsonl_counted, save_config
from rloo_demo.store.modelcard import model_card
from rloo_demo.store.process import process_identity

STATUSES = ("running", "finished", "stopped", "failed")


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z.]+", "-", text).strip("-.")[:40]


def default_run_name(config: RunConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    policy = _slug(config.policy.split(":")[-1].split("/")[-1]) or "policy"
    return f"{stamp}-{policy}-k{config.num_generations}-b{config.beta:g}"


# ----------------------------------------------------------------------------- the run folder


def _is_disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def is_disk_full_error(exc: BaseException | None) -> bool:
    """Whether a failure means a full disk: ``DiskFull``, ``OSError`` ENOSPC / EDQUOT, or safetensors'
    ``SafetensorError``, whose Rust writer says "No space left on device (os error 28)" with no errno; also when
    one of these is the cause of ``exc`` (a library that wraps the error it met)."""
    for _ in range(8):  # the chain of causes, not forever
        if exc is None:
            return False
        if isinstance(exc, DiskFull) or (isinstance(exc, OSError) and _is_disk_full(exc)):
            return True
        text = str(exc)
        if type(exc).__name__ == "SafetensorError" and ("os error 28" in text or "No space left" in text):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def file_stamp(path: Path) -> tuple[int, int, int]:
    """``(mtime in ns, size, inode)`` of a file, ``(0, 0, 0)`` where there is none: a cached read of it is fresh
    while equal. The inode tells an atomic replacement (status.json, config.yaml) even within one mtime tick, and
    the size an append (the JSONL files)."""
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


SUMMARY_FILES = ("status.json", "config.yaml", "metrics.jsonl", "model/config.json")
_SUMMARIES: OrderedDict[str, tuple[tuple, dict]] = OrderedDict()  # run path -> (stamps of SUMMARY_FILES, summary)
_SUMMARIES_LOCK = threading.Lock()
MAX_CACHED_SUMMARIES = 1024


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
            raise UserError(Message("folder.bad_name", name=repr(name)))
        try:
            root.mkdir(parents=True, exist_ok=True)
            tmp = root / f".creating-{uuid.uuid4().hex[:12]}"
            tmp.mkdir()
            try:
                save_config(config, tmp / "config.yaml")
                RunFolder(tmp).set_status("running", **process_identity(), **status)
                path = cls._claim(root, name, tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        except OSError as exc:
            if _is_disk_full(exc):
                raise DiskFull(Message("folder.disk_full")) from None
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
        reason = extra.get("reason")
        if "reason" in extra:  # the English text for the CLI and old readers, the key beside it for a page
            extra["reason"] = str(reason) if reason is not None else None
            extra["reason_message"] = reason.record() if isinstance(reason, Message) else None
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
        tmp = self.path / ".model.tmp"
        try:
            return self._save_model(model, tokenizer, state_dict, tmp)
        except Exception as exc:
            if not is_disk_full_error(exc):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # half a model frees its room for the status write after it
            raise DiskFull(Message("folder.disk_full_saving")) from exc

    def _save_model(self, model, tokenizer, state_dict: dict | None, tmp: Path) -> Path:
        final = self.path / "model"
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

    def stop_reason(self) -> str | None:
        """Why the run stopped (``stop_reason`` of its status)."""
        return stop_reason(self.status())

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
        """Key figures for a run list: status, steps, first and last reward, KL. Never raises. Cached by the stamps
        of the files it reads: a list of 30 runs costs a few ``stat`` calls a run, not 30 parses of each file."""
        key = str(self.path)
        stamps = self.summary_stamps()
        with _SUMMARIES_LOCK:
            cached = _SUMMARIES.get(key)
            if cached is not None and cached[0] == stamps:
                _SUMMARIES.move_to_end(key)
                return dict(cached[1])
        summary = self._summary()
        with _SUMMARIES_LOCK:
            _SUMMARIES[key] = (stamps, summary)
            _SUMMARIES.move_to_end(key)
            while len(_SUMMARIES) > MAX_CACHED_SUMMARIES:
                _SUMMARIES.popitem(last=False)
        return dict(summary)

    def summary_stamps(self) -> tuple:
        """The stamps of the files a summary reads: equal stamps, equal summary."""
        return tuple(file_stamp(self.path / f) for f in SUMMARY_FILES)

    def _summary(self) -> dict:
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
    ``rloo_demo.models.hub.resolve_model`` turns into a folder), so the adapter loads on another machine."""
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
        raise NotFound(Message("folder.not_run", path=repr(str(p))))
    return RunFolder(p)


def stop_reason(status: dict) -> str | None:
    """A status's stop reason, as a ``Message`` a page can translate where it can be one: from the key and
    parameters stored beside the text, or, for a run stopped before they were stored, from an English text that
    reads as a known reason (``stop.*`` in en.json). Any other text (a file edited by hand) is returned as it is."""
    text = status.get("reason") if isinstance(status, dict) else None
    if not isinstance(text, str):
        return None
    return from_record(status.get("reason_message"), english=text) or parse_english(text, "stop.") or text
