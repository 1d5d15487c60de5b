"""The package's shape: layers whose imports run one way, held by import-linter, and rooms of a readable size.

``python -m pytest tests/project/test_layers.py`` (a few seconds). The contracts are in pyproject.toml
(``[tool.importlinter]``); a failure prints the chain of imports that breaks one.
"""

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "rloo_demo"
LAYERS = ("task", "models", "engine", "fast", "eval", "store", "public", "server", "ui")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120)


def test_import_contracts_are_kept():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "2 kept, 0 broken" in out.stdout, out.stdout[-2000:]


def test_an_import_back_up_a_layer_breaks_the_contract(tmp_path):
    """The contract can fail: a copy of the package where a leaf imports the UI is refused, with the chain."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(PACKAGE, copy / "rloo_demo", ignore=shutil.ignore_patterns("__pycache__", "locales"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    chat = copy / "rloo_demo" / "chat.py"
    chat.write_text(chat.read_text() + "\nfrom rloo_demo.ui import controller  # noqa\n")
    env_path = str(copy)
    out = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode != 0
    assert "rloo_demo.chat -> rloo_demo.ui.controller" in out.stdout, out.stdout[-3000:]


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_package_is_rooms_of_a_readable_size():
    top = [p.name for p in PACKAGE.glob("*.py")]
    # the leaves, the CLI and the settings' three (config, settings: how a setting is declared, prechecks: what a
    # setting teaches) stand at the root; anything more belongs in a layer's folder
    assert len(top) <= 13, top
    subpackages = [d.name for d in PACKAGE.iterdir() if (d / "__init__.py").is_file()]
    assert set(LAYERS) <= set(subpackages), subpackages
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _modules()}
    assert len(sizes) > 40
    assert {m: n for m, n in sizes.items() if n > 450} == {}
    assert sizes["rloo_demo/ui/controller.py"] < 350


def test_every_subpackage_and_module_says_what_it_is_for():
    missing = [str(p.relative_to(ROOT)) for p in _modules() if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert missing == [], missing


def test_function_local_imports_of_the_package_say_why():
    """A function-local import of the package's own modules hides a circle unless it keeps torch, gradio or
    another heavy dependency out of start-up; such an import carries a comment that says so."""
    unexplained = []
    for path in _modules():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("rloo_demo"):
                    line = lines[inner.lineno - 1]
                    above = lines[inner.lineno - 2] if inner.lineno > 1 else ""
                    if "#" not in line and not above.strip().startswith("#"):
                        unexplained.append(f"{path.relative_to(ROOT)}:{inner.lineno}: {line.strip()}")
    assert unexplained == [], "\n".join(unexplained)
