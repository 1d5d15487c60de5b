"""Reward functions with TRL's signature, and a registry that builds weighted combinations of them.

Every reward function takes ``(prompts, completions, completion_ids=None, **columns)`` and returns one float in
[-1, 1] per completion. TRL logs each function's mean under ``rewards/<function __name__>/mean``, so the names are
chosen to read well as metric keys.

Registered names (``REWARDS``):
- ``sentiment_classifier``: signed probability of the embedded sentiment classifier (POSITIVE: +p,
  NEGATIVE: -p), the tutorial's reward with a model that ships in ``assets/``;
- ``vader_compound``: VADER's compound score, a lexicon-and-rules scorer that shares nothing with the classifier,
  so each can expose reward hacking of the other;
- ``length_penalty``: -1 for an empty completion rising linearly to 0 at 12 words, to discourage collapse into
  very short outputs when combined with a sentiment reward;
- ``classifier:<hub id or folder>``: any sentiment classifier that ``pipeline("sentiment-analysis")`` loads;
- ``keyword:<word>``: occurrences of one word (letters and digits), capped at ``KEYWORD_CAP``, scaled to [0, 1];
- ``length_target:<n>``: 1 at exactly n words, falling linearly with the distance from n, down to -1;
- ``module:<file.py>:<function>``: your own function with TRL's signature (``rloo_demo.task.user_rewards``; it runs code
  from a file, so a public server refuses it).
Only the completion is scored, not the prompt: the policy is rewarded for what it wrote. A user's function may also
answer ``None`` where it does not apply; ``combine_scores`` is what that means for a completion's reward, in training
and everywhere else.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.advantages import combine_scores
from rloo_demo.chat import completion_text
from rloo_demo.errors import InputError
from rloo_demo.i18n import Message
from rloo_demo.models.hub import EMBEDDED_CLASSIFIER, ResolveError, resolve_model
from rloo_demo.task.user_rewards import check_spec, load_reward

RewardFn = Callable[..., list[float | None]]

POSITIVE_LABELS = ("POSITIVE", "POS", "LABEL_1")


def signed_label_score(item: dict) -> float:
    """POSITIVE -> +p, anything else -> -p: a classifier output as a score in [-1, 1]."""
    score = float(item["score"])
    return score if str(item["label"]).upper() in POSITIVE_LABELS else -score


# ----------------------------------------------------------------------------- classifier


_PIPELINES: dict[str, object] = {}
_PIPELINE_LOCK = threading.Lock()


def sentiment_pipeline(model: str = EMBEDDED_CLASSIFIER):
    """A cached ``transformers`` sentiment-analysis pipeline on the CPU (or the first GPU)."""
    folder = resolve_model(model, alternative=EMBEDDED_CLASSIFIER)
    with _PIPELINE_LOCK:
        if folder not in _PIPELINES:
            import torch
            from transformers import pipeline

            device = 0 if torch.cuda.is_available() else -1
            _PIPELINES[folder] = pipeline("sentiment-analysis", model=folder, tokenizer=folder, device=device)
        return _PIPELINES[folder]


def check_classifier_folder(folder: str, name: str) -> None:
    """Refuse a model that is not a two-label sequence classifier, by its config.json alone (nothing loads).

    A causal LM loaded through the sentiment pipeline gets a freshly initialised classification head: its "scores"
    would be noise, and the run would train on them without a word."""
    import json

    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ResolveError(Message("reward.classifier_config", name=repr(name))) from None
    architectures = config.get("architectures") or []
    labels = config.get("id2label") or {}
    num_labels = len(labels) if isinstance(labels, dict) and labels else config.get("num_labels", 2)
    if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise ResolveError(
            Message("reward.not_classifier", name=repr(name), architectures=str(architectures or "unknown"))
        )
    if num_labels != 2:
        raise ResolveError(Message("reward.labels", name=repr(name), labels=num_labels))


def make_classifier_reward(model: str = EMBEDDED_CLASSIFIER, name: str | None = None) -> RewardFn:
    """A reward function scoring completions with a sentiment classifier (signed probability)."""
    folder = resolve_model(model, alternative=EMBEDDED_CLASSIFIER)  # fail fast, before training starts
    check_classifier_folder(folder, model)

    def reward(prompts, completions, completion_ids=None, **columns) -> list[float]:
        texts = [completion_text(c) for c in completions]
        results = sentiment_pipeline(folder)(texts, truncation=True, max_length=256, batch_size=64)
        return [signed_label_score(r) for r in results]

    reward.__name__ = name or "sentiment_classifier"
    reward.model_folder = (
        folder  # which classifier it loads (rloo_demo.engine.trainers.models_held counts its parameters)
    )
    return reward


# ----------------------------------------------------------------------------- VADER

_VADER = None


def _vader():
    global _VADER
    if _VADER is None:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        _VADER = SentimentIntensityAnalyzer()
    return _VADER


def vader_compound(prompts, completions, completion_ids=None, **columns) -> list[float]:
    """VADER's compound sentiment score of each completion, in [-1, 1]."""
    analyzer = _vader()
    return [float(analyzer.polarity_scores(completion_text(c))["compound"]) for c in completions]


