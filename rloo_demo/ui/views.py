"""Pure functions that turn engine data (metric records, rollout groups, run summaries) into what the page shows:
HTML tables, Markdown, status lines and CLI commands. No gradio import, so they are tested without a server.
"""

from __future__ import annotations

import html
import shlex
from dataclasses import fields

from rloo_demo.config import RunConfig
from rloo_demo.i18n import t
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


def estimate_text(config: RunConfig, step_seconds: float, budget: float | None, locale: str = "en") -> str:
    """'About 45 s: 150 steps × 0.26 s' before Start, and where this server's compute budget would stop it."""
    total = LOAD_SECONDS + config.max_steps * step_seconds
    line = t(
        locale,
        "estimate.line",
        total=_duration(total),
        steps=config.max_steps,
        seconds=f"{step_seconds:.2f}",
        completions=config.completions_per_step,
        tokens=config.max_new_tokens,
    )
    if budget is not None:
        if total > budget:
            steps = max(0, int((budget - LOAD_SECONDS) / step_seconds))
            line += t(locale, "estimate.over_budget", budget=_duration(budget), steps=steps)
        else:
            line += t(locale, "estimate.budget", budget=_duration(budget))
    return line


def status_line(
    status: str,
    records: list[dict],
    max_steps: int,
    elapsed: float | None,
    name: str = "",
    reason: str | None = None,
    locale: str = "en",
) -> str:
    """'step x / N · elapsed · ETA · steps/s' for a run (a run's stop reason stays as the engine wrote it)."""
    step = records[-1].get("step", 0) if records else 0
    # Rate over training time only (from the first logged step), so model loading does not inflate the ETA.
    trained_for = records[-1].get("time") if records else None
    rate = step / trained_for if trained_for and step else None
    eta = (max_steps - step) / rate if rate and status == "running" else None
    parts = [
        f"**{status_word(status, locale)}**",
        t(locale, "status.step", step=step, max_steps=max_steps),
        t(locale, "status.elapsed", elapsed=_duration(elapsed)),
    ]
    if status == "running":
        parts.append(t(locale, "status.eta", eta=_duration(eta)))
    parts.append(t(locale, "status.rate", rate=f"{rate:.2f}" if rate else "–"))
    if records and isinstance(records[-1].get("reward"), int | float):
        parts.append(t(locale, "status.reward", reward=f"{records[-1]['reward']:+.3f}"))
    if name:
        parts.append(t(locale, "status.run", name=f"<code>{text(name)}</code>"))
    line = " · ".join(parts)
    if reason and status == "stopped":
        line += "<br>" + t(locale, "status.stopped_because", reason=text(reason))
    return line


def status_word(status, locale: str = "en") -> str:
    """A run's status ('running', 'finished', ...) in ``locale``; an unknown one as it is, made inert."""
    key = f"status.{status}"
    return (
        t(locale, key)
        if isinstance(status, str) and status in ("running", "finished", "stopped", "failed")
        else text(status)
    )


def group_label(group: dict, locale: str = "en") -> str:
    """The dropdown label of a prompt group."""
    return f"{t(locale, 'groups.prompt', n=group['group'] + 1)}: {prompt_text(group['prompt'])[:40]}"


def group_rows(group: dict, text_chars: int | None = None, locale: str = "en") -> tuple[list[str], list[list]]:
    """Headers and rows of one prompt group: completion, raw scores, -beta*KL, shaped reward, baseline, advantage.

    ``text_chars`` shortens the completion text (for the narrow side table)."""
    names = list(group["weights"])
    headers = ["#", t(locale, "col.completion"), *names, "−β·KL"]
    headers += [t(locale, f"col.{key}") for key in ("shaped_reward", "baseline", "advantage")]
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


