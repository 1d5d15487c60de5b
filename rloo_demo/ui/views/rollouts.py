"""The Rollouts tab's texts: each group's completions with reward, baseline and advantage, the arithmetic behind one,
and the what-if table of estimators.
"""

from __future__ import annotations

import html

from rloo_demo.advantages import what_if
from rloo_demo.chat import prompt_text
from rloo_demo.i18n import t
from rloo_demo.store import tokens
from rloo_demo.ui.views.common import NEG, POS, ZERO, breakable

# The marker of the selected completion's row (an inline style: the page's stylesheet belongs to the app)
SELECTED_STYLE = "outline: 2px solid #4C9BE8; outline-offset: -2px"


def shown_advantage(value: float) -> str:
    """An advantage as the tables print it: rounded to 4 places (``group_rows``), then shown with 3."""
    return f"{round(value, 4):+.3f}"


def _finite(value) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and value == value and abs(value) != float("inf")


def advantage_class(value) -> str:
    """The colour class of an advantage, read from the number as printed: one shown as ±0.000 pushes the policy by
    less than the table can show, so it is drawn neutral, never red or green (the chart's bars follow it)."""
    if not _finite(value):
        return ZERO
    shown = float(shown_advantage(value))
    return POS if shown > 0 else NEG if shown < 0 else ZERO


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


def shown_number(value) -> str:
    """A number of a completion's row as both of the tab's tables print it: its sign and 3 decimals."""
    return f"{value:+.3f}"


def shown_rows(rows: list[list]) -> list[list]:
    """``group_rows``' rows as the tables print them: the index and the text as they are, every number shown (the
    side table printed 4 raw decimals where the groups tables print 3 with a sign)."""
    return [[row[0], row[1], *[shown_number(v) for v in row[2:]]] for row in rows]


# The colour of a row at full strength (the group's largest |A|): green pushed up, red pushed down; the alpha is
# MAX_ALPHA·|A|/max|A| of the group, so a row that moves the policy little reads pale (the app's CSS: tr.rloo-pos)
ROW_COLOURS = {POS: (61, 190, 139), NEG: (217, 83, 79)}
MAX_ALPHA = 0.35


def row_alpha(advantage: float, largest: float) -> float:
    """How strong a row's colour is: its |A| over the group's largest |A|, times ``MAX_ALPHA`` (0 where every |A|
    is 0), to 3 places."""
    return round(MAX_ALPHA * abs(advantage) / largest, 3) if largest > 0 else 0.0


def groups_html(groups: list[dict], locale: str = "en", selected: tuple[int, int] | None = None) -> str:
    """Every prompt group of a step as a table, rows coloured by the sign of their advantage as printed (a group
    whose advantages all print ±0.000 is grey and says it teaches nothing), the colour as strong as the row's |A|
    against the group's largest. ``selected`` = (group, completion), both 0-based: that row is outlined and marked
    ``data-selected``, the completion the arithmetic below explains. Each row names its completion in ``data-pick``
    ("step:group:index"): a click on it selects it (``ui.tabs.rollouts_events``). Each number cell carries its column's
    name (``rloo-cap``), shown on a phone only, where each row is a card (the tab's CSS)."""
    if not groups:
        return f"<p class='rloo-empty'>{t(locale, 'groups.empty')}</p>"
    out = []
    empty = f"<i>{t(locale, 'common.empty')}</i>"
    for g in groups:
        headers, rows = group_rows(g, locale=locale)
        head = "".join(f"<th>{breakable(h)}</th>" for h in headers)
        caps = [f"<span class='rloo-cap'>{html.escape(h)}</span>" for h in headers]
        body = []
        advantages = [c["advantage"] for c in g["completions"]]
        largest = max((abs(a) for a in advantages if _finite(a)), default=0.0)
        classes = [advantage_class(a) for a in advantages]
        for i, (row, cls, adv) in enumerate(zip(shown_rows(rows), classes, advantages, strict=True)):
            cells = [f"<td class='rloo-idx'>{row[0]}</td>"]
            cells.append(f"<td class='rloo-text'>{html.escape(row[1]) or empty}</td>")
            cells += [
                f"<td class='rloo-num{' rloo-adv' if j == len(row) - 1 else ''}'>{caps[j]}"
                f"<span class='rloo-val'>{v}</span></td>"
                for j, v in enumerate(row[2:], 2)
            ]
            styles = []
            if cls in ROW_COLOURS:
                r, gr, b = ROW_COLOURS[cls]
                colour = f"rgba({r}, {gr}, {b}, {row_alpha(adv, largest)})"  # --row: the sticky cell's too
                styles.append(f"background-color: {colour}; --row: {colour}")
            mark = ""
            if selected == (g["group"], i):
                mark = " data-selected='1'"
                styles.append(SELECTED_STYLE)
            style = f" style='{'; '.join(styles)}'" if styles else ""
            pick = f" data-pick='{int(g['step'])}:{int(g['group'])}:{i}' tabindex='0'"
            body.append(f"<tr class='{cls}'{mark}{pick}{style}>{''.join(cells)}</tr>")
        no_signal = (
            f" <i class='rloo-no-signal'>({t(locale, 'groups.no_signal')})</i>" if set(classes) == {ZERO} else ""
        )
        out.append(
            f"<div class='rloo-group' data-group='{g['group'] + 1}'><div class='rloo-prompt'>"
            f"{t(locale, 'groups.prompt', n=g['group'] + 1)}: <b>{html.escape(prompt_text(g['prompt']))}</b>…"
            f"{no_signal}</div><div class='rloo-table-box'>"
            f"<table class='rloo-table rloo-groups'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
            "</table></div></div>"
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


WHATIF_COLUMNS = ("rloo", "grpo", "dr_grpo", "reinforce_pp", "batch_mean", "reinforce")


def whatif_markdown(groups: list[dict], index: int, locale: str = "en", offset: float = 0.0) -> str:
    """For group ``index`` of a step: the same completions' advantages under every estimator, side by side, and the
    identity A_rloo = K/(K−1)·(r − group mean) written out with the real numbers. The rewards r are the shaped
    rewards the trainer used, plus ``offset`` (a constant added to every reward, as ``RunConfig.reward_offset``
    adds it before the KL shaping: the same r + C), checked by the caller; the batch-level estimators see the whole
    step. Under an offset the ``rloo`` column does not move and ``reinforce`` moves by it, which one sentence says."""

    if not groups or not 0 <= index < len(groups):
        return ""
    k = len(groups[0]["completions"])
    if k < 2 or any(len(g["completions"]) != k for g in groups):
        return ""
    rewards = [c["shaped_reward"] + offset for g in groups for c in g["completions"]]
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
        "| # | r | " + " | ".join(breakable(name) for name in WHATIF_COLUMNS) + " |",
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
    if offset:
        lines.append(t(locale, "whatif.offset", offset=f"{offset:+g}"))
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


def kl_heatmap_note(groups: list[dict], locale: str = "en") -> str:
    """'What am I looking at?' for the batch heatmap, with where this step's KL lives."""

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
