"""The one place that touches gradio's private attributes, because gradio 6 has no setting for them: the queue's
polling, cheap skipped outputs, what the admission middleware needs to know of the queue (an event's kind, a
visitor's events held), browser sessions that build their copy of the page's config only when asked, and dropping
idle sessions.

``tests/ui/test_gradio_internals.py`` fails loudly when an upgrade renames them, so the tweak cannot silently stop
working (``quiet_queue`` itself only sets attributes that exist).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import inspect
import logging
import typing
from collections.abc import Mapping

import gradio as gr
from gradio.state_holder import SessionState, StateHolder

from rloo_demo.i18n import Message
from rloo_demo.public.admission import VISITOR_STATE

log = logging.getLogger(__name__)

# (attribute of gradio's Queue, value): what quiet_queue sets, and the test checks still exists.
QUEUE_SETTINGS = {
    # On Linux gradio's queue polls for new events every 1 ms and for progress updates every 10 ms: about a
    # thousand wake-ups a second, each taking the GIL from the training thread in this process (their cost when
    # idle: docs/benchmarks.md). Every 20 ms and 100 ms cost at most 20 ms of queueing latency.
    "sleep_when_free": 0.02,
    "progress_update_sleep_when_free": 0.1,
    # After every event gradio rebuilds a pandas table of up to 10,000 past events for its monitoring summary
    # (GRADIO_ANALYTICS_CACHE_FREQUENCY=1): a cost per page tick that grows with uptime. Once per 1,000 is enough.
    # (The misspelling is gradio's.)
    "ANAYLTICS_CACHE_FREQUENCY": 1000,
}


def quiet_queue(demo: gr.Blocks) -> list[str]:
    """Trim gradio's queue overheads that compete with the training thread for the GIL and the 2 cores. Call after
    ``demo.queue()``. Returns the attributes it set (those that exist in this gradio version)."""
    queue = getattr(demo, "_queue", None)
    done = []
    for name, value in QUEUE_SETTINGS.items():
        if queue is not None and hasattr(queue, name):
            setattr(queue, name, value)
            done.append(name)
    return done


SKIP = {"__type__": "update"}  # what gradio sends the page for an output an event leaves unchanged (gr.skip())


def cheap_skips(demo: gr.Blocks) -> None:
    """Make an output an event leaves out cost nothing.

    An event that returns a dict naming some of its outputs gets ``gr.skip()`` for the others, and gradio 6 then
    rebuilds each skipped component from its constructor arguments and re-serialises its config, for nothing: the
    page receives ``{"__type__": "update"}`` either way. The page tick has 24 outputs and, on an idle page, names
    3, so that rebuild was most of a tick's cost, CPU time holding the GIL the training thread needs
    (``scripts/bench_load.py``; docs/benchmarks.md). Here the named outputs go through gradio's own
    postprocessing and the others are sent as the same bare update, without the rebuild."""
    original = demo.postprocess_data

    async def postprocess_data(block_fn, predictions, state):
        outputs = list(block_fn.outputs)
        named = (
            isinstance(predictions, dict)
            and predictions
            and all(isinstance(k, gr.blocks.Block) for k in predictions)
            and len(outputs) > 1
            and not getattr(block_fn, "is_validator_function", False)
        )
        if not named:
            return await original(block_fn, predictions, state)
        ids = {b._id for b in predictions}
        keep = [i for i, b in enumerate(outputs) if b._id in ids]
        if len(keep) == len(outputs):
            return await original(block_fn, predictions, state)
        subset = copy.copy(block_fn)
        subset.outputs = [outputs[i] for i in keep]
        values = await original(subset, predictions, state) if keep else []
        result = [None if b.stateful else dict(SKIP) for b in outputs]  # gradio sends a state's None, as here
        for i, value in zip(keep, values, strict=True):
            result[i] = value
        return result

    demo.postprocess_data = postprocess_data


# ----------------------------------------------------------------------------- who is asking


def requests_left_out(demo: gr.Blocks) -> list[str]:
    """The events whose handler names a ``request`` parameter that gradio would not fill. gradio injects the request
    (``helpers.special_args``) only into a positional parameter annotated ``gr.Request``, before any ``*args``; any
    other ``request`` stays at its default (None), and every per-visitor rule then falls back to the client id the
    caller picked. Asked of gradio itself: its injection runs on a stand-in request, which must come back among the
    arguments. Returns ``"api_name (fn)"`` for each handler that would not get it."""
    from gradio.helpers import special_args

    missing = []
    for block_fn in demo.fns.values():
        fn = block_fn.fn
        if fn is None:
            continue
        try:
            names = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        if "request" not in names:
            continue
        sentinel = _StandInRequest()
        inputs, *_ = special_args(fn, inputs=[None] * len(block_fn.inputs), request=sentinel)
        if not any(value is sentinel for value in inputs):
            missing.append(f"{block_fn.api_name} ({getattr(fn, '__qualname__', fn)})")
    return missing


class _StandInRequest:
    """What ``requests_left_out`` hands gradio's injection in place of a request: it has no headers or session."""

    headers: dict = {}  # read only
    session = None


