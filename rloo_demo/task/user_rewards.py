"""Your own reward functions: ``module:path/to/file.py:function_name`` in ``rewards`` (CLI: ``--reward-module``).

The function has TRL's signature, ``f(prompts, completions, **kwargs) -> list[float]``, with one score per
completion, or ``None`` where the reward does not apply (TRL then leaves it out of that completion's sum). It gets
plain text: the prompt (for a chat run, its user turn) and the completion (the reply), never a chat template's
markers, the same in training, Compare and ``evaluate``. TRL also passes ``completion_ids``, ``trainer_state``,
``log_extra`` and ``log_metric``, hence the ``**kwargs``. Its ``__name__`` names its metric (``rewards/<name>/mean``).

Loading a file runs its code with this process's rights. That is what you want on your own machine, and what a
public server must never do: ``rloo_demo.public.limits`` refuses ``module:`` rewards in public mode before any file is
looked at.

Every call is checked: an exception, a result that is not one number (or None) per completion, or a NaN or an
infinity raises ``RewardFunctionError`` naming the function and its file, with the lines of the file where an
exception happened. Raised inside a training step, it ends the run as ``failed`` with that message (and the full
traceback in ``status.json``).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import threading
import traceback
from pathlib import Path

from rloo_demo.chat import completion_text, prompt_text
from rloo_demo.errors import InputError, UserError
from rloo_demo.i18n import Message

_FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
SPEC_RULE = Message("module.rule")  # "give path/to/file.py:function_name, e.g. examples/rewards.py:keyword_count"
TRL_KWARGS = {"completion_ids": [], "trainer_state": None, "log_extra": None, "log_metric": None}


class RewardFunctionError(UserError):
    """A user's reward function cannot be loaded, raised an exception, or returned something unusable."""


def parse_spec(spec: str) -> tuple[str, str]:
    """``(file, function)`` of ``file.py:function``; ``InputError`` with the rule otherwise."""
    if not isinstance(spec, str):
        raise InputError(Message("module.not_text", rule=SPEC_RULE))
    shown = spec if len(spec) <= 80 else spec[:79] + "…"
    if ":" not in spec:
        raise InputError(Message("module.bad", spec=repr(shown), problem=SPEC_RULE))
    path, function = spec.rsplit(":", 1)
    if not path.endswith(".py") or len(path) > 1000:
        raise InputError(Message("module.bad", spec=repr(shown), problem=Message("module.not_py", rule=SPEC_RULE)))
    if not _FUNCTION.fullmatch(function):
        raise InputError(
            Message(
                "module.bad",
                spec=repr(shown),
                problem=Message("module.function", function=repr(function), rule=SPEC_RULE),
            )
        )
    return path, function


def check_spec(spec: str, check_files: bool = True) -> None:
    """The spec's form, and (``check_files``) that its file exists. Nothing is imported."""
    path, _ = parse_spec(spec)
    if check_files and not Path(path).expanduser().is_file():
        raise InputError(Message("module.missing", path=repr(path)))


# ----------------------------------------------------------------------------- loading

_MODULES: dict[tuple[str, int], object] = {}  # (resolved path, mtime) -> module: a changed file is loaded again
_LOCK = threading.Lock()


def _load_module(path: Path):
    resolved = path.expanduser().resolve()
    key = (str(resolved), resolved.stat().st_mtime_ns)
    with _LOCK:
        if key not in _MODULES:
            name = f"rloo_demo_user_rewards_{abs(hash(key)):x}"
            spec = importlib.util.spec_from_file_location(name, resolved)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                where = _user_frames(exc, resolved)
                raise RewardFunctionError(
                    f"reward module {str(path)!r} cannot be loaded: {type(exc).__name__}: {exc}\n{where}"
                ) from exc
            _MODULES[key] = module
        return _MODULES[key]


def load_reward(spec: str):
    """The checked reward function of ``file.py:function`` (see the module docstring)."""
    check_spec(spec)
    path, function = parse_spec(spec)
    module = _load_module(Path(path))
    fn = getattr(module, function, None)
    if fn is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise RewardFunctionError(f"{path!r} has no function {function!r}; its functions are {public}")
    if not callable(fn):
        raise RewardFunctionError(f"{function!r} in {path!r} is not a function")
    try:
        inspect.signature(fn).bind(prompts=[], completions=[], **TRL_KWARGS)
    except TypeError:
        raise RewardFunctionError(
            f"reward function {function!r} in {path!r} must take TRL's arguments: "
            f"def {function}(prompts, completions, **kwargs) -> list[float]"
        ) from None
    except ValueError:  # no signature to read (a builtin): let the call tell
        pass
    return checked(fn, function, path)


def checked(fn, name: str, origin: str):
    """``fn`` wrapped: called with text prompts and completions, its result checked (``check_scores``), and an
    exception turned into a ``RewardFunctionError`` that names it. Keeps ``name`` as ``__name__`` (the metric key)."""

    resolved = Path(origin).expanduser().resolve()

    def reward(prompts, completions, completion_ids=None, **kwargs):
        texts = [completion_text(c) for c in completions]
        try:
            scores = fn(
                prompts=[prompt_text(p) for p in prompts], completions=texts, completion_ids=completion_ids, **kwargs
            )
        except Exception as exc:
            where = _user_frames(exc, resolved)
            raise RewardFunctionError(
                f"reward function {name!r} ({origin}) raised {type(exc).__name__}: {exc}\n{where}"
            ) from exc
        return check_scores(name, origin, scores, len(texts))

    reward.__name__ = name
    reward.__qualname__ = name
    reward.__doc__ = fn.__doc__
    return reward


def check_scores(name: str, origin: str, scores, expected: int) -> list[float | None]:
    """One finite float (or None) per completion, or ``RewardFunctionError`` saying what came back instead."""
    where = f"reward function {name!r} ({origin})"
    if isinstance(scores, str | bytes | dict) or not hasattr(scores, "__iter__"):
        raise RewardFunctionError(
            f"{where} returned {type(scores).__name__}; return a list with one float (or None) per completion"
        )
    values = list(scores)
    if len(values) != expected:
        raise RewardFunctionError(
            f"{where} returned {len(values)} scores for {expected} completions; return one float (or None) per "
            "completion"
        )
    out: list[float | None] = []
    for i, value in enumerate(values):
        if value is None:
            out.append(None)
            continue
        if isinstance(value, bool | str | bytes) or not hasattr(value, "__float__"):
            raise RewardFunctionError(
                f"{where} returned {_short(value)} for completion {i + 1}, which is not a number; return a float, or "
                "None where the reward does not apply"
            )
        number = float(value)
        if not math.isfinite(number):
            raise RewardFunctionError(
                f"{where} returned {number} for completion {i + 1}; return a finite float, or None where the reward "
                "does not apply"
            )
        out.append(number)
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _user_frames(exc: BaseException, path: Path) -> str:
    """The traceback lines of ``exc`` inside the user's file (all of them if none is)."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == path]
    if not mine and isinstance(exc, SyntaxError) and exc.filename:
        return f'  File "{exc.filename}", line {exc.lineno}\n    {(exc.text or "").strip()}'
    return "".join(traceback.format_list(mine or frames[-3:])).rstrip()
