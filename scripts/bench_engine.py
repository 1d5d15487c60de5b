"""Benchmark the engine: is its RLOO step faster than TRL's own, and does the default run still learn?

    python scripts/bench_engine.py                  # step times (TRL vs engine), the default run, its evaluation
    python scripts/bench_engine.py --compare-old    # and the engine and policy before issue 11 (commit b534667)
    python scripts/bench_engine.py --ablation       # each saving on its own
    python scripts/bench_engine.py --steps-only --offset-variant 1   # the engine with a reward offset too (#26)
    python scripts/bench_engine.py --steps-only     # step times only
    python scripts/bench_engine.py --max-steps 20   # any RunConfig flag for the default run
    python scripts/bench_engine.py --variance-every 50 --paired --no-eval --no-step-compare   # meter cost (#9)
    python scripts/bench_engine.py --tokens-overhead --repeats 2   # what issue #10's record costs (see below)

1. **Step time, side by side.** On the same policy and run settings (the defaults: 16 completions x 24 tokens),
   TRL's bare ``RLOOTrainer`` with its default ``RLOOConfig`` and the engine's trainer each train
   ``--bench-steps`` steps, alternating for ``--rounds`` rounds so that a busy neighbour on a shared machine slows
   both alike. A step is timed from ``on_step_begin`` to ``on_step_end`` (generation, scoring, loss, backward,
   optimiser; wall and CPU time), the first 2 steps of each run left out as warm-up; the medians are compared.
   Target (issue 11): engine <= 0.8 x TRL.
2. **The default run**, as a user starts it: wall time including model loading, and the sum of TRL's
   ``step_time``; with ``--compare-old`` the same for the code and policy of commit b534667, each in a fresh
   process run the same way. Target: no longer than the old run.
3. **Does it learn**: trained minus base reward on 64 held-out prompts x 2 samples with its 95% bootstrap
   interval, the held-out scorer, the KL to the base, and the real-word rate of the trained samples
   (``scripts/eval_policy.py``'s measure). Targets: gain >= 0.4 with the interval above 0; real-word rate >= 0.95.

Figures go to stdout and, as JSON, to ``<run>/bench.json``. Times on a shared machine vary with its load; the
alternation in 1 and the CPU times are there to tell that apart.

What runs during training on top of TRL is timed from the run's own metrics: the per-step diagnostics (KL
estimators, zero-signal fraction, judges: ``diagnostics/seconds``) and the gradient-variance meter
(``variance/seconds``), each as a share of the training time without them. The meter's budget (issue 9) is 15% on
average at the interval a run uses. ``--paired`` also trains the same config with the meter off and compares
the two runs' total step time (on a busy machine the in-run figure is the steadier one). ``--no-eval`` skips the
evaluation.

``--tokens-overhead`` trains the same config (same seed) three ways, ``--repeats`` times each, interleaved so that
a change in the machine's load hits every variant alike: without the per-token record or snapshots (as before issue
#10), with the record only, and with the record and the default snapshots. It prints, per variant, the step time
(the median gap between consecutive steps' records, which includes the step-boundary forward and the snapshot
saves; TRL's own ``step_time`` does not see them), the part of it outside TRL's ``training_step`` (the step
boundary), the process's CPU time for the run, the share of the training time spent in the per-token work (timed
inside the same steps, so the least sensitive to the machine's load), the rollouts.jsonl bytes per step and the
snapshots' size, and writes them to ``<output_dir>/tokens-overhead.json``. Target (issue 10): at most 10% more time
per step on the default run. Take the figures on a quiet machine: on shared cores the noise is larger than the
difference.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from rloo_demo.cli import build_parser, config_from_args
from rloo_demo.config import RunConfig
from rloo_demo.engine.training import train
from rloo_demo.eval.evaluation import evaluate, format_report, heldout_prompts
from rloo_demo.models.policy import load_policy
from rloo_demo.models.templates import effective_template

OLD_COMMIT = "b534667"  # engine and embedded policy before issue 11
WARMUP_STEPS = 2

# A fresh process trains the default run and prints its figures: the same driver for the old and the new code.
DEFAULT_RUN_DRIVER = """
import dataclasses, json, sys, time
t0 = time.time()
from rloo_demo.config import RunConfig
from rloo_demo.engine.training import train
known = {f.name for f in dataclasses.fields(RunConfig)}  # an older tree knows fewer settings: they take defaults
config = RunConfig.from_dict({k: v for k, v in json.loads(sys.argv[1]).items() if k in known})
t1 = time.time()
state = train(config)
wall = time.time() - t1
metrics = state.run.metrics()
print(json.dumps({"status": state.status, "error": state.error, "run": str(state.run.path), "steps": len(metrics),
                  "import_seconds": round(t1 - t0, 1), "wall_seconds_incl_loading": round(wall, 1),
                  "step_time_sum": round(sum(m.get("step_time", 0.0) for m in metrics), 1),
                  "reward_first5": sum(m["reward"] for m in metrics[:5]) / 5,
                  "reward_last10": sum(m["reward"] for m in metrics[-10:]) / 10, "kl_last": metrics[-1].get("kl")}))
