"""``python -m rloo_demo trajectory``: the exact expected-update path of every estimator beside sampled runs, as a
Markdown table, and the lesson file (table and figure) written into ``--out``.

    python -m rloo_demo trajectory                                   # K 4, beta 0.1, 200 steps of lr 2, 20 seeds
    python -m rloo_demo trajectory --beta 0 --k 8 --out lessons      # no KL term; 24,310 multisets a step
"""

from __future__ import annotations

import argparse
import sys
import time

from rloo_demo.exact.paths import Settings, trajectory
from rloo_demo.exact.report import kaleido_installed, markdown_table, write

DEFAULTS = Settings()


def add_command(sub) -> None:
    """The ``trajectory`` subparser, its flags and its handler."""
    p = sub.add_parser("trajectory", help="every estimator's exact expected-update path beside sampled runs")
    p.add_argument(
        "--k", type=int, default=DEFAULTS.k, help=f"actions sampled per step, 2 to 8 (default: {DEFAULTS.k})"
    )
    p.add_argument(
        "--beta",
        type=float,
        default=DEFAULTS.beta,
        help=f"KL coefficient of the shaped reward (default: {DEFAULTS.beta:g})",
    )
    p.add_argument(
        "--steps", type=int, default=DEFAULTS.steps, help=f"updates along each path (default: {DEFAULTS.steps})"
    )
    p.add_argument(
        "--lr", type=float, default=DEFAULTS.lr, help=f"step size of theta += lr * g (default: {DEFAULTS.lr:g})"
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=DEFAULTS.seeds,
        help=f"sampled trajectories per estimator (default: {DEFAULTS.seeds})",
    )
    p.add_argument(
        "--seed", type=int, default=DEFAULTS.seed, help=f"seed of the sampled draws (default: {DEFAULTS.seed})"
    )
    p.add_argument("--out", default="lessons", help="folder for trajectory.json (and .png) (default: lessons)")
    p.set_defaults(handler=run)


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(k=args.k, beta=args.beta, steps=args.steps, lr=args.lr, seeds=args.seeds, seed=args.seed)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    start = time.perf_counter()
    result = trajectory(settings)  # checks the settings first: a UserError names the bad one
    seconds = time.perf_counter() - start
    print(markdown_table(result))
    print()
    for path in write(result, args.out):
        print(f"wrote {path}")
    if not kaleido_installed():
        print("no PNG: kaleido is not installed (pip install kaleido); the figure is in the JSON, for plotly")
    print(f"computed in {seconds:.2f} s", file=sys.stderr)
    return 0
