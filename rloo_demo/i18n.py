"""The page in its reader's language: English, Romanian, Georgian and Russian.

Translations live in ``rloo_demo/locales/<code>.json``, one flat file per locale (``"tab.train": "Train"``). Text
fixed when the page is built (labels, info texts, buttons, tabs, explainers) goes to the browser through
``gr.I18n`` and is translated there; text the server writes while the page runs (status lines, the arithmetic,
plot titles, error frames) is translated here with ``t(locale, key, **params)``, for the locale the page sent on
load. No gradio import: views and plots stay pure and testable.

Dynamic strings use ``{name}`` placeholders, filled here. Strings shown by gradio itself (static ones) have none:
the browser's message formatter would read braces as its own placeholders. A count's words follow each language's
plural forms (``tn``, keys ending in ``.plural``).

What the engine tells a user (a refusal, a problem of a setting, why a run stopped) is a ``Message``: its English
as a plain string, for the CLI, the named API and the logs, that carries its key and parameters, so the page writes
it in its own language; the engine never learns which language that is.
"""

from __future__ import annotations

import functools
import json
import math
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


# ----------------------------------------------------------------------------- plural forms

# A count's word takes one of a few forms, chosen by CLDR's rules for cardinal numbers: English "1 sample",
# "2 samples"; Romanian "1 eșantion", "2 eșantioane", "20 de eșantioane"; Russian "1 сэмпл", "2 сэмпла",
# "5 сэмплов"; Georgian keeps the singular after a number. A key ending in ".plural" holds its locale's forms in
# this order, separated by " | " (``PLURAL_FORMS``), each with the same placeholders.
PLURAL_FORMS = {"en": ("one", "other"), "ro": ("one", "few", "other"), "ka": ("other",), "ru": ("one", "few", "many")}
PLURAL_SEPARATOR = " | "


def plural_category(locale, n: int) -> str:
    """CLDR's cardinal category of a whole number ``n`` in ``locale``."""
    locale, n = normalize(locale), abs(int(n))
    if locale == "ka":
        return "other"
    if locale == "ru":
        if n % 10 == 1 and n % 100 != 11:
            return "one"
        return "few" if 2 <= n % 10 <= 4 and not 12 <= n % 100 <= 14 else "many"
    if n == 1:
        return "one"
    if locale == "ro":
        return "few" if n == 0 or 1 <= n % 100 <= 19 else "other"
    return "other"


def tn(locale, key: str, n: int, /, **params) -> str:
    """The form of a ``.plural`` key for the count ``n``, filled in (``n`` among its placeholders)."""
    locale = normalize(locale)
    forms = load(locale).get(key)
    if forms is None or len(forms.split(PLURAL_SEPARATOR)) != len(PLURAL_FORMS[locale]):
        locale, forms = DEFAULT, load(DEFAULT)[key]
    form = forms.split(PLURAL_SEPARATOR)[PLURAL_FORMS[locale].index(plural_category(locale, n))]
    return PLACEHOLDER.sub(lambda m: str({"n": n, **params}.get(m.group(1), m.group(0))), form)


def duration(seconds, locale="en") -> str:
    """A duration as a page shows it: "1:41" under an hour, "3 h 45 min" from an hour on (in ``locale``), "–"
    for none."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not math.isfinite(seconds):
        return "–"
    if seconds >= 3600 - 0.5:
        minutes = round(seconds / 60)
        return t(locale, "time.hours", hours=minutes // 60, minutes=minutes % 60)
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


# ----------------------------------------------------------------------------- messages of the engine


class Message(str):
    """A text a user can meet that the engine writes (a refusal, a problem of a setting, why a run stopped): its
    English, as a plain ``str`` (what the CLI, the named API and the logs show, unchanged), which also carries its
    translation key and parameters, so a page writes it again in its own language (``in_locale``).

    Parameters are what the text shows: numbers and names already formatted, or other messages (written in the
    same language as the one around them). The English template is ``en.json``'s text of the key."""

    key: str
    params: dict

    def __new__(cls, key: str, /, **params):
        self = super().__new__(cls, t(DEFAULT, key, **{k: _filled(v, DEFAULT) for k, v in params.items()}))
        self.key, self.params = key, params
        return self

    def __reduce__(self):  # copies and pickles rebuild the message, not a bare str
        return (_message, (self.key, self.params))

    def in_locale(self, locale, **override) -> str:
        """The message in ``locale``; ``override`` replaces parameters (the page puts a field's label for the name
        the engine used)."""
        params = {k: _filled(v, locale) for k, v in (self.params | override).items()}
        return t(locale, self.key, **params)

    def record(self) -> dict:
        """The key and parameters as plain JSON (a run's status.json keeps its stop reason so)."""
        return {"key": self.key, "params": {k: _recorded(v) for k, v in self.params.items()}}


