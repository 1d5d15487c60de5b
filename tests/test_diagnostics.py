"""KL estimators, groups without signal, judges of the text and pre-run checks: pure functions, under a second.

``python -m pytest tests/test_diagnostics.py``
"""

import math

import pytest
import torch

from rloo_demo.config import RunConfig
from rloo_demo.engine.diagnostics import kl_estimates, kl_estimators, step_diagnostics, zero_signal_fraction
from rloo_demo.engine.prechecks import prerun_warnings
from rloo_demo.eval.judges import (
    COLLAPSE_WARNING,
    DISTINCT_2_MIN,
    REPETITION_MAX,
    collapse_warning,
    distinct_n,
    judge_texts,
    repetition_rate,
)
from rloo_demo.server.limits import LOCAL, PUBLIC

# --- KL estimators ---------------------------------------------------------------------------------------------


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