"""


class StepClock(TrainerCallback):
    """Wall and CPU seconds of every optimisation step, from ``on_step_begin`` to ``on_step_end``."""

    def __init__(self):
        self.steps: list[tuple[float, float]] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self._t, self._c = time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append((time.perf_counter() - self._t, time.process_time() - self._c))


def trl_default_trainer(config: RunConfig, out: str):
    """TRL's bare ``RLOOTrainer`` with its default ``RLOOConfig``, given only the run's settings (batch, K, tokens,
    sampling, lr, beta, steps) and the CPU (TRL's default bf16 needs a GPU)."""
    from trl import RLOOConfig, RLOOTrainer

    from rloo_demo.task.data import run_prompts
    from rloo_demo.task.rewards import build_reward

    model, tok = load_policy(config.policy)
    args = RLOOConfig(
        output_dir=out,
        per_device_train_batch_size=config.completions_per_step,
        num_generations=config.num_generations,
        max_completion_length=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        learning_rate=config.learning_rate,
        beta=config.beta,
        max_steps=config.max_steps,
        seed=config.seed,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
    )
    dataset = run_prompts(config, "train")
    trainer = RLOOTrainer(
        model=model,
        args=args,
        reward_funcs=[build_reward(n) for n in config.rewards],
        train_dataset=dataset,
        processing_class=tok,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def engine_trainer(
    config: RunConfig,
    out: str,
    reuse_forward: bool = True,
    checkpointing: bool = False,
    backward_threads: int = 0,
    overlap: bool = True,
    lean_generation: bool = True,
    reward_offset: float | None = None,
):
    """The engine's trainer, as ``rloo_demo.engine.training`` builds it (no run folder); the flags undo one saving
    each, and ``reward_offset`` trains with that offset instead of the config's."""
    from rloo_demo.engine.training import RunState, build_trainer

    if reward_offset is not None:
        config = RunConfig.from_dict({**config.to_dict(), "reward_offset": reward_offset})
    trainer = build_trainer(config, RunState(config))
    trainer.reuse_policy_forward = reuse_forward
    trainer.overlap_passes = overlap
    trainer.lean_generation = lean_generation
    if backward_threads:
        trainer.use_backward_threads(backward_threads)
    if checkpointing:
        trainer.args.activation_checkpointing = True  # Trainer.train turns it on when this is set
    return trainer


def time_steps(factory, config: RunConfig, threads: int, **kw) -> list[tuple[float, float]]:
    """Train ``config.max_steps`` steps with a fresh trainer and ``threads`` torch threads; per-step (wall, CPU)
    seconds after the warm-up."""
    with tempfile.TemporaryDirectory() as out:
        trainer = factory(config, out, **kw)
        torch.set_num_threads(threads)  # after the factory: the engine's build_trainer sets its own
        clock = StepClock()
        trainer.add_callback(clock)
        trainer.train()
    return clock.steps[WARMUP_STEPS:]


def compare_steps(config: RunConfig, variants: dict, steps: int, rounds: int) -> dict:
    """Median step time of each variant, alternating variants round by round."""
    bench_config = RunConfig.from_dict({**config.to_dict(), "max_steps": steps + WARMUP_STEPS})
    times: dict[str, list] = {name: [] for name in variants}
    for r in range(rounds):
        for name, (factory, threads, kw) in variants.items():
            t = time.time()
            times[name] += time_steps(factory, bench_config, threads, **kw)
            print(f"  round {r + 1}/{rounds}: {name}: {time.time() - t:.0f} s", flush=True)
    out = {}
    for name, steps_ in times.items():
        out[name] = {
            "median_step_wall": statistics.median(w for w, _ in steps_),
            "median_step_cpu": statistics.median(c for _, c in steps_),
            "steps": len(steps_),
        }
    return out


def print_step_table(results: dict, reference: str) -> None:
    ref = results[reference]
    print(f"\n{'trainer':58} {'step wall':>10} {'ratio':>6} {'step CPU':>9} {'ratio':>6}")
    for name, r in results.items():
        print(
            f"{name:58} {r['median_step_wall'] * 1000:8.0f}ms {r['median_step_wall'] / ref['median_step_wall']:6.2f} "
            f"{r['median_step_cpu'] * 1000:7.0f}ms {r['median_step_cpu'] / ref['median_step_cpu']:6.2f}"
        )


def default_run(config: RunConfig, cwd: Path) -> dict:
    """The default run in a fresh process with the ``rloo_demo`` found in ``cwd`` (this tree or an old one)."""
    env = {**os.environ, "PYTHONPATH": str(cwd), "HF_HUB_OFFLINE": "1", "RLOO_DEMO_ASSETS": str(cwd / "assets")}
    proc = subprocess.run(
        [sys.executable, "-c", DEFAULT_RUN_DRIVER, json.dumps(config.to_dict())],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise RuntimeError(f"default run in {cwd} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def old_tree(tmp: Path) -> Path:
    """The whole repository at ``OLD_COMMIT`` (code and assets), unpacked into ``tmp``."""
    data = subprocess.run(["git", "archive", OLD_COMMIT], check=True, capture_output=True).stdout
    (tmp / "old.tar").write_bytes(data)
    with tarfile.open(tmp / "old.tar") as tar:
        tar.extractall(tmp / "old", filter="data")
    return tmp / "old"


def overhead(metrics: list[dict]) -> dict:
    """Seconds spent in the diagnostics and the meter, and their share of the rest of the training time."""
    train_seconds = sum(m.get("step_time", 0.0) for m in metrics)
    meter = sum(m.get("variance/seconds", 0.0) for m in metrics)
    diagnostics = sum(m.get("diagnostics/seconds", 0.0) for m in metrics)
    without = max(train_seconds - meter - diagnostics, 1e-9)
    return {
        "meter_measurements": sum("variance/seconds" in m for m in metrics),
        "meter_seconds": round(meter, 2),
        "meter_share_of_training": round(meter / without, 4),
        "meter_seconds_per_measurement": round(meter / max(1, sum("variance/seconds" in m for m in metrics)), 2),
        "meter_cost_in_steps": round(
            meter / max(1, sum("variance/seconds" in m for m in metrics)) / (without / max(len(metrics), 1)), 2
        ),
        "diagnostics_seconds": round(diagnostics, 3),
        "diagnostics_share_of_training": round(diagnostics / without, 5),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench-steps", type=int, default=20, help="timed steps per trainer and round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of alternating trainers")
    ap.add_argument("--steps-only", action="store_true", help="only the step-time comparison")
    ap.add_argument("--ablation", action="store_true", help="also time the engine with each saving undone")
    ap.add_argument(
        "--offset-variant",
        type=float,
        default=None,
        help="also time the engine with this reward_offset, alternating with the others (its cost on the step)",
    )
    ap.add_argument("--compare-old", action="store_true", help="also run the default run of commit b534667")
    ap.add_argument("--no-step-compare", action="store_true", help="skip the step-time comparison")
    ap.add_argument("--paired", action="store_true", help="with --variance-every: also train with the meter off")
    ap.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    ap.add_argument("--tokens-overhead", action="store_true", help="issue 10's per-token record: on against off")
    ap.add_argument("--repeats", type=int, default=1, help="runs per variant for --tokens-overhead")
    own, rest = ap.parse_known_args(argv)
    if own.tokens_overhead:
        return tokens_overhead(rest, own.repeats)
    args = build_parser().parse_args(["train", *rest])
    config = config_from_args(args)
    if "output_dir" not in vars(args):
        config.output_dir = "runs/bench"
    config.validate()
    figures: dict = {"machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start"}

    from rloo_demo.fast.fast_step import TORCH_DEFAULT_THREADS, backward_threads, engine_threads

    threads = engine_threads(config.policy)
    backward = backward_threads(config.policy)
    default_threads = TORCH_DEFAULT_THREADS
    if not own.no_step_compare:
        print(f"step time on {config.policy}: TRL's RLOOTrainer (default RLOOConfig) vs the engine", flush=True)
        variants = {
            f"TRL RLOOTrainer, default RLOOConfig ({default_threads} threads, torch default)": (
                trl_default_trainer,
                default_threads,
                {},
            ),
            f"engine ({threads} thread{'s' if threads > 1 else ''}"
            + (f", {backward} for the backward)" if backward != threads else ")"): (engine_trainer, threads, {}),
        }
        if own.offset_variant is not None:
            variants[f"engine, reward_offset {own.offset_variant:g}"] = (
                engine_trainer,
                threads,
                {"reward_offset": own.offset_variant},
            )
        if own.ablation:
            variants.update(
                {
                    f"TRL RLOOTrainer, default RLOOConfig ({threads} threads)": (trl_default_trainer, threads, {}),
                    "engine + gradient checkpointing": (engine_trainer, threads, {"checkpointing": True}),
                    "engine + TRL's second policy forward": (engine_trainer, threads, {"reuse_forward": False}),
                    "engine, backward on the step's threads": (engine_trainer, threads, {"backward_threads": threads}),
                    "engine, no passes beside the step": (engine_trainer, threads, {"overlap": False}),
                    "engine, generate() instead of the lean decode": (
                        engine_trainer,
                        threads,
                        {"lean_generation": False},
                    ),
                    f"engine ({default_threads} threads, torch default)": (engine_trainer, default_threads, {}),
                }
            )
        steps = compare_steps(config, variants, own.bench_steps, own.rounds)
        reference = next(iter(variants))
        print_step_table(steps, reference)
        engine_name = list(variants)[1]
        ratio = steps[engine_name]["median_step_wall"] / steps[reference]["median_step_wall"]
        print(f"engine / TRL step time: {ratio:.2f} (target <= 0.8: {'met' if ratio <= 0.8 else 'missed'})")
        figures["step_times"] = steps
        figures["engine_vs_trl_step_ratio"] = round(ratio, 3)
        if own.steps_only:
            print(json.dumps(figures, indent=2))
            return 0

    repo = Path(__file__).resolve().parent.parent
    print("\ndefault run (fresh process)", flush=True)
    new = default_run(config, repo)
    figures["default_run"] = new
    if own.compare_old:
        with tempfile.TemporaryDirectory() as tmp:
            old_dir = old_tree(Path(tmp))
            old_config = {k: v for k, v in config.to_dict().items()}
            old_config["output_dir"] = str(Path(config.output_dir).resolve())
            # the old code predates "auto" (issue 12): it gets the template auto stands for with this policy
            old_config["prompt_template"] = effective_template(config)
            old = default_run(RunConfig.from_dict(old_config), old_dir)
        figures["old_default_run"] = old
        for label, r in (("new", new), (f"old ({OLD_COMMIT})", old)):
            print(
                f"  {label:14} {r['steps']} steps: {r['wall_seconds_incl_loading']:.1f} s incl. loading, "
                f"{r['step_time_sum']:.1f} s of step time; reward {r['reward_first5']:.3f} -> {r['reward_last10']:.3f}"
            )
        met = new["wall_seconds_incl_loading"] <= old["wall_seconds_incl_loading"]
        print(
            f"  wall time new / old: {new['wall_seconds_incl_loading'] / old['wall_seconds_incl_loading']:.2f} "
            f"(target <= 1: {'met' if met else 'missed'})"
        )
    else:
        print(
            f"  {new['steps']} steps: {new['wall_seconds_incl_loading']:.1f} s incl. loading, "
            f"{new['step_time_sum']:.1f} s of step time"
        )

    from eval_policy import continuations, load_word_list, real_word_rate, rt_prompts

    from rloo_demo.store.folder import open_run

    run = open_run(new["run"])
    costs = overhead(run.metrics())  # the diagnostics and the meter, timed inside the run
    figures["extra_cost_during_training"] = costs
    print(json.dumps({"extra_cost_during_training": costs}, indent=2))
    if own.paired and config.variance_every:
        plain = default_run(dataclasses.replace(config, variance_every=0, run_name=None), repo)
        with_meter, without = new["step_time_sum"], plain["step_time_sum"]
        costs["paired_run_without_meter"] = plain["run"]
        costs["paired_step_seconds_with_meter"] = round(with_meter, 1)
        costs["paired_step_seconds_without_meter"] = round(without, 1)
        costs["paired_meter_share"] = round(with_meter / without - 1, 4)
        print(json.dumps({"paired": costs}, indent=2))
    if own.no_eval:
        (run.path / "bench.json").write_text(json.dumps(figures, indent=2) + "\n")
        print(json.dumps(figures, indent=2))
        return 0
    base, tok = load_policy(config.policy)
    trained, _ = load_policy(str(run.model_dir))
    t1 = time.time()
    result = evaluate(base, trained, tok, config, heldout_prompts(config, 64), samples_per_prompt=2, seed=0)
    figures["eval_seconds"] = round(time.time() - t1, 1)
    run.write_evaluation(result)
    figures.update(
        {
            "base_mean_reward": round(result["base_mean_reward"], 4),
            "trained_mean_reward": round(result["trained_mean_reward"], 4),
            "difference": round(result["difference"], 4),
            "difference_ci95": [round(x, 4) for x in result["difference_ci95"]],
            "per_function": result["per_function"],
            "kl_trained_vs_base_nats": round(result["kl_trained_vs_base"], 3),
            "judges": result["judges"],
            "collapse_warning": result["collapse_warning"],
        }
    )
    # Readability, measured as scripts/eval_policy.py does: 128 held-out RT prompts, T = 1 (what the app shows)
    # and through generate's default top-k 50.
    words = load_word_list()
    prompts, _ = rt_prompts(128)
    for label, model in (("base", base), ("trained", trained)):
        for top_k in (0, 50):
            rate = real_word_rate(continuations(model, tok, prompts, config.max_new_tokens, top_k=top_k), words)[0]
            figures[f"{label}_real_word_rate" + ("_top_k_50" if top_k else "")] = round(rate, 4)
    print(
        f"real-word rate (T = 1 / top-k 50): base {figures['base_real_word_rate']:.3f} / "
        f"{figures['base_real_word_rate_top_k_50']:.3f}, trained {figures['trained_real_word_rate']:.3f} / "
        f"{figures['trained_real_word_rate_top_k_50']:.3f} (target: trained >= 0.95)"
    )
    lo = result["difference_ci95"][0]
    print(
        f"held-out gain {result['difference']:+.3f}, 95% CI [{lo:+.3f}, {result['difference_ci95'][1]:+.3f}] "
        f"(target >= 0.4 with the interval above 0: {'met' if result['difference'] >= 0.4 and lo > 0 else 'missed'})"
    )
    (run.path / "bench.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(format_report(result))
    print(json.dumps(figures, indent=2))
    return 0


VARIANTS = {  # name -> RunConfig changes
    "off (before #10)": {"record_tokens": False, "snapshot_every": 0},
    "record_tokens": {"record_tokens": True, "snapshot_every": 0},
    "record_tokens + snapshots": {"record_tokens": True},  # snapshot_every as configured (default 25)
}


def _run_figures(state, cpu_seconds: float) -> dict:
    metrics = state.run.metrics()
    gaps = [b["time"] - a["time"] for a, b in zip(metrics, metrics[1:], strict=False)]
    # What a step spends outside TRL's training_step (its step_time): the optimiser step and the step-boundary
    # callbacks, where the 'after' forward, the snapshot saves and the rollouts write happen.
    boundary = [b["time"] - a["time"] - b["step_time"] for a, b in zip(metrics, metrics[1:], strict=False)]
    rollouts = state.run.path / "rollouts.jsonl"
    snaps = state.run.path / "snapshots"
    return {
        "steps": len(metrics),
        "median_step_seconds": statistics.median(gaps) if gaps else None,
        "mean_step_seconds": statistics.fmean(gaps) if gaps else None,
        "trl_step_time_median": statistics.median(m["step_time"] for m in metrics[1:]) if len(metrics) > 1 else None,
        "boundary_seconds_median": statistics.median(boundary) if boundary else None,
        "cpu_seconds": cpu_seconds,  # the process's CPU time for the whole run (loading included): steadier under load
        "rollouts_bytes_per_step": rollouts.stat().st_size / max(1, len(metrics)),
        "snapshots_mb": sum(f.stat().st_size for f in snaps.rglob("*") if f.is_file()) / 1e6 if snaps.exists() else 0,
    }


class _Stopwatch:
    """Seconds spent in the capture's per-token work (the lists at generation, the 'after' forward at the step's
    end), measured inside the same steps as the step times: a share of the step that the machine's load changes
    far less than the step times of two separate runs."""

    def __init__(self):
        from rloo_demo.engine.capture import CapturingRLOOTrainer

        self.seconds = 0.0
        for name in ("_token_lists", "_record_after"):
            original = getattr(CapturingRLOOTrainer, name)
            setattr(CapturingRLOOTrainer, name, self._timed(original))

    def _timed(self, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return wrapper


def tokens_overhead(argv: list[str], repeats: int) -> int:
    args = build_parser().parse_args(["train", *argv])
    base = config_from_args(args)
    if "output_dir" not in vars(args):
        base.output_dir = "runs/bench-tokens"
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    stopwatch = _Stopwatch()
    for r in range(repeats):
        for name, changes in VARIANTS.items():
            config = RunConfig.from_dict(base.to_dict() | changes | {"run_name": None})
            cpu, stopwatch.seconds = time.process_time(), 0.0
            state = train(config)
            cpu = time.process_time() - cpu
            if state.status != "finished":
                print(f"{name}: run {state.status}: {state.error}")
                return 1
            figures = _run_figures(state, cpu)
            steps_seconds = state.run.metrics()[-1]["time"]
            figures["record_share"] = stopwatch.seconds / steps_seconds  # of the training time, in the same steps
            results[name].append(figures)
            print(f"repeat {r + 1}/{repeats} {name}: {json.dumps(results[name][-1])}", flush=True)

    def mean(name, key):
        values = [x[key] for x in results[name] if x[key] is not None]
        return statistics.fmean(values) if values else float("nan")

    reference = mean("off (before #10)", "median_step_seconds")
    reference_cpu = mean("off (before #10)", "cpu_seconds")
    rows = []
    header = (
        f"{'step s':>8} {'vs off':>7} {'TRL step_time':>13} {'boundary s':>10} {'CPU s/run':>9} {'vs off':>7} "
        f"{'record share':>12} {'rollouts B/step':>15} {'snapshots MB':>12}"
    )
    print(f"\n{'variant':26} {header}")
    for name in VARIANTS:
        step, cpu = mean(name, "median_step_seconds"), mean(name, "cpu_seconds")
        row = {
            "variant": name,
            "step_seconds": step,
            "overhead": step / reference - 1,
            "trl_step_time": mean(name, "trl_step_time_median"),
            "boundary_seconds": mean(name, "boundary_seconds_median"),
            "cpu_seconds": cpu,
            "cpu_overhead": cpu / reference_cpu - 1,
            "record_share": mean(name, "record_share"),
            "rollouts_bytes_per_step": mean(name, "rollouts_bytes_per_step"),
            "snapshots_mb": mean(name, "snapshots_mb"),
        }
        rows.append(row)
        print(
            f"{name:26} {step:8.3f} {row['overhead']:+7.1%} {row['trl_step_time']:13.3f} "
            f"{row['boundary_seconds']:10.3f} {cpu:9.1f} {row['cpu_overhead']:+7.1%} {row['record_share']:12.1%} "
            f"{row['rollouts_bytes_per_step']:15.0f} {row['snapshots_mb']:12.1f}"
        )
    out = {"config": base.to_dict(), "repeats": repeats, "summary": rows, "runs": results}
    path = Path(base.output_dir) / "tokens-overhead.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
