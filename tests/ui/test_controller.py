"""The controller, the one door of the web app, without a server: Compare samples the right models with the right
seed, evaluation is saved only for a run's starter, sampling and Start are rate-limited, an idle page costs no
re-parse, and the runner's budget, abandonment, operator stop and lock-free Start.

``python -m pytest tests/ui/test_controller.py`` (about a minute).

The controller's own decisions, on a runner without training: what a Start is checked for (the client id's
length at its edges, a public server's rules on files and the output folder), what a Start that has to wait
raises, what a page tick says about its visitor's place, and what the estimate is made of. Each answer is compared
with the text the test builds from the same message catalogue, in a language other than English."""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.errors import Busy, ConfigError, InputError, NotOwner, RateLimited, Waiting
from rloo_demo.i18n import t
from rloo_demo.models.sampling import sample
from rloo_demo.prechecks import prerun_warnings
from rloo_demo.public import gates as gates_module
from rloo_demo.public.gates import SHARE_WINDOW, Caller, SamplingGate, StartGate, owner_digest
from rloo_demo.public.limits import LOCAL, PUBLIC, Limits
from rloo_demo.public.waiting import Ticket
from rloo_demo.server import readers as readers_module
from rloo_demo.server import runner as runner_module
from rloo_demo.server.estimate import run_speed
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.controller import READ_MS, Controller, _minutes
from rloo_demo.ui.forms import defaults, form_settings
from rloo_demo.ui.views import estimate_text, meter_estimate_text, prechecks_markdown

# ----------------------------------------------------------------------------- controller


OWNER = Caller("owner-id", "10.0.0.1")
VISITOR = Caller("visitor-id", "10.0.0.2")
FAST = {"max_steps": 4, "prompts_per_step": 2, "max_new_tokens": 8}


