"""The meter on a finished run (``engine.meter.measure_run``, what ``python -m rloo_demo meter`` prints) against
the same measurement put together here from its pieces: the run's own prompts, a seed per step, the run's rewards
with another offset, β and its reference, the prompts left-padded as TRL pads them. A tiny run, two steps: seconds."""

import pytest
import torch

from rloo_demo.advantages import combine_scores
from rloo_demo.config import RunConfig
from rloo_demo.engine import meter
from rloo_demo.errors import NotFound
from rloo_demo.models.policy import load_policy
from rloo_demo.store.folder import RunFolder
from rloo_demo.task.data import run_prompts
from rloo_demo.task.rewards import WeightedReward

CONFIG = dict(prompts_per_step=2, num_generations=3, max_new_tokens=4, beta=0.05, temperature=0.9, top_p=0.95,
              rewards=["vader_compound", "length_penalty"], reward_weights=[1.0, 0.5], reward_offset=0.25)


def _expected(run, policy, tokenizer, steps, seed, offset):
    config = run.config()
    reference = load_policy(config.policy)[0]
    prompts = run_prompts(config, "train", steps * config.prompts_per_step)["prompt"]
    reward = WeightedReward.from_names(config.rewards, config.weights)
    settings = meter.MeterSettings(
        reward=lambda p, t: combine_scores(list(reward.score_each(p, t).values()), reward.weights, None, offset),
        beta=config.beta, temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens,
    )

    def ref(ids, mask, batch):
        return meter.completion_logprobs(reference, ids, batch, config.temperature, mask)

    out = []
    for s in range(steps):
        batch = list(prompts[s * 2 : (s + 1) * 2])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        ids = [list(tokenizer(p).input_ids) for p in batch]
        width = max(map(len, ids))
        padded = [[pad] * (width - len(x)) + x for x in ids]
        masks = [[0] * (width - len(x)) + [1] * len(x) for x in ids]
        inputs = meter.MeterInputs(prompts=batch, prompt_ids=padded, prompt_masks=masks, k=config.num_generations)
        out.append(meter.measure(policy, tokenizer, inputs, settings, seed * 1_000_003 + s, ref)["stats"])
    return out


def test_measure_run_is_the_measurement_of_the_runs_own_steps(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="m", **CONFIG))
    with pytest.raises(NotFound, match=r"^run 'm' has no trained model yet; use --at base or train it first$"):
        meter.measure_run(run)
    policy, tokenizer = load_policy(run.config().policy)
    trained_weights, _ = load_policy(run.config().policy)
    with torch.no_grad():  # a trained model that differs from the base: measuring the wrong one changes the numbers
        for param in trained_weights.parameters():
            param.mul_(1.05)
    run.save_model(trained_weights, tokenizer)
    seen = []
    got = meter.measure_run(run, steps=2, at="trained", seed=3, progress=lambda i, n: seen.append((i, n)),
                            reward_offset=1.5)
    trained, _ = load_policy(str(run.model_dir))
    expected = _expected(run, trained, tokenizer, steps=2, seed=3, offset=1.5)
    assert got["per_step"] == expected
    assert got["rows"] == meter.summary_rows(expected)
    assert {k: got[k] for k in ("run", "at", "steps", "prompts_per_step", "k", "replicates", "reward_offset")} == {
        "run": "m", "at": "trained", "steps": 2, "prompts_per_step": 2, "k": 3, "replicates": meter.REPLICATES,
        "reward_offset": 1.5,
    }
    assert seen == [(1, 2), (2, 2)] and got["seconds"] > 0
    # the run's own offset when none is given; the base policy measured without a trained model's folder
    base = meter.measure_run(run, steps=1, at="base", seed=3)
    assert base["reward_offset"] == 0.25 and base["at"] == "base"
    assert base["per_step"] == _expected(run, policy, tokenizer, steps=1, seed=3, offset=0.25)


def test_prompts_are_left_padded_with_the_pad_token_or_else_the_end_of_text():
    class Tok:
        def __init__(self, pad):
            self.pad_token_id, self.eos_token_id = pad, 50

        def __call__(self, text):
            return type("Enc", (), {"input_ids": [len(w) for w in text.split()]})()

    ids, masks = meter.left_padded(Tok(pad=7), ["a bb ccc", "dddd"])
    assert ids == [[1, 2, 3], [7, 7, 4]] and masks == [[1, 1, 1], [0, 0, 1]]
    ids, _ = meter.left_padded(Tok(pad=None), ["a bb", "c"])
    assert ids == [[1, 2], [50, 1]]
