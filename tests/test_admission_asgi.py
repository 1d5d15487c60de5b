"""The admission middleware (server/admission.py) driven as ASGI, without gradio: what each request is answered,
with the status, the body and the headers written out here; which visitor it is stamped with; what the app behind
it receives; and how places are counted while a join waits for its answer and while a direct call runs."""

import asyncio
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from rloo_demo.server import admission
from rloo_demo.server.admission import JOIN, MAX_BODY_BYTES, READ_STATE, VISITOR_STATE, Admission
from rloo_demo.server.gates import ReadGate
from rloo_demo.server.limits import LOCAL, PUBLIC


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


def middleware(limits, app=None, kinds=None, queued=None, read_kinds=frozenset()):
    seen = []

    def kind_of(gradio_app, fn_index, api_name):
        seen.append((fn_index, api_name))
        return (kinds or {}).get(fn_index if fn_index is not None else api_name)

    m = Admission(
        app or App(), limits=limits, kind_of=kind_of, queued=queued or (lambda a, v, k: 0), read_kinds=read_kinds,
        reads=ReadGate(limits), refusal_delay=0,
    )
    m.seen = seen
    return m


async def request(m, path, body=b"", method="POST", client="10.0.0.5", headers=(), root_path="", chunks=None):
    scope = {"type": "http", "method": method, "path": path, "headers": list(headers), "client": (client, 4000),
             "root_path": root_path}
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
        ("/gradio_api/call/predict", "POST", 404,
         "this server takes API calls through gradio_client (it joins the queue)"),
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
    (scope, message), = m.app.calls
    assert message == {"type": "http.request", "body": body, "more_body": False}
    assert m.seen == [(3, None)]


