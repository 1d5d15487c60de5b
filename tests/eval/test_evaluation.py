"""Base-versus-trained evaluation, checked against an independent recomputation from the samples.

``python -m pytest tests/eval/test_evaluation.py`` (about 20 s on 2 cores, most of it loading the policy).

The "trained" model is the embedded policy with seeded noise added to its weights: it samples differently from the
base model, which is all these tests need (a swap of the two, or a seed that differs between them, then shows).
"""

import copy
import functools
import random
import statistics

import numpy as np
import pytest
import torch

from rloo_demo.config import RunConfig
from rloo_demo.eval.evaluation import (
    Scorer,
    bootstrap_interval,
    evaluate,
    format_report,
    heldout_prompts,
    heldout_scorers,
    judges_lines,
)
from rloo_demo.models.hub import EMBEDDED_POLICY
from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import sample, sequence_logprob
from rloo_demo.task.data import load_embedded, split
from rloo_demo.task.rewards import build_reward, length_penalty, vader_compound

CONFIG = RunConfig(rewards=["vader_compound", "length_penalty"], reward_weights=[1.0, 0.5], prompt_words=6)
PER_PROMPT, SEED, NEW_TOKENS = 3, 5, 10


def perturbed_copy(model, scale=0.1, seed=0):
    """A copy of ``model`` with seeded Gaussian noise (``scale`` times each tensor's std) on every weight."""
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale * p.std())
    return other.eval()


# The models, the prompts and the expected numbers are cached in the module rather than built by fixtures, so that
# mutmut's forked runs (scripts/mutation.sh) inherit them from the first run instead of rebuilding them per mutant.
# Nothing here changes them: sample() puts a model back in the mode it found it in.
@functools.cache
def cached_models():
    base, tok = load_policy(EMBEDDED_POLICY)
    return base.eval(), perturbed_copy(base), tok


@functools.cache
def cached_prompts():
    return tuple(heldout_prompts(CONFIG, 4))


@functools.cache
def cached_expected():
    base, trained, tok = cached_models()
    return recompute(base, tok, cached_prompts()), recompute(trained, tok, cached_prompts())


@pytest.fixture(scope="module")
def models():
    return cached_models()


@pytest.fixture(scope="module")
def prompts():
    return list(cached_prompts())


@pytest.fixture(scope="module")
def expected():
    return cached_expected()


@pytest.fixture  # not module-scoped: mutmut links a mutant to the tests that ran its code, so each test evaluates
def result(models, prompts):
    base, trained, tok = models
    # temperature and top_p left at their defaults (1.0): the recomputation below uses 1.0
    return evaluate(
        base, trained, tok, CONFIG, prompts, samples_per_prompt=PER_PROMPT, seed=SEED, max_new_tokens=NEW_TOKENS
    )


def recompute(model, tok, prompts):
    """Samples with seed + i for prompt i, and each one's scores, computed without ``rloo_demo.eval.evaluation``."""
    rows = [
        (p, s) for i, p in enumerate(prompts) for s in sample(model, tok, p, PER_PROMPT, NEW_TOKENS, 1.0, 1.0, SEED + i)
    ]
    ps, texts = [p for p, _ in rows], [s["text"] for _, s in rows]
    scores = {
        "vader_compound": vader_compound(ps, texts),
        "length_penalty": length_penalty(ps, texts),
        "sentiment_classifier": build_reward("sentiment_classifier")(ps, texts),
    }
    reward = [v + 0.5 * ln for v, ln in zip(scores["vader_compound"], scores["length_penalty"], strict=True)]
    return {"prompts": ps, "texts": texts, "ids": [s["token_ids"] for _, s in rows], "scores": scores, "reward": reward}


def test_the_two_models_differ(expected):
    """A precondition of the tests below: a swap of base and trained, or a seed off by one, changes the numbers."""
    base, trained = expected
    assert base["texts"] != trained["texts"]
    assert statistics.fmean(base["reward"]) != pytest.approx(statistics.fmean(trained["reward"]), abs=1e-3)


