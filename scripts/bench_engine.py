"""Benchmark the engine: is its RLOO step faster than TRL's own, and does the default run still learn?

    python scripts/bench_engine.py                  # step times (TRL vs engine), the default run, its evaluation
    python scripts/bench_engine.py --compare-old    # and the engine and policy before issue 11 (commit b534667)
    python scripts/bench_engine.py --ablation       # each saving on its own
    python scripts/bench_engine.py --steps-only     # step times only
    python scripts/bench_engine.py --max-steps 20   # any RunConfig flag for the default run

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
"""

from __future__ import annotations

import argparse
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
from rloo_demo.evaluation import evaluate, format_report, heldout_prompts
from rloo_demo.training import load_policy

OLD_COMMIT = "b534667"  # engine and embedded policy before issue 11
WARMUP_STEPS = 2

# A fresh process trains the default run and prints its figures: the same driver for the old and the new code.
DEFAULT_RUN_DRIVER = """
import json, sys, time
t0 = time.time()
from rloo_demo.config import RunConfig
from rloo_demo.training import train
config = RunConfig.from_dict(json.loads(sys.argv[1]))
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

    from rloo_demo.data import prompt_dataset
    from rloo_demo.rewards import build_reward

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
    dataset = prompt_dataset(config.data_source, "train", config.prompt_template, config.prompt_words)
    trainer = RLOOTrainer(
        model=model,
        args=args,
        reward_funcs=[build_reward(n) for n in config.rewards],
        train_dataset=dataset,
        processing_class=tok,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def engine_trainer(config: RunConfig, out: str, reuse_forward: bool = True, checkpointing: bool = False):
    """The engine's trainer, as ``rloo_demo.training`` builds it (no run folder); the flags undo one saving each."""
    from rloo_demo.training import RunState, build_trainer

    trainer = build_trainer(config, RunState(config))
    trainer.reuse_policy_forward = reuse_forward
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


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench-steps", type=int, default=20, help="timed steps per trainer and round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of alternating trainers")
    ap.add_argument("--steps-only", action="store_true", help="only the step-time comparison")
    ap.add_argument("--ablation", action="store_true", help="also time the engine with each saving undone")
    ap.add_argument("--compare-old", action="store_true", help="also run the default run of commit b534667")
    ap.add_argument("--no-step-compare", action="store_true", help="skip the step-time comparison")
    own, rest = ap.parse_known_args(argv)
    args = build_parser().parse_args(["train", *rest])
    config = config_from_args(args)
    if "output_dir" not in vars(args):
        config.output_dir = "runs/bench"
    config.validate()
    figures: dict = {"machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start"}

    from rloo_demo.fast_step import TORCH_DEFAULT_THREADS, engine_threads

    threads = engine_threads(config.policy)
    default_threads = TORCH_DEFAULT_THREADS
    if not own.no_step_compare:
        print(f"step time on {config.policy}: TRL's RLOOTrainer (default RLOOConfig) vs the engine", flush=True)
        variants = {
            f"TRL RLOOTrainer, default RLOOConfig ({default_threads} threads, torch default)": (
                trl_default_trainer,
                default_threads,
                {},
            ),
            f"engine ({threads} thread{'s' if threads > 1 else ''})": (engine_trainer, threads, {}),
        }
        if own.ablation:
            variants.update(
                {
                    f"TRL RLOOTrainer, default RLOOConfig ({threads} threads)": (trl_default_trainer, threads, {}),
                    "engine + gradient checkpointing": (engine_trainer, threads, {"checkpointing": True}),
                    "engine + TRL's second policy forward": (engine_trainer, threads, {"reuse_forward": False}),
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

    from rloo_demo.runs import open_run

    run = open_run(new["run"])
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
