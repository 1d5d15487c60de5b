"""The Lessons tab's views: the results that ship with the app (``assets/lessons/<id>.json``, each written by the
command it names) as a table, a figure and their texts, in the page's language. Pure, apart from reading the file.

A lesson is one entry of ``LESSONS``: the file, the day it was measured, and its table's columns (a row's key, the
text key of its header, its decimals, and the key of its standard error, if any)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.i18n import localize_figure, t
from rloo_demo.models.hub import ASSETS_DIR
from rloo_demo.ui.views.common import breakable, text

LESSONS_DIR = ASSETS_DIR / "lessons"


@dataclass(frozen=True)
class Column:
    key: str  # the row's value
    header: str  # the text key of its header
    decimals: int = 4
    error: str | None = None  # the row's key of its standard error, shown as "± e"


@dataclass(frozen=True)
class Lesson:
    id: str
    file: str
    measured: str  # the day the shipped file was built by its command: change it with the file
    columns: tuple[Column, ...]


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "trajectory",
        "trajectory.json",
        "2026-12-06",
        (
            Column("exact_reward", "lessons.col.exact_reward"),
            Column("sampled_reward", "lessons.col.sampled_reward", error="sampled_reward_error"),
            Column("exact_kl", "lessons.col.exact_kl"),
            Column("sampled_kl", "lessons.col.sampled_kl", error="sampled_kl_error"),
        ),
    ),
)


def read(lesson: Lesson, folder: Path | None = None) -> dict | None:
    """The lesson's shipped result, or None when its file is missing or unreadable (the tab says which)."""
    try:
        data = json.loads(((folder or LESSONS_DIR) / lesson.file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stamp(lesson: Lesson, folder: Path | None = None) -> tuple[int, int] | None:
    """The lesson file's (modification time in ns, size), or None: what tells a drawing of it is still current."""
    try:
        st = ((folder or LESSONS_DIR) / lesson.file).stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _number(value, decimals: int) -> str:
    return f"{value:.{decimals}f}" if isinstance(value, int | float) and not isinstance(value, bool) else "–"


def table_html(lesson: Lesson, data: dict, locale: str = "en") -> str:
    """The lesson's rows, one per estimator, its numbers kept on one line by the tab's CSS (``rloo-num``)."""
    head = "".join(f"<th>{text(t(locale, c.header))}</th>" for c in lesson.columns)
    rows = []
    for row in data.get("rows") or []:
        cells = []
        for c in lesson.columns:
            shown = _number(row.get(c.key), c.decimals)
            if c.error is not None and isinstance(row.get(c.error), int | float):
                shown += f" ± {_number(row[c.error], c.decimals)}"
            cells.append(f"<td class='rloo-num'>{shown}</td>")
        rows.append(f"<tr><td class='rloo-name'>{breakable(row.get('estimator', ''))}</td>{''.join(cells)}</tr>")
    header = f"<th>{text(t(locale, 'lessons.col.estimator'))}</th>{head}"
    return f"<table class='rloo-lesson'><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def figure(data: dict, locale: str = "en") -> dict:
    """The lesson's figure (a copy: the shipped one stays English), its phrases in ``locale``."""
    return localize_figure(copy.deepcopy(data.get("figure") or {}), locale)


def texts(lesson: Lesson, data: dict | None, locale: str = "en") -> str:
    """Title, "what am I looking at?", the command and the day it was measured, as Markdown."""
    title = f"### {t(locale, f'lessons.{lesson.id}.title')}"
    if data is None:
        return f"{title}\n\n{t(locale, 'lessons.missing', file=lesson.file)}"
    command = str(data.get("command", ""))
    return (
        f"{title}\n\n{t(locale, f'lessons.{lesson.id}.note')}\n\n"
        f"{t(locale, 'lessons.measured', date=lesson.measured)}\n\n```bash\n{command}\n```"
    )
