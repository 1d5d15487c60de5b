"""The GPU path, checked without a GPU: ``--use-vllm`` and ``--bf16`` reach TRL's config, and say clearly why they
cannot run here; scripts/gpu_check.sh and Dockerfile.gpu keep their promises. What needs a GPU (the runs themselves)
is scripts/gpu_check.sh's job on a machine that has one. ``python -m pytest tests/test_gpu_path.py``
"""

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import rloo_config
from rloo_demo.server.limits import PUBLIC

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
