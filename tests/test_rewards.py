"""Reward functions, the registry and weighted combination: ``python -m pytest tests/test_rewards.py``."""

import json

import pytest
from transformers import pipeline

from rloo_demo.errors import InputError
from rloo_demo.models.hub import resolve_model
from rloo_demo.task.rewards import (
    REWARDS,
    WeightedReward,
    build_reward,
    length_penalty,
    make_classifier_reward,
    metric_name,
    signed_label_score,
    vader_compound,
)

POSITIVE = [
    "A wonderful, moving film with brilliant acting. I loved every minute of it.",
    "One of the best movies I have ever seen, a true masterpiece.",
]
NEGATIVE = [
    "A terrible, boring mess. The acting was awful and I hated it.",
    "The worst movie of the year, a complete waste of time.",
]


def test_classifier_loads_through_the_tutorials_pipeline():
    folder = resolve_model("embedded:tiny-imdb-sentiment")
    pipe = pipeline("sentiment-analysis", model=folder)
    assert pipe.model.config.id2label == {0: "NEGATIVE", 1: "POSITIVE"}
    out = pipe(POSITIVE + NEGATIVE)
    assert [o["label"] for o in out] == ["POSITIVE"] * 2 + ["NEGATIVE"] * 2


@pytest.mark.parametrize("fn", [make_classifier_reward(), vader_compound], ids=["classifier", "vader"])
def test_reward_signs(fn):
    pos = fn(prompts=[""] * 2, completions=POSITIVE)
    neg = fn(prompts=[""] * 2, completions=NEGATIVE)
    assert all(0 < s <= 1 for s in pos), pos
    assert all(-1 <= s < 0 for s in neg), neg


def test_function_names_are_the_metric_keys():
    assert make_classifier_reward().__name__ == "sentiment_classifier"
    assert vader_compound.__name__ == "vader_compound"
    assert {build_reward(n).__name__ for n in REWARDS} == set(REWARDS)
    assert metric_name("classifier:distilbert/sst-2") == "classifier_distilbert_sst_2"


def test_signed_label_score():
    assert signed_label_score({"label": "POSITIVE", "score": 0.9}) == 0.9
    assert signed_label_score({"label": "NEGATIVE", "score": 0.8}) == -0.8


def test_length_penalty():
    out = length_penalty(prompts=[""] * 3, completions=["", "six words in this little one", " ".join(["w"] * 30)])
    assert out == pytest.approx([-1.0, -0.5, 0.0])


def test_conversational_completions_are_scored():
    assert vader_compound(prompts=[""], completions=[[{"role": "assistant", "content": "I love it"}]])[0] > 0


def test_weighted_combination():
    combo = WeightedReward.from_names(["vader_compound", "length_penalty"], [2.0, 0.5])
    texts = ["great", "I hated this dull and boring film, a truly bad one"]
    each = combo.score_each([""] * 2, texts)
    expected = [2.0 * v + 0.5 * p for v, p in zip(each["vader_compound"], each["length_penalty"], strict=True)]
    assert combo([""] * 2, texts) == pytest.approx(expected)
    assert combo.names == ["vader_compound", "length_penalty"]
    with pytest.raises(ValueError, match="weights"):
        WeightedReward.from_names(["vader_compound"], [1.0, 2.0])


def test_user_classifier_by_folder():
    folder = resolve_model("embedded:tiny-imdb-sentiment")
    fn = build_reward(f"classifier:{folder}")
    assert fn.__name__.startswith("classifier_")
    assert fn(prompts=[""], completions=POSITIVE[:1])[0] > 0


def test_unknown_reward():

    with pytest.raises(InputError, match="unknown reward"):
        build_reward("bleu")


