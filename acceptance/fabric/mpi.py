"""The `mpi` engine: MPI one-sided RMA and collectives through mpi4py.

Memory registration is `Win.Allocate` / `Win.Create` (an RDMA-capable MPI
registers window memory with the NIC there); a one-sided write is `Put` +
`Flush`, as in OSU's osu_put_bw / osu_put_latency with `-w allocate -s flush`.
On a real cluster it rides whatever fabric the MPI library uses. The engine
knows one transport and nothing about pytest, thresholds or reports: it
returns raw per-iteration times (ns) and verification results.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..measure import timed, timed_capped
from .collective_data import ALLREDUCE, ALLTOALL, Wrong, compare
from .memory import (
    Mismatch,
    allocate,
    check_counter,
    corrupt_for_test,
    fill_pattern,
    verify,
)

NAME = "mpi"


def available() -> tuple[bool, str]:
    """The mpi engine runs wherever mpi4py imports; say which library it is."""
    return True, " ".join(MPI.Get_library_version().split("\n", 1)[0].split())


def configure(topology, profile) -> None:
    """Nothing to pick: the MPI library chooses its own devices."""


# ---- memory registration ----------------------------------------------------


def register_times(
    nbytes: int, repeats: int, how: str
) -> tuple[np.ndarray, np.ndarray]:
    """(registration ns, deregistration ns) for `repeats` windows of nbytes on this rank alone.

    how = "allocate": MPI allocates and registers (Win.Allocate);
    how = "create": MPI registers memory we allocated (Win.Create).
    """
    reg = np.empty(repeats, dtype=np.int64)
    dereg = np.empty(repeats, dtype=np.int64)
    buf = allocate(nbytes) if how == "create" else None
    now = time.perf_counter_ns
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(repeats):
            t0 = now()
            if buf is None:
                win = MPI.Win.Allocate(nbytes, 1, comm=MPI.COMM_SELF)
            else:
                win = MPI.Win.Create(buf, 1, comm=MPI.COMM_SELF)
            t1 = now()
            win.Free()
            t2 = now()
            reg[i], dereg[i] = t1 - t0, t2 - t1
    finally:
        if was_enabled:
            gc.enable()
    return reg, dereg


def resident_bytes() -> int:
    """This process's resident set size (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def registration_growth(nbytes: int, cycles: int) -> int:
    """Resident memory growth over `cycles` register/deregister pairs: a leak check.

    One untimed cycle first, so the library's one-time setup is not counted.
    """
    MPI.Win.Allocate(nbytes, 1, comm=MPI.COMM_SELF).Free()
    gc.collect()
    before = resident_bytes()
    for _ in range(cycles):
        MPI.Win.Allocate(nbytes, 1, comm=MPI.COMM_SELF).Free()
    gc.collect()
    return resident_bytes() - before


# ---- point-to-point ---------------------------------------------------------


@dataclass
class Transfer:
    """One direction of one size: the origin's times, the target's verification."""

    times_ns: np.ndarray | None  # origin only
    mismatch: Mismatch | None  # target only; None when the data arrived intact