def test_means_and_rewards_match_an_independent_recomputation(result, expected, prompts):
    base, trained = expected
    assert result["base_rewards"] == pytest.approx(base["reward"])
    assert result["trained_rewards"] == pytest.approx(trained["reward"])
    assert result["base_mean_reward"] == pytest.approx(statistics.fmean(base["reward"]))
    assert result["trained_mean_reward"] == pytest.approx(statistics.fmean(trained["reward"]))
    per_prompt = [
        statistics.fmean(trained["reward"][i * PER_PROMPT : (i + 1) * PER_PROMPT])
        - statistics.fmean(base["reward"][i * PER_PROMPT : (i + 1) * PER_PROMPT])
        for i in range(len(prompts))
    ]
    assert result["difference"] == pytest.approx(statistics.fmean(per_prompt))
    assert result["difference_ci95"] == pytest.approx(bootstrap_interval(per_prompt, seed=SEED))  # seeded, repeatable
    assert result["difference"] == pytest.approx(result["trained_mean_reward"] - result["base_mean_reward"])
    assert set(result["per_function"]) == {"vader_compound", "length_penalty", "sentiment_classifier"}
    for name, means in result["per_function"].items():
        assert means["base"] == pytest.approx(statistics.fmean(base["scores"][name])), name
        assert means["trained"] == pytest.approx(statistics.fmean(trained["scores"][name])), name
    assert result["trained_on"] == ["vader_compound", "length_penalty"]
    assert result["heldout_scorers"] == ["sentiment_classifier"]


def test_samples_pair_each_prompt_with_both_models_first_completion(result, expected, prompts):
    base, trained = expected
    assert len(result["samples"]) == len(prompts)
    for i, s in enumerate(result["samples"]):
        assert s == {
            "prompt": prompts[i],
            "base": base["texts"][i * PER_PROMPT],
            "trained": trained["texts"][i * PER_PROMPT],
        }


def test_interval_has_positive_width_around_the_difference(result):
    lo, hi = result["difference_ci95"]
    assert lo < result["difference"] < hi


def test_kl_is_the_mean_log_ratio_over_trained_samples(result, expected, models):
    base_model, trained_model, tok = models
    _, trained = expected

    def logprob(model, prompt, completion_ids):  # written out here, so the test does not trust sequence_logprob
        prompt_ids = tok(prompt).input_ids
        logits = model(input_ids=torch.tensor([prompt_ids + completion_ids])).logits[0].log_softmax(-1)
        return sum(float(logits[len(prompt_ids) - 1 + t, tok_id]) for t, tok_id in enumerate(completion_ids))

    with torch.no_grad():
        ratios = [
            logprob(trained_model, p, ids) - logprob(base_model, p, ids)
            for p, ids in zip(trained["prompts"], trained["ids"], strict=True)
        ]
    kl = statistics.fmean(ratios)
    assert kl > 0.05  # samples of the trained model are likelier under it than under the base: the sign matters
    assert result["kl_trained_vs_base"] == pytest.approx(kl, rel=1e-3)


def test_same_model_same_seed_gives_identical_samples(models):
    """Both columns use the same seed per prompt, so one model evaluated against itself differs nowhere."""
    base, _, tok = models
    twin = copy.deepcopy(base)
    calls = []
    prompts = list(heldout_prompts(CONFIG, 9))
    out = evaluate(base, twin, tok, CONFIG, prompts, max_new_tokens=4, progress=lambda i, n: calls.append((i, n)))
    assert out["seed"] == 0 and out["samples_per_prompt"] == 2  # the documented defaults
    assert len(out["base_rewards"]) == 9 * 2
    assert len(out["samples"]) == 8  # at most eight prompts' samples are kept
    assert out["trained_rewards"] == out["base_rewards"]
    assert [s["base"] for s in out["samples"]] == [s["trained"] for s in out["samples"]]
    assert out["difference"] == 0.0 and out["difference_ci95"] == [0.0, 0.0]
    assert out["kl_trained_vs_base"] == pytest.approx(0.0, abs=1e-9)
    assert calls == [(i, 18) for i in range(1, 19)]  # progress over both models' prompts, in order
    # the default seed is 0: the base column is what sampling with seed 0 + i gives
    assert out["samples"][1]["base"] == sample(base, tok, prompts[1], 2, 4, seed=1)[0]["text"]


