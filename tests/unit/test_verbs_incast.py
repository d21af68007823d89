"""The verbs engine's IncastGroup over the simulated device of test_verbs.py: a group of 3 ranks (3
threads, a threaded group communicator that splits into pair communicators), a PairLink between
every two of them, the fake queue pairs carrying out the real pyverbs work requests on numpy memory.

Shown: each sender's writes land in its own area of the receiver (and the receiver's probe in its
first sender's memory), the receiver finds every slot intact; a sender whose writes are dropped,
halved, flipped or stale on the wire is named by its group rank; the engine's flip hook is caught;
a failure on one rank fails every rank, none hangs, and everything is freed.
"""

import ctypes
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("pyverbs.device", reason="pyverbs (rdma-core's Python bindings, Debian python3-pyverbs) "
                    "does not import: run `make pyverbs` to link the distribution's package into the venv")

from pyverbs.pyverbs_error import PyverbsRDMAError

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import test_verbs  # noqa: E402
from threadpair import SPLIT, THREAD, run_ranks  # noqa: E402
from test_verbs import ENGINE, IB  # noqa: E402

fake_device = test_verbs.fake_device  # its simulated device (a fixture), for N ranks in group_device

from acceptance.engines import contract, memory  # noqa: E402
from acceptance.engines.verbs import binding as pv  # noqa: E402
from acceptance.engines.verbs import errors as verr  # noqa: E402
from acceptance.engines.verbs import incast as vincast  # noqa: E402
from acceptance.engines.verbs.binding import e  # noqa: E402

WRITE = e.ibv_wr_opcode.IBV_WR_RDMA_WRITE
N = 3
SIZE, WINDOW, PER = 512, 6, 4  # slot_bytes fits 4 slots of 512 B per area (3 areas): per = 4 < window
SLOT_BYTES = N * PER * SIZE
BUDGET = 0.02


def run_group(body, n=N):
    """body(comm) in n threads as group ranks 0..n-1; [(result, exception)] per rank."""
    return run_ranks(body, n)


def no_errors(results):
    for _, exc in results:
        if exc is not None:
            raise exc
    return [r for r, _ in results]


def seed_of(receiver):
    return lambda s: (10 + s, 10 + receiver, receiver)


def windows(group):
    """peer -> (address, bytes) of the window each link offers that peer: where it writes."""
    return {peer: (link.window.ctypes.data, len(link.window)) for peer, link in group.links.items()}


def every_round(group, receivers=range(N)):
    return [group.round(r, SIZE, WINDOW, BUDGET, 8, 50, seed_of(r)) for r in receivers]


def with_group(body, n=N):
    def run(comm):
        group = ENGINE.IncastGroup(comm, SIZE, WINDOW, SLOT_BYTES)
        try:
            return body(group)
        finally:
            group.free()
    return run_group(run, n)


@pytest.fixture
def group_device(fake_device, monkeypatch):
    """The simulated device for N ranks, recording who wrote where (poster's group rank, destination)."""
    fake_device.link_layers = {r: IB for r in range(N)}
    fake_device.writes = []
    real = fake_device.deliver

    def deliver(op, dst, src, length):
        if op == WRITE:
            fake_device.writes.append((THREAD.rank, dst, length))
        return real(op, dst, src, length)

    monkeypatch.setattr(fake_device, "deliver", deliver)
    SPLIT.clear()
    yield fake_device
    SPLIT.clear()