def wait_done(controller, name, timeout=180):
    deadline = time.time() + timeout
    while controller.runner.get_active(name) is not None and time.time() < deadline:
        time.sleep(0.2)
    assert controller.runner.get_active(name) is None


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A public controller with one finished run whose policy moved far from the base (a large learning rate)."""
    limits = replace(PUBLIC, sampling_per_minute=None, starts_per_minute=None)
    controller = Controller(Runner(str(tmp_path_factory.mktemp("runs")), limits=limits, watchdog=False))
    name = controller.start(FAST | {"learning_rate": 0.05, "max_steps": 6}, OWNER)
    wait_done(controller, name)
    yield controller, name
    controller.close()


# ----------------------------------------------------------------------------- Compare


def test_compare_samples_each_model_with_the_same_seed(trained):
    controller, name = trained
    out = controller.compare(name, "This movie was", 3, 16, 1.0, 1.0, 11, VISITOR)
    base, policy, tok, _ = controller.inference.models_for(name)
    expected_trained = [s["text"] for s in sample(policy, tok, "This movie was", 3, 16, 1.0, 1.0, 11)]
    expected_base = [s["text"] for s in sample(base, tok, "This movie was", 3, 16, 1.0, 1.0, 11)]
    assert [s["text"] for s in out["trained"]] == expected_trained  # the trained model, with this seed
    assert [s["text"] for s in out["base"]] == expected_base  # the base model, with the same seed
    assert expected_trained != expected_base  # the run moved the policy, so a mix-up shows
    assert out["seed"] == 11 and out["trained_on"] == ["vader_compound"]
    for s in out["trained"]:
        assert s["reward"] == pytest.approx(s["scores"]["vader_compound"])  # the run's reward is its weighted sum


def test_evaluation_is_saved_for_the_starter_only(trained):
    controller, name = trained
    run = controller.runner.run(name)
    result = controller.evaluate(name, 4, 0, VISITOR)
    assert not result["saved"] and run.evaluation() is None
    assert "evaluation" not in (run.model_dir / "README.md").read_text().lower()
    result = controller.evaluate(name, 4, 0, OWNER)
    assert result["saved"] and run.evaluation()["trained_mean_reward"] == pytest.approx(result["trained_mean_reward"])
    assert run.status()["owner"] == owner_digest(OWNER.client_id) != OWNER.client_id
    assert "owner" not in controller.list_runs()[0]


def test_compare_refuses_before_it_costs_anything(trained):
    controller, name = trained
    for bad in ("", None, 42, "..", "no-such-run"):
        with pytest.raises(Exception) as info:
            controller.compare(bad, "x", 1, 4, 1.0, 1.0, 0, VISITOR)
        assert type(info.value).__name__ in ("InputError", "NotFound")
    with pytest.raises(InputError, match="between 1 and 8"):
        controller.compare(name, "x", 9, 4, 1.0, 1.0, 0, VISITOR)


# ----------------------------------------------------------------------------- gates


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_sampling_gate_rate_per_client():
    clock = Clock()
    gate = SamplingGate(replace(LOCAL, sampling_per_minute=2), training=lambda: False, clock=clock)
    for _ in range(2):
        with gate("a"):
            pass
    with pytest.raises(RateLimited, match="2 a minute"):
        with gate("a"):
            pass
    with gate("b"):  # another client is not affected
        pass
    clock.now += 61
    with gate("a"):
        pass


def test_sampling_gate_leaves_training_its_share_of_the_cpu():
    clock = Clock()
    training = [True]
    gate = SamplingGate(replace(LOCAL, sampling_share=0.25), training=lambda: training[0], clock=clock)
    # the share is counted over the last SHARE_WINDOW (10 s): 2.5 s of sampling while a run trains
    with gate("a"):
        clock.now += 1.2  # under a's half of the share (1.25 s)
    with gate("b"):
        clock.now += 1.2  # 2.4 s in all: still under 2.5
    with gate("c"):
        clock.now += 0.2  # 2.6 s: the share is spent
    with pytest.raises(RateLimited, match="a run is training"):
        with gate("d"):
            pass
    training[0] = False  # nothing trains: sampling may use the machine
    with gate("d"):
        pass
    training[0] = True
    clock.now += SHARE_WINDOW + 0.1  # the window moved on
    with gate("d"):
        pass


def test_sampling_gate_counts_the_jobs_queued_before_a_job_starts():
    """Visitors arriving together are all under the share on arrival; each is checked again when its turn comes,
    after the jobs before it have been counted (checked on arrival only, ten of them ran back to back)."""
    clock = Clock()
    gate = SamplingGate(replace(LOCAL, sampling_share=0.25), training=lambda: True, clock=clock)
    entered, release, outcome = threading.Event(), threading.Event(), []

    def first():
        with gate("a"):
            entered.set()
            release.wait(5)
            clock.now += 16  # more than the 15 s share of a minute

    def second():
        try:
            with gate("b"):
                outcome.append("ran")
        except RateLimited as exc:
            outcome.append(str(exc))

    a = threading.Thread(target=first)
    a.start()
    entered.wait(5)
    b = threading.Thread(target=second)  # arrives while nothing has been counted yet, and waits its turn
    b.start()
    time.sleep(0.2)
    release.set()
    a.join(5)
    b.join(5)
    assert len(outcome) == 1 and "a run is training" in outcome[0]
    with pytest.raises(RateLimited):  # the refusal gave its turn back: the next caller is refused, not left waiting
        with gate("c"):
            pass


def test_sampling_gate_runs_one_job_at_a_time(monkeypatch):
    monkeypatch.setattr(gates_module, "SAMPLING_WAIT", 0.2)
    gate = SamplingGate(LOCAL, training=lambda: False)
    entered, release = threading.Event(), threading.Event()

    def hold():
        with gate("a"):
            entered.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    entered.wait(5)
    with pytest.raises(Busy, match="another comparison"):
        with gate("b"):
            pass
    release.set()
    t.join(5)
    with gate("b"):
        pass


def test_start_gate():
    clock = Clock()
    gate = StartGate(replace(LOCAL, starts_per_minute=2), clock=clock)
    gate.admit("a")
    gate.admit("a")
    with pytest.raises(RateLimited):
        gate.admit("a")
    gate.admit("b")
    clock.now += 61
    gate.admit("a")
    StartGate(LOCAL).admit("a")  # no limit on a local server


# ----------------------------------------------------------------------------- per-visitor rates: keyed by address


def _request(peer, forwarded=None):
    """What gradio hands a handler: the socket's peer, and the headers (X-Forwarded-For is the client's to write)."""
    from types import SimpleNamespace

    headers = {"x-forwarded-for": forwarded} if forwarded is not None else {}
    return SimpleNamespace(headers=headers, client=SimpleNamespace(host=peer))


@pytest.fixture
def untrusted(monkeypatch):
    """No proxy in front: X-Forwarded-For is not to be believed."""
    for var in ("SPACE_ID", "RLOO_TRUST_FORWARDED", "RLOO_TRUSTED_PROXIES"):
        monkeypatch.delenv(var, raising=False)


def _probe_controller(tmp_path, monkeypatch, **limits):
    """A controller over one run folder (no snapshot, no model) whose probe samples a stand-in base policy."""
    from rloo_demo.engine import snapshots

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="r"))
    run.set_status("finished")
    controller = Controller(Runner(str(tmp_path), limits=replace(LOCAL, **limits), watchdog=False))
    monkeypatch.setattr(controller.inference, "_load", lambda name: (object(), None))
    monkeypatch.setattr(snapshots, "sample", lambda model, tok, prompt, n, *a: [{"text": "ok", "token_ids": []}] * n)
    return controller


def test_a_new_client_id_on_every_call_does_not_reset_the_sampling_rate(tmp_path, monkeypatch, untrusted):
    """The sampling rate is per visitor, and a visitor is its address: a caller that names a new client id (and
    forges a new X-Forwarded-For) on every call is still the same visitor."""
    from rloo_demo.ui.common import caller_of

    controller = _probe_controller(tmp_path, monkeypatch, sampling_per_minute=2)
    try:
        callers = [caller_of(_request("10.0.0.7", f"203.0.113.{i}"), f"client-{i}") for i in range(3)]
        assert [c.key for c in callers] == ["10.0.0.7"] * 3 and len({c.client_id for c in callers}) == 3
        controller.probe("r", "This movie was", 1, 0, callers[0])
        controller.probe("r", "This movie was", 1, 0, callers[1])
        with pytest.raises(RateLimited, match="2 a minute per visitor"):
            controller.probe("r", "This movie was", 1, 0, callers[2])
        controller.probe("r", "This movie was", 1, 0, caller_of(_request("10.0.0.8"), "client-0"))  # someone else
    finally:
        controller.close()


def test_a_new_client_id_on_every_call_does_not_reset_the_start_rate(tmp_path, untrusted):
    """Start's rate is per visitor too. What happens after the gate (start a run, or queue it) is left out: the
    runner is a stand-in that records who reached it and refuses, so nothing trains."""
    from rloo_demo.ui.common import caller_of

    class Reached(Exception):
        pass

    class RunnerStandIn:
        def __init__(self, runs_dir):
            self.runs_dir, self.reached = runs_dir, []

        def place(self, config):  # the runs folder is the runner's, as the real one's
            config.output_dir = self.runs_dir
            return config

        def __getattr__(self, method):
            def call(config, owner, owner_host=None, *args, **kwargs):
                self.reached.append((owner, owner_host))
                raise Reached(method)

            return call

    runner = Runner(str(tmp_path), limits=replace(LOCAL, starts_per_minute=2), watchdog=False)
    controller = Controller(runner)
    controller.runner = stand_in = RunnerStandIn(runner.runs_dir)
    try:
        callers = [caller_of(_request("10.0.0.7", f"203.0.113.{i}"), f"client-{i}") for i in range(3)]
        for caller in callers[:2]:
            with pytest.raises(Reached):
                controller.start({}, caller)
        with pytest.raises(RateLimited, match="2 a minute per visitor"):
            controller.start({}, callers[2])
        with pytest.raises(Reached):
            controller.start({}, caller_of(_request("10.0.0.8"), "client-2"))  # another address
        assert stand_in.reached == [("client-0", "10.0.0.7"), ("client-1", "10.0.0.7"), ("client-2", "10.0.0.8")]
    finally:
        controller.runner = runner
        controller.close()


def test_x_forwarded_for_is_ignored_unless_the_proxy_is_trusted(untrusted):
    from rloo_demo.ui.common import caller_of

    for forwarded in ("1.2.3.4", "1.2.3.4, 5.6.7.8", "", " , "):
        assert caller_of(_request("10.0.0.7", forwarded), "c").host == "10.0.0.7"
    assert caller_of(_request("10.0.0.7"), "c") == Caller("c", "10.0.0.7")
    assert caller_of(None, "c") == Caller("c", None) and caller_of(None, 42) == Caller("", None)


def test_behind_a_trusted_proxy_the_last_hop_is_the_visitor(monkeypatch):
    """The proxy appends the address it saw to whatever the client sent: the last hop is the only one a client
    cannot choose. Rotating the hops before it changes nothing; an empty last hop falls back to the peer."""
    from rloo_demo.ui.common import caller_of

    proxy = "10.0.0.1"
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setenv("RLOO_TRUST_FORWARDED", "1")  # the operator trusts its proxy: this one, and no other address
    monkeypatch.setenv("RLOO_TRUSTED_PROXIES", f"{proxy}/32")
    assert caller_of(_request(proxy, "198.51.100.5"), "c").host == "198.51.100.5"
    assert caller_of(_request(proxy, " 1.1.1.1 ,\t 2.2.2.2,  198.51.100.5  "), "c").host == "198.51.100.5"
    assert caller_of(_request(proxy, "1.1.1.1,"), "c").host == proxy  # nothing after the last comma
    assert caller_of(_request(proxy, ""), "c").host == proxy
    assert caller_of(_request(proxy), "c").host == proxy
    gate = SamplingGate(replace(LOCAL, sampling_per_minute=2), training=lambda: False, clock=Clock())
    for i in range(2):
        with gate(caller_of(_request(proxy, f"203.0.113.{i}, 198.51.100.5"), f"client-{i}").key):
            pass
    with pytest.raises(RateLimited):
        with gate(caller_of(_request(proxy, "203.0.113.9, 198.51.100.5"), "client-9").key):
            pass
    with gate(caller_of(_request(proxy, "198.51.100.5, 198.51.100.6"), "client-0").key):  # a different visitor
        pass


# ----------------------------------------------------------------------------- cheap ticks


def test_an_idle_page_re_reads_nothing(tmp_path, monkeypatch):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="done"))
    for step in range(1, 301):
        run.append_metrics({"step": step, "reward": 0.1})
        run.append_rollouts(step, [{"step": step, "group": 0, "prompt": "p", "completions": []}])
    run.set_status("finished")
    controller = Controller(Runner(str(tmp_path), watchdog=False))
    reads = []
    real = readers_module.read_jsonl_counted
    monkeypatch.setattr(readers_module, "read_jsonl_counted", lambda *a, **k: reads.append(a) or real(*a, **k))
    first = controller.view("done")
    assert first.last_step == 300 and len(reads) == 1
    for _ in range(5):
        assert controller.view("done") is first  # from the cache: a stat per tick, no parse
    assert len(reads) == 1
    assert controller.rollout_steps("done")[-1] == 300
    assert controller.rollouts("done", 150)[0]["step"] == 150 and controller.rollouts("done", None)[0]["step"] == 300
    run.append_metrics({"step": 301, "reward": 0.2})  # the file changed: read again
    assert controller.view("done").last_step == 301 and len(reads) == 2


def test_unreadable_run_view(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="bad"))
    (run.path / "config.yaml").write_bytes(b"\xff\xfe not yaml")
    controller = Controller(Runner(str(tmp_path), watchdog=False))
    view = controller.view("bad")
    assert view.status.startswith("unreadable: config.yaml") and view.records == [] and view.config is None
    assert controller.rollouts("bad", None) == [] and controller.rollout_steps("bad") == []
    assert controller.list_runs()[0]["status"].startswith("unreadable")


# ----------------------------------------------------------------------------- the runner's limits


def test_budget_stops_a_run_at_a_step_boundary_and_keeps_its_model(tmp_path):
    limits = replace(LOCAL, max_run_seconds=2.0)
    controller = Controller(Runner(str(tmp_path), limits=limits, watchdog=False))
    name = controller.start(FAST | {"max_steps": 500}, OWNER)
    wait_done(controller, name)
    view = controller.view(name)
    assert view.status == "stopped" and "compute budget of 2 s" in view.reason
    assert 1 <= view.last_step < 500
    run = controller.runner.run(name)
    assert run.model_dir is not None and run.status()["step"] == view.last_step


def test_abandoned_run_is_stopped_and_a_heartbeat_keeps_it(tmp_path):
    limits = replace(LOCAL, abandon_seconds=30)
    runner = Runner(str(tmp_path), limits=limits, watchdog=False)
    active = runner.start(RunConfig(**FAST | {"max_steps": 500}), "owner", "10.0.0.1")
    started = active.last_seen  # the Start counts as a sighting
    active.job.state.channel.wait_for(0, timeout=120)
    # times relative to the sightings, so a slow first step (a loaded machine) cannot make the page look gone
    assert runner.check_abandoned(now=started + 29) == []
    runner.heartbeat(host="10.0.0.1")
    seen = active.last_seen
    assert seen > started
    assert runner.check_abandoned(now=seen + 20) == []  # within 30 s of the heartbeat
    assert runner.check_abandoned(now=seen + 31) == [active.name]
    assert active.job.join(120)
    status = active.job.run.status()
    assert status["status"] == "stopped" and "abandoned" in status["reason"]


def test_only_the_starter_or_the_operator_stops_a_run(tmp_path):
    runner = Runner(str(tmp_path), limits=replace(LOCAL, admin_token="op-token"), watchdog=False)
    active = runner.start(RunConfig(**FAST | {"max_steps": 500}), "owner")
    with pytest.raises(NotOwner):
        runner.stop(active.name, "someone")
    with pytest.raises(NotOwner):
        runner.stop(active.name, "op-toke")
    runner.stop(active.name, "op-token")
    assert active.job.join(120)
    assert active.job.run.status()["reason"] == "the server's operator stopped it"


def test_start_resolves_models_outside_the_lock_that_ticks_take(tmp_path, monkeypatch):
    """Row 9: while a Start resolves (or downloads) its model, every other call still answers at once."""
    resolving, release = threading.Event(), threading.Event()

    def slow_check(config):
        resolving.set()
        release.wait(30)

    monkeypatch.setattr(runner_module, "check_resources", slow_check)
    runner = Runner(str(tmp_path), watchdog=False)
    t = threading.Thread(target=lambda: runner.start(RunConfig(**FAST), "owner"))
    t.start()
    assert resolving.wait(10)
    answered = threading.Event()
    threading.Thread(target=lambda: (runner.active(), runner.get_active("x"), answered.set())).start()
    assert answered.wait(2), "a tick waited for a Start's model resolution"
    release.set()
    t.join(120)
    for active in runner.active():
        active.job.stop()
        active.job.join(120)


def test_model_cache_is_bounded(tmp_path, monkeypatch):
    controller = Controller(Runner(str(tmp_path), limits=replace(LOCAL, model_cache=2), watchdog=False))
    loaded = []
    monkeypatch.setattr(
        "rloo_demo.server.inference.load_policy", lambda folder: (loaded.append(folder) or _Eval(), None)
    )
    monkeypatch.setattr("rloo_demo.server.inference.resolve_model", lambda name, *a, **k: name)
    for name in ("a", "b", "c", "a", "c"):
        controller.inference._load(name)
    assert loaded == ["a", "b", "c", "a"] and list(controller.inference._models) == ["a", "c"]


class _Eval:
    def eval(self):
        return self


def test_exports_are_bounded_and_removed_on_close(tmp_path):
    controller = Controller(Runner(str(tmp_path / "runs"), watchdog=False))
    for i in range(6):
        run = RunFolder.create(RunConfig(output_dir=str(tmp_path / "runs"), run_name=f"r{i}"))
        run.append_metrics({"step": 1, "reward": 0.1})
        assert controller.export(run.name) == []  # still training: no downloads yet (store.export)
        run.set_status("finished")
        files = controller.export(run.name)
        assert sorted(p.name for p in files) == [f"r{i}-config.yaml", f"r{i}-metrics.csv"]
    # one export per finished run on disk, each kept while its run is unchanged
    assert sorted(f.name[:2] for f in controller._exports.iterdir()) == [f"r{i}" for i in range(6)]
    again = controller.export("r5")
    assert again == files  # unchanged run: the same files, not rebuilt
    shutil.rmtree(tmp_path / "runs" / "r0")  # a run gone from disk
    RunFolder(tmp_path / "runs" / "r5").set_status("finished", note="changed")  # a run changed
    rebuilt = controller.export("r5")
    assert rebuilt != files  # its new content: a new folder
    # the next build drops r0's export (its run is gone) and r5's older one
    assert sorted(f.name[:2] for f in controller._exports.iterdir()) == ["r1", "r2", "r3", "r4", "r5"]
    folder = controller._exports
    controller.close()
    assert not folder.exists()


def test_public_messages_name_no_server_path(tmp_path):
    public = Controller(Runner(str(tmp_path), limits=Limits(public=True), watchdog=False))
    local = Controller(Runner(str(tmp_path), watchdog=False))
    message = f"cannot read {tmp_path}/x/config.yaml or /home/user/app/assets/m (see http://example.org/a/b)"
    assert public.redact(message) == "cannot read <runs>/x/config.yaml or <path> (see http://example.org/a/b)"
    assert local.redact(message) == message
    assert "internal error (ZeroDivisionError)" in public.error_text(ZeroDivisionError("x"))


class _FakeJob:
    """A training job that never trains: what the runner's stop needs (a name, done, stop)."""

    def __init__(self, name):
        self.run = type("Run", (), {"name": name})()
        self.done = False
        self.stops = []

    def stop(self, reason="stopped"):
        self.stops.append(reason)