# ----------------------------------------------------------------------------- length

LENGTH_TARGET_WORDS = 12


def length_penalty(prompts, completions, completion_ids=None, **columns) -> list[float]:
    """-1 for an empty completion, rising linearly to 0 at ``LENGTH_TARGET_WORDS`` words and above."""
    return [min(0.0, len(completion_text(c).split()) / LENGTH_TARGET_WORDS - 1.0) for c in completions]


# ----------------------------------------------------------------------------- keyword and length target

KEYWORD_PREFIX = "keyword:"
KEYWORD_CAP = 3  # occurrences beyond this earn nothing more: repeating a word forever is not the goal
MAX_KEYWORD_CHARS = 32
_KEYWORD = re.compile(rf"[^\W_]{{1,{MAX_KEYWORD_CHARS}}}")
LENGTH_TARGET_PREFIX = "length_target:"
MAX_LENGTH_TARGET = 256  # words


def make_keyword_reward(word: str) -> RewardFn:
    """min(occurrences of ``word`` as a whole word, any case, ``KEYWORD_CAP``) / ``KEYWORD_CAP``, in [0, 1]."""
    pattern = re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE)

    def reward(prompts, completions, completion_ids=None, **columns) -> list[float]:
        return [min(len(pattern.findall(completion_text(c))), KEYWORD_CAP) / KEYWORD_CAP for c in completions]

    reward.__name__ = f"keyword_{word.lower()}"
    return reward


def make_length_target_reward(target: int) -> RewardFn:
    """1 - |words - target| / target, clipped at -1: 1 for a completion of exactly ``target`` words."""

    def reward(prompts, completions, completion_ids=None, **columns) -> list[float]:
        return [max(-1.0, 1.0 - abs(len(completion_text(c).split()) - target) / target) for c in completions]

    reward.__name__ = f"length_target_{target}"
    return reward


_LENGTH_TARGET = re.compile(r"[0-9]{1,6}")  # ASCII digits: str.isdigit() also takes '²' and '٣', which int() refuses


def _length_target(name: str) -> int | None:
    value = name.removeprefix(LENGTH_TARGET_PREFIX)
    return int(value) if _LENGTH_TARGET.fullmatch(value) and 1 <= int(value) <= MAX_LENGTH_TARGET else None


# ----------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class BuiltinReward:
    """A reward the app offers by name, declared once: how it is built, and what the rest reads of it (the Train
    form's check box and weight box, the reward help beside them, a public server's list of what it offers)."""

    build: Callable[[], RewardFn]
    label: str  # text key of its weight box's label on the Train form ("weight: vader")
    help: str  # text key of what it scores, in the form's reward help and the CLI's
    weight: float = 1.0  # its weight box's default
    public: bool = True  # whether a public server offers it (nothing here runs a visitor's code or reads a path)


# Every built-in reward, in the order the form lists them; a new one is one entry here plus its two translations
# (docs/development.md, "Add a built-in reward").
REWARDS: dict[str, BuiltinReward] = {
    "vader_compound": BuiltinReward(lambda: vader_compound, "train.w_vader", "reward.help.vader_compound"),
    "sentiment_classifier": BuiltinReward(
        make_classifier_reward, "train.w_classifier", "reward.help.sentiment_classifier"
    ),
    "length_penalty": BuiltinReward(lambda: length_penalty, "train.w_length", "reward.help.length_penalty", 0.5),
}
CLASSIFIER_PREFIX = "classifier:"
MODULE_PREFIX = "module:"


