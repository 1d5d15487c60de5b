"""Settings that run but teach little: checks shown before Start (Train tab) and printed by ``train`` (CLI).

None of these is an error, so ``RunConfig.problems`` does not refuse them; each is a sentence that says what the
run will show and why.
"""

from __future__ import annotations

from rloo_demo.config import RunConfig

LOW_TEMPERATURE = 0.5  # below this, the K completions of a prompt are often identical
FEW_NEW_TOKENS = 8  # below this, completions are fragments of a few words


def prerun_warnings(config: RunConfig) -> list[str]:
    """Plain sentences about settings that weaken the learning signal (empty when there is nothing to say)."""
    out = []
    if config.num_generations == 2:
        out.append(
            "K = 2: each completion's baseline is the reward of its single sibling, so the advantages are as noisy "
            "as the rewards themselves (README: reward 0.33 instead of 0.45 after 150 steps); use K = 4 to 8"
        )
    if config.temperature < LOW_TEMPERATURE:
        out.append(
            f"temperature {config.temperature:g}: the K completions of a prompt are often identical, and a group "
            "whose rewards are all equal has zero advantages (watch 'groups with no signal'); use 0.7 to 1.0"
        )
    if config.max_new_tokens < FEW_NEW_TOKENS:
        out.append(
            f"max_new_tokens {config.max_new_tokens}: almost every completion is cut off after a few words, so the "
            "reward judges fragments; use 16 or more"
        )
    return out