# --- bootstrap ----------------------------------------------------------------------------------------------------


def test_bootstrap_interval_width_matches_the_standard_error():
    rng = random.Random(1)
    diffs = [rng.gauss(0.3, 1.0) for _ in range(400)]
    lo, hi = bootstrap_interval(diffs, seed=3)
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / len(diffs) ** 0.5
    assert lo < mean < hi
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)  # a 95% interval is about +-1.96 standard errors
    assert (mean - lo) == pytest.approx(hi - mean, rel=0.3)  # and about symmetric for a symmetric distribution


def test_bootstrap_interval_edges_and_seed():
    assert bootstrap_interval([0.25] * 7) == (0.25, 0.25)
    diffs = [0.0, 1.0, 0.5, -0.5, 2.0, 0.1]
    lo, hi = bootstrap_interval(diffs, n_resamples=500, seed=4)
    assert min(diffs) <= lo < statistics.fmean(diffs) < hi <= max(diffs)
    assert bootstrap_interval(diffs, n_resamples=500, seed=4) == (lo, hi)
    assert bootstrap_interval(diffs) == bootstrap_interval(diffs, n_resamples=2000, seed=0)  # the defaults
    assert bootstrap_interval(diffs, n_resamples=500, seed=5) != (lo, hi)
    # the interval holds the central 95% of the resampled means: with 40 resamples, all but the lowest and the highest
    rows = np.random.default_rng(4).integers(0, 6, size=(40, 6))  # the resamples, drawn as the function draws them
    means = sorted(sum(diffs[i] for i in row) / 6 for row in rows.tolist())
    lo40, hi40 = bootstrap_interval(diffs, n_resamples=40, seed=4)
    assert (lo40, hi40) == (pytest.approx(means[1]), pytest.approx(means[38]))


# --- scorers, prompts, report -------------------------------------------------------------------------------------


def test_heldout_scorers_are_the_ones_not_trained_on():
    assert heldout_scorers(["vader_compound"]) == ["sentiment_classifier"]
    assert heldout_scorers(["sentiment_classifier", "length_penalty"]) == ["vader_compound"]
    assert heldout_scorers(["length_penalty"]) == ["vader_compound", "sentiment_classifier"]
    assert heldout_scorers(["vader_compound", "sentiment_classifier"]) == []


def test_scorer_scores_every_function_and_weights_the_trained_ones():
    scorer = Scorer(CONFIG)
    texts = ["a wonderful, lovely film that I enjoyed", "awful", ""]
    scores, reward = scorer(["p"] * 3, texts)
    assert scorer.heldout_names == ["sentiment_classifier"]
    assert scores["vader_compound"] == vader_compound(None, texts)
    assert scores["length_penalty"] == length_penalty(None, texts)
    assert scores["sentiment_classifier"] == build_reward("sentiment_classifier")(None, texts)
    weighted = [v + 0.5 * ln for v, ln in zip(scores["vader_compound"], scores["length_penalty"], strict=True)]
    assert reward == pytest.approx(weighted)


