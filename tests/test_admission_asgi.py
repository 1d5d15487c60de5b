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
    messages = iter(messages)
    sent = []

    async def receive():
        return next(messages, {"type": "http.disconnect"})

    async def send(message):
        sent.append(message)

    await m(scope, receive, send)
    status = next((s["status"] for s in sent if s["type"] == "http.response.start"), None)
    headers = dict(next((s["headers"] for s in sent if s["type"] == "http.response.start"), []))
    body = b"".join(s.get("body", b"") for s in sent if s["type"] == "http.response.body")
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
