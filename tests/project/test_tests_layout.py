"""The tests mirror the package: a module's tests sit in the folder of its layer, each file's name is unique (pytest
imports test files by their basename), no test module imports another (shared data lives in tests/factories.py,
the live page's helpers in tests/apputil.py), and a test says what it tests, not which issue asked for it."""

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "rloo_demo"
# folders that hold no module's tests: real browsers, the docs, and the project's own shape
OWN = {"browser", "docs", "project"}


def all_test_files():
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_folder_is_a_layer_of_the_package_or_one_of_its_own():
    layers = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    folders = {f.parent.relative_to(TESTS).parts[0] for f in all_test_files() if f.parent != TESTS}
    assert folders - layers - OWN == set()
    assert len(folders & layers) >= 8  # the layers have their folders, not one big tests/


def test_every_test_file_name_is_unique():
    names = [f.name for f in all_test_files()]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_no_test_module_imports_another():
    imports = []
    for f in all_test_files():
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            imports += [(f.name, n) for n in names if n.split(".")[-1].startswith("test_")]
    assert imports == []


def test_no_test_names_the_issue_that_asked_for_it():
    cited = [
        (f.relative_to(TESTS).as_posix(), m.group(0))
        for f in all_test_files()
        for m in re.finditer(r"\bissues? #?\d+", f.read_text())
    ]
    assert cited == []
