"""The persisted run folder: what a run leaves on disk, and how runs are listed and reloaded.

    runs/<run name>/
        config.yaml       the RunConfig, loadable with ``--config``
        status.json       {"status": running | finished | stopped | failed, "error": ..., "step": ..., times}
        metrics.jsonl     one line per optimisation step: everything TRL logs, plus step and elapsed time
        rollouts.jsonl    one line per prompt group per step: prompt, K completions, scores, KL, baseline, advantage
        evaluation.json   the last base-vs-trained evaluation, when one was run
        model/            trained policy and tokenizer; appears only when complete (written to .model.tmp, renamed)

Lines are appended and flushed step by step, so a crash loses at most the step in flight. Only the main process
of a multi-process run writes here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.config import RunConfig

STATUSES = ("running", "finished", "stopped", "failed")


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z.]+", "-", text).strip("-")[:40]


def default_run_name(config: RunConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    policy = _slug(config.policy.split(":")[-1].split("/")[-1])
    return f"{stamp}-{policy}-k{config.num_generations}-b{config.beta:g}"


def read_jsonl(path: Path) -> list[dict]:
    """Complete JSON lines of a file; a torn last line (a crash mid-write) is ignored."""
    if not path.is_file():
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return out


@dataclass
class RunFolder:
    path: Path

    # ------------------------------------------------------------------ creation

    @classmethod
    def create(cls, config: RunConfig) -> RunFolder:
        root = Path(config.output_dir)
        name = config.run_name or default_run_name(config)
        path = root / name
        suffix = 1
        while path.exists():  # never overwrite an earlier run
            suffix += 1
            path = root / f"{name}-{suffix}"
        path.mkdir(parents=True)
        run = cls(path)
        config.save(path / "config.yaml")
        run.set_status("running")
        return run

    @property
    def name(self) -> str:
        return self.path.name

    # ------------------------------------------------------------------ writing

    def set_status(self, status: str, error: str | None = None, **extra) -> None:
        assert status in STATUSES, status
        now = time.time()
        data = self.status() if (self.path / "status.json").is_file() else {"created": now}
        data.update(status=status, error=error, updated=now, **extra)
        tmp = self.path / ".status.json.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.path / "status.json")  # atomic: readers never see half a status

    _lock = threading.Lock()

    def _append(self, filename: str, records: list[dict]) -> None:
        with self._lock, open(self.path / filename, "a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
            f.flush()

    def append_metrics(self, record: dict) -> None:
        self._append("metrics.jsonl", [record])

    def append_rollouts(self, step: int, groups: list[dict]) -> None:
        self._append("rollouts.jsonl", groups)

    def save_model(self, model, tokenizer, state_dict: dict | None = None) -> Path:
        """Write ``model/`` so that it exists only when complete: write to a temporary folder, then rename.
        ``state_dict``: the full weights, gathered from the ranks of a sharded engine (FSDP, ZeRO-3)."""
        final = self.path / "model"
        tmp = self.path / ".model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        if hasattr(model, "merge_and_unload"):  # a PEFT model: keep the adapter, and a merged model that loads alone
            model.save_pretrained(tmp / "adapter")
            tokenizer.save_pretrained(tmp / "adapter")
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
        tmp = self.path / f".{filename}.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.path / filename)

    # ------------------------------------------------------------------ reading

    def config(self) -> RunConfig:
        return RunConfig.load(self.path / "config.yaml")

    def status(self) -> dict:
        try:
            return json.loads((self.path / "status.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"status": "failed", "error": "status.json is missing or unreadable"}

    def metrics(self) -> list[dict]:
        return read_jsonl(self.path / "metrics.jsonl")

    def rollouts(self, step: int | None = None) -> list[dict]:
        rows = read_jsonl(self.path / "rollouts.jsonl")
        return rows if step is None else [r for r in rows if r["step"] == step]

    def evaluation(self) -> dict | None:
        p = self.path / "evaluation.json"
        return json.loads(p.read_text()) if p.is_file() else None

    @property
    def model_dir(self) -> Path | None:
        p = self.path / "model"
        return p if (p / "config.json").is_file() else None

    def summary(self) -> dict:
        """Key figures for a run list: status, steps, first and last reward, KL."""
        metrics = self.metrics()
        st = self.status()
        first, last = (metrics[0], metrics[-1]) if metrics else ({}, {})
        return {
            "name": self.name,
            "status": st.get("status"),
            "error": st.get("error"),
            "steps": last.get("step", 0),
            "max_steps": last.get("max_steps"),
            "reward_first": first.get("reward"),
            "reward_last": last.get("reward"),
            "kl_last": last.get("kl"),
            "created": st.get("created"),
            "has_model": self.model_dir is not None,
        }


def open_run(path: str | Path) -> RunFolder:
    """A run folder given its path; raises ``FileNotFoundError`` with a clear message if it is not one."""
    p = Path(path)
    if not (p / "config.yaml").is_file():
        raise FileNotFoundError(f"{str(p)!r} is not a run folder (no config.yaml)")
    return RunFolder(p)


def list_runs(root: str | Path = "runs") -> list[RunFolder]:
    """Run folders under ``root``, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    runs = [RunFolder(p) for p in root.iterdir() if (p / "config.yaml").is_file()]
    return sorted(runs, key=lambda r: r.status().get("created", 0), reverse=True)


def mark_interrupted(root: str | Path = "runs") -> list[str]:
    """Runs left 'running' by a process that died (a server restart): mark them failed. Returns their names."""
    names = []
    for run in list_runs(root):
        st = run.status()
        if st.get("status") == "running" and st.get("pid") and not _alive(st["pid"]):
            run.set_status("failed", error="interrupted: the process that ran it exited before it finished")
            names.append(run.name)
    return names


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
