"""gradio's private queue attributes that ``rloo_demo.ui.gradio_internals`` tunes still exist and take effect.

If gradio renames them, this fails, instead of the tweak silently doing nothing. ``python -m pytest
tests/test_gradio_internals.py``
"""

import gradio as gr

from rloo_demo.ui.gradio_internals import QUEUE_SETTINGS, quiet_queue


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
