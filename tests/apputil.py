"""Launch the app in-process on a free port for end-to-end and browser tests (also used by scripts/bench_app.py),
call its events as a browser does, and the page's helpers that several test modules share: a browser page opened in
a language, a tab shown, a run that holds the slot without training, the page's handlers by name."""

import logging
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr

from rloo_demo.engine.training import TrainingJob
from rloo_demo.i18n import STORAGE_KEY, load
from rloo_demo.public.limits import LOCAL
from rloo_demo.server import runner as runner_module
from rloo_demo.server.cache import SharedBuilds
from rloo_demo.server.runner import Runner
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.tabs import train_plots

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
    from rloo_demo.public.limits import Limits
    from rloo_demo.ui.app import build_app, launch_options, prepare

    limits = limits or Limits.from_env()
    controller = Controller(Runner(str(runs_dir), max_concurrent=max_concurrent, limits=limits))
    demo = prepare(build_app(controller), limits)
    port = free_port()
    options = launch_options(limits, controller.events) | {"server_name": "127.0.0.1", "server_port": port}
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


def call_event(url, api_name, data, session_hash="hostile-session", timeout=120.0, event_data=None, address=None):
    """Call any event of the page, private ones included, the way a browser (or anyone with curl) can: through the
    queue's join + SSE protocol, or a plain POST for events outside the queue. ``event_data`` is what a browser
    sends with a select event (e.g. ``{"index": [row, column], "value": ...}``); ``address``, a loopback address
    to call from (127.0.0.2, 127.0.0.3, ...: distinct visitors). Returns the output list; raises ``RuntimeError``
    with gradio's message if the server reports an error."""
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
    transport = httpx.HTTPTransport(local_address=address) if address else None
    with httpx.Client(timeout=timeout, transport=transport) as http:
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


# this machine's limits without the sampling pace: a test that samples many times is not made to wait
UNPACED = replace(LOCAL, sampling_per_minute=None)


def no_traceback(caplog, capfd) -> None:
    """Nothing the server logged or printed is a traceback: a user's mistake is no bug."""
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err[-3000:]


def value(update):
    """The value an update sets (gradio 6 updates are component instances; gr.skip() is a dict)."""
    if isinstance(update, gr.components.Component):
        return update.value
    return update.get("value") if isinstance(update, dict) else update


class HeldJob(TrainingJob):
    """A run that holds the slot without training: its folder is made as a real run's is, and it ends when stopped."""

    def start(self, resources_checked: bool = False):
        self.state.budget_started = self.state.started = time.time()
        self.state.run = runner_module.RunFolder.create(self.state.config, **self.status_extra)
        self.state.status = "running"

        def hold():
            self.state.stop_event.wait(120)
            self.state.status, self.state.finished = "stopped", time.time()
            self.state.run.set_status("stopped", reason=self.state.stop_reason)

        self.thread = threading.Thread(target=hold, daemon=True)
        self.thread.start()
        return self


def app_for(root, limits=UNPACED):
    from rloo_demo.ui.app import build_app

    controller = Controller(Runner(str(root), watchdog=False, limits=limits))
    demo = build_app(controller)
    handler = {fn.api_name: fn.fn for fn in demo.fns.values() if fn.api_name}
    component = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    return controller, demo, handler, component


TWO_FRAMES_JS = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


def open_page(browser, url, locale, size):
    width, height = size
    context = browser.new_context(viewport={"width": width, "height": height})
    context.add_init_script(f"localStorage.setItem('{STORAGE_KEY}', '{locale}')")  # the header selector's choice
    page = context.new_page()
    page.goto(url)
    page.get_by_role("button", name=load(locale)["train.start"], exact=True).wait_for(timeout=60_000)
    page.wait_for_function("() => document.querySelector('#run-estimate').innerText.length > 10", timeout=30_000)
    return context, page


def show_tab(page, locale, tab):
    page.get_by_role("tab", name=load(locale)[f"tab.{tab}"], exact=True).click()
    page.wait_for_function(
        "name => [...document.querySelectorAll('[role=tab]')].some(t => t.innerText === name"
        " && t.getAttribute('aria-selected') === 'true')",
        arg=load(locale)[f"tab.{tab}"],
    )
    page.wait_for_function(TWO_FRAMES_JS)  # laid out


def train_tab_stub(controller):
    """The Train tab's components as their own names, for ``train.render`` and ``train.tick`` called directly."""
    names = ("status", "run_error", "alerts", "summary", "alert_step", "alert_open", "start", "drawn")
    ui = SimpleNamespace(**{n: n for n in names}, plots=[f"plot{i}" for i in range(len(train_plots.TRAIN_PLOTS))])
    ui.controller = controller
    return ui


class TickReads:
    """The controller's reads a tick makes, recorded."""

    def __init__(self, phase=None, summary=None, mine=False):
        self.phase, self.summary, self.mine, self.calls = phase, summary, mine, []
        self.builds = SharedBuilds()  # the controller's: each stand-in starts with nothing built

    def run_phase(self, name):
        self.calls.append(("run_phase", name))
        return self.phase

    def run_summary(self, name, locale):
        self.calls.append(("run_summary", name, locale))
        return self.summary

    def trains_for(self, caller):
        self.calls.append(("trains_for", caller))
        return self.mine
