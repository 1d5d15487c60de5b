"""The one place that touches gradio's private attributes, because gradio 6 has no setting for them.

``tests/test_gradio_internals.py`` fails loudly when an upgrade renames them, so the tweak cannot silently stop
working (``quiet_queue`` itself only sets attributes that exist).
"""

from __future__ import annotations

import gradio as gr

# (attribute of gradio's Queue, value): what quiet_queue sets, and the test checks still exists.
QUEUE_SETTINGS = {
    # On Linux gradio's queue polls for new events every 1 ms and for progress updates every 10 ms, about 1,100
    # wake-ups a second (~40 ms of CPU a second when idle); each takes the GIL from the training thread in this
    # process. Every 20 ms and 100 ms cost at most 20 ms of queueing latency.
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
