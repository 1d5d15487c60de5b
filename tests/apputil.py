"""Launch the app in-process on a free port for end-to-end and browser tests (also used by scripts/bench_app.py)."""

import socket
import time
from contextlib import contextmanager

CHROMIUM = "/usr/bin/chromium"  # Debian's package; Playwright's own browser download cannot work offline
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Points in the page's reward plot (the 'total reward' trace of the plotly figure in #reward-plot)
REWARD_POINTS_JS = """() => {
  const el = document.querySelector('#reward-plot .js-plotly-plot');
  if (!el || !el.data) return 0;
  const total = el.data.find(t => t.name === 'total reward');
  return total && total.x ? total.x.length : 0;
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(runs_dir, max_concurrent=1):
    import gradio as gr

    from rloo_demo.runner import Runner
    from rloo_demo.ui.app import CSS, build_app, quiet_queue
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(str(runs_dir), max_concurrent=max_concurrent))
    demo = build_app(controller)
    demo.queue(default_concurrency_limit=4)
    quiet_queue(demo)
    port = free_port()
    demo.launch(
        server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, theme=gr.themes.Soft(), css=CSS
    )
    try:
        yield f"http://127.0.0.1:{port}/", controller
    finally:
        for active in controller.runner.active():
            active.job.stop()
            active.job.join(60)
        demo.close()


def wait_until(predicate, timeout=120.0, interval=0.25):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met in time")
