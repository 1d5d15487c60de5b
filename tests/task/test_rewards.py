"""Reward functions, the registry and weighted combination: ``python -m pytest tests/task/test_rewards.py``.

One definition of a completion's reward, and what an unscorable completion does to its group.

``python -m pytest tests/task/test_rewards.py`` (one short training run of two steps and one small
evaluation; the rest is arithmetic).

A reward function may answer ``None`` for a completion (a user's module is allowed to). TRL 1.16 turns ``None``
into NaN, leaves it out of the weighted sum (``nansum``), and marks a completion that *no* function scored as
unscorable: NaN reward, left out of its siblings' leave-one-out baseline (divided by the scorable count - 1), and
advantage 0. The first test checks that training's record, the variance meter, Compare/Evaluate's ``Scorer`` and
the combination function all score such completions alike, against numbers worked out here by hand; Evaluate's
means leave them out; the pure arithmetic and the REINFORCE trainer give them advantage 0; and the last test
checks, in a real training run, that the record of a group with an unscorable completion is TRL's arithmetic."""

import copy
import json
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from accelerate import PartialState
from transformers import pipeline

from rloo_demo.advantages import (
    combine_scores,
    final_advantages,
    leave_one_out_advantages,
    leave_one_out_baselines,
    normalize,
    rloo_advantages,
    weighted_reward,
    what_if,
)
from rloo_demo.config import RunConfig
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.meter import _trainer_reward
from rloo_demo.engine.trainers import ReinforceTrainer
from rloo_demo.engine.training import RunState, build_trainer
from rloo_demo.errors import InputError
from rloo_demo.eval.evaluation import Scorer, evaluate, heldout_prompts
from rloo_demo.models.hub import EMBEDDED_POLICY, resolve_model
from rloo_demo.models.policy import load_policy
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

# ----------------------------------------------------------------------------- rewards


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
    """A causal LM as ``classifier:`` would get a random head and train on noise."""
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
        (
            {"architectures": ["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b", "2": "c"}},
            r"has 3 labels; a reward needs a two-label",
        ),
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
    (tmp_path / "config.json").write_text(
        '{"architectures": ["XForSequenceClassification"], "id2label": {"0": "neg", "1": "pos"}, "num_labels": 7}',
        encoding="utf-8",
    )
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


# ----------------------------------------------------------------------------- reward combination


NAN = math.nan
WEIGHTS = [1.0, 0.5]

# Two reward functions that answer by the completion's text, so every caller gets the same scores. "bravo" is
# scored by the second only, "charlie" by the first only, "delta" by neither: it is unscorable.
SCORES_MODULE = """
FIRST = {"alpha": 0.8, "bravo": None, "charlie": -0.4, "delta": None}
SECOND = {"alpha": 0.5, "bravo": 0.6, "charlie": None, "delta": None}

def first(prompts, completions, **kwargs):
    return [FIRST[c] for c in completions]

def second(prompts, completions, **kwargs):
    return [SECOND[c] for c in completions]
"""
TEXTS = ["alpha", "bravo", "charlie", "delta"]
# By hand: 1.0 * 0.8 + 0.5 * 0.5, then 0.5 * 0.6 alone, -0.4 alone, and no score at all
BY_HAND = [1.05, 0.3, -0.4, NAN]
CLIP = (-0.3, 0.9)
BY_HAND_CLIPPED = [0.9, 0.3, -0.3, NAN]  # the clip range leaves an unscorable completion unscorable


def module_specs(tmp_path, body: str, functions: tuple[str, ...]) -> list[str]:
    path = tmp_path / "my_rewards.py"
    path.write_text(body)
    return [f"module:{path}:{f}" for f in functions]


class OneProcess:
    num_processes = 1
    process_index = 0
    is_main_process = True
    device = torch.device("cpu")

    @staticmethod
    def gather(tensor):
        return tensor


def stub_trainer(cls, reward_funcs, clip=None, beta=0.0, k=2):
    """A trainer of ``cls`` without a model: only what TRL's ``_calculate_rewards`` and the record read."""
    PartialState()  # TRL's warning about an all-None row logs through accelerate, which wants its state set up
    trainer = cls.__new__(cls)
    trainer.accelerator = OneProcess()
    trainer.args = SimpleNamespace(report_to=[])  # TRL's profiling decorator reads it
    trainer.state = SimpleNamespace(global_step=0)
    trainer.reward_funcs = list(reward_funcs)
    trainer.reward_processing_classes = [None] * len(reward_funcs)
    trainer.reward_func_names = [f.__name__ for f in reward_funcs]
    trainer.reward_weights = torch.tensor(WEIGHTS[: len(reward_funcs)])
    trainer.reward_clip_range = clip
    trainer.beta = beta
    trainer.normalize_advantages = False
    trainer.num_generations = k
    trainer.rollout_sink = None
    trainer.record_tokens = False
    trainer.last_rollouts, trainer.last_completion_ids = [], None
    trainer._capture = trainer._pending = None
    trainer.batch_observers = []
    trainer._metrics = {"train": defaultdict(list)}
    return trainer


