"""The controller's own decisions, on a runner without training: what a Start is checked for (the client id's
length at its edges, a public server's rules on files and the output folder), what a Start that has to wait
raises, what a page tick says about its visitor's place, and what the estimate is made of. Each answer is compared
with the text the test builds from the same message catalogue, in a language other than English."""

from __future__ import annotations

import pytest

from rloo_demo.config import RunConfig
from rloo_demo.engine.prechecks import prerun_warnings
from rloo_demo.errors import ConfigError, InputError, Waiting
from rloo_demo.i18n import t
from rloo_demo.server.estimate import run_speed
from rloo_demo.server.gates import Caller, owner_digest
from rloo_demo.server.limits import Limits
from rloo_demo.server.line import Ticket
from rloo_demo.server.runner import Runner
from rloo_demo.ui.controller import Controller, _minutes
from rloo_demo.ui.forms import defaults, form_settings
from rloo_demo.ui.views import estimate_text, meter_estimate_text, prechecks_markdown


def _controller(tmp_path, **limits) -> Controller:
    limits = Limits(**limits)
    return Controller(Runner(str(tmp_path / "runs"), limits=limits, watchdog=False), limits)


def test_settings_are_checked_for_files_only_on_a_local_server(tmp_path):
    local = _controller(tmp_path / "a")
    missing, there = tmp_path / "no-such-prompts.csv", tmp_path / "prompts.csv"
    there.write_text("text\nA fine film\n")
    with pytest.raises(ConfigError) as e:
        local.parse_settings({"data_source": str(missing), "max_steps": 2})
    assert e.value.problems == {
        "data_source": f"file {str(missing)!r} does not exist; give a .csv/.jsonl path, a hub id or 'embedded:imdb'"
    }
    assert local.parse_settings({"data_source": str(there), "max_steps": 2}).data_source == str(there)
    # a public answer never tells whether a path exists on the server: the same refusal for both
    public = _controller(tmp_path / "b", public=True)
    answers = []
    for path in (missing, there):
        with pytest.raises(ConfigError) as e:
            public.parse_settings({"data_source": str(path), "max_steps": 2})
        answers.append(e.value.problems)
    assert answers[0] == answers[1] and list(answers[0]) == ["data_source"]
    assert "exist" not in answers[0]["data_source"]


def test_a_public_server_refuses_a_chosen_output_folder_and_otherwise_puts_runs_in_its_own(tmp_path):
    public = _controller(tmp_path / "a", public=True)
    with pytest.raises(ConfigError) as e:
        public.parse_settings({"output_dir": "/etc", "max_steps": 2})
    assert e.value.problems == {"output_dir": "the server decides where runs are saved"}
    local = _controller(tmp_path / "b")
    config = local.parse_settings('{"output_dir": "elsewhere", "max_steps": 2}')
    assert config.output_dir == str(tmp_path / "b" / "runs") == local.runner.runs_dir
    assert public.parse_settings({"max_steps": 2}).output_dir == public.runner.runs_dir


@pytest.fixture
def requests(tmp_path, monkeypatch):
    """A controller whose runner records each request and starts nothing, or gives a place in the line."""
    controller = _controller(tmp_path)
    asked = []
    places = {}

    def request(config, owner, owner_host=None, owner_record=None):
        asked.append((owner, owner_host, owner_record))
        ticket = Ticket(owner_host or owner, config, owner, owner_host, owner_record)
        ticket.started = None if (owner_host or owner) in places else f"run-of-{owner}"
        return ticket

    monkeypatch.setattr(controller.runner, "request", request)
    monkeypatch.setattr(controller.runner.line, "place", lambda visitor: places.get(visitor))
    monkeypatch.setattr(controller.runner, "wait_estimate", lambda place: 90.0 * place)
    controller.asked, controller.places = asked, places
    return controller


@pytest.mark.parametrize(("length", "ok"), [(0, False), (1, True), (2, True), (200, True), (201, False)])
def test_a_start_needs_a_client_id_of_1_to_200_characters(requests, length, ok):
    caller = Caller(client_id="c" * length, host="10.0.0.2")
    if ok:
        assert requests.start({"max_steps": 2}, caller) == f"run-of-{'c' * length}"
        assert requests.asked == [("c" * length, "10.0.0.2", owner_digest("c" * length))]
    else:
        with pytest.raises(InputError) as e:
            requests.start({"max_steps": 2}, caller)
        assert str(e.value) == "a client id (1 to 200 characters) is needed to start a run; it is what may stop it"
        assert requests.asked == []


