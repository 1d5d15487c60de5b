"""Every message a user can meet is written in the page's language: each refusal, problem of a setting and stop
reason the engine writes is an ``i18n.Message`` (its English for the CLI, the API and the logs, and its key and
parameters for a page), and every key it uses is translated in ru, ka and ro with the same placeholders.

The messages are found in the code itself, not in a list kept beside it: every ``Message(...)`` call of the package
(its key, or for a key built with an f-string every key of en.json it can be), every error a user can fix that the
package raises (it must carry a ``Message``, not English text), every problem RunConfig and the limits can write
for a hostile setting, and every stop reason. A new English message without a key fails here.

``python -m pytest tests/test_translated_messages.py`` (a few seconds).
"""

import ast
import json
import re
import typing
from dataclasses import fields, replace
from pathlib import Path

import pytest
from conftest import ROOT

from rloo_demo import errors, i18n
from rloo_demo.config import RunConfig
from rloo_demo.i18n import PLURAL_FORMS, PLURAL_SEPARATOR, Message, load, placeholders
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.settings import type_key
from rloo_demo.store.folder import RunFolder, stop_reason

PACKAGE = ROOT / "rloo_demo"
OTHERS = ("ru", "ka", "ro")
# The command line speaks English by design (its output is checked word for word); these modules serve it alone.
CLI_ONLY = {"rloo_demo/cli.py", "rloo_demo/arena.py", "rloo_demo/engine/meter.py", "rloo_demo/engine/trl_import.py"}
# A reward function's own failure inside a run: recorded as the run's error, with its traceback, not a refusal.
RECORDED_FAILURES = {"RewardFunctionError"}
# A text that is the same in every language: names and symbols (a JSON literal, a letter), short units.
NAMES = {"null", "true", "false", "K", "Gradio", "API", "MCP", "SIGTERM", "LoRA", "NaN"}
SAME_IN = {"ro": {"model"}}  # a word the language spells as English does


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _is_message_call(node) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "Message")
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "Message")
    )


# Where a key is computed rather than written: the messages' own code, what a setting's type must be (the keys
# ``type_key`` builds are checked against every setting's type below) and a range's refusal (each range's key is
# checked against every setting's range below)
COMPUTED_KEYS = {
    ("rloo_demo/i18n.py", None),
    ("rloo_demo/settings.py", "describe"),
    ("rloo_demo/settings.py", "refusal"),
}


def message_calls():
    """(where, key pattern, keyword names or None, literal) of every ``Message(...)`` call in the package. A
    literal key is its own pattern; an f-string key ``f"limits.cap.{name}"`` is a regular expression over en.json's
    keys (its keywords are not compared: the keys it can be differ)."""
    found = []

    class Calls(ast.NodeVisitor):
        def __init__(self, path):
            self.path, self.function = path, None

        def visit_FunctionDef(self, node):  # noqa: N802 (ast's visitor names)
            outer, self.function = self.function, node.name
            self.generic_visit(node)
            self.function = outer

        visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

        def visit_Call(self, node):  # noqa: N802
            self.generic_visit(node)
            if not _is_message_call(node) or not node.args:
                return
            where = f"{_relative(self.path)}:{node.lineno}"
            first = node.args[0]
            keywords = None if any(k.arg is None for k in node.keywords) else {k.arg for k in node.keywords}
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((where, re.escape(first.value), keywords))
            elif isinstance(first, ast.JoinedStr):
                parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"\w+" for v in first.values]
                found.append((where, "".join(parts), None))
            elif (_relative(self.path), None) not in COMPUTED_KEYS and (
                _relative(self.path),
                self.function,
            ) not in COMPUTED_KEYS:
                found.append((where, None, keywords))

    for path in _modules():
        Calls(path).visit(ast.parse(path.read_text()))
    return found


def keys_of(pattern: str) -> list[str]:
    return [key for key in load("en") if re.fullmatch(pattern, key)]


def is_name_or_number(text: str) -> bool:
    """Whether a text stays the same in another language: placeholders, symbols, numbers and names only."""
    words = re.findall(r"[^\W\d_]+", i18n.PLACEHOLDER.sub("", text))
    return all(len(w) <= 3 or w in NAMES for w in words)