def recorded(trainer, prompts, texts, logps=(), advantages=None):
    """Score ``texts`` through TRL's own ``_calculate_rewards`` (its None -> NaN) and record the batch."""
    n = len(texts)
    trainer._capture = {"logps": list(logps)}
    trainer._calculate_rewards([{"prompt": p} for p in prompts], prompts, texts, [[0]] * n)
    captured, trainer._capture = trainer._capture, None
    trainer._record(
        captured,
        {
            "completion_mask": torch.ones(n, 2),
            "advantages": torch.zeros(n) if advantages is None else torch.tensor(advantages),
            "completion_ids": torch.zeros(n, 2, dtype=torch.long),
            "prompt_ids": torch.zeros(n, 2, dtype=torch.long),
            "prompt_mask": torch.ones(n, 2, dtype=torch.long),
        },
    )
    return [c for g in trainer.last_rollouts for c in g["completions"]]


def test_a_missing_score_counts_the_same_in_training_the_meter_compare_and_the_function(tmp_path):
    specs = module_specs(tmp_path, SCORES_MODULE, ("first", "second"))
    functions = [build_reward(s) for s in specs]
    prompts = ["p"] * len(TEXTS)
    columns = [f(prompts=prompts, completions=TEXTS) for f in functions]
    assert columns == [[0.8, None, -0.4, None], [0.5, 0.6, None, None]]  # the module really answers None

    for clip, by_hand in ((None, BY_HAND), (CLIP, BY_HAND_CLIPPED)):
        expected = pytest.approx(by_hand, abs=1e-6, nan_ok=True)
        trainer = stub_trainer(CapturingRLOOTrainer, functions, clip=clip)
        rows = recorded(trainer, prompts, TEXTS)
        assert [r["weighted_reward"] for r in rows] == expected, f"training's record, clip {clip}"
        assert _trainer_reward(trainer)(prompts, TEXTS) == expected, f"the meter, clip {clip}"
        assert combine_scores(columns, WEIGHTS, clip) == expected, f"the combination, clip {clip}"
        assert weighted_reward(dict(zip("ab", columns, strict=True)), {"a": 1.0, "b": 0.5}, clip) == expected
        assert WeightedReward.from_names(specs, WEIGHTS, clip)(prompts, TEXTS) == expected

    # Compare and Evaluate score with the run's own config, which has no clip range (neither has its training)
    scorer = Scorer(RunConfig(rewards=specs, reward_weights=WEIGHTS))
    scores, reward = scorer(prompts, TEXTS)
    assert reward == pytest.approx(BY_HAND, abs=1e-6, nan_ok=True), "Compare/Evaluate's Scorer"
    assert scores["first"] == columns[0] and scores["second"] == columns[1]