def metric_name(name: str) -> str:
    """The function name (and so the TRL metric key) for a reward name; a module reward is named by its function."""
    if name.startswith(CLASSIFIER_PREFIX):
        return "classifier_" + re.sub(r"[^0-9A-Za-z]+", "_", name.removeprefix(CLASSIFIER_PREFIX)).strip("_")
    if name.startswith(KEYWORD_PREFIX):
        return f"keyword_{name.removeprefix(KEYWORD_PREFIX).lower()}"
    if name.startswith(LENGTH_TARGET_PREFIX):
        return f"length_target_{_length_target(name)}"
    if name.startswith(MODULE_PREFIX):
        return name.rsplit(":", 1)[-1]
    return name


def _shown(text: str) -> str:
    return text if len(text) <= 60 else text[:59] + "…"


def check_reward_name(name: str, check_files: bool = True) -> None:
    """Raise ``InputError`` with the known names for an unknown or malformed reward name. Nothing is loaded or
    imported; ``check_files`` also looks for a module reward's file (off in public mode, where no path is looked at)."""
    if name in REWARDS or (name.startswith(CLASSIFIER_PREFIX) and len(name) > len(CLASSIFIER_PREFIX)):
        return
    if name.startswith(KEYWORD_PREFIX):
        if not _KEYWORD.fullmatch(name.removeprefix(KEYWORD_PREFIX)):
            raise InputError(Message("reward.keyword", name=repr(_shown(name)), max=MAX_KEYWORD_CHARS))
        return
    if name.startswith(LENGTH_TARGET_PREFIX):
        if _length_target(name) is None:
            raise InputError(Message("reward.length_target", name=repr(_shown(name)), max=MAX_LENGTH_TARGET))
        return
    if name.startswith(MODULE_PREFIX):
        check_spec(name.removeprefix(MODULE_PREFIX), check_files=check_files)
        return
    raise InputError(Message("reward.unknown", name=repr(_shown(name)), known=", ".join(REWARDS)))


def build_reward(name: str) -> RewardFn:
    check_reward_name(name)
    if name.startswith(CLASSIFIER_PREFIX):
        return make_classifier_reward(name.removeprefix(CLASSIFIER_PREFIX), name=metric_name(name))
    if name.startswith(KEYWORD_PREFIX):
        return make_keyword_reward(name.removeprefix(KEYWORD_PREFIX))
    if name.startswith(LENGTH_TARGET_PREFIX):
        return make_length_target_reward(_length_target(name))
    if name.startswith(MODULE_PREFIX):
        return load_reward(name.removeprefix(MODULE_PREFIX))
    return REWARDS[name].build()


# ----------------------------------------------------------------------------- combining the functions' scores


@dataclass(frozen=True)
class WeightedReward:
    """Several reward functions and their weights (and TRL's optional clip range), combined the way
    ``RLOOTrainer`` combines them (``combine_scores``). A ``RunConfig`` sets no clip range (``rloo_config`` never
    passes ``reward_clip_range`` to TRL), so the runs' own rewards leave it ``None``, as training does."""

    functions: tuple[RewardFn, ...]
    weights: tuple[float, ...]
    clip_range: tuple[float, float] | None = None

    @classmethod
    def from_names(
        cls,
        names: Sequence[str],
        weights: Sequence[float] | None = None,
        clip_range: Sequence[float] | None = None,
    ) -> WeightedReward:
        weights = tuple(weights) if weights is not None else (1.0,) * len(names)
        if len(weights) != len(names):
            raise ValueError(f"{len(names)} reward functions but {len(weights)} weights; give one weight each")
        clip = (float(clip_range[0]), float(clip_range[1])) if clip_range else None
        return cls(tuple(build_reward(n) for n in names), tuple(float(w) for w in weights), clip)

    @property
    def names(self) -> list[str]:
        return [f.__name__ for f in self.functions]

    def score_each(self, prompts: Sequence[str], completions: Sequence[str]) -> dict[str, list[float | None]]:
        """Every function's raw scores, by function name (``None`` where a function does not apply)."""
        return {f.__name__: f(prompts=list(prompts), completions=list(completions)) for f in self.functions}

    def combine(self, per_function: dict[str, list[float | None]]) -> list[float]:
        """The reward of each completion (``combine_scores``): NaN for one that no function scored."""
        return combine_scores([per_function[f.__name__] for f in self.functions], self.weights, self.clip_range)

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        return self.combine(self.score_each(prompts, completions))