def untranslated(key: str) -> list[str]:
    """What is wrong with ``key``'s translations: missing, other placeholders, the wrong number of plural forms,
    or the English text itself where it is words."""
    en = load("en")[key]
    wrong = []
    for code in OTHERS:
        text = load(code).get(key)
        if text is None:
            wrong.append(f"{code}: missing")
            continue
        if key.endswith(".plural"):
            forms, english = text.split(PLURAL_SEPARATOR), en.split(PLURAL_SEPARATOR)
            if len(forms) != len(PLURAL_FORMS[code]):
                wrong.append(f"{code}: {len(forms)} plural forms, not {len(PLURAL_FORMS[code])}")
            if any(placeholders(f) != placeholders(english[0]) for f in forms):
                wrong.append(f"{code}: other placeholders in a plural form")
            continue
        if placeholders(text) != placeholders(en):
            wrong.append(f"{code}: placeholders {sorted(placeholders(text))}, not {sorted(placeholders(en))}")
        if text == en and not is_name_or_number(en) and en not in SAME_IN.get(code, set()):
            wrong.append(f"{code}: the English text")
    return wrong


# ----------------------------------------------------------------------------- the keys the code writes


def test_every_message_key_the_code_writes_is_translated_with_its_placeholders():
    calls = message_calls()
    assert len(calls) > 150, len(calls)  # the whole package was read, not a corner of it
    problems, keys = [], set()
    for where, pattern, keywords in calls:
        if pattern is None:
            problems.append(f"{where}: the key is no literal text (the test cannot see which it is)")
            continue
        matched = keys_of(pattern)
        if not matched:
            problems.append(f"{where}: no key {pattern!r} in en.json")
        for key in matched:
            keys.add(key)
            if keywords is not None and keywords != placeholders(load("en")[key]):
                problems.append(
                    f"{where}: {key} takes {sorted(placeholders(load('en')[key]))}, given {sorted(keywords)}"
                )
    for key in sorted(keys):
        problems += [f"{key}: {w}" for w in untranslated(key)]
    assert problems == [], "\n".join(problems)
    # what a user meets among them: the stop reasons, the limits' caps, the refusals of a box
    assert {"stop.starter", "stop.budget", "limits.cap.num_generations", "value.between"} <= keys


def test_every_plural_key_has_its_locales_forms_and_picks_the_right_one():
    plural = [k for k in load("en") if k.endswith(".plural")]
    assert len(plural) >= 3
    for key in plural:
        assert untranslated(key) == [], key
    # Russian and Romanian have three forms, chosen by the number's last digits
    shown = {n: i18n.tn("ru", "eval.samples.plural", n) for n in (1, 2, 5, 11, 21, 22, 25, 112)}
    assert shown == {
        1: "1 сэмпл",
        2: "2 сэмпла",
        5: "5 сэмплов",
        11: "11 сэмплов",
        21: "21 сэмпл",
        22: "22 сэмпла",
        25: "25 сэмплов",
        112: "112 сэмплов",
    }
    ro = {n: i18n.tn("ro", "eval.samples.plural", n) for n in (1, 2, 19, 20, 101, 120)}
    assert ro == {
        1: "1 eșantion",
        2: "2 eșantioane",
        19: "19 eșantioane",
        20: "20 de eșantioane",
        101: "101 eșantioane",
        120: "120 de eșantioane",
    }
    assert [i18n.tn("en", "eval.samples.plural", n) for n in (1, 2)] == ["1 sample", "2 samples"]
    assert i18n.tn("ka", "eval.samples.plural", 7) == "7 ნიმუში"  # Georgian keeps the singular after a number


def test_what_a_value_must_be_is_a_key_for_every_settings_type():
    """RunConfig's type problems name a field's type in words: each type a field has is a translated key."""
    hints = typing.get_type_hints(RunConfig)
    for f in fields(RunConfig):
        key = type_key(hints[f.name])
        assert key in load("en"), (f.name, key)
        assert untranslated(key) == [], key


def test_every_range_refusal_is_a_translated_key_quoting_only_what_a_range_fills():
    """A setting's ``Range`` refuses a value with its own key (``Range.refusal``): each is translated, and quotes
    nothing but the range's ends and the value."""
    ranges = [f.metadata["range"] for f in fields(RunConfig) if "range" in f.metadata]
    assert len(ranges) >= 15, len(ranges)
    for limit in ranges:
        assert limit.problem in load("en"), limit.problem
        assert placeholders(load("en")[limit.problem]) <= {"lo", "hi", "value"}, limit.problem
        assert untranslated(limit.problem) == [], limit.problem


# ----------------------------------------------------------------------------- no English without a key


def _user_errors() -> set[str]:
    from rloo_demo.models.hub import ResolveError
    from rloo_demo.task.user_rewards import RewardFunctionError

    found = {n for n, o in vars(errors).items() if isinstance(o, type) and issubclass(o, errors.UserError)}
    assert {"InputError", "ConfigError", "Busy", "NotFound"} <= found
    assert issubclass(ResolveError, errors.UserError) and issubclass(RewardFunctionError, errors.UserError)
    return (found | {"ResolveError", "RewardFunctionError"}) - RECORDED_FAILURES


