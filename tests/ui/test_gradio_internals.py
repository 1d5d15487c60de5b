"""gradio's private queue attributes that ``rloo_demo.ui.gradio_internals`` tunes still exist and take effect.

If gradio renames them, this fails, instead of the tweak silently doing nothing. ``python -m pytest
tests/ui/test_gradio_internals.py``

Which path ``cheap_skips`` sends each kind of answer down, and what ``queued_events`` counts, with gradio's
own postprocessing and queue replaced by recorders: each test names the call gradio must receive (the event's
function or the subset of its outputs, and the session's state), not only what comes back."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import gradio as gr

from rloo_demo.public.admission import VISITOR_STATE
from rloo_demo.ui.gradio_internals import QUEUE_SETTINGS, SKIP, cheap_skips, queued_events, quiet_queue

# ----------------------------------------------------------------------------- gradio internals


def test_every_tuned_queue_attribute_exists_and_is_set():
    with gr.Blocks() as demo:
        gr.Markdown("x")
    demo.queue()
    queue = demo._queue
    missing = [name for name in QUEUE_SETTINGS if not hasattr(queue, name)]
    assert not missing, f"gradio no longer has {missing}: update rloo_demo/ui/gradio_internals.py"
    assert sorted(quiet_queue(demo)) == sorted(QUEUE_SETTINGS)
    for name, value in QUEUE_SETTINGS.items():
        assert getattr(queue, name) == value
    # the defaults differ, so setting them changed something
    fresh = gr.Blocks()
    fresh.queue()
    assert all(getattr(fresh._queue, name) != value for name, value in QUEUE_SETTINGS.items())


def _skip_demo():
    with gr.Blocks() as demo:
        plot, menu, note, box = gr.Plot(), gr.Dropdown(["a", "b"]), gr.Markdown("x"), gr.State(0)
        other = gr.State(5)  # a state the event leaves out
        button = gr.Button()
        button.click(lambda: {note: "y", box: 1}, None, [plot, menu, note, box, other])
    return demo, demo.fns[0], (plot, menu, note, box)


def test_cheap_skips_sends_what_gradio_sends_without_rebuilding_skipped_outputs(monkeypatch):
    import asyncio

    from gradio.state_holder import SessionState

    from rloo_demo.ui.gradio_internals import SKIP, cheap_skips

    demo, fn, (plot, menu, note, box) = _skip_demo()
    expected_state = SessionState(demo)
    expected = asyncio.run(demo.postprocess_data(fn, {note: "y", box: 1}, expected_state))
    assert expected[0] == SKIP and expected[1] == SKIP  # gradio's answer for the outputs left out

    built = []
    real_init = gr.Plot.__init__

    def counting_init(self, *args, **kwargs):
        built.append(type(self).__name__)
        real_init(self, *args, **kwargs)

    cheap_skips(demo)
    monkeypatch.setattr(gr.Plot, "__init__", counting_init)
    state = SessionState(demo)
    built.clear()
    got = asyncio.run(demo.postprocess_data(fn, {note: "y", box: 1}, state))
    assert got == expected  # the page receives the same thing
    assert state[box._id] == 1  # the state output is still stored
    assert built == []  # and the skipped Plot was not rebuilt (gradio rebuilds it: see below)
    demo2, fn2, (_, _, note2, box2) = _skip_demo()  # without the patch
    built.clear()
    asyncio.run(demo2.postprocess_data(fn2, {note2: "y", box2: 1}, SessionState(demo2)))
    assert built == ["Plot"]


def test_cheap_skips_leaves_lists_and_full_dicts_to_gradio():
    import asyncio

    from gradio.state_holder import SessionState

    from rloo_demo.ui.gradio_internals import cheap_skips

    demo, fn, (plot, menu, note, box) = _skip_demo()
    full = {plot: None, menu: "a", note: "z", box: 2, fn.outputs[4]: 6}
    expected = [asyncio.run(demo.postprocess_data(fn, p, SessionState(demo))) for p in ([None, "b", "w", 3, 4], full)]
    cheap_skips(demo)
    got = [asyncio.run(demo.postprocess_data(fn, p, SessionState(demo))) for p in ([None, "b", "w", 3, 4], full)]
    assert got == expected


def test_the_app_installs_cheap_skips():
    from rloo_demo.public.limits import LOCAL
    from rloo_demo.ui.app import prepare

    demo, _, _ = _skip_demo()
    before = demo.postprocess_data
    prepare(demo, LOCAL)
    assert demo.postprocess_data != before and demo.postprocess_data.__name__ == "postprocess_data"
    assert "cheap_skips" in demo.postprocess_data.__qualname__


ARENA_PROBE = """
import ctypes, sys, threading
if sys.argv[1] == "bound":
    from rloo_demo.public.malloc import bound_arenas
    assert bound_arenas()
