"""Command line: ``python -m rloo_demo train | evaluate | infer`` (the tutorial's three scripts in one), and the
estimator lab: ``variance``, ``arena`` and ``toy`` (why a leave-one-out baseline?).

    python -m rloo_demo train                                  # the embedded defaults, under 2 minutes on 2 cores
    python -m rloo_demo train --config run.yaml --max-steps 50 # a config file, with flags on top
    python -m rloo_demo evaluate --run runs/<name>             # base vs trained on held-out prompts
    python -m rloo_demo infer --run runs/<name> --prompt "This movie was"
    python -m rloo_demo variance --run runs/<name> --steps 5   # gradient variance of every estimator, as a table
    python -m rloo_demo arena --estimators rloo grpo reinforce --seeds 3   # paired runs, summary table
    python -m rloo_demo arena --estimators rloo reinforce --seeds 3 --reward-offset 1   # what the baseline buys
    python -m rloo_demo toy --eta 0 --k 4 --offset 1              # every estimator exactly, on a Bernoulli toy
    python -m rloo_demo export-trl --run runs/<name> --out DIR    # the run as a project for TRL's `trl rloo`
    python -m rloo_demo train --rewards length_penalty --reward-module examples/rewards.py:keyword_count

``train`` also runs as N data-parallel processes, with rank 0 writing the run folder (docs/operating.md, "Scaling out"):

    accelerate launch --multi_gpu --num_processes 2 --num_cpu_threads_per_process 1 -m rloo_demo train
    torchrun --nproc_per_node 2 -m rloo_demo train
    accelerate launch --config_file configs/zero3.yaml -m rloo_demo train ...   # configs/: DDP, ZeRO-2/3, FSDP, 2 nodes

(not ``--cpu``: accelerate then starts one process whatever ``--num_processes`` says). A user's mistake prints one
line that starts with ``error:`` and exits with status 2; a run that fails while training exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
import typing
from dataclasses import MISSING, fields
from pathlib import Path

from rloo_demo.advantages import MAX_REWARD_OFFSET
from rloo_demo.arena import arena_estimators, run_arena
from rloo_demo.chat import CHAT, to_messages
from rloo_demo.config import TEMPERATURE_RANGE, RunConfig, help_text
from rloo_demo.engine import trl_project
from rloo_demo.engine.trl_import import run_config_from_trl
from rloo_demo.errors import InputError, NotFound, UserError
from rloo_demo.exact import command as trajectory_command
from rloo_demo.i18n import Message
from rloo_demo.models.hub import resolve_model
from rloo_demo.models.policy import load_policy
from rloo_demo.models.templates import effective_template, has_chat_template
from rloo_demo.prechecks import prerun_warnings
from rloo_demo.public.limits import as_float, as_int
from rloo_demo.store.folder import open_run
from rloo_demo.toy import exact_table
from rloo_demo.toy import markdown_table as toy_markdown

# Commands whose work lives in a module of its own: each module's ``add_command(sub)`` adds its subparser and sets
# its handler with ``set_defaults(handler=...)`` (a function of the parsed args returning the exit status), so a new
# command touches cli.py by one line here. Errors are handled below, as for every command.
COMMAND_MODULES: tuple = (trajectory_command, trl_project)


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag ends like every other bad input: one ``error:`` line and status 2 (argparse
    would print its usage first)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field, with its help text; unset flags leave the config (file) value alone."""
    hints = typing.get_type_hints(RunConfig)
    group = parser.add_argument_group("run settings (override --config)")
    for f in fields(RunConfig):
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = isinstance(hint, types.UnionType) and type(None) in args
        base = next((a for a in args if a is not type(None)), hint) if optional else hint
        default = f.default if f.default is not MISSING else f.default_factory()
        kw: dict = {"dest": f.name, "default": argparse.SUPPRESS, "help": f"{help_text(f.name)} (default: {default})"}
        if base is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(base) is list:
            kw.update(nargs="+", type=typing.get_args(base)[0], metavar="X")
        else:
            kw["type"] = base
        group.add_argument(_flag(f.name), **kw)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rloo_demo", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    tr = sub.add_parser("train", help="run RLOO and write a run folder")
    tr.add_argument("--config", help="YAML or JSON file with RunConfig settings")
    tr.add_argument(
        "--trl-config", help="a config.yaml for TRL's `trl rloo --config` (what the app cannot honour is refused)"
    )
    tr.add_argument("--evaluate", action="store_true", help="evaluate base vs trained when training ends")
    tr.add_argument("--stop-file", help="stop at the next step boundary once this file exists (used by the web app)")
    tr.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="compute budget: stop at the first step boundary after this many seconds of training, keeping the model",
    )
    tr.add_argument(
        "--reward-module",
        action="append",
        metavar="FILE.py:FUNCTION",
        help="your own reward function with TRL's signature, added after --rewards as module:FILE.py:FUNCTION "
        "(repeatable; give --reward-weights for all rewards in order). It runs the file's code: local use only",
    )
    add_config_flags(tr)

    ev = sub.add_parser("evaluate", help="base vs trained on held-out prompts")
    ev.add_argument("--run", required=True, help="a finished run folder")
    ev.add_argument("--num-prompts", type=int, default=64, help="held-out prompts (default: 64)")
    ev.add_argument("--samples-per-prompt", type=int, default=2, help="samples per prompt and model (default: 2)")
    ev.add_argument("--seed", type=int, default=0, help="sampling seed, the same for both models (default: 0)")
    ev.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0)")
    ev.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (default: 1.0)")
    ev.add_argument("--json", action="store_true", help="print the full result as JSON instead of the report")

    inf = sub.add_parser("infer", help="generate from a trained run (or any model) for a prompt")
    src = inf.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="a run folder with a trained model")
    src.add_argument("--model", help="a model folder, hub id or 'embedded:tiny-imdb-gpt2'")
    inf.add_argument("--prompt", default="This movie was", help="the prompt (default: 'This movie was')")
    inf.add_argument("--num-samples", type=int, default=1, help="completions to sample (default: 1)")
    inf.add_argument("--max-new-tokens", type=int, default=40, help="tokens per completion (default: 40)")
    inf.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default: 0.8)")
    inf.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling threshold (default: 0.95)")
    inf.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")

    va = sub.add_parser("variance", help="gradient variance and cosine to a 4x reference of every estimator")
    va.add_argument("--run", required=True, help="a run folder (its settings, rewards and policy are used)")
    va.add_argument("--steps", type=int, default=5, help="batches of training prompts to measure (default: 5)")
    va.add_argument("--at", choices=["trained", "base"], default="trained", help="which policy (default: trained)")
    va.add_argument("--seed", type=int, default=0, help="sampling seed of the replicates (default: 0)")
    va.add_argument(
        "--reward-offset",
        type=float,
        default=None,
        help="measure under this constant added to every reward, before the KL shaping (default: the run's own)",
    )
    va.add_argument("--json", action="store_true", help="print the full result as JSON instead of the table")

    ar = sub.add_parser("arena", help="paired runs of several estimators on the same settings and seeds")
    ar.add_argument(
        "--estimators",
        nargs="+",
        default=["rloo", "grpo", "reinforce"],
        metavar="E",
        help="estimators to train: rloo, grpo, reinforce (default: all three)",
    )
    ar.add_argument("--seeds", type=int, default=3, help="runs per estimator, seeds seed..seed+n-1 (default: 3)")
    ar.add_argument("--max-steps", type=int, default=None, help="steps per run (default: the config's, 150)")
    ar.add_argument("--output-dir", default="runs", help="runs folder for the runs and the summary (default: runs)")
    ar.add_argument("--config", help="YAML or JSON file with the shared RunConfig settings (default: the defaults)")
    ar.add_argument("--eval-prompts", type=int, default=64, help="held-out prompts per evaluation (default: 64)")
    ar.add_argument("--max-seconds", type=float, default=None, help="compute budget per run, as train's flag")
    ar.add_argument(
        "--reward-offset",
        type=float,
        default=None,
        help="a constant added to every reward before the KL shaping, for rloo and reinforce (grpo removes any "
        "offset and trains without it) (default: the config's, 0)",
    )

    toy = sub.add_parser("toy", help="every estimator's exact mean, bias and variance on the Bernoulli toy")
    toy.add_argument(
        "--eta", type=float, default=0.0, help="the shared logit: z_i ~ Bernoulli(sigmoid(eta)) (default: 0)"
    )
    toy.add_argument("--k", type=int, default=4, help="samples per draw, 2 to 8 (default: 4)")
    toy.add_argument("--offset", type=float, default=0.0, help="a constant added to every reward (default: 0)")
    for module in COMMAND_MODULES:
        module.add_command(sub)
    inf.add_argument(
        "--system-prompt",
        default=None,
        help="system message when the prompt goes through a chat template (default: the run's, or none)",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> RunConfig:
    base = RunConfig.load(args.config).to_dict() if getattr(args, "config", None) else {}
    if getattr(args, "trl_config", None):  # TRL's own config: the same RunConfig, by trl_import
        if base:
            raise InputError("give --config or --trl-config, not both")
        base = run_config_from_trl(_read(args.trl_config), Path(args.trl_config).parent).to_dict()
    names = {f.name for f in fields(RunConfig)}
    base.update({k: v for k, v in vars(args).items() if k in names})
    modules = getattr(args, "reward_module", None) or []
    rewards = base.get("rewards", RunConfig().rewards)
    if modules and isinstance(rewards, list):  # a wrong type is left to RunConfig's type check
        base["rewards"] = rewards + [f"module:{m}" for m in modules]
    return RunConfig.from_dict(base)


def _read(path: str) -> str:
    if not Path(path).is_file():
        raise NotFound(f"no such file: {path!r}")
    return Path(path).read_text(encoding="utf-8")


def cmd_train(args) -> int:
    import signal

    # accelerate, peft, torch, transformers, trl: loaded on first use, not at start-up
    from rloo_demo.engine.training import (
        RunState,
        train,
    )

    config = config_from_args(args).validate()

    for warning in prerun_warnings(config):  # settings that run but teach little: said before any model loads
        print(f"warning: {warning}", file=sys.stderr)
    if args.max_seconds is not None:
        as_float("--max-seconds", args.max_seconds, 1.0, 1e9)
    state = RunState(config, budget_seconds=args.max_seconds)
    # SIGTERM (docker stop, a scheduler) stops at the next step boundary and saves the model, like Stop in the app.
    signal.signal(signal.SIGTERM, lambda signum, frame: state.request_stop(Message("stop.sigterm")))
    state = train(config, state, progress=True, stop_file=args.stop_file)
    if state.run is None:  # a non-main process of a multi-process run
        return 0 if state.status != "failed" else 1
    print(f"run folder: {state.run.path}")
    print(f"status: {state.status}")
    if state.status == "failed":
        print(f"error: run failed: {state.error}", file=sys.stderr)
        return 1
    if args.evaluate:
        return cmd_evaluate(
            argparse.Namespace(
                run=str(state.run.path),
                num_prompts=64,
                samples_per_prompt=2,
                seed=0,
                temperature=1.0,
                top_p=1.0,
                json=False,
            )
        )
    return 0


def cmd_evaluate(args) -> int:
    from tqdm.auto import tqdm

    # torch: loaded on first use, not at start-up
    from rloo_demo.eval.evaluation import (
        evaluate,
        format_report,
        heldout_prompts,
    )

    as_int("--num-prompts", args.num_prompts, 1, 100_000)
    as_int("--samples-per-prompt", args.samples_per_prompt, 1, 1000)
    as_int("--seed", args.seed, 0, 2**32 - 1)
    as_float("--temperature", args.temperature, *TEMPERATURE_RANGE)
    as_float("--top-p", args.top_p, 0.01, 1.0)
    run = open_run(args.run)
    if run.model_dir is None:
        raise NotFound(f"run {run.name!r} has no trained model yet (status: {run.status().get('status')})")
    config = run.config()
    prompts = heldout_prompts(config, args.num_prompts)
    base, tokenizer = load_policy(config.policy)
    trained, _ = load_policy(str(run.model_dir))
    bar = tqdm(total=2 * len(prompts), desc="evaluate", unit="prompt", file=sys.stderr)

    def progress(done, total):
        bar.n = done
        bar.refresh()

    result = evaluate(
        base,
        trained,
        tokenizer,
        config,
        prompts,
        args.samples_per_prompt,
        args.seed,
        temperature=args.temperature,
        top_p=args.top_p,
        progress=progress,
    )
    bar.close()
    run.write_evaluation(result)
    print(json.dumps(result, indent=2) if args.json else format_report(result))
    return 0


def cmd_infer(args) -> int:
    from rloo_demo.models.sampling import sample  # torch: loaded on first use, not at start-up

    as_int("--num-samples", args.num_samples, 1, 1000)
    as_int("--max-new-tokens", args.max_new_tokens, 1, 100_000)
    as_int("--seed", args.seed, 0, 2**32 - 1)
    as_float("--temperature", args.temperature, *TEMPERATURE_RANGE)
    as_float("--top-p", args.top_p, 0.01, 1.0)
    if args.run:
        run = open_run(args.run)
        if run.model_dir is None:
            raise NotFound(f"run {run.name!r} has no trained model (status: {run.status().get('status')})")
        name = str(run.model_dir)
        config = run.config()
        chat = effective_template(config, run.model_dir) == CHAT  # the trained tokenizer keeps the template
        system = args.system_prompt or config.system_prompt
    else:
        name = args.model
        chat = has_chat_template(resolve_model(name))
        system = args.system_prompt
    model, tokenizer = load_policy(name)
    context = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
    if context and args.max_new_tokens >= context:
        raise InputError(
            f"--max-new-tokens {args.max_new_tokens} does not fit this model's context of {context} tokens"
        )
    prompt = to_messages(args.prompt, system) if chat else args.prompt
    for s in sample(
        model, tokenizer, prompt, args.num_samples, args.max_new_tokens, args.temperature, args.top_p, args.seed
    ):
        # a chat shows its user turn and the reply, never the template's markers; a continuation reads on
        print(f"user: {args.prompt}\nassistant: {s['text']}" if chat else args.prompt + s["text"])
    return 0


def cmd_variance(args) -> int:
    from rloo_demo.engine.meter import measure_run  # torch: loaded on first use, not at start-up
    from rloo_demo.engine.variance import markdown_table  # torch: loaded on first use, not at start-up

    as_int("--steps", args.steps, 1, 1000)
    as_int("--seed", args.seed, 0, 2**32 - 1)
    if args.reward_offset is not None:
        as_float("--reward-offset", args.reward_offset, -MAX_REWARD_OFFSET, MAX_REWARD_OFFSET)
    run = open_run(args.run)

    def progress(done, total):
        print(f"measured {done}/{total} batches", file=sys.stderr)

    result = measure_run(run, args.steps, args.at, args.seed, progress=progress, reward_offset=args.reward_offset)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"Gradient variance on {result['run']} ({result['at']} policy): {result['steps']} batches of "
        f"{result['prompts_per_step']} prompts x K={result['k']}, {result['replicates']} replicates each "
        f"(reference: {result['replicates'] - 1}x the batch), reward offset {result['reward_offset']:g}, "
        f"{result['seconds']:.0f} s"
    )
    print()
    print(markdown_table(result["rows"]))
    return 0


