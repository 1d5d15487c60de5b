"""The page in its reader's language: English, Romanian, Georgian and Russian.

Translations live in ``rloo_demo/locales/<code>.json``, one flat file per locale (``"tab.train": "Train"``). Text
fixed when the page is built (labels, info texts, buttons, tabs, explainers) goes to the browser through
``gr.I18n`` and is translated there; text the server writes while the page runs (status lines, the arithmetic,
plot titles, error frames) is translated here with ``t(locale, key, **params)``, for the locale the page sent on
load. No gradio import: views and plots stay pure and testable.

Dynamic strings use ``{name}`` placeholders, filled here. Strings shown by gradio itself (static ones) have none:
the browser's message formatter would read braces as its own placeholders.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

LOCALES = ("en", "ro", "ka", "ru")
DEFAULT = "en"
NAMES = {"en": "English", "ro": "Română", "ka": "ქართული", "ru": "Русский"}  # each in its own language
FOLDER = Path(__file__).parent / "locales"
PLACEHOLDER = re.compile(r"\{(\w+)\}")
STORAGE_KEY = "rloo-demo-locale"  # localStorage key of the header selector's choice


@functools.cache
def load(locale: str) -> dict[str, str]:
    """The translations of one locale (a flat mapping of keys to text)."""
    if locale not in LOCALES:
        raise KeyError(f"unknown locale {locale!r}; known: {', '.join(LOCALES)}")
    return json.loads((FOLDER / f"{locale}.json").read_text(encoding="utf-8"))


def normalize(value) -> str:
    """One of ``LOCALES`` for whatever a caller sent ('ka-GE' -> 'ka'); anything else is English. A locale is
    only ever used as this code, never reflected into a page as it was sent."""
    if not isinstance(value, str):
        return DEFAULT
    code = value.strip().lower().replace("_", "-").split("-")[0]
    return code if code in LOCALES else DEFAULT


def t(locale, key: str, /, **params) -> str:
    """The text of ``key`` in ``locale`` (English where the locale lacks it), with ``{name}`` placeholders filled."""
    template = load(normalize(locale)).get(key)
    if template is None:
        template = load(DEFAULT)[key]  # a missing English key is a bug: let it raise
    return PLACEHOLDER.sub(lambda m: str(params[m.group(1)]) if m.group(1) in params else m.group(0), template)


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def translations(**server) -> dict[str, dict[str, str]]:
    """Every locale's translations, as ``gr.I18n(**translations())`` takes them. ``server`` fills the placeholders
    of the few static texts that quote this server's settings (a limit); the browser sees no braces."""

    def fill(text: str) -> str:
        return PLACEHOLDER.sub(lambda m: str(server[m.group(1)]) if m.group(1) in server else m.group(0), text)

    return {code: {key: fill(text) for key, text in load(code).items()} for code in LOCALES}


# ----------------------------------------------------------------------------- plot text

# Plot builders (rloo_demo.ui.plots) stay English and pure; the page translates a figure's text afterwards by its
# English source: the 'plot.*' keys of en.json hold every fixed phrase a figure shows.
_PLOT_PATTERNS = (  # phrases with numbers or names in them: (pattern on the English text, key)
    (re.compile(r"^“(?P<prompt>.*)” \(step (?P<step>[^)]*)\)$"), "plot.group_title"),
    (re.compile(r"^(?P<metric>.+) across runs$"), "plot.overlay_title"),
    (re.compile(r"^No run logged '(?P<metric>.+)'\.$"), "plot.overlay_missing"),
    (re.compile(r"^'(?P<key>.+)' was not logged in this run\.$"), "plot.metric_missing"),
    (
        re.compile(r"^Reward: base vs trained — difference (?P<diff>\S+) \(95% CI (?P<ci>\[.*\])\)$"),
        "plot.eval_title_ci",
    ),
    (re.compile(r"^Reward: base vs trained — difference (?P<diff>\S+)$"), "plot.eval_title_diff"),
    (re.compile(r"^(?P<label>base|trained) mean (?P<mean>\S+)$"), "plot.mean"),
    (re.compile(r"^(?P<name>.+) \(raw\)$"), "plot.raw"),
    (re.compile(r"^gradient variance, (?P<estimator>\w+)$"), "plot.variance_label"),
    (re.compile(r"^cosine to reference, (?P<estimator>\w+)$"), "plot.cosine_label"),
)


@functools.cache
def _plot_sources() -> dict[str, str]:
    """English phrase -> key, for the fixed phrases of the plots."""
    return {text: key for key, text in load(DEFAULT).items() if key.startswith("plot.") and "{" not in text}


def plot_text(locale, text):
    """One phrase of a figure in ``locale``: a known fixed phrase, or a known pattern with its values kept; any
    other text (a reward function's name, a metric key, a number) stays as it is."""
    if not isinstance(text, str) or normalize(locale) == DEFAULT:
        return text
    key = _plot_sources().get(text)
    if key is not None:
        return t(locale, key)
    for pattern, key in _PLOT_PATTERNS:
        m = pattern.match(text)
        if m:
            return t(locale, key, **{k: plot_text(locale, v) for k, v in m.groupdict().items()})
    return text


def localize_figure(fig: dict, locale) -> dict:
    """A figure dict (as rloo_demo.ui.plots builds it) with its titles, axis titles, trace names and notes in
    ``locale``. The figure is changed in place and returned."""
    if normalize(locale) == DEFAULT:
        return fig
    layout = fig.get("layout", {})
    for holder in [layout, *(v for k, v in layout.items() if k.startswith(("xaxis", "yaxis")) and isinstance(v, dict))]:
        title = holder.get("title")
        if isinstance(title, dict) and "text" in title:
            title["text"] = plot_text(locale, title["text"])
    for note in layout.get("annotations", []) or []:
        if isinstance(note, dict) and "text" in note:
            note["text"] = plot_text(locale, note["text"])
    for trace in fig.get("data", []) or []:
        if isinstance(trace, dict) and "name" in trace:
            trace["name"] = plot_text(locale, trace["name"])
        colorbar = trace.get("colorbar") if isinstance(trace, dict) else None
        if isinstance(colorbar, dict) and isinstance(colorbar.get("title"), dict):
            colorbar["title"]["text"] = plot_text(locale, colorbar["title"].get("text"))
    return fig