def mutate_writes(fabric, monkeypatch, sender, slot, mode):
    """Every write `sender` posts to slot `slot` of an area is dropped, halved, flipped or stale."""
    real = fabric.deliver
    previous = {}

    def deliver(op, dst, src, length):
        if op != WRITE or THREAD.rank != sender or length != SIZE:
            return real(op, dst, src, length)
        mr = next(m for m in fabric.mrs.values() if m.buf <= dst < m.buf + m.length)
        hit = (dst - mr.buf) // length == slot
        last, previous[mr.buf] = previous.get(mr.buf), ctypes.string_at(src, length)
        if not hit:
            return real(op, dst, src, length)
        if mode == "drop":
            return False
        if mode == "half":
            ctypes.memmove(dst, src, length // 2)
        elif mode == "flip":
            ctypes.memmove(dst, src, length)
            (ctypes.c_uint8 * length).from_address(dst)[length // 3] ^= 1 << 4
        else:  # stale: the payload of this sender's write before it (another slot's)
            ctypes.memmove(dst, last, length)
        return True

    monkeypatch.setattr(fabric, "deliver", deliver)


def test_pairings_join_every_two_ranks_once_in_rounds_of_disjoint_pairs():
    for n in range(1, 10):
        rounds = vincast.pairings(n)
        pairs = [p for r in rounds for p in r]
        assert sorted(pairs) == [(a, b) for a in range(n) for b in range(a + 1, n)], n
        for r in rounds:
            ranks = [x for p in r for x in p]
            assert len(ranks) == len(set(ranks)), (n, r)
        assert len(rounds) == (0 if n < 2 else n - 1 if n % 2 == 0 else n)


def test_the_engine_offers_incast_as_the_contract_says(group_device):
    assert "IncastGroup" in ENGINE.OFFERS

    def body(group):
        assert isinstance(group, contract.IncastGroup)
        return sorted(group.links), group.per, group.area, windows(group)

    results = no_errors(with_group(body))
    for rank, (peers, per, area, wins) in enumerate(results):
        assert peers == [p for p in range(N) if p != rank]  # a link to every other rank
        assert per == PER and area == PER * SIZE  # as the mpi engine: min(window, slot_bytes // (size x n))
        assert all(length == area for _, length in wins.values())  # each link's window: one sender's area
    # 3 rounds of one pair (n odd): per round a pair communicator at both ends and one of 1 rank for the
    # rank sitting it out; every one freed.
    assert sorted(sub.Get_size() for sub in SPLIT) == [1] * 3 + [2] * 6 and all(sub.freed for sub in SPLIT)
    assert not group_device.mrs  # free() released every link


def test_each_sender_writes_its_own_area_and_the_receiver_finds_it_intact(group_device):
    results = no_errors(with_group(lambda group: (every_round(group), windows(group))))
    owner = {}  # window address -> (whose memory, whose area)
    for rank, (_, wins) in enumerate(results):
        for peer, (addr, _) in wins.items():
            owner[addr] = (rank, peer)
    for receiver in range(N):
        senders = [s for s in range(N) if s != receiver]
        got = [rounds[receiver] for rounds, _ in results]
        assert all(isinstance(g, contract.IncastRound) for g in got)
        for s in senders:
            assert got[s].latency_ns is None and got[s].mismatches is None
            assert len(got[s].times_ns) >= 2 and (got[s].times_ns > 0).all()
        mine = got[receiver]
        assert mine.times_ns is None and 1 <= len(mine.latency_ns) <= 50 and (mine.latency_ns > 0).all()
        assert [s for s, _ in mine.mismatches] == senders
        for s, tally in mine.mismatches:
            assert tally.ops == PER and not tally.failed and tally.wrong == 0, (receiver, s, tally)
    # Where every write went: a sender into its own area of some receiver's memory, slot by slot;
    # a receiver (its probe) into the memory of its first sender.
    for poster, dst, length in group_device.writes:
        base = max(a for a in owner if a <= dst)
        whose, area = owner[base]
        assert dst + length <= base + PER * SIZE  # inside that window
        if length == SIZE:
            assert area == poster and (dst - base) % SIZE == 0 and (dst - base) // SIZE < PER
        else:
            assert length == 8 and dst == base and area == poster and whose == min(s for s in range(N) if s != poster)


@pytest.mark.parametrize("mode", ["drop", "half", "flip", "stale"])
def test_a_sender_whose_writes_go_wrong_is_named(group_device, monkeypatch, mode):
    mutate_writes(group_device, monkeypatch, sender=2, slot=1, mode=mode)
    results = no_errors(with_group(every_round))
    for receiver in range(N):
        for s, tally in results[receiver][receiver].mismatches:
            if s == 2:  # one slot of its PER wrong, in every round it sends in
                assert tally.ops == PER and tally.failed == 1 and tally.wrong > 0, (mode, receiver, tally)
                assert tally.missing == (1 if mode == "drop" else 0)
                assert "slot 1" in tally.first
            else:
                assert not tally.failed, (mode, receiver, s, tally)


def test_the_flip_hook_is_caught_in_every_senders_area(group_device, monkeypatch):
    monkeypatch.setenv(memory.FLIP_ENV, "10:3")
    results = no_errors(with_group(lambda group: group.round(0, SIZE, WINDOW, BUDGET, 8, 20, seed_of(0))))
    assert [s for s, _ in results[0].mismatches] == [1, 2]
    for _, tally in results[0].mismatches:
        assert tally.failed == tally.wrong == 1 and "first wrong byte at offset 10 of 512" in tally.first


def test_a_window_smaller_than_the_slots_writes_window_slots(group_device):
    results = no_errors(with_group(lambda group: group.round(1, SIZE, 2, BUDGET, 8, 20, seed_of(1))))
    assert [t.ops for _, t in results[1].mismatches] == [2, 2]  # per = min(PER, window)
    assert not any(t.failed for _, t in results[1].mismatches)


def test_a_failed_completion_on_one_sender_fails_every_rank(group_device):
    def body(group):
        if group.me == 1:
            link = group.links[0]
            link.remote = replace(link.remote, rkey=0xBAD)
        return group.round(0, SIZE, WINDOW, BUDGET, 8, 20, seed_of(0))

    (_, e0), (_, e1), (_, e2) = with_group(body)
    assert isinstance(e1, verr.CompletionError) and "IBV_WC_REM_ACCESS_ERR" in str(e1)
    for other in (e0, e2):
        assert isinstance(other, verr.VerbsError) and "group rank 1 failed: CompletionError: RDMA WRITE" in str(other)
    assert not group_device.mrs and all(sub.freed for sub in SPLIT)


def test_a_setup_failure_on_one_rank_fails_every_rank_and_frees_everything(group_device, monkeypatch):
    real_context = pv.Context

    def context(name):
        if THREAD.rank == 2:
            raise PyverbsRDMAError("Failed to find device fake0")
        return real_context(name)

    monkeypatch.setattr(pv, "Context", context)
    errors = [exc for _, exc in with_group(lambda group: None)]
    assert all(isinstance(x, verr.VerbsError) for x in errors)
    assert str(errors[2]) == "cannot open RDMA device fake0: Failed to find device fake0"
    assert "group rank 2 failed: VerbsError: cannot open RDMA device fake0" in str(errors[0])
    assert not group_device.mrs and all(sub.freed for sub in SPLIT)


def test_a_check_that_raises_on_the_receiver_fails_every_rank(group_device, monkeypatch):
    monkeypatch.setenv(memory.FLIP_ENV, "not a number")
    errors = [exc for _, exc in with_group(lambda group: group.round(2, SIZE, WINDOW, BUDGET, 8, 20, seed_of(2)))]
    assert isinstance(errors[2], ValueError) and "ACCEPTANCE_TEST_FLIP_BIT" in str(errors[2])
    assert all(isinstance(x, verr.VerbsError) and "group rank 2 failed: ValueError" in str(x) for x in errors[:2])


def test_round_argument_checks(group_device):
    def body(group):
        with pytest.raises(ValueError, match="receiver 3"):
            group.round(3, SIZE, WINDOW, BUDGET, 8, 20, seed_of(0))
        with pytest.raises(ValueError, match="size 513 B outside 1..512 B"):
            group.round(0, SIZE + 1, WINDOW, BUDGET, 8, 20, seed_of(0))
        return True

    assert no_errors(with_group(body)) == [True] * N


def test_two_ranks_one_sender(group_device):
    results = no_errors(with_group(lambda group: every_round(group, range(2)), n=2))
    for receiver in range(2):
        (s, tally), = results[receiver][receiver].mismatches
        assert s == 1 - receiver and tally.ops == min(WINDOW, SLOT_BYTES // (SIZE * 2)) and not tally.failed
