"""A fair share for every visitor of a public server (issue #25): admission before gradio's queue, closed routes,
bounded downloads and sessions, against the app as the image runs it (public mode).

Distinct loopback addresses stand for distinct visitors: 127.0.0.2 (A, who floods) and 127.0.0.3 (B, who only
uses the page); 127.0.0.4 stands for a trusted proxy. ``python -m pytest tests/test_admission.py`` (about 20 s).
"""

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from apputil import free_port

from rloo_demo.config import RunConfig
from rloo_demo.i18n import t
from rloo_demo.server.limits import PUBLIC
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.forms import FIELD, FORM_FIELDS, defaults

A, B, PROXY = "127.0.0.2", "127.0.0.3", "127.0.0.4"
LIMITS = replace(PUBLIC, trusted_proxies=(f"{PROXY}/32",), session_seconds=1.0)


@contextmanager
def serving(runs_dir, limits):
    """``apputil.running_app``, yielding the Blocks too (its session store is looked at below)."""
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app, launch_options, prepare
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(str(runs_dir), limits=limits))
    demo = prepare(build_app(controller), limits)
    port = free_port()
    options = launch_options(limits, controller.reads) | {"server_name": "127.0.0.1", "server_port": port}
    demo.launch(prevent_thread_lock=True, quiet=True, **options)
    try:
        yield f"http://127.0.0.1:{port}/", controller, demo
    finally:
        demo.close()
        controller.close()