@pytest.mark.parametrize(
    "body, seen",
    [(b"not json", []), (b"[1, 2]", []), (json.dumps({"fn_index": True}).encode(), []),
     (json.dumps({"fn_index": "3"}).encode(), [])],
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


def test_without_a_cap_or_a_read_rate_nothing_is_read_or_counted():
    m = middleware(replace(LOCAL, max_events_per_visitor=None, reads_per_minute=None), kinds={1: "compare"})
    got = run(request(m, JOIN, join_body(1)))
    assert got.status == 200 and m.seen == [] and m.pending == {}


def test_a_visitor_at_its_cap_is_refused_with_the_count_and_others_are_not():
    limits = replace(PUBLIC, max_events_per_visitor=2)
    waiting = {("10.0.0.5", "compare"): 2, ("10.0.0.6", "compare"): 1}
    m = middleware(limits, kinds={1: "compare", 2: "train"}, queued=lambda a, v, k: waiting.get((v, k), 0))
    got = run(request(m, JOIN, join_body(1)))
    message = ("you already have 2 requests of this kind waiting or running; this server takes at most 2 at a time "
               "from one visitor: wait for one to finish, then try again")
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


def test_an_admitted_read_is_stamped_and_one_over_the_rate_is_refused_at_once_here():
    limits = replace(PUBLIC, reads_per_minute=6)  # an allowance of one read
    m = middleware(limits, kinds={5: "reads", 6: "compare"}, read_kinds=frozenset({"reads"}))
    first = run(request(m, JOIN, join_body(5)))
    assert first.status == 200 and m.app.calls[-1][0]["state"][READ_STATE] is True
    refused = run(request(m, JOIN, join_body(5)))
    assert refused.status == 429 and refused.headers[b"retry-after"] == b"1"
    assert json.loads(refused.body)["detail"] == json.loads(refused.body)["error"]
    other = run(request(m, JOIN, join_body(6)))  # not a read: no allowance spent, no stamp
    assert other.status == 200 and READ_STATE not in m.app.calls[-1][0]["state"]


def test_the_request_state_helpers_read_what_the_middleware_wrote():
    state = SimpleNamespace(**{VISITOR_STATE: "10.0.0.9", READ_STATE: True})
    assert admission.stamped_visitor(state) == "10.0.0.9" and admission.read_admitted(state)
    assert admission.stamped_visitor(SimpleNamespace(**{VISITOR_STATE: 7})) is None
    assert admission.stamped_visitor(None) is None and admission.stamped_visitor(SimpleNamespace()) is None
    assert not admission.read_admitted(SimpleNamespace(**{READ_STATE: "yes"})) and not admission.read_admitted(None)


def test_the_middleware_counts_reads_with_the_gate_it_is_given_or_one_of_its_own():
    limits = replace(PUBLIC, reads_per_minute=6)
    shared = ReadGate(limits)
    given = Admission(App(), limits=limits, kind_of=lambda *a: None, queued=lambda *a: 0, reads=shared)
    assert given.reads is shared
    own = Admission(App(), limits=limits, kind_of=lambda *a: None, queued=lambda *a: 0)
    assert isinstance(own.reads, ReadGate) and own.reads is not shared and own.reads.limits is limits
    shared.admit("10.0.0.5")  # the controller spent the visitor's one read: the middleware that shares it refuses
    m = middleware(limits, kinds={5: "reads"}, read_kinds=frozenset({"reads"}))
    m.reads = shared
    assert run(request(m, JOIN, join_body(5))).status == 429
    assert run(request(m, JOIN, join_body(5), client="10.0.0.6")).status == 200


def test_each_held_refusal_is_counted_until_its_own_answer():
    """Two refusals of one visitor held at once: when the first is answered the count is one, not zero, and the
    visitor's entry goes only when the last is answered. A delay of 0 holds nothing."""
    limits = replace(PUBLIC, reads_per_minute=6)  # an allowance of one read

    async def scenario():
        m = middleware(limits, kinds={5: "reads"}, read_kinds=frozenset({"reads"}))
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


def test_the_cap_applies_without_a_read_rate_and_counts_gradios_events_of_the_app_in_the_scope(caplog):
    limits = replace(PUBLIC, max_events_per_visitor=2, reads_per_minute=None)
    gradio_app, asked = object(), []
    m = middleware(limits, kinds={1: "compare"}, queued=lambda a, v, k: asked.append((a, v, k)) or 2)
    caplog.set_level("INFO", logger="rloo_demo.server.admission")
    status, _, _ = run(call_with(m, http(JOIN, app=gradio_app), [{"type": "http.request", "body": join_body(1)}]))
    assert status == 429 and asked == [(gradio_app, "10.0.0.5", "compare")]
    assert [r.getMessage() for r in caplog.records] == [
        "refused a /gradio_api/queue/join from 10.0.0.5: 2 of its events of this kind are waiting or running"
    ]


def test_without_a_cap_gradios_queue_is_not_asked_and_kinds_get_the_app_in_the_scope():
    limits = replace(PUBLIC, max_events_per_visitor=None, reads_per_minute=120)
    gradio_app, kinds_asked = object(), []
    m = Admission(App(), limits=limits, kind_of=lambda a, f, n: kinds_asked.append(a) or "compare",
                  queued=lambda *a: pytest.fail("gradio's queue was asked with no cap set"), reads=ReadGate(limits))
    assert run(call_with(m, http(JOIN, app=gradio_app), [{"type": "http.request", "body": join_body(1)}]))[0] == 200
    assert kinds_asked == [gradio_app]


def test_a_visitor_with_no_address_reads_as_anonymous_and_a_scope_without_headers_is_read():
    limits = replace(PUBLIC, reads_per_minute=6)
    m = middleware(limits, kinds={5: "reads"}, read_kinds=frozenset({"reads"}))
    scope = http(JOIN, client=None)
    del scope["headers"]
    status, _, _ = run(call_with(m, scope, [{"type": "http.request", "body": join_body(5)}]))
    assert status == 200 and scope["state"][VISITOR_STATE] is None
    assert set(m.reads._allowance) == {"anonymous"}


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
        direct = asyncio.create_task(call_with(m, http("/gradio_api/run/compare"), [{"type": "http.request",
                                                                                     "body": b"{}"}]))
        assert await until(lambda: len(app.starts) == 3)
        app.starts[2].set()
        await until(lambda: False, turns=50)  # the direct call's answer has started, and not ended
        counts["direct answering"] = dict(m.pending)
        app.ends[2].set()
        await answered(direct)
        counts["direct ended"] = dict(m.pending)
        return counts

    assert run(scenario()) == {
        "two waiting": {key: 2}, "one answering": {key: 1}, "one ended": {key: 1}, "both ended": {},
        "direct answering": {key: 1}, "direct ended": {},
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
        status, body, _ = await call_with(m, http(JOIN), [{"type": "http.request", "body": join_body(1)},
                                                         {"type": "http.request", "body": b"late"}])
        m.app = reading_app  # a request the middleware does not count: replayed the same way
        _, other, _ = await call_with(m, http(JOIN), [{"type": "http.request", "body": b"not json"},
                                                     {"type": "http.request", "body": b"late"}])
        return status, body, other, second

    status, body, other, second = run(scenario())
    assert (status, body, other) == (200, join_body(1), b"not json")
    assert second == [{"type": "http.request", "body": b"late"}] * 2  # the client's next message, not the body again


def test_a_body_is_gathered_from_its_chunks_and_a_client_that_leaves_is_answered_413():
    m = middleware(replace(PUBLIC, max_events_per_visitor=3), kinds={1: "compare"})
    body = join_body(1)
    chunks = [{"type": "http.request", "more_body": True}, {"type": "http.request", "body": body[:5],
                                                            "more_body": True},
              {"type": "http.request", "body": body[5:]}]  # no body in the first, no more_body in the last
    assert run(call_with(m, http(JOIN), chunks))[0] == 200
    assert m.app.calls[-1][1] == {"type": "http.request", "body": body, "more_body": False}
    status, answer, _ = run(call_with(m, http(JOIN), [{"type": "http.disconnect"}]))
    assert (status, json.loads(answer)) == (413, {"detail": "this request is larger than this server takes"})
    assert len(m.app.calls) == 1


def test_a_public_body_over_the_limit_in_small_chunks_is_refused():
    m = middleware(replace(PUBLIC, max_events_per_visitor=3), kinds={1: "compare"})
    half = MAX_BODY_BYTES // 2 + 1
    chunks = [{"type": "http.request", "body": b" " * half, "more_body": True},
              {"type": "http.request", "body": b" " * half}]
    assert run(call_with(m, http(JOIN), chunks))[0] == 413
    assert m.app.calls == []


def test_a_direct_calls_api_name_is_its_last_path_part():
    m = middleware(replace(PUBLIC, max_events_per_visitor=3), kinds={"compareX": "compare"})
    assert run(call_with(m, http("/gradio_api/run/compareX/"), [{"type": "http.request", "body": b"{}"}]))[0] == 200
    assert m.seen == [(None, "compareX")]


def test_a_refused_read_is_held_by_asyncio_by_default():
    limits = replace(PUBLIC, reads_per_minute=6)
    m = Admission(App(), limits=limits, kind_of=lambda *a: "reads", queued=lambda *a: 0,
                  read_kinds=frozenset({"reads"}), refusal_delay=0.001)
    assert m.sleep is asyncio.sleep
    assert run(request(m, JOIN, join_body(5))).status == 200
    assert run(request(m, JOIN, join_body(5))).status == 429 and not m.held


def test_read_admitted_needs_the_stamp_itself():
    assert admission.read_admitted(SimpleNamespace()) is False
    assert admission.read_admitted(SimpleNamespace(**{READ_STATE: True})) is True
