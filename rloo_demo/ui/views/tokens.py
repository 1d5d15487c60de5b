"""The token view: each completion's tokens coloured by a per-token measure, and the note that explains one."""

from __future__ import annotations

from rloo_demo.i18n import t
from rloo_demo.store import tokens
from rloo_demo.ui.views.common import _DOWN, _LESS, _MORE, _UP, _f4, text

MEASURES = ("delta", "k1", "k3", "entropy")  # what colours the tokens; each named by its 'measure.<key>' text


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


def token_rows(completion: dict, locale: str = "en") -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a completion's tokens with every number (texts already escaped, for HTML)."""

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
        f"<details><summary>{t(locale, 'tokens.numbers')}</summary><div class='rloo-table-box'>"
        f"<table class='rloo-table rloo-token-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        "</div></details></div>"
    )


def _extreme(pieces, values, pick) -> tuple[str, float] | None:
    known = [(v, p) for p, v in zip(pieces, values, strict=True) if v is not None]
    if not known:
        return None
    v, p = pick(known, key=lambda x: x[0])
    return _visible(p), v


def token_note_markdown(group: dict, index: int, measure: str = "delta", locale: str = "en") -> str:
    """'What am I looking at?' for the token view, with the selected completion's own numbers."""

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
        down = sum(1 for d in deltas if d is not None and d < 0)  # a token the update left alone went neither way
        rise, fall = _extreme(pieces, deltas, max), _extreme(pieces, deltas, min)
        direction = "raise" if adv > 0 else "lower" if adv < 0 else "keep"
        note = t(locale, f"tokens.note_delta_{direction}", advantage=f"{adv:+.4f}") + " "
        note += t(
            locale,
            "tokens.note_delta_rose" if total > 0 else "tokens.note_delta_fell",
            total=f"{total:+.4f}",
            n=n,
            up=up,
            down=down,
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
