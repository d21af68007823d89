"""Watchdog: a real deadline thread, short timeouts, bounded waits."""
import threading
import time

import pytest

from acceptance.runtime.watchdog import Phase, Watchdog

WAIT = 2.0  # upper bound for any wait on the watchdog thread


@pytest.fixture
def make_watchdog():
    """Watchdogs disarmed at teardown, so their daemon threads go idle."""
    made = []

    def make(stages):
        w = Watchdog(stages)
        made.append(w)
        return w
    yield make
    for w in made:
        w.disarm()


def recorder():
    calls, fired = [], threading.Event()

    def cb(phase):
        calls.append((phase, time.monotonic()))
        fired.set()
    return calls, fired, cb


def test_phase_label():
    p = Phase("suites/test_p2p.py::test_bw[4MiB]", "call", 1.5, 100.0)
    assert p.label == "suites/test_p2p.py::test_bw[4MiB] (call)"
    assert Phase("session", "sessionfinish", 1, 2).label == "session (sessionfinish)"


def test_arm_returns_phase(make_watchdog):
    w = make_watchdog([])
    before = time.monotonic()
    p = w.arm("t::a", "setup", 5.0)
    after = time.monotonic()
    assert (p.nodeid, p.when, p.timeout) == ("t::a", "setup", 5.0)
    assert before + 5.0 <= p.deadline <= after + 5.0
    assert w.phase is p
    w.disarm()
    assert w.phase is None


def test_fires_after_deadline(make_watchdog):
    calls, fired, cb = recorder()
    w = make_watchdog([(0.0, cb)])
    phase = w.arm("t::a", "call", 0.2)
    assert fired.wait(WAIT)
    w.disarm()
    got, at = calls[0]
    assert got is phase
    assert at >= phase.deadline
    assert at - phase.deadline < 1.0


def _before_its_deadline(make_watchdog, act, tries: int = 5):
    """Runs act(watchdog, callback) until it returned before the phase it armed was due (a stalled
    machine can reach the next statement after a short deadline), so the test waits on what the
    watchdog did, never on how fast this machine ran the lines in between."""
    for _ in range(tries):
        calls, fired, cb = recorder()
        w = make_watchdog([(0.0, cb)])
        armed = act(w)
        if time.monotonic() < armed.deadline:
            return w, calls, fired, armed
        w.disarm()
    pytest.fail(f"the machine never reached the next line within the deadline in {tries} tries")


def test_disarm_before_deadline_prevents_firing(make_watchdog):
    def arm_then_disarm(w):
        phase = w.arm("t::a", "call", 0.2)
        w.disarm()
        return phase
    _, calls, fired, phase = _before_its_deadline(make_watchdog, arm_then_disarm)
    # The deadline passes, and well after it nothing fired.
    assert not fired.wait(phase.timeout + 0.5)
    assert calls == []


def test_rearm_resets_deadline(make_watchdog):
    first = {}

    def arm_twice(w):
        first["phase"] = w.arm("t::a", "setup", 0.3)
        time.sleep(0.05)
        w.arm("t::a", "call", 0.3)
        return first["phase"]
    w, calls, fired, _ = _before_its_deadline(make_watchdog, arm_twice)
    second = w.phase
    assert fired.wait(WAIT)
    w.disarm()
    assert all(p is second for p, _ in calls)
    assert calls[0][1] >= second.deadline > first["phase"].deadline


def test_stages_fire_in_order(make_watchdog):
    order, done = [], threading.Event()

    def stage(name):
        def cb(phase):
            order.append((name, phase, time.monotonic()))
            if name == "late":
                done.set()
        return cb
    # Given out of order: the watchdog sorts stages by their delay.
    w = make_watchdog([(0.2, stage("late")), (0.0, stage("early"))])
    phase = w.arm("t::a", "call", 0.1)
    assert done.wait(WAIT)
    w.disarm()
    (n1, p1, t1), (n2, p2, t2) = order[:2]
    assert (n1, n2) == ("early", "late")
    assert p1 is phase and p2 is phase
    assert t1 >= phase.deadline
    assert t2 >= phase.deadline + 0.2


def test_disarm_between_stages_stops_later_stages(make_watchdog):
    for _ in range(5):
        order = []
        early = threading.Event()

        def first(phase):
            order.append("early")
            early.set()
        w = make_watchdog([(0.0, first), (0.3, lambda p: order.append("late"))])
        phase = w.arm("t::a", "call", 0.05)
        assert early.wait(WAIT)
        w.disarm()
        if time.monotonic() < phase.deadline + 0.3:  # disarmed before the late stage was due
            break
    else:
        pytest.fail("the machine never disarmed before the late stage was due in 5 tries")
    time.sleep(0.5)
    assert "late" not in order


def test_rearm_after_disarm_fires_again(make_watchdog):
    seen = {"t::a": threading.Event(), "t::b": threading.Event()}
    phases = []

    def cb(phase):
        phases.append(phase)
        seen[phase.nodeid].set()
    w = make_watchdog([(0.0, cb)])
    first = w.arm("t::a", "call", 0.05)
    assert seen["t::a"].wait(WAIT)
    w.disarm()
    second = w.arm("t::b", "teardown", 0.05)
    assert seen["t::b"].wait(WAIT)
    w.disarm()
    assert first in phases and second in phases
    assert phases.index(first) < phases.index(second)


def test_each_stage_fires_once_per_armed_phase(make_watchdog):
    count = [0]
    fired = threading.Event()

    def cb(phase):
        count[0] += 1
        fired.set()
    w = make_watchdog([(0.0, cb)])
    w.arm("t::a", "call", 0.05)
    assert fired.wait(WAIT)
    time.sleep(0.3)
    w.disarm()
    time.sleep(0.05)
    assert count[0] == 1
