"""Settings that run but teach little: checks shown before Start (Train tab) and printed by ``train`` (CLI).

None of these is an error, so ``RunConfig.problems`` does not refuse them; each is a sentence that says what the
run will show and why.
"""

from __future__ import annotations

from rloo_demo.config import RunConfig
from rloo_demo.i18n import t

LOW_TEMPERATURE = 0.5  # below this, the K completions of a prompt are often identical
FEW_NEW_TOKENS = 8  # below this, completions are fragments of a few words


def prerun_warnings(config: RunConfig, locale: str = "en") -> list[str]:
    """Plain sentences about settings that weaken the learning signal (empty when there is nothing to say), in
    ``locale`` (the CLI prints them in English; the sentences are in rloo_demo/locales, keys 'precheck.*')."""
    out = []
    if config.num_generations == 2:
        out.append(t(locale, "precheck.k2"))
    if config.temperature < LOW_TEMPERATURE:
        out.append(t(locale, "precheck.temperature", temperature=f"{config.temperature:g}"))
    if config.max_new_tokens < FEW_NEW_TOKENS:
        out.append(t(locale, "precheck.tokens", max_new_tokens=config.max_new_tokens))
    return out