def _runner_with_a_run(tmp_path, admin_token, owner="the-owner"):
    runner = Runner(str(tmp_path), limits=replace(LOCAL, admin_token=admin_token), watchdog=False)
    job = _FakeJob("r1")
    runner._active["r1"] = runner_module.ActiveRun(job, owner, time.time())
    return runner, job


@pytest.mark.parametrize("admin_token", [None, ""])
def test_without_an_operator_token_nobody_is_the_operator(tmp_path, admin_token):
    """No RLOO_ADMIN_TOKEN: no id at all is the operator (not the empty one either), and only the starter stops."""
    runner, job = _runner_with_a_run(tmp_path, admin_token)
    for who in ("", None, "x", "the-owne", "None", " ", "op-token", 0):
        assert runner.is_admin(who) is False, who
    for who in ("", None, "someone", "the-owner ", "THE-OWNER"):
        with pytest.raises(NotOwner):
            runner.stop("r1", who)
    assert job.stops == []
    runner.stop("r1", "the-owner")
    assert job.stops == ["its starter asked it to stop"]


def test_with_an_operator_token_only_that_exact_token_is_the_operator(tmp_path):
    runner, job = _runner_with_a_run(tmp_path, "op-token")
    assert runner.is_admin("op-token") is True
    for who in ("", None, "op-toke", "op-token ", "OP-TOKEN", "op-tokenx", "the-owner", b"op-token"):
        assert runner.is_admin(who) is False, who
    for who in ("", None, "op-toke", "someone"):
        with pytest.raises(NotOwner):
            runner.stop("r1", who)
    assert job.stops == []
    runner.stop("r1", "op-token")
    assert job.stops == ["the server's operator stopped it"]


