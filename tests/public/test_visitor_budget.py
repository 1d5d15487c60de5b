"""One budget per visitor for every event it sends, charged before gradio queues the event: the page's own events
(queued or not) and the named endpoints draw on it at their measured cost (``ui.api.EVENT_COSTS``), one visitor's
flood is refused while another visitor is served, rotating through kinds buys nothing, and an event the page runs
in the browser only is refused without a traceback. Through gradio's queue and its plain route, from distinct
loopback addresses, on a public server.

``python -m pytest tests/public/test_visitor_budget.py`` (about 20 s).
"""

from dataclasses import replace

import httpx
import pytest
from apputil import free_port

from rloo_demo.public.limits import PUBLIC
from rloo_demo.ui.api import EVENT_COSTS
from rloo_demo.ui.forms import FORM_FIELDS, defaults

A, B = "127.0.0.2", "127.0.0.3"
ALLOWANCE = 60.0  # milliseconds: the burst a visitor holds here
BURST_SECONDS = 600.0  # ... ten minutes of its rate (6 ms a minute): what refills while a test runs is negligible
LIMITS = replace(PUBLIC, event_ms_per_minute=ALLOWANCE * 60 / BURST_SECONDS, max_events_per_visitor=None)


@pytest.fixture(scope="module")
def app(space_runs_dir):
    from rloo_demo.public import gates
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app, launch_options, prepare
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(str(space_runs_dir), limits=LIMITS))
    demo = prepare(build_app(controller), LIMITS)
    port = free_port()
    options = launch_options(LIMITS, controller.events) | {"server_name": "127.0.0.1", "server_port": port}
    demo.launch(prevent_thread_lock=True, quiet=True, **options)
    url = f"http://127.0.0.1:{port}/"
    config = httpx.get(f"{url}config", timeout=30).json()
    patch = pytest.MonkeyPatch()
    patch.setattr(gates, "EVENT_BURST_SECONDS", BURST_SECONDS)
    try:
        yield url, controller, demo, config
    finally:
        patch.undo()
        demo.close()
        controller.close()


def visitor(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60)


