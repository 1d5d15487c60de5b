"""What ``python -m rloo_demo trajectory`` prints and writes: the Markdown table, the figure (a plotly figure as a
plain dict, as plotly.js and ``go.Figure(...)`` take it) and the lesson file that holds both with the command that
rebuilds it (assets/lessons/trajectory.json is one)."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

from rloo_demo.exact.bandit import REWARDS
from rloo_demo.exact.moments import ESTIMATORS
from rloo_demo.exact.paths import Settings

LESSON_FILE = "trajectory.json"
FIGURE_FILE = "trajectory.png"
SHOWN_SEEDS = 10  # sampled trajectories drawn per panel; the mean and its error use every seed
COLOURS = {"exact": "#D9534F", "mean": "#4C9BE8", "seed": "rgba(128,128,128,0.35)", "optimum": "#3DBE8B"}


def command_line(settings: Settings, out: str) -> str:
    """The command that computes these settings again and writes the lesson into ``out``."""
    s = settings
    flags = f"--k {s.k} --beta {s.beta:g} --steps {s.steps} --lr {s.lr:g} --seeds {s.seeds} --seed {s.seed}"
    return f"python -m rloo_demo trajectory {flags} --out {shlex.quote(out)}"


def summary_rows(result: dict) -> list[dict]:
    """One row per estimator: where its exact path and its sampled trajectories end after the last step."""
    rows = []
    for name, est in result["estimators"].items():
        row = {
            "estimator": name,
            "exact_reward": est["exact_reward"][-1],
            "sampled_reward": est["sampled_mean"][-1],
            "sampled_reward_error": est["sampled_error"][-1],
        }
        if "exact_kl_to_optimum" in est:
            row["exact_kl"] = est["exact_kl_to_optimum"][-1]
            row["sampled_kl"], row["sampled_kl_error"] = est["sampled_final_kl"], est["sampled_final_kl_error"]
        rows.append(row)
    return rows


def markdown_table(result: dict) -> str:
    """The settings in a sentence, then one row per estimator after the last step."""
    s = Settings(**result["settings"])
    rewards = ", ".join(f"{r:g}" for r in REWARDS)
    lines = [
        f"Softmax bandit: 10 actions, r = ({rewards}), pi_ref uniform; K = {s.k}, beta = {s.beta:g}; "
        f"{s.steps} steps of lr {s.lr:g} from pi_ref; {s.seeds} sampled seeds from seed {s.seed}.",
        "",
    ]
    optimum = result["optimum_reward"]
    if optimum is None:
        lines.append(f"beta = 0: no KL-regularised optimum (the best action alone, E[r] = {result['best_reward']:g})")
    else:
        lines.append(f"KL-regularised optimum pi*_beta ~ pi_ref * exp(r / beta): E[r] = {optimum:.4f}")
    kl_columns = optimum is not None
    head = ["estimator", f"exact path E[r] at step {s.steps}", "sampled mean E[r] +- s.e."]
    if kl_columns:
        head += ["exact path KL to pi*", "sampled KL to pi* +- s.e."]
    lines += ["", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in summary_rows(result):
        cells = [
            row["estimator"],
            f"{row['exact_reward']:.4f}",
            f"{row['sampled_reward']:.4f} +- {row['sampled_reward_error']:.4f}",
        ]
        if kl_columns:
            cells += [f"{row['exact_kl']:.4f}", f"{row['sampled_kl']:.4f} +- {row['sampled_kl_error']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _line(label: str, ys, colour: str, width: int, dash: str, legend: bool, suffix, **extra) -> dict:
    """One trace of a panel (``suffix``: "" for the first panel's axes, 2..4 for the others)."""
    return {
        "type": "scatter",
        "mode": "lines",
        "name": label,
        "legendgroup": label,
        "showlegend": legend,
        "x": list(range(len(ys))),
        "y": [round(float(v), 5) for v in ys],
        "line": {"color": colour, "width": width, "dash": dash},
        "xaxis": f"x{suffix}",
        "yaxis": f"y{suffix}",
        **extra,
    }


def figure(result: dict) -> dict:
    """One panel per estimator: E[r] against the step along the exact path, up to ``SHOWN_SEEDS`` sampled
    trajectories, their mean (over every seed) and, for β > 0, π*_β's E[r]."""
    s = Settings(**result["settings"])
    data, annotations = [], []
    layout = {
        "title": {"text": f"Exact expected-update path vs sampled runs (K = {s.k}, beta = {s.beta:g}, lr = {s.lr:g})"},
        "grid": {"rows": 2, "columns": 2, "pattern": "independent"},
        "height": 640,
        "legend": {"orientation": "h", "y": -0.12},
    }
    for i, name in enumerate(ESTIMATORS):
        est, suffix, first = result["estimators"][name], i + 1 if i else "", i == 0  # one legend entry per kind
        for j, ys in enumerate(est["sampled_rewards"][:SHOWN_SEEDS]):
            data.append(
                _line("sampled seeds", ys, COLOURS["seed"], 1, "solid", first and j == 0, suffix, hoverinfo="skip")
            )
        data.append(
            _line(f"sampled mean ({s.seeds} seeds)", est["sampled_mean"], COLOURS["mean"], 2, "dash", first, suffix)
        )
        data.append(
            _line("exact expected-update path", est["exact_reward"], COLOURS["exact"], 3, "solid", first, suffix)
        )
        if result["optimum_reward"] is not None:
            flat = [result["optimum_reward"]] * (s.steps + 1)
            data.append(_line("pi*_beta", flat, COLOURS["optimum"], 1, "dot", first, suffix))
        layout[f"xaxis{suffix}"] = {"title": {"text": "step"} if i >= 2 else {}}
        layout[f"yaxis{suffix}"] = {"title": {"text": "E[r]"} if i % 2 == 0 else {}, "range": [0.4, 1.0]}
        annotations.append(
            {
                "text": f"<b>{name}</b>",
                "showarrow": False,
                "xref": f"x{suffix} domain",
                "yref": f"y{suffix} domain",
                "x": 0.02,
                "y": 0.05,
                "xanchor": "left",
            }
        )
    layout["annotations"] = annotations
    return {"data": data, "layout": layout}


def lesson(result: dict, out: str) -> dict:
    """What the lesson file holds: the command that rebuilds it, the settings, the table (as text and as rows)
    and the figure."""
    return {
        "command": command_line(Settings(**result["settings"]), out),
        "settings": result["settings"],
        "rewards": REWARDS.tolist(),
        "optimum_reward": result["optimum_reward"],
        "table": markdown_table(result),
        "rows": summary_rows(result),
        "figure": figure(result),
    }


def kaleido_installed() -> bool:
    return importlib.util.find_spec("kaleido") is not None


def write(result: dict, out: str) -> list[Path]:
    """Write the lesson file into ``out`` (made if missing), and the figure as a PNG when kaleido is installed.
    Returns the paths written."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    content = lesson(result, out)
    path = folder / LESSON_FILE
    # one top-level key a line: the command, the settings and the table read at a glance, the figure's data below
    path.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in content.items()) + "\n}\n")
    written = [path]
    if kaleido_installed():
        import plotly.io  # plotly and kaleido: only for the PNG, not at start-up

        plotly.io.write_image(content["figure"], folder / FIGURE_FILE, width=1000, height=640)
        written.append(folder / FIGURE_FILE)
    return written
