"""The README matches the code: its API example runs verbatim against a live app, and its config reference lists
every RunConfig field. ``python -m pytest tests/test_readme.py``"""

import os
import re
import subprocess
import sys
from dataclasses import fields

from apputil import running_app
from conftest import ROOT

from rloo_demo.config import RunConfig

README = (ROOT / "README.md").read_text()


def code_block_after(heading: str, lang: str) -> str:
    section = README.split(heading, 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", section, re.S).group(1)


def test_api_example_runs_verbatim(tmp_path):
    code = code_block_after("## API (gradio_client)", "python")
    with running_app(tmp_path / "runs") as (url, _):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, RLOO_DEMO_URL=url),
        )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if not line.startswith("Loaded as API")]
    assert re.match(r".+: finished after 20 steps, reward [+-]\d\.\d{3} -> [+-]\d\.\d{3}$", lines[0])
    assert sum(line.startswith("reward ") for line in lines) == 4  # K completions of one group
    assert lines[-2].startswith("base:") and lines[-1].startswith("trained:")


def test_config_reference_lists_every_setting():
    table = README.split("### Config reference", 1)[1].split("###", 1)[0]
    for f in fields(RunConfig):
        assert f"`{f.name}`" in table, f"README's config reference lacks {f.name}"


def test_two_commands_exist():
    assert "bash scripts/serve.sh" in README and "bash scripts/test.sh" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci
