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

from ..measure import Tally, timed, timed_capped, timed_sequence, timed_verified
from ..measure.verify import Policy, Slots, WriteCheck, batched, planned_batches
from .collective_data import ALLREDUCE, ALLTOALL, Buffers
from .contract import IncastRound, Transfer
from .registry import register
from .memory import allocate, counter_tally, fetched_tally, fill_pattern, poison, slot_tally

def available() -> tuple[bool, str]:
    """The mpi engine runs wherever mpi4py imports: which library, its MPI version, and mpi4py's."""
    import mpi4py
    lib = next((ln for ln in MPI.Get_library_version().splitlines() if ln.strip()), "unknown MPI")
    # "MPICH Version:      5.0.2" -> "MPICH 5.0.2"; "Open MPI v4.1.5, package: ..." -> "Open MPI v4.1.5"
    lib = " ".join(lib.split(",")[0].replace("Version:", "").split())
    major, minor = MPI.Get_version()
    return True, f"{lib} (MPI {major}.{minor}) via mpi4py {mpi4py.__version__}"


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


def _windowed(call: Callable, flush: Callable, local: np.ndarray, target: int, slots: Slots, size: int,
              window: int) -> Callable[[int], Callable[[], None]]:
    """op_at(t) of a windowed RMA loop: iteration t of a batch calls `call` (Put or Get) on each of its
    slots, local and remote at the same offset, then one Flush."""
    def op_at(t: int):
        plan = [([local[off:off + size], MPI.BYTE], off) for off in slots.offsets(t)]
        if window == 1:  # no inner loop: it would add to every latency sample
            (spec, disp), = plan

            def op():
                call(spec, target, disp)
                flush(target)
            return op

        def op():
            for spec, disp in plan:
                call(spec, target, disp)
            flush(target)
        return op
    return op_at


class PairLink:
    """Two ranks (a pair communicator of size 2) with an RMA window on each.

    Both ranks call every method (collective over the pair); `origin` names
    the pair rank (0 or 1) that writes, the other is the passive target.
    """

    def __init__(self, comm: MPI.Comm, max_size: int, slot_bytes: int = 0):
        """slot_bytes: window and send memory for the distinct slots of windowed writes (at least max_size)."""
        if comm.Get_size() != 2:
            raise ValueError(
                f"a PairLink needs a communicator of 2 ranks, got {comm.Get_size()}"
            )
        self.comm = comm
        self.me = comm.Get_rank()
        self.peer = 1 - self.me
        nbytes = max(max_size, slot_bytes, 1)
        self.win = MPI.Win.Allocate(nbytes, 1, comm=comm)
        self.window_mem = np.frombuffer(self.win.tomemory(), dtype=np.uint8)
        self.send = allocate(nbytes)

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
        policy: Policy | None = None,
    ) -> Transfer:
        """osu_put_bw: each iteration is `window` Puts then one Flush, every Put to its own slot.

        seed = (source world rank, destination world rank, iteration) of the pattern; each batch of
        iterations adds its own part (drivers.verify.WriteCheck); `policy` picks the batches the
        target checks (the last always). budget_s caps the timed loop (at least 2 iterations).
        """
        slots = Slots.plan(size, window, iters, min(len(self.send), len(self.window_mem)))
        check = WriteCheck.planned(self.comm, origin, slots, iters, policy, seed)
        region = slots.bytes
        times = tally = None
        if self.me == origin:
            win, target, send = self.win, self.peer, self.send
            put, flush = win.Put, win.Flush

            op_at = _windowed(put, flush, send, target, slots, size, window)

            win.Lock(target, MPI.LOCK_SHARED)
            try:
                times = check.origin_loop(
                    op_at, iters, warmup, fill=lambda b: fill_pattern(send[:region], *seed, b),
                    pause=lambda: win.Unlock(target), resume=lambda: win.Lock(target, MPI.LOCK_SHARED),
                    budget_ns=None if budget_s is None else int(budget_s * 1e9), min_iters=2)
            finally:
                win.Unlock(target)
        else:
            mem, me = self.window_mem, self.me

            def poison_slots(batch: int):
                self.win.Lock(me, MPI.LOCK_EXCLUSIVE)
                try:
                    poison(mem[:region], *seed, batch)
                finally:
                    self.win.Unlock(me)

            def check_batch(batch: int, written: int) -> Tally:
                # An exclusive lock on our own window orders our reads after the peer's completed puts.
                self.win.Lock(me, MPI.LOCK_EXCLUSIVE)
                try:
                    return slot_tally(mem[:written * size], size, *seed, batch)
                finally:
                    self.win.Unlock(me)

            tally = check.target_loop(poison_slots, check_batch)
        self.comm.Barrier()
        return Transfer(times, tally)

    def put_latency(self, size: int, iters: int, warmup: int, origin: int,
                    seed: tuple[int, int, int] = (0, 1, 0), policy: Policy | None = None) -> Transfer:
        """One-way write latency (the catalog's definition): one Put + Flush per sample, as
        osu_put_latency with flush, halved. The Flush returns when the target has the data, which
        takes the write out and its acknowledgement back, a round trip, as ib_write_lat's ping-pong
        of two writes is; both report half of it. Each sample writes its own slot while the link's
        memory lasts; the target checks the slots afterwards (WriteCheck)."""
        got = self.put_bandwidth(size, iters, warmup, 1, origin, seed, policy=policy)
        if got.times_ns is not None:
            got.times_ns //= 2
        return got

    def read_bandwidth(self, size: int, iters: int, warmup: int, window: int, origin: int,
                       seed: tuple[int, int, int], budget_s: float | None = None,
                       policy: Policy | None = None) -> Transfer:
        """osu_get_bw: each iteration is `window` Gets then one Flush, every Get reading its own slot
        of the target's patterned window into its own local slot. The origin poisons its slots before
        each verified batch and checks them after it (drivers.verify.batched): times and the check are
        both the origin's. budget_s caps the timed loop (at least 2 iterations)."""
        capacity = min(len(self.send), len(self.window_mem))
        slots = Slots.plan(size, window, iters, capacity)
        region = slots.bytes
        if self.me != origin:
            self.win.Lock(self.me, MPI.LOCK_EXCLUSIVE)
            fill_pattern(self.window_mem[:region], *seed, 0)
            self.win.Unlock(self.me)
        self.comm.Barrier()
        times = tally = None
        if self.me == origin:
            win, target, local = self.win, self.peer, self.send
            get, flush = win.Get, win.Flush
            tally = Tally()

            op_at = _windowed(get, flush, local, target, slots, size, window)

            def after(batch: int, written: int, last: bool) -> None:
                tally.merge(slot_tally(local[:written * size], size, *seed, 0))

            win.Lock(target, MPI.LOCK_SHARED)
            try:
                times = batched(op_at, iters, warmup, slots, planned_batches(slots, iters, policy, seed),
                                lambda b: poison(local[:region], *seed, 0), after,
                                None if budget_s is None else int(budget_s * 1e9), min_iters=2)
            finally:
                win.Unlock(target)
        self.comm.Barrier()
        return Transfer(times, tally)

    def read_latency(self, size: int, iters: int, warmup: int, origin: int,
                     seed: tuple[int, int, int] = (0, 1, 0), policy: Policy | None = None) -> Transfer:
        """osu_get_latency with flush: one Get + Flush per sample, a full round trip, each into its
        own slot while the link's memory lasts (read_bandwidth with a window of 1, no budget)."""
        return self.read_bandwidth(size, iters, warmup, 1, origin, seed, policy=policy)

    def atomic_latency(self, iters: int, warmup: int, origin: int) -> Transfer:
        """Fetch_and_op(1, SUM) + Flush on the target's 64-bit counter per sample (a full round trip).

        Every sample fetches into its own slot, poisoned with -1 beforehand, so the origin sees which
        adds returned what they must (warmup + sample: the counter before it); the target zeroes the
        counter first and checks it holds warmup + iters at the end.
        """
        counter = self.window_mem[:8].view(np.int64)
        if self.me != origin:
            self.win.Lock(self.me, MPI.LOCK_EXCLUSIVE)
            counter[0] = 0
            self.win.Unlock(self.me)
        self.comm.Barrier()
        times = tally = None
        if self.me == origin:
            win, target = self.win, self.peer
            one, scratch = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
            fetched = np.full(iters, -1, dtype=np.int64)
            fop, flush = win.Fetch_and_op, win.Flush
            spec_one = [one, MPI.INT64_T]

            def op_at(old):
                spec_old = [old, MPI.INT64_T]

                def op():
                    fop(spec_one, spec_old, target, 0, MPI.SUM)
                    flush(target)
                return op

            ops = [op_at(fetched[t:t + 1]) for t in range(iters)]
            warm = op_at(scratch)
            win.Lock(target, MPI.LOCK_SHARED)
            try:
                for _ in range(warmup):
                    warm()
                times = timed_sequence(ops)
            finally:
                win.Unlock(target)
            tally = fetched_tally(fetched, warmup)
        self.comm.Barrier()
        if self.me != origin:
            self.win.Lock(self.me, MPI.LOCK_EXCLUSIVE)
            raw = counter.tobytes()
            self.win.Unlock(self.me)
            tally = counter_tally(raw, warmup + iters)
        self.comm.Barrier()
        return Transfer(times, tally)

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


