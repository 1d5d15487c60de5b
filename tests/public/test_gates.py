"""The sampling gate's arithmetic on a clock the test moves: how long a refused visitor is told to wait, which
share it has used, and where each window ends. Every number below is worked out by hand in its comment.

``python -m pytest tests/public/test_gates.py`` (a second).
"""

from dataclasses import replace

import pytest

from rloo_demo.errors import RateLimited
from rloo_demo.public.gates import SamplingGate
from rloo_demo.public.limits import LOCAL


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def _gate(training=True, **limits):
    clock = Clock(0.0)
    gate = SamplingGate(replace(LOCAL, **limits), training=lambda: training, clock=clock)
    return gate, clock


def _sample(gate, clock, who, start, seconds):
    """A sampling job of ``who`` from ``start`` that takes ``seconds`` (the gate records its end and length)."""
    clock.now = start
    with gate(who):
        clock.now = start + seconds


def _refused(gate, clock, who, at):
    clock.now = at
    with pytest.raises(RateLimited) as err:
        with gate(who):
            pass
    return str(err.value)


def test_a_visitor_over_its_rate_waits_until_its_oldest_call_leaves_the_window():
    gate, clock = _gate(sampling_per_minute=3)
    for t in (1000.0, 1010.0, 1020.0):
        _sample(gate, clock, "a", t, 0.0)
    # the oldest of the three was at 1000: it leaves the 60 s window at 1060, so at 1025 the wait is 35 s (not 45:
    # the second call's, nor 85)
    message = _refused(gate, clock, "a", 1025.0)
    assert message == "too many samples requested: 3 a minute per visitor; try again in 35 s"
    assert _refused(gate, clock, "a", 1060.0).endswith("try again in 0 s")  # exactly a window old: still counted
    _sample(gate, clock, "b", 1025.0, 0.0)  # another visitor has a rate of its own
    _sample(gate, clock, "a", 1060.5, 0.0)  # the call at 1000 has left


def test_one_visitor_is_refused_at_half_the_share_and_told_when_its_first_job_leaves():
    # share 0.4 of 10 s: 4 s of sampling every 10 s while training, one visitor 2 s of it
    gate, clock = _gate(sampling_share=0.4)
    _sample(gate, clock, "a", 1.0, 1.0)  # ends at 2, 1 s
    _sample(gate, clock, "a", 2.5, 1.5)  # 1 s used: under 2, admitted; ends at 4, 2.5 s in all
    message = _refused(gate, clock, "a", 5.0)
    # its first job ended at 2 and leaves the window at 12: 7 s from 5 (6 if the job's length were read as its end)
    assert message == (
        "a run is training: your sampling has used your part of the CPU (2.5 s of the last 10 s; one visitor may use "
        "50% of sampling's 40%), so that others can sample too; try again in 7 s"
    )
    _sample(gate, clock, "b", 5.0, 0.5)  # another visitor is not refused: the whole share is not used


def test_a_visitor_at_exactly_its_part_is_refused():
    gate, clock = _gate(sampling_share=0.4)
    _sample(gate, clock, "a", 0.0, 1.2)
    _sample(gate, clock, "a", 1.2, 0.8)  # 2 s: exactly half of 4
    assert "your part of the CPU (2.0 s" in _refused(gate, clock, "a", 3.0)


def test_when_sampling_has_used_the_whole_share_everyone_waits_for_its_oldest_job():
    gate, clock = _gate(sampling_share=0.4)
    _sample(gate, clock, "a", 1.0, 1.5)  # ends at 2.5
    _sample(gate, clock, "b", 3.0, 1.5)  # ends at 4.5
    _sample(gate, clock, "c", 5.0, 1.0)  # ends at 6: 4 s in all, the share of the window
    message = _refused(gate, clock, "d", 7.0)
    # the oldest job ended at 2.5 and leaves at 12.5: 5.5 s from 7, said as 6
    assert message == (
        "a run is training: sampling has used its share of the CPU (4.0 s of the last 10 s), so that training stays "
        "fast; try again in 6 s"
    )
    assert _refused(gate, clock, "d", 12.5).endswith("try again in 1 s")  # exactly a window old: still counted
    _sample(gate, clock, "d", 13.0, 1.0)  # the job that ended at 2.5 has left the window: 2.5 s used