# ----------------------------------------------------------------------------- the probe's columns


def test_each_probe_column_is_sampled_from_its_own_snapshot(tmp_path, monkeypatch):
    """Three snapshots, then the final model: the probe loads each snapshot folder once, in order, and every column
    holds the samples of the policy it is labelled with (a loop's late-binding lambda would load the last folder
    for every column)."""
    from rloo_demo.engine import snapshots

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="hist", snapshot_every=10))
    for step in (10, 20, 30):
        folder = run.path / "snapshots" / snapshots.snapshot_name(step)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    (run.path / "model").mkdir()
    (run.path / "model" / "config.json").write_text("{}")
    run.set_status("finished", step=40)
    controller = Controller(Runner(str(tmp_path), limits=replace(LOCAL, sampling_per_minute=None), watchdog=False))

    class Tagged:
        def __init__(self, tag):
            self.tag = tag

    loaded = []

    def load_snapshot(folder, base_policy):
        loaded.append(Path(folder).name)
        return Tagged(Path(folder).name)

    def load(name):
        return (Tagged("final" if name == str(run.model_dir) else "base"), None)

    def fake_sample(model, tok, prompt, n, *args):
        return [{"text": f"{model.tag} #{i}", "token_ids": [i]} for i in range(n)]

    monkeypatch.setattr(snapshots, "load_snapshot", load_snapshot)
    monkeypatch.setattr(snapshots, "sample", fake_sample)
    monkeypatch.setattr(controller.inference, "_load", load)
    try:
        out = controller.probe("hist", "This movie was", 2, 0, VISITOR)
    finally:
        controller.close()
    names = ["step-000010", "step-000020", "step-000030"]
    assert loaded == names  # each snapshot once, in order
    assert [(s["step"], s["label"]) for s in out["steps"]] == [
        (0, "base policy (step 0)"), (10, "step 10"), (20, "step 20"), (30, "step 30"), (40, "final (step 40)")
    ]  # fmt: skip
    expected = ["base", *names, "final"]
    assert len(out["steps"]) == len(expected)
    for column, tag in zip(out["steps"], expected, strict=True):
        assert [s["text"] for s in column["samples"]] == [f"{tag} #0", f"{tag} #1"], column["label"]


