"""The mutation chunks (scripts/mutation_chunks.toml) cover the whole package: every module with code is in exactly
one chunk, and every test a chunk names exists, so that `bash scripts/mutation.sh all` measures every module."""

import ast
import fnmatch
import subprocess
import sys
import tomllib

from conftest import ROOT

CHUNKS = tomllib.loads((ROOT / "scripts" / "mutation_chunks.toml").read_text())["chunks"]
PACKAGE = ROOT / "rloo_demo"


def _has_code(path):
    """A module with more than a docstring (an empty __init__ gives mutmut nothing to mutate)."""
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body)


def _chunks_of(module):
    return [
        name for name, chunk in CHUNKS.items() if any(fnmatch.fnmatch(module, pattern) for pattern in chunk["modules"])
    ]


def test_every_module_with_code_is_in_exactly_one_chunk():
    modules = sorted(str(p.relative_to(PACKAGE))[: -len(".py")] for p in PACKAGE.rglob("*.py") if _has_code(p))
    assert len(modules) > 80  # the package's modules were found, not an empty list
    placed = {module: _chunks_of(module) for module in modules}
    assert {m: c for m, c in placed.items() if len(c) != 1} == {}
    # a pattern that matches nothing is a typo (a module renamed, the chunk still naming the old one)
    for name, chunk in CHUNKS.items():
        for pattern in chunk["modules"]:
            assert any(fnmatch.fnmatch(m, pattern) for m in modules), (name, pattern)


def test_every_selected_test_exists():
    selected = [test for chunk in CHUNKS.values() for test in chunk["tests"]]
    assert len(selected) > 40
    for test in selected:
        path, _, name = test.partition("::")
        source = (ROOT / path).read_text()
        assert not name or f"def {name}(" in source, test


def _chunk_pyproject(chunk: str) -> dict:
    """The pyproject tables the script writes into ``chunk``'s copy of the tree."""
    script = (ROOT / "scripts" / "mutation.sh").read_text()
    program = script.split('pyproject.toml "${extra[@]}" >"$work/pyproject.toml" <<\'EOF\'\n', 1)[1].split("\nEOF\n")[0]
    out = subprocess.run(
        [sys.executable, "-", "scripts/mutation_chunks.toml", chunk, "pyproject.toml", "assets", "docs"],
        input=program,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    return tomllib.loads(out)["tool"]


def test_a_chunks_pyproject_has_its_modules_and_tests_and_keeps_the_rest(tmp_path):
    """The table the script writes into the chunk's copy of the tree: what mutmut will read there."""
    written = _chunk_pyproject("store")
    settings = written["mutmut"]
    assert settings["only_mutate"][:2] == [
        "rloo_demo/store/export.py",
        "rloo_demo/store/folder.py",
    ]  # a module: its file
    assert len(settings["only_mutate"]) == len(CHUNKS["store"]["modules"]) == 9
    assert settings["pytest_add_cli_args_test_selection"] == CHUNKS["store"]["tests"]
    assert settings["pytest_add_cli_args"][-2:] == ["-m", "not slow"]  # the chunk's own selection after the rest
    assert settings["also_copy"] == ["assets", "docs"]
    assert settings["timeout_multiplier"] == 3.0  # the shared settings kept
    assert "importlinter" in written and "pytest" in written  # the other tables kept whole
    # a subpackage's "dir/*" stays a pattern; a module of the package's top is its file
    task = _chunk_pyproject("task")["mutmut"]["only_mutate"]
    assert task == ["rloo_demo/task/*", "rloo_demo/eval/*", "rloo_demo/engine/diagnostics.py", "rloo_demo/prechecks.py"]


def test_the_caches_emptied_under_mutmut_exist():
    """conftest empties these tables for every test under mutmut; a table renamed would fail only there."""
    import importlib

    from conftest import _MODULE_CACHES

    assert len(_MODULE_CACHES) >= 5
    for name, attr in _MODULE_CACHES:
        assert isinstance(getattr(importlib.import_module(name), attr), dict), (name, attr)
