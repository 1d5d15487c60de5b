"""Three reward functions of your own, to copy and change: a keyword count, a format check and a length target.

Use one in a run with ``--reward-module examples/rewards.py:<function>`` (repeatable), as
``module:examples/rewards.py:<function>`` in a config file's ``rewards``, or in the app's "Reward module" box (a
local server only: loading the file runs its code). For example::

    python -m rloo_demo train --rewards vader_compound --reward-module examples/rewards.py:keyword_count \\
        --reward-weights 1 0.5

Each function has TRL's reward signature: it takes the batch's ``prompts`` and ``completions`` (plain text; for a chat
run, the user turn and the reply) and ``**kwargs`` (TRL also passes ``completion_ids``, ``trainer_state``, ...), and
returns one float per completion, or ``None`` where the reward does not apply. The function's name is its metric:
``rewards/keyword_count/mean`` in the logs and plots. An exception, a NaN or a list of the wrong length stops the
run with a message that names the function.
"""

from __future__ import annotations

import re

KEYWORDS = ("great", "wonderful", "loved")  # the words keyword_count rewards
KEYWORD_CAP = 3  # more mentions than this earn nothing more, so repeating a word is not a way to win
SENTENCE = re.compile(r"^\s*[A-Z][^.!?]*[.!?]\s*$")  # one sentence: a capital first, one closing mark at the end
TARGET_WORDS = 20


def keyword_count(prompts, completions, **kwargs) -> list[float]:
    """How many times the completion uses one of ``KEYWORDS`` (whole words, any case), capped at ``KEYWORD_CAP``
    and scaled to [0, 1]."""
    pattern = re.compile(r"\b(" + "|".join(KEYWORDS) + r")\b", re.IGNORECASE)
    return [min(len(pattern.findall(text)), KEYWORD_CAP) / KEYWORD_CAP for text in completions]


def format_check(prompts, completions, **kwargs) -> list[float | None]:
    """1.0 when the completion is exactly one sentence (``SENTENCE``), 0.0 when it is not, and None for an empty
    completion: there is nothing to judge, so this reward does not apply to it (the other rewards still do)."""
    return [None if not text.strip() else 1.0 if SENTENCE.match(text) else 0.0 for text in completions]


def length_target(prompts, completions, **kwargs) -> list[float]:
    """1.0 for a completion of exactly ``TARGET_WORDS`` words, falling linearly to 0 at twice (or zero) that length
    and staying there: a smooth push towards one length, rather than "longer is better"."""
    return [max(0.0, 1.0 - abs(len(text.split()) - TARGET_WORDS) / TARGET_WORDS) for text in completions]
