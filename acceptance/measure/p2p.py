"""Point-to-point writes and reads on one rail: every scheduled node pair, both directions.

All pairs of a round run at once, each on its own two-rank communicator;
within a pair the lower node goes first, then the higher one. The origin
records what it timed; the side that received the data (the target of a
write, the origin of a read) records whether it arrived intact.
"""

from __future__ import annotations

from typing import Callable

from mpi4py import MPI

from .. import judge, pulse
from ..profile import Profile
from ..schedule import schedule
from ..topology import Topology
from .stats import iteration_time, percentiles
from .sweep import sweep_from_profile
from .units import gbit_per_s, us
from .verify import Policy, Tally

LATENCY_METRICS = (("p50", "latency_p50"), ("p99", "latency_p99"), ("p999", "latency_p999"), ("max", "latency_max"))


class RailPairs:
    """This rank's view of one rail's schedule. Ranks not on the rail have nothing to do."""

    def __init__(self, topology: Topology, rail: int, pattern: str, progress: Callable[[], None] | None):
        self.active = topology.rail == rail
        self.rail = rail
        self.progress = progress or (lambda: None)
        if not self.active:
            return
        self.comm = topology.rail_comm
        self.index = self.comm.Get_rank()
        members = self.comm.allgather((topology.rank, topology.node))
        self.world_ranks = [r for r, _ in members]
        self.nodes = [n for _, n in members]
        self.rounds = schedule(len(members), pattern)

    def pairs(self):
        """Yield (pair communicator, low, high) for each round this rank takes part in.

        Collective over the rail communicator; a rank with a bye gets no pair that round.
        """
        for pairs in self.rounds:
            # A rank with a bye (or done early) waits here, asleep, rather than spinning in Split.
            pulse.wait(self.comm)
            color, key = MPI.UNDEFINED, 0
            for i, (low, high) in enumerate(pairs):
                if self.index in (low, high):
                    color, key = i, 0 if self.index == low else 1
            comm = self.comm.Split(color, key)
            if comm != MPI.COMM_NULL:
                try:
                    low, high = next(p for p in pairs if self.index in p)
                    yield comm, low, high
                finally:
                    comm.Free()
            self.progress()

    def each_link(self, engine, size: int, memory: str, problems: list[str], record: Callable,
                  profile: Profile, suite: str, metric: str, op: str, body: Callable, slot_bytes: int = 0) -> None:
        """body(link, low, high) for each pair of this rank, on an engine link freed afterwards.

        A link that fails (cannot connect, completions time out, the peer's side broke) fails its
        pair only: both ranks raise (the engine agrees on errors), the pair's `metric` is recorded
        unmeasured (value null, judged a fail) and named in `problems`, and the schedule goes on, so
        no rank of a later round waits for these two.
        """
        for comm, low, high in self.pairs():
            link = None
            try:
                # Only engines that can put GPU memory on the wire take `memory` (the verbs engine).
                link = (engine.PairLink(comm, size, slot_bytes) if memory == "host"
                        else engine.PairLink(comm, size, slot_bytes, memory=memory))
                body(link, low, high)
            except Exception as e:  # noqa: BLE001 - reported as this pair's failure
                _, _, nodes, ranks = self.direction(low, high, 0)
                why = f"{type(e).__name__}: {e}"
                problems.append(f"{nodes[0]} <-> {nodes[1]} rail {self.rail}: {metric} not measured: {why}")
                if self.index == low:
                    judge.record(record, profile, suite, metric, None, missing="fail", rail=self.rail, nodes=nodes,
                                 ranks=ranks, engine=engine.NAME, memory=memory, op=op, samples=0,
                                 detail=f"not measured: {why}")
            finally:
                if link is not None:
                    link.free()

    def direction(self, low: int, high: int, origin: int) -> tuple[int, int, list[str], list[int]]:
        """(source rail index, destination rail index, [src node, dst node], [src rank, dst rank])."""
        src, dst = (low, high) if origin == 0 else (high, low)
        return src, dst, [self.nodes[src], self.nodes[dst]], [self.world_ranks[src], self.world_ranks[dst]]


