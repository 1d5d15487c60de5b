"""Judges of the text itself, which a reward model cannot be fooled by: diversity, repetition, and how likely the
base model finds it.

In the beta = 0 experiment of docs/learning.md the reward climbs near its maximum while every completion becomes
"great great great …", and the held-out sentiment classifier is fooled too. These judges look at the words, not the
sentiment:

- ``distinct_2``: unique word bigrams over all bigrams of a set of samples (Li et al., 2016). Varied text scores
  high; samples that all say the same thing score near 0.
- ``repetition``: the share of each sample's word bigrams that already occurred earlier in the same sample.
  Ordinary sentences rarely repeat a bigram; "great great great" repeats nearly all of them.
- ``base_perplexity``: the base model's per-token perplexity of the samples, ``exp(-sum log p_base / tokens)``.
  Text the base model would not write reads as high perplexity.

``collapse_warning`` turns them into one plain sentence when they cross the thresholds below. The thresholds are set
so that the beta = 0 run of docs/learning.md trips them and the default run does not
(``tests/engine/test_diagnostics.py`` checks constructed texts; docs/learning.md gives the measured values).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from rloo_demo.i18n import t

DISTINCT_2_MIN = 0.25  # below this share of unique bigrams, the samples say the same few things
REPETITION_MAX = 0.5  # above this share of repeated bigrams within a sample, it is stuck in a loop
PERPLEXITY_RATIO_MAX = 3.0  # trained samples this many times more perplexing to the base than its own samples
COLLAPSE_WARNING = "the completions have collapsed into repetition"

_WORD = re.compile(r"\w+|[^\w\s]")


def words(text: str) -> list[str]:
    """Lower-cased words and punctuation marks, the units the judges count."""
    return _WORD.findall(str(text).lower())


def _ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(texts: Sequence[str], n: int = 2) -> float | None:
    """Unique n-grams over all n-grams, pooled over the samples; None when no sample has n words."""
    grams = [g for t in texts for g in _ngrams(words(t), n)]
    return len(set(grams)) / len(grams) if grams else None


def repetition_rate(texts: Sequence[str], n: int = 2) -> float | None:
    """The share of n-grams that repeat an earlier n-gram of the same sample, pooled; None without n-grams."""
    repeated = total = 0
    for sample in texts:
        seen: set[tuple[str, ...]] = set()
        for g in _ngrams(words(sample), n):
            total += 1
            repeated += g in seen
            seen.add(g)
    return repeated / total if total else None


def judge_texts(texts: Sequence[str]) -> dict[str, float | None]:
    """``{"distinct_2", "repetition"}`` of a set of samples."""
    return {"distinct_2": distinct_n(texts, 2), "repetition": repetition_rate(texts, 2)}


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def collapse_warning(judges: dict, base: dict | None = None, locale: str = "en") -> str | None:
    """A plain sentence when the samples are repetitive, or (given the base model's own samples' judges) far less
    likely to the base model than its own text; None when neither threshold is crossed. In ``locale`` for the page
    (the 'collapse.*' keys); the CLI's report keeps the English."""
    reasons = []
    distinct, repetition = judges.get("distinct_2"), judges.get("repetition")
    if _number(distinct) and distinct < DISTINCT_2_MIN:
        reasons.append(t(locale, "collapse.distinct", value=f"{distinct:.2f}", limit=f"{DISTINCT_2_MIN:g}"))
    if _number(repetition) and repetition > REPETITION_MAX:
        reasons.append(t(locale, "collapse.repetition", value=f"{repetition:.2f}", limit=f"{REPETITION_MAX:g}"))
    sentences = []
    if reasons:
        sentences.append(t(locale, "collapse.warning", reasons="; ".join(reasons)))
    ppl, own = judges.get("base_perplexity"), (base or {}).get("base_perplexity")
    if _number(ppl) and _number(own) and own > 0 and ppl > PERPLEXITY_RATIO_MAX * own:
        key = "collapse.perplexity_also" if sentences else "collapse.perplexity"
        sentences.append(t(locale, key, ratio=f"{ppl / own:.0f}", trained=f"{ppl:.0f}", base=f"{own:.0f}"))
    if not sentences:
        return None
    return " ".join([*sentences, t(locale, "collapse.unnoticed")])


def base_perplexity(base_model, tokenizer, prompts: Sequence[str], completion_ids: Sequence[list[int]]) -> float | None:
    """The base model's per-token perplexity of completions (token ids) given their prompts, pooled over tokens."""
    from rloo_demo.models.sampling import sequence_logprob  # torch: loaded on first use, not at start-up

    total_logp, tokens = 0.0, 0
    for prompt, ids in zip(prompts, completion_ids, strict=True):
        if ids:
            total_logp += sequence_logprob(base_model, tokenizer, prompt, list(ids))
            tokens += len(ids)
    return math.exp(-total_logp / tokens) if tokens else None