class PairLink:
    """Two ranks (a pair communicator of size 2) with an RMA window on each.

    Both ranks call every method (collective over the pair); `origin` names
    the pair rank (0 or 1) that writes, the other is the passive target.
    """

    def __init__(self, comm: MPI.Comm, max_size: int):
        if comm.Get_size() != 2:
            raise ValueError(
                f"a PairLink needs a communicator of 2 ranks, got {comm.Get_size()}"
            )
        self.comm = comm
        self.me = comm.Get_rank()
        self.peer = 1 - self.me
        self.win = MPI.Win.Allocate(max(max_size, 1), 1, comm=comm)
        self.window_mem = np.frombuffer(self.win.tomemory(), dtype=np.uint8)
        self.send = allocate(max(max_size, 1))

    def free(self) -> None:
        self.win.Free()

    def put_bandwidth(
        self,
        size: int,
        iters: int,
        warmup: int,
        window: int,
        origin: int,
        seed: tuple[int, int, int],
        budget_s: float | None = None,
    ) -> Transfer:
        """osu_put_bw: each iteration is `window` Puts then one Flush. Data verified after the run.

        seed = (source world rank, destination world rank, iteration) of the pattern.
        budget_s caps the timed loop (at least 2 iterations), so a crippled link costs seconds.
        """
        if self.me == origin:
            fill_pattern(self.send[:size], *seed)
        times = self._timed_puts(size, iters, warmup, window, origin, budget_s)
        mismatch = None
        if self.me != origin:
            # An exclusive lock on our own window orders our reads after the peer's completed puts.
            self.win.Lock(self.me, MPI.LOCK_EXCLUSIVE)
            try:
                got = self.window_mem[:size]
                corrupt_for_test(got)
                mismatch = verify(got, *seed)
            finally:
                self.win.Unlock(self.me)
        self.comm.Barrier()
        return Transfer(times, mismatch)

    def put_latency(self, size: int, iters: int, warmup: int, origin: int) -> np.ndarray | None:
        """osu_put_latency with flush: one Put + Flush per sample (not halved)."""
        return self._timed_puts(size, iters, warmup, 1, origin)

    def _timed_puts(self, size: int, iters: int, warmup: int, puts: int, origin: int,
                    budget_s: float | None = None) -> np.ndarray | None:
        """The origin times `puts` Puts + one Flush per iteration; the target waits. Collective over the pair."""
        times = None
        if self.me == origin:
            win, target = self.win, self.peer
            put, flush = win.Put, win.Flush
            spec = [self.send[:size], MPI.BYTE]

            if puts == 1:  # no inner loop: it would add to every latency sample
                def op():
                    put(spec, target)
                    flush(target)
            else:
                def op():
                    for _ in range(puts):
                        put(spec, target)
                    flush(target)

            times = self._locked(op, iters, warmup, budget_s)
        self.comm.Barrier()
        return times

    def _locked(self, op, iters: int, warmup: int, budget_s: float | None = None) -> np.ndarray:
        """The origin's timed loop inside a passive-target epoch on the peer's window."""
        self.win.Lock(self.peer, MPI.LOCK_SHARED)
        try:
            return (timed(op, iters, warmup) if budget_s is None
                    else timed_capped(op, iters, warmup, int(budget_s * 1e9), min_iters=2))
        finally:
            self.win.Unlock(self.peer)

    def read_latency(self, size: int, iters: int, warmup: int, origin: int) -> np.ndarray | None:
        """osu_get_latency with flush: one Get + Flush per sample, a full round trip."""
        times = None
        if self.me == origin:
            win, target = self.win, self.peer
            get, flush = win.Get, win.Flush
            spec = [self.send[:size], MPI.BYTE]

            def op():
                get(spec, target)
                flush(target)

            times = self._locked(op, iters, warmup)
        self.comm.Barrier()
        return times

    def atomic_latency(self, iters: int, warmup: int, origin: int) -> Transfer:
        """Fetch_and_op(1, SUM) + Flush on the target's 64-bit counter per sample (a full round trip).

        The target zeroes the counter first and checks it holds warmup + iters at the end.
        """
        counter = self.window_mem[:8].view(np.int64)
        if self.me != origin:
            self.win.Lock(self.me, MPI.LOCK_EXCLUSIVE)
            counter[0] = 0
            self.win.Unlock(self.me)
        self.comm.Barrier()
        times = mismatch = None
        if self.me == origin:
            win, target = self.win, self.peer
            one, old = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
            fop, flush = win.Fetch_and_op, win.Flush
            spec_one, spec_old = [one, MPI.INT64_T], [old, MPI.INT64_T]

            def op():
                fop(spec_one, spec_old, target, 0, MPI.SUM)
                flush(target)

            times = self._locked(op, iters, warmup)
        self.comm.Barrier()
        if self.me != origin:
            self.win.Lock(self.me, MPI.LOCK_EXCLUSIVE)
            raw = counter.tobytes()
            self.win.Unlock(self.me)
            mismatch = check_counter(raw, warmup + iters)
        self.comm.Barrier()
        return Transfer(times, mismatch)

    def pingpong_latency(
        self, size: int, iters: int, warmup: int, origin: int
    ) -> np.ndarray | None:
        """osu_latency: Send/Recv ping-pong; each sample is half a round trip, timed at the origin."""
        comm, peer = self.comm, self.peer
        spec = [self.send[:size], MPI.BYTE]
        send, recv = comm.Send, comm.Recv
        if self.me == origin:

            def op():
                send(spec, peer, 1)
                recv(spec, peer, 1)

            times = timed(op, iters, warmup) // 2
        else:
            for _ in range(iters + warmup):
                recv(spec, peer, 1)
                send(spec, peer, 1)
            times = None
        comm.Barrier()
        return times


# ---- incast -------------------------------------------------------------------


@dataclass
class IncastRound:
    """One incast round: what each sender timed, what the receiver saw."""

    times_ns: np.ndarray | None       # a sender's windowed-put iterations
    latency_ns: np.ndarray | None     # the receiver's put+flush samples to its first sender, under the load
    mismatches: list | None           # receiver only: (sender group rank, Mismatch or None) per sender