def cmd_arena(args) -> int:

    estimators = arena_estimators(args.estimators)
    as_int("--seeds", args.seeds, 1, 100)
    as_int("--eval-prompts", args.eval_prompts, 1, 100_000)
    base = RunConfig.load(args.config) if args.config else RunConfig()
    if args.max_steps is not None:
        base.max_steps = as_int("--max-steps", args.max_steps, 1, 10**6)
    if args.max_seconds is not None:
        as_float("--max-seconds", args.max_seconds, 1.0, 1e9)
    if args.reward_offset is not None:
        base.reward_offset = args.reward_offset  # RunConfig's check below refuses a non-finite or too large one
    base.output_dir, base.run_name = args.output_dir, None
    base.validate()
    summary = run_arena(
        base,
        estimators,
        args.seeds,
        args.output_dir,
        args.eval_prompts,
        args.max_seconds,
        echo=lambda line: print(line, file=sys.stderr),
    )
    print(summary["markdown"])
    return 0


def cmd_toy(args) -> int:
    result = exact_table(args.eta, args.k, args.offset)  # checks its inputs: a UserError names the bad one
    print(toy_markdown(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a bad flag (already reported in one line)
        return exc.code if isinstance(exc.code, int) else 2
    handler = (
        getattr(args, "handler", None)
        or {
            "train": cmd_train,
            "evaluate": cmd_evaluate,
            "infer": cmd_infer,
            "variance": cmd_variance,
            "arena": cmd_arena,
            "toy": cmd_toy,
        }[args.command]
    )
    try:
        return handler(args)
    except UserError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except OSError as exc:  # the machine, not the input: a full disk, a folder without write permission
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
