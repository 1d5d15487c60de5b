"""What TRL's trackers receive (``RunConfig.report_to``, passed to the RLOOConfig by ``engine.trl_args``).

``PYTHONPATH=$PWD python -m pytest tests/engine/test_trackers.py`` (under a minute: one 5-step run).

One 5-step CLI run (the tiny settings of the other engine tests: 2 prompts a step, K=2, 8 new tokens) reports to
tensorboard and trackio at once, with the gradient-variance meter on at step 5. Then, step by step:

- tensorboard's event files, read with tensorboard's own ``EventAccumulator``, hold every metric the run's
  ``metrics.jsonl`` holds, at the same steps, equal as float32 (a tensorboard scalar is a float32);
- trackio's local store (its sqlite database ``<TRACKIO_DIR>/rloo-demo.db``, one per project) holds the run under
  its name with the same numbers, exactly (trackio keeps the Python float).

Names: TRL's tracker callbacks (transformers' ``rewrite_logs``) log a training metric ``m`` as ``train/m``;
``TRACKER_TAGS`` writes that mapping out for every metric the Train tab plots, and a test checks it covers every key
``TRAIN_PLOTS``' figures read, so a plot added later must reach the trackers too. TRL logs every step here
(``logging_steps=1``), so every step is compared.

Not compared, and why: the run's own bookkeeping (``step``, ``max_steps``, ``time``, ``logged_at``: written by our
callback, no TRL metric, so no tracker gets it); tags only a tracker has (the end-of-training summary,
``train/train_runtime`` and the like, which ``metrics.jsonl`` leaves out on purpose; trackio's system columns); wandb
(not installed here, and it needs an account even to log offline in a way a test could read back).

Offline: the run has ``HF_HUB_OFFLINE=1``, no ``TRACKIO_SPACE_ID``/``TRACKIO_SERVER_URL`` (the only ways trackio
leaves the machine: a Space or a server) and a ``sitecustomize`` that refuses, and writes down, every internet
socket the run opens; the test expects that list empty. trackio starts no dashboard outside a notebook.

The Train form: a local server offers "none" and the installed trackers (those ``config.tracker_problem`` accepts,
and no other); a public one hides the box and refuses any tracker sent past it.
"""

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import tomllib
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import ROOT

from rloo_demo.config import RunConfig

# ----------------------------------------------------------------------------- the run

# the run's own bookkeeping in metrics.jsonl: written by our callback, no TRL metric, so it reaches no tracker
BOOKKEEPING = {"step", "max_steps", "time", "logged_at"}
METER = ("rloo", "reinforce", "reinforce_pp", "grpo", "dr_grpo", "batch_mean")  # the meter's plotted estimators
# What each tracker calls each metric the Train tab plots (metrics.jsonl key -> tracker tag), written out.
TRACKER_TAGS = {
    "reward": "train/reward",
    "reward_std": "train/reward_std",
    "kl": "train/kl",
    "grad_norm": "train/grad_norm",
    "entropy": "train/entropy",
    "completions/mean_length": "train/completions/mean_length",
    "frac_reward_zero_std": "train/frac_reward_zero_std",
    "frac_raw_score_zero_std": "train/frac_raw_score_zero_std",
    "kl_k1": "train/kl_k1",
    "kl_k2": "train/kl_k2",
    "kl_k3": "train/kl_k3",
    "judges/distinct_2": "train/judges/distinct_2",
    "judges/repetition": "train/judges/repetition",
    **{f"{kind}/{name}": f"train/{kind}/{name}" for kind in ("variance", "cosine") for name in METER},
}
# Refuses (and writes down) every internet socket a process opens: loaded by Python at start-up from PYTHONPATH.
NO_NETWORK = """
import os, socket

_connect = socket.socket.connect


def _refuse(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        with open(os.environ["NETWORK_LOG"], "a") as log:
            log.write(repr(address) + "\\n")
        raise OSError("no network in this test")
    return _connect(self, address)


socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
"""