def test_heldout_prompts_from_a_file_with_its_own_text_column(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text("id,body\n" + "\n".join(f"{i},review {i} of a film I saw last week" for i in range(300)))
    config = RunConfig(data_source=str(path), text_column="body", prompt_words=3)
    prompts = heldout_prompts(config, 3)
    assert len(prompts) == 3 and all(p.startswith("review ") and len(p.split()) == 3 for p in prompts)


def test_heldout_prompts_come_from_heldout_reviews():
    prompts = heldout_prompts(CONFIG, 5)
    assert len(prompts) == 5
    assert all(1 <= len(p.split()) <= CONFIG.prompt_words for p in prompts)
    held = split(load_embedded("imdb"), "heldout")["text"][:20]
    assert prompts == [" ".join(t.split()[: CONFIG.prompt_words]) for t in held][:5]  # the first held-out reviews


def test_report_prints_the_numbers_of_the_result(result):
    lines = format_report(result).splitlines()
    assert lines[0] == f"base_mean_reward={result['base_mean_reward']:.4f}"
    assert lines[1] == f"trained_mean_reward={result['trained_mean_reward']:.4f}"
    lo, hi = result["difference_ci95"]
    assert lines[2] == (
        f"difference={result['difference']:+.4f}  95% bootstrap CI [{lo:+.4f}, {hi:+.4f}]  "
        f"(4 held-out prompts x {PER_PROMPT} samples, seed {SEED})"
    )
    for name, tag in (("sentiment_classifier", "held-out scorer"), ("vader_compound", "trained on")):
        m = result["per_function"][name]
        assert f"  {name:<24} base {m['base']:+.4f}  trained {m['trained']:+.4f}  ({tag})" in lines
    assert f"kl_trained_vs_base={result['kl_trained_vs_base']:.3f} nats per completion" in lines
    start = lines.index("Sample completions (same prompt, same seed):")
    first = result["samples"][0]
    assert lines[start + 1 : start + 4] == [
        f"  prompt : {first['prompt']}",
        f"  base   : {first['base']}",
        f"  trained: {first['trained']}",
    ]
    assert lines[start - 1] == ""  # a blank line before the samples
    assert len(lines) == start + 1 + 3 * 4  # four prompts, four samples
    more = format_report(dict(result, samples=result["samples"] * 2)).splitlines()
    assert len(more) == len(lines)  # at most four samples, however many the result holds


def test_sequence_logprob_sums_the_completion_tokens(models):
    base, _, tok = models
    ids = tok(" a good film").input_ids
    with torch.no_grad():
        full = base(input_ids=torch.tensor([tok("It was").input_ids + ids])).logits[0].log_softmax(-1)
    n = len(tok("It was").input_ids)
    manual = sum(float(full[n - 1 + t, i]) for t, i in enumerate(ids))
    assert sequence_logprob(base, tok, "It was", ids) == pytest.approx(manual, abs=1e-4)
    assert sequence_logprob(base, tok, "It was", []) == 0.0


def _logprob_by_hand(model, tok, prompt, ids) -> float:
    """Σ log p(completion token) from one plain forward of prompt + completion and a log_softmax of its logits."""
    prompt_ids = tok(prompt).input_ids
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids + list(ids)])).logits[0].log_softmax(-1)
    return sum(float(logits[len(prompt_ids) - 1 + t, i]) for t, i in enumerate(ids))


def test_base_perplexity_is_exp_of_minus_the_mean_token_logprob(models):
    """Compare's judge: exp(-Σ log p / Σ tokens), pooled over the completions' tokens (an empty one counts none),
    under the base model's own logits; a perplexity is above 1, so a lost minus sign shows."""
    import math

    from rloo_demo.eval.judges import base_perplexity

    base, _, tok = models
    prompts = ["It was", "A film about", "The end"]
    completions = [tok(" a good film").input_ids, tok(" nothing at all, and then some").input_ids, []]
    total = sum(_logprob_by_hand(base, tok, p, ids) for p, ids in zip(prompts, completions, strict=True))
    tokens = sum(len(ids) for ids in completions)
    assert tokens == len(completions[0]) + len(completions[1]) > 5
    expected = math.exp(-total / tokens)
    assert expected > 1
    assert base_perplexity(base, tok, prompts, completions) == pytest.approx(expected, rel=1e-4)
    assert base_perplexity(base, tok, prompts[2:], completions[2:]) is None  # no token: no perplexity


def test_evaluation_judges_the_base_perplexity_of_each_models_samples(result, expected, models):
    import math

    base, _, tok = models
    for label, mine in zip(("base", "trained"), expected, strict=True):
        assert len(mine["ids"]) == 4 * PER_PROMPT
        total = sum(_logprob_by_hand(base, tok, p, ids) for p, ids in zip(mine["prompts"], mine["ids"], strict=True))
        tokens = sum(len(ids) for ids in mine["ids"])
        assert result["judges"][label]["base_perplexity"] == pytest.approx(math.exp(-total / tokens), rel=1e-4)