# ----------------------------------------------------------------------------- controller units


def _controller(tmp_path, **limits) -> Controller:
    limits = Limits(**limits)
    return Controller(Runner(str(tmp_path / "runs"), limits=limits, watchdog=False), limits)


def test_settings_are_checked_for_files_only_on_a_local_server(tmp_path):
    local = _controller(tmp_path / "a")
    missing, there = tmp_path / "no-such-prompts.csv", tmp_path / "prompts.csv"
    there.write_text("text\nA fine film\n")
    with pytest.raises(ConfigError) as e:
        local.parse_settings({"data_source": str(missing), "max_steps": 2})
    assert e.value.problems == {
        "data_source": f"file {str(missing)!r} does not exist; give a .csv/.jsonl path, a hub id or 'embedded:imdb'"
    }
    assert local.parse_settings({"data_source": str(there), "max_steps": 2}).data_source == str(there)
    # a public answer never tells whether a path exists on the server: the same refusal for both
    public = _controller(tmp_path / "b", public=True)
    answers = []
    for path in (missing, there):
        with pytest.raises(ConfigError) as e:
            public.parse_settings({"data_source": str(path), "max_steps": 2})
        answers.append(e.value.problems)
    assert answers[0] == answers[1] and list(answers[0]) == ["data_source"]
    assert "exist" not in answers[0]["data_source"]


