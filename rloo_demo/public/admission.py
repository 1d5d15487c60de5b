"""Admission in front of gradio's queue: a fair share of the server for every visitor, decided when an event asks
to join, before it takes a place.

gradio's own bound on its queue (``max_size``) counts events, not visitors, and the per-visitor rates in
``public.gates`` run only once an event reaches its handler: one address re-joining a cheap, refused event kept
every place taken and turned everyone else away. ``Admission`` is an ASGI middleware inside gradio's app that
reads each request first:

- it works out the **visitor** (``limits.visitor_address``, with this server's trusted proxies) and stamps it on the
  request, where ``ui.common.caller_of`` reads it: one reading of who is asking for every per-visitor limit;
- a **queue join** (``POST /gradio_api/queue/join``) is refused with HTTP 429 and a JSON ``{"detail": ...}`` when the
  visitor already has ``Limits.max_events_per_visitor`` events of the same kind (gradio's concurrency group)
  waiting or running; a **direct call** (``POST /gradio_api/run/...``, the page's unqueued events) counts the same
  way while it runs. So the queue is bounded by visitors, and one visitor's flood fills only its own places;
- **every event** a visitor sends (a join or a direct call, of any kind) is charged to the visitor's one event budget
  (``public.gates.EventGate``, ``Limits.event_ms_per_minute``) at what it costs the server (``cost_of``: the page's
  table of measured costs) and refused with HTTP 429 once the budget is spent, before gradio builds a session,
  queues the event or opens its stream: a looping visitor costs the server a refusal (about 0.3 ms) instead of the
  event's 2-60 ms, CPU time holding the GIL the training thread in this process needs
  (``scripts/bench_events.py``). Counted per visitor, not per kind: one visitor rotating through the page's 55
  events has one budget, as one flooding a single event. The refusal is answered after ``REFUSAL_DELAY`` seconds,
  so a client looping on it makes one a second, not hundreds (8 looping readers sent 840 refusals a second, 0.22
  of a core), up to ``MAX_DELAYED`` held per visitor (beyond that it is answered at once: a held answer costs an
  open connection, not CPU). An admitted event is stamped (``ADMITTED_STATE``), so a handler that counts reads
  does not charge it again;
- in public mode, an event that has no server function (the page's browser-only steps) or that does not exist is
  refused with 404 here, and a select event sent without the selection's data with 400 (``event_data_problem``):
  gradio answered each with a 500 and a traceback in the log. These refusals are held as the budget's are (8
  visitors looping on unheld ones sent 6,000 a phase and slowed a step 1.6 times);
- in public mode, what this app never needs is closed: uploads (403), the ``/gradio_api/call/`` routes that
  enter the queue without a session (``gradio_client`` joins the queue itself; 404), gradio's ``/monitoring``
  pages (404), and request bodies over ``MAX_BODY_BYTES`` (413).

What an event's kind is and how many of a visitor's events gradio holds are gradio's business: the middleware asks
two functions it is given (``ui.gradio_internals``), so this module needs no gradio.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable

from rloo_demo.errors import RateLimited
from rloo_demo.public.gates import EventGate
from rloo_demo.public.limits import Limits, visitor_address

log = logging.getLogger(__name__)

VISITOR_STATE = "rloo_visitor"  # the key of the visitor's address in the request's state (ASGI scope["state"])
ADMITTED_STATE = "rloo_event_admitted"  # set in the request's state once the middleware charged it to the budget
REFUSAL_DELAY = 1.0  # seconds before an event over the budget is answered (its 429), unless MAX_DELAYED are held
MAX_DELAYED = 4  # refused events of one visitor held at once
MAX_BODY_BYTES = 1 << 20  # a public server's largest event request: every text field is capped far below this
API = "/gradio_api"
JOIN = f"{API}/queue/join"
DIRECT = (f"{API}/run/", f"{API}/api/")
UPLOADS = (f"{API}/upload", f"{API}/process_recording")

_MISSING = object()


def stamped_visitor(state) -> str | None:
    """The visitor the middleware stamped on a request (``request.state``), or ``None`` where there is none."""
    value = getattr(state, VISITOR_STATE, _MISSING) if state is not None else _MISSING
    return value if isinstance(value, str) else None


def event_admitted(state) -> bool:
    """Whether the middleware already charged this request (``request.state``) to its visitor's event budget."""
    return state is not None and getattr(state, ADMITTED_STATE, False) is True


