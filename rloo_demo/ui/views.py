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
        (
            "3. baseline = **0**: this run trains plain REINFORCE (no baseline)"
            if group.get("baseline_kind") == "none"
            else f"3. baseline = mean of the other {k - 1} shaped rewards = ("
            + " + ".join(f"({r:+.4f})" for _, r in others)
            + f") / {k - 1} = **{c['baseline']:+.4f}**"
        ),
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
    kl_line = kl_estimators_markdown(c, beta)
    if kl_line:
        lines += ["", kl_line]
    return "\n".join(lines)


def compare_table(samples: list[dict]) -> tuple[list[str], list[list]]:
    """Headers and rows of one side of Compare: scores first (the completion is the wide column and would push
    them out of view), then the completion."""
    names = list(samples[0]["scores"]) if samples else []
    rows = [[round(s["reward"], 3), *[round(s["scores"][k], 3) for k in names], s["text"]] for s in samples]
    return ["reward", *names, "completion"], rows


def compare_summary(result: dict) -> str:
    """Both models' mean reward on the compared prompt, the judges of their text, and the collapse warning."""
    mean = {k: sum(s["reward"] for s in result[k]) / len(result[k]) for k in ("base", "trained")}
    line = (
        f"Mean reward ({text(' + '.join(result['trained_on']))}): base **{mean['base']:+.3f}**, "
        f"trained **{mean['trained']:+.3f}** · same seed {result['seed']} for both"
    )
    judges = result.get("judges")
    if isinstance(judges, dict) and "base" in judges and "trained" in judges:
        line += "<br>" + judges_line(judges)
    if result.get("collapse_warning"):
        line += f"<br>**{text(result['collapse_warning'])}**"
    return line


