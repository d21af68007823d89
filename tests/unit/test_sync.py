"""Agreement on a real one-rank MPI world (singleton init, no mpiexec)."""
import time

import pytest
from mpi4py import MPI

from acceptance.runtime.outcomes import merge, phase_summary
from acceptance.runtime.sync import Agreement


@pytest.fixture
def agreement():
    a = Agreement(MPI.COMM_WORLD)
    yield a
    a.comm.Free()


def test_private_communicator(agreement):
    assert (agreement.rank, agreement.size) == (0, 1)
    assert agreement.comm != MPI.COMM_WORLD
    assert MPI.Comm.Compare(agreement.comm, MPI.COMM_WORLD) == MPI.CONGRUENT


def test_agree_size_one_returns_merge_of_own_payload(agreement):
    seen = []

    def merge_fn(got):
        seen.append(dict(got))
        return {"sum": sum(got.values())}
    got = agreement.agree(41, merge_fn, deadline=lambda: time.monotonic() + 1.0, label="t::a (call)")
    assert got == {"sum": 41}
    assert seen == [{0: 41}]


def test_agree_size_one_with_outcomes_merge(agreement):
    payload = phase_summary("failed", "call", False, "boom")
    got = agreement.agree(payload, lambda g: merge(g, {0: "0@node1"}),
                          deadline=lambda: time.monotonic() + 1.0, label="t::a (call)")
    assert got == {"outcome": "failed", "ranks": [0],
                   "longrepr": "failed on rank [0@node1] of 1\n---- failed on rank [0@node1] ----\nboom"}


def test_agree_size_one_past_deadline_still_agrees(agreement):
    # Nobody else to wait for: a deadline already passed cannot make rank 0 miss itself.
    got = agreement.agree("x", lambda g: sorted(g.items()), deadline=lambda: time.monotonic() - 10, label="late")
    assert got == [(0, "x")]


def test_collect_notes_size_one_returns_at_once(agreement):
    # No other rank to hear from: it returns without waiting out the hour it was given.
    start = time.monotonic()
    assert agreement.collect_notes(3600.0, "t::a (call)") == {}
    assert time.monotonic() - start < 600


def test_send_note_on_rank_zero_sends_nothing(agreement):
    agreement.send_note("t::a (call)", "stuck somewhere")
    assert agreement.comm.iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) is False
    assert agreement.collect_notes(0.1, "t::a (call)") == {}


def test_arrived_size_one_is_bounded(agreement):
    # Nobody arrives on a one-rank world (rank 0 reports others): it stops polling at its settle time,
    # not later (an hour would be the hang this guards against).
    start = time.monotonic()
    got = agreement.arrived(settle=0.2)
    assert got == {}
    assert time.monotonic() - start < 600