def test_a_public_server_refuses_a_chosen_output_folder_and_otherwise_puts_runs_in_its_own(tmp_path):
    public = _controller(tmp_path / "a", public=True)
    with pytest.raises(ConfigError) as e:
        public.parse_settings({"output_dir": "/etc", "max_steps": 2})
    assert e.value.problems == {"output_dir": "the server decides where runs are saved"}
    local = _controller(tmp_path / "b")
    config = local.parse_settings('{"output_dir": "elsewhere", "max_steps": 2}')
    assert config.output_dir == str(tmp_path / "b" / "runs") == local.runner.runs_dir
    assert public.parse_settings({"max_steps": 2}).output_dir == public.runner.runs_dir


@pytest.fixture
def requests(tmp_path, monkeypatch):
    """A controller whose runner records each request and starts nothing, or gives a place in the line."""
    controller = _controller(tmp_path)
    asked = []
    places = {}

    def request(config, owner, owner_host=None, owner_record=None):
        asked.append((owner, owner_host, owner_record))
        ticket = Ticket(owner_host or owner, config, owner, owner_host, owner_record)
        ticket.started = None if (owner_host or owner) in places else f"run-of-{owner}"
        return ticket

    monkeypatch.setattr(controller.runner, "request", request)
    monkeypatch.setattr(controller.runner.line, "place", lambda visitor: places.get(visitor))
    monkeypatch.setattr(controller.runner, "wait_estimate", lambda place: 90.0 * place)
    controller.asked, controller.places = asked, places
    return controller


@pytest.mark.parametrize(("length", "ok"), [(0, False), (1, True), (2, True), (200, True), (201, False)])
def test_a_start_needs_a_client_id_of_1_to_200_characters(requests, length, ok):
    caller = Caller(client_id="c" * length, host="10.0.0.2")
    if ok:
        assert requests.start({"max_steps": 2}, caller) == f"run-of-{'c' * length}"
        assert requests.asked == [("c" * length, "10.0.0.2", owner_digest("c" * length))]
    else:
        with pytest.raises(InputError) as e:
            requests.start({"max_steps": 2}, caller)
        assert str(e.value) == "a client id (1 to 200 characters) is needed to start a run; it is what may stop it"
        assert requests.asked == []


def test_a_start_that_must_wait_says_its_place_and_wait_in_english(requests):
    requests.places["10.0.0.3"] = 3
    with pytest.raises(Waiting) as e:
        requests.start({"max_steps": 2}, Caller(client_id="me", host="10.0.0.3"))
    assert e.value.place == 3 and str(e.value) == t("en", "train.waiting", place=3, wait=_minutes(270.0))
    assert str(e.value) == requests.line_text(3)
    requests.places["10.0.0.4"] = 0  # not placed by the time it looks: it is next
    with pytest.raises(Waiting) as e:
        requests.start({"max_steps": 2}, Caller(client_id="me", host="10.0.0.4"))
    assert e.value.place == 1 and str(e.value) == t("en", "train.waiting", place=1, wait=_minutes(90.0))


def test_a_run_started_from_the_form_is_checked_once_its_resources_once_and_its_folder_made_once(tmp_path, monkeypatch):
    """On its way down (the controller, the runner, the job, the training thread) a run's settings are checked once,
    against this server's limits; the steps below trust that check. Its models are resolved once, before the
    runner's lock, and its folder made once, in the runner's runs folder whatever the form sent."""
    from apputil import wait_until

    from rloo_demo.engine import training
    from rloo_demo.server import runner as runner_module
    from rloo_demo.store.folder import RunFolder

    calls = []
    real_problems, real_create = RunConfig.problems, RunFolder.create.__func__
    monkeypatch.setattr(
        RunConfig, "problems", lambda self, *a, **k: calls.append("check") or real_problems(self, *a, **k)
    )
    for module in (training, runner_module):  # the runner checks the resources before its lock; the engine may too
        monkeypatch.setattr(module, "check_resources", lambda config: calls.append("resources"))
    monkeypatch.setattr(
        RunFolder, "create", classmethod(lambda cls, c, **kw: calls.append("folder") or real_create(cls, c, **kw))
    )

    def no_model(config, state, **kwargs):  # the thread got as far as the trainer: every check before it is done
        calls.append("trainer")
        raise RuntimeError("no model in this test")

    monkeypatch.setattr(training, "build_trainer", no_model)
    controller = _controller(tmp_path)
    name = controller.start_from_form(defaults() | {"max_steps": 3}, Caller(client_id="me", host="10.0.0.2"))
    run = controller.runner.run(name)
    assert wait_until(lambda: run.status()["status"] == "failed", timeout=60)
    assert run.status()["error"] == "RuntimeError: no model in this test"
    assert calls == ["check", "resources", "folder", "trainer"]
    assert run.path.parent == tmp_path / "runs" and run.config().max_steps == 3


def test_a_tick_keeps_its_visitors_place_and_says_it_in_the_pages_language(requests, monkeypatch):
    seen = []
    monkeypatch.setattr(requests.runner.line, "seen", lambda visitor: seen.append(visitor))
    turns = {"10.0.0.5": (2, None), "10.0.0.6": (None, None)}
    monkeypatch.setattr(requests.runner, "turn_of", lambda visitor: turns.get(visitor, (None, None)))
    assert requests.line_note(Caller(client_id="a", host="10.0.0.5"), "ka") == t(
        "ka", "train.waiting", place=2, wait=_minutes(180.0)
    )
    assert t("ka", "train.waiting", place=2, wait="x") != t("en", "train.waiting", place=2, wait="x")
    assert requests.line_note(Caller(client_id="b", host="10.0.0.6"), "ka") is None
    assert seen == ["10.0.0.5", "10.0.0.6"]


