"""Mutation tests of the data checks on one rank: a transport that drops, halves, flips or delivers a
stale result of every second collective must fail the check at every size; a faithful one passes.
The two-rank operations (writes, reads, atomics, incast) are in tests/integration/test_data_mutations.py."""

import numpy as np
import pytest
from mpi4py import MPI

from acceptance.engines import mpi
from acceptance.measure.verify import Policy, Slots, Tally, timed_verified
from faults import MODES, FaultyComm

SIZES = [8, 64, 1024, 65536]
ALL = frozenset(range(10))


@pytest.mark.parametrize("op, method", [(mpi.allreduce, "Allreduce"), (mpi.alltoall, "Alltoall")])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", SIZES)
def test_every_mutation_of_a_collective_is_caught(op, method, mode, size):
    comm = FaultyComm(MPI.COMM_SELF, method, mode, onset=1)
    res = op(comm, size, 10, 1, verified=ALL)
    assert res.ops == 10 and 4 <= res.ops_failed <= 5, res
    assert res.wrong > 0 and res.first_wrong.startswith("iteration ")
    if mode == "drop":
        assert res.missing == res.ops_failed     # the poison untouched: never arrived
    elif mode in ("flip", "stale"):
        assert res.missing == 0                  # arrived, wrong


@pytest.mark.parametrize("op", [mpi.allreduce, mpi.alltoall])
def test_a_faithful_collective_passes_every_check(op):
    res = op(FaultyComm(MPI.COMM_SELF, "Allreduce", "drop", every=10**9), 4096, 10, 1, verified=ALL)
    assert (res.ops, res.ops_failed, res.wrong) == (10, 0, 0)


def test_sampled_iterations_are_seeded_alike_on_every_rank_and_include_the_last():
    p = Policy(every_max=1000, samples=3)
    assert p.iterations(10, 100, seed=5) == frozenset(range(10))   # 1000 bytes: every iteration
    few = p.iterations(100, 100, seed=5)
    assert len(few) == 4 and 99 in few and few == p.iterations(100, 100, seed=5)
    assert p.iterations(100, 100, seed=6) != few or True  # another seed may draw others


def test_slots_give_every_write_its_own_place_while_memory_lasts():
    s = Slots.plan(size=1024, window=4, iters=10, capacity=64 * 1024)
    assert (s.per_iter, s.iters_per_batch, s.batches(10)) == (4, 10, 1)
    assert s.offsets(1) == [4096, 5120, 6144, 7168]
    big = Slots.plan(size=1 << 20, window=64, iters=10, capacity=4 << 20)
    assert (big.per_iter, big.iters_per_batch) == (4, 1) and big.offsets(0)[4] == 0  # writes share slots


def test_a_budget_ends_the_loop_with_a_verified_iteration():
    seen = []
    times = timed_verified(lambda: None, 1000, 0, frozenset({500}), lambda i: seen.append(("b", i)),
                           lambda i, last: seen.append(("a", i, last)), budget_ns=0, min_iters=2)
    assert len(times) == 3 and seen == [("b", 2), ("a", 2, True)]


def test_a_tally_says_how_many_did_not_arrive():
    t = Tally()
    t.add(0, 40, 3, 3, 3 * 4096, "batch 0, slot 5: ...")
    t.add(1, 40, 1, 0, 1, "batch 1, slot 2: ...")
    assert t.summary("writes") == ("3 of 80 writes did not arrive; 1 more arrived wrong: "
                                   "12289 wrong bytes; first: batch 0, slot 5: ...")
    assert t.fields() == {"ops": 80, "ops_failed": 4, "ops_missing": 3}