# ----------------------------------------------------------------------------- admission (public.admission)


def _block_fn(app, fn_index: int | None, api_name: str | None):
    """The event's function as gradio's ``route_utils.get_fn`` finds it (by index, else by API name), or None."""
    blocks = app.get_blocks() if app is not None else None
    fns = getattr(blocks, "fns", None) or {}
    return (
        fns.get(fn_index) if fn_index is not None else next((f for f in fns.values() if f.api_name == api_name), None)
    )


def event_kind(app, fn_index: int | None, api_name: str | None) -> str | None:
    """The kind of event a request asks for: its function's concurrency group (``concurrency_id``; a function
    without one is a group of its own). ``None`` where there is no such event, or where it has no server function
    (a step the browser runs itself: gradio answered a call of one with a 500 and a traceback)."""
    fn = _block_fn(app, fn_index, api_name)
    return None if fn is None or fn.fn is None else str(fn.concurrency_id)


def event_data_problem(app, fn_index: int | None, api_name: str | None, event_data) -> str | None:
    """Why gradio could not read an event's ``event_data`` (a select event sent without the selection), or None.
    gradio builds the handler's ``gr.SelectData`` (any ``gr.EventData``) before the handler runs, and event data
    it cannot read raised a TypeError there, a traceback in the server's log for every such call. Asked of
    gradio's own class: it is built here from what was sent."""
    from gradio.events import EventData

    fn = _block_fn(app, fn_index, api_name)
    if fn is None or fn.fn is None:
        return None
    try:
        hints = typing.get_type_hints(fn.fn)
    except Exception:  # noqa: BLE001 (annotations gradio could not read either: it passes no event data then)
        return None
    for hint in hints.values():
        if inspect.isclass(hint) and issubclass(hint, EventData):
            try:
                hint(None, event_data)
            except Exception:  # noqa: BLE001 (what gradio would have raised)
                return Message("admission.no_selection")
    return None


def event_cost(costs: Mapping[str, float], default: float):
    """``cost_of`` for the admission middleware: what an event costs the server, from ``costs`` by its API name
    (``ui.api.EVENT_COSTS``), ``default`` for one the table does not name."""

    def cost_of(app, fn_index: int | None, api_name: str | None) -> float:
        fn = _block_fn(app, fn_index, api_name)
        return costs.get(getattr(fn, "api_name", None) or api_name, default)

    return cost_of


def queued_events(app, visitor: str | None, kind: str) -> int:
    """How many events of ``kind`` from ``visitor`` gradio's queue holds, waiting or running. gradio keeps every
    event in ``Queue.event_ids_to_events`` from the join until its handler returns (or its page closes while it
    waits); each keeps the request that joined it, whose state carries the visitor the admission stamped."""
    blocks = app.get_blocks() if app is not None else None
    queue = getattr(blocks, "_queue", None)
    if queue is None:
        return 0
    count = 0
    for event in list(queue.event_ids_to_events.values()):
        if str(event.concurrency_id) != kind:
            continue
        scope = getattr(event.request, "scope", None) or {}
        if (scope.get("state") or {}).get(VISITOR_STATE, _NOBODY) == visitor:
            count += 1
    return count


_NOBODY = object()


# ----------------------------------------------------------------------------- sessions


