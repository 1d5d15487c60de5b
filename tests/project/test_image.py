"""The Space image, without a container engine: no Docker engine runs here and podman cannot pull the python:3.11-slim
base image (no registry but PyPI, Debian and npm is reachable), so this test checks the Dockerfile's promises and
replays its install steps into a clean virtualenv, then starts the app from there as the image would.

``python -m pytest tests/project/test_image.py`` (a few minutes: it installs every requirement into a new venv).
"""

import os
import re
import shutil
import subprocess
import sys
import urllib.request

import pytest
from apputil import free_port, wait_until
from conftest import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_dockerfile_promises():
    assert re.search(r"^FROM python:3\.11-slim", DOCKERFILE, re.M)
    assert "useradd --create-home --uid 1000 user" in DOCKERFILE and re.search(r"^USER user$", DOCKERFILE, re.M)
    for var in ("HOME=/home/user", "HF_HOME=", "RLOO_RUNS_DIR=", "RLOO_PUBLIC=1", "GRADIO_SERVER_NAME=0.0.0.0"):
        assert var in DOCKERFILE
    assert re.search(r"^EXPOSE 7860$", DOCKERFILE, re.M)
    assert 'CMD ["python", "app.py"]' in DOCKERFILE
    assert "download.pytorch.org/whl/cpu torch==2.13.0" in DOCKERFILE  # CPU-only torch keeps the image small
    assert "COPY --chown=user . ." in DOCKERFILE  # embedded assets are baked in
    front = (ROOT / "README.md").read_text().split("---")[1]
    assert "sdk: docker" in front and "app_port: 7860" in front


@pytest.mark.slow
def test_image_install_steps_in_a_clean_venv(tmp_path):
    app = tmp_path / "app"  # COPY . . (tracked files only, as .dockerignore keeps out .venv, runs, caches)
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (app / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, app / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # The image takes torch from the CPU index; here pip takes the same CPU build from this machine's disk.
    subprocess.run([*pip, "torch==2.13.0"], check=True, cwd=app)
    subprocess.run([*pip, "-r", "requirements.txt"], check=True, cwd=app)
    subprocess.run([*pip, "--no-deps", "-e", "."], check=True, cwd=app)
    home = tmp_path / "home"
    port = free_port()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "HF_HOME": str(home / "hf"),
        "RLOO_RUNS_DIR": str(home / "runs"),
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    home.mkdir()
    proc = subprocess.Popen(
        [str(venv / "bin" / "python"), "app.py"], cwd=app, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:

        def answers():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status == 200
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
                return False

        wait_until(answers, timeout=120)
        out = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "rloo_demo",
                "train",
                "--max-steps",
                "2",
                "--prompts-per-step",
                "1",
                "--max-new-tokens",
                "4",
                "--output-dir",
                str(home / "runs"),
            ],
            cwd=app,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert "status: finished" in out.stdout
    finally:
        proc.terminate()
        proc.wait(30)
    assert os.listdir(home / "runs")
