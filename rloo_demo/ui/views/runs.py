"""The Runs tab's table: one row per run, in the page's language."""

from __future__ import annotations

import html

from rloo_demo.i18n import t
from rloo_demo.ui.views.train import status_word


def run_rows(summaries: list[dict], locale: str = "en") -> list[list]:
    """Rows for the run history table: the run's name first (what a row stands for), then the label a person gave
    it, its figures, and the start of its note."""
    rows = []
    for s in summaries:
        first, last = s.get("reward_first"), s.get("reward_last")
        note = s.get("note") or ""
        rows.append(
            [
                s["name"],
                s.get("label") or "",
                status_word(s["status"], locale) if locale != "en" else s["status"],
                f"{s['steps']}/{s.get('max_steps') or '?'}",
                None if first is None else round(first, 3),
                None if last is None else round(last, 3),
                None if s.get("kl_last") is None else round(s["kl_last"], 4),
                t(locale, "common.yes" if s["has_model"] else "common.no"),
                note if len(note) <= NOTE_SHOWN else note[: NOTE_SHOWN - 1] + "…",
                (s.get("error") or "")[:120],
            ]
        )
    return rows


NOTE_SHOWN = 80  # characters of a note the table shows; the whole note is in the run's details
RUN_COLUMNS = ("run", "label", "status", "steps", "first", "last", "kl", "model", "note", "error")


RUN_HEADERS = [t("en", f"runs.col_{c}") for c in RUN_COLUMNS]


def run_headers(locale: str = "en") -> list[str]:
    return [t(locale, f"runs.col_{c}") for c in RUN_COLUMNS]


def config_html(text: str) -> str:
    """A run's config.yaml, every line numbered and drawn: gradio's code viewer drew only the lines near the screen,
    so a page scrolled past it, printed, searched or captured whole numbered its first 36 lines and no more."""
    if not text:
        return ""
    rows = "".join(
        f"<div class='rloo-cfg-line'><span class='rloo-cfg-no'>{i}</span>"
        f"<span class='rloo-cfg-text'>{html.escape(line)}</span></div>"
        for i, line in enumerate(text.splitlines(), 1)
    )
    return f"<div class='rloo-cfg-head'>config.yaml</div><div class='rloo-config'>{rows}</div>"