def test_top_p_keeps_the_smallest_most_likely_set_that_reaches_p_in_each_row():
    """``_filter_top_p`` against a hand count: per row, the tokens by falling probability are kept while the mass
    before them is at most p; the others get -inf, each logit stays at its own position. p >= 1 filters nothing."""
    import math

    from rloo_demo.models.sampling import _filter_top_p

    rows = [[2.0, 1.0, 0.0, -1.0, 0.5], [0.0, 3.0, 0.1, 1.0, -2.0], [1.0, 1.5, 4.0, 0.2, 0.3]]
    logits = torch.tensor(rows, dtype=torch.float64)
    several = False
    for p in (0.3, 0.7, 0.9):
        expected = []
        for row in rows:
            probs = [math.exp(x) / sum(math.exp(y) for y in row) for x in row]
            kept, before = set(), 0.0
            for i in sorted(range(len(row)), key=lambda i: -probs[i]):
                if before <= p:
                    kept.add(i)
                before += probs[i]
            expected.append([x if i in kept else -math.inf for i, x in enumerate(row)])
        assert any(math.isinf(x) for row in expected for x in row), "the test's p must cut some tokens"
        several = several or any(sum(not math.isinf(x) for x in row) > 1 for row in expected)
        assert _filter_top_p(logits.clone(), p).tolist() == expected, p
    assert several, "some p must keep several tokens of a row"
    for p in (1.0, 1.5):
        assert _filter_top_p(logits, p) is logits  # nothing filtered, nothing copied
    # two tokens of exactly 0.5 each: the second's mass before it is exactly p = 0.5, not over it, so it is kept
    tie = torch.tensor([[0.0, -60.0, 0.0]], dtype=torch.float64)
    assert _filter_top_p(tie.clone(), 0.5).tolist() == [[0.0, -math.inf, 0.0]]


def test_the_cli_report_word_for_word():
    """The report the CLI prints (``format_report``), on a result whose numbers tell the columns apart: base and
    trained differ in every measure, a judge is missing, and the collapse warning is set."""
    result = {
        "base_mean_reward": 0.12344,
        "trained_mean_reward": 0.56789,
        "difference": 0.44446,
        "difference_ci95": [0.3, -0.1],
        "num_prompts": 16,
        "samples_per_prompt": 2,
        "seed": 9,
        "per_function": {
            "vader_compound": {"base": 0.2, "trained": -0.7},
            "classifier": {"base": 0.45, "trained": 0.4},
        },
        "heldout_scorers": ["classifier"],
        "kl_trained_vs_base": 1.23456,
        "judges": {
            "base": {"distinct_2": 0.91, "repetition": 0.05, "base_perplexity": 41.25},
            "trained": {"distinct_2": 0.125, "base_perplexity": 912.75},
        },
        "collapse_warning": "Warning: collapsed.",
        "samples": [{"prompt": f"p{i}", "base": f"b{i}", "trained": f"t{i}"} for i in range(5)],
    }
    expected = [
        "base_mean_reward=0.1234",
        "trained_mean_reward=0.5679",
        "difference=+0.4445  95% bootstrap CI [+0.3000, -0.1000]  (16 held-out prompts x 2 samples, seed 9)",
        "  vader_compound           base +0.2000  trained -0.7000  (trained on)",
        "  classifier               base +0.4500  trained +0.4000  (held-out scorer)",
        "kl_trained_vs_base=1.235 nats per completion",
        "judges of the text (the reward models cannot be fooled here):",
        "  distinct-2       base 0.910  trained 0.125  (share of unique word bigrams)",
        "  repetition       base 0.050  trained –  (share of bigrams repeated within a sample)",
        "  base perplexity  base 41.2  trained 912.8  (per token, under the base model)",
        "Warning: collapsed.",
        "",
        "Sample completions (same prompt, same seed):",
        *[line for i in range(4) for line in (f"  prompt : p{i}", f"  base   : b{i}", f"  trained: t{i}")],
    ]
    assert format_report(result).split("\n") == expected
    assert judges_lines({**result, "judges": {"base": {}}}) == []
    assert judges_lines({**result, "judges": "x"}) == [] and judges_lines({}) == []
    assert judges_lines({**result, "collapse_warning": None})[-1].startswith("  base perplexity")


