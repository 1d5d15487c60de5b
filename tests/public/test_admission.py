"""A fair share for every visitor of a public server: admission before gradio's queue, closed routes,
bounded downloads and sessions, against the app as the image runs it (public mode).

Distinct loopback addresses stand for distinct visitors: 127.0.0.2 (A, who floods) and 127.0.0.3 (B, who only
uses the page); 127.0.0.4 stands for a trusted proxy, 127.0.0.5 for a page that only ticks.
``python -m pytest tests/public/test_admission.py`` (about 20 s).

The admission middleware (public/admission.py) driven as ASGI, without gradio: what each request is answered,
with the status, the body and the headers written out here; which visitor it is stamped with; what the app behind
it receives; and how places are counted while a join waits for its answer and while a direct call runs."""

import asyncio
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from apputil import free_port

from rloo_demo.config import RunConfig
from rloo_demo.i18n import t
from rloo_demo.public import admission
from rloo_demo.public.admission import ADMITTED_STATE, JOIN, MAX_BODY_BYTES, VISITOR_STATE, Admission
from rloo_demo.public.gates import EventGate
from rloo_demo.public.limits import LOCAL, PUBLIC
from rloo_demo.store.folder import RunFolder
from rloo_demo.ui.api import EVENT_COSTS
from rloo_demo.ui.forms import FIELD, FORM_FIELDS, defaults

# ----------------------------------------------------------------------------- admission


A, B, PROXY = "127.0.0.2", "127.0.0.3", "127.0.0.4"
TICKER = "127.0.0.5"  # a page that only ticks
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
    options = launch_options(limits, controller.events) | {"server_name": "127.0.0.1", "server_port": port}
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


def test_over_budget_events_are_refused_before_gradio_and_admitted_ones_counted_once(space_runs_dir, monkeypatch):
    """Every event (the API's lists, rollouts and polls, the page tick, any other) is charged its cost to one
    budget per visitor, in the middleware: here an allowance of two list_runs and a bit. A's first two list_runs
    reach the handler and answer a list (charged once each: a second charge in the handler would refuse the
    second); the third, and A's page tick, are refused with 429 before gradio queues them (the handler never runs);
    B is untouched."""
    cost = EVENT_COSTS["list_runs"]
    limits = replace(LIMITS, event_ms_per_minute=3 * (2 * cost + 0.5))  # an allowance of 2 calls + 0.5 ms
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
            assert refused.status_code == 429 and "too many requests" in refused.json()["detail"]
            ticked = a.post(f"{url}gradio_api/run/predict", json=tick("a3"))
            assert ticked.status_code == 429 and "too many requests" in ticked.json()["detail"]
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
    # a visitor of its own, ticking a little slower than its event budget refills: a page ticks at its own pace, and a
    # tick refused for the budget would not keep its session (on a slow machine the drop can take 10 s and more)
    pace = 1.2 * EVENT_COSTS["page_tick"] / (LIMITS.event_ms_per_minute / 60)
    assert pace < LIMITS.session_seconds / 2  # still often enough to keep the ticking session
    with visitor(TICKER) as b:
        for session in ("idle", "ticking"):
            assert b.post(f"{url}gradio_api/run/predict", json=tick(session)).status_code == 200
        assert "idle" in sessions and "ticking" in sessions
        deadline = time.monotonic() + 30
        while "idle" in sessions:
            assert time.monotonic() < deadline, "the idle session was never dropped"
            assert b.post(f"{url}gradio_api/run/predict", json=tick("ticking")).status_code == 200
            time.sleep(pace)
        assert "ticking" in sessions
        # the session was built lazily: a config only for the blocks its ticks wrote, and a deep link still works
        built = dict.__len__(sessions["ticking"].config_values)
        assert type(demo.server_app.state_holder).__name__ == "LazyStateHolder"
        assert built < len(demo.blocks) / 4, (built, len(demo.blocks))
        assert b.get(f"{url}gradio_api/deep_link", params={"session_hash": "ticking"}).status_code == 200
        assert dict.__len__(sessions["ticking"].config_values) >= len(demo.blocks) / 2  # built whole when asked


