"""Pure functions that turn engine data (metric records, rollout groups, run summaries) into what the page shows:
HTML tables, Markdown, status lines and CLI commands. No gradio import, so they are tested without a server.
"""

from __future__ import annotations

import html
import re
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


# The default run (16 completions x 24 tokens a step, per-token record on) measured on 2 cores by
# scripts/bench_engine.py (150 steps in 106 s with loading, 30 Nov 2026); scaled by completions x tokens for other
# settings when the server has not yet finished a run of its own to learn from.
DEFAULT_STEP_SECONDS = 0.65
DEFAULT_STEP_WORK = 16 * 24
LOAD_SECONDS = 3.0  # loading the models and prompts before the first step


def text(value) -> str:
    """Any text from a run or a user, made inert for a Markdown or HTML component (no tags, no entities)."""
    return html.escape(str(value), quote=True)


def estimate_text(config: RunConfig, step_seconds: float, budget: float | None, locale: str = "en") -> str:
    """'About 1:41: 150 steps × 0.65 s' before Start, and where this server's compute budget would stop it."""
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
    """Both models' mean reward on the compared prompt, the judges of their text, and the collapse warning (written
    again in ``locale`` from the judges it was made of)."""
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
        from rloo_demo.judges import collapse_warning

        judged = judges if isinstance(judges, dict) and isinstance(judges.get("trained"), dict) else None
        warning = collapse_warning(judged["trained"], judged.get("base"), locale) if judged else None
        line += f"<br>**{text(warning or result['collapse_warning'])}**"
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


def whatif_markdown(groups: list[dict], index: int, locale: str = "en") -> str:
    """For group ``index`` of a step: the same completions' advantages under every estimator, side by side, and the
    identity A_rloo = K/(K−1)·(r − group mean) written out with the real numbers. The rewards r are the shaped
    rewards the trainer used; the batch-level estimators see the whole step."""
    from rloo_demo.advantages import what_if

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
        t(locale, "whatif.title", prompt=g["group"] + 1),
        t(locale, "whatif.intro", n=len(rewards)),
        "",
        "| # | r | " + " | ".join(WHATIF_COLUMNS) + " |",
        "|---|---|" + "---|" * len(WHATIF_COLUMNS),
    ]
    for i in range(k):
        cells = " | ".join(f"{table[name][start + i]:+.3f}" for name in WHATIF_COLUMNS)
        lines.append(f"| {i + 1} | {mine[i]:+.3f} | {cells} |")
    lines += [
        "",
        t(
            locale,
            "whatif.identity",
            k=k,
            fraction=f"{k}/{k - 1} = {factor:.4f}",
            mean="(" + " + ".join(f"{r:+.4f}" for r in mine) + f") / {k} = {mean:+.4f}",
        ),
        "",
    ]
    for i, r in enumerate(mine):
        others = (sum(mine) - r) / (k - 1)
        lines.append(
            f"- #{i + 1}: {factor:.4f} · ({r:+.4f} − ({mean:+.4f})) = {factor * (r - mean):+.4f} = "
            f"{t(locale, 'whatif.others', n=k - 1)} = {r:+.4f} − ({others:+.4f}) = **{table['rloo'][start + i]:+.4f}**"
        )
    std = (sum((r - mean) ** 2 for r in mine) / (k - 1)) ** 0.5
    lines += ["", t(locale, "whatif.why", scale=f"{1 / factor:.3f}", std=f"{std:.4f}")]
    if g.get("normalize_advantages"):
        lines.append(t(locale, "whatif.normalized"))
    # the notes of rloo_demo.advantages.ESTIMATOR_NOTES, one 'estimator.<name>' key each (tests keep them equal)
    lines += ["", " · ".join(f"`{name}`: {t(locale, f'estimator.{name}')}" for name in WHATIF_COLUMNS)]
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


def live_collapse_warning(records: list[dict], locale: str = "en") -> str | None:
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
    return collapse_warning(judged, locale=locale)


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

MEASURES = ("delta", "k1", "k3", "entropy")  # what colours the tokens; each named by its 'measure.<key>' text
# Colours (r, g, b) at full strength; the alpha grows with |value| / scale, so both themes read them.
_UP, _DOWN = (61, 190, 139), (217, 83, 79)  # Δ log π: reinforced, suppressed
_MORE, _LESS = (232, 163, 61), (76, 155, 232)  # KL: the policy likes the token more / less than the reference
_ENTROPY = (155, 123, 216)


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