@pytest.fixture(scope="module")
def app(space_runs_dir):
    with serving(space_runs_dir, LIMITS) as served:
        url = served[0]
        config = httpx.get(f"{url}config", timeout=30).json()
        deps = {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")}
        yield (*served, deps)


def visitor(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60)


def body(deps, name, data, session):
    dep = deps[name]
    data = list(data) + [None] * (len(dep["inputs"]) - len(data))
    return {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": None, "trigger_id": None}


def join(http, url, deps, name, data, session, **kw) -> httpx.Response:
    return http.post(f"{url}gradio_api/queue/join", json=body(deps, name, data, session), **kw)


def result(http, url, session, event_id, timeout=60.0):
    """The output of one joined event, read from its session's stream."""
    deadline = time.monotonic() + timeout
    with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if msg.get("event_id") == event_id and msg.get("msg") == "process_completed":
                    return msg["output"].get("data")
            if time.monotonic() > deadline:
                break
    raise TimeoutError(event_id)


@pytest.fixture
def held_compare(app, monkeypatch):
    """Compare that holds until released, recording who asked: A's events stay waiting or running."""
    url, controller, demo, deps = app
    release, callers = threading.Event(), []

    def compare(name, prompt, n, max_new, temperature, top_p, seed, caller):
        callers.append(caller)
        release.wait(60)
        return {"error": "held"}

    monkeypatch.setattr(controller, "compare", compare)
    yield release, callers
    release.set()


def test_one_visitors_flood_fills_only_its_own_places(app, held_compare):
    """Visitor A re-joins /compare from one address, rotating a forged X-Forwarded-For: only its first 3 events
    (``max_events_per_visitor``) get a place, the rest are refused with 429 and a message; visitor B's page load,
    Start and Compare are never turned away. Once A's events end, A is let in again."""
    url, controller, demo, deps = app
    release, callers = held_compare
    compare = ["some-run", "This movie was", 1, 0]
    with visitor(A) as a, visitor(B) as b:
        codes = [
            join(a, url, deps, "compare", compare, "a", headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code
            for i in range(70)
        ]
        assert codes[:3] == [200] * 3 and set(codes[3:]) == {429}, codes
        refused = join(a, url, deps, "compare", compare, "a")
        assert refused.status_code == 429 and "at most 3" in refused.json()["detail"]
        # B: the page loads (unqueued), its Start is answered, its Compare takes a place behind A's
        loaded = b.post(f"{url}gradio_api/run/predict", json=body(deps, "page_load", ["b-client"], "b"))
        assert loaded.status_code == 200 and loaded.json()["data"][0] == "b-client"
        form = defaults() | {"variance_every": 1}  # refused by the limits: no run starts
        start = join(b, url, deps, "train_start", ["b-client", *[form[f] for f in FORM_FIELDS]], "b")
        assert start.status_code == 200, start.text
        assert f"**{t('en', FIELD['variance_every'].label)}**" in result(b, url, "b", start.json()["event_id"])[2]
        behind = join(b, url, deps, "compare", compare, "b")
        assert behind.status_code == 200
        assert {c.host for c in callers} == {A}  # the forged header made A no one else
        release.set()
        deadline = time.monotonic() + 60
        while (again := join(a, url, deps, "compare", compare, "a2")).status_code != 200:  # A's events end
            assert time.monotonic() < deadline, "A's places never came free"
            time.sleep(0.1)
        assert result(b, url, "b", behind.json()["event_id"]) == [{"error": "held"}]
        assert result(a, url, "a2", again.json()["event_id"]) == [{"error": "held"}]  # the queue is left empty


def test_behind_a_trusted_proxy_the_forwarded_visitor_counts(app, held_compare):
    """From the trusted proxy, the rightmost forwarded hop that is no proxy is the visitor: a forged left part
    changes nothing, another forwarded address is someone else, and a caller that is no proxy cannot use it."""
    url, controller, demo, deps = app
    release, callers = held_compare
    compare = ["some-run", "This movie was", 1, 0]
    with visitor(PROXY) as proxy, visitor(B) as b:
        codes = [
            join(proxy, url, deps, "compare", compare, f"p{i}", headers={"X-Forwarded-For": f"9.9.9.{i}, 198.51.100.1"})
            for i in range(5)
        ]
        assert [r.status_code for r in codes] == [200, 200, 200, 429, 429]
        other = {"X-Forwarded-For": "198.51.100.1, 198.51.100.2"}
        assert join(proxy, url, deps, "compare", compare, "q", headers=other).status_code == 200
        forged = {"X-Forwarded-For": "198.51.100.1"}  # B is no proxy: it stays B
        assert join(b, url, deps, "compare", compare, "r", headers=forged).status_code == 200
        release.set()
        deadline = time.monotonic() + 30
        while len(callers) < 5:
            assert time.monotonic() < deadline, callers
            time.sleep(0.05)
        assert sorted(c.host for c in callers) == ["127.0.0.3"] + ["198.51.100.1"] * 3 + ["198.51.100.2"]


def test_what_the_app_never_needs_is_closed(app):
    """Uploads (403, naming no path), gradio's monitoring pages (404), and every way around the queue except the
    page's own unqueued events."""
    url, controller, demo, deps = app
    with visitor(A) as a:
        upload = a.post(f"{url}gradio_api/upload", files={"files": ("x.bin", b"x")})
        assert upload.status_code == 403 and "/tmp" not in upload.text and "uploads" in upload.json()["detail"]
        for path in ("monitoring", "monitoring/summary", "monitoring/anykey"):
            assert a.get(f"{url}{path}").status_code == 404, path
        assert a.post(f"{url}gradio_api/call/list_runs", json={"data": []}).status_code == 404
        # a queued event called directly (around the queue and its admission): gradio's api_open=False refuses it
        for name in ("list_runs", "compare_sample", "runs_details"):
            direct = a.post(f"{url}gradio_api/run/{name}", json=body(deps, name, [], "d"))
            assert direct.status_code == 404, (name, direct.text)
        tick = body(deps, "page_tick", ["cid", None, -1, 0.6, -1, True, None, "train"], "d")
        assert a.post(f"{url}gradio_api/run/predict", json=tick).status_code == 200  # how the page ticks
        big = {"data": ["x" * (2 << 20)], "fn_index": deps["list_runs"]["id"], "session_hash": "d"}
        assert a.post(f"{url}gradio_api/queue/join", json=big).status_code == 413


def test_over_rate_reads_are_refused_before_gradio_and_admitted_ones_counted_once(space_runs_dir, monkeypatch):
    """Reads (the API's lists, rollouts and polls, and the page tick) count against one allowance per visitor, in
    the middleware: with 12 reads a minute a visitor holds 2 (10 s worth). A's first two list_runs reach the handler
    and answer a list (counted once each: a second count in the handler would refuse the second); the third, and
    A's page tick, are refused with 429 before gradio queues them (the handler never runs); B is untouched."""
    limits = replace(LIMITS, reads_per_minute=12)
    with serving(space_runs_dir, limits) as (url, controller, demo):
        config = httpx.get(f"{url}config", timeout=30).json()
        deps = {d["api_name"]: d for d in config["dependencies"] if d.get("api_name")}
        served = []
        original = controller.reader.list_runs
        monkeypatch.setattr(controller.reader, "list_runs", lambda: served.append(1) or original())
        tick = lambda session: body(deps, "page_tick", ["cid", None, -1, 0.6, -1, True, None, "train"], session)  # noqa: E731
        with visitor(A) as a, visitor(B) as b:
            answers = []
            for i in range(2):
                joined = join(a, url, deps, "list_runs", [], f"a{i}")
                assert joined.status_code == 200, joined.text
                answers.append(result(a, url, f"a{i}", joined.json()["event_id"])[0])
            assert all(isinstance(x, list) for x in answers), answers
            refused = join(a, url, deps, "list_runs", [], "a2")
            assert refused.status_code == 429 and "too many reads: 12 a minute" in refused.json()["detail"]
            ticked = a.post(f"{url}gradio_api/run/predict", json=tick("a3"))
            assert ticked.status_code == 429 and "too many reads" in ticked.json()["detail"]
            assert served == [1, 1]  # the refused read never reached the handler
            assert "a3" not in demo.server_app.state_holder.session_data  # nor built a session
            joined = join(b, url, deps, "list_runs", [], "b0")
            assert joined.status_code == 200 and isinstance(result(b, url, "b0", joined.json()["event_id"])[0], list)
            assert b.post(f"{url}gradio_api/run/predict", json=tick("b1")).status_code == 200
            assert served == [1, 1, 1]


def _cache_bytes(demo) -> int:
    root = Path(demo.GRADIO_CACHE)
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def test_a_training_runs_downloads_wait_for_its_end_and_a_finished_runs_are_copied_once(app, space_runs_dir):
    url, controller, demo, deps = app
    training = RunFolder.create(RunConfig(output_dir=str(space_runs_dir), run_name="still-training"))
    done = RunFolder.create(RunConfig(output_dir=str(space_runs_dir), run_name="all-done"))
    done.append_metrics({"step": 1, "reward": 0.5})
    done.set_status("finished")
    with visitor(B) as b:

        def details(name):
            joined = join(b, url, deps, "runs_details", [name], "runs")
            assert joined.status_code == 200, joined.text
            return result(b, url, "runs", joined.json()["event_id"])

        listed = join(b, url, deps, "runs_refresh", [[], None], "runs")  # the page lists the runs first
        result(b, url, "runs", listed.json()["event_id"])
        before = _cache_bytes(demo)
        for step in range(1, 6):  # a page selecting the run again while it trains copies nothing
            training.append_metrics({"step": step, "reward": 0.1 * step})
            downloads, command, config_text, message = details("still-training")
            assert downloads is None and "ready once the run has finished" in message
            assert "python -m rloo_demo" in command and config_text  # the rest of the details still show
        assert _cache_bytes(demo) == before
        first = details("all-done")[0]
        assert {f["orig_name"] for f in first} >= {"all-done-metrics.csv", "all-done-config.yaml"}
        grown = _cache_bytes(demo)
        assert grown > before
        again = details("all-done")[0]
        assert [f["path"] for f in again] == [f["path"] for f in first] and _cache_bytes(demo) == grown
        served = b.get(f"{url}gradio_api/file={first[0]['path']}")
        assert served.status_code == 200 and served.content


def test_an_idle_session_is_forgotten_and_a_busy_one_kept(app):
    """Each browser session costs gradio a copy of the page's config; one idle past ``session_seconds`` (1 s
    here) is dropped, whole, while a page that ticks keeps its own."""
    url, controller, demo, deps = app
    sessions = demo.server_app.state_holder.session_data
    tick = lambda session: body(deps, "page_tick", ["cid", None, -1, 0.6, -1, True, None, "train"], session)  # noqa: E731
    with visitor(B) as b:
        for session in ("idle", "ticking"):
            assert b.post(f"{url}gradio_api/run/predict", json=tick(session)).status_code == 200
        assert "idle" in sessions and "ticking" in sessions
        deadline = time.monotonic() + 30
        while "idle" in sessions:
            assert time.monotonic() < deadline, "the idle session was never dropped"
            assert b.post(f"{url}gradio_api/run/predict", json=tick("ticking")).status_code == 200
            time.sleep(0.1)
        assert "ticking" in sessions
        # the session was built lazily: a config only for the blocks its ticks wrote, and a deep link still works
        built = dict.__len__(sessions["ticking"].config_values)
        assert type(demo.server_app.state_holder).__name__ == "LazyStateHolder"
        assert built < len(demo.blocks) / 4, (built, len(demo.blocks))
        assert b.get(f"{url}gradio_api/deep_link", params={"session_hash": "ticking"}).status_code == 200
        assert dict.__len__(sessions["ticking"].config_values) >= len(demo.blocks) / 2  # built whole when asked


def test_public_launch_settings_bound_sessions_and_close_monitoring():
    from rloo_demo.server.limits import LOCAL
    from rloo_demo.ui.app import PUBLIC_SESSIONS, launch_options

    public = launch_options(PUBLIC)
    assert public["state_session_capacity"] == PUBLIC_SESSIONS and public["enable_monitoring"] is False
    assert public["run_history"] is False and public["max_file_size"] == 1 and public["ssr_mode"] is False
    assert "lifespan" in public["app_kwargs"] and public["app_kwargs"]["middleware"]
    local = launch_options(LOCAL)
    assert "state_session_capacity" not in local  # gradio's default
    assert "lifespan" in local["app_kwargs"]  # lazy sessions, none dropped


def test_a_refused_read_is_held_before_its_answer_up_to_four_a_visitor():
    """A client looping on a refused read would send hundreds a second (840 from 8 readers, 0.22 of a core); each
    refusal is answered after ``REFUSAL_DELAY`` instead, at most ``MAX_DELAYED`` held per visitor (the rest answered
    at once). Driven as ASGI, with the middleware's sleep held by the test instead of timed."""
    import asyncio

    from rloo_demo.server import admission
    from rloo_demo.server.gates import ReadGate

    limits = replace(PUBLIC, reads_per_minute=6)  # an allowance of one read
    reached, slept = [], []

    async def inner(scope, receive, send):
        reached.append(scope["client"][0])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    from test_admission_asgi import request  # the ASGI request the middleware's own tests send

    async def call(middleware, address):
        body = json.dumps({"fn_index": 1, "data": []}).encode()
        return (await request(middleware, admission.JOIN, body, client=address)).status

    async def run():
        release = asyncio.Event()

        async def sleep(seconds):
            slept.append(seconds)
            await release.wait()

        middleware = admission.Admission(
            inner,
            limits=limits,
            kind_of=lambda app, fn_index, api_name: "reads",
            queued=lambda app, visitor, kind: 0,
            read_kinds=frozenset({"reads"}),
            reads=ReadGate(limits),
        )
        middleware.sleep = sleep
        assert await call(middleware, A) == 200  # A's one read
        held = [asyncio.create_task(call(middleware, A)) for _ in range(admission.MAX_DELAYED)]
        for _ in range(1000):  # let the held ones reach their sleep (a few turns of the loop)
            if len(slept) >= admission.MAX_DELAYED or all(t.done() for t in held):
                break
            await asyncio.sleep(0)
        assert not any(t.done() for t in held)  # refused, and held before the answer
        # one more is answered at once (a guard, not a timing: held, it would wait for the release below for ever)
        assert await asyncio.wait_for(call(middleware, A), timeout=5) == 429
        assert len(slept) == admission.MAX_DELAYED
        assert await asyncio.wait_for(call(middleware, B), timeout=5) == 200  # another visitor: its own allowance
        release.set()
        assert [await asyncio.wait_for(t, timeout=5) for t in held] == [429] * admission.MAX_DELAYED
        assert not middleware.held and slept == [admission.REFUSAL_DELAY] * admission.MAX_DELAYED

    asyncio.run(run())
    assert reached == [A, B]  # only the two admitted reads reached gradio