def test_public_launch_settings_bound_sessions_and_close_monitoring():
    from rloo_demo.public.limits import LOCAL
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

    from rloo_demo.public import admission
    from rloo_demo.public.gates import EventGate

    limits = replace(PUBLIC, event_ms_per_minute=3)  # an allowance of 1 ms: one event of cost 1
    reached, slept = [], []

    async def inner(scope, receive, send):
        reached.append(scope["client"][0])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

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
            events=EventGate(limits),
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


# ----------------------------------------------------------------------------- admission asgi


class App:
    """The app behind the middleware: records what reached it; ``gate`` holds its answer until the test opens it."""

    def __init__(self):
        self.calls = []
        self.gate = None

    async def __call__(self, scope, receive, send):
        message = await receive() if scope["type"] == "http" else None
        self.calls.append((scope, message))
        if self.gate is not None:
            await self.gate.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if self.gate is not None:
            await self.gate.wait()
        await send({"type": "http.response.body", "body": b"ok"})


def middleware(limits, app=None, kinds=None, queued=None, costs=None):
    """The middleware with ``kinds`` (fn_index or API name -> kind) and ``costs`` (fn_index -> milliseconds; 1 for
    the rest)."""
    seen = []

    def kind_of(gradio_app, fn_index, api_name):
        seen.append((fn_index, api_name))
        return (kinds or {}).get(fn_index if fn_index is not None else api_name)

    m = Admission(
        app or App(),
        limits=limits,
        kind_of=kind_of,
        queued=queued or (lambda a, v, k: 0),
        cost_of=lambda gradio_app, fn_index, api_name: (costs or {}).get(fn_index, 1.0),
        events=EventGate(limits),
        refusal_delay=0,
    )
    m.seen = seen
    return m


async def request(m, path, body=b"", method="POST", client="10.0.0.5", headers=(), root_path="", chunks=None):
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": list(headers),
        "client": (client, 4000),
        "root_path": root_path,
    }
    parts = chunks if chunks is not None else [body]
    messages = [{"type": "http.request", "body": c, "more_body": i < len(parts) - 1} for i, c in enumerate(parts)]
    status, body, sent = await call_with(m, scope, messages)
    headers = dict(next((s["headers"] for s in sent if s["type"] == "http.response.start"), []))
    return SimpleNamespace(status=status, headers=headers, body=body, scope=scope)


def run(coro):
    return asyncio.run(answered(coro))


# A guard, not a timing: in the unchanged code what it waits for comes within a few turns of the event loop; a
# broken middleware that never answers fails the test in GUARD seconds instead of hanging it (and every mutant
# run with it) for ever.
GUARD = 5.0


async def until(condition, turns=10_000) -> bool:
    """Let the event loop run until ``condition()`` holds, at most ``turns`` turns; whether it holds."""
    for _ in range(turns):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


async def answered(awaitable):
    return await asyncio.wait_for(awaitable, timeout=GUARD)


def join_body(fn_index):
    return json.dumps({"fn_index": fn_index, "data": [], "session_hash": "s"}).encode()


@pytest.mark.parametrize(
    "path, method, status, detail",
    [
        ("/monitoring", "GET", 404, "Not Found"),
        ("/monitoring/abc", "GET", 404, "Not Found"),
        ("/gradio_api/upload", "POST", 403, "this server takes no uploads"),
        ("/gradio_api/process_recording/", "POST", 403, "this server takes no uploads"),
        (
            "/gradio_api/call/predict",
            "POST",
            404,
            "this server takes API calls through gradio_client (it joins the queue)",
        ),
    ],
    ids=["monitoring", "monitoring-page", "upload", "recording", "call"],
)
def test_a_public_server_closes_what_the_app_never_needs(path, method, status, detail):
    m = middleware(PUBLIC)
    got = run(request(m, path, method=method))
    assert (got.status, json.loads(got.body)) == (status, {"detail": detail})
    assert got.headers[b"content-type"] == b"application/json"
    assert got.headers[b"content-length"] == str(len(got.body)).encode()
    assert m.app.calls == []
    local = middleware(LOCAL)  # a local server keeps them all
    assert run(request(local, path, method=method)).status == 200 and len(local.app.calls) == 1


