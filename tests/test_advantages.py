"""Leave-one-out math: ``python -m pytest tests/test_advantages.py``."""

import math

import pytest

from rloo_demo.advantages import (
    batch_advantages,
    group,
    leave_one_out_advantages,
    leave_one_out_baselines,
    normalize,
    reinforce_pp_advantages,
    shaped_rewards,
    weighted_reward,
)


def test_worked_example_three_prompts_four_completions():
    # The classic example: 3 prompts x 4 completions; each baseline is the mean of the other three rewards.
    rewards = [
        [1.0, 0.0, 0.5, 0.5],
        [0.2, 0.4, 0.6, 0.8],
        [-1.0, 1.0, -1.0, 1.0],
    ]
    flat = [r for g in rewards for r in g]
    out = batch_advantages(flat, k=4)
    for gi, g in enumerate(rewards):
        for i, r in enumerate(g):
            others = [x for j, x in enumerate(g) if j != i]
            assert out["baselines"][gi * 4 + i] == pytest.approx(sum(others) / 3)
            assert out["advantages"][gi * 4 + i] == pytest.approx(r - sum(others) / 3)
    # first group by hand: baseline of completion 0 is (0 + 0.5 + 0.5) / 3
    assert out["baselines"][0] == pytest.approx(1 / 3)
    assert out["advantages"][0] == pytest.approx(2 / 3)


def test_group_advantages_sum_to_zero():
    adv = leave_one_out_advantages([0.3, -0.7, 0.1, 0.9, 0.0])
    assert math.fsum(adv) == pytest.approx(0.0, abs=1e-12)


def test_advantage_is_scaled_deviation_from_group_mean():
    # r_i - mean(others) = K/(K-1) * (r_i - mean(all))
    g = [0.1, 0.5, 0.9, 0.3]
    mean = sum(g) / 4
    for a, r in zip(leave_one_out_advantages(g), g, strict=True):
        assert a == pytest.approx(4 / 3 * (r - mean))


def test_equal_rewards_give_zero_advantage():
    assert leave_one_out_advantages([0.4, 0.4, 0.4]) == pytest.approx([0, 0, 0])


def test_single_completion_is_rejected():
    with pytest.raises(ValueError, match="^a leave-one-out baseline needs at least 2 completions per prompt$"):
        leave_one_out_baselines([1.0])