def token_rows(completion: dict, locale: str = "en") -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a completion's tokens with every number (texts already escaped, for HTML)."""
    from rloo_demo import tokens

    before = tokens.column(completion, "token_logp")
    after = tokens.column(completion, "token_logp_after")
    ref = tokens.column(completion, "token_ref_logp")
    columns = [before, after, tokens.delta_logp(completion), ref]
    columns += [tokens.token_kl(completion, "k1"), tokens.token_kl(completion, "k3"), tokens.entropy(completion)]
    headers = ["#", t(locale, "tokens.col_token"), t(locale, "tokens.col_before"), t(locale, "tokens.col_after")]
    headers += ["Δ log π", "log π_ref", "KL k1", "KL k3", t(locale, "tokens.col_entropy")]
    rows = []
    for pos, piece in enumerate(completion["token_texts"]):
        rows.append([str(pos + 1), _visible(piece), *[_f4(col[pos]) for col in columns]])
    return headers, rows


def token_spans_html(group: dict, index: int, measure: str = "delta", locale: str = "en") -> str:
    """One completion as coloured token spans (hover: every number of the token), a legend with the colour scale,
    and a table of the numbers. Every token's text is escaped."""
    from rloo_demo import tokens

    measure = measure if measure in MEASURES else "delta"
    c = group["completions"][index]
    if not tokens.has_tokens(c):
        return f"<p class='rloo-empty'>{t(locale, 'tokens.no_record')}</p>"
    values = tokens.values_for(c, measure)
    scale = _scale(values)
    headers, rows = token_rows(c, locale)
    spans = []
    for pos, (piece, v) in enumerate(zip(c["token_texts"], values, strict=True)):
        numbers = " · ".join(f"{h} {x}" for h, x in zip(headers[2:], rows[pos][2:], strict=True))
        hover = f"{t(locale, 'tokens.hover', n=pos + 1)} {numbers}"  # escaped below: a translation may hold a quote
        spans.append(
            f"<span class='rloo-tok' style='background:{token_colour(v, measure, scale)}' "
            f"title='{_token_text(str(piece))!s} | {text(hover)}'>{_token_text(piece) or '∅'}</span>"
        )

    def swatch(value, key):
        colour = token_colour(value, measure, scale)
        return f"<span class='rloo-swatch' style='background:{colour}'>{t(locale, key)}</span>"

    if measure == "delta":
        legend = f"{swatch(scale, 'tokens.reinforced')} {swatch(-scale, 'tokens.suppressed')}"
    elif measure == "k1":
        legend = f"{swatch(scale, 'tokens.above_ref')} {swatch(-scale, 'tokens.below_ref')}"
    else:
        legend = swatch(scale, "tokens.high")
    if all(v is None for v in values):
        legend = t(locale, "tokens.no_values_beta0" if measure in ("k1", "k3") else "tokens.no_values")
    else:
        legend += " " + t(locale, "tokens.full_colour", scale=f"{scale:.3f}")
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{x}</td>" for x in row) + "</tr>" for row in rows)
    title = t(
        locale,
        "tokens.head",
        index=index + 1,
        group=group["group"] + 1,
        step=group["step"],
        measure=f"<b>{text(t(locale, f'measure.{measure}'))}</b>",
    )
    return (
        f"<div class='rloo-tokens' data-measure='{measure}'>"
        f"<div class='rloo-token-head'>{title} · {legend}</div>"
        f"<div class='rloo-token-text'>{''.join(spans)}</div>"
        f"<details><summary>{t(locale, 'tokens.numbers')}</summary><table class='rloo-table rloo-token-table'>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></details></div>"
    )


def _extreme(pieces, values, pick) -> tuple[str, float] | None:
    known = [(v, p) for p, v in zip(pieces, values, strict=True) if v is not None]
    if not known:
        return None
    v, p = pick(known, key=lambda x: x[0])
    return _visible(p), v