def test_an_upload_read_by_get_and_a_mounted_path_are_told_apart():
    m = middleware(PUBLIC)
    assert run(request(m, "/gradio_api/upload", method="GET")).status == 200  # only a POST uploads
    got = run(request(m, "/space/monitoring", method="GET", root_path="/space"))  # mounted under a root path
    assert got.status == 404 and len(m.app.calls) == 1


def test_every_request_is_stamped_with_its_visitor_and_a_websocket_passes_untouched():
    proxied = replace(PUBLIC, trusted_proxies=("10.0.0.0/8",))
    m = middleware(proxied)
    got = run(request(m, "/", method="GET", headers=[(b"x-forwarded-for", b"203.0.113.9, 10.1.1.1")]))
    assert got.scope["state"][VISITOR_STATE] == "203.0.113.9"
    direct = run(request(middleware(PUBLIC), "/", method="GET", headers=[(b"x-forwarded-for", b"203.0.113.9")]))
    assert direct.scope["state"][VISITOR_STATE] == "10.0.0.5"  # a peer that is no trusted proxy is the visitor

    app = App()

    async def ws():
        await Admission(app, limits=PUBLIC, kind_of=None, queued=None)({"type": "websocket"}, None, None)

    with pytest.raises(TypeError):  # the fake app then sends to a None send: it was reached
        run(ws())
    assert app.calls == [({"type": "websocket"}, None)]  # as it was: no visitor stamped, nothing read


def test_a_join_reaches_the_app_with_its_body_whole_even_in_pieces():
    m = middleware(PUBLIC, kinds={3: "compare"})
    body = join_body(3)
    got = run(request(m, JOIN, chunks=[body[:5], body[5:]]))
    assert got.status == 200
    ((scope, message),) = m.app.calls
    assert message == {"type": "http.request", "body": body, "more_body": False}
    assert m.seen == [(3, None)]


@pytest.mark.parametrize(
    "body, seen",
    [
        (b"not json", []),
        (b"[1, 2]", []),
        (json.dumps({"fn_index": True}).encode(), []),
        (json.dumps({"fn_index": "3"}).encode(), []),
    ],
    ids=["syntax", "list", "bool-index", "text-index"],
)
def test_a_join_gradio_will_refuse_is_left_to_gradio(body, seen):
    m = middleware(PUBLIC, kinds={1: "compare"})
    assert run(request(m, JOIN, body)).status == 200 and m.seen == seen
    assert m.app.calls[0][1]["body"] == body


def test_a_direct_call_is_named_by_its_route():
    m = middleware(PUBLIC, kinds={"list_runs": "reads"})
    run(request(m, "/gradio_api/run/list_runs/", json.dumps({"data": []}).encode()))
    run(request(m, "/gradio_api/api/poll_metrics", json.dumps({"data": []}).encode()))
    assert m.seen == [(None, "list_runs"), (None, "poll_metrics")]


def test_a_public_body_over_the_limit_is_refused_and_a_local_one_is_not():
    big = b"x" * (MAX_BODY_BYTES + 1)
    got = run(request(middleware(PUBLIC, kinds={1: "compare"}), JOIN, big))
    assert (got.status, json.loads(got.body)) == (413, {"detail": "this request is larger than this server takes"})
    edge = run(request(middleware(PUBLIC), JOIN, b" " * MAX_BODY_BYTES))  # the limit itself is taken (and refused
    assert edge.status == 200  # by gradio as not JSON)
    assert run(request(middleware(replace(LOCAL, max_events_per_visitor=3)), JOIN, big)).status == 200


