"""Small formatting helpers shared by the views: number formats, signs, durations, escaped text."""

from __future__ import annotations

import html

from rloo_demo.i18n import duration, t

POS, NEG, ZERO = "rloo-pos", "rloo-neg", "rloo-zero"


def _sign_class(value: float, tol: float = 1e-6) -> str:
    return POS if value > tol else NEG if value < -tol else ZERO


def _fmt(x: float) -> str:
    return f"{x:+.3f}"


def _duration(seconds: float | None, locale: str = "en") -> str:
    """'1:41', or from an hour on '3 h 45 min' in ``locale`` (``i18n.duration``)."""
    return duration(seconds, locale)


def text(value) -> str:
    """Any text from a run or a user, made inert for a Markdown or HTML component (no tags, no entities)."""
    return html.escape(str(value), quote=True)


def breakable(name) -> str:
    """A name for a table's header or first column, escaped, that a narrow column may break after its underscores
    ("sentiment_⏎classifier": between the words of an identifier) and nowhere inside a word."""
    return text(name).replace("_", "_<wbr>")


def _judge(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "–"


# Colours (r, g, b) at full strength; the alpha grows with |value| / scale, so both themes read them.
_UP, _DOWN = (61, 190, 139), (217, 83, 79)  # Δ log π: reinforced, suppressed


_MORE, _LESS = (232, 163, 61), (76, 155, 232)  # KL: the policy likes the token more / less than the reference


def _f4(v) -> str:
    return "–" if v is None else f"{v:+.4f}"


def prompt_cut_note(result: dict, locale: str = "en") -> str:
    """Compare's and the probe's word on a prompt cut to fit the policy's context (``prompt_cut``: how many tokens
    it had, the context, how many of its first tokens were dropped), in ``locale``; "" for a prompt that fit."""
    cut = result.get("prompt_cut") if isinstance(result, dict) else None
    if not isinstance(cut, dict):
        return ""
    numbers = {k: f"{cut[k]:,}" if isinstance(cut.get(k), int) else "?" for k in ("tokens", "context", "dropped")}
    return "✂️ " + t(locale, "prompt.cut", **numbers)