def token_note_markdown(group: dict, index: int, measure: str = "delta", locale: str = "en") -> str:
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
            return t(locale, "tokens.note_delta_none")
        up = sum(1 for d in deltas if d is not None and d > 0)
        rise, fall = _extreme(pieces, deltas, max), _extreme(pieces, deltas, min)
        direction = "raise" if adv > 0 else "lower" if adv < 0 else "keep"
        note = t(locale, f"tokens.note_delta_{direction}", advantage=f"{adv:+.4f}") + " "
        note += t(
            locale,
            "tokens.note_delta_rose" if total > 0 else "tokens.note_delta_fell",
            total=f"{total:+.4f}",
            n=n,
            up=up,
            down=n - up,
            rise=f"<code>{rise[0]}</code> {rise[1]:+.4f}",
            fall=f"<code>{fall[0]}</code> {fall[1]:+.4f}",
        )
        return note + "\n\n" + t(locale, "tokens.note_delta_lesson")
    if measure in ("k1", "k3"):
        values = tokens.token_kl(c, measure)
        total = tokens.total(values)
        if total is None:
            return t(locale, "tokens.note_kl_none")
        top = sorted((abs(v) for v in values if v is not None), reverse=True)
        share = sum(top[:3]) / sum(top) if sum(top) > 0 else 0.0
        k1_total = tokens.total(tokens.token_kl(c, "k1"))
        lines = [
            t(locale, "tokens.note_kl", measure=measure, total=f"{total:+.4f}", n=n, share=f"{share:.0%}"),
            "",
            t(
                locale,
                "tokens.note_kl_trl",
                k1=f"{k1_total:+.4f}",
                kl=f"{c['kl']:+.4f}",
                beta=f"{group['beta']:g}",
                penalty=f"{c['kl_penalty']:+.4f}",
            ),
        ]
        return "\n".join(lines)
    values = tokens.entropy(c)
    known = [v for v in values if v is not None]
    if not known:
        return t(locale, "tokens.note_entropy_none")
    low, high = _extreme(pieces, values, min), _extreme(pieces, values, max)
    return t(
        locale,
        "tokens.note_entropy",
        mean=f"{sum(known) / len(known):.3f}",
        n=n,
        low=f"<code>{low[0]}</code>",
        low_value=f"{low[1]:.3f}",
        high=f"<code>{high[0]}</code>",
        high_value=f"{high[1]:.3f}",
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


# The probe's policy labels, as the controller writes them (English): (pattern, key), the step number kept.
_PROBE_LABELS = (
    (re.compile(r"^base policy \(step (?P<step>\d+)\)$"), "probe.label_base"),
    (re.compile(r"^step (?P<step>\d+)$"), "probe.label_step"),
    (re.compile(r"^final \(step (?P<step>\d+)\)$"), "probe.label_final"),
    (re.compile(r"^now \(step (?P<step>\d+), training\)$"), "probe.label_now"),
)


def probe_label(label, locale: str = "en") -> str:
    """A policy's label in the probe, in ``locale`` and made inert (one not known is shown as it is)."""
    for pattern, key in _PROBE_LABELS:
        m = pattern.match(label) if isinstance(label, str) else None
        if m:
            return t(locale, key, step=m["step"])
    return text(label)


def probe_html(result: dict, locale: str = "en") -> str:
    """The history of one prompt: one column per policy (base, snapshots, the latest), one row per sample, each
    cell tinted by the sign of its reward. The same seed for every column, so a row compares like with like."""
    steps = result.get("steps") or []
    if not steps:
        return f"<p class='rloo-empty'>{t(locale, 'probe.none')}</p>"

    def column_head(s: dict) -> str:
        if s.get("mean_reward") is None:
            return f"<th>{probe_label(s['label'], locale)}</th>"
        mean = t(locale, "probe.mean_reward", value=f"{s['mean_reward']:+.3f}")
        return f"<th>{probe_label(s['label'], locale)}<br><span class='rloo-small-num'>{mean}</span></th>"

    head = "<th>#</th>" + "".join(column_head(s) for s in steps)
    empty = f"<i>{t(locale, 'common.empty')}</i>"
    k = max(len(s["samples"]) for s in steps)
    body = []
    for i in range(k):
        cells = [f"<td>{i + 1}</td>"]
        for s in steps:
            if i < len(s["samples"]):
                sample = s["samples"][i]
                cls = _sign_class(sample["reward"], tol=0.05)
                title = text(t(locale, "probe.reward", value=f"{sample['reward']:+.3f}"))
                cells.append(f"<td class='rloo-text {cls}' title='{title}'>{_token_text(sample['text']) or empty}</td>")
            else:
                cells.append("<td></td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f"<div class='rloo-probe'><div class='rloo-prompt'>{t(locale, 'probe.prompt')} "
        f"<b>{_token_text(result.get('prompt', ''))}</b>…"
        f"</div><table class='rloo-table rloo-probe-table'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def probe_note(result: dict, locale: str = "en") -> str:
    """'What am I looking at?' for the probe, with its numbers."""
    steps = [s for s in result.get("steps") or [] if s.get("mean_reward") is not None]
    if not steps:
        return ""
    first, last = steps[0], steps[-1]
    every = result.get("snapshot_every")
    kept = result.get("kept")
    return " ".join(
        [
            t(
                locale,
                "probe.note",
                k=text(result.get("num_samples", len(first["samples"]))),
                policies=len(steps),
                seed=text(result.get("seed")),
            ),
            t(
                locale,
                "probe.note_means",
                first=probe_label(first["label"], locale),
                first_mean=f"{first['mean_reward']:+.3f}",
                last=probe_label(last["label"], locale),
                last_mean=f"{last['mean_reward']:+.3f}",
            ),
            t(
                locale,
                f"probe.snapshots_{'every' if every else 'off'}{'_kept' if kept else ''}",
                every=text(every),
                kept=text(kept),
            ),
        ]
    )