def test_without_a_cap_or_an_event_budget_a_local_server_reads_or_counts_nothing():
    m = middleware(replace(LOCAL, max_events_per_visitor=None, event_ms_per_minute=None), kinds={1: "compare"})
    got = run(request(m, JOIN, join_body(1)))
    assert got.status == 200 and m.seen == [] and m.pending == {}


def test_a_visitor_at_its_cap_is_refused_with_the_count_and_others_are_not():
    limits = replace(PUBLIC, max_events_per_visitor=2)
    waiting = {("10.0.0.5", "compare"): 2, ("10.0.0.6", "compare"): 1}
    m = middleware(limits, kinds={1: "compare", 2: "train"}, queued=lambda a, v, k: waiting.get((v, k), 0))
    got = run(request(m, JOIN, join_body(1)))
    message = (
        "you already have 2 requests of this kind waiting or running; this server takes at most 2 at a time "
        "from one visitor: wait for one to finish, then try again"
    )
    assert (got.status, json.loads(got.body)) == (429, {"detail": message, "error": message})
    assert got.headers[b"retry-after"] == b"2"
    assert run(request(m, JOIN, join_body(2))).status == 200  # another kind: places of its own
    assert run(request(m, JOIN, join_body(1), client="10.0.0.6")).status == 200  # another visitor: one left
    assert len(m.app.calls) == 2


def test_a_join_holds_its_place_until_gradio_answers_and_a_direct_call_until_it_ends():
    limits = replace(PUBLIC, max_events_per_visitor=1)

    async def scenario(path, body):
        app = App()
        app.gate = asyncio.Event()
        m = middleware(limits, app=app, kinds={1: "compare", "compare": "compare"})
        first = asyncio.create_task(request(m, path, body))
        assert await until(lambda: app.calls)
        held = dict(m.pending)
        second = await answered(request(m, path, body))  # while the first has not been answered
        app.gate.set()
        await answered(first)
        return held, second.status, dict(m.pending), (await answered(request(m, path, body))).status

    held, refused, after, again = run(scenario(JOIN, join_body(1)))
    assert held == {("10.0.0.5", "compare"): 1} and refused == 429 and after == {} and again == 200
    held, refused, after, again = run(scenario("/gradio_api/run/compare", json.dumps({"data": []}).encode()))
    assert held == {("10.0.0.5", "compare"): 1} and refused == 429 and after == {} and again == 200


def test_every_event_is_charged_its_cost_stamped_and_refused_at_once_when_the_budget_is_spent():
    """An allowance of 10 ms (30 a minute): events of two kinds draw on the one budget at their own costs, each
    admitted one is stamped; the one that finds too little left is refused with 429 before the app."""
    limits = replace(PUBLIC, event_ms_per_minute=30)
    m = middleware(limits, kinds={5: "reads", 6: "compare"}, costs={5: 4.0, 6: 5.0})
    for fn in (5, 6):  # 4 + 5 of 10
        got = run(request(m, JOIN, join_body(fn)))
        assert got.status == 200 and m.app.calls[-1][0]["state"][ADMITTED_STATE] is True
    assert m.events.left("10.0.0.5") == pytest.approx(1.0, abs=0.01)
    refused = run(request(m, JOIN, join_body(5)))  # 1 left, 4 needed
    assert refused.status == 429 and refused.headers[b"retry-after"] == b"1"
    assert json.loads(refused.body)["detail"] == json.loads(refused.body)["error"]
    assert "too many requests" in json.loads(refused.body)["detail"] and len(m.app.calls) == 2
    assert run(request(m, JOIN, join_body(5), client="10.0.0.6")).status == 200  # another visitor: its own


def test_in_public_mode_an_event_without_a_server_function_is_refused_here():
    """An event the page runs in the browser only (or one that does not exist) answers 404 here: gradio answered
    it with a 500 and a traceback in the log. A local server lets gradio answer it."""
    m = middleware(replace(PUBLIC, event_ms_per_minute=None, max_events_per_visitor=None), kinds={1: "compare"})
    got = run(request(m, JOIN, join_body(9)))
    assert (got.status, json.loads(got.body)) == (404, {"detail": "no such event", "error": "no such event"})
    assert run(request(m, "/gradio_api/run/js_fn", b"{}")).status == 404 and m.app.calls == []
    assert run(request(m, JOIN, join_body(1))).status == 200
    local = middleware(replace(LOCAL, max_events_per_visitor=3), kinds={1: "compare"})
    assert run(request(local, JOIN, join_body(9))).status == 200 and len(local.app.calls) == 1


