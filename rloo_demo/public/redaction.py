"""What a caller is told when something fails: a ``UserError`` says what to change; anything else is a bug,
reported as one (its traceback goes to the server log, never to the caller). In public mode no server path is
ever shown, and no message carries markup from what a caller sent. A message the engine wrote as an
``i18n.Message`` is told in the caller's language (English for the API and the CLI)."""

from __future__ import annotations

import html
import logging
import re
from pathlib import Path

from rloo_demo.errors import ConfigError, UserError, message_of
from rloo_demo.i18n import Message, in_locale

log = logging.getLogger(__name__)

_ABSOLUTE_PATH = re.compile(r"(?<![\w/<>])/(?:[\w.@+-]+/)*[\w.@+-]+")


def inert(text: str) -> str:
    """No markup from a message: it may quote what a caller sent, and it is shown as Markdown."""
    return html.escape(str(text), quote=False)


class Redactor:
    """Error messages and stored texts as a caller may see them, on a public server or a local one."""

    def __init__(self, public: bool, runs_dir: str):
        self.public = public
        self.runs_dir = str(runs_dir)

    def error_text(self, exc: BaseException, locale: str = "en", names: dict[str, str] | None = None) -> str:
        """What ``exc`` tells the caller, in ``locale``. ``names`` maps the name a refusal of a value gives it
        (``as_int``'s, say "seed") to what the caller's page calls it (the box's label, in its language)."""
        if isinstance(exc, ConfigError):
            text = "\n".join(f"- **{inert(k)}**: {inert(in_locale(v, locale))}" for k, v in exc.problems.items())
        elif isinstance(exc, UserError):
            message = message_of(exc)
            named = isinstance(message, Message) and (names or {}).get(message.params.get("name"))
            text = inert(in_locale(message, locale, **({"name": named} if named else {})))
        else:
            log.error("internal error", exc_info=exc)
            text = in_locale(Message("error.internal", kind=type(exc).__name__), locale)
        return self.redact(text)

    def redact(self, text: str | None) -> str | None:
        """Server paths out of a message (public mode)."""
        if not text or not self.public:
            return text
        return _ABSOLUTE_PATH.sub("<path>", self._roots().sub("<runs>", text))

    def _roots(self) -> re.Pattern:
        """The runs folder as a message may name it, resolved or as configured, matched in one pass (so a
        replacement is never matched again: ``runs`` inside ``<runs>`` became ``<<runs>>``). A relative name such
        as the app's default ``runs`` counts only where a path starts with it (``runs/a``), never as a word of prose
        ("30 runs")."""
        roots = {str(Path(self.runs_dir).resolve()), self.runs_dir.rstrip("/") or "/"}
        absolute, relative = r"{}(?![\w.@+-])", r"(?:(?<=\./)|(?<![\w/.<>@+-])){}(?=/)"
        forms = [
            (absolute if root.startswith("/") else relative).format(re.escape(root))
            for root in sorted(roots, key=len, reverse=True)  # the longest first: a root inside another loses
        ]
        return re.compile("|".join(forms))