def test_a_start_that_must_wait_says_its_place_and_wait_in_english(requests):
    requests.places["10.0.0.3"] = 3
    with pytest.raises(Waiting) as e:
        requests.start({"max_steps": 2}, Caller(client_id="me", host="10.0.0.3"))
    assert e.value.place == 3 and str(e.value) == t("en", "train.waiting", place=3, wait=_minutes(270.0))
    assert str(e.value) == requests.line_text(3)
    requests.places["10.0.0.4"] = 0  # not placed by the time it looks: it is next
    with pytest.raises(Waiting) as e:
        requests.start({"max_steps": 2}, Caller(client_id="me", host="10.0.0.4"))
    assert e.value.place == 1 and str(e.value) == t("en", "train.waiting", place=1, wait=_minutes(90.0))


def test_a_tick_keeps_its_visitors_place_and_says_it_in_the_pages_language(requests, monkeypatch):
    seen = []
    monkeypatch.setattr(requests.runner.line, "seen", lambda visitor: seen.append(visitor))
    turns = {"10.0.0.5": (2, None), "10.0.0.6": (None, None)}
    monkeypatch.setattr(requests.runner, "turn_of", lambda visitor: turns.get(visitor, (None, None)))
    assert requests.line_note(Caller(client_id="a", host="10.0.0.5"), "ka") == t(
        "ka", "train.waiting", place=2, wait=_minutes(180.0))
    assert t("ka", "train.waiting", place=2, wait="x") != t("en", "train.waiting", place=2, wait="x")
    assert requests.line_note(Caller(client_id="b", host="10.0.0.6"), "ka") is None
    assert seen == ["10.0.0.5", "10.0.0.6"]


def test_a_turn_that_failed_says_why_in_the_pages_language_without_the_servers_paths(tmp_path, monkeypatch):
    controller = _controller(tmp_path, public=True)
    failed = Ticket("10.0.0.7", RunConfig(), "me")
    failed.error = f"the disk under {controller.runner.runs_dir}/x is full"
    monkeypatch.setattr(controller.runner, "turn_of", lambda visitor: (None, failed if visitor == "10.0.0.7" else None))
    note = controller.line_note(Caller(client_id="me", host="10.0.0.7"), "ka")
    assert note == t("ka", "train.turn_failed", error=controller.redact(failed.error))
    assert controller.runner.runs_dir not in note and controller.redact(failed.error) in note
    assert note != t("en", "train.turn_failed", error=controller.redact(failed.error))
    ok = Ticket("10.0.0.8", RunConfig(), "me")
    ok.started = "run-1"
    monkeypatch.setattr(controller.runner, "turn_of", lambda visitor: (None, ok))
    assert controller.line_note(Caller(client_id="me", host="10.0.0.8"), "ka") is None


def test_the_estimate_is_the_speed_line_the_meters_cost_and_the_prechecks_in_the_pages_language(tmp_path):
    controller = _controller(tmp_path, max_run_seconds=45)
    values = defaults()
    values.update(max_steps=40, num_generations=2, variance_every=5)
    config = controller.parse_settings(form_settings(values))
    speed = run_speed(config, controller.reader)
    expected = estimate_text(config, speed.step, 45, "ka", speed)
    expected += meter_estimate_text(config, speed.step, "ka")
    expected += prechecks_markdown(prerun_warnings(config, "ka"))
    assert controller.estimate(values, "ka") == expected
    assert expected != controller.estimate(values, "en")
    assert estimate_text(config, speed.step, 45, "ka", speed) != estimate_text(config, speed.step, None, "ka", speed)
    assert meter_estimate_text(config, speed.step, "ka")  # the meter is on: its cost is part of the estimate
    assert prerun_warnings(config, "ka")  # K = 2 is warned about before the run


def test_an_estimate_of_bad_settings_is_the_refusal_itself(tmp_path):
    controller = _controller(tmp_path)
    values = defaults()
    values.update(max_steps=-3)
    text = controller.estimate(values, "ka")
    try:
        controller.parse_settings(form_settings(values))
    except ConfigError as exc:
        assert text == controller.error_text(exc) and "max_steps" in text
    else:
        pytest.fail("max_steps -3 was accepted")



# ------------------------------------------------------------------ every read is the caller's, counted once


class _Recorder:
    """Stands in for the reader, the manager or the inference service: each call recorded, answered by name."""

    def __init__(self, log):
        self.log = log

    def __getattr__(self, method):
        def call(*args):
            self.log.append((method, args))
            return {"labels": {"b": "second"}, "comparable_runs": ["a", "b"]}.get(method, f"answer-of-{method}")

        return call


