"""How a setting is declared: the parts of a RunConfig field's metadata that say what its value may be and how the
Train form shows it, as TRL's config dataclasses carry each field's help in theirs.

- what type a value must be, checked the way JSON carries it (``type_ok``) and said in words (``type_key``);
- the ``Range`` of numbers it accepts: checked by ``RunConfig.problems`` and written into its help text;
- the ``Widget`` the Train form shows it with (``rloo_demo.ui.forms`` reads it; a field without one is not on the
  form).

Pure data and checks, no settings of their own: ``rloo_demo.config`` declares those.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass

from rloo_demo.i18n import DEFAULT, Message, placeholders, t


def type_ok(value, hint) -> bool:
    """Whether ``value`` fits a RunConfig annotation, the way JSON would carry it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(type_ok(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and len(value) <= 64 and all(type_ok(v, args[0]) for v in value)
    raise TypeError(f"no type check for {hint}")


def type_key(hint) -> str:
    """The translation key of what a value of ``hint`` must be: ``type.int``, ``type.list_float_or_null``, ..."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return "type." + "_or_".join(type_key(a).removeprefix("type.") for a in args)
    if origin is list:
        return f"type.list_{type_key(args[0]).removeprefix('type.')}"
    return "type." + {type(None): "null", bool: "bool", int: "int", float: "float", str: "str"}[hint]


def describe(hint) -> Message:
    """What a value of ``hint`` must be, in words: "a whole number", "a list of finite numbers or null"."""
    return Message(type_key(hint))


def number_text(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclass(frozen=True)
class Range:
    """The numbers a setting accepts, in its field's metadata: ``problems`` refuses a value outside it, and the help
    text writes it out (its ``{range}``) in every language, so the two cannot drift apart."""

    lo: float
    hi: float | None = None  # None: no upper end
    problem: str = "cfg.closed_range"  # the text key of a refusal; it may quote {lo}, {hi} and {value}
    open_lo: bool = False  # lo itself is refused: (0, 1]

    def holds(self, value) -> bool:
        return (value > self.lo if self.open_lo else value >= self.lo) and (self.hi is None or value <= self.hi)

    def text(self) -> str:
        """The range as the help texts write it: [0, 100], (0, 1], >= 2."""
        if self.hi is None:
            return f"{'>' if self.open_lo else '>='} {number_text(self.lo)}"
        return f"{'(' if self.open_lo else '['}{number_text(self.lo)}, {number_text(self.hi)}]"

    def refusal(self, value) -> Message:
        """What a value outside the range is told: its key's placeholders filled, and no other parameter."""
        quoted = {
            "lo": number_text(self.lo),
            "hi": number_text(self.hi) if self.hi is not None else "",
            "value": repr(value),
        }
        wanted = placeholders(t(DEFAULT, self.problem))
        return Message(self.problem, **{k: v for k, v in quoted.items() if k in wanted})


POSITIVE = Range(1, problem="cfg.positive")  # a count: steps, tokens, words, a rank


@dataclass(frozen=True)
class Widget:
    """How the Train form shows a setting, in its field's metadata (a field without one is not on the form). Fields of
    one ``row`` stand side by side, in the order of the fields; ``rloo_demo.ui.tabs.train_form`` builds each one,
    by hand for the few whose shape depends on the server (its ``SPECIAL`` hooks)."""

    fold: str  # where it sits (ui.forms.FOLDS)
    label: str  # text key of its label
    kind: str = "number"  # number, whole (a number box of whole numbers), checkbox, radio, text, dropdown, choices
    row: str | None = None
    elem_id: str | None = None
    info: str | None = None  # text key of the line under it
    width: int | None = None  # its min_width, where narrower than gradio's
    shown: str = "always"  # "local": a public server hides it (it has no GPU, runs no code of a visitor's);
    # "models": a public server shows it where its operator allows models besides the embedded ones
