"""What the run's config becomes in TRL's and PEFT's own objects, field by field, and the scoring call bound to a
trainer. ``python -m pytest tests/test_trl_args.py`` (a few seconds: imports TRL)."""

import functools

import pytest
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


def test_the_trainer_config_carries_every_setting_of_the_run(tmp_path):
    import torch

    from rloo_demo.engine.trl_args import rloo_config

    run = RunConfig(prompts_per_step=4, num_generations=4, max_new_tokens=11, temperature=0.7, top_p=0.9,
                    learning_rate=2e-5, beta=0.03, normalize_advantages=True, max_steps=17, seed=5, bf16=False,
                    report_to="tensorboard")
    args = rloo_config(run, tmp_path / "trainer", num_processes=2)
    got = {name: getattr(args, name) for name in (
        "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
        "max_completion_length", "temperature", "top_p", "learning_rate", "beta", "normalize_advantages", "max_steps",
        "seed", "logging_steps", "disable_dropout", "activation_checkpointing", "bf16", "fp16", "project", "use_cpu",
        "remove_unused_columns", "dataloader_num_workers", "disable_tqdm", "report_to", "use_vllm")}
    assert got == {
        "output_dir": str(tmp_path / "trainer"), "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
        "num_generations": 4, "max_completion_length": 11, "temperature": 0.7, "top_p": 0.9, "learning_rate": 2e-5,
        "beta": 0.03, "normalize_advantages": True, "max_steps": 17, "seed": 5, "logging_steps": 1,
        "disable_dropout": True, "activation_checkpointing": False, "bf16": False, "fp16": False,
        "project": "rloo-demo", "use_cpu": not torch.cuda.is_available(), "remove_unused_columns": False,
        "dataloader_num_workers": 0, "disable_tqdm": True, "report_to": ["tensorboard"], "use_vllm": False,
    }
    assert args.lr_scheduler_type == "constant" and args.save_strategy == "no"  # str enums
    assert rloo_config(run, tmp_path, max_steps=3).max_steps == 3  # an override wins


@pytest.mark.parametrize(("report_to", "expected"), [(" trackio , tensorboard ", ["trackio", "tensorboard"]),
                                                     ("", []), (" , ", []), ("none", [])])
def test_trackers_are_read_from_a_comma_separated_list(tmp_path, report_to, expected):
    from rloo_demo.engine.trl_args import rloo_config

    assert rloo_config(RunConfig(report_to=report_to), tmp_path).report_to == expected


def test_a_batch_that_does_not_split_over_the_processes_is_refused_naming_both():
    from rloo_demo.engine.trl_args import rloo_config
    from rloo_demo.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        rloo_config(RunConfig(prompts_per_step=3, num_generations=3), "x", num_processes=2)
    assert err.value.problems == {
        "prompts_per_step": "9 completions per step do not split over 2 processes; make prompts_per_step x K a "
        "multiple of 2"
    }


def test_vllm_generates_in_the_training_process_when_asked(tmp_path):
    from rloo_demo.engine.trl_args import rloo_config

    on = rloo_config(RunConfig(use_vllm=True), tmp_path)
    assert (on.use_vllm, on.vllm_mode) == (True, "colocate")
    assert rloo_config(RunConfig(use_vllm=False), tmp_path).use_vllm is False
