"""Pure functions that turn engine data (metric records, rollout groups, run summaries) into what the page shows:
HTML tables, Markdown, status lines and CLI commands. No gradio import, so they are tested without a server.
"""

from __future__ import annotations

import html
import shlex
from dataclasses import fields

from rloo_demo.config import RunConfig
from rloo_demo.prompts import prompt_text

POS, NEG, ZERO = "rloo-pos", "rloo-neg", "rloo-zero"


def _sign_class(value: float, tol: float = 1e-6) -> str:
    return POS if value > tol else NEG if value < -tol else ZERO


def _fmt(x: float) -> str:
    return f"{x:+.3f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


# The default run (16 completions x 24 tokens a step) measured on 2 cores; scaled by completions x tokens for
# other settings when the server has not yet finished a run of its own to learn from.
DEFAULT_STEP_SECONDS = 0.26
DEFAULT_STEP_WORK = 16 * 24
LOAD_SECONDS = 3.0  # loading the models and prompts before the first step


def text(value) -> str:
    """Any text from a run or a user, made inert for a Markdown or HTML component (no tags, no entities)."""
    return html.escape(str(value), quote=True)


def estimate_text(config: RunConfig, step_seconds: float, budget: float | None) -> str:
    """'About 45 s: 150 steps × 0.26 s' before Start, and where this server's compute budget would stop it."""
    total = LOAD_SECONDS + config.max_steps * step_seconds
    line = (
        f"Estimated time: about **{_duration(total)}** ({config.max_steps} steps × {step_seconds:.2f} s for "
        f"{config.completions_per_step} completions of up to {config.max_new_tokens} tokens)"
    )
    if budget is not None:
        if total > budget:
            steps = max(0, int((budget - LOAD_SECONDS) / step_seconds))
            line += (
                f". **This server stops runs after {_duration(budget)}**: this one would stop near step {steps} "
                "and keep its model."
            )
        else:
            line += f"; this server's limit is {_duration(budget)} a run."
    return line


def status_line(
    status: str,
    records: list[dict],
    max_steps: int,
    elapsed: float | None,
    name: str = "",
    reason: str | None = None,
) -> str:
    """'step x / N · elapsed · ETA · steps/s' for a run."""
    step = records[-1].get("step", 0) if records else 0
    # Rate over training time only (from the first logged step), so model loading does not inflate the ETA.
    trained_for = records[-1].get("time") if records else None
    rate = step / trained_for if trained_for and step else None
    eta = (max_steps - step) / rate if rate and status == "running" else None
    parts = [f"**{text(status)}**", f"step {step} / {max_steps}", f"elapsed {_duration(elapsed)}"]
    if status == "running":
        parts.append(f"ETA {_duration(eta)}")
    parts.append(f"{rate:.2f} steps/s" if rate else "– steps/s")
    if records and isinstance(records[-1].get("reward"), int | float):
        parts.append(f"reward {records[-1]['reward']:+.3f}")
    if name:
        parts.append(f"run <code>{text(name)}</code>")
    line = " · ".join(parts)
    if reason and status == "stopped":
        line += f"<br>stopped because {text(reason)}"
    return line


def group_label(group: dict) -> str:
    """The dropdown label of a prompt group."""
    return f"Prompt {group['group'] + 1}: {prompt_text(group['prompt'])[:40]}"


def group_rows(group: dict, text_chars: int | None = None) -> tuple[list[str], list[list]]:
    """Headers and rows of one prompt group: completion, raw scores, -beta*KL, shaped reward, baseline, advantage.

    ``text_chars`` shortens the completion text (for the narrow side table)."""
    names = list(group["weights"])
    headers = ["#", "completion", *names, "−β·KL", "shaped reward", "LOO baseline", "advantage"]
    rows = []
    for i, c in enumerate(group["completions"], 1):
        rows.append(
            [
                i,
                c["text"] if text_chars is None or len(c["text"]) <= text_chars else c["text"][:text_chars] + "…",
                *[round(c["scores"][n], 4) for n in names],
                round(c["kl_penalty"], 4),
                round(c["shaped_reward"], 4),
                round(c["baseline"], 4),
                round(c["advantage"], 4),
            ]
        )
    return headers, rows


