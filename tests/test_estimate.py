"""An honest estimate before Start (issue 24, item 10): from this server's own measured speed, the last timed run's
loading, first step and later steps, scaled by the work of a step (completions x new tokens); and the first seconds
of a run say what it is doing (loading, preparing, first step) instead of "step 0 / 150 · ETA –".

``python -m pytest tests/test_estimate.py`` (a few seconds).
"""

from types import SimpleNamespace

from rloo_demo.config import RunConfig
from rloo_demo.engine.callbacks import LiveMetricsCallback, MetricsChannel, run_phase
from rloo_demo.i18n import t
from rloo_demo.server.estimate import run_speed
from rloo_demo.server.gates import Caller
from rloo_demo.server.limits import LOCAL
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.forms import defaults
from rloo_demo.ui.views.common import _duration
from rloo_demo.ui.views.train import phase_line

STARTED = 1_700_000_000.0
LOAD = 9.0  # seconds between status.json's "started" and the first step's train begin, in the fake run
TIMES = [4.0, 1.0, 1.2, 0.8, 1.1, 0.9, 1.0]  # the first step warms up: it is timed apart


def timed_run(root, name="timed", **config) -> RunFolder:
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, **config))
    clock = 0.0
    for step, seconds in enumerate(TIMES, start=1):
        clock += seconds
        # "time" counts from train begin; "logged_at" is the wall clock: train begin = started + LOAD
        run.append_metrics(
            {"step": step, "reward": 0.1, "step_time": seconds, "time": clock, "logged_at": STARTED + LOAD + clock}
        )
    run.set_status("finished", started=STARTED, step=len(TIMES))
    return run


def test_the_estimate_is_this_servers_last_run_scaled_by_the_work_of_a_step(tmp_path):
    timed_run(tmp_path, num_generations=4, prompts_per_step=4, max_new_tokens=24)  # 16 x 24 tokens a step
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        asked = RunConfig(num_generations=8, prompts_per_step=4, max_new_tokens=48, max_steps=300)  # 4x the work
        speed = run_speed(asked, controller.reader)
        later = sum(TIMES[1:]) / len(TIMES[1:])
        expected = LOAD + TIMES[0] * 4 + (300 - 1) * later * 4
        assert speed.source == "timed" and abs(speed.load - LOAD) < 1e-6
        assert abs(speed.total(300) - expected) < 1e-6
        values = {"num_generations": 8, "prompts_per_step": 4, "max_new_tokens": 48, "max_steps": 300}
        text = controller.estimate(defaults() | values)
        assert f"**{_duration(expected)}**" in text, text
        assert "timed" in text and _duration(LOAD) in text, text  # where the figure comes from
    finally:
        controller.close()


def test_with_no_timed_run_the_estimate_says_it_is_not_measured_here(tmp_path):
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        text = controller.estimate(defaults(), "ru")
        assert t("ru", "estimate.unmeasured") in text, text
    finally:
        controller.close()


def test_a_run_still_training_or_too_short_is_not_believed(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="short"))
    run.append_metrics({"step": 1, "step_time": 100.0, "time": 100.0, "logged_at": STARTED + 100})
    run.set_status("finished", started=STARTED)
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        assert run_speed(RunConfig(), controller.reader).source is None
    finally:
        controller.close()


def test_the_first_seconds_of_a_run_name_what_it_does():
    assert run_phase(None) == "loading"  # no trainer yet: the models and prompts are loading
    callback = LiveMetricsCallback(MetricsChannel())
    trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[object(), callback]))
    assert run_phase(trainer) == "preparing"
    args = SimpleNamespace(world_size=1)
    callback.on_train_begin(args, SimpleNamespace(), SimpleNamespace())
    assert run_phase(trainer) == "first_step"
    state = SimpleNamespace(global_step=1, max_steps=3, is_world_process_zero=True)
    callback.on_log(args, state, SimpleNamespace(), logs={"reward": 0.2})
    assert run_phase(trainer) == "training"
    line = phase_line("loading", 5.0, 150, "ru")
    assert t("ru", "phase.loading") in line and "ETA" not in line


def test_start_is_off_while_the_callers_own_run_trains(tmp_path):
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        fake = SimpleNamespace(owner="mine", job=SimpleNamespace(done=False))
        controller.runner._active["r"] = fake  # a run in training, as the runner holds it
        assert controller.trains_for(Caller("mine", "10.0.0.1"))
        assert not controller.trains_for(Caller("someone else", "10.0.0.1"))
        assert not controller.trains_for(Caller("", "10.0.0.1"))
        controller.runner._active.clear()
        assert not controller.trains_for(Caller("mine", "10.0.0.1"))  # it ended: Start is on again
    finally:
        controller.close()
