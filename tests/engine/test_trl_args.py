"""What the run's config becomes in TRL's and PEFT's own objects, field by field, and the scoring call bound to a
trainer. ``python -m pytest tests/engine/test_trl_args.py`` (a few seconds: imports TRL).

The GPU path, checked without a GPU: ``--use-vllm`` and ``--bf16`` reach TRL's config, and say clearly why they
cannot run here; scripts/gpu_check.sh and Dockerfile.gpu keep their promises. What needs a GPU (the runs themselves)
is scripts/gpu_check.sh's job on a machine that has one. ``python -m pytest tests/engine/test_trl_args.py``"""

import functools
import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from trl import RLOOTrainer

from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import peft_config, rloo_config
from rloo_demo.public.limits import PUBLIC
from rloo_demo.trl_compat import trl_scoring

# ----------------------------------------------------------------------------- trl args


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

    run = RunConfig(
        prompts_per_step=4,
        num_generations=4,
        max_new_tokens=11,
        temperature=0.7,
        top_p=0.9,
        learning_rate=2e-5,
        beta=0.03,
        normalize_advantages=True,
        max_steps=17,
        seed=5,
        bf16=False,
        report_to="tensorboard",
    )
    args = rloo_config(run, tmp_path / "trainer", num_processes=2)
    got = {
        name: getattr(args, name)
        for name in (
            "output_dir",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "num_generations",
            "max_completion_length",
            "temperature",
            "top_p",
            "learning_rate",
            "beta",
            "normalize_advantages",
            "max_steps",
            "seed",
            "logging_steps",
            "disable_dropout",
            "activation_checkpointing",
            "bf16",
            "fp16",
            "project",
            "use_cpu",
            "remove_unused_columns",
            "dataloader_num_workers",
            "disable_tqdm",
            "report_to",
            "use_vllm",
        )
    }
    assert got == {
        "output_dir": str(tmp_path / "trainer"),
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "num_generations": 4,
        "max_completion_length": 11,
        "temperature": 0.7,
        "top_p": 0.9,
        "learning_rate": 2e-5,
        "beta": 0.03,
        "normalize_advantages": True,
        "max_steps": 17,
        "seed": 5,
        "logging_steps": 1,
        "disable_dropout": True,
        "activation_checkpointing": False,
        "bf16": False,
        "fp16": False,
        "project": "rloo-demo",
        "use_cpu": not torch.cuda.is_available(),
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "report_to": ["tensorboard"],
        "use_vllm": False,
    }
    assert args.lr_scheduler_type == "constant" and args.save_strategy == "no"  # str enums
    assert rloo_config(run, tmp_path, max_steps=3).max_steps == 3  # an override wins


@pytest.mark.parametrize(
    ("report_to", "expected"),
    [(" trackio , tensorboard ", ["trackio", "tensorboard"]), ("", []), (" , ", []), ("none", [])],
)
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


# ----------------------------------------------------------------------------- gpu path


SCRIPT = ROOT / "scripts" / "gpu_check.sh"
DOCKERFILE = (ROOT / "Dockerfile.gpu").read_text()
OPERATING = (ROOT / "docs" / "operating.md").read_text()  # the "On a GPU" section, moved there from README.md


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


# These check what a machine WITHOUT a GPU or vLLM says; on one that has them, scripts/gpu_check.sh is the check.
no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
no_gpu = pytest.mark.skipif(_has_gpu(), reason="this machine has a CUDA GPU: run scripts/gpu_check.sh instead")


def test_use_vllm_and_bf16_pass_through_to_trl(tmp_path):
    args = rloo_config(RunConfig(use_vllm=True, bf16=True), tmp_path)
    assert args.use_vllm is True and args.vllm_mode == "colocate" and args.bf16 is True
    plain = rloo_config(RunConfig(), tmp_path)
    assert plain.use_vllm is False and plain.bf16 is False


@no_vllm
@no_gpu
def test_use_vllm_says_what_is_missing(monkeypatch):
    problem = RunConfig(use_vllm=True).problems()["use_vllm"]
    assert problem.startswith("vllm is not installed here") and "pip install vllm" in problem
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    assert "this machine has none" in RunConfig(use_vllm=True).problems()["use_vllm"]
    assert "needs a GPU" in RunConfig(bf16=True).problems()["bf16"]
    assert "use_vllm" in PUBLIC.config_problems(RunConfig(use_vllm=True))


@no_vllm
def test_the_cli_refuses_use_vllm_in_one_line(capsys):
    assert cli_main(["train", "--use-vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: use_vllm: vllm is not installed here")


@no_gpu
def test_gpu_check_script_says_plainly_there_is_no_gpu(tmp_path):
    text = SCRIPT.read_text()
    assert os.access(SCRIPT, os.X_OK) and "set -euo pipefail" in text
    for needle in ("--bf16", "--use-vllm", "import vllm", "HF_HUB_OFFLINE", "SmolLM2-135M-Instruct", "step_time"):
        assert needle in text
    env = dict(os.environ, PYTHON=sys.executable, GPU_CHECK_OUT=str(tmp_path / "runs"))
    out = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "gpu_check: no CUDA GPU is visible to torch here" in out.stdout
    assert "nothing to check" in out.stdout
    assert not (tmp_path / "runs").exists()


def test_dockerfile_gpu_installs_cuda_torch_and_the_same_app():
    assert "FROM python:3.11-slim" in DOCKERFILE
    assert "download.pytorch.org/whl/cu" in DOCKERFILE and "torch==2.13.0" in DOCKERFILE
    assert "pip install -r requirements.txt" in DOCKERFILE and 'CMD ["python", "app.py"]' in DOCKERFILE
    assert "WITH_VLLM" in DOCKERFILE and "pip install vllm" in DOCKERFILE
    assert "--uid 1000" in DOCKERFILE and "EXPOSE 7860" in DOCKERFILE


def test_readme_has_an_on_a_gpu_section_that_says_what_was_measured():
    section = OPERATING.split("## On a GPU", 1)[1].split("\n## ", 1)[0]
    for model in ("SmolLM2-135M-Instruct", "Qwen2.5-0.5B-Instruct", "Llama-3.2-1B-Instruct"):
        assert model in section
    assert "Dockerfile.gpu" in section and "scripts/gpu_check.sh" in section
    assert "not measured yet" in section  # until a GPU run fills the step times in


@pytest.mark.parametrize("flag", ["--use-vllm", "--bf16"])
def test_gpu_flags_exist(flag, capsys):
    assert cli_main(["train", "--help"]) == 0
    assert flag in capsys.readouterr().out
