"""The one base class for mistakes a user can fix.

Everything the app, the named API or the CLI shows as "your input is wrong" derives from ``UserError``; the message
says what to change. Anything else that escapes is a bug: the UI reports it as an internal error (and logs the
traceback) instead of blaming the user, and the CLI lets it end in a traceback.

An error's message is an ``i18n.Message`` where the engine wrote one: ``str(exc)`` is its English (the CLI, the API,
the logs), and the page writes it in its own language from its key and parameters (``message_of``).
"""

from __future__ import annotations

from rloo_demo.i18n import Message


class UserError(Exception):
    """A mistake the user can fix; ``str(exc)`` says how."""


def message_of(exc: BaseException) -> str:
    """What ``exc`` says: its ``Message`` (its key and parameters with it) where it was raised with one, else its
    text."""
    args = getattr(exc, "args", ())
    return args[0] if len(args) == 1 and isinstance(args[0], Message) else str(exc)


class ConfigError(UserError):
    """One or more invalid settings; ``problems`` maps each field to a message that says how to fix it."""

    def __init__(self, problems: dict[str, str]):
        self.problems = problems
        super().__init__("; ".join(f"{k}: {v}" for k, v in problems.items()))


class InputError(UserError):
    """A request value of the wrong type, out of range, or not allowed on this server."""


class TooLong(InputError):
    """A text past this server's limit on its length: ``chars`` long where ``limit`` are taken (the page writes the
    refusal again in its own language from the two numbers)."""

    def __init__(self, name: str, chars: int, limit: int):
        self.name, self.chars, self.limit = name, chars, limit
        super().__init__(Message("value.too_long", name=name, chars=chars, limit=limit))


class NotFound(UserError):
    """A run, model or file that does not exist (or is not visible to the caller)."""


class DataError(UserError):
    """A prompt source that cannot give prompts: no such file, no such column, no rows."""


class Busy(UserError):
    """The server is already doing as much of this as it allows; try again later."""


class Waiting(Busy):
    """The training slot is taken: the request has a place in the line and starts by itself when its turn comes."""

    def __init__(self, message: str, place: int):
        super().__init__(message)
        self.place = place


class RateLimited(Busy):
    """Too many requests from one client, or sampling would starve the run in training."""


class NotOwner(UserError):
    """A session tried to stop or change a run that another session started."""


class DiskFull(UserError):
    """The runs folder has no room for another run."""