def _message(key: str, params: dict) -> Message:
    return Message(key, **params)


def _filled(value, locale):
    """A parameter as its message's text shows it: a message in ``locale``, a list as its items joined by commas."""
    if isinstance(value, list | tuple):
        return ", ".join(str(_filled(v, locale)) for v in value)
    return in_locale(value, locale)


def _recorded(value):
    if isinstance(value, list | tuple):
        return [_recorded(v) for v in value]
    return value.record() if isinstance(value, Message) else value


def in_locale(text, locale, **override):
    """``text`` in ``locale`` where it is a ``Message``; any other value as it is."""
    return text.in_locale(locale, **override) if isinstance(text, Message) else text


def from_record(record, english=None, depth: int = 0) -> Message | None:
    """A message from what ``Message.record`` wrote (a file anyone could have edited): None unless the key is a
    known one with its placeholders, and every parameter a number, a text, a short list or such a record (a few
    levels deep at most); with ``english`` (the text stored beside it), None unless the message reads the same."""
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("key"), str)
        or not isinstance(record.get("params"), dict)
    ):
        return None
    template = load(DEFAULT).get(record["key"])
    if template is None or set(record["params"]) != placeholders(template) or depth > 4:
        return None
    params = {}
    for name, value in record["params"].items():
        params[name] = _parameter(value, depth + 1)
        if params[name] is None:
            return None
    message = Message(record["key"], **params)
    return message if english is None or message == english else None


def _parameter(value, depth: int):
    """A recorded parameter read back (a number, a text, a message, a short list of them), or None."""
    if isinstance(value, dict):
        return from_record(value, depth=depth)
    if isinstance(value, list) and len(value) <= 16:
        items = [_parameter(v, depth + 1) for v in value]
        return None if any(v is None for v in items) else items
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return value


@functools.cache
def _english_patterns(prefix: str) -> tuple[tuple[re.Pattern, str], ...]:
    def pattern(template: str) -> re.Pattern:
        parts = PLACEHOLDER.split(template)  # text, name, text, name, ...
        body = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
        return re.compile(body + r"\Z", re.DOTALL)

    return tuple((pattern(text), key) for key, text in load(DEFAULT).items() if key.startswith(prefix))


def parse_english(text, prefix: str, depth: int = 0) -> Message | None:
    """The message of ``prefix``'s keys (``"stop."``) whose English reads ``text``, or None: how a text stored
    before messages kept their keys (an old run's stop reason) is translated."""
    if not isinstance(text, str) or depth > 2:
        return None
    for pattern, key in _english_patterns(prefix):
        m = pattern.match(text)
        if m:  # a parameter that is itself such a text ("{reason}, before the step ended") is one too
            return Message(key, **{k: parse_english(v, prefix, depth + 1) or v for k, v in m.groupdict().items()})
    return None


def translations(**server) -> dict[str, dict[str, str]]:
    """Every locale's translations, as ``gr.I18n(**translations())`` takes them. ``server`` fills the placeholders
    of the few static texts that quote this server's settings (a limit) or are put together from a table (the
    reward help, from each built-in reward's own text): a value, or a function of the locale that writes the text
    in it. The browser sees no braces."""

    def fill(text: str, code: str) -> str:
        def value(name: str) -> str:
            return str(server[name](code) if callable(server[name]) else server[name])

        return PLACEHOLDER.sub(lambda m: value(m.group(1)) if m.group(1) in server else m.group(0), text)

    return {code: {key: fill(text, code) for key, text in load(code).items()} for code in LOCALES}


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
    (re.compile(r"^sampled mean \((?P<n>\d+) seeds\)$"), "plot.sampled_mean"),
    (
        re.compile(
            r"^Exact expected-update path vs sampled runs "
            r"\(K = (?P<k>[^,]+), beta = (?P<beta>[^,]+), lr = (?P<lr>[^)]+)\)$"
        ),
        "plot.trajectory_title",
    ),
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