@pytest.mark.parametrize(("offset", "clip"), [(0.5, (-0.3, 0.9)), (-0.7, (-0.5, 0.4)), (0.5, None)])
def test_the_offset_is_summed_before_the_clip_everywhere_as_trl_sums_its_column(tmp_path, offset, clip):
    """A reward offset C with a clip range (lo, hi): every completion's reward is clip(sum of weighted scores + C),
    not clip(sum) + C nor clip(sum + C) + C, in TRL's own arithmetic on the columns it was handed (the functions'
    and the offset's, weight 1; nansum, then clamp), in training's record, the meter and the one combination. The
    values are chosen where the orders differ (alpha's 1.05 + 0.5 passes hi, charlie's -0.4 is under lo)."""
    specs = module_specs(tmp_path, SCORES_MODULE, ("first", "second"))
    functions = [build_reward(s) for s in specs]
    prompts = ["p"] * len(TEXTS)
    columns = [f(prompts=prompts, completions=TEXTS) for f in functions]

    def clamp(x):
        return min(max(x, clip[0]), clip[1]) if clip else x

    by_hand = [clamp(x + offset) if not math.isnan(x) else NAN for x in BY_HAND]
    assert by_hand != [clamp(x) + offset if not math.isnan(x) else NAN for x in BY_HAND] or clip is None
    expected = pytest.approx(by_hand, abs=1e-6, nan_ok=True)
    trainer = stub_trainer(CapturingRLOOTrainer, functions, clip=clip)
    trainer.reward_offset = offset  # as __init__ sets it: the offset's column has weight 1
    trainer.reward_weights = torch.cat([trainer.reward_weights, torch.ones(1)])
    per_func = trainer._calculate_rewards([{"prompt": p} for p in prompts], prompts, TEXTS, [[0]] * len(TEXTS))
    trl = (per_func * trainer.reward_weights.to(per_func.dtype).unsqueeze(0)).nansum(dim=1)  # TRL's sum ...
    trl[torch.isnan(per_func).all(dim=1)] = NAN  # ... its unscorable rows ...
    if clip:
        trl = trl.clamp(min=clip[0], max=clip[1])  # ... and its clip
    assert trl.tolist() == expected, "TRL's arithmetic on the columns the trainer handed it"
    rows = recorded(trainer, prompts, TEXTS)
    assert [r["weighted_reward"] for r in rows] == expected, "training's record"
    assert _trainer_reward(trainer)(prompts, TEXTS) == expected, "the meter"
    assert combine_scores(columns, WEIGHTS, clip, offset) == expected, "the combination"


def test_evaluate_leaves_unscorable_completions_out_of_its_means(tmp_path):
    """Evaluate scores as training does: a completion its reward cannot score has no reward (NaN), not 0, and is
    left out of the means, as TRL leaves it out of its logged reward."""
    (spec,) = module_specs(
        tmp_path,
        "def odd_none(prompts, completions, **kwargs):\n"
        "    return [None if i % 2 else float(len(c)) for i, c in enumerate(completions)]\n",
        ("odd_none",),
    )
    config = RunConfig(rewards=[spec], prompt_words=6)
    base, tok = load_policy(EMBEDDED_POLICY)
    out = evaluate(base, copy.deepcopy(base), tok, config, heldout_prompts(config, 3), max_new_tokens=4)
    rewards = out["base_rewards"]
    assert [math.isnan(r) for r in rewards] == [False, True] * 3  # every second completion: no function scored it
    by_hand = sum(rewards[0::2]) / 3
    assert out["base_mean_reward"] == pytest.approx(by_hand)
    assert out["per_function"]["odd_none"]["base"] == pytest.approx(by_hand)  # the scored completions' mean
    assert out["difference"] == 0.0 and out["difference_ci95"] == [0.0, 0.0]  # the same model on both sides


# --- the leave-one-out arithmetic with unscorable completions ----------------------------------------------------


def test_baselines_leave_out_unscorable_siblings():
    # [1, NaN, 3, 5]: the scorable ones are 1, 3, 5, so each baseline is the mean of the other two
    baselines = leave_one_out_baselines([1.0, NAN, 3.0, 5.0])
    assert baselines == pytest.approx([4.0, NAN, 3.0, 2.0], nan_ok=True)
    assert leave_one_out_advantages([1.0, NAN, 3.0, 5.0]) == pytest.approx([-3.0, 0.0, 0.0, 3.0])
    # one scorable completion has no sibling to compare with (TRL divides 0 by 0): advantage 0 too
    assert leave_one_out_baselines([NAN, 2.0, NAN]) == pytest.approx([NAN] * 3, nan_ok=True)
    assert rloo_advantages([NAN, 2.0, NAN, NAN, NAN, NAN], 3) == [0.0] * 6
    # normalisation over the defined advantages only, the others 0 (TRL: nanmean, nanstd, then nan_to_num)
    assert normalize([NAN, 1.0, 3.0]) == pytest.approx([0.0, -1 / (2**0.5 + 1e-4), 1 / (2**0.5 + 1e-4)])
    assert final_advantages([NAN, 0.5]) == [0.0, 0.5]
    # every what-if estimator gives an unscorable completion advantage 0, and stays a number for the others
    table = what_if([0.2, NAN, 0.6, 0.1, 0.4, 0.3], 3)
    assert all(row[1] == 0.0 and all(math.isfinite(a) for a in row) for row in table.values())


