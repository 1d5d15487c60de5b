"""What the run's config becomes in TRL's and PEFT's own objects, field by field, and the scoring call bound to a
trainer. ``python -m pytest tests/test_trl_args.py`` (a few seconds: imports TRL)."""

import functools

from trl import RLOOTrainer

from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import peft_config
from rloo_demo.trl_compat import trl_scoring


def test_lora_off_is_no_peft_config():
    assert peft_config(RunConfig(use_lora=False, lora_r=6)) is None


def test_lora_on_is_a_causal_lm_lora_config_with_the_runs_rank_and_alpha_and_no_dropout():
    lora = peft_config(RunConfig(use_lora=True, lora_r=6, lora_alpha=12))
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, lora.target_modules) == (6, 12, 0.0, "all-linear")
    assert lora.task_type == "CAUSAL_LM"
    named = peft_config(RunConfig(use_lora=True, lora_target_modules=["c_attn", "c_proj"]))
    assert set(named.target_modules) == {"c_attn", "c_proj"}


def test_trls_scoring_is_bound_to_the_trainer_without_its_profiling_wrapper():
    trainer = object()
    wrapped = RLOOTrainer._get_per_token_logps_and_entropies
    assert hasattr(wrapped, "__wrapped__")  # TRL's profiling decorator: what is to be skipped
    scoring = trl_scoring(trainer)
    assert isinstance(scoring, functools.partial) and scoring.args == (trainer,) and scoring.keywords == {}
    assert scoring.func is wrapped.__wrapped__ and not hasattr(scoring.func, "__wrapped__")