class IncastGroup:
    """A group of ranks (one per node, on one rail) taking turns as the incast receiver.

    Every rank holds a window of one `size` slot per group rank: in a round, sender s
    writes into slot s of the receiver's window, so the K senders never overlap, and the
    receiver's latency probe writes into its own slot of the first sender's window.
    """

    def __init__(self, comm: MPI.Comm, size: int):
        self.comm = comm
        self.me, self.n = comm.Get_rank(), comm.Get_size()
        self.size = max(size, 1)
        self.win = MPI.Win.Allocate(self.size * self.n, 1, comm=comm)
        self.window_mem = np.frombuffer(self.win.tomemory(), dtype=np.uint8)
        self.send = allocate(self.size)

    def free(self) -> None:
        self.win.Free()

    def round(self, receiver: int, size: int, window: int, budget_s: float, probe_size: int,
              probe_iters: int, seed: Callable[[int], tuple[int, int, int]]) -> IncastRound:
        """All senders write to `receiver` at once for about budget_s; the receiver probes latency meanwhile.

        Collective over the group. seed(sender) is the (source, destination, iteration)
        of that sender's data pattern; the receiver verifies every slot afterwards.
        """
        senders = [r for r in range(self.n) if r != receiver]
        budget_ns = int(budget_s * 1e9)
        times = latency = mismatches = None
        put, flush = self.win.Put, self.win.Flush
        if self.me != receiver:
            fill_pattern(self.send[:size], *seed(self.me))
            spec, disp = [self.send[:size], MPI.BYTE], self.me * self.size

            def op():
                for _ in range(window):
                    put(spec, receiver, disp)
                flush(receiver)

        else:
            # The probe rides the receiver's port while the senders flood it: its flush
            # completes only when the first sender's acknowledgement gets back through.
            target, pspec, pdisp = senders[0], [self.send[:probe_size], MPI.BYTE], self.me * self.size

            def op():
                put(pspec, target, pdisp)
                flush(target)

        peer = receiver if self.me != receiver else senders[0]
        self.comm.Barrier()  # everyone starts together: that is the incast
        self.win.Lock(peer, MPI.LOCK_SHARED)
        try:
            if self.me != receiver:
                times = timed_capped(op, 1 << 20, 1, budget_ns, min_iters=2)  # iteration cap: 8 MiB of int64
            else:
                latency = timed_capped(op, probe_iters, 10, budget_ns, min_iters=1)
        finally:
            self.win.Unlock(peer)
        self.comm.Barrier()
        if self.me == receiver:
            self.win.Lock(self.me, MPI.LOCK_EXCLUSIVE)
            try:
                mismatches = []
                for s in senders:
                    got = self.window_mem[s * self.size: s * self.size + size]
                    corrupt_for_test(got)
                    mismatches.append((s, verify(got, *seed(s))))
            finally:
                self.win.Unlock(self.me)
        self.comm.Barrier()
        return IncastRound(times, latency, mismatches)


# ---- collectives --------------------------------------------------------------


@dataclass
class Collective:
    nbytes: int            # bytes per rank actually moved (nccl-tests' "size")
    times_ns: np.ndarray   # per iteration, the slowest rank's time (valid on comm rank 0)
    wrong: int             # elements that differ from the exact expected result, over all ranks
    first_wrong: str | None


def _slowest(comm: MPI.Comm, times: np.ndarray) -> np.ndarray:
    """Per-iteration max over ranks, as nccl-tests -I does across GPUs and processes."""
    out = np.empty_like(times) if comm.Get_rank() == 0 else None
    comm.Reduce(times, out, op=MPI.MAX, root=0)
    return out


def allreduce(comm: MPI.Comm, size: int, iters: int, warmup: int) -> Collective:
    """Sum of float64 vectors of `size` bytes; inputs are small integers, so the sum is exact."""
    rank, n = comm.Get_rank(), comm.Get_size()
    count = ALLREDUCE.elements(size, n)
    send = ALLREDUCE.send(np, count, rank, n)
    recv = np.empty(count, dtype=np.float64)
    Allreduce = comm.Allreduce
    spec_s, spec_r = [send, MPI.DOUBLE], [recv, MPI.DOUBLE]
    times = timed(lambda: Allreduce(spec_s, spec_r, op=MPI.SUM), iters, warmup)
    return _checked(comm, ALLREDUCE.nbytes(count, n), times, recv, ALLREDUCE.expected(np, count, rank, n))


def alltoall(comm: MPI.Comm, size: int, iters: int, warmup: int) -> Collective:
    """Each rank sends `size` bytes in total (a block per rank, itself included), as nccl-tests counts it."""
    rank, n = comm.Get_rank(), comm.Get_size()
    block = ALLTOALL.elements(size, n)
    send = ALLTOALL.send(np, block, rank, n)
    recv = np.empty_like(send)
    Alltoall = comm.Alltoall
    spec_s, spec_r = [send, block, MPI.DOUBLE], [recv, block, MPI.DOUBLE]
    times = timed(lambda: Alltoall(spec_s, spec_r), iters, warmup)
    return _checked(comm, ALLTOALL.nbytes(block, n), times, recv, ALLTOALL.expected(np, block, rank, n))


def _checked(comm: MPI.Comm, nbytes: int, times: np.ndarray, got: np.ndarray,
             expected: np.ndarray) -> Collective:
    return checked(comm, nbytes, times, compare(np, got, expected))


def checked(comm: MPI.Comm, nbytes: int, times: np.ndarray, wrong: Wrong) -> Collective:
    """The Collective every rank returns: wrong elements summed over ranks, the first one named,
    times reduced to the per-iteration slowest rank on comm rank 0 (mpi._slowest). Collective."""
    first = None
    if wrong.count:
        first = (f"rank {comm.Get_rank()} element {wrong.index}: "
                 f"expected {wrong.expected!r}, got {wrong.got!r}")
    total = comm.allreduce(wrong.count, op=MPI.SUM)
    firsts = [f for f in comm.allgather(first) if f]
    return Collective(nbytes, _slowest(comm, times), total, firsts[0] if firsts else None)
