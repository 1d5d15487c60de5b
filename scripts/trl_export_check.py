"""Does an exported run train with TRL's own ``trl rloo`` where this package is not installed? (measures, changes
nothing in the repository)

    python scripts/trl_export_check.py                  # a fresh venv in build/trl-check/, 2 steps
    python scripts/trl_export_check.py --steps 5 --keep # keep the venv for a second run (then it is reused)

1. Makes a fresh virtual environment (``build/trl-check/venv``) with TRL's requirements as requirements.txt pins them
   (torch, trl, transformers, datasets, accelerate, peft, vaderSentiment and their dependencies), installed as
   scripts/setup.sh installs them (pip as configured on the machine: the CPU torch from its find-links folder);
   this package is not installed there. Only this step uses the network; training runs offline.
2. Writes a finished run's folder (a RunConfig with non-default values and three rewards: VADER, the embedded
   classifier and the length penalty; no training is needed to export it) and exports it with
   ``python -m rloo_demo export-trl`` into ``build/trl-check/project``.
3. Runs ``<venv>/bin/trl rloo --config config.yaml --max_steps N`` in the project folder, offline, and reports the
   exit status, the wall time and the last lines TRL printed (its logged reward per step among them).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "trl-check"
# the requirements.txt pins TRL's script needs: its own, the rewards' and what they pull in
NEEDED = ("torch", "trl", "transformers", "tokenizers", "safetensors", "huggingface_hub", "datasets", "accelerate")
NEEDED += ("peft", "numpy", "pandas", "PyYAML", "tqdm", "psutil", "vaderSentiment")


def pins() -> list[str]:
    """The requirements.txt lines of ``NEEDED``, as pinned there."""
    wanted = {n.lower() for n in NEEDED}
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    return [line for line in lines if line and re.split(r"[=<>!~ ]", line)[0].lower() in wanted]


def make_venv(venv: Path) -> float:
    """A venv with ``pins()`` (reused when ``trl`` is already there); the seconds it took."""
    started = time.perf_counter()
    if not (venv / "bin" / "trl").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # as scripts/setup.sh installs: pip's own configuration (the CPU torch from its find-links folder)
        subprocess.run([*pip, *pins()], check=True)
    return time.perf_counter() - started


def write_run(runs: Path) -> Path:
    """A finished run folder, written as the app writes one (``RunFolder``)."""
    sys.path.insert(0, str(ROOT))
    from rloo_demo.config import RunConfig
    from rloo_demo.store.folder import RunFolder

    config = RunConfig(
        output_dir=str(runs),
        run_name="trl-check",
        rewards=["vader_compound", "sentiment_classifier", "length_penalty"],
        reward_weights=[1.0, 0.5, 0.25],
        num_generations=3,
        prompts_per_step=2,
        max_steps=40,
        learning_rate=3e-4,
        beta=0.1,
        max_new_tokens=16,
        seed=7,
    )
    run = RunFolder.create(config)
    run.set_status("finished", step=40)
    return run.path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="TRL's --max_steps (default: 2)")
    parser.add_argument("--keep", action="store_true", help="keep build/trl-check/venv for the next run")
    args = parser.parse_args()
    venv, project, runs = WORK / "venv", WORK / "project", WORK / "runs"
    for folder in (project, runs):
        shutil.rmtree(folder, ignore_errors=True)
    print(f"venv: {make_venv(venv):.0f} s", flush=True)
    run = write_run(runs)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        [sys.executable, "-m", "rloo_demo", "export-trl", "--run", str(run), "--out", str(project)], env=env, check=True
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clean |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [str(venv / "bin" / "trl"), "rloo", "--config", "config.yaml", "--max_steps", str(args.steps)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=project, env=clean, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    leaked = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import rloo_demo"], cwd=project, env=clean, capture_output=True
    )
    print(f"$ cd {project} && {' '.join(command[1:])}  (trl from {venv})")
    lines = (done.stdout + done.stderr).strip().splitlines()
    logged = [line for line in lines if "'reward'" in line]  # TRL prints each step's logs as a dict
    print("\n".join(logged or lines[-15:]))
    print(
        f"exit status {done.returncode} in {seconds:.0f} s; rloo_demo importable in the venv: {leaked.returncode == 0}"
    )
    if not args.keep:
        shutil.rmtree(venv, ignore_errors=True)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