def send(http, url, config, name, data, session) -> int:
    """One event as the page sends it: a plain POST for an unqueued one, a join for a queued one. Its status."""
    dep = next(d for d in config["dependencies"] if d.get("api_name") == name)
    data = list(data) + [None] * (len(dep["inputs"]) - len(data))
    body = {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": None, "trigger_id": None}
    if dep.get("queue") is False:
        return http.post(f"{url}gradio_api/run/{name}", json=body).status_code
    return http.post(f"{url}gradio_api/queue/join", json=body).status_code


ESTIMATE = [defaults()[f] for f in FORM_FIELDS] + ["en"]
# events of several kinds, queued and not, with the values the page sends
ROTATION = [
    ("train_estimate", ESTIMATE),
    ("show_runs", []),
    ("page_tick", ["c", None, -1, 0.6, -1, True, None, "train", "en"]),
    ("runs_refresh", [[], None, "en"]),
    ("list_runs", []),
    ("show_train", []),
]


@pytest.fixture
def fresh(app):
    """Every visitor starts with a full allowance."""
    app[1].events._allowance.clear()
    return app


def test_a_flood_of_the_form_estimate_is_refused_once_its_visitors_budget_is_spent(fresh):
    """train_estimate, which no rate counted (2,405 calls in 14 s from 8 addresses): A's calls are let in while the
    allowance holds their cost, then refused with 429 before gradio; B is served at once."""
    url, controller, _, config = fresh
    cost = EVENT_COSTS["train_estimate"]
    with visitor(A) as a, visitor(B) as b:
        codes = [send(a, url, config, "train_estimate", ESTIMATE, "a") for _ in range(40)]
        admitted = codes.count(200)
        # as many as the allowance holds, and one more where what refilled while they were sent (0.1 ms a second)
        # makes up the last one's cost
        assert int(ALLOWANCE // cost) <= admitted <= int(ALLOWANCE // cost) + 1, codes
        assert codes[:admitted] == [200] * admitted and set(codes[admitted:]) == {429}, codes
        assert send(b, url, config, "train_estimate", ESTIMATE, "b") == 200


def test_rotating_through_kinds_draws_on_the_same_budget(fresh):
    """A cycles through six kinds of event: what it is let in costs the allowance, whatever the mix (one budget per
    visitor, not per kind). The test adds up the costs of what was admitted itself."""
    url, controller, _, config = fresh
    with visitor(A) as a:
        spent, refused, n = 0.0, None, 0
        while refused is None and n < 200:
            name, data = ROTATION[n % len(ROTATION)]
            code = send(a, url, config, name, data, "a")
            if code == 429:
                refused = name
            else:
                assert code == 200, (name, code)
                spent += EVENT_COSTS[name]
            n += 1
    assert refused is not None, "never refused"
    # all of the allowance, less than the refused event's cost left over (plus a little refill)
    assert ALLOWANCE - EVENT_COSTS[refused] <= spent <= ALLOWANCE + 0.5, (spent, refused)
    assert n > len(ROTATION)  # more than one kind was let in before the refusal


def test_every_event_of_the_page_has_a_measured_cost():
    """Each event with a server function is named in EVENT_COSTS (a new event must be measured and added:
    ``python scripts/bench_events.py --costs``); the table names no event the page does not have."""
    import tempfile

    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.app import build_app
    from rloo_demo.ui.controller import Controller

    controller = Controller(Runner(tempfile.mkdtemp(), limits=LIMITS, watchdog=False))
    demo = build_app(controller)
    served = {fn.api_name for fn in demo.fns.values() if fn.fn is not None}
    assert served == set(EVENT_COSTS)
    assert all(cost > 0 for cost in EVENT_COSTS.values())


def test_an_event_the_browser_runs_itself_is_refused_without_a_traceback(app, capfd):
    """The page's browser-only steps (gradio's js_fn events) have no server function: gradio answered a call of
    one with a 500 and a traceback in the server's log. Public mode refuses it with 404 first; an event number the
    page does not have is refused the same way."""
    url, controller, demo, config = app
    js_only = [d for d in config["dependencies"] if not d.get("backend_fn")]
    assert js_only, "the page has browser-only steps"
    with visitor(A) as a:
        for dep in js_only:
            body = {"data": [], "fn_index": dep["id"], "session_hash": "js", "event_data": None, "trigger_id": None}
            joined = a.post(f"{url}gradio_api/queue/join", json=body)
            assert joined.status_code == 404 and joined.json()["detail"] == "no such event"
            direct = a.post(f"{url}gradio_api/run/{dep['api_name']}", json=body)
            assert direct.status_code == 404
        body = {"data": [], "fn_index": 10_000, "session_hash": "js", "event_data": None, "trigger_id": None}
        assert a.post(f"{url}gradio_api/queue/join", json=body).status_code == 404
    assert "Traceback" not in capfd.readouterr().err


def test_a_select_event_without_its_selection_is_refused_without_a_traceback(fresh, capfd):
    """A select event (a Rollouts row, a Runs row) sent without ``event_data``: gradio built its ``gr.SelectData``
    from nothing and logged a TypeError's traceback for each call. Refused with 400 first; with the selection the
    page sends, it is answered."""
    url, controller, demo, config = fresh
    with visitor(A) as a:
        for name in ("rollouts_completion", "rollouts_open_run"):
            dep = next(d for d in config["dependencies"] if d.get("api_name") == name)
            body = {"data": [None] * len(dep["inputs"]), "fn_index": dep["id"], "session_hash": "sel"}
            for event_data in (None, 5, {"value": 1}, {"index": 0}):
                refused = a.post(f"{url}gradio_api/queue/join", json=body | {"event_data": event_data})
                assert refused.status_code == 400 and "selection" in refused.json()["detail"], (name, event_data)
        dep = next(d for d in config["dependencies"] if d.get("api_name") == "rollouts_open_run")
        body = {"data": [None] * len(dep["inputs"]), "fn_index": dep["id"], "session_hash": "sel"}
        selected = a.post(f"{url}gradio_api/queue/join", json=body | {"event_data": {"index": [0, 0], "value": "x"}})
        assert selected.status_code == 200
    assert "Traceback" not in capfd.readouterr().err