def test_reinforce_gives_an_unscorable_completion_advantage_zero(tmp_path):
    specs = module_specs(tmp_path, SCORES_MODULE, ("first", "second"))
    trainer = stub_trainer(ReinforceTrainer, [build_reward(s) for s in specs], beta=0.5)
    policy = torch.tensor([[-1.0, -2.0]] * 4)
    ref = torch.tensor([[-1.5, -2.5]] * 4)  # KL of every completion: 0.5 + 0.5 = 1, a penalty of 0.5
    rows = recorded(trainer, ["p"] * 4, TEXTS, logps=(policy, ref))
    assert [r["kl"] for r in rows] == pytest.approx([1.0] * 4)
    assert rows[3]["advantage"] == 0.0  # not 0 - 0.5 * 1 = -0.5
    assert [r["advantage"] for r in rows[:3]] == pytest.approx([1.05 - 0.5, 0.3 - 0.5, -0.4 - 0.5], abs=1e-6)
    assert all(g["parity_error"] < 1e-6 for g in trainer.last_rollouts)


# --- a real run with unscorable completions ----------------------------------------------------------------------

# Every third completion of a batch (index 0, 3, 6, ...) gets None from both functions: it is unscorable. The second
# also skips every fifth from index 2, so some completions are scored by the first function alone.
NONE_MODULE = """
def every_third(prompts, completions, **kwargs):
    return [None if i % 3 == 0 else (len(c) % 7) / 7 - 0.4 for i, c in enumerate(completions)]

def also_there(prompts, completions, **kwargs):
    return [None if i % 3 == 0 or i % 5 == 2 else min(1.0, len(c.split()) / 6) for i, c in enumerate(completions)]
"""
BETA = 0.1


def trl_arithmetic(group: dict) -> list[dict]:
    """TRL 1.16's RLOO arithmetic for one recorded group, from its recorded scores and KL, written out here."""
    rows = []
    for c in group["completions"]:
        terms = [w * s for w, s in zip(WEIGHTS, c["scores"].values(), strict=True) if not math.isnan(s)]
        reward = sum(terms) if terms else NAN  # nansum, and NaN where every function returned None
        rows.append({"weighted": reward, "shaped": reward - BETA * c["kl"]})
    scorable = [r["shaped"] for r in rows if not math.isnan(r["shaped"])]
    for r in rows:
        if math.isnan(r["shaped"]) or len(scorable) < 2:
            r["baseline"] = NAN  # NaN in, or (sum - r) / 0
        else:
            r["baseline"] = (sum(scorable) - r["shaped"]) / (len(scorable) - 1)
        r["raw"] = r["shaped"] - r["baseline"]
        r["advantage"] = 0.0 if math.isnan(r["raw"]) else r["raw"]  # nan_to_num
    return rows


def test_a_real_run_records_unscorable_completions_as_trl_treats_them(tmp_path):
    specs = module_specs(tmp_path, NONE_MODULE, ("every_third", "also_there"))
    config = RunConfig(
        max_steps=2,
        prompts_per_step=3,
        num_generations=4,
        max_new_tokens=8,
        beta=BETA,
        learning_rate=5e-3,
        rewards=specs,
        reward_weights=WEIGHTS,
        output_dir=str(tmp_path / "runs"),
    )
    state = RunState(config)
    build_trainer(config, state).train()
    assert sorted(state.rollouts) == [1, 2]
    unscorable = partial = 0
    for step, groups in state.rollouts.items():
        assert len(groups) == 3
        for g in groups:
            assert g["parity_error"] <= 1e-5, f"step {step} group {g['group']}: {g['parity_error']}"
            for c, trl in zip(g["completions"], trl_arithmetic(g), strict=True):
                where = f"step {step} group {g['group']}: {c['text']!r}"
                assert c["weighted_reward"] == pytest.approx(trl["weighted"], abs=1e-6, nan_ok=True), where
                assert c["shaped_reward"] == pytest.approx(trl["shaped"], abs=1e-5, nan_ok=True), where
                assert c["baseline"] == pytest.approx(trl["baseline"], abs=1e-5, nan_ok=True), where
                assert c["raw_advantage"] == pytest.approx(trl["raw"], abs=1e-5, nan_ok=True), where
                assert c["advantage"] == pytest.approx(trl["advantage"], abs=1e-5), where  # TRL's own tensor
                if all(math.isnan(s) for s in c["scores"].values()):
                    unscorable += 1
                    assert c["advantage"] == 0.0, where
                elif any(math.isnan(s) for s in c["scores"].values()):
                    partial += 1
    # what the module's pattern promises, so the checks above saw every case: 4 unscorable of 12 in each step
    assert unscorable == 8 and partial > 0
    assert any(abs(c["kl"]) > 1e-3 for g in state.rollouts[2] for c in g["completions"])  # KL shapes the rewards