def test_a_long_job_keeps_to_the_share_as_it_goes_waiting_between_its_parts():
    """An Evaluate paces itself between prompts: 4 s of every 10 while a run trains (share 0.4). After 3 s it goes
    on; after 5 s it waits, a second at a time and then the 0.05 s floor, until its first part (which ended at 3)
    has left the window (after 13), so it resumes at 13.05 with 2 s in the window; the waits are not counted as
    sampling. Without a run training it never waits."""
    gate, clock = _gate(sampling_share=0.4)
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        clock.now += seconds

    gate.sleep = sleep
    clock.now = 0.0
    with gate("a"):
        clock.now = 3.0
        gate.pace()
        assert slept == [] and [(e, s) for e, s, _ in gate._spent] == [(3.0, 3.0)]
        clock.now = 5.0
        gate.pace()
        assert clock.now == pytest.approx(13.05) and slept == [1.0] * 8 + [0.05]
        assert [(e, s) for e, s, _ in gate._spent] == [(5.0, 2.0)]
        clock.now = 15.0
    assert [(e, round(s, 6)) for e, s, _ in gate._spent] == [(5.0, 2.0), (15.0, 1.95)]  # counted from the resume
    idle, idle_clock = _gate(training=False, sampling_share=0.4)
    idle.sleep = lambda seconds: pytest.fail("waited without a run training")
    with idle("a"):
        idle_clock.now = 50.0
        idle.pace()
    idle.pace()  # outside a job: nothing to pace


def test_without_training_or_a_share_sampling_is_never_refused_for_its_time():
    for gate, clock in (_gate(training=False, sampling_share=0.4), _gate(sampling_share=None)):
        for start in range(0, 50, 10):
            _sample(gate, clock, "a", float(start), 9.0)  # 45 s of sampling in a minute


def test_a_refusal_releases_the_gate_for_the_next_job():
    gate, clock = _gate(sampling_share=0.4)
    _sample(gate, clock, "a", 0.0, 2.5)
    _refused(gate, clock, "a", 3.0)
    _sample(gate, clock, "b", 3.0, 1.0)  # would wait SAMPLING_WAIT and raise Busy had the refusal kept the slot


def test_a_share_of_nothing_refuses_every_sampling_while_training_for_a_whole_window():
    gate, clock = _gate(sampling_share=0.0)
    assert _refused(gate, clock, "a", 5.0) == (
        "a run is training: sampling has used its share of the CPU (0.0 s of the last 10 s), so that training stays "
        "fast; try again in 10 s"
    )


# ----------------------------------------------------------------------------- the event gate and the sweep


def test_a_refused_event_is_told_when_its_allowance_holds_its_cost_again():
    from rloo_demo.public.gates import EventGate

    clock = Clock(0.0)
    gate = EventGate(replace(LOCAL, event_ms_per_minute=6), clock=clock)  # 0.1 ms a second, an allowance of 2
    gate.admit("a", 2)
    clock.now = 2.0  # 0.2 back: 0.8 to go for a cost of 1, at 0.1 a second
    with pytest.raises(RateLimited) as err:
        gate.admit("a", 1)
    assert str(err.value) == (
        "too many requests: this server gives each visitor about 0 ms of its time a second for page updates, "
        "clicks, polls and lists together; try again in 8 s"
    )
    never = EventGate(replace(LOCAL, event_ms_per_minute=0), clock=clock)  # no refill: a whole window
    never.admit("a", 1)
    with pytest.raises(RateLimited) as err:
        never.admit("a", 1)
    assert str(err.value).endswith("try again in 60 s")


def test_idle_visitors_are_swept_at_most_once_a_window():
    from rloo_demo.public.gates import forget_idle

    table, last = {"idle": 1, "busy": 2}, {}
    idle = lambda value, now: value == 1  # noqa: E731
    forget_idle(table, idle, 100.0, last)
    assert table == {"busy": 2} and last == {"swept": 100.0}
    table["idle"] = 1
    forget_idle(table, idle, 159.0, last)  # 59 s after the last sweep: not yet
    assert table == {"busy": 2, "idle": 1} and last == {"swept": 100.0}
    forget_idle(table, idle, 160.0, last)  # a window after it: swept
    assert table == {"busy": 2} and last == {"swept": 160.0}


def test_a_starters_record_is_a_hash_of_its_id_and_an_id_that_is_no_text_is_refused():
    import hashlib

    from rloo_demo.errors import InputError
    from rloo_demo.public.gates import owner_digest

    assert owner_digest("page-42") == hashlib.sha256(b"rloo-demo:page-42").hexdigest()[:32]
    assert len(owner_digest("")) == 32
    with pytest.raises(InputError) as err:
        owner_digest(42)
    assert str(err.value) == "client_id is not a text"
    with pytest.raises(InputError) as err:
        owner_digest("a\ud800")
    assert str(err.value) == "client_id is not valid Unicode text (a lone surrogate at character 1)"


def test_a_peer_that_is_no_address_is_never_a_trusted_proxy():
    from rloo_demo.public.limits import visitor_address

    assert visitor_address("testclient", "1.2.3.4", ("10.0.0.0/8",)) == "testclient"
    assert visitor_address("10.1.2.3", "1.2.3.4", ("10.0.0.0/8",)) == "1.2.3.4"