def _english(node) -> bool:
    """Whether an expression is English text written in place: a literal, an f-string, a sum with one, str(...)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _english(node.left) or _english(node.right)
    if isinstance(node, ast.IfExp):
        return _english(node.body) or _english(node.orelse)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str"


STOPPERS = {"stop", "request_stop", "on_stop", "mark_stopped", "stop_all"}


def english_messages(source: str, user_errors: set[str]) -> list[str]:
    """Where ``source`` writes a message a user can meet as English text: an error a user can fix raised with
    text (a ConfigError with a problem's text), a problem set as text (``p[...] = "..."``), a stop reason given
    or defaulted as text, a ``*_problem`` helper returning text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in user_errors and node.args:
                first = node.args[0]
                texts = first.values if isinstance(first, ast.Dict) else [first]
                if any(_english(t) for t in texts):
                    found.append(f"{node.lineno}: {name}(English text)")
            if name in STOPPERS and any(_english(a) for a in node.args):
                found.append(f"{node.lineno}: {name}(English stop reason)")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    if target.value.id in ("p", "problems") and _english(node.value):
                        found.append(f"{node.lineno}: {target.value.id}[...] = English text")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults)
            defaults += list(node.args.kw_defaults)
            for arg, default in zip(args, defaults, strict=True):
                if arg.arg == "reason" and default is not None and _english(default):
                    found.append(f"{node.lineno}: {node.name}(reason=English text)")
            if node.name.endswith("_problem"):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Return) and inner.value is not None and _english(inner.value):
                        found.append(f"{inner.lineno}: {node.name} returns English text")
    return found


def test_no_message_a_user_can_meet_is_english_text_without_a_key():
    user_errors = _user_errors()
    found = {}
    for path in _modules():
        if _relative(path) in CLI_ONLY:
            continue
        hits = english_messages(path.read_text(), user_errors)
        if hits:
            found[_relative(path)] = hits
    assert found == {}, json.dumps(found, indent=1)


@pytest.mark.parametrize(
    "source",
    [
        'raise InputError(f"seed must be a whole number, not {x}")',
        'raise Busy("the server is busy")',
        'raise ConfigError({"k": "must be positive"})',
        'p["beta"] = f"must be >= 0, not {beta}"',
        'job.stop("its page was gone")',
        'def stop(self, reason: str = "its starter asked it to stop"): pass',
        'def tracker_problem(x):\n    return "unknown tracker"',
        'raise NotFound("no run named " + repr(name))',
    ],
)
def test_the_scan_finds_a_new_english_message(source):
    """The scan above can fail: each way of writing a message in English is found."""
    assert english_messages(source, _user_errors()), source


def test_the_scan_leaves_keyed_messages_alone():
    keyed = 'raise InputError(Message("value.whole", name=n, value=v))\np["beta"] = Message("cfg.beta", hi=1, value=2)'
    assert english_messages(keyed, _user_errors()) == []


# ----------------------------------------------------------------------------- what RunConfig and the limits write


def hostile_configs() -> list[RunConfig]:
    """For every setting: a value of the wrong type, below and far above any range, an empty and an odd text; and
    the combinations that only some pairs refuse (GRPO with an offset, a system prompt without chat)."""
    hints = typing.get_type_hints(RunConfig)
    out = []
    for f in fields(RunConfig):
        hint = str(hints[f.name])
        values = [{"a": 1}, None, True, "\ud800", float("nan")]
        if "int" in hint or "float" in hint:
            values += [-1, 0, 1, 1e12, 10**12, 0.5]
        if "str" in hint:
            values += ["", " ", "x" * 5000, "module:x.py:f", "nope", "classifier:x/y", "/no/such/folder"]
        if "list" in hint:
            values += [[], ["vader_compound", "vader_compound"], ["keyword:two words"], ["length_target:x"], [1e9]]
            values += [["nope"], ["module:/nowhere/r.py:f"], ["classifier:other/model"], [None]]
        if "bool" in hint:
            values += [True]
        for value in values:
            out.append(replace(RunConfig(), **{f.name: value}))
    out += [
        RunConfig(estimator="grpo", reward_offset=1.0, variance_every=5),
        RunConfig(system_prompt="Be kind.", prompt_template="continuation"),
        RunConfig(generation_batch_size=10, num_generations=4),
        RunConfig(generation_batch_size=3, num_generations=4),
        RunConfig(reward_weights=[1.0, 2.0]),
        RunConfig(report_to="wandb"),
        RunConfig(bf16=True, use_vllm=True),
        RunConfig(variance_every=3, snapshot_every=2, text_column="body", report_to="tensorboard"),
        RunConfig(system_prompt="x" * 900, prompt_template="chat"),
    ]
    return out