class Admission:
    """The ASGI middleware (see the module's docstring). ``kind_of(app, fn_index, api_name)`` names the kind of
    event a request asks for (``None``: no such event, or none with a server function); ``queued(app, visitor,
    kind)`` counts the visitor's events of that kind gradio holds, waiting or running; ``cost_of(app, fn_index,
    api_name)`` is what the event costs, in milliseconds of the server's time (1 where none is given). ``app`` is
    gradio's app (``scope["app"]``). ``events`` is the budget every event is charged to (the controller's gate, so
    that a read reaching a handler some other way shares the same budget; a gate of its own where none is
    given)."""

    def __init__(
        self,
        app,
        *,
        limits: Limits,
        kind_of: Callable[[object, int | None, str | None], str | None],
        queued: Callable[[object, str | None, str], int],
        cost_of: Callable[[object, int | None, str | None], float] | None = None,
        event_data_problem: Callable[[object, int | None, str | None, object], str | None] | None = None,
        events: EventGate | None = None,
        refusal_delay: float = REFUSAL_DELAY,
    ):
        self.app = app
        self.refusal_delay = refusal_delay
        self.sleep = asyncio.sleep  # how a refusal is held (a test holds it with an event instead)
        self.held: Counter = Counter()  # refused events being held, per visitor
        self.cost_of = cost_of if cost_of is not None else (lambda app, fn_index, api_name: 1.0)
        self.event_data_problem = event_data_problem
        self.events = events if events is not None else EventGate(limits)
        self.cap = limits.max_events_per_visitor
        self.public = limits.public
        self.trusted = limits.trusted_proxies
        self.kind_of = kind_of
        self.queued = queued
        # joins let through whose answer has not started yet, and direct calls still running, per (visitor, kind)
        self.pending: Counter = Counter()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        visitor = self.visitor(scope)
        scope.setdefault("state", {})[VISITOR_STATE] = visitor
        route = _route(scope)
        post = scope.get("method") == "POST"
        if self.public:
            refusal = _closed(route, post)
            if refusal is not None:
                return await _answer(send, *refusal)
        join = post and route == JOIN
        direct = post and route.startswith(DIRECT)
        if not (join or direct) or (
            self.cap is None and self.events.limits.event_ms_per_minute is None and not self.public
        ):
            return await self.app(scope, receive, send)
        body = await _read_body(receive, MAX_BODY_BYTES if self.public else None)
        if body is None:  # the client went away, or sent more than a public server takes
            return await _answer(send, 413, {"detail": "this request is larger than this server takes"})
        kind, payload = self._kind(scope, body, route)
        if kind is None:
            if self.public and payload is not None:  # names an event the page has no server function for
                await self._hold(visitor)  # held as a refusal over the budget is: a loop on it makes one a second
                return await _answer(send, 404, {"detail": "no such event", "error": "no such event"})
            return await self.app(scope, _replay(body, receive), send)
        if self.public and self.event_data_problem is not None:
            problem = self.event_data_problem(scope.get("app"), *payload, _event_data(body))
            if problem is not None:  # gradio would raise reading it, with a traceback in the log
                await self._hold(visitor)
                return await _answer(send, 400, {"detail": problem, "error": problem})
        key = (visitor, kind)
        held = self.pending[key] + self.queued(scope.get("app"), visitor, kind) if self.cap is not None else 0
        if self.cap is not None and held >= self.cap:
            log.info("refused a %s from %s: %d of its events of this kind are waiting or running", route, visitor, held)
            message = (
                f"you already have {held} requests of this kind waiting or running; this server takes at most "
                f"{self.cap} at a time from one visitor: wait for one to finish, then try again"
            )
            return await _answer(send, 429, {"detail": message, "error": message}, retry_after=2)
        try:
            self.events.admit(visitor or "anonymous", self.cost_of(scope.get("app"), *payload))
        except RateLimited as exc:
            await self._hold(visitor)
            return await _answer(send, 429, {"detail": str(exc), "error": str(exc)}, retry_after=1)
        scope["state"][ADMITTED_STATE] = True
        self.pending[key] += 1
        released = False

        def release():
            nonlocal released
            if not released:
                released = True
                self.pending[key] -= 1
                if self.pending[key] <= 0:
                    del self.pending[key]

        async def sending(message):
            if join and message["type"] == "http.response.start":
                release()  # the event is in gradio's queue now (or was refused): gradio counts it from here
            await send(message)

        try:
            await self.app(scope, _replay(body, receive), sending)
        finally:
            release()

    async def _hold(self, visitor: str | None) -> None:
        """Wait ``refusal_delay`` before a refused event is answered, when fewer than ``MAX_DELAYED`` of this
        visitor's refusals are waiting already."""
        if self.refusal_delay <= 0 or self.held[visitor] >= MAX_DELAYED:
            return
        self.held[visitor] += 1
        try:
            await self.sleep(self.refusal_delay)
        finally:
            self.held[visitor] -= 1
            if self.held[visitor] <= 0:
                del self.held[visitor]

    def visitor(self, scope) -> str | None:
        client = scope.get("client")
        peer = client[0] if client else None
        forwarded = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-forwarded-for"]
        return visitor_address(peer, forwarded, self.trusted)

    def _kind(self, scope, body: bytes, route: str) -> tuple[str | None, tuple | None]:
        """``(kind, (fn_index, api_name))`` of the event a request names; ``(None, None)`` for a body that names
        none (gradio refuses it), ``(None, names)`` for an event that does not exist or has no server function."""
        try:
            payload = json.loads(body)
        except ValueError:
            return None, None  # gradio refuses it
        if not isinstance(payload, dict):
            return None, None
        fn_index = payload.get("fn_index")
        fn_index = fn_index if isinstance(fn_index, int) and not isinstance(fn_index, bool) else None
        api_name = route.rstrip("/").rsplit("/", 1)[-1] if route.startswith(DIRECT) else None
        if fn_index is None and api_name is None:
            return None, None
        return self.kind_of(scope.get("app"), fn_index, api_name), (fn_index, api_name)


def _event_data(body: bytes):
    """The ``event_data`` of a request body ``_kind`` already read as a JSON object."""
    return json.loads(body).get("event_data")


def _route(scope) -> str:
    """The request's path inside gradio's app (without a root path it is mounted under)."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path or "/"


def _closed(route: str, post: bool) -> tuple[int, dict] | None:
    """What a public server refuses whoever asks: (status, answer), or ``None``."""
    bare = route.rstrip("/")
    if bare == "/monitoring" or bare.startswith("/monitoring/"):
        return 404, {"detail": "Not Found"}
    if post and bare in UPLOADS:
        return 403, {"detail": "this server takes no uploads"}
    if post and bare.startswith(f"{API}/call/"):
        return 404, {"detail": "this server takes API calls through gradio_client (it joins the queue)"}
    return None


async def _read_body(receive, limit: int | None) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive):
    """A ``receive`` that hands the app the body already read, then whatever the client sends next (a disconnect)."""
    done = False

    async def replayed():
        nonlocal done
        if not done:
            done = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(send, status: int, payload: dict, retry_after: int | None = None) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
