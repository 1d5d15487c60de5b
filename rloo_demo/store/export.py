"""A run's files as downloads: metrics as CSV, the config, the rollouts and the model as a zip, copied into an
export folder (gradio serves files from its temp folder, not from a runs folder elsewhere on the server).

Only a run that is done has exports: a run in training changes at every step, and each export of it would be one
more copy, in the export folder and in gradio's cache of the files it serves (a page's selections of a training
run once copied 173 MB in two minutes). An export is built once per run and content: it is kept while its run is
on disk and unchanged, and replaced when the run changes (a note, a rename of its files) or goes. Kept four in all,
a page cycling through 30 runs' details re-zipped a model at every pick (a step 5.8 times slower). Builds are one
at a time, each in a folder of its own: two visitors exporting one run at once shared a temporary folder, and one
of them got a FileNotFoundError.
"""

from __future__ import annotations

import csv
import hashlib
import io
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

from rloo_demo.store.folder import RunFolder


def _stamp(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


_BUILDING = threading.Lock()  # one build at a time: a second asker of the same export waits, then finds it built
_DIGEST = 10  # hex digits of an export folder's content stamp: "<run>-<digest>"


def export_run(run: RunFolder, exports: Path, build: Callable[[RunFolder, Path], None] | None = None) -> list[Path]:
    """The export files of ``run`` under ``exports`` (built if this run and content has none yet); none while the
    run trains (``status.json`` says running): its downloads are ready once it has finished. ``build`` writes them
    into a folder (the run's files, ``_build``, unless given: the TRL project's zip has an exports folder of its
    own, ``rloo_demo.engine.trl_project``)."""
    if run.status().get("status") == "running":
        return []
    name = run.name
    stamp = "-".join(str(_stamp(run.path / f)) for f in ("status.json", "metrics.jsonl", "rollouts.jsonl"))
    digest = hashlib.sha1(stamp.encode()).hexdigest()[:_DIGEST]
    folder = exports / f"{name}-{digest}"
    with _BUILDING:
        if not folder.is_dir():
            exports.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=exports))  # this build's own
            try:
                (build or _build)(run, tmp)
                tmp.rename(folder)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            prune_exports(exports, run.path.parent, keep=folder)
        return sorted(folder.iterdir())


def _build(run: RunFolder, into: Path) -> None:
    name = run.name
    records = run.metrics()
    keys = sorted({k for r in records for k in r}, key=lambda k: (k != "step", k))
    with open(into / f"{name}-metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys or ["step"])
        writer.writeheader()
        writer.writerows(records)
    shutil.copyfile(run.path / "config.yaml", into / f"{name}-config.yaml")
    if (run.path / "rollouts.jsonl").is_file():
        shutil.copyfile(run.path / "rollouts.jsonl", into / f"{name}-rollouts.jsonl")
    if run.model_dir is not None:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(run.model_dir.rglob("*")):
                if p.is_file():
                    z.write(p, Path("model") / p.relative_to(run.model_dir))
        (into / f"{name}-model.zip").write_bytes(buf.getvalue())


def prune_exports(exports: Path, runs_dir: Path, keep: Path) -> list[str]:
    """Remove the exports that no run on disk has any more: another content of ``keep``'s run (older), those of
    runs deleted or pruned from ``runs_dir``, and a build's leftover (a dot folder: builds run one at a time, under
    the lock this is called in, so one found here died before its rename). Returns the folders removed."""
    run_of_keep = keep.name[: -_DIGEST - 1]
    removed = []
    for folder in exports.iterdir():
        if not folder.is_dir() or folder == keep:
            continue
        run = folder.name[: -_DIGEST - 1]
        if folder.name.startswith(".") or run == run_of_keep or not (runs_dir / run / "config.yaml").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed
