"""The text of an exported project's ``rewards.py``: a run's reward functions as plain Python that imports nothing
of this package, in TRL's signature ``f(prompts, completions, **kwargs) -> list[float | None]``.

TRL's ``trl rloo`` loads a reward function from a dotted path (``rewards.vader_compound``) with the working folder
on ``sys.path``, and logs it under the function's name; so each function here is named as the app names its metric
(``rloo_demo.task.rewards.metric_name``), and the config's ``reward_funcs`` lists those names in the run's order.
Every function scores the completion's text alone, as the app's (``rloo_demo.chat.completion_text``), and a user's
own function gets plain texts, as ``rloo_demo.task.user_rewards.checked`` gives them: the helpers below are those
two functions written out again, since the project must run where this package is not installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rloo_demo.task.rewards import (
    CLASSIFIER_PREFIX,
    KEYWORD_CAP,
    KEYWORD_PREFIX,
    LENGTH_TARGET_PREFIX,
    LENGTH_TARGET_WORDS,
    MODULE_PREFIX,
    POSITIVE_LABELS,
    metric_name,
)


@dataclass(frozen=True)
class ExportedReward:
    """One function of rewards.py: its name (the metric key TRL logs it under) and what it scores with."""

    name: str  # the run's reward name ("keyword:good", "module:my.py:f")
    function: str  # its function's name in rewards.py
    model: str | None = None  # a classifier's folder (relative to the project where ``copied``) or hub id
    copied: bool = False  # whether ``model`` was copied into the project
    own_file: str | None = None  # a user's reward module, copied beside rewards.py under this name


_HEAD = '''"""The reward functions of the rloo-demo run {run!r}, for TRL's ``trl rloo`` (config.yaml's reward_funcs).

Each function has TRL's signature and scores the completion's text; TRL sums their scores with config.yaml's
reward_weights ({weights}). A score of None means "does not apply": TRL leaves it out of the completion's sum.
"""

import functools as _functools
import importlib.util as _importlib_util
import os as _os
import re as _re

_HERE = _os.path.dirname(_os.path.abspath(__file__))


def _text(completion):
    """The text of a completion: a string, or TRL's conversational form (a list of messages)."""
    if isinstance(completion, list):
        return " ".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    return str(completion)


def _prompt_text(prompt):
    """The text of a prompt: the string itself, or a conversation's turns without the system message."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list):
        return str(prompt)
    turns = [m for m in prompt if isinstance(m, dict) and m.get("role") != "system"]
    if len(turns) == 1:
        return str(turns[0].get("content", ""))
    return "\\n".join(f"{{m.get('role')}}: {{m.get('content', '')}}" for m in turns)
'''

_VADER = """

@_functools.cache
def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()
"""

_CLASSIFIER = f'''

POSITIVE_LABELS = {POSITIVE_LABELS!r}


@_functools.cache
def _pipeline(model):
    import torch
    from transformers import pipeline

    device = 0 if torch.cuda.is_available() else -1
    return pipeline("sentiment-analysis", model=model, tokenizer=model, device=device)


def _classify(model, completions):
    """The classifier's signed probability of each completion: POSITIVE -> +p, anything else -> -p."""
    results = _pipeline(model)([_text(c) for c in completions], truncation=True, max_length=256, batch_size=64)
    return [float(r["score"]) if str(r["label"]).upper() in POSITIVE_LABELS else -float(r["score"]) for r in results]
'''

_OWN = '''

@_functools.cache
def _own(file, function):
    """A function of a reward module copied beside this file, loaded once from its path (as the app loads it)."""
    name = "own_rewards_" + _re.sub(r"\\W", "_", file)
    spec = _importlib_util.spec_from_file_location(name, _os.path.join(_HERE, file))
    module = _importlib_util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, function)
'''

# Names rewards.py itself defines: a user's function of one of these names gets a suffix, so it cannot shadow one.
RESERVED = {
    "_functools",
    "_importlib_util",
    "_os",
    "_re",
    "_HERE",
    "_text",
    "_prompt_text",
    "_vader",
    "POSITIVE_LABELS",
}
RESERVED |= {"_pipeline", "_classify", "_own"}


def function_names(rewards: list[str]) -> list[str]:
    """Each reward's function name in rewards.py: its metric name, with ``_2``, ``_3`` after a name already taken
    (two rewards of one name would otherwise be one function)."""
    names: list[str] = []
    for reward in rewards:
        name, n = metric_name(reward), 1
        while (name if n == 1 else f"{name}_{n}") in names or (n == 1 and name in RESERVED):
            n += 1
        names.append(name if n == 1 else f"{name}_{n}")
    return names


def _body(reward: ExportedReward) -> str:
    """The statement(s) that score ``completions`` for one reward."""
    name = reward.name
    if name == "vader_compound":
        return 'return [float(_vader().polarity_scores(_text(c))["compound"]) for c in completions]'
    if name == "sentiment_classifier" or name.startswith(CLASSIFIER_PREFIX):
        model = f"_os.path.join(_HERE, {reward.model!r})" if reward.copied else repr(reward.model)
        return f"return _classify({model}, completions)"
    if name == "length_penalty":
        return f"return [min(0.0, len(_text(c).split()) / {LENGTH_TARGET_WORDS} - 1.0) for c in completions]"
    if name.startswith(KEYWORD_PREFIX):
        word = name.removeprefix(KEYWORD_PREFIX)
        return (
            f"pattern = _re.compile({_re_word(word)!r}, _re.IGNORECASE)\n"
            f"    return [min(len(pattern.findall(_text(c))), {KEYWORD_CAP}) / {KEYWORD_CAP} for c in completions]"
        )
    if name.startswith(LENGTH_TARGET_PREFIX):
        target = int(name.removeprefix(LENGTH_TARGET_PREFIX))
        return f"return [max(-1.0, 1.0 - abs(len(_text(c).split()) - {target}) / {target}) for c in completions]"
    if name.startswith(MODULE_PREFIX):
        function = name.rsplit(":", 1)[-1]
        return (
            f"own = _own({reward.own_file!r}, {function!r})\n"
            "    return own(prompts=[_prompt_text(p) for p in prompts], completions=[_text(c) for c in completions], "
            "**kwargs)"
        )
    raise ValueError(f"no exported form of the reward {name!r}")


def _re_word(word: str) -> str:
    """The pattern exactly as ``rloo_demo.task.rewards.make_keyword_reward`` builds it."""
    return rf"\b{re.escape(word)}\b"


_DOCS = {
    "vader_compound": "VADER's compound sentiment score of each completion, in [-1, 1].",
    "sentiment_classifier": "The sentiment classifier's signed probability (POSITIVE: +p, NEGATIVE: -p).",
    "length_penalty": f"-1 for an empty completion, rising linearly to 0 at {LENGTH_TARGET_WORDS} words and above.",
}


def _doc(reward: ExportedReward) -> str:
    """The function's docstring: what it scores (a backslash or triple quote in a name cannot break it)."""
    name = reward.name
    if name in _DOCS:
        text = _DOCS[name]
    elif name.startswith(CLASSIFIER_PREFIX):
        text = f"The signed probability (POSITIVE: +p) of the classifier {name.removeprefix(CLASSIFIER_PREFIX)!r}."
    elif name.startswith(KEYWORD_PREFIX):
        word = name.removeprefix(KEYWORD_PREFIX)
        text = f"Whole-word occurrences of {word!r} in any case, at most {KEYWORD_CAP}, over {KEYWORD_CAP}."
    elif name.startswith(LENGTH_TARGET_PREFIX):
        target = name.removeprefix(LENGTH_TARGET_PREFIX)
        text = f"1 at exactly {target} words, falling linearly with the distance from it, down to -1."
    else:
        function = name.rsplit(":", 1)[-1]
        text = f"Your own function {function!r} of {reward.own_file} (copied here), called with plain texts."
    return text.replace("\\", "/").replace('"', "'")


def rewards_source(run_name: str, rewards: list[ExportedReward], weights: list[float]) -> str:
    """rewards.py: the helpers the run's rewards need, then one function per reward, in the run's order."""
    parts = [_HEAD.format(run=run_name, weights=", ".join(f"{w:g}" for w in weights))]
    names = [r.name for r in rewards]
    if "vader_compound" in names:
        parts.append(_VADER)
    if any(n == "sentiment_classifier" or n.startswith(CLASSIFIER_PREFIX) for n in names):
        parts.append(_CLASSIFIER)
    if any(n.startswith(MODULE_PREFIX) for n in names):
        parts.append(_OWN)
    for reward in rewards:
        parts.append(
            f'\n\ndef {reward.function}(prompts, completions, **kwargs):\n    """{_doc(reward)}"""\n'
            f"    {_body(reward)}\n"
        )
    return "".join(parts)