def offline_env(root, trackio_dir):
    """The environment of a process that may not reach the network (its attempts go to ``root/network.log``)."""
    guard = root / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(textwrap.dedent(NO_NETWORK))
    env = {k: v for k, v in os.environ.items() if k not in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL")}
    env.update(HF_HUB_OFFLINE="1", TRACKIO_DIR=str(trackio_dir), NETWORK_LOG=str(root / "network.log"))
    env["PYTHONPATH"] = os.pathsep.join([str(guard), str(ROOT)])  # this worktree's package, not an installed one
    return env


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracked")
    env = offline_env(root, root / "trackio")
    argv = [sys.executable, "-m", "rloo_demo", "train", "--report-to", "tensorboard,trackio", "--run-name", "both"]
    argv += ["--output-dir", str(root / "runs"), "--max-steps", "5", "--prompts-per-step", "2"]
    argv += ["--num-generations", "2", "--max-new-tokens", "8", "--seed", "7", "--variance-every", "5"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    folder = root / "runs" / "both"
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    return root, folder, records


def logged(records) -> dict[str, dict[int, float]]:
    """metric -> step -> value, as metrics.jsonl has them (the numbers only)."""
    out: dict[str, dict[int, float]] = {}
    for r in records:
        for key, value in r.items():
            if key not in BOOKKEEPING and isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(key, {})[r["step"]] = float(value)
    return out


def tag(key: str) -> str:
    """A tracker's name for a metric: the written-out one for a plotted metric, TRL's rule for the rest."""
    return TRACKER_TAGS.get(key, f"train/{key}")


def differences(ours: dict[str, dict[int, float]], theirs: dict[str, dict[int, float]], same) -> dict:
    """Every (metric, step) whose value the tracker lacks or holds otherwise: {metric: {step: (ours, theirs)}}."""
    wrong = {}
    for key, by_step in ours.items():
        held = theirs.get(tag(key), {})
        bad = {s: (v, held.get(s)) for s, v in by_step.items() if s not in held or not same(v, held[s])}
        if bad:
            wrong[key] = bad
    return wrong


def same_float32(a: float, b: float) -> bool:
    """Equal once a float32 holds them (NaN equal to NaN): what a tensorboard scalar keeps of a float."""
    return np.array_equal(np.float32(a), np.float32(b), equal_nan=True)


def same_float(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


# ----------------------------------------------------------------------------- tests


def test_the_tags_cover_every_metric_the_train_tab_plots():
    """Every key the Train tab's figures read from a record is a tracker tag written out above."""
    from rloo_demo.ui.tabs.train_plots import TRAIN_PLOTS

    class Asked(dict):  # a record that answers every key with a number and writes down what was asked
        asked: set[str] = set()

        def get(self, key, default=None):
            Asked.asked.add(key)
            return super().get(key, 0.5)

        __getitem__ = get

        def __contains__(self, key):
            Asked.asked.add(key)
            return True

    for plot in TRAIN_PLOTS:
        records = [Asked(step=1), Asked(step=2)]
        plot.figure(records, 0.0) if plot.smoothed else plot.figure(records)
    assert Asked.asked - BOOKKEEPING == set(TRACKER_TAGS)


def test_the_network_guard_catches_a_connection(tmp_path):
    """The guard the run has is no placebo: a process that opens a connection is written down."""
    env = offline_env(tmp_path, tmp_path / "trackio")
    code = "import socket\ntry:\n    socket.create_connection(('192.0.2.1', 80), timeout=1)\nexcept OSError:\n    pass"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    assert "192.0.2.1" in (tmp_path / "network.log").read_text()


def test_the_run_opened_no_network_connection(tracked_run):
    root, _, _ = tracked_run
    assert not (root / "network.log").exists(), (root / "network.log").read_text()


def test_tensorboards_scalars_are_the_runs_metrics_step_by_step(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, folder, records = tracked_run
    (events,) = list(folder.glob("trainer/runs/*/events.out.tfevents.*"))
    board = EventAccumulator(str(events), size_guidance={"scalars": 0})
    board.Reload()
    theirs = {t: {e.step: e.value for e in board.Scalars(t)} for t in board.Tags()["scalars"]}
    ours = logged(records)
    assert set(TRACKER_TAGS) <= set(ours), sorted(set(TRACKER_TAGS) - set(ours))  # the meter measured at step 5
    assert set(ours["variance/rloo"]) == {5}
    assert differences(ours, theirs, same_float32) == {}


def test_trackios_store_holds_the_run_with_the_same_numbers(tracked_run):
    root, _, records = tracked_run
    database = root / "trackio" / "rloo-demo.db"  # one database per project (trl_args: project="rloo-demo")
    with sqlite3.connect(database) as db:
        rows = db.execute("select run_name, step, metrics from metrics").fetchall()
    assert {run for run, _, _ in rows} == {"both"}
    theirs: dict[str, dict[int, float]] = {}
    for _, step, metrics in rows:
        for key, value in json.loads(metrics).items():
            if isinstance(value, int | float):
                theirs.setdefault(key, {})[step] = float(value)
    ours = logged(records)
    assert set(TRACKER_TAGS) <= set(ours)
    assert differences(ours, theirs, same_float) == {}


# ----------------------------------------------------------------------------- the Train form's choice


def tracker_box(monkeypatch, limits, missing=()):
    """The Train form's report_to box as a server with ``limits`` builds it, with the modules in ``missing`` not
    installed."""
    import importlib.util

    import gradio as gr

    from rloo_demo.ui.forms import FIELD
    from rloo_demo.ui.tabs import train_form

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a))
    page = SimpleNamespace(controller=SimpleNamespace(limits=limits))
    with gr.Blocks():
        return train_form.box(page, FIELD["report_to"], "none")


@pytest.mark.parametrize("missing", [(), ("trackio",), ("tensorboard", "trackio")], ids=["all", "no-trackio", "none"])
def test_a_local_forms_trackers_are_none_and_the_installed_ones(monkeypatch, missing):
    import importlib.util

    from rloo_demo.public.limits import LOCAL

    installed = [name for name in ("tensorboard", "trackio", "wandb") if importlib.util.find_spec(name) is not None]
    box = tracker_box(monkeypatch, LOCAL, missing)
    offered = [value for _, value in box.choices]
    assert offered == ["none", *(name for name in installed if name not in missing)]
    assert box.visible is True and box.value == "none"
    for name in offered:  # a choice of the form is a tracker the config accepts, and the rest are refused
        assert "report_to" not in RunConfig(report_to=name).problems(), name
    for name in ("tensorboard", "trackio", "wandb"):
        if name not in offered:
            assert "report_to" in RunConfig(report_to=name).problems(), name


def test_the_forms_tracker_reaches_the_runs_config():
    from rloo_demo.ui.forms import form_settings

    for name in ("tensorboard", "trackio", "none"):
        config = RunConfig(**form_settings({"rewards": ["vader_compound"], "w_vader_compound": 1.0, "report_to": name}))
        assert config.report_to == name


def test_a_public_form_hides_the_trackers_and_refuses_any(monkeypatch):
    from rloo_demo.public.limits import PUBLIC
    from rloo_demo.ui.forms import form_settings

    assert tracker_box(monkeypatch, PUBLIC).visible is False
    assert form_settings({})["report_to"] == "none"  # what the hidden box leaves the form's settings
    assert PUBLIC.config_problems(RunConfig(report_to="none")) == {}
    for name in ("tensorboard", "trackio", "tensorboard,trackio"):  # even an installed one, sent past the form
        assert set(PUBLIC.config_problems(RunConfig(report_to=name))) == {"report_to"}, name


# ----------------------------------------------------------------------------- trackio, the extra


def test_trackio_is_an_optional_extra_and_a_dev_requirement():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["trackio"] == ["trackio==0.43.0"]
    assert "trackio==0.43.0" in (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert "trackio" not in (ROOT / "requirements.txt").read_text()  # the Space image does not need it
    assert "pip install 'rloo-demo[trackio]'" in (ROOT / "docs" / "reference.md").read_text()  # the config reference


def test_a_missing_tracker_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    problem = RunConfig(report_to="trackio").problems()["report_to"]
    assert "tracker 'trackio' is not installed here; pip install 'rloo-demo[trackio]'" in problem