def test_a_turn_that_failed_says_why_in_the_pages_language_without_the_servers_paths(tmp_path, monkeypatch):
    controller = _controller(tmp_path, public=True)
    failed = Ticket("10.0.0.7", RunConfig(), "me")
    failed.error = f"the disk under {controller.runner.runs_dir}/x is full"
    monkeypatch.setattr(controller.runner, "turn_of", lambda visitor: (None, failed if visitor == "10.0.0.7" else None))
    note = controller.line_note(Caller(client_id="me", host="10.0.0.7"), "ka")
    assert note == t("ka", "train.turn_failed", error=controller.redact(failed.error))
    assert controller.runner.runs_dir not in note and controller.redact(failed.error) in note
    assert note != t("en", "train.turn_failed", error=controller.redact(failed.error))
    ok = Ticket("10.0.0.8", RunConfig(), "me")
    ok.started = "run-1"
    monkeypatch.setattr(controller.runner, "turn_of", lambda visitor: (None, ok))
    assert controller.line_note(Caller(client_id="me", host="10.0.0.8"), "ka") is None


def test_the_estimate_is_the_speed_line_the_meters_cost_and_the_prechecks_in_the_pages_language(tmp_path):
    controller = _controller(tmp_path, max_run_seconds=45)
    values = defaults()
    values.update(max_steps=40, num_generations=2, variance_every=5)
    config = controller.parse_settings(form_settings(values))
    speed = run_speed(config, controller.reader)
    expected = estimate_text(config, speed.step, 45, "ka", speed)
    expected += meter_estimate_text(config, speed.step, "ka")
    expected += prechecks_markdown(prerun_warnings(config, "ka"))
    assert controller.estimate(values, "ka") == expected
    assert expected != controller.estimate(values, "en")
    assert estimate_text(config, speed.step, 45, "ka", speed) != estimate_text(config, speed.step, None, "ka", speed)
    assert meter_estimate_text(config, speed.step, "ka")  # the meter is on: its cost is part of the estimate
    assert prerun_warnings(config, "ka")  # K = 2 is warned about before the run


def test_an_estimate_of_bad_settings_is_the_refusal_itself(tmp_path):
    controller = _controller(tmp_path)
    values = defaults()
    values.update(max_steps=-3)
    text = controller.estimate(values, "ka")
    try:
        controller.parse_settings(form_settings(values))
    except ConfigError as exc:
        assert text == controller.error_text(exc, "ka") and "max_steps" in text
        assert text != controller.error_text(exc)  # the problem in the page's language, not English
    else:
        pytest.fail("max_steps -3 was accepted")


def test_the_forms_estimate_checks_the_form_once_a_keystroke(tmp_path, monkeypatch):
    """The Train tab's estimate handler checks the form once and writes the estimate of what that check returned:
    the controller's own estimate of the same values, word for word; a form it refuses is refused by the labels."""
    from types import SimpleNamespace

    from rloo_demo.ui.tabs import train as train_tab

    controller = _controller(tmp_path, max_run_seconds=45)
    values = defaults() | {"max_steps": 40, "num_generations": 2}
    expected = controller.estimate(values, "ka")
    checks = []
    real = RunConfig.problems
    monkeypatch.setattr(
        RunConfig, "problems", lambda self, *a, **k: checks.append(self.max_steps) or real(self, *a, **k)
    )
    tab = SimpleNamespace(controller=controller, estimate="estimate", form_error="form_error")
    assert train_tab.estimate_update(tab, values, "ka") == {"estimate": expected, "form_error": ""}
    assert checks == [40]
    refused = train_tab.estimate_update(tab, values | {"max_steps": -3}, "ka")
    assert refused["estimate"] == "" and refused["form_error"] and checks == [40, -3]
    with pytest.raises(ValueError):  # a config no check passed is a caller's bug, never estimated
        controller.estimate_checked(RunConfig(max_steps=40), "ka")


def test_each_server_shares_its_figures_and_texts_among_its_pages_and_with_no_other_server(tmp_path, monkeypatch):
    """The Train tab's shared builds are the controller's: pages of one server watching the same step share one
    build of the figures and of the texts, and another server (another controller, in the same process) builds
    its own for a run of the same name, step and time."""
    from types import SimpleNamespace

    from rloo_demo.server.readers import RunView
    from rloo_demo.ui.tabs import train as train_tab
    from rloo_demo.ui.tabs import train_plots

    figures, texts = [], []
    real_figures, real_alerts = train_plots.figures, train_tab.alerts_html
    monkeypatch.setattr(train_plots, "figures", lambda *a, **k: figures.append(a[2]) or real_figures(*a, **k))
    monkeypatch.setattr(train_tab, "alerts_html", lambda *a, **k: texts.append(a[1]) or real_alerts(*a, **k))
    records = [{"step": s, "logged_at": 1000.0 + s, "reward": 0.1 * s, "kl": 0.01 * s} for s in range(1, 5)]
    view = RunView("same-name", "running", None, records, 10, 1.0, None, True)
    names = ("status", "run_error", "alerts", "summary", "alert_step", "alert_open", "start", "drawn")
    one, other = _controller(tmp_path / "one"), _controller(tmp_path / "other")
    for controller in (one, one, one, other, other):
        tab = SimpleNamespace(**{n: n for n in names}, plots=[f"plot{i}" for i in range(10)], controller=controller)
        assert train_tab.render(tab, view, 0.6, -1, "ka")["drawn"] == 4
    assert figures == ["ka", "ka"] and texts == ["ka", "ka"]  # once a server
    assert one.builds is not other.builds


