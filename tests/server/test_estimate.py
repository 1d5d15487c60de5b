"""An honest estimate before Start: from this server's own measured speed, the last timed run's
loading, first step and later steps, scaled by the work of a step (completions x new tokens); and the first seconds
of a run say what it is doing (loading, preparing, first step) instead of "step 0 / 150 · ETA –".

``python -m pytest tests/server/test_estimate.py`` (a few seconds).
"""

from types import SimpleNamespace

import pytest
from factories import LOAD, STARTED, TIMES, timed_run

from rloo_demo.config import RunConfig
from rloo_demo.engine.callbacks import LiveMetricsCallback, MetricsChannel, run_phase
from rloo_demo.i18n import t
from rloo_demo.public.gates import Caller
from rloo_demo.public.limits import LOCAL
from rloo_demo.server.estimate import run_speed
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.forms import defaults
from rloo_demo.ui.views.common import _duration
from rloo_demo.ui.views.train import phase_line


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
        speed = run_speed(RunConfig(), controller.reader)
        assert speed.source is None and not speed.scaled  # the embedded policy's own benchmark: nothing scaled
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
    # a trainer without the callback (GRPO's, a stand-in) or without a callback handler at all: training
    assert run_phase(SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[object()]))) == "training"
    assert run_phase(SimpleNamespace(callback_handler=SimpleNamespace())) == "training"
    assert run_phase(SimpleNamespace()) == "training"
    line = phase_line("loading", 5.0, 150, "ru")
    assert t("ru", "phase.loading") in line and "ETA" not in line


def test_start_is_off_while_the_callers_own_run_trains(tmp_path):
    """Off for the run's client id and for its visitor's address (the runner refuses that visitor a second run
    while one trains); on for another client id at another address, and once the run has ended."""
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        fake = SimpleNamespace(owner="mine", visitor="10.0.0.1", started=1.0, job=SimpleNamespace(done=False))
        controller.runner._active["r"] = fake  # a run in training, as the runner holds it
        assert controller.trains_for(Caller("mine", "10.0.0.1"))
        assert controller.trains_for(Caller("mine", "10.0.0.9"))  # its client id, from elsewhere
        assert controller.trains_for(Caller("another tab", "10.0.0.1"))  # its address, another client id
        assert not controller.trains_for(Caller("someone else", "10.0.0.2"))
        assert not controller.trains_for(Caller("", "10.0.0.2"))
        controller.runner._active.clear()
        assert not controller.trains_for(Caller("mine", "10.0.0.1"))  # it ended: Start is on again
    finally:
        controller.close()


# ----------------------------------------------------------------------------- the measurement and the choice, alone

LATER = [1.0, 2.0, 1.5, 0.5, 1.0]  # exact in binary, so the loading time below comes out exact too


def records_of(times):
    out, clock = [], 0.0
    for step, seconds in enumerate(times, start=1):
        clock += seconds
        out.append({"step": step, "step_time": seconds, "time": clock, "logged_at": STARTED + LOAD + clock})
    return out


def test_measured_needs_enough_timed_steps_and_sound_loading():
    from rloo_demo.server.estimate import DEFAULT_LOAD_SECONDS, MIN_STEPS, measured

    assert len(LATER) == MIN_STEPS
    records = records_of([3.0, *LATER])
    assert measured(records, STARTED) == (LOAD, 3.0, sum(LATER) / len(LATER))
    assert measured(records_of([3.0, *LATER[:-1]]), STARTED) is None  # one timed step short
    assert measured(records_of([3.0, 0.0, *LATER[1:]]), STARTED)[2] == sum(LATER[1:]) / len(LATER)  # 0 s is a time
    for bad in (True, float("nan"), float("inf"), -1.0, "1.0", None):  # not a step time: the run is one step short
        spoilt = records_of([3.0, *LATER])
        spoilt[2]["step_time"] = bad
        assert measured(spoilt, STARTED) is None, bad
    assert measured(records, None)[0] == DEFAULT_LOAD_SECONDS  # no start time
    assert measured(records, True)[0] == DEFAULT_LOAD_SECONDS
    assert measured(records, STARTED + LOAD + 1)[0] == DEFAULT_LOAD_SECONDS  # started after train begin: unsound
    assert measured(records, STARTED + LOAD)[0] == 0.0  # no loading at all is a measurement
    unlogged = [dict(records[0], logged_at=None), *records[1:]]
    assert measured(unlogged, STARTED)[0] == DEFAULT_LOAD_SECONDS
    untimed = [dict(records[0], time="x"), *records[1:]]
    assert measured(untimed, STARTED)[0] == DEFAULT_LOAD_SECONDS