barrier = threading.Barrier(8)
def work():  # eight threads allocating at once: each would get an arena of its own
    barrier.wait()
    keep = [bytearray(4096) for _ in range(2000)]
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ctypes.CDLL("libc.so.6").malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def test_the_app_bounds_malloc_arenas():
    """Request threads that allocate together each get a glibc arena that keeps what it freed (the server grew by
    hundreds of MB under load); the app keeps at most two."""
    import inspect
    import subprocess
    import sys

    from rloo_demo.public import malloc
    from rloo_demo.ui import app

    def arenas(mode):
        out = subprocess.run([sys.executable, "-c", ARENA_PROBE, mode], capture_output=True, text=True, check=True)
        return out.stderr.count("Arena ")

    assert arenas("free") > malloc.MALLOC_ARENAS  # without the bound, the probe does make more arenas
    assert arenas("bound") <= malloc.MALLOC_ARENAS
    assert "bound_arenas()" in inspect.getsource(app.main)


# ----------------------------------------------------------------------------- admission and sessions


def _queued_demo():
    with gr.Blocks() as demo:
        box = gr.Textbox()
        gr.Button().click(lambda x: x, box, box, api_name="slow", concurrency_id="sampling")
        gr.Button().click(lambda x: x, box, box, api_name="fast")
    demo.queue()
    return demo


def test_the_admission_reads_an_events_kind_and_a_visitors_held_events_from_gradio():
    """``event_kind`` and ``queued_events`` read gradio's ``Blocks.fns``, ``BlockFunction.concurrency_id`` and
    ``api_name``, ``Queue.event_ids_to_events`` and each ``Event``'s ``concurrency_id`` and ``request`` (the join's,
    with the visitor stamped in its scope's state): an upgrade that renames one fails here."""
    from types import SimpleNamespace

    from gradio.queueing import Event

    from rloo_demo.public.admission import VISITOR_STATE
    from rloo_demo.ui.gradio_internals import event_kind, queued_events

    demo = _queued_demo()
    app = SimpleNamespace(get_blocks=lambda: demo)
    slow, fast = (next(f for f in demo.fns.values() if f.api_name == name) for name in ("slow", "fast"))
    assert event_kind(app, slow._id, None) == "sampling" == event_kind(app, None, "slow")
    assert event_kind(app, fast._id, "ignored") == str(fast.concurrency_id) != "sampling"  # a group of its own
    assert event_kind(app, 999, None) is None and event_kind(app, None, "nothing") is None

    def request(visitor):
        return SimpleNamespace(scope={"state": {VISITOR_STATE: visitor}})

    queue = demo._queue
    for fn, who in ((slow, "1.1.1.1"), (slow, "1.1.1.1"), (fast, "1.1.1.1"), (slow, "2.2.2.2")):
        event = Event("session", fn, request(who), None)
        queue.event_ids_to_events[event._id] = event
    queue.event_ids_to_events["x"] = Event("s", slow, SimpleNamespace(scope={}), None)  # joined without a stamp
    assert queued_events(app, "1.1.1.1", "sampling") == 2 and queued_events(app, "2.2.2.2", "sampling") == 1
    assert queued_events(app, "1.1.1.1", str(fast.concurrency_id)) == 1 and queued_events(app, "3.3.3.3", "x") == 0


def test_idle_sessions_are_dropped_from_gradios_state_holder():
    """``drop_idle_sessions`` relies on ``StateHolder.session_data``, ``time_last_used``, ``lock`` and
    ``delete_state``; a session in use, or with an event in the queue, stays."""
    import datetime

    from gradio.state_holder import StateHolder

    from rloo_demo.ui.gradio_internals import drop_idle_sessions

    with gr.Blocks() as demo:
        state = gr.State(0)
        gr.Button().click(lambda s: s, state, state)
    holder = StateHolder()
    holder.set_blocks(demo)
    for session in ("old", "recent", "old-but-busy"):
        holder[session][state._id] = 1
    long_ago = datetime.datetime.now() - datetime.timedelta(seconds=100)
    holder.time_last_used["old"] = holder.time_last_used["old-but-busy"] = long_ago
    assert drop_idle_sessions(holder, 50, busy={"old-but-busy"}) == 1
    assert set(holder.session_data) == set(holder.time_last_used) == {"recent", "old-but-busy"}
    assert drop_idle_sessions(holder, 50) == 1 and set(holder.session_data) == {"recent"}


