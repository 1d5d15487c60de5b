"""The controller, the one door of the web app, without a server: Compare samples the right models with the right
seed, evaluation is saved only for a run's starter, sampling and Start are rate-limited, an idle page costs no
re-parse, and the runner's budget, abandonment, operator stop and lock-free Start.

``python -m pytest tests/test_controller.py`` (about a minute).
"""

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.errors import Busy, InputError, NotOwner, RateLimited
from rloo_demo.models.sampling import sample
from rloo_demo.server import gates as gates_module
from rloo_demo.server import readers as readers_module
from rloo_demo.server import runner as runner_module
from rloo_demo.server.gates import Caller, SamplingGate, StartGate, owner_digest
from rloo_demo.server.limits import LOCAL, PUBLIC, Limits
from rloo_demo.server.runner import Runner
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.controller import Controller

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
    with gate("a"):
        clock.now += 14  # 14 s of sampling in this minute: under 15 (25% of 60)
    with gate("b"):
        clock.now += 2
    with pytest.raises(RateLimited, match="a run is training"):
        with gate("c"):
            pass
    training[0] = False  # nothing trains: sampling may use the machine
    with gate("c"):
        pass
    training[0] = True
    clock.now += 61  # the window moved on
    with gate("c"):
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
    assert len(list(controller._exports.iterdir())) <= 4
    again = controller.export("r5")
    assert again == files  # unchanged run: the same files, not rebuilt
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
