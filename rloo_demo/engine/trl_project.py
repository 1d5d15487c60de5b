"""A run as a TRL project, for the CLI (``python -m rloo_demo export-trl``) and the Runs tab's download: the run's
TRL settings (``trl_args.trl_settings``, the mapping its trainer used) written by ``store.trl_export``.

    python -m rloo_demo export-trl --run runs/<name> --out my-trl-project
    cd my-trl-project && trl rloo --config config.yaml
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import zipfile
from pathlib import Path

import trl

from rloo_demo.engine.trl_args import trl_settings
from rloo_demo.store.folder import RunFolder, open_run
from rloo_demo.store.trl_export import EXPORTABLE, write_trl_project

ZIP_SUFFIX = "-trl-project.zip"  # <run>-trl-project.zip, beside the run's other downloads (store.export)


def export_trl_project(run: RunFolder, out: Path) -> list[Path]:
    """The TRL project of a finished run, written into ``out`` (a new or empty folder); the files written."""
    return write_trl_project(run, Path(out), trl_settings(run.config(), run.name), trl.__version__)


def zip_trl_project(run: RunFolder, into: Path) -> None:
    """``<run>-trl-project.zip`` in ``into``, its files under one folder ``<run>-trl/``: an export builder of
    ``store.export.export_run``, which calls it for a run that is not training; a run that failed gets none."""
    if run.status().get("status") not in EXPORTABLE:
        return
    top = f"{run.name}-trl"
    work = Path(tempfile.mkdtemp(prefix=".trl-", dir=into))
    try:
        files = export_trl_project(run, work / top)
        with zipfile.ZipFile(into / f"{run.name}{ZIP_SUFFIX}", "w", zipfile.ZIP_DEFLATED) as z:
            for path in files:
                z.write(path, path.relative_to(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def add_command(sub) -> None:
    """``export-trl``: the subparser and its handler (``rloo_demo.cli.COMMAND_MODULES``)."""
    parser = sub.add_parser(
        "export-trl",
        help="write a finished run as a TRL project: config.yaml for `trl rloo`, prompts, rewards.py, README",
        description="Write a finished run as a project that TRL's own `trl rloo --config config.yaml` trains.",
    )
    parser.add_argument("--run", required=True, help="the run folder (runs/<name>); it must have finished or stopped")
    parser.add_argument("--out", required=True, help="the project folder to write (new, or empty)")
    parser.set_defaults(handler=cmd_export_trl)


def cmd_export_trl(args: argparse.Namespace) -> int:
    out = Path(args.out)
    files = export_trl_project(open_run(args.run), out)
    print(f"wrote {len(files)} files to {out}; train with TRL:\n  cd {out} && trl rloo --config config.yaml")
    return 0
