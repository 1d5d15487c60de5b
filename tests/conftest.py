"""Shared test setup: offline, no tokenizer threads, and small fixtures built in tmp_path.

Run everything with ``python -m pytest`` from the repository root; ``-m "not slow"`` skips the long tests.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # every test runs as on a machine without the hub
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"  # screenshots and other outputs a person may want to look at after a run


@pytest.fixture(autouse=True)
def _fresh_caches_under_mutation():
    """mutmut forks every mutant from a process that ran the tests once already: a function cache of the package
    (``functools.cache``/``lru_cache``: the toy's exact moments, the prompt lists, ...) filled there holds the
    unmutated code's answers, and a mutant in the cached function or anything it calls would never run. Under
    mutmut (``MUTANT_UNDER_TEST`` set) every such cache starts empty; in a plain run nothing is cleared."""
    import sys

    if os.environ.get("MUTANT_UNDER_TEST"):
        for name, module in list(sys.modules.items()):
            if name == "rloo_demo" or name.startswith("rloo_demo."):
                for value in list(vars(module).values()):
                    clear = getattr(value, "cache_clear", None)
                    if callable(clear):
                        clear()
        for name, attr in _MODULE_CACHES:  # the package's own cache tables, filled the same way
            module = sys.modules.get(name)
            if module is not None:
                getattr(module, attr).clear()
    yield


_MODULE_CACHES = (  # module-level dicts that remember a result: the embedded data, pipelines, loaded reward files, ...
    ("rloo_demo.task.data", "_CACHE"),
    ("rloo_demo.task.rewards", "_PIPELINES"),
    ("rloo_demo.task.user_rewards", "_MODULES"),
    ("rloo_demo.store.listing", "_CREATED"),
    ("rloo_demo.store.folder", "_SUMMARIES"),
)


@pytest.fixture
def tiny_config(tmp_path):
    """A RunConfig for a few fast steps of the embedded policy, writing into tmp_path."""
    from rloo_demo.config import RunConfig

    return RunConfig(max_steps=3, prompts_per_step=2, num_generations=4, max_new_tokens=8, output_dir=str(tmp_path))


def _outside_work_and_tmp() -> Path:
    """A folder like the Space's /home/user/runs: outside the working folder and outside the temp folder, the two
    places gradio serves files from by default (the layout that broke the Runs tab's downloads)."""
    import tempfile
    import uuid

    cwd, tmp = Path.cwd().resolve(), Path(tempfile.gettempdir()).resolve()
    for base in (Path.home() / ".rloo-demo-test-runs", Path("/var/tmp/rloo-demo-test-runs")):
        base = base.resolve()
        if not base.is_relative_to(cwd) and not base.is_relative_to(tmp) and not base.is_relative_to(ROOT):
            folder = base / uuid.uuid4().hex[:12]
            folder.mkdir(parents=True)
            return folder
    raise RuntimeError("no folder outside the working folder and the temp folder for the Space layout")


@pytest.fixture(scope="module")
def space_runs_dir():
    """A runs folder in the Space layout (module-scoped); removed afterwards."""
    import shutil

    folder = _outside_work_and_tmp()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