def test_a_causal_lm_is_not_a_classifier_reward():
    """Row 17 of issue 8: a causal LM as ``classifier:`` would get a random head and train on noise."""
    from rloo_demo.config import RunConfig
    from rloo_demo.engine.training import check_resources
    from rloo_demo.models.hub import ASSETS_DIR, ResolveError

    with pytest.raises(ResolveError, match="is not a sequence classifier"):
        build_reward("classifier:embedded:tiny-imdb-gpt2")
    with pytest.raises(ResolveError, match="is not a sequence classifier"):  # before any run folder is made
        check_resources(RunConfig(rewards=[f"classifier:{ASSETS_DIR / 'tiny-imdb-gpt2'}"]))  # a folder, by path
    build_reward("classifier:embedded:tiny-imdb-sentiment")  # the real one passes


# ----------------------------------------------------------------------------- against values worked out here


def test_the_sentiment_pipeline_is_one_cached_cpu_pipeline_of_the_classifier_folder():
    from rloo_demo.models.hub import ResolveError
    from rloo_demo.task.rewards import EMBEDDED_CLASSIFIER, sentiment_pipeline

    first = sentiment_pipeline()
    assert sentiment_pipeline(EMBEDDED_CLASSIFIER) is first  # cached by folder: one copy per process
    folder = resolve_model(EMBEDDED_CLASSIFIER)
    assert first.task == "sentiment-analysis" and str(first.device) == "cpu"
    assert first.model.name_or_path == folder and first.tokenizer.name_or_path == folder
    with pytest.raises(ResolveError, match=r"tiny-imdb-sentiment"):  # the error names the classifier to use instead
        sentiment_pipeline("")


@pytest.mark.parametrize(
    "config, needle",
    [
        ({"architectures": ["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b", "2": "c"}},
         r"has 3 labels; a reward needs a two-label"),
        ({"architectures": ["BertForSequenceClassification"], "num_labels": 5}, r"has 5 labels"),
        ({"architectures": ["GPT2LMHeadModel"]}, r"is not a sequence classifier \(its architectures are "),
        (None, r"^classifier 'classifier:mine' has no readable config\.json$"),
    ],
    ids=["three-labels", "five-by-count", "causal-lm", "no-config"],
)
def test_a_classifier_is_checked_by_its_config_alone(tmp_path, config, needle):
    from rloo_demo.models.hub import ResolveError
    from rloo_demo.task.rewards import check_classifier_folder

    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ResolveError, match=needle):
        check_classifier_folder(str(tmp_path), "classifier:mine")
    (tmp_path / "config.json").write_text('{"architectures": ["XForSequenceClassification"], "id2label": '
                                          '{"0": "neg", "1": "pos"}, "num_labels": 7}', encoding="utf-8")
    check_classifier_folder(str(tmp_path), "classifier:mine")  # two labels by id2label, whatever num_labels says


def test_length_targets_run_from_1_to_the_cap_and_a_long_name_is_cut_in_the_message():
    from rloo_demo.task.rewards import MAX_LENGTH_TARGET, check_reward_name

    for ok in (1, MAX_LENGTH_TARGET):
        check_reward_name(f"length_target:{ok}")
    for bad in (0, MAX_LENGTH_TARGET + 1):
        with pytest.raises(InputError, match=f"from 1 to {MAX_LENGTH_TARGET}"):
            check_reward_name(f"length_target:{bad}")
    sixty = "x" * 60
    with pytest.raises(InputError) as err:
        check_reward_name(sixty)
    assert f"unknown reward {sixty!r};" in str(err.value)  # 60 characters: shown whole
    with pytest.raises(InputError) as err:
        check_reward_name("y" * 61)
    assert f"unknown reward {'y' * 59 + '…'!r};" in str(err.value)  # 61: cut to 59 and an ellipsis


def test_weights_default_to_one_for_every_named_reward():
    from rloo_demo.task.rewards import WeightedReward

    combined = WeightedReward.from_names(["vader_compound", "length_penalty"])
    assert tuple(combined.weights) == (1.0, 1.0)
    assert tuple(WeightedReward.from_names(["vader_compound"], [0.25]).weights) == (0.25,)
