"""Which path ``cheap_skips`` sends each kind of answer down, and what ``queued_events`` counts, with gradio's
own postprocessing and queue replaced by recorders: each test names the call gradio must receive (the event's
function or the subset of its outputs, and the session's state), not only what comes back."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import gradio as gr

from rloo_demo.server.admission import VISITOR_STATE
from rloo_demo.ui.gradio_internals import SKIP, cheap_skips, queued_events

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
    app = _app(_event("sampling", "1.1.1.1"), _event("sampling", "1.1.1.1"), _event("sampling"),
               _event("sampling", scope=False), _event("start", "1.1.1.1"), _event(7, "2.2.2.2"))
    assert queued_events(app, "1.1.1.1", "sampling") == 2
    assert queued_events(app, "1.1.1.1", "start") == 1 and queued_events(app, "2.2.2.2", "7") == 1
    assert queued_events(app, None, "sampling") == 0  # events without a stamped visitor are nobody's, not None's
    assert queued_events(app, "3.3.3.3", "sampling") == 0


def test_queued_events_of_no_app_or_no_queue_are_none():
    assert queued_events(None, "1.1.1.1", "sampling") == 0
    no_queue = SimpleNamespace(get_blocks=lambda: SimpleNamespace())
    assert queued_events(no_queue, "1.1.1.1", "sampling") == 0
