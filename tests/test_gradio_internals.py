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
    from rloo_demo.server.limits import LOCAL
    from rloo_demo.ui.app import prepare

    demo, _, _ = _skip_demo()
    before = demo.postprocess_data
    prepare(demo, LOCAL)
    assert demo.postprocess_data != before and demo.postprocess_data.__name__ == "postprocess_data"
    assert "cheap_skips" in demo.postprocess_data.__qualname__


ARENA_PROBE = """
import ctypes, sys, threading
if sys.argv[1] == "bound":
    from rloo_demo.server.malloc import bound_arenas
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

    from rloo_demo.server import malloc
    from rloo_demo.ui import app

    def arenas(mode):
        out = subprocess.run([sys.executable, "-c", ARENA_PROBE, mode], capture_output=True, text=True, check=True)
        return out.stderr.count("Arena ")

    assert arenas("free") > malloc.MALLOC_ARENAS  # without the bound, the probe does make more arenas
    assert arenas("bound") <= malloc.MALLOC_ARENAS
    assert "bound_arenas()" in inspect.getsource(app.main)