def test_the_request_state_helpers_read_what_the_middleware_wrote():
    state = SimpleNamespace(**{VISITOR_STATE: "10.0.0.9", ADMITTED_STATE: True})
    assert admission.stamped_visitor(state) == "10.0.0.9" and admission.event_admitted(state)
    assert admission.stamped_visitor(SimpleNamespace(**{VISITOR_STATE: 7})) is None
    assert admission.stamped_visitor(None) is None and admission.stamped_visitor(SimpleNamespace()) is None
    assert not admission.event_admitted(SimpleNamespace(**{ADMITTED_STATE: "yes"}))
    assert not admission.event_admitted(None)


def test_the_middleware_charges_the_budget_it_is_given_or_one_of_its_own():
    limits = replace(PUBLIC, event_ms_per_minute=3)  # an allowance of 1 ms
    shared = EventGate(limits)
    given = Admission(App(), limits=limits, kind_of=lambda *a: None, queued=lambda *a: 0, events=shared)
    assert given.events is shared
    own = Admission(App(), limits=limits, kind_of=lambda *a: None, queued=lambda *a: 0)
    assert isinstance(own.events, EventGate) and own.events is not shared and own.events.limits is limits
    shared.admit("10.0.0.5", 1)  # the controller spent the visitor's allowance: the middleware that shares it refuses
    m = middleware(limits, kinds={5: "reads"})
    m.events = shared
    assert run(request(m, JOIN, join_body(5))).status == 429
    assert run(request(m, JOIN, join_body(5), client="10.0.0.6")).status == 200


def test_each_held_refusal_is_counted_until_its_own_answer():
    """Two refusals of one visitor held at once: when the first is answered the count is one, not zero, and the
    visitor's entry goes only when the last is answered. A delay of 0 holds nothing."""
    limits = replace(PUBLIC, event_ms_per_minute=3)  # an allowance of one event of cost 1

    async def scenario():
        m = middleware(limits, kinds={5: "reads"})
        m.refusal_delay = 2.5
        releases, slept = [], []

        async def sleep(seconds):
            slept.append(seconds)
            release = asyncio.Event()
            releases.append(release)
            await release.wait()

        m.sleep = sleep
        assert (await answered(request(m, JOIN, join_body(5)))).status == 200
        first = asyncio.create_task(request(m, JOIN, join_body(5)))
        second = asyncio.create_task(request(m, JOIN, join_body(5)))
        assert await until(lambda: len(releases) >= 2)
        counts = [dict(m.held)]
        releases[0].set()
        assert (await answered(first)).status == 429
        counts.append(dict(m.held))
        releases[1].set()
        assert (await answered(second)).status == 429
        counts.append(dict(m.held))
        m.refusal_delay = 0
        assert (await answered(request(m, JOIN, join_body(5)))).status == 429  # answered at once: no sleep
        return counts, slept

    counts, slept = run(scenario())
    assert counts == [{"10.0.0.5": 2}, {"10.0.0.5": 1}, {}]
    assert slept == [2.5, 2.5]


# ----------------------------------------------------------------------------- each path, each count, each default


async def call_with(m, scope, messages):
    """Send ``scope`` with ``messages`` (then disconnects) through the middleware; (status, body, sent)."""
    queue = iter(messages)
    sent = []

    async def receive():
        return next(queue, {"type": "http.disconnect"})

    async def send(message):
        sent.append(message)

    await answered(m(scope, receive, send))
    status = next((s["status"] for s in sent if s["type"] == "http.response.start"), None)
    return status, b"".join(s.get("body", b"") for s in sent if s["type"] == "http.response.body"), sent


