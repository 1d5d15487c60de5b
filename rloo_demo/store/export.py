"""A run's files as downloads: metrics as CSV, the config, the rollouts and the model as a zip, copied into an
export folder (gradio serves files from its temp folder, not from a runs folder elsewhere on the server).

Only a run that is done has exports: a run in training changes at every step, and each export of it would be one
more copy, in the export folder and in gradio's cache of the files it serves (a page's selections of a training
run once copied 173 MB in two minutes). One export is kept per run and state of its files, rebuilt only when the
run changed, and the folder is bounded: older exports are removed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import shutil
import zipfile
from pathlib import Path

from rloo_demo.store.folder import RunFolder


def _stamp(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def export_run(run: RunFolder, exports: Path, max_folders: int = 4) -> list[Path]:
    """The export files of ``run`` under ``exports`` (made if the run changed since the last export); none while
    the run trains (``status.json`` says running): its downloads are ready once it has finished."""
    if run.status().get("status") == "running":
        return []
    name = run.name
    stamp = "-".join(str(_stamp(run.path / f)) for f in ("status.json", "metrics.jsonl", "rollouts.jsonl"))
    digest = hashlib.sha1(stamp.encode()).hexdigest()[:10]
    folder = exports / f"{name}-{digest}"
    if not folder.is_dir():
        tmp = exports / f".{name}-{digest}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        records = run.metrics()
        keys = sorted({k for r in records for k in r}, key=lambda k: (k != "step", k))
        with open(tmp / f"{name}-metrics.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys or ["step"])
            writer.writeheader()
            writer.writerows(records)
        shutil.copyfile(run.path / "config.yaml", tmp / f"{name}-config.yaml")
        if (run.path / "rollouts.jsonl").is_file():
            shutil.copyfile(run.path / "rollouts.jsonl", tmp / f"{name}-rollouts.jsonl")
        if run.model_dir is not None:
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                for p in sorted(run.model_dir.rglob("*")):
                    if p.is_file():
                        z.write(p, Path("model") / p.relative_to(run.model_dir))
            (tmp / f"{name}-model.zip").write_bytes(buf.getvalue())
        tmp.rename(folder)
        prune_exports(exports, keep=folder, max_folders=max_folders)
    return sorted(folder.iterdir())


def prune_exports(exports: Path, keep: Path, max_folders: int = 4) -> None:
    """Keep ``keep`` and the newest ``max_folders - 1`` other exports."""
    folders = sorted(
        (p for p in exports.iterdir() if p.is_dir() and p != keep and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in folders[max_folders - 1 :]:
        shutil.rmtree(old, ignore_errors=True)
