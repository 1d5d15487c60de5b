"""The lint, enforced: ``ruff check`` and ``ruff format --check`` pass on the whole tree (settings in pyproject.toml).

``python -m pytest tests/project/test_lint.py`` (a second). ``.venv/bin/ruff format .`` fixes what the second one finds.
"""

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

RUFF = Path(sys.executable).with_name("ruff")


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_ruff_check_passes():
    out = ruff("check", ".")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_the_tree_is_formatted():
    out = ruff("format", "--check", ".")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_both_checks_can_fail(tmp_path):
    """The two checks read this project's settings and fail on a file that breaks them: an unused import, and a
    line that ``ruff format`` would rewrite."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\nx = {  'a':1 }\n")
    checked = ruff("check", ".", cwd=tmp_path)
    assert checked.returncode == 1 and "F401" in checked.stdout, checked.stdout
    formatted = ruff("format", "--check", ".", cwd=tmp_path)
    assert formatted.returncode == 1 and "bad.py" in formatted.stdout + formatted.stderr, formatted.stdout