def http(path=JOIN, method="POST", client=("10.0.0.5", 4000), **extra):
    return {"type": "http", "method": method, "path": path, "headers": [], "client": client, **extra}


class Steps:
    """An app whose every call answers in two steps the test opens: the response's start, then its end."""

    def __init__(self):
        self.starts, self.ends, self.received = [], [], []

    async def __call__(self, scope, receive, send):
        self.received.append(await receive())
        start, end = asyncio.Event(), asyncio.Event()
        self.starts.append(start)
        self.ends.append(end)
        await start.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await end.wait()
        await send({"type": "http.response.body", "body": b"ok"})


def test_what_is_not_http_reaches_the_app_with_its_own_receive_and_send():
    seen = []

    async def app(scope, receive, send):
        seen.append((scope["type"], receive, send))

    async def scenario():
        m = middleware(replace(PUBLIC, max_events_per_visitor=1), app=app)
        receive, send = object(), object()
        await answered(m({"type": "lifespan"}, receive, send))
        return receive, send

    receive, send = run(scenario())
    assert seen == [("lifespan", receive, send)]


def test_a_get_is_neither_a_join_nor_a_direct_call():
    limits = replace(PUBLIC, max_events_per_visitor=1)
    m = middleware(limits, kinds={1: "compare", "compare": "compare"}, queued=lambda a, v, k: 1)  # its place taken
    assert run(call_with(m, http(JOIN), [{"type": "http.request", "body": join_body(1)}]))[0] == 429
    for path in (JOIN, "/gradio_api/run/compare"):
        status, _, _ = run(call_with(m, http(path, method="GET"), [{"type": "http.request", "body": join_body(1)}]))
        assert status == 200, path
    assert m.seen == [(1, None)]  # only the POST was read for its kind


def test_the_cap_applies_without_an_event_budget_and_counts_gradios_events_of_the_app_in_the_scope(caplog):
    limits = replace(PUBLIC, max_events_per_visitor=2, event_ms_per_minute=None)
    gradio_app, asked = object(), []
    m = middleware(limits, kinds={1: "compare"}, queued=lambda a, v, k: asked.append((a, v, k)) or 2)
    caplog.set_level("INFO", logger="rloo_demo.public.admission")
    status, _, _ = run(call_with(m, http(JOIN, app=gradio_app), [{"type": "http.request", "body": join_body(1)}]))
    assert status == 429 and asked == [(gradio_app, "10.0.0.5", "compare")]
    assert [r.getMessage() for r in caplog.records] == [
        "refused a /gradio_api/queue/join from 10.0.0.5: 2 of its events of this kind are waiting or running"
    ]


def test_without_a_cap_gradios_queue_is_not_asked_and_kinds_get_the_app_in_the_scope():
    limits = replace(PUBLIC, max_events_per_visitor=None, event_ms_per_minute=120)
    gradio_app, kinds_asked, costs_asked = object(), [], []
    m = Admission(
        App(),
        limits=limits,
        kind_of=lambda a, f, n: kinds_asked.append(a) or "compare",
        queued=lambda *a: pytest.fail("gradio's queue was asked with no cap set"),
        cost_of=lambda a, f, n: costs_asked.append((a, f, n)) or 7.0,
        events=EventGate(limits),
    )
    assert run(call_with(m, http(JOIN, app=gradio_app), [{"type": "http.request", "body": join_body(1)}]))[0] == 200
    assert kinds_asked == [gradio_app] and costs_asked == [(gradio_app, 1, None)]
    assert m.events.left("10.0.0.5") == pytest.approx(40 - 7.0, abs=0.01)  # 120 a minute: an allowance of 40


def test_a_visitor_with_no_address_reads_as_anonymous_and_a_scope_without_headers_is_read():
    limits = replace(PUBLIC, event_ms_per_minute=3)
    m = middleware(limits, kinds={5: "reads"})
    scope = http(JOIN, client=None)
    del scope["headers"]
    status, _, _ = run(call_with(m, scope, [{"type": "http.request", "body": join_body(5)}]))
    assert status == 200 and scope["state"][VISITOR_STATE] is None
    assert set(m.events._allowance) == {"anonymous"}


def test_places_count_each_call_and_a_join_gives_its_place_back_once_at_its_answers_start():
    limits = replace(PUBLIC, max_events_per_visitor=5)
    key = ("10.0.0.5", "compare")

    async def scenario():
        app = Steps()
        m = middleware(limits, app=app, kinds={1: "compare", "compare": "compare"})
        body = [{"type": "http.request", "body": join_body(1)}]
        counts = {}
        first = asyncio.create_task(call_with(m, http(JOIN), body))
        second = asyncio.create_task(call_with(m, http(JOIN), body))
        assert await until(lambda: len(app.starts) == 2)
        counts["two waiting"] = dict(m.pending)
        app.starts[0].set()
        assert await until(lambda: m.pending.get(key) == 1)
        counts["one answering"] = dict(m.pending)
        app.ends[0].set()
        await answered(first)
        counts["one ended"] = dict(m.pending)  # the first gave its place back once, at its start
        app.starts[1].set()
        app.ends[1].set()
        await answered(second)
        counts["both ended"] = dict(m.pending)
        direct = asyncio.create_task(
            call_with(m, http("/gradio_api/run/compare"), [{"type": "http.request", "body": b"{}"}])
        )
        assert await until(lambda: len(app.starts) == 3)
        app.starts[2].set()
        await until(lambda: False, turns=50)  # the direct call's answer has started, and not ended
        counts["direct answering"] = dict(m.pending)
        app.ends[2].set()
        await answered(direct)
        counts["direct ended"] = dict(m.pending)
        return counts

    assert run(scenario()) == {
        "two waiting": {key: 2},
        "one answering": {key: 1},
        "one ended": {key: 1},
        "both ended": {},
        "direct answering": {key: 1},
        "direct ended": {},
    }


def test_the_app_reads_the_body_once_then_the_clients_own_messages():
    async def scenario():
        app = Steps()
        m = middleware(replace(PUBLIC, max_events_per_visitor=3), app=app, kinds={1: "compare"})
        second = []

        async def reading_app(scope, receive, send):
            first = await receive()
            second.append(await receive())
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": first["body"]})

        m.app = reading_app
        status, body, _ = await call_with(
            m, http(JOIN), [{"type": "http.request", "body": join_body(1)}, {"type": "http.request", "body": b"late"}]
        )
        m.app = reading_app  # a request the middleware does not count: replayed the same way
        _, other, _ = await call_with(
            m, http(JOIN), [{"type": "http.request", "body": b"not json"}, {"type": "http.request", "body": b"late"}]
        )
        return status, body, other, second

    status, body, other, second = run(scenario())
    assert (status, body, other) == (200, join_body(1), b"not json")
    assert second == [{"type": "http.request", "body": b"late"}] * 2  # the client's next message, not the body again


def test_a_body_is_gathered_from_its_chunks_and_a_client_that_leaves_is_answered_413():
    m = middleware(replace(PUBLIC, max_events_per_visitor=3), kinds={1: "compare"})
    body = join_body(1)
    chunks = [
        {"type": "http.request", "more_body": True},
        {"type": "http.request", "body": body[:5], "more_body": True},
        {"type": "http.request", "body": body[5:]},
    ]  # no body in the first, no more_body in the last
    assert run(call_with(m, http(JOIN), chunks))[0] == 200
    assert m.app.calls[-1][1] == {"type": "http.request", "body": body, "more_body": False}
    status, answer, _ = run(call_with(m, http(JOIN), [{"type": "http.disconnect"}]))
    assert (status, json.loads(answer)) == (413, {"detail": "this request is larger than this server takes"})
    assert len(m.app.calls) == 1