def groups_html(groups: list[dict], locale: str = "en") -> str:
    """Every prompt group of a step as a table, rows coloured by the sign of their advantage."""
    if not groups:
        return f"<p class='rloo-empty'>{t(locale, 'groups.empty')}</p>"
    out = []
    empty = f"<i>{t(locale, 'common.empty')}</i>"
    for g in groups:
        headers, rows = group_rows(g, locale=locale)
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = []
        for row, c in zip(rows, g["completions"], strict=True):
            cells = [f"<td>{row[0]}</td>", f"<td class='rloo-text'>{html.escape(row[1]) or empty}</td>"]
            cells += [f"<td>{v:+.3f}</td>" for v in row[2:]]
            body.append(f"<tr class='{_sign_class(c['advantage'])}'>{''.join(cells)}</tr>")
        out.append(
            f"<div class='rloo-group'><div class='rloo-prompt'>{t(locale, 'groups.prompt', n=g['group'] + 1)}: "
            f"<b>{html.escape(prompt_text(g['prompt']))}</b>…</div>"
            f"<table class='rloo-table'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )
    return "".join(out)


def arithmetic_markdown(group: dict, index: int, locale: str = "en") -> str:
    """The arithmetic behind one completion's advantage, with the real numbers of the run."""
    comps = group["completions"]
    k = len(comps)
    c = comps[index]
    others = [(j + 1, o["shaped_reward"]) for j, o in enumerate(comps) if j != index]
    beta = group["beta"]
    score_terms = " + ".join(f"{w:g}·{c['scores'][n]:+.3f} ({n})" for n, w in group["weights"].items())
    lines = [
        t(locale, "arith.head", index=index + 1, group=group["group"] + 1, step=group["step"]),
        f"> {html.escape(c['text']) or t(locale, 'common.empty')}",
        "",
        t(locale, "arith.weighted", terms=score_terms, value=f"{c['weighted_reward']:+.4f}"),
        t(
            locale,
            "arith.shaped",
            weighted=f"{c['weighted_reward']:+.4f}",
            beta=f"{beta:g}",
            kl=f"{c['kl']:.4f}",
            shaped=f"{c['shaped_reward']:+.4f}",
            tokens=c["num_tokens"],
        ),
        (
            t(locale, "arith.no_baseline")
            if group.get("baseline_kind") == "none"
            else t(
                locale,
                "arith.baseline",
                others=k - 1,
                terms=" + ".join(f"({r:+.4f})" for _, r in others),
                baseline=f"{c['baseline']:+.4f}",
            )
        ),
        t(
            locale,
            "arith.advantage",
            shaped=f"{c['shaped_reward']:+.4f}",
            baseline=f"{c['baseline']:+.4f}",
            advantage=f"{c['raw_advantage']:+.4f}",
        ),
    ]
    if group.get("normalize_advantages") and "normalization" in group:
        n = group["normalization"]
        lines.append(
            t(
                locale,
                "arith.normalized",
                raw=f"{c['raw_advantage']:+.4f}",
                mean=f"{n['mean']:+.4f}",
                std=f"{n['std']:.4f}",
                eps=f"{n['eps']:g}",
                advantage=f"{c['advantage']:+.4f}",
            )
        )
    verdict = t(locale, "arith.up" if c["advantage"] > 0 else "arith.down" if c["advantage"] < 0 else "arith.alone")
    lines += ["", t(locale, "arith.verdict", verdict=verdict, advantage=f"{c['advantage']:+.4f}")]
    kl_line = kl_estimators_markdown(c, beta, locale)
    if kl_line:
        lines += ["", kl_line]
    return "\n".join(lines)


def compare_table(samples: list[dict], locale: str = "en") -> tuple[list[str], list[list]]:
    """Headers and rows of one side of Compare: scores first (the completion is the wide column and would push
    them out of view), then the completion."""
    names = list(samples[0]["scores"]) if samples else []
    rows = [[round(s["reward"], 3), *[round(s["scores"][k], 3) for k in names], s["text"]] for s in samples]
    return [t(locale, "col.reward"), *names, t(locale, "col.completion")], rows


def compare_summary(result: dict, locale: str = "en") -> str:
    """Both models' mean reward on the compared prompt, the judges of their text, and the collapse warning (the
    warning comes from the engine, in English)."""
    mean = {k: sum(s["reward"] for s in result[k]) / len(result[k]) for k in ("base", "trained")}
    line = t(
        locale,
        "compare.summary",
        rewards=text(" + ".join(result["trained_on"])),
        base=f"{mean['base']:+.3f}",
        trained=f"{mean['trained']:+.3f}",
        seed=text(result["seed"]),
    )
    judges = result.get("judges")
    if isinstance(judges, dict) and "base" in judges and "trained" in judges:
        line += "<br>" + judges_line(judges, locale)
    if result.get("collapse_warning"):
        line += f"<br>**{text(result['collapse_warning'])}**"
    return line


def _judge(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "–"


def judges_line(judges: dict, locale: str = "en") -> str:
    """'distinct-2 0.91 → 0.12 · repetition ... · base perplexity ...' (base → trained)."""
    b, tr = judges.get("base") or {}, judges.get("trained") or {}
    return t(
        locale,
        "compare.judges",
        d_base=_judge(b.get("distinct_2"), ".2f"),
        d_trained=_judge(tr.get("distinct_2"), ".2f"),
        r_base=_judge(b.get("repetition"), ".2f"),
        r_trained=_judge(tr.get("repetition"), ".2f"),
        p_base=_judge(b.get("base_perplexity"), ".0f"),
        p_trained=_judge(tr.get("base_perplexity"), ".0f"),
    )


def run_rows(summaries: list[dict], locale: str = "en") -> list[list]:
    """Rows for the run history table."""
    rows = []
    for s in summaries:
        first, last = s.get("reward_first"), s.get("reward_last")
        rows.append(
            [
                s["name"],
                status_word(s["status"], locale) if locale != "en" else s["status"],
                f"{s['steps']}/{s.get('max_steps') or '?'}",
                None if first is None else round(first, 3),
                None if last is None else round(last, 3),
                None if s.get("kl_last") is None else round(s["kl_last"], 4),
                t(locale, "common.yes" if s["has_model"] else "common.no"),
                (s.get("error") or "")[:120],
            ]
        )
    return rows


RUN_COLUMNS = ("run", "status", "steps", "first", "last", "kl", "model", "error")
RUN_HEADERS = [t("en", f"runs.col_{c}") for c in RUN_COLUMNS]


def run_headers(locale: str = "en") -> list[str]:
    return [t(locale, f"runs.col_{c}") for c in RUN_COLUMNS]


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


def kl_estimators_markdown(c: dict, beta: float, locale: str = "en") -> str:
    """One completion's three KL estimators and which one shaped its reward."""
    if "kl_k2" not in c:
        return ""
    return t(
        locale,
        "arith.kl_estimators",
        tokens=c["num_tokens"],
        k1=f"{c['kl']:+.4f}",
        k2=f"{c['kl_k2']:.4f}",
        k3=f"{c['kl_k3']:.4f}",
        penalty=f"{-beta * c['kl']:+.4f}",
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


def meter_estimate_text(config: RunConfig, step_seconds: float, locale: str = "en") -> str:
    """What the gradient-variance meter adds to a run's time, from its measured cost in training steps."""
    from rloo_demo.variance import METER_COST_STEPS, measurements

    if not config.variance_every or config.estimator == "grpo":
        return ""
    n = measurements(config.max_steps, config.variance_every)
    extra = n * METER_COST_STEPS * step_seconds
    share = extra / max(config.max_steps * step_seconds, 1e-9)
    return "<br>" + t(
        locale, "estimate.meter", n=n, extra=_duration(extra), share=f"{share:.0%}", cost=f"{METER_COST_STEPS:g}"
    )


# ----------------------------------------------------------------------------- token by token

MEASURES = {
    "delta": "Δ log π (what the update did)",
    "k1": "KL k1 = log π − log π_ref",
    "k3": "KL k3 (never negative)",
    "entropy": "entropy of the policy",
}
# Colours (r, g, b) at full strength; the alpha grows with |value| / scale, so both themes read them.
_UP, _DOWN = (61, 190, 139), (217, 83, 79)  # Δ log π: reinforced, suppressed
_MORE, _LESS = (232, 163, 61), (76, 155, 232)  # KL: the policy likes the token more / less than the reference
_ENTROPY = (155, 123, 216)
_NO_TOKENS = (
    "<p class='rloo-empty'>This completion has no per-token record: its run had <code>record_tokens</code> off, "
    "or was trained before the record existed.</p>"
)


def _token_text(piece) -> str:
    """A token's piece made inert: escaped, and the braces and dollar of template syntax as entities too, so no
    layer that renders the HTML can read a token as markup or as a template."""
    return text(piece).replace("{", "&#123;").replace("}", "&#125;").replace("$", "&#36;")


def _visible(piece) -> str:
    """A piece with its whitespace shown, for the table (a leading space is part of most tokens)."""
    return _token_text(str(piece).replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")) or "∅"


def _scale(values) -> float:
    known = [abs(v) for v in values if v is not None]
    return max(known) if known and max(known) > 0 else 1.0


def token_colour(value: float | None, measure: str, scale: float) -> str:
    """The background of a token: diverging (green/red for Δ log π, orange/blue for k1) or sequential (k3,
    entropy), with the alpha proportional to |value| / scale."""
    if value is None:
        return "rgba(128,128,128,0.10)"
    strength = min(1.0, abs(value) / scale) if scale > 0 else 0.0
    if measure == "delta":
        rgb = _UP if value >= 0 else _DOWN
    elif measure == "k1":
        rgb = _MORE if value >= 0 else _LESS
    elif measure == "k3":
        rgb = _MORE
    else:
        rgb = _ENTROPY
    return f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.08 + 0.62 * strength:.2f})"


def _f4(v) -> str:
    return "–" if v is None else f"{v:+.4f}"


def token_rows(completion: dict) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a completion's tokens with every number (texts already escaped, for HTML)."""
    from rloo_demo import tokens

    before = tokens.column(completion, "token_logp")
    after = tokens.column(completion, "token_logp_after")
    ref = tokens.column(completion, "token_ref_logp")
    columns = [before, after, tokens.delta_logp(completion), ref]
    columns += [tokens.token_kl(completion, "k1"), tokens.token_kl(completion, "k3"), tokens.entropy(completion)]
    headers = ["#", "token", "log π before", "log π after", "Δ log π", "log π_ref", "KL k1", "KL k3", "entropy"]
    rows = []
    for pos, piece in enumerate(completion["token_texts"]):
        rows.append([str(pos + 1), _visible(piece), *[_f4(col[pos]) for col in columns]])
    return headers, rows


def token_spans_html(group: dict, index: int, measure: str = "delta") -> str:
    """One completion as coloured token spans (hover: every number of the token), a legend with the colour scale,
    and a table of the numbers. Every token's text is escaped."""
    from rloo_demo import tokens

    measure = measure if measure in MEASURES else "delta"
    c = group["completions"][index]
    if not tokens.has_tokens(c):
        return _NO_TOKENS
    values = tokens.values_for(c, measure)
    scale = _scale(values)
    headers, rows = token_rows(c)
    spans = []
    for pos, (piece, v) in enumerate(zip(c["token_texts"], values, strict=True)):
        hover = f"token {pos + 1}: " + " · ".join(f"{h} {x}" for h, x in zip(headers[2:], rows[pos][2:], strict=True))
        spans.append(
            f"<span class='rloo-tok' style='background:{token_colour(v, measure, scale)}' "
            f"title='{_token_text(str(piece))!s} | {hover}'>{_token_text(piece) or '∅'}</span>"
        )
    if measure == "delta":
        legend = (
            f"<span class='rloo-swatch' style='background:{token_colour(scale, measure, scale)}'>reinforced</span> "
            f"<span class='rloo-swatch' style='background:{token_colour(-scale, measure, scale)}'>suppressed</span>"
        )
    elif measure == "k1":
        legend = (
            f"<span class='rloo-swatch' style='background:{token_colour(scale, measure, scale)}'>π above π_ref</span> "
            f"<span class='rloo-swatch' style='background:{token_colour(-scale, measure, scale)}'>π below π_ref</span>"
        )
    else:
        legend = f"<span class='rloo-swatch' style='background:{token_colour(scale, measure, scale)}'>high</span>"
    if all(v is None for v in values):
        legend = "no values: " + ("the run had β = 0, so no reference" if measure in ("k1", "k3") else "not recorded")
    else:
        legend += f" full colour at |value| = {scale:.3f} (this completion's largest); hover a token for its numbers"
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{x}</td>" for x in row) + "</tr>" for row in rows)
    return (
        f"<div class='rloo-tokens' data-measure='{measure}'>"
        f"<div class='rloo-token-head'>Completion #{index + 1} of prompt {group['group'] + 1} (step {group['step']}), "
        f"coloured by <b>{text(MEASURES[measure])}</b> · {legend}</div>"
        f"<div class='rloo-token-text'>{''.join(spans)}</div>"
        f"<details><summary>The numbers, token by token</summary><table class='rloo-table rloo-token-table'>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></details></div>"
    )


def _extreme(pieces, values, pick) -> tuple[str, float] | None:
    known = [(v, p) for p, v in zip(pieces, values, strict=True) if v is not None]
    if not known:
        return None
    v, p = pick(known, key=lambda x: x[0])
    return _visible(p), v


def token_note_markdown(group: dict, index: int, measure: str = "delta") -> str:
    """'What am I looking at?' for the token view, with the selected completion's own numbers."""
    from rloo_demo import tokens

    measure = measure if measure in MEASURES else "delta"
    c = group["completions"][index]
    if not tokens.has_tokens(c):
        return ""
    pieces, n, adv = c["token_texts"], len(c["token_texts"]), c["advantage"]
    if measure == "delta":
        deltas = tokens.delta_logp(c)
        total = tokens.total(deltas)
        if total is None:
            return "No log-probabilities after the update were recorded for this completion."
        up = sum(1 for d in deltas if d is not None and d > 0)
        rise, fall = _extreme(pieces, deltas, max), _extreme(pieces, deltas, min)
        direction = "raise" if adv > 0 else "lower" if adv < 0 else "leave alone"
        moved = "rose" if total > 0 else "fell"
        lines = [
            f"Its advantage was **{adv:+.4f}**, so the update was meant to {direction} the probability of the whole "
            f"completion. After the step, its log-probability {moved} by **Σ Δ log π = {total:+.4f}** nats over "
            f"{n} tokens: {up} went up, {n - up} went down (largest rise <code>{rise[0]}</code> {rise[1]:+.4f}, "
            f"largest fall <code>{fall[0]}</code> {fall[1]:+.4f}).",
            "",
            "RLOO hands one number to the whole completion; how it spreads over the tokens is up to the gradient. A "
            "token can fall in a reinforced completion (or rise in a suppressed one) because every completion of the "
            "batch pulls on the same weights: the exceptions are the lesson. Green: reinforced, red: suppressed.",
        ]
        return "\n".join(lines)
    if measure in ("k1", "k3"):
        values = tokens.token_kl(c, measure)
        total = tokens.total(values)
        if total is None:
            return "This run had β = 0: no reference model was scored, so there is no KL to show."
        top = sorted((abs(v) for v in values if v is not None), reverse=True)
        share = sum(top[:3]) / sum(top) if sum(top) > 0 else 0.0
        k1_total = tokens.total(tokens.token_kl(c, "k1"))
        lines = [
            f"Per-token KL of this completion to the reference, by **{measure}**: Σ = **{total:+.4f}** nats over {n} "
            f"tokens; the 3 largest tokens hold {share:.0%} of Σ|{measure}|.",
            "",
            f"TRL subtracts β·Σ k1 from the reward: here Σ k1 = {k1_total:+.4f} (its `kl`, "
            f"{c['kl']:+.4f}), times β = {group['beta']:g}, is the −β·KL = {c['kl_penalty']:+.4f} in its shaped "
            "reward. k1 = log π − log π_ref is negative where the policy likes a token less than the reference does; "
            "k3 = r − 1 − log r (r = π_ref/π) is never negative and has the same expectation. Orange: the policy "
            "likes the token more than the reference, blue: less.",
        ]
        return "\n".join(lines)
    values = tokens.entropy(c)
    known = [v for v in values if v is not None]
    if not known:
        return "No entropies were recorded for this completion."
    low, high = _extreme(pieces, values, min), _extreme(pieces, values, max)
    return (
        f"Entropy of the policy at each position before the update: mean **{sum(known) / len(known):.3f}** nats "
        f"over {n} tokens, lowest <code>{low[0]}</code> ({low[1]:.3f}: the policy was nearly sure what came next), "
        f"highest <code>{high[0]}</code> ({high[1]:.3f}: many tokens were plausible there). As training sharpens the "
        "policy the "
        "entropy falls; where it is already near 0 the update has little left to change."
    )


def kl_heatmap_note(groups: list[dict], locale: str = "en") -> str:
    """'What am I looking at?' for the batch heatmap, with where this step's KL lives."""
    from rloo_demo import tokens

    _, rows = tokens.kl_matrix(groups)
    where = tokens.kl_location(rows)
    if where is None:
        return t(locale, "heatmap.none")
    return t(
        locale,
        "heatmap.note",
        tokens=where["tokens"],
        start=f"{where['start_share']:.0%}",
        end=f"{where['end_share']:.0%}",
        top=f"{where['top_share']:.0%}",
        top_tokens=where["top_tokens"],
    )


def probe_html(result: dict) -> str:
    """The history of one prompt: one column per policy (base, snapshots, the latest), one row per sample, each
    cell tinted by the sign of its reward. The same seed for every column, so a row compares like with like."""
    steps = result.get("steps") or []
    if not steps:
        return "<p class='rloo-empty'>No policy to sample.</p>"
    head = "<th>#</th>" + "".join(
        f"<th>{text(s['label'])}<br><span class='rloo-small-num'>mean reward {s['mean_reward']:+.3f}</span></th>"
        if s.get("mean_reward") is not None
        else f"<th>{text(s['label'])}</th>"
        for s in steps
    )
    k = max(len(s["samples"]) for s in steps)
    body = []
    for i in range(k):
        cells = [f"<td>{i + 1}</td>"]
        for s in steps:
            if i < len(s["samples"]):
                sample = s["samples"][i]
                cls = _sign_class(sample["reward"], tol=0.05)
                cells.append(
                    f"<td class='rloo-text {cls}' title='reward {sample['reward']:+.3f}'>"
                    f"{_token_text(sample['text']) or '<i>(empty)</i>'}</td>"
                )
            else:
                cells.append("<td></td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f"<div class='rloo-probe'><div class='rloo-prompt'>Prompt: <b>{_token_text(result.get('prompt', ''))}</b>…"
        f"</div><table class='rloo-table rloo-probe-table'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def probe_note(result: dict) -> str:
    """'What am I looking at?' for the probe, with its numbers."""
    steps = [s for s in result.get("steps") or [] if s.get("mean_reward") is not None]
    if not steps:
        return ""
    first, last = steps[0], steps[-1]
    return (
        f"{result.get('num_samples', len(first['samples']))} completions of the same prompt from each of "
        f"{len(steps)} policies of this run, all with seed {result.get('seed')}: row 1 of every column starts from "
        "the same random numbers, so a change along a row is the model's doing, not the dice's. "
        f"Mean reward {text(first['label'])} **{first['mean_reward']:+.3f}** → {text(last['label'])} "
        f"**{last['mean_reward']:+.3f}**. A run saves a snapshot every `snapshot_every` steps"
        + (f" ({result['snapshot_every']} here)" if result.get("snapshot_every") else " (off in this run)")
        + (f" and keeps at most {result['kept']}, spread over the run." if result.get("kept") else ".")
    )
