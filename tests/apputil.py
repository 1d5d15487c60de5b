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
def running_app(runs_dir, max_concurrent=1, limits=None):
    """The app as ``python app.py`` builds it, on a free port, with ``limits`` (default: this environment's)."""
    from rloo_demo.server.limits import Limits
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app, launch_options, prepare
    from rloo_demo.ui.controller import Controller

    limits = limits or Limits.from_env()
    controller = Controller(Runner(str(runs_dir), max_concurrent=max_concurrent, limits=limits))
    demo = prepare(build_app(controller), limits)
    port = free_port()
    options = launch_options(limits, controller.reads) | {"server_name": "127.0.0.1", "server_port": port}
    demo.launch(prevent_thread_lock=True, quiet=True, **options)
    try:
        yield f"http://127.0.0.1:{port}/", controller
    finally:
        for active in controller.runner.active():
            active.job.stop()
            active.job.join(60)
        demo.close()
        controller.close()


def wait_until(predicate, timeout=120.0, interval=0.25):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met in time")


def call_event(url, api_name, data, session_hash="hostile-session", timeout=120.0, event_data=None):
    """Call any event of the page, private ones included, the way a browser (or anyone with curl) can: through the
    queue's join + SSE protocol, or a plain POST for events outside the queue. ``event_data`` is what a browser
    sends with a select event (e.g. ``{"index": [row, column], "value": ...}``). Returns the output list; raises
    ``RuntimeError`` with gradio's message if the server reports an error."""
    import json

    import httpx

    config = httpx.get(f"{url}config", timeout=30).json()
    dep = next(d for d in config["dependencies"] if d.get("api_name") == api_name)
    # Inputs the caller leaves out are sent as null, as a browser sends a state: the page's locale (the last input
    # of most events since the page is translated) then reads as English.
    data = list(data) + [None] * (len(dep["inputs"]) - len(data))
    body = {
        "data": data,
        "fn_index": dep["id"],
        "session_hash": session_hash,
        "event_data": event_data,
        "trigger_id": None,
    }
    with httpx.Client(timeout=timeout) as http:
        if not dep.get("queue", True):
            r = http.post(f"{url}gradio_api/run/{api_name}", json=body)
            payload = r.json()
            if r.status_code != 200:
                raise RuntimeError(payload.get("error") or payload)
            return payload["data"]
        joined = http.post(f"{url}gradio_api/queue/join", json=body)
        if joined.status_code != 200:
            raise RuntimeError(joined.text)
        with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session_hash}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    if not msg.get("success", False):
                        raise RuntimeError((msg.get("output") or {}).get("error") or msg)
                    return msg["output"]["data"]
    raise RuntimeError("no result")


def finished_run(root, name="done"):
    """A finished run whose model is the embedded policy itself: Compare and the probe load it like a trained one."""
    import shutil

    from rloo_demo.config import RunConfig
    from rloo_demo.models.hub import ASSETS_DIR
    from rloo_demo.store.folder import RunFolder

    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, max_steps=2))
    shutil.copytree(ASSETS_DIR / "tiny-imdb-gpt2", run.path / "model", ignore=shutil.ignore_patterns("README.md"))
    run.append_metrics({"step": 1, "reward": 0.1})
    run.set_status("finished", step=2)
    return run