def test_the_session_sweeper_runs_inside_gradios_own_lifespan():
    """A lifespan given in ``app_kwargs`` runs inside the one gradio builds (``routes.create_lifespan_handler``),
    with gradio's app and its ``state_holder``."""
    import asyncio
    import datetime
    from types import SimpleNamespace

    from gradio.route_utils import create_lifespan_handler
    from gradio.state_holder import StateHolder

    from rloo_demo.ui.gradio_internals import session_lifespan

    demo = _queued_demo()
    holder = StateHolder()
    holder.set_blocks(demo)
    holder["gone"]
    holder.time_last_used["gone"] = datetime.datetime.now() - datetime.timedelta(seconds=10)
    app = SimpleNamespace(state_holder=holder, get_blocks=lambda: demo, uploaded_file_dir="/nonexistent")

    async def run():
        async with create_lifespan_handler(session_lifespan(0.2), None, None)(app):
            for _ in range(100):
                if "gone" not in holder.session_data:
                    return True
                await asyncio.sleep(0.02)
        return False

    assert asyncio.run(run())


def _many_blocks_demo():
    with gr.Blocks() as demo:
        boxes = [gr.Textbox(f"box {i}", label=f"label {i}") for i in range(40)]
        state = gr.State(7)
        gr.Button().click(lambda: "changed", None, boxes[3])
    return demo, boxes, state


def test_a_lazy_session_builds_configs_only_when_asked_and_then_what_gradio_builds(monkeypatch):
    """A new browser session costs gradio a config for each block (``config_for_block``), built eagerly. The lazy
    session builds none until one is read and one per write; read whole, after the same writes, it gives what
    gradio's own session gives, in the same order."""
    from gradio.blocks import BlocksConfig
    from gradio.state_holder import SessionState

    from rloo_demo.ui.gradio_internals import LazySessionState

    demo, boxes, state = _many_blocks_demo()
    eager = SessionState(demo)
    built = []
    real = BlocksConfig.config_for_block
    counting = staticmethod(lambda *a, **k: built.append(a[0]) or real(*a, **k))  # gradio's is a staticmethod
    monkeypatch.setattr(BlocksConfig, "config_for_block", counting)
    lazy = LazySessionState(demo)
    assert built == []
    assert lazy[state._id] == 7 and lazy[boxes[5]._id] is boxes[5]  # reading blocks and states builds nothing
    assert built == []
    for session in (lazy, eager):  # the writes an event makes: a component replaced, a value set in its config
        session[boxes[3]._id] = gr.Textbox("changed", label="label 3")
        session._update_value_in_config(boxes[9]._id, "nine")
    assert built == [boxes[3]._id, boxes[9]._id, boxes[3]._id]  # the lazy one builds both; the eager, one anew
    got, want = list(lazy.components), list(eager.components)
    assert len(want) >= 40  # the comparison below covers every block
    assert [(c["id"], c["type"], c["props"].get("value")) for c in got] == [
        (c["id"], c["type"], c["props"].get("value")) for c in want
    ]
    assert {c["id"]: c["props"].get("value") for c in got}[boxes[9]._id] == "nine"


def test_lazy_sessions_swaps_only_gradios_own_holder():
    from gradio.state_holder import StateHolder

    from rloo_demo.ui.gradio_internals import LazySessionState, LazyStateHolder, lazy_sessions

    demo, boxes, state = _many_blocks_demo()
    holder = StateHolder()
    holder.set_blocks(demo)
    kept = holder["before"]
    lazy_sessions(holder)
    assert type(holder) is LazyStateHolder and holder["before"] is kept  # existing sessions kept
    fresh = holder["after"]
    assert type(fresh) is LazySessionState and holder["after"] is fresh and "after" in holder.time_last_used


# ----------------------------------------------------------------------------- gradio paths


STATE = object()  # the session's state: passed through as it came


def _demo():
    calls = []

    async def original(block_fn, predictions, state):
        calls.append((block_fn, [b._id for b in block_fn.outputs], predictions, state))
        if isinstance(predictions, dict):
            return [f"value-{b._id}" for b in block_fn.outputs]
        return list(predictions)

    demo = SimpleNamespace(postprocess_data=original)
    cheap_skips(demo)
    return demo, calls


def _fn(outputs, validator=False):
    fn = SimpleNamespace(outputs=list(outputs))
    if validator:
        fn.is_validator_function = True
    return fn


def _send(demo, fn, predictions):
    return asyncio.run(demo.postprocess_data(fn, predictions, STATE))


def test_a_dict_naming_some_outputs_sends_only_those_through_gradio_and_skips_the_rest():
    a, b, c, kept = gr.Textbox(render=False), gr.Markdown(render=False), gr.Number(render=False), gr.State()
    demo, calls = _demo()
    fn = _fn([a, b, c, kept])
    assert _send(demo, fn, {b: "x"}) == [SKIP, f"value-{b._id}", SKIP, None]  # a state left out is sent as None
    [(subset, ids, predictions, state)] = calls
    assert subset is not fn and ids == [b._id] and predictions == {b: "x"} and state is STATE
    assert [o._id for o in fn.outputs] == [a._id, b._id, c._id, kept._id]  # the event itself is left as it was
    calls.clear()
    assert _send(demo, fn, {a: 1, c: 2}) == [f"value-{a._id}", SKIP, f"value-{c._id}", None]
    assert calls[0][1] == [a._id, c._id] and calls[0][3] is STATE


def test_a_dict_of_blocks_no_output_holds_asks_gradio_nothing_and_skips_everything():
    a, b, stranger = gr.Textbox(render=False), gr.Markdown(render=False), gr.Textbox(render=False)
    demo, calls = _demo()
    assert _send(demo, _fn([a, b]), {stranger: "x"}) == [SKIP, SKIP] and calls == []


def test_every_other_answer_goes_to_gradio_whole():
    a, b, stranger = gr.Textbox(render=False), gr.Markdown(render=False), gr.Textbox(render=False)
    demo, calls = _demo()
    two, one = _fn([a, b]), _fn([a])
    cases = [
        (two, {a: 1, b: 2}),  # every output named: nothing to skip
        (two, ["x", "y"]),  # a list of values
        (two, {}),  # an empty dict
        (two, {"a": 1}),  # keys that are not components
        (one, {a: 1}),  # one output: nothing to skip either
        (one, {stranger: 1}),  # even when the dict names another component: gradio says what is wrong
        (_fn([a, b], validator=True), {a: 1}),  # a validator's answer is gradio's to read
    ]
    for fn, predictions in cases:
        calls.clear()
        _send(demo, fn, predictions)
        assert [(c[0], c[2], c[3]) for c in calls] == [(fn, predictions, STATE)], predictions
    assert len(cases) == 7


def _app(*events):
    queue = SimpleNamespace(event_ids_to_events={i: e for i, e in enumerate(events)})
    return SimpleNamespace(get_blocks=lambda: SimpleNamespace(_queue=queue))


def _event(kind, visitor=None, scope=True):
    state = {VISITOR_STATE: visitor} if visitor is not None else {}
    request = SimpleNamespace(scope={"state": state}) if scope else SimpleNamespace()
    return SimpleNamespace(concurrency_id=kind, request=request)


def test_queued_events_count_a_visitors_events_of_one_kind_and_nobody_elses():
    app = _app(
        _event("sampling", "1.1.1.1"),
        _event("sampling", "1.1.1.1"),
        _event("sampling"),
        _event("sampling", scope=False),
        _event("start", "1.1.1.1"),
        _event(7, "2.2.2.2"),
    )
    assert queued_events(app, "1.1.1.1", "sampling") == 2
    assert queued_events(app, "1.1.1.1", "start") == 1 and queued_events(app, "2.2.2.2", "7") == 1
    assert queued_events(app, None, "sampling") == 0  # events without a stamped visitor are nobody's, not None's
    assert queued_events(app, "3.3.3.3", "sampling") == 0


def test_queued_events_of_no_app_or_no_queue_are_none():
    assert queued_events(None, "1.1.1.1", "sampling") == 0
    no_queue = SimpleNamespace(get_blocks=lambda: SimpleNamespace())
    assert queued_events(no_queue, "1.1.1.1", "sampling") == 0