def test_every_problem_runconfig_and_the_limits_write_is_a_translated_message():
    seen = set()
    for config in hostile_configs():
        problems = config.problems(check_files=True)
        for limits in (LOCAL, PUBLIC, replace(PUBLIC, allowed_models=("org/model",))):
            problems |= limits.config_problems(config)
        for name, message in problems.items():
            assert isinstance(message, Message), (name, message, config)
            assert untranslated(message.key) == [], message.key
            for value in message.params.values():  # a nested message (a reward's own problem) is one too
                assert not isinstance(value, str) or isinstance(value, Message) or not _sentence(value), value
            seen.add(message.key)
    # the hostile configs reach the caps, the type problems, the rewards' and the public server's refusals
    assert {"cfg.type", "cfg.positive", "limits.cap.max_steps", "limits.reward", "reward.keyword"} <= seen
    assert len(seen) > 40, sorted(seen)


def _sentence(text: str) -> bool:
    return bool(re.search(r"[a-z]{3,} [a-z]{3,} [a-z]{3,}", text))


def test_every_stop_reason_is_a_translated_message():
    """The reasons a run stops, from the code that stops it: its starter, the operator, an abandoned page, the
    compute budget, SIGTERM, the server's shutdown (before the step ended or not)."""
    from rloo_demo.engine.training import STOP_STARTER

    stops = [k for k in load("en") if k.startswith("stop.")]
    assert STOP_STARTER.key in stops and len(stops) >= 7
    for key in stops:
        assert untranslated(key) == [], key


# ----------------------------------------------------------------------------- a stop reason kept in status.json


def test_a_stop_reason_is_stored_with_its_key_and_shown_in_the_pages_language(tmp_path):
    from rloo_demo.ui.views import status_line

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="stopped"))
    reason = Message("stop.mid_step", reason=Message("stop.shutdown"))
    run.set_status("stopped", reason=reason)
    stored = json.loads((run.path / "status.json").read_text())
    assert stored["reason"] == "the server shut down (SIGTERM), before the step ended; no model saved"  # the CLI's
    assert stored["reason_message"] == {
        "key": "stop.mid_step",
        "params": {"reason": {"key": "stop.shutdown", "params": {}}},
    }
    read = stop_reason(stored)
    assert isinstance(read, Message) and read == stored["reason"]
    line = status_line("stopped", [{"step": 3}], 10, 5.0, "stopped", read, "ru")
    expected = i18n.t("ru", "stop.mid_step", reason=i18n.t("ru", "stop.shutdown"))
    assert i18n.t("ru", "status.stopped_because", reason=expected) in line
    assert "SIGTERM" in line and "before the step" not in line


@pytest.mark.parametrize("locale", OTHERS)
def test_an_old_runs_english_stop_reason_is_translated_where_it_reads_as_a_known_one(locale):
    """A run stopped before the keys were stored has only the English text: each known reason is read back."""
    samples = {"seconds": "300", "reason": "its starter asked it to stop"}
    for key in [k for k in load("en") if k.startswith("stop.")]:
        params = {p: samples[p] for p in placeholders(load("en")[key])}
        english = i18n.t("en", key, **params)
        read = stop_reason({"reason": english})
        assert isinstance(read, Message) and read.key == key, english
        assert read.in_locale(locale) != english
    # a text that reads as no known reason stays as it is; a forged key beside a text is not believed
    assert stop_reason({"reason": "someone pulled the plug"}) == "someone pulled the plug"
    forged = {"reason": "its starter asked it to stop", "reason_message": {"key": "stop.operator", "params": {}}}
    assert stop_reason(forged).key == "stop.starter"
    hostile = {"reason": "x", "reason_message": {"key": "nope", "params": {"a": {"b": []}}}}
    assert stop_reason(hostile) == "x"


def test_a_message_keeps_its_key_through_copies_and_renders_english_by_default():
    import copy
    import pickle

    m = Message("limits.cap.num_generations", limit=8, value=100)
    assert m == "this server allows at most 8 completions per prompt (K), not 100"  # the API's and the CLI's
    for other in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert isinstance(other, Message) and other.key == m.key and other.params == m.params
    assert m.in_locale("ru") == i18n.t("ru", "limits.cap.num_generations", limit=8, value=100) != str(m)
    assert json.dumps({"error": m}) == json.dumps({"error": str(m)})