class IncastGroup:
    """A group of ranks (one per node, on one rail) taking turns as the incast receiver.

    Every rank holds a window of one area per group rank: in a round, sender s writes into area s
    of the receiver's window, so the K senders never overlap; within its area, the writes of one
    iteration go to `per` distinct slots (as many as window x size lets fit in slot_bytes per
    sender), so each leaves its own mark. The receiver's latency probe writes into its own area
    of the first sender's window.
    """

    def __init__(self, comm: MPI.Comm, size: int, window: int = 1, slot_bytes: int = 0):
        self.comm = comm
        self.me, self.n = comm.Get_rank(), comm.Get_size()
        self.size = max(size, 1)
        self.per = max(1, min(window, slot_bytes // (self.size * self.n)))
        self.area = self.size * self.per
        self.win = MPI.Win.Allocate(self.area * self.n, 1, comm=comm)
        self.window_mem = np.frombuffer(self.win.tomemory(), dtype=np.uint8)
        self.send = allocate(self.area)

    def free(self) -> None:
        self.win.Free()

    def round(self, receiver: int, size: int, window: int, budget_s: float, probe_size: int,
              probe_iters: int, seed: Callable[[int], tuple[int, int, int]]) -> IncastRound:
        """All senders write to `receiver` at once for about budget_s; the receiver probes latency meanwhile.

        Collective over the group. seed(sender) is the (source, destination, iteration)
        of that sender's data pattern; the receiver poisons every area before the round and checks
        every slot after it (untimed). A slot written many times is checked for its last write.
        """
        senders = [r for r in range(self.n) if r != receiver]
        budget_ns = int(budget_s * 1e9)
        times = latency = mismatches = None
        put, flush = self.win.Put, self.win.Flush
        per = max(1, min(self.per, window))
        if self.me == receiver:
            self.win.Lock(self.me, MPI.LOCK_EXCLUSIVE)
            for s in senders:
                poison(self.window_mem[s * self.area: s * self.area + per * size], *seed(s), 0)
            self.win.Unlock(self.me)
        if self.me != receiver:
            fill_pattern(self.send[:per * size], *seed(self.me), 0)
            base = self.me * self.area
            plan = [([self.send[(j % per) * size:(j % per + 1) * size], MPI.BYTE], base + (j % per) * size)
                    for j in range(window)]

            def op():
                for spec, disp in plan:
                    put(spec, receiver, disp)
                flush(receiver)

        else:
            # The probe rides the receiver's port while the senders flood it: its flush
            # completes only when the first sender's acknowledgement gets back through.
            target, pspec, pdisp = senders[0], [self.send[:probe_size], MPI.BYTE], self.me * self.area

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
                mismatches = [(s, slot_tally(self.window_mem[s * self.area: s * self.area + per * size], size,
                                             *seed(s), 0)) for s in senders]
            finally:
                self.win.Unlock(self.me)
        self.comm.Barrier()
        return IncastRound(times, latency, mismatches)


# ---- collectives --------------------------------------------------------------


@dataclass
class Collective:
    nbytes: int            # bytes per rank actually moved (nccl-tests' "size")
    times_ns: np.ndarray   # per iteration, the slowest rank's time (valid on comm rank 0)
    wrong: int             # elements that differ from the exact expected result, over all ranks and checks
    first_wrong: str | None
    ops: int = 0           # verified iterations (each one operation of every rank)
    ops_failed: int = 0    # of them, those in which some rank got wrong data
    missing: int = 0       # of the failed, those in which some rank's output still held the poison


def slowest(comm: MPI.Comm, times: np.ndarray) -> np.ndarray:
    """Per-iteration max over ranks, as nccl-tests -I does across GPUs and processes."""
    out = np.empty_like(times) if comm.Get_rank() == 0 else None
    comm.Reduce(times, out, op=MPI.MAX, root=0)
    return out


def allreduce(comm: MPI.Comm, size: int, iters: int, warmup: int,
              verified: frozenset[int] = frozenset()) -> Collective:
    """Sum of float64 vectors of `size` bytes; inputs are small integers, so the sum is exact.
    Iterations in `verified` (and the last) are poisoned, stamped and checked, untimed."""
    rank, n = comm.Get_rank(), comm.Get_size()
    count = ALLREDUCE.elements(size, n)
    b = Buffers(np, ALLREDUCE, count, rank, n)
    Allreduce = comm.Allreduce
    spec_s, spec_r = [b.send, MPI.DOUBLE], [b.recv, MPI.DOUBLE]
    times = timed_verified(lambda: Allreduce(spec_s, spec_r, op=MPI.SUM), iters, warmup, verified,
                           b.before, b.after)
    return checked(comm, ALLREDUCE.nbytes(count, n), times, b.tally)


def alltoall(comm: MPI.Comm, size: int, iters: int, warmup: int,
             verified: frozenset[int] = frozenset()) -> Collective:
    """Each rank sends `size` bytes in total (a block per rank, itself included), as nccl-tests counts it."""
    rank, n = comm.Get_rank(), comm.Get_size()
    block = ALLTOALL.elements(size, n)
    b = Buffers(np, ALLTOALL, block, rank, n)
    Alltoall = comm.Alltoall
    spec_s, spec_r = [b.send, block, MPI.DOUBLE], [b.recv, block, MPI.DOUBLE]
    times = timed_verified(lambda: Alltoall(spec_s, spec_r), iters, warmup, verified, b.before, b.after)
    return checked(comm, ALLTOALL.nbytes(block, n), times, b.tally)


def checked(comm: MPI.Comm, nbytes: int, times: np.ndarray, tally: Tally) -> Collective:
    """The Collective every rank returns: wrong elements summed over ranks, the first one named, an
    iteration failed if it failed on any rank, times reduced to the per-iteration slowest rank on comm
    rank 0 (slowest()). Collective; pickled messages only (an MPI_Allreduce interposed on is not used)."""
    per_rank = comm.allgather((tally.ops, tally.wrong, tally.first, tally.failed_iterations,
                               tally.missing_iterations))
    failed = set().union(*(set(p[3]) for p in per_rank))
    missing = set().union(*(set(p[4]) for p in per_rank))
    firsts = [p[2] for p in per_rank if p[2]]
    return Collective(nbytes, slowest(comm, times), sum(p[1] for p in per_rank), firsts[0] if firsts else None,
                      ops=max(p[0] for p in per_rank), ops_failed=len(failed), missing=len(missing & failed))


@register
class MpiEngine:
    """The mpi engine of one process (acceptance.engines.registry). It has nothing to set up: the MPI
    library picks its own devices, so its operations are this module's."""

    NAME = "mpi"
    # What this engine can do (acceptance.engines.contract.OPERATIONS).
    OFFERS = frozenset(("PairLink", "IncastGroup", "allreduce", "alltoall", "register_times", "registration_growth"))
    CAN = frozenset()
    available = staticmethod(available)
    PairLink, IncastGroup = PairLink, IncastGroup
    allreduce, alltoall = staticmethod(allreduce), staticmethod(alltoall)
    register_times, registration_growth = staticmethod(register_times), staticmethod(registration_growth)

    def configure(self, topology, profile, log_dir=None) -> None:
        """Nothing to pick: the MPI library chooses its own devices."""

    def used_device(self) -> str | None:
        """The RDMA device this rank measures through: the MPI library picks its own, unnamed here."""
        return None

    def placement(self) -> str | None:
        """Where this rank runs: the MPI library and the launcher place the rank; the engine does not."""
        return None