def groups_html(groups: list[dict]) -> str:
    """Every prompt group of a step as a table, rows coloured by the sign of their advantage."""
    if not groups:
        return "<p class='rloo-empty'>No rollouts yet. Start a run, or pick a run that has steps.</p>"
    out = []
    for g in groups:
        headers, rows = group_rows(g)
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = []
        for row, c in zip(rows, g["completions"], strict=True):
            cells = [f"<td>{row[0]}</td>", f"<td class='rloo-text'>{html.escape(row[1]) or '<i>(empty)</i>'}</td>"]
            cells += [f"<td>{v:+.3f}</td>" for v in row[2:]]
            body.append(f"<tr class='{_sign_class(c['advantage'])}'>{''.join(cells)}</tr>")
        out.append(
            f"<div class='rloo-group'><div class='rloo-prompt'>Prompt {g['group'] + 1}: "
            f"<b>{html.escape(prompt_text(g['prompt']))}</b>…</div>"
            f"<table class='rloo-table'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )
    return "".join(out)


def arithmetic_markdown(group: dict, index: int) -> str:
    """The arithmetic behind one completion's advantage, with the real numbers of the run."""
    comps = group["completions"]
    k = len(comps)
    c = comps[index]
    others = [(j + 1, o["shaped_reward"]) for j, o in enumerate(comps) if j != index]
    beta = group["beta"]
    score_terms = " + ".join(f"{w:g}·{c['scores'][n]:+.3f} ({n})" for n, w in group["weights"].items())
    lines = [
        f"**Completion #{index + 1}** of prompt {group['group'] + 1} (step {group['step']}):",
        f"> {html.escape(c['text']) or '(empty)'}",
        "",
        f"1. weighted reward = {score_terms} = **{c['weighted_reward']:+.4f}**",
        f"2. shaped reward = weighted reward − β·KL = {c['weighted_reward']:+.4f} − {beta:g}·{c['kl']:.4f} "
        f"= **{c['shaped_reward']:+.4f}**  (KL = Σ over its {c['num_tokens']} tokens of log π − log π_ref)",
        f"3. baseline = mean of the other {k - 1} shaped rewards = ("
        + " + ".join(f"({r:+.4f})" for _, r in others)
        + f") / {k - 1} = **{c['baseline']:+.4f}**",
        f"4. advantage = shaped reward − baseline = {c['shaped_reward']:+.4f} − ({c['baseline']:+.4f}) "
        f"= **{c['raw_advantage']:+.4f}**",
    ]
    if group.get("normalize_advantages") and "normalization" in group:
        n = group["normalization"]
        lines.append(
            f"5. normalised over the batch: ({c['raw_advantage']:+.4f} − {n['mean']:+.4f}) / ({n['std']:.4f} + "
            f"{n['eps']:g}) = **{c['advantage']:+.4f}**"
        )
    verdict = "pushed **up**" if c["advantage"] > 0 else "pushed **down**" if c["advantage"] < 0 else "left alone"
    lines += ["", f"The whole completion's log-probability is {verdict} in proportion to {c['advantage']:+.4f}."]
    return "\n".join(lines)


def compare_table(samples: list[dict]) -> tuple[list[str], list[list]]:
    """Headers and rows of one side of Compare: scores first (the completion is the wide column and would push
    them out of view), then the completion."""
    names = list(samples[0]["scores"]) if samples else []
    rows = [[round(s["reward"], 3), *[round(s["scores"][k], 3) for k in names], s["text"]] for s in samples]
    return ["reward", *names, "completion"], rows


def compare_summary(result: dict) -> str:
    """Both models' mean reward on the compared prompt."""
    mean = {k: sum(s["reward"] for s in result[k]) / len(result[k]) for k in ("base", "trained")}
    return (
        f"Mean reward ({text(' + '.join(result['trained_on']))}): base **{mean['base']:+.3f}**, "
        f"trained **{mean['trained']:+.3f}** · same seed {result['seed']} for both"
    )


def run_rows(summaries: list[dict]) -> list[list]:
    """Rows for the run history table."""
    rows = []
    for s in summaries:
        first, last = s.get("reward_first"), s.get("reward_last")
        rows.append(
            [
                s["name"],
                s["status"],
                f"{s['steps']}/{s.get('max_steps') or '?'}",
                None if first is None else round(first, 3),
                None if last is None else round(last, 3),
                None if s.get("kl_last") is None else round(s["kl_last"], 4),
                "yes" if s["has_model"] else "no",
                (s.get("error") or "")[:120],
            ]
        )
    return rows


RUN_HEADERS = ["run", "status", "steps", "first reward", "last reward", "last KL", "model", "error"]


def cli_command(config: RunConfig) -> str:
    """The ``python -m rloo_demo train`` command that reproduces a run's config (flags only for non-defaults)."""
    default = RunConfig()
    parts = ["python", "-m", "rloo_demo", "train"]
    for f in fields(RunConfig):
        value = getattr(config, f.name)
        if f.name in ("output_dir", "run_name") or value == getattr(default, f.name):
            continue
        if f.name == "reward_weights" and config.weights == [1.0] * len(config.rewards):
            continue  # the same as no weights
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + f.name.replace("_", "-"))
        elif isinstance(value, list):
            parts += [flag, *[str(v) for v in value]]
        elif value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)
