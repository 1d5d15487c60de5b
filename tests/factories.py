"""Test data that several test modules build: finished runs on disk, prompt groups, metric records, a
completion's token pieces, a timed run, a prompt longer than the embedded policy's context. Plain functions and
constants; nothing here is a test, and no test module imports another."""

import json
import shutil

from rloo_demo.config import RunConfig
from rloo_demo.models.hub import ASSETS_DIR
from rloo_demo.models.sampling import _tokenizer
from rloo_demo.public.gates import owner_digest
from rloo_demo.public.retention import visitor_digest
from rloo_demo.store.folder import RunFolder

# ----------------------------------------------------------------------------- runs on disk


def finished_run(root, name="done"):
    """A finished run whose model is the embedded policy itself: Compare and the probe load it like a trained one."""
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, max_steps=2))
    shutil.copytree(ASSETS_DIR / "tiny-imdb-gpt2", run.path / "model", ignore=shutil.ignore_patterns("README.md"))
    run.append_metrics({"step": 1, "reward": 0.1})
    run.set_status("finished", step=2)
    return run


def written_run(root, metrics, status="finished") -> RunFolder:
    """A run named "ended" whose metrics.jsonl holds exactly these records, with this status."""
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name="ended"))
    with open(run.path / "metrics.jsonl", "w", encoding="utf-8") as f:  # the file, written by the test itself
        f.writelines(json.dumps(r) + "\n" for r in metrics)
    run.set_status(status, step=len(metrics))
    return run


def someones_finished_run(root, name, cid, address):
    """A finished run on disk that a visitor started (its starter recorded as ``Runner._start_locked`` does), whose
    last steps collapsed: its page would show a warning and a summary."""
    run = finished_run(root, name)
    for step in range(2, 8):
        run.append_metrics({"step": step, "reward": 0.1 * step, "judges/distinct_2": 0.1, "judges/repetition": 0.9})
    run.set_status("finished", step=7, owner=owner_digest(cid), visitor=visitor_digest(address))
    return run


# A run with these step times, logged from STARTED after LOAD seconds of loading (server.estimate reads them)
STARTED = 1_700_000_000.0


LOAD = 9.0  # seconds between status.json's "started" and the first step's train begin, in the fake run


TIMES = [4.0, 1.0, 1.2, 0.8, 1.1, 0.9, 1.0]  # the first step warms up: it is timed apart


def timed_run(root, name="timed", **config) -> RunFolder:
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, **config))
    clock = 0.0
    for step, seconds in enumerate(TIMES, start=1):
        clock += seconds
        # "time" counts from train begin; "logged_at" is the wall clock: train begin = started + LOAD
        run.append_metrics(
            {"step": step, "reward": 0.1, "step_time": seconds, "time": clock, "logged_at": STARTED + LOAD + clock}
        )
    run.set_status("finished", started=STARTED, step=len(TIMES))
    return run


# ----------------------------------------------------------------------------- metric records and prompt groups


def records(n=20, collapse_from=None):
    out = []
    for step in range(1, n + 1):
        collapsed = collapse_from is not None and step >= collapse_from
        out.append(
            {
                "step": step,
                "reward": 0.05 * step,
                "completions/mean_length": 30 - step,
                "kl": 0.01 * step,
                "judges/distinct_2": 0.1 if collapsed else 0.9,
                "judges/repetition": 0.8 if collapsed else 0.05,
                "frac_reward_zero_std": 0.0,
            }
        )
    return out


def collapsing_records():
    """Eight logged steps: the judges fall into collapse from step 4, and most groups have no signal from step 4."""
    out = []
    for s in range(1, 9):
        out.append(
            {
                "step": s,
                "time": 1.5 * s,
                "reward": -0.2 + 0.1 * s,
                "kl": 0.01 * s,
                "judges/distinct_2": 0.9 if s < 4 else 0.05,
                "judges/repetition": 0.1 if s < 4 else 0.8,
                "frac_reward_zero_std": 0.9 if s >= 4 else 0.1,
            }
        )
    return out


def group(step, index, advantages, run="r"):
    """A prompt group whose completions have these advantages (reward = advantage, baseline 0) and texts that say
    which run, step, group and completion they are."""
    completions = [
        {
            "text": f"{run} s{step} g{index} c{i}",
            "num_tokens": 3,
            "scores": {"vader_compound": a},
            "weighted_reward": a,
            "kl": 0.0,
            "kl_penalty": 0.0,
            "shaped_reward": a,
            "baseline": 0.0,
            "raw_advantage": a,
            "advantage": a,
        }
        for i, a in enumerate(advantages)
    ]
    return {
        "step": step,
        "group": index,
        "prompt": f"prompt {index} of step {step}",
        "k": len(advantages),
        "beta": 0.05,
        "normalize_advantages": False,
        "weights": {"vader_compound": 1.0},
        "completions": completions,
    }


# ------------------------------------------------------------------ a completion's tokens, one of them hostile


EVIL = "<img src=x onerror=alert(1)>"


def completion(pieces, before, after, ref=None, entropy=None, advantage=0.5):
    c = {
        "text": "".join(pieces),
        "num_tokens": len(pieces),
        "advantage": advantage,
        "kl": sum(b - r for b, r in zip(before, ref, strict=True)) if ref else 0.0,
        "kl_penalty": 0.0,
        "token_texts": list(pieces),
        "token_logp": list(before),
        "token_logp_after": list(after),
        "token_entropy": list(entropy or [1.0] * len(pieces)),
    }
    if ref is not None:
        c["token_ref_logp"] = list(ref)
        c["kl_penalty"] = -0.1 * c["kl"]
    return c


PIECES = [" great", EVIL, " and", " {{value}} ${x}", "<|endoftext|>"]


BEFORE = [-2.0, -5.0, -1.0, -3.0, -0.5]


AFTER = [-1.5, -5.2, -0.9, -2.0, -0.5]


REF = [-2.5, -4.0, -1.0, -3.5, -0.7]


# ----------------------------------------------------------------------------- a prompt past the policy's context


LONG = ("This movie was a slow, thoughtful and in the end rather wonderful film about two brothers. " * 60)[:4000]


def expected_cut(prompt: str, new_tokens: int) -> int:
    tokens = len(_tokenizer(str(ASSETS_DIR / "tiny-imdb-gpt2"))(prompt).input_ids)
    assert tokens > 256 - new_tokens, "the test's prompt must overflow the embedded policy's 256 positions"
    return tokens - (256 - new_tokens)


# A run's settings away from every default, each value different from the others, for the TRL export and import
# tests: a setting dropped or swapped on the way shows as TRL's default or as its neighbour's value.
NON_DEFAULT_RUN = dict(
    learning_rate=3e-4,
    num_generations=3,
    prompts_per_step=2,
    max_steps=7,
    beta=0.2,
    temperature=0.7,
    top_p=0.9,
    max_new_tokens=11,
    seed=1234,
    normalize_advantages=True,
    reward_offset=0.5,
    snapshot_every=0,
    use_lora=True,
    lora_r=4,
    lora_alpha=12,
    lora_target_modules=["c_attn"],
)