# ------------------------------------------------------------------ every read is the caller's, counted once


class _Recorder:
    """Stands in for the reader, the manager or the inference service: each call recorded, answered by name."""

    def __init__(self, log):
        self.log = log

    def __getattr__(self, method):
        def call(*args):
            self.log.append((method, args))
            return {"labels": {"b": "second"}, "comparable_runs": ["a", "b"]}.get(method, f"answer-of-{method}")

        return call


READS = [  # (controller method, its arguments before the caller, what it must ask, with which arguments)
    ("default_run", (), "default_run", ("CALLER",)),  # in public mode a page attaches to its caller's own run
    ("follow", ("run-a",), "follow", ("run-a", "CALLER")),
    ("view", ("run-a",), "view", ("run-a",)),
    ("poll_metrics", ("run-a", 17), "poll_metrics", ("run-a", 17, "CALLER")),
    ("rollout_steps", ("run-a",), "rollout_steps", ("run-a",)),
    ("rollouts", ("run-a", 4), "rollouts", ("run-a", 4)),
    ("get_rollouts", ("run-a", 4), "get_rollouts", ("run-a", 4)),
    ("list_runs", (), "list_runs", ()),
    ("overlay_records", (["run-a", "run-b"],), "overlay_records", (["run-a", "run-b"],)),
    ("arenas", (), "arenas", ()),
    ("arena", ("arena-1",), "arena", ("arena-1",)),
    ("comparable_runs", (), "comparable_runs", ()),
    ("run_notes", ("run-a",), "run_notes", ("run-a",)),
    ("label_run", ("run-a", "best", "a note"), "set_notes", ("run-a", "best", "a note", "CALLER")),
    ("delete_run", ("run-a",), "delete", ("run-a", "CALLER")),
    ("heldout_choices", ("run-a", 7), "heldout_choices", ("run-a", 7)),
]


@pytest.fixture
def recorded(tmp_path):
    controller = _controller(tmp_path)
    log, admitted = [], []
    controller.reader = controller.manager = controller.inference = _Recorder(log)
    controller.events.admit = lambda who, cost: admitted.append((who, cost))
    return controller, log, admitted


@pytest.mark.parametrize(("method", "args", "asks", "asked"), READS, ids=[r[0] for r in READS])
def test_every_read_counts_against_its_callers_budget_and_asks_for_what_it_was_given(
    recorded, method, args, asks, asked
):
    from rloo_demo.ui.controller import READ_MS

    controller, log, admitted = recorded
    caller = Caller(client_id="c", host="10.0.0.5")
    answer = getattr(controller, method)(*args, caller=caller)
    assert admitted == [("10.0.0.5", READ_MS)]
    assert log == [(asks, tuple(caller if a == "CALLER" else a for a in asked))]
    assert answer == f"answer-of-{asks}" or asks == "comparable_runs"
    log.clear()
    admitted.clear()
    getattr(controller, method)(*args, caller=Caller(client_id="c", host="10.0.0.5", admitted=True))
    assert admitted == [] and len(log) == 1  # the middleware counted it already: not twice


def test_every_method_that_counts_a_read_is_in_the_table_above():
    import inspect

    if any("mutmut" in name for name in vars(Controller)):
        pytest.skip("under mutmut the methods' source is its trampolines")

    counting = {
        name
        for name, fn in vars(Controller).items()
        if callable(fn) and name != "_read" and "self._read(caller)" in inspect.getsource(fn)
    }
    assert counting == {r[0] for r in READS} and len(counting) == 16


def test_the_held_out_picker_offers_forty_prompts_unless_told_otherwise(recorded):
    controller, log, _ = recorded
    controller.heldout_choices("run-a")
    assert log == [("heldout_choices", ("run-a", 40))]


def test_comparable_choices_show_a_label_beside_its_runs_name_and_count_one_read(recorded):
    controller, log, admitted = recorded
    assert controller.comparable_choices(Caller(host="10.0.0.6")) == [("a", "a"), ("second · b", "b")]
    assert admitted == [("10.0.0.6", READ_MS)] and [m for m, _ in log] == ["comparable_runs", "labels"]


def test_sampling_calls_pass_every_argument_to_the_inference_service(recorded):
    controller, log, admitted = recorded
    caller, progress = Caller(host="10.0.0.7"), object()
    controller.evaluate("run-a", 5, 9, caller, progress, 3)
    controller.evaluate("run-b", 2, 1, caller)
    controller.compare("run-a", "The film", 2, 8, 0.7, 0.9, 11, caller)
    controller.probe("run-a", "The film", 3, 12, caller)
    assert log == [
        ("evaluate", ("run-a", 5, 9, caller, progress, 3)),
        ("evaluate", ("run-b", 2, 1, caller, None, 1)),
        ("compare", ("run-a", "The film", 2, 8, 0.7, 0.9, 11, caller)),
        ("probe", ("run-a", "The film", 3, 12, caller)),
    ]
    assert admitted == []  # sampling has its own gate (the inference service's), not the read rate


def test_the_pages_language_is_one_the_page_knows_and_exports_live_in_the_servers_own_folder(tmp_path):
    controller = _controller(tmp_path)
    assert controller.locale("ka") == "ka" and controller.locale("<script>") == "en"
    assert controller._exports.name.startswith("rloo-exports-") and controller._exports.is_dir()
    (controller._exports / "run-a").mkdir()
    (controller._exports / "run-a" / "metrics.jsonl").write_text("{}\n")
    controller.close()
    assert not controller._exports.exists()
    controller.close()  # twice: nothing left to remove, and no error