# op -> (bandwidth metric, its data check's metric, what one checked operation is called, engine method)
BANDWIDTH_OPS = {"write": ("bandwidth", "errors", "writes", "put_bandwidth"),
                 "read": ("read_bandwidth", "read_errors", "reads", "read_bandwidth")}


def pair_bandwidth(engine, topology: Topology, rail: int, profile: Profile, record: Callable,
                   progress: Callable[[], None] | None = None, op: str = "write", memory: str = "host",
                   suite: str = "rdma_write") -> list[str]:
    """Bandwidth sweep of windowed writes or reads (`op`, BANDWIDTH_OPS) in both directions of every
    pair; the data verified after each size by the side that received it (the target of a write, the
    origin of a read).

    memory "cuda" writes GPU memory to GPU memory (GPUDirect RDMA); `suite` is the catalog suite
    whose metrics (and so whose bounds) the records are.
    """
    rp = RailPairs(topology, rail, profile.get("rdma_write.pattern"), progress)
    if not rp.active:
        return []
    metric, errors_metric, noun, method = BANDWIDTH_OPS[op]
    sweep = sweep_from_profile(profile)
    window = profile.get("sweep.window")
    budget = profile.get("sweep.max_time_per_size")
    statistic = profile.get("sweep.statistic")
    rounds = profile.get("sweep.rounds")
    policy = Policy.from_profile(profile)
    problems = []

    def measure(link, low, high):
        # Round-major, directions alternating: one stall of a shared host hits one round of a size,
        # not all of them. Each round moves its own pattern, so a stale buffer cannot pass the check.
        # The origin keeps each size's best round; the side that checked, what every round's checks found.
        best: dict[tuple[int, int], tuple[float, int]] = {}  # (origin, size index) -> (Gbit/s, iterations)
        checked: dict[tuple[int, int], Tally] = {}  # (origin, size index) -> the checks
        run = getattr(link, method)
        for r in range(rounds):
            for origin in (0, 1):
                _, _, _, ranks = rp.direction(low, high, origin)
                for i, size in enumerate(sweep.sizes):
                    iters = sweep.iters(size, size * window)
                    t = run(size, iters, sweep.warmup(iters), window, origin,
                            seed=(ranks[0], ranks[1], r * len(sweep.sizes) + i), budget_s=budget, policy=policy)
                    rp.progress()  # one size is a step: the hang timeout bounds it, not the whole sweep
                    if t.tally is not None:
                        checked.setdefault((origin, i), Tally()).merge(t.tally)
                    if t.times_ns is None:
                        continue
                    value = gbit_per_s(size * window, iteration_time(t.times_ns, statistic))
                    if value > best.get((origin, i), (-1.0, 0))[0]:
                        best[origin, i] = (value, len(t.times_ns))  # fewer iterations when the budget ran out
        for origin in (0, 1):
            _, _, nodes, ranks = rp.direction(low, high, origin)
            where = f"{nodes[0]} -> {nodes[1]} rail {rail}"
            for i, size in enumerate(sweep.sizes):
                common = dict(size=size, rail=rail, nodes=nodes, ranks=ranks, engine=engine.NAME, memory=memory,
                              op=op)
                if (origin, i) in checked:
                    tally = checked[origin, i]
                    judge.record(record, profile, suite, errors_metric, tally.wrong, samples=rounds,
                                 detail=tally.summary(noun), **tally.fields(), **common)
                    if tally.failed:
                        problems.append(f"{where}, size {size} B: {tally.summary(noun)}")
                if (origin, i) not in best:
                    continue
                value, iters = best[origin, i]
                bound, verdict = judge.record(record, profile, suite, metric, value, samples=iters, **common)
                if verdict == "fail":
                    problems.append(f"{where}, size {size} B: {op} bandwidth {value:.3f} Gbit/s "
                                    f"< bound {bound:g} Gbit/s")

    largest = max(sweep.sizes)
    rp.each_link(engine, largest, memory, problems, record, profile, suite, metric, op, measure,
                 slot_bytes=min(largest * window, policy.slot_region))
    return problems


