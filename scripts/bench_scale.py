"""Benchmark data-parallel scaling: steps/s and completions/s for 1 and 2 processes at the same global batch, and for
2 processes at twice the batch, each run launched exactly as the web app's subprocess backend launches it.

    python scripts/bench_scale.py                     # 40 steps each, 4 prompts x K=4 = 16 completions per step
    python scripts/bench_scale.py --max-steps 60 --prompts-per-step 8

Threads: N processes on C cores get C // N torch threads each (``subprocess_job.threads_per_process``): on 2 cores,
1 process runs 2 threads and 2 processes run 1 thread each, so no setting oversubscribes the cores. A fourth row
runs the single process on 1 thread, to show what its second thread brings (on a machine shared with other work, an
OpenMP team of 2 threads on 2 busy cores can be far slower than 1 thread: its threads wait for each other).
Speed is taken from the run's own metrics.jsonl (seconds between the end of step ``--warmup`` and the last step),
so loading and process start-up are reported apart ("wall"). Each launch records its world size in status.json;
the script checks it, so a launch that silently ran one process cannot pass as two. The load average before and
after is printed: on a shared machine other work slows every row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rloo_demo.server.subprocess_job import accelerate_launch, threads_per_process
from rloo_demo.store.folder import open_run


def run_one(out: Path, name: str, processes: int, prompts_per_step: int, args, threads: int | None = None) -> dict:
    threads = threads or threads_per_process(processes)
    cmd = accelerate_launch(processes, threads=threads)
    cmd += ["-m", "rloo_demo", "train", "--output-dir", str(out), "--run-name", name]
    cmd += ["--max-steps", str(args.max_steps), "--prompts-per-step", str(prompts_per_step)]
    cmd += ["--num-generations", str(args.num_generations), "--max-new-tokens", str(args.max_new_tokens)]
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    wall = time.time() - t0
    if done.returncode != 0:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    run = open_run(out / name)
    world = run.status()["launch"]["world_size"]
    if world != processes:
        sys.exit(f"{name}: asked for {processes} processes, the run recorded a world size of {world}")
    metrics = run.metrics()
    warm = metrics[args.warmup - 1]
    steps = metrics[-1]["step"] - warm["step"]
    seconds = metrics[-1]["time"] - warm["time"]
    completions = prompts_per_step * args.num_generations
    return {
        "run": name,
        "processes": processes,
        "threads_per_process": threads,
        "completions_per_step": completions,
        "steps_per_s": round(steps / seconds, 3),
        "completions_per_s": round(steps * completions / seconds, 2),
        "wall_s": round(wall, 1),
        "reward_last": round(metrics[-1]["reward"], 3),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=40, help="steps per run (default: 40)")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the timing (default: 5)")
    parser.add_argument("--prompts-per-step", type=int, default=4, help="the base batch in prompts (default: 4)")
    parser.add_argument("--num-generations", type=int, default=4, help="K (default: 4)")
    parser.add_argument("--max-new-tokens", type=int, default=24, help="tokens per completion (default: 24)")
    parser.add_argument("--output-dir", default="runs/bench-scale", help="runs go here (default: runs/bench-scale)")
    args = parser.parse_args(argv)
    if not 0 < args.warmup < args.max_steps:
        parser.error("--warmup must be at least 1 and less than --max-steps")
    out = Path(args.output_dir) / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    load_before = os.getloadavg()
    p = args.prompts_per_step
    rows = [
        run_one(out, "1proc-batch1x", 1, p, args),
        run_one(out, "2proc-batch1x", 2, p, args),
        run_one(out, "2proc-batch2x", 2, 2 * p, args),
    ]
    if rows[0]["threads_per_process"] > 1:  # the same single process on one thread: what the threads bring
        rows.insert(1, run_one(out, "1proc-1thread", 1, p, args, threads=1))
    report = {
        "cores": len(os.sched_getaffinity(0)),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "max_steps": args.max_steps,
        "timed_steps": args.max_steps - args.warmup,
        "max_new_tokens": args.max_new_tokens,
        "rows": rows,
    }
    (out / "bench_scale.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'run':<15}{'procs':>6}{'threads':>8}{'batch':>7}{'steps/s':>9}{'compl/s':>9}{'wall s':>8}")
    for r in rows:
        print(
            f"{r['run']:<15}{r['processes']:>6}{r['threads_per_process']:>8}{r['completions_per_step']:>7}"
            f"{r['steps_per_s']:>9.2f}{r['completions_per_s']:>9.1f}{r['wall_s']:>8.1f}"
        )
    print(f"cores {report['cores']}, load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    print(f"written to {out / 'bench_scale.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