def test_a_public_body_over_the_limit_in_small_chunks_is_refused():
    m = middleware(replace(PUBLIC, max_events_per_visitor=3), kinds={1: "compare"})
    half = MAX_BODY_BYTES // 2 + 1
    chunks = [
        {"type": "http.request", "body": b" " * half, "more_body": True},
        {"type": "http.request", "body": b" " * half},
    ]
    assert run(call_with(m, http(JOIN), chunks))[0] == 413
    assert m.app.calls == []


def test_a_direct_calls_api_name_is_its_last_path_part():
    m = middleware(replace(PUBLIC, max_events_per_visitor=3), kinds={"compareX": "compare"})
    assert run(call_with(m, http("/gradio_api/run/compareX/"), [{"type": "http.request", "body": b"{}"}]))[0] == 200
    assert m.seen == [(None, "compareX")]


def test_a_refused_event_is_held_by_asyncio_by_default_and_costs_1_without_a_table():
    limits = replace(PUBLIC, event_ms_per_minute=3)  # an allowance of 1: one event at the default cost
    m = Admission(
        App(),
        limits=limits,
        kind_of=lambda *a: "reads",
        queued=lambda *a: 0,
        refusal_delay=0.001,
    )
    assert m.sleep is asyncio.sleep
    assert run(request(m, JOIN, join_body(5))).status == 200
    assert run(request(m, JOIN, join_body(5))).status == 429 and not m.held


def test_event_admitted_needs_the_stamp_itself():
    assert admission.event_admitted(SimpleNamespace()) is False
    assert admission.event_admitted(SimpleNamespace(**{ADMITTED_STATE: True})) is True


def test_two_addresses_of_one_ipv6_block_are_one_visitor_here():
    """An allowance of one event: a second address of the same /64 is refused as the same visitor and stamped
    with the block; an address of the next /64 is someone else."""
    limits = replace(PUBLIC, event_ms_per_minute=3)
    m = middleware(limits, kinds={5: "reads"})
    assert run(request(m, JOIN, join_body(5), client="2001:db8:1:2::1")).status == 200
    assert m.app.calls[-1][0]["state"][VISITOR_STATE] == "2001:db8:1:2::/64"
    assert run(request(m, JOIN, join_body(5), client="2001:db8:1:2:abcd::9")).status == 429
    assert run(request(m, JOIN, join_body(5), client="2001:db8:1:3::1")).status == 200


def test_a_visitors_places_of_one_kind_leave_its_places_of_another_kind_alone():
    """Two places a kind: A holds both of its compare places with calls still running; A's next compare is refused,
    while A's calls of two other kinds are let in, each with places of its own (and B's compare too). The count is
    per visitor and kind, never per visitor alone."""
    limits = replace(PUBLIC, max_events_per_visitor=2, event_ms_per_minute=None)

    async def scenario():
        app = App()
        app.gate = asyncio.Event()
        m = middleware(limits, app=app, kinds={"compare": "compare", "list": "reads", "tick": "tick"})
        body = json.dumps({"data": []}).encode()
        held = [asyncio.create_task(request(m, "/gradio_api/run/compare", body)) for _ in range(2)]
        assert await until(lambda: len(app.calls) == 2)
        refused = await answered(request(m, "/gradio_api/run/compare", body))
        others = [asyncio.create_task(request(m, f"/gradio_api/run/{name}", body)) for name in ("list", "tick")]
        theirs = asyncio.create_task(request(m, "/gradio_api/run/compare", body, client="10.0.0.6"))
        assert await until(lambda: len(app.calls) == 5)  # the other kinds' and B's reached the app
        pending = dict(m.pending)
        app.gate.set()
        statuses = [(await answered(t)).status for t in (*held, *others, theirs)]
        return refused.status, pending, statuses, dict(m.pending)

    refused, pending, statuses, after = run(scenario())
    assert refused == 429 and statuses == [200] * 5 and after == {}
    assert pending == {
        ("10.0.0.5", "compare"): 2,
        ("10.0.0.5", "reads"): 1,
        ("10.0.0.5", "tick"): 1,
        ("10.0.0.6", "compare"): 1,
    }