def drop_idle_sessions(holder, idle_seconds: float, busy=frozenset()) -> int:
    """Forget the browser sessions of gradio's ``StateHolder`` unused for ``idle_seconds``: their states and their
    copy of the page's config (about 330 kB each), which gradio otherwise keeps until 10,000 newer sessions push
    them out (gr.State's ``time_to_live`` drops a state's value only, and counts from when it was set, not from
    the last use). ``busy``: sessions with events in the queue, kept. Returns how many were dropped."""
    cutoff = datetime.datetime.now() - datetime.timedelta(seconds=idle_seconds)
    with holder.lock:
        idle = [s for s, used in list(holder.time_last_used.items()) if used < cutoff and s not in busy]
    for session in idle:
        holder.delete_state(session)  # each gr.State's delete_callback, as gradio's own expiry calls it
        with holder.lock:
            holder.session_data.pop(session, None)
            holder.time_last_used.pop(session, None)
    return len(idle)


class _LazyConfigs(dict):
    """``SessionState.config_values`` built on demand. gradio builds, for every new session, each block's config
    (``config_for_block``: 230 blocks, about 32 ms, holding the GIL the training thread needs) only to have them
    should the session ask for a deep link. Here a block's config is built when it is read or iterated; a write
    (an event updating a component) stores only that block's. Reading it whole gives what gradio builds."""

    def __init__(self, blocks_config, keys: list[int]):
        super().__init__()
        self._source, self._keys = blocks_config, keys

    def __missing__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        value = self[key] = self._source.config_for_block(key, [], self._source.blocks[key])
        return value

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or key in self._keys

    def _whole(self) -> list:
        extra = [k for k in dict.keys(self) if k not in self._keys]
        return [k for k in self._keys if k in self._source.blocks] + extra  # gradio's order, then later ones

    def keys(self):
        return self._whole()

    def __iter__(self):
        return iter(self._whole())

    def __len__(self) -> int:
        return len(self._whole())

    def items(self):
        return [(k, self[k]) for k in self._whole()]

    def values(self):
        return [self[k] for k in self._whole()]


class _NoBlocks:
    """What ``SessionState.__init__`` reads of the Blocks, with no blocks to build configs for."""

    def __init__(self, blocks):
        self.default_config, self.blocks = blocks.default_config, {}


class LazySessionState(SessionState):
    """gradio's ``SessionState`` with its per-block configs built on demand (``_LazyConfigs``)."""

    def __init__(self, blocks):
        super().__init__(_NoBlocks(blocks))  # gradio's own set-up, less the eager configs
        keys = [k for k in self.blocks_config.blocks if k in blocks.blocks]
        self.config_values = _LazyConfigs(self.blocks_config, keys)


class LazyStateHolder(StateHolder):
    """gradio's ``StateHolder`` whose new sessions are ``LazySessionState``s (its ``__getitem__``, less the build)."""

    def __getitem__(self, session_id: str) -> SessionState:
        if session_id not in self.session_data:
            self.session_data[session_id] = LazySessionState(self.blocks)
        return super().__getitem__(session_id)


def lazy_sessions(holder: StateHolder) -> None:
    """Make the sessions ``holder`` creates from now on lazy (``LazyStateHolder``), keeping those it has."""
    if type(holder) is StateHolder:
        holder.__class__ = LazyStateHolder


def session_lifespan(idle_seconds: float | None):
    """A lifespan for gradio's app (``launch(app_kwargs={"lifespan": ...})``; gradio runs its own around it) that
    makes new sessions lazy (``lazy_sessions``) and, with ``idle_seconds``, drops idle sessions
    (``drop_idle_sessions``) every ``idle_seconds / 4``, at most every minute."""
    every = min(60.0, max(0.05, idle_seconds / 4)) if idle_seconds else None

    async def sweep(app):
        while True:
            await asyncio.sleep(every)
            queue = getattr(app.get_blocks(), "_queue", None)
            busy = frozenset(getattr(queue, "pending_event_ids_session", {}) or ())
            dropped = drop_idle_sessions(app.state_holder, idle_seconds, busy)
            if dropped:
                log.info("dropped %d idle sessions, %d kept", dropped, len(app.state_holder.session_data))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        lazy_sessions(app.state_holder)
        if every is None:
            yield
            return
        task = asyncio.create_task(sweep(app))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan
