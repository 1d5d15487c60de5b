"""The one place that touches gradio's private attributes, because gradio 6 has no setting for them.

``tests/test_gradio_internals.py`` fails loudly when an upgrade renames them, so the tweak cannot silently stop
working (``quiet_queue`` itself only sets attributes that exist).
"""

from __future__ import annotations

import copy

import gradio as gr

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