def test_a_speeds_total_counts_the_first_step_once():
    from rloo_demo.server.estimate import Speed

    speed = Speed(load=2.0, first=5.0, step=1.5, source=None)
    assert [speed.total(n) for n in (0, 1, 2, 10)] == [7.0, 7.0, 8.5, 7.0 + 9 * 1.5]


def test_the_same_policy_is_preferred_and_another_is_scaled_by_its_size(tmp_path, monkeypatch):
    from rloo_demo.models.hub import EMBEDDED_POLICY
    from rloo_demo.server import estimate
    from rloo_demo.server.readers import DEFAULT_STEP_SECONDS, DEFAULT_STEP_WORK

    sizes = {"small": 100, "big": 300, "huge": 600, EMBEDDED_POLICY: 50}
    monkeypatch.setattr(estimate, "policy_parameters", lambda name: sizes.get(name.strip()))
    shape = {"num_generations": 4, "prompts_per_step": 4, "max_new_tokens": 24}  # 384 tokens a step
    timed_run(tmp_path, "small-run", policy="small", **shape)
    timed_run(tmp_path, "x-big-run", policy="big", **shape)  # newer, another policy (and after "small" by name)
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        later = sum(TIMES[1:]) / len(TIMES[1:])
        same = run_speed(RunConfig(policy=" small ", **shape), controller.reader)
        assert (same.source, same.scaled, same.first, same.step) == ("small-run", False, TIMES[0], later)
        doubled = RunConfig(policy="huge", num_generations=8, prompts_per_step=4, max_new_tokens=24)  # 2x the work
        other = run_speed(doubled, controller.reader)
        assert other.source == "x-big-run" and other.scaled  # the newest timed run, scaled by 600 / 300
        assert other.first == TIMES[0] * 2 * 2 and abs(other.step - later * 2 * 2) < 1e-12
        unknown = run_speed(RunConfig(policy="mystery", **shape), controller.reader)  # no size known: not scaled
        assert unknown.source == "x-big-run" and not unknown.scaled and unknown.step == later

        def broken(name):
            raise OSError("hub unreachable")

        monkeypatch.setattr(estimate, "policy_parameters", broken)
        assert run_speed(RunConfig(policy="huge", **shape), controller.reader).step == later  # no size: 1
        monkeypatch.setattr(estimate, "policy_parameters", lambda name: sizes.get(name.strip()))
        monkeypatch.setattr(estimate, "RUNS_LOOKED_AT", 0)  # nothing looked at: the embedded default's benchmark
        none = run_speed(RunConfig(policy="huge", **shape), controller.reader)
        step = DEFAULT_STEP_SECONDS * 16 * 24 / DEFAULT_STEP_WORK * 600 / 50
        assert (none.load, none.source, none.scaled) == (estimate.DEFAULT_LOAD_SECONDS, None, True)
        assert none.first == pytest.approx(step, rel=1e-12) and none.step == pytest.approx(step, rel=1e-12)
    finally:
        controller.close()


def test_runs_that_cannot_be_measured_are_passed_over_for_older_ones(tmp_path, monkeypatch):
    """A run still training, one whose config cannot be read and one whose status cannot be read are each skipped,
    and the search goes on to the older runs (the newest last here)."""
    timed_run(tmp_path, "older")
    (timed_run(tmp_path, "corrupt-config").path / "config.yaml").write_text("max_steps: [1,\n")
    timed_run(tmp_path, "live")
    timed_run(tmp_path, "broken-status")
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        assert run_speed(RunConfig(), controller.reader).source == "broken-status"  # readable so far
        live = SimpleNamespace(
            config=RunConfig(run_name="live"),
            job=SimpleNamespace(done=False, stop=lambda reason=None: None),
            status=lambda: {"status": "running", "error": None, "elapsed": 1.0, "reason": None},
            records=lambda: records_of([3.0, *LATER]),
        )
        controller.runner._active["live"] = live  # training here: its speed is not final
        real = RunFolder.status

        def status(run):
            if run.name == "broken-status":
                raise OSError("unreadable")
            return real(run)

        monkeypatch.setattr(RunFolder, "status", status)
        speed = run_speed(RunConfig(), controller.reader)
        assert speed.source == "older" and abs(speed.load - LOAD) < 1e-6
    finally:
        controller.runner._active.clear()
        controller.close()
