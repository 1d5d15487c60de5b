"""What copies on a sync target cost (``rloo_demo.store.sync``): the first copy of ended runs, a round that finds
nothing changed, a note copied again, and a restore into an empty runs folder, with a folder as the target.

    python scripts/bench_sync.py                    # 10 finished runs, each with the embedded policy as its model
    python scripts/bench_sync.py --runs 30 --target /mnt/bucket/rloo-bench

Each run is a finished run folder whose ``model/`` is the embedded policy (5.5 MB), as a trained run of it leaves,
with 150 metric lines. The target is a fresh folder under ``--target`` (default: a temporary folder on this disk;
name a mounted bucket to measure it). Times are wall-clock seconds, the median of ``--repeats`` tries.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rloo_demo.config import RunConfig
from rloo_demo.models.hub import ASSETS_DIR
from rloo_demo.store.folder import RunFolder
from rloo_demo.store.labels import write_notes
from rloo_demo.store.sync import DirectoryTarget, RunSync


def finished_runs(root: Path, count: int) -> list[RunFolder]:
    runs = []
    for i in range(count):
        run = RunFolder.create(RunConfig(output_dir=str(root), run_name=f"run-{i:03d}", max_steps=150))
        shutil.copytree(ASSETS_DIR / "tiny-imdb-gpt2", run.path / "model")
        for step in range(1, 151):
            run.append_metrics({"step": step, "reward": 0.004 * step, "kl": 0.01 * step, "step_time": 0.4})
        run.set_status("finished", step=150)
        runs.append(run)
    return runs


def timed(work) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = work()
    return time.perf_counter() - t0, out


def one_try(count: int, target_parent: str | None) -> dict[str, float]:
    """One try of each measure, on ``count`` new runs and a new target folder."""
    out = {}
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory(dir=target_parent) as target:
        here, fresh = Path(scratch) / "runs", Path(scratch) / "fresh"
        runs = finished_runs(here, count)
        sync = RunSync(DirectoryTarget(Path(target)))
        out["first copy"], copied = timed(lambda: sync.push_ended(here))
        assert len(copied) == count, copied
        out["nothing changed"], copied = timed(lambda: sync.push_ended(here))
        assert copied == [], copied
        write_notes(runs[0], note="copied again")
        out["a note again"], copied = timed(lambda: sync.push_ended(here))
        assert copied == [runs[0].name], copied
        out["restore"], restored = timed(lambda: RunSync(DirectoryTarget(Path(target))).restore(fresh))
        assert len(restored) == count, restored
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="finished runs to copy")
    parser.add_argument("--repeats", type=int, default=3, help="tries of each measure; the median is printed")
    parser.add_argument("--target", default=None, help="a folder to make the target in (default: a temporary one)")
    args = parser.parse_args()
    tries = [one_try(args.runs, args.target) for _ in range(args.repeats)]
    size = sum(p.stat().st_size for p in (ASSETS_DIR / "tiny-imdb-gpt2").rglob("*") if p.is_file()) / 1e6
    print(f"{args.runs} finished runs with a {size:.1f} MB model each; median of {args.repeats} tries")
    for name in tries[0]:
        median = statistics.median(t[name] for t in tries)
        print(f"{name:16s} {median:7.3f} s   ({median / args.runs * 1000:6.1f} ms a run)")


if __name__ == "__main__":
    main()