def _judge(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "–"


def judges_line(judges: dict) -> str:
    """'distinct-2 0.91 → 0.12 · repetition ... · base perplexity ...' (base → trained)."""
    b, t = judges.get("base") or {}, judges.get("trained") or {}
    return (
        f"Judges of the text (base → trained): distinct-2 {_judge(b.get('distinct_2'), '.2f')} → "
        f"{_judge(t.get('distinct_2'), '.2f')} · repetition {_judge(b.get('repetition'), '.2f')} → "
        f"{_judge(t.get('repetition'), '.2f')} · base model's perplexity {_judge(b.get('base_perplexity'), '.0f')} → "
        f"{_judge(t.get('base_perplexity'), '.0f')}"
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


# ----------------------------------------------------------------------------- why leave-one-out (issue 9)

WHATIF_COLUMNS = ("rloo", "grpo", "dr_grpo", "reinforce_pp", "batch_mean", "reinforce")


def whatif_markdown(groups: list[dict], index: int) -> str:
    """For group ``index`` of a step: the same completions' advantages under every estimator, side by side, and the
    identity A_rloo = K/(K−1)·(r − group mean) written out with the real numbers. The rewards r are the shaped
    rewards the trainer used; the batch-level estimators see the whole step."""
    from rloo_demo.advantages import ESTIMATOR_NOTES, what_if

    if not groups or not 0 <= index < len(groups):
        return ""
    k = len(groups[0]["completions"])
    if k < 2 or any(len(g["completions"]) != k for g in groups):
        return ""
    rewards = [c["shaped_reward"] for g in groups for c in g["completions"]]
    table = what_if(rewards, k)
    g = groups[index]
    start = index * k
    mine = rewards[start : start + k]
    mean = sum(mine) / k
    factor = k / (k - 1)
    lines = [
        f"#### What if another estimator had turned these rewards into advantages? (prompt {g['group'] + 1})",
        f"r is the shaped reward the trainer used; `reinforce_pp` and `batch_mean` use all {len(rewards)} "
        "completions of the step.",
        "",
        "| # | r | " + " | ".join(WHATIF_COLUMNS) + " |",
        "|---|---|" + "---|" * len(WHATIF_COLUMNS),
    ]
    for i in range(k):
        cells = " | ".join(f"{table[name][start + i]:+.3f}" for name in WHATIF_COLUMNS)
        lines.append(f"| {i + 1} | {mine[i]:+.3f} | {cells} |")
    lines += [
        "",
        f"**The identity** A_rloo = K/(K−1)·(r − group mean), with this group's numbers: K = {k}, "
        f"K/(K−1) = {k}/{k - 1} = {factor:.4f}, group mean = ("
        + " + ".join(f"{r:+.4f}" for r in mine)
        + f") / {k} = {mean:+.4f}",
        "",
    ]
    for i, r in enumerate(mine):
        others = (sum(mine) - r) / (k - 1)
        lines.append(
            f"- #{i + 1}: {factor:.4f} · ({r:+.4f} − ({mean:+.4f})) = {factor * (r - mean):+.4f} = "
            f"r − mean of the other {k - 1} = {r:+.4f} − ({others:+.4f}) = **{table['rloo'][start + i]:+.4f}**"
        )
    std = (sum((r - mean) ** 2 for r in mine) / (k - 1)) ** 0.5
    lines += [
        "",
        f"Why it matters: `dr_grpo` is the same direction scaled by (K−1)/K = {1 / factor:.3f} (its mean includes "
        f"the completion itself). `grpo` also divides by this group's std ({std:.4f}), so a group of nearly equal "
        "rewards gets advantages as large as one of very different rewards. `reinforce_pp` and `batch_mean` compare "
        "with the whole batch, so an easy prompt pushes all its completions up. `reinforce` has no baseline: every "
        "positive reward pushes its completion up.",
    ]
    if g.get("normalize_advantages"):
        lines.append("This run also normalised RLOO's advantages over the batch: see the table's advantage column.")
    lines += ["", " · ".join(f"`{name}`: {ESTIMATOR_NOTES[name]}" for name in WHATIF_COLUMNS)]
    return "\n".join(lines)


def kl_estimators_markdown(c: dict, beta: float) -> str:
    """One completion's three KL estimators and which one shaped its reward."""
    if "kl_k2" not in c:
        return ""
    return (
        f"KL estimators over its {c['num_tokens']} tokens: k1 = Σ(log π − log π_ref) = {c['kl']:+.4f} · "
        f"k2 = Σ½(log π − log π_ref)² = {c['kl_k2']:.4f} · k3 = Σ(π_ref/π − 1 − log(π_ref/π)) = {c['kl_k3']:.4f} "
        f"(k2, k3 ≥ 0). **k1 shaped the reward** (−β·k1 = {-beta * c['kl']:+.4f}); GRPO puts k3 in its loss."
    )


LIVE_JUDGE_STEPS = 5  # the live collapse warning averages the judges over the latest steps


def live_collapse_warning(records: list[dict]) -> str | None:
    """The collapse warning on the latest steps' judges (averaged over ``LIVE_JUDGE_STEPS``), or None."""
    from rloo_demo.judges import collapse_warning

    latest = [r for r in records if isinstance(r.get("judges/distinct_2"), int | float)][-LIVE_JUDGE_STEPS:]
    if not latest:
        return None
    judged = {
        key: sum(r[f"judges/{key}"] for r in latest) / len(latest)
        for key in ("distinct_2", "repetition")
        if all(isinstance(r.get(f"judges/{key}"), int | float) for r in latest)
    }
    return collapse_warning(judged)


def prechecks_markdown(warnings: list[str]) -> str:
    return "".join(f"<br>⚠ {text(w)}" for w in warnings)


def meter_estimate_text(config: RunConfig, step_seconds: float) -> str:
    """What the gradient-variance meter adds to a run's time, from its measured cost in training steps."""
    from rloo_demo.variance import METER_COST_STEPS, measurements

    if not config.variance_every or config.estimator == "grpo":
        return ""
    n = measurements(config.max_steps, config.variance_every)
    extra = n * METER_COST_STEPS * step_seconds
    share = extra / max(config.max_steps * step_seconds, 1e-9)
    return (
        f"<br>Gradient-variance meter: {n} measurement(s), about +{_duration(extra)} (+{share:.0%} of the training "
        f"time; each costs about {METER_COST_STEPS:g} steps)"
    )
