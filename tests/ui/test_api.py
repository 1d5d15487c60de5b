"""The named API endpoints (``ui.api.register_api``) in-process, on a recording controller: each hands the caller's
arguments and its visitor (client id and address) to its one controller method, and answers a refusal, a place in
the line or a bug as a dict, never a traceback. The endpoints over a live server: tests/ui/test_app_e2e.py,
tests/public/test_public.py.

``python -m pytest tests/ui/test_api.py``
"""

from types import SimpleNamespace

import gradio as gr
import pytest
from starlette.datastructures import Headers

from rloo_demo.errors import UserError, Waiting
from rloo_demo.public.gates import Caller
from rloo_demo.ui.api import register_api


class _Controller:
    """Records each call with its arguments; ``fail`` makes the next call raise it."""

    def __init__(self, max_compare_tokens=64):
        self.limits = SimpleNamespace(max_compare_tokens=max_compare_tokens)
        self.calls, self.fail = [], None

    def error_text(self, exc):
        return f"said: {exc}"

    def _call(self, name, *args):
        self.calls.append((name, *args))
        if self.fail is not None:
            raise self.fail
        return {"answer": name}

    def start(self, config_json, caller):
        return self._call("start", config_json, caller)

    def stop(self, run, caller):
        return self._call("stop", run, caller)

    def poll_metrics(self, run, since_step, caller):
        return self._call("poll_metrics", run, since_step, caller)

    def get_rollouts(self, run, step, caller):
        return self._call("get_rollouts", run, step, caller)

    def compare(self, run, prompt, num_samples, max_new_tokens, temperature, top_p, seed, caller):
        return self._call("compare", run, prompt, num_samples, max_new_tokens, temperature, top_p, seed, caller)

    def list_runs(self, caller):
        return self._call("list_runs", caller)


def _endpoints(controller):
    with gr.Blocks() as demo:
        register_api(controller)
    return {fn.api_name: fn for fn in demo.fns.values()}


def _request(peer):
    return SimpleNamespace(client=SimpleNamespace(host=peer), headers=Headers(), state=SimpleNamespace())


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch):
    for name in ("SPACE_ID", "RLOO_TRUST_FORWARDED", "RLOO_TRUSTED_PROXIES"):
        monkeypatch.delenv(name, raising=False)


def test_the_endpoints_and_their_queues():
    fns = _endpoints(_Controller())
    assert sorted(fns) == ["compare", "get_rollouts", "list_runs", "poll_metrics", "start_run", "stop_run"]
    queues = {name: (fn.concurrency_limit, fn.concurrency_id) for name, fn in fns.items()}
    assert queues == {
        "start_run": (1, "start"),
        "stop_run": (4, "stop"),
        "compare": (1, "sampling"),
        "poll_metrics": (8, "reads"),
        "get_rollouts": (8, "reads"),
        "list_runs": (8, "reads"),
    }


def test_each_endpoint_hands_its_arguments_and_its_visitor_to_its_controller_method():
    controller = _Controller(max_compare_tokens=64)
    fns = _endpoints(controller)
    request = _request("127.0.0.7")
    assert fns["start_run"].fn('{"seed": 3}', "client-a", request) == {"run": {"answer": "start"}}
    assert fns["stop_run"].fn("r07", "client-b", request) == {"message": {"answer": "stop"}}
    assert fns["poll_metrics"].fn("r07", 5, request) == {"answer": "poll_metrics"}
    assert fns["get_rollouts"].fn("r07", -1, request) == {"answer": "get_rollouts"}
    assert fns["compare"].fn("r07", "A film", 3, 11, request) == {"answer": "compare"}
    assert fns["list_runs"].fn(request) == {"answer": "list_runs"}
    there, anonymous = Caller("client-a", "127.0.0.7"), Caller("", "127.0.0.7")
    assert controller.calls == [
        ("start", '{"seed": 3}', there),
        ("stop", "r07", Caller("client-b", "127.0.0.7")),
        ("poll_metrics", "r07", 5, anonymous),  # the reads name no client: the address alone keys them
        ("get_rollouts", "r07", -1, anonymous),
        ("compare", "r07", "A film", 3, 24, 1.0, 1.0, 11, anonymous),  # 24 new tokens, plain sampling
        ("list_runs", anonymous),
    ]


def test_compare_asks_for_no_more_tokens_than_the_server_allows():
    controller = _Controller(max_compare_tokens=10)
    _endpoints(controller)["compare"].fn("r01", "p", 2, 0, _request("127.0.0.2"))
    assert controller.calls[0][4] == 10


def test_a_place_in_the_line_a_refusal_and_a_bug_come_back_as_dicts():
    controller = _Controller()
    fns = _endpoints(controller)
    request = _request("127.0.0.3")
    controller.fail = Waiting("the slot is taken: you are second", place=2)
    assert fns["start_run"].fn("{}", "c", request) == {"waiting": 2, "message": "the slot is taken: you are second"}
    for exc in (UserError("no such run: r99"), KeyError("a bug")):
        controller.fail = exc
        expected = {"error": controller.error_text(exc)}
        for name, args in (
            ("start_run", ("{}", "c")),
            ("stop_run", ("r99", "c")),
            ("poll_metrics", ("r99", 0)),
            ("get_rollouts", ("r99", 0)),
            ("compare", ("r99", "p", 2, 0)),
            ("list_runs", ()),
        ):
            assert fns[name].fn(*args, request) == expected, name
    controller.fail = Waiting("line", place=1)  # a place in the line is an answer only where a run starts
    assert fns["stop_run"].fn("r01", "c", request) == {"error": "said: line"}


def test_a_client_id_that_is_not_a_text_names_no_client():
    controller = _Controller()
    _endpoints(controller)["stop_run"].fn("r01", 12345, _request("127.0.0.4"))
    assert controller.calls == [("stop", "r01", Caller("", "127.0.0.4"))]
