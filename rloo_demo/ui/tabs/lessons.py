"""Lessons tab: the results that ship with the app, each with its figure, its table, a "what am I looking at?" note,
the command that measured it and the day. They need no run of the visitor's own, so a fresh Space shows them all.

Drawn at the page's load and again at the language switch, in the page's language (``views.lessons``); no event of
its own reaches the server."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import gradio as gr

from rloo_demo.ui.common import L, Page, Tab, as_plot
from rloo_demo.ui.views import lessons as views

ID, LABEL = "lessons", "tab.lessons"
# numbers on one line, headers broken only between words; a table wider than a phone scrolls inside its box
CSS = """
.rloo-lesson-box { overflow-x: auto; max-width: 100%; }
.rloo-lesson th { white-space: normal; word-break: normal; overflow-wrap: normal; hyphens: manual;
  vertical-align: bottom; }
.rloo-lesson td.rloo-num { white-space: nowrap; font-variant-numeric: tabular-nums; text-align: right; }
.rloo-lesson td.rloo-name { text-align: left; }
"""


def _drawn_one(lesson: views.Lesson, locale: str) -> tuple:
    """(text, plot, table) of one lesson in ``locale``: drawn once per language and version of its file, since every
    page load sends it (reading, translating and encoding the figure again cost 35 ms of the load's CPU)."""
    return _drawn_cached(lesson, locale, views.stamp(lesson))


@functools.lru_cache(maxsize=64)
def _drawn_cached(lesson: views.Lesson, locale: str, stamp) -> tuple:
    data = views.read(lesson)
    if data is None:
        return views.texts(lesson, None, locale), None, ""
    table = f"<div class='rloo-lesson-box'>{views.table_html(lesson, data, locale)}</div>"
    return views.texts(lesson, data, locale), as_plot(views.figure(data, locale)), table


def _drawn(ui: SimpleNamespace, locale: str) -> dict:
    out = {}
    for lesson, parts in zip(views.LESSONS, ui.lessons, strict=True):
        out[parts.text], out[parts.plot], out[parts.table] = _drawn_one(lesson, locale)
    return out


def build(page: Page) -> Tab:
    ui = SimpleNamespace(lessons=[])
    with gr.Tab(L(LABEL), id=ID) as element:
        gr.Markdown(L("lessons.intro"))
        ui.error = gr.Markdown("", elem_id="lessons-error")
        for lesson in views.LESSONS:
            with gr.Group(elem_id=f"lesson-{lesson.id}"):
                parts = SimpleNamespace(
                    text=gr.Markdown("", elem_id=f"lesson-{lesson.id}-text"),
                    plot=gr.Plot(show_label=False, elem_id=f"lesson-{lesson.id}-plot"),
                    table=gr.HTML("", elem_id=f"lesson-{lesson.id}-table"),
                )
            ui.lessons.append(parts)
    outputs = [c for parts in ui.lessons for c in (parts.text, parts.plot, parts.table)]

    return Tab(
        id=ID,
        label_key=LABEL,
        element=element,
        ui=ui,
        error=ui.error,
        css=CSS,
        relocalize_outputs=outputs,
        relocalize=lambda moment: _drawn(ui, moment.locale),
        load_outputs=outputs,
        load=lambda moment: _drawn(ui, moment.locale),
    )