def test_the_interval_is_seeded_by_the_evaluation_and_the_warning_reads_trained_against_base(
    models, prompts, monkeypatch
):
    """With 4 prompts, the bootstrap's order statistics barely depend on its seed, so what ``evaluate`` passes on is
    checked at the call: the per-prompt differences with the evaluation's own seed, and the judges of the trained
    samples against the base's (the other way round would compare the base with itself)."""
    from rloo_demo.eval import evaluation

    calls = {}

    def interval(diffs, seed):
        calls["ci"] = (diffs, seed)
        return (-0.5, 0.75)

    def warning(judged, base):
        calls["warn"] = (judged, base)
        return "warned"

    monkeypatch.setattr(evaluation, "bootstrap_interval", interval)
    monkeypatch.setattr(evaluation, "collapse_warning", warning)
    base, trained, tok = models
    result = evaluate(
        base, trained, tok, CONFIG, prompts, samples_per_prompt=PER_PROMPT, seed=SEED + 2, max_new_tokens=NEW_TOKENS
    )
    diffs, seed = calls["ci"]
    per_prompt = [
        statistics.fmean(result["trained_rewards"][i * PER_PROMPT : (i + 1) * PER_PROMPT])
        - statistics.fmean(result["base_rewards"][i * PER_PROMPT : (i + 1) * PER_PROMPT])
        for i in range(len(prompts))
    ]
    assert seed == SEED + 2 and diffs == pytest.approx(per_prompt)
    assert list(result["difference_ci95"]) == [-0.5, 0.75]
    assert calls["warn"] == (result["judges"]["trained"], result["judges"]["base"])
    assert result["judges"]["trained"] != result["judges"]["base"]
    assert result["collapse_warning"] == "warned"


def test_the_collapse_warning_at_its_thresholds_word_for_word():
    from rloo_demo.eval.judges import collapse_warning

    assert (
        collapse_warning({"distinct_2": 0.25, "repetition": 0.5, "base_perplexity": 300.0}, {"base_perplexity": 100.0})
        is None
    )  # every threshold is strict
    assert collapse_warning({"distinct_2": float("nan"), "repetition": True}) is None  # not numbers: no verdict
    assert collapse_warning({"base_perplexity": 900.0}, {"base_perplexity": 0.0}) is None
    assert collapse_warning({"base_perplexity": 900.0}) is None  # no base to compare with
    unnoticed = "The reward and the classifier may not notice."
    assert collapse_warning({"distinct_2": 0.1, "repetition": 0.75}) == (
        "Warning: the completions have collapsed into repetition (distinct-2 0.10 < 0.25; repetition 0.75 > 0.5). "
        + unnoticed
    )
    assert collapse_warning({"repetition": 0.51}) == (
        "Warning: the completions have collapsed into repetition (repetition 0.51 > 0.5). " + unnoticed
    )
    assert collapse_warning({"base_perplexity": 301.0}, {"base_perplexity": 100.0}) == (
        "Warning: the base model finds the trained samples 3 times more perplexing than its own (perplexity 301 vs "
        "100 per token): they no longer read like its language. " + unnoticed
    )
    assert collapse_warning({"distinct_2": 0.2, "base_perplexity": 950.0}, {"base_perplexity": 100.0}) == (
        "Warning: the completions have collapsed into repetition (distinct-2 0.20 < 0.25). Also the base model finds "
        "the trained samples 10 times more perplexing than its own (perplexity 950 vs 100 per token): they no longer "
        "read like its language. " + unnoticed
    )