def test_group_split_must_be_exact():
    assert group([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]
    with pytest.raises(ValueError, match="does not split"):
        group([1, 2, 3], 2)


def test_kl_shaping_happens_before_the_baseline():
    rewards, kl, beta = [1.0, 1.0], [0.0, 10.0], 0.1
    shaped = shaped_rewards(rewards, kl, beta)
    assert shaped == pytest.approx([1.0, 0.0])
    # equal raw rewards, but the high-KL completion is pushed down
    assert leave_one_out_advantages(shaped) == pytest.approx([1.0, -1.0])
    assert shaped_rewards(rewards, kl, 0.0) == rewards


def test_normalize_uses_sample_std_and_eps():
    vals = [1.0, 2.0, 3.0]
    out = normalize(vals)
    assert out == pytest.approx([-1 / (1 + 1e-4), 0.0, 1 / (1 + 1e-4)])


def test_weighted_reward():
    out = weighted_reward({"a": [1.0, -1.0], "b": [0.5, 0.5]}, {"a": 2.0, "b": -1.0})
    assert out == pytest.approx([1.5, -2.5])


def test_shaping_needs_one_kl_per_reward_and_skips_a_missing_kl():
    with pytest.raises(ValueError):
        shaped_rewards([1.0, 2.0], [0.1], beta=0.1)  # a KL list that does not line up with the rewards
    assert shaped_rewards([1, 2], None, beta=0.1) == [1.0, 2.0]  # beta > 0 but no KL computed


def test_normalize_one_and_two_values():
    assert normalize([3.0]) == [0.0]  # no spread: nothing to divide by
    spread = math.sqrt(0.5)  # the sample std of [0, 1]
    assert normalize([0.0, 1.0]) == pytest.approx([-0.5 / (spread + 1e-4), 0.5 / (spread + 1e-4)])


def test_batch_advantages_raw_and_normalized():
    rewards = [1.0, 0.0, 0.5, 0.5, 0.2, 0.4, 0.6, 0.8]
    raw = [r - (sum(g) - r) / 3 for g in (rewards[:4], rewards[4:]) for r in g]
    out = batch_advantages(rewards, k=4, normalize_advantages=True)
    assert out["raw_advantages"] == pytest.approx(raw)
    mean = sum(raw) / 8
    std = math.sqrt(sum((a - mean) ** 2 for a in raw) / 7)
    assert out["advantages"] == pytest.approx([(a - mean) / (std + 1e-4) for a in raw])
    assert batch_advantages(rewards, k=4)["advantages"] == pytest.approx(raw)  # off by default


def test_unscored_values_stay_out_of_the_mean_and_std_and_come_out_as_zero():
    from rloo_demo.advantages import NORMALIZE_EPS, final_advantages, mean_and_std

    nan = math.nan
    mean, std = mean_and_std([])
    assert math.isnan(mean) and std == 0.0
    mean, std = mean_and_std([nan, None])
    assert math.isnan(mean) and std == 0.0
    assert mean_and_std([3.0, nan]) == (3.0, 0.0)  # one value: no spread
    assert mean_and_std([1.0, nan, 4.0]) == (2.5, math.sqrt(((1.0 - 2.5) ** 2 + (4.0 - 2.5) ** 2) / 1))
    scale = math.sqrt(2.0) + NORMALIZE_EPS  # the sample std of 1 and 3, plus TRL's eps
    assert normalize([1.0, nan, 3.0]) == [(1.0 - 2.0) / scale, 0.0, (3.0 - 2.0) / scale]
    assert final_advantages([1.5, nan, -0.5]) == [1.5, 0.0, -0.5]  # not normalised unless asked
    assert final_advantages([1.0, nan, 3.0], normalize_advantages=True) == normalize([1.0, nan, 3.0])


def test_weighted_reward_clips_where_asked():
    scores = {"a": [2.0, -3.0, 0.5], "b": [1.0, None, 0.1]}
    weights = {"a": 1.0, "b": 2.0}
    assert weighted_reward(scores, weights) == [4.0, -3.0, 0.5 + 0.2]
    assert weighted_reward(scores, weights, clip_range=(-1.0, 1.0)) == [1.0, -1.0, 0.5 + 0.2]


def test_combine_scores_says_what_does_not_line_up():
    from rloo_demo.advantages import combine_scores

    with pytest.raises(ValueError, match="^2 score lists but 1 weights; give one weight per function$"):
        combine_scores([[1.0], [2.0]], [1.0])
    with pytest.raises(ValueError, match=r"^every reward function must score every completion \(score lists of "):
        combine_scores([[1.0, 2.0], [2.0]], [1.0, 1.0])


def test_a_completion_no_function_scored_is_nan_and_the_offset_joins_only_the_scored():
    from rloo_demo.advantages import combine_scores

    out = combine_scores([[None, 2.0, math.nan], [math.nan, 1.0, None]], [1.0, 3.0], offset=0.5)
    assert math.isnan(out[0]) and math.isnan(out[2]) and out[1] == 2.0 + 3.0 + 0.5
    assert combine_scores([], []) == []


def test_the_only_scorable_reward_of_a_group_has_no_baseline_and_the_others_skip_the_unscorable():
    nan = math.nan
    assert all(math.isnan(b) for b in leave_one_out_baselines([0.5, nan]))  # one scorable: no sibling
    assert all(math.isnan(b) for b in leave_one_out_baselines([nan, 0.25, nan]))
    first, second, third = leave_one_out_baselines([nan, 0.3, 0.9])
    assert math.isnan(first) and (second, third) == (pytest.approx(0.9), pytest.approx(0.3))
    assert leave_one_out_advantages([0.5, nan]) == [0.0, 0.0]


def test_reinforce_pp_normalises_with_the_eps_it_is_given():
    rewards = [1.0, 0.0, 0.0, 1.0]  # mean 0.5, sample std 1/sqrt(3)
    std = (1 / 3) ** 0.5
    assert reinforce_pp_advantages(rewards, 2, eps=0.5) == pytest.approx([(r - 0.5) / (std + 0.5) for r in rewards])
    assert reinforce_pp_advantages(rewards, 2) == pytest.approx(normalize(rewards))