READS = [  # (controller method, its arguments before the caller, what it must ask, with which arguments)
    ("default_run", (), "default_run", ()),
    ("follow", ("run-a",), "follow", ("run-a", "CALLER")),
    ("view", ("run-a",), "view", ("run-a",)),
    ("poll_metrics", ("run-a", 17), "poll_metrics", ("run-a", 17, "CALLER")),
    ("rollout_steps", ("run-a",), "rollout_steps", ("run-a",)),
    ("rollouts", ("run-a", 4), "rollouts", ("run-a", 4)),
    ("get_rollouts", ("run-a", 4), "get_rollouts", ("run-a", 4)),
    ("list_runs", (), "list_runs", ()),
    ("overlay_records", (["run-a", "run-b"],), "overlay_records", (["run-a", "run-b"],)),
    ("arenas", (), "arenas", ()),
    ("arena", ("arena-1",), "arena", ("arena-1",)),
    ("comparable_runs", (), "comparable_runs", ()),
    ("run_notes", ("run-a",), "run_notes", ("run-a",)),
    ("label_run", ("run-a", "best", "a note"), "set_notes", ("run-a", "best", "a note", "CALLER")),
    ("delete_run", ("run-a",), "delete", ("run-a", "CALLER")),
    ("heldout_choices", ("run-a", 7), "heldout_choices", ("run-a", 7)),
]


@pytest.fixture
def recorded(tmp_path):
    controller = _controller(tmp_path)
    log, admitted = [], []
    controller.reader = controller.manager = controller.inference = _Recorder(log)
    controller.reads.admit = admitted.append
    return controller, log, admitted


@pytest.mark.parametrize(("method", "args", "asks", "asked"), READS, ids=[r[0] for r in READS])
def test_every_read_counts_against_its_callers_rate_and_asks_for_what_it_was_given(recorded, method, args, asks,
                                                                                   asked):
    controller, log, admitted = recorded
    caller = Caller(client_id="c", host="10.0.0.5")
    answer = getattr(controller, method)(*args, caller=caller)
    assert admitted == ["10.0.0.5"]
    assert log == [(asks, tuple(caller if a == "CALLER" else a for a in asked))]
    assert answer == f"answer-of-{asks}" or asks == "comparable_runs"
    log.clear()
    admitted.clear()
    getattr(controller, method)(*args, caller=Caller(client_id="c", host="10.0.0.5", read_admitted=True))
    assert admitted == [] and len(log) == 1  # the middleware counted it already: not twice


def test_every_method_that_counts_a_read_is_in_the_table_above():
    import inspect

    if any("mutmut" in name for name in vars(Controller)):
        pytest.skip("under mutmut the methods' source is its trampolines")

    counting = {name for name, fn in vars(Controller).items()
                if callable(fn) and name != "_read" and "self._read(caller)" in inspect.getsource(fn)}
    assert counting == {r[0] for r in READS} and len(counting) == 16


def test_the_held_out_picker_offers_forty_prompts_unless_told_otherwise(recorded):
    controller, log, _ = recorded
    controller.heldout_choices("run-a")
    assert log == [("heldout_choices", ("run-a", 40))]


def test_comparable_choices_show_a_label_beside_its_runs_name_and_count_one_read(recorded):
    controller, log, admitted = recorded
    assert controller.comparable_choices(Caller(host="10.0.0.6")) == [("a", "a"), ("second · b", "b")]
    assert admitted == ["10.0.0.6"] and [m for m, _ in log] == ["comparable_runs", "labels"]


def test_sampling_calls_pass_every_argument_to_the_inference_service(recorded):
    controller, log, admitted = recorded
    caller, progress = Caller(host="10.0.0.7"), object()
    controller.evaluate("run-a", 5, 9, caller, progress, 3)
    controller.evaluate("run-b", 2, 1, caller)
    controller.compare("run-a", "The film", 2, 8, 0.7, 0.9, 11, caller)
    controller.probe("run-a", "The film", 3, 12, caller)
    assert log == [
        ("evaluate", ("run-a", 5, 9, caller, progress, 3)),
        ("evaluate", ("run-b", 2, 1, caller, None, 1)),
        ("compare", ("run-a", "The film", 2, 8, 0.7, 0.9, 11, caller)),
        ("probe", ("run-a", "The film", 3, 12, caller)),
    ]
    assert admitted == []  # sampling has its own gate (the inference service's), not the read rate


def test_the_pages_language_is_one_the_page_knows_and_exports_live_in_the_servers_own_folder(tmp_path):
    controller = _controller(tmp_path)
    assert controller.locale("ka") == "ka" and controller.locale("<script>") == "en"
    assert controller._exports.name.startswith("rloo-exports-") and controller._exports.is_dir()
    (controller._exports / "run-a").mkdir()
    (controller._exports / "run-a" / "metrics.jsonl").write_text("{}\n")
    controller.close()
    assert not controller._exports.exists()
    controller.close()  # twice: nothing left to remove, and no error