def write_latency(engine, topology: Topology, rail: int, profile: Profile, record: Callable,
                  progress: Callable[[], None] | None = None) -> list[str]:
    """Write latency at latency.size (and a send/recv ping-pong for reference), both directions of every pair."""
    return op_latency(engine, topology, rail, profile, record, progress, "write")


# op -> (metric prefix, what the engine does)
LATENCY_OPS = {"write": ("", "write"), "read": ("read_", "read"), "atomic": ("atomic_", "atomic fetch-and-add")}
# op -> (the metric of its data check, what one checked operation is called)
DATA_CHECKS = {"write": ("errors", "writes"), "read": ("read_errors", "reads"),
               "atomic": ("atomic_errors", "atomic fetch-and-adds")}


def op_latency(engine, topology: Topology, rail: int, profile: Profile, record: Callable,
               progress: Callable[[], None] | None, op: str, memory: str = "host",
               suite: str = "rdma_write") -> list[str]:
    """Latency percentiles of one operation (write, read or atomic) in both directions of every pair.

    Every verified operation is recorded by the side that checked it (DATA_CHECKS): the target
    checks the writes, the origin what its reads and fetch-and-adds brought back, and the target
    that its atomic counter holds exactly the number of adds.
    """
    rp = RailPairs(topology, rail, profile.get("rdma_write.pattern"), progress)
    if not rp.active:
        return []
    prefix, what = LATENCY_OPS[op]
    errors_metric, noun = DATA_CHECKS[op]
    policy = Policy.from_profile(profile)
    size = 8 if op == "atomic" else profile.get("latency.size")
    iters, warmup = profile.get("latency.iters"), profile.get("latency.warmup")
    problems = []

    def measure(link, low, high):
        for origin in (0, 1):
            _, _, nodes, ranks = rp.direction(low, high, origin)
            common = dict(size=size, rail=rail, nodes=nodes, ranks=ranks, engine=engine.NAME, memory=memory, op=op)
            where = f"{nodes[0]} -> {nodes[1]} rail {rail}, size {size} B"
            seed = (ranks[0], ranks[1], 1 << 20)  # apart from the bandwidth sweep's iterations
            pingpong = None
            if op == "write":
                got = link.put_latency(size, iters, warmup, origin, seed, policy)
                pingpong = link.pingpong_latency(size, iters, warmup, origin)
            elif op == "read":
                got = link.read_latency(size, iters, warmup, origin, seed, policy)
            else:
                got = link.atomic_latency(iters, warmup, origin)
            if got.tally is not None:  # the side that checked: the target of writes, the origin of reads and fetches
                judge.record(record, profile, suite, errors_metric, got.tally.wrong, samples=1,
                             detail=got.tally.summary(noun), **got.tally.fields(), **common)
                if got.tally.failed:
                    problems.append(f"{where}: {got.tally.summary(noun)}")
            times = got.times_ns
            if times is None:
                continue
            stats = percentiles(us(times))
            for field, metric in LATENCY_METRICS:
                value = getattr(stats, field)
                bound, verdict = judge.record(record, profile, suite, prefix + metric, value,
                                              samples=stats.samples,
                                              detail=stats.note(field) if field != "max" else None, **common)
                if verdict == "fail":
                    problems.append(f"{where}: {what} latency {field} {value:.2f} us > bound {bound:g} us "
                                    f"({stats.samples} samples)")
            if pingpong is not None:
                pp = percentiles(us(pingpong))
                for field, metric in LATENCY_METRICS:
                    judge.record(record, profile, suite, f"pingpong_{metric}", getattr(pp, field),
                                 samples=pp.samples, detail=pp.note(field) if field != "max" else None,
                                 **{**common, "op": "pingpong"})

    rp.each_link(engine, size, memory, problems, record, profile, suite, f"{prefix}latency_p50", op, measure,
                 slot_bytes=min(size * iters, policy.slot_region))
    return problems


