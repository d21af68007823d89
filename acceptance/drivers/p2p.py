"""Point-to-point writes and reads on one rail: every scheduled node pair, both directions.

A rank measures its own rail; with every rail at once (run.rail_mode "concurrent") each rail's
ranks walk their rail's schedule on the rail communicator at the same time as the other rails',
so a stalled pair on one rail holds up no other rail. All pairs of a round run at once, each on its
own two-rank communicator;
within a pair the lower node goes first, then the higher one. The origin
records what it timed; the side that received the data (the target of a
write, the origin of a read) records whether it arrived intact. PairwiseDriver
is the template (schedule, directions, failure isolation, recording); Bandwidth
and Latency give only their operation, sizes and metric.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..rules import catalog, judge
from ..runtime import pulse, status
from ..rules.profile import Profile
from ..runtime.screening import (every_pair, every_round_sizes, sampled_rounds, screening_iters,
                                 screening_latency_iters, screening_sizes)
from . import confirm
from ..runtime.topology import Topology
from ..measure.stats import iteration_time, percentiles
from ..measure.sweep import sweep_from_profile
from ..measure.units import gbit_per_s, us
from ..measure.verify import Policy, Tally
from ..records.results import utc_now

LATENCY_METRICS = (("p50", "latency_p50"), ("p99", "latency_p99"), ("p999", "latency_p999"), ("max", "latency_max"))


class RailPairs:
    """This rank's view of one rail's schedule. Ranks not on the rail have nothing to do."""

    def __init__(self, topology: Topology, rail: int, progress: Callable[[], None] | None):
        self.active = topology.rail == rail
        self.rail = rail
        self.progress = progress or (lambda: None)
        self.started: str | None = None  # when the pair in hand began (records' `start`)
        self.round: int | None = None    # the scheduled round in hand, by its index (records' `round`)
        if not self.active:
            return
        self.comm = topology.rail_comm
        self.index = self.comm.Get_rank()
        members = self.comm.allgather((topology.rank, topology.node))
        self.world_ranks = [r for r, _ in members]
        self.nodes = [n for _, n in members]
        self.pairing = topology.pairing  # the run's pattern (runtime.schedule.Pairing)
        numbered = self.pairing.numbered(self.nodes, rail)
        self.rounds = [pairs for _, pairs in numbered]
        self._index = {id(pairs): r for r, pairs in numbered}  # a round of the schedule (or of a spread of it)

    def number(self, pairs: list[tuple[int, int]]) -> int | None:
        """A round of this rail's schedule (one of self.rounds) by its index in the schedule."""
        return self._index.get(id(pairs))

    def pairs(self, rounds: list[list[tuple[int, int]]] | None = None):
        """Yield (pair communicator, low, high) for each round (default: the schedule's) this rank takes
        part in.

        Collective over the rail communicator; a rank with a bye gets no pair that round.
        """
        walked = self.rounds if rounds is None else rounds
        for k, pairs in enumerate(walked, 1):
            # A rank with a bye (or done early) waits here, asleep, rather than spinning in Split.
            pulse.wait(self.comm)
            self.round = self.number(pairs)  # None in a confirmation's own rounds
            status.round_begun(k, len(walked), "round" if self.round is not None else "confirmation round")
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
                  profile: Profile, suite: str, metric: str, op: str, body: Callable, slot_bytes: int = 0,
                  rounds: list[list[tuple[int, int]]] | None = None, phase: str | None = None) -> None:
        """body(link, low, high) for each pair of this rank, on an engine link freed afterwards.

        A link that fails (cannot connect, completions time out, the peer's side broke) fails its
        pair only: both ranks raise (the engine agrees on errors), the pair's `metric` is recorded
        unmeasured (value null, judged a fail) and named in `problems`, and the schedule goes on, so
        no rank of a later round waits for these two.
        """
        for comm, low, high in self.pairs(rounds):
            link = None
            self.started = utc_now()
            try:
                # Only engines that declare gpu_memory take `memory` (engines.contract.CAPABILITIES).
                if memory != "host" and "gpu_memory" not in engine.CAN:
                    raise ValueError(f"the {engine.NAME} engine cannot put {memory} memory on the wire")
                link = (engine.PairLink(comm, size, slot_bytes, memory=memory) if "gpu_memory" in engine.CAN
                        else engine.PairLink(comm, size, slot_bytes))
                body(link, low, high)
            except Exception as e:  # noqa: BLE001 - reported as this pair's failure
                _, _, nodes, ranks = self.direction(low, high, 0)
                why = f"{type(e).__name__}: {e}"
                problems.append(f"{nodes[0]} <-> {nodes[1]} rail {self.rail}: {metric} not measured: {why}")
                if self.index == low:
                    judge.record(record, profile, suite, metric, None, missing="fail", rail=self.rail, nodes=nodes,
                                 ranks=ranks, engine=engine.NAME, memory=memory, op=op, samples=0,
                                 detail=f"not measured: {why}", start=self.started, phase=phase,
                                 round=self.round)
            finally:
                if link is not None:
                    link.free()

    def direction(self, low: int, high: int, origin: int) -> tuple[int, int, list[str], list[int]]:
        """(source rail index, destination rail index, [src node, dst node], [src rank, dst rank])."""
        src, dst = (low, high) if origin == 0 else (high, low)
        return src, dst, [self.nodes[src], self.nodes[dst]], [self.world_ranks[src], self.world_ranks[dst]]


class PairwiseDriver:
    """A pairwise measurement on one rail (the template): the schedule, both directions of each pair,
    one engine link per pair with its failure isolated, progress, and what every record carries.
    A subclass gives only its metric (what a pair that could not be measured is recorded as), the
    link's size and slot bytes, and measure(link, low, high); run() returns the failures' messages.
    """

    metric: str = ""

    def __init__(self, engine, topology: Topology, rail: int, profile: Profile, record: Callable,
                 progress: Callable[[], None] | None = None, op: str = "write", memory: str = "host",
                 suite: str = "rdma_write"):
        self.engine, self.profile, self.record, self.op, self.memory, self.suite = (
            engine, profile, record, op, memory, suite)
        self.topology = topology
        self.rp = RailPairs(topology, rail, progress)
        self.screening = topology.pairing.screening()  # screening measures less (runtime.screening)
        self.rail = rail
        self.policy = Policy.from_profile(profile)
        self.problems: list[str] = []
        # The scheduled rounds, then their suspects confirmed (rdma_write.confirm; drivers.confirm).
        self.phase: str | None = "screen" if self.rp.active and profile.get("rdma_write.confirm") else None
        self.headlines: list[confirm.Headline] = []  # what this rank timed, for the suspects

    def link_size(self) -> int:
        raise NotImplementedError

    def slot_bytes(self) -> int:
        raise NotImplementedError

    def measure(self, link, low: int, high: int) -> None:
        raise NotImplementedError

    def run(self) -> list[str]:
        if not self.rp.active:
            return self.problems
        # Screening walks every round for write bandwidth, a sample of them for the rest (runtime.screening).
        sample = (sampled_rounds(self.profile, self.rp.rounds)
                  if self.screening and not every_pair(self.suite, self.metric) else None)
        self.walked = self.rp.rounds if sample is None else sample
        self.rp.each_link(self.engine, self.link_size(), self.memory, self.problems, self.record, self.profile,
                          self.suite, self.metric, self.op, self.measure, slot_bytes=self.slot_bytes(),
                          rounds=sample, phase=self.phase)
        if self.phase == "screen":
            self.after_confirmation(self.confirm())
        return self.problems

    def after_confirmation(self, suspect: list[tuple[int, int]]) -> None:
        """What a driver does once its rail's suspects are confirmed (Bandwidth: the load check)."""

    def confirm(self) -> list[tuple[int, int]]:
        """Measure the screening's suspects again, alone on the rail and against partners that screened
        clean; only what fails then is a problem (analysis tells the rest apart as transient). Returns
        the suspect pairs."""
        pulse.wait(self.rp.comm)  # asleep, keeping the job's pulse, until the rail's last pair is done
        gathered = [h for mine in self.rp.comm.allgather(self.headlines) for h in mine]
        higher = {h.metric: catalog.direction(self.suite, h.metric) is not False for h in gathered}
        suspect = confirm.suspects(gathered, higher, judge.Outlier(self.profile))
        leaves = self.rp.pairing.leaves_of(self.rp.nodes, self.rail)
        rounds = confirm.rounds_of(confirm.confirmation_pairs(suspect, len(self.rp.nodes), seed=self.rail,
                                                              leaves=leaves))
        # Beside the suspects, in the same rounds, pairs that screened clean: what they measure in the
        # same conditions is what the suspects are compared with (analysis.confirmed).
        rounds, references = confirm.with_references(rounds, suspect, len(self.rp.nodes), seed=self.rail)
        self.headlines = []

        def measure(link, low, high):
            self.phase = "reference" if (low, high) in references else "confirm"
            self.measure(link, low, high)
        self.phase = "confirm"
        self.rp.each_link(self.engine, self.link_size(), self.memory, self.problems, self.record, self.profile,
                          self.suite, self.metric, self.op, measure, slot_bytes=self.slot_bytes(),
                          rounds=rounds, phase="confirm")
        self.phase = "confirm"
        return suspect

    def headline(self, low: int, high: int, origin: int, metric: str, value: float, failed: bool,
                 size: int) -> None:
        """A value this rank timed, for the screening's suspects (the largest size of a sweep, a p50),
        and whether any bound of that direction failed."""
        src, dst, _, _ = self.rp.direction(low, high, origin)
        factor = judge.Fleet.factor(self.profile, self.suite, metric)
        at = float(judge.Fleet.factors(factor, np.array([float(size)]))[0]) if factor is not None else float("nan")
        self.headlines.append(confirm.Headline(src, dst, metric, float(value), failed, at))

    def bound_failed(self, message: str) -> None:
        """A bound failed: a problem, except in the scheduled rounds before confirmation, where it makes
        the pair a suspect (headline) and only its confirmation can fail the test, and in the load check,
        which analysis judges (a subject slow under full load that passes alone)."""
        if self.phase not in ("screen", "reference", "full", "alone"):
            self.problems.append(message)

    def direction(self, low: int, high: int, origin: int) -> tuple[list[str], list[int], dict]:
        """([src node, dst node], [src rank, dst rank], the fields every record of that direction carries)."""
        _, _, nodes, ranks = self.rp.direction(low, high, origin)
        return nodes, ranks, dict(rail=self.rail, nodes=nodes, ranks=ranks, engine=self.engine.NAME,
                                  memory=self.memory, op=self.op, start=self.rp.started, phase=self.phase,
                                  round=self.rp.round)

    def judged(self, metric: str, value, **fields) -> tuple[float | None, str]:
        return judge.record(self.record, self.profile, self.suite, metric, value, **fields)

    def checked(self, metric: str, tally: Tally, noun: str, where: str, samples: int, **fields) -> None:
        """The data check of the side that received the data: recorded, and a failure named."""
        self.judged(metric, tally.wrong, samples=samples, detail=tally.summary(noun), **tally.fields(), **fields)
        if tally.failed:
            self.problems.append(f"{where}: {tally.summary(noun)}")


# op -> the PairLink method of its bandwidth sweep (acceptance.engines.contract); its metrics are the
# catalog's (catalog.PAIR_OPS).
BANDWIDTH_METHODS = {"write": "put_bandwidth", "read": "read_bandwidth"}


class Bandwidth(PairwiseDriver):
    """Bandwidth sweep of windowed writes or reads (`op`, BANDWIDTH_METHODS) in both directions of every
    pair; the data verified after each size by the side that received it (the target of a write, the
    origin of a read). Round-major, directions alternating: one stall of a shared host hits one round
    of a size, not all of them; each size records its best round."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        op = catalog.PAIR_OPS[self.op]
        self.metric, self.errors_metric, self.noun = op.bandwidth, op.errors, op.noun
        self.method = BANDWIDTH_METHODS[self.op]
        self.sweep = sweep_from_profile(self.profile)
        if self.screening:  # the smallest size and the sizes with bounds
            self.sweep = dataclasses.replace(self.sweep, sizes=tuple(screening_sizes(self.profile)))
        self.window = self.profile.get("sweep.window")
        self.screening_iters: dict[int, int] = {}
        if self.screening and self.rp.active:  # each moved as long as seeing its bound through the noise needs
            self.screening_iters = screening_iters(self.profile, len(self.rp.nodes), len(self.topology.rails),
                                                   self.rp.pairing.pattern)
        self.load_check_sizes = tuple(screening_sizes(self.profile))
        # Write bandwidth screens every round, at every screening size only in the sampled rounds (their
        # indices) and at the bounded sizes in the others (runtime.screening.every_round_sizes).
        self.sample: set[int] | None = None
        if self.screening and self.rp.active and every_pair(self.suite, self.metric):
            self.sample = {self.rp.number(p) for p in sampled_rounds(self.profile, self.rp.rounds)}
            every = set(every_round_sizes(self.profile))
            self.every_round_sizes = tuple(s for s in self.sweep.sizes if s in every)

    def iters(self, size: int) -> int:
        """Timed iterations at `size`: screening's (runtime.screening) where it screens, else the sweep's."""
        return self.screening_iters.get(size) or self.sweep.iters(size, size * self.window)

    def link_size(self) -> int:
        return max(self.sweep.sizes)

    def slot_bytes(self) -> int:
        return min(self.link_size() * self.window, self.policy.slot_region)

    def sizes(self) -> tuple[int, ...]:
        """The sizes the pair in hand measures: outside screening's sample, only the bounded ones."""
        if self.sample is not None and self.rp.round is not None and self.rp.round not in self.sample:
            return self.every_round_sizes
        return self.sweep.sizes

    def measure(self, link, low, high):
        profile, sweep, window, sizes = self.profile, self.sweep, self.window, self.sizes()
        budget, statistic = profile.get("sweep.max_time_per_size"), profile.get("sweep.statistic")
        rounds = profile.get("sweep.rounds")
        # Each round moves its own pattern, so a stale buffer cannot pass the check. The origin keeps
        # each size's best round; the side that checked, what every round's checks found.
        best: dict[tuple[int, int], tuple[float, int]] = {}  # (origin, size index) -> (Gbit/s, iterations)
        checked: dict[tuple[int, int], Tally] = {}  # (origin, size index) -> the checks
        run = getattr(link, self.method)
        for r in range(rounds):
            for origin in (0, 1):
                _, ranks, _ = self.direction(low, high, origin)
                for i, size in enumerate(sizes):
                    iters = self.iters(size)
                    t = run(size, iters, sweep.warmup(iters), window, origin,
                            seed=(ranks[0], ranks[1], r * len(sizes) + i), budget_s=budget, policy=self.policy)
                    self.rp.progress()  # one size is a step: the hang timeout bounds it, not the whole sweep
                    if t.tally is not None:
                        checked.setdefault((origin, i), Tally()).merge(t.tally)
                    if t.times_ns is None:
                        continue
                    value = gbit_per_s(size * window, iteration_time(t.times_ns, statistic))
                    if value > best.get((origin, i), (-1.0, 0))[0]:
                        best[origin, i] = (value, len(t.times_ns))  # fewer iterations when the budget ran out
        for origin in (0, 1):
            nodes, _, common = self.direction(low, high, origin)
            where = f"{nodes[0]} -> {nodes[1]} rail {self.rail}"
            failed, top, top_size = False, None, 0
            for i, size in enumerate(sizes):
                if (origin, i) in checked:
                    self.checked(self.errors_metric, checked[origin, i], self.noun, f"{where}, size {size} B",
                                 rounds, size=size, **common)
                if (origin, i) not in best:
                    continue
                value, iters = best[origin, i]
                bound, verdict = self.judged(self.metric, value, samples=iters, size=size, **common)
                failed, top, top_size = failed or verdict == "fail", value, size
                if verdict == "fail":
                    self.bound_failed(f"{where}, size {size} B: {self.op} bandwidth {value:.3f} Gbit/s "
                                      f"< bound {bound:g} Gbit/s")
            if top is not None:  # the largest size timed: the rate a fault shows in
                self.headline(low, high, origin, self.metric, top, failed, top_size)

    def after_confirmation(self, suspect: list[tuple[int, int]]) -> None:
        """Every rank of the job, after its rail's confirmation: the nodes whose NIC was a suspect on most
        rails (confirm.under_load) measured against clean partners with every rail at once (phase
        "full"), then one rail at a time while the others wait (phase "alone"), at the screening sizes.
        Analysis (analysis.fullload) names a node slow at full load that passes alone. Nothing to do,
        and no time spent, when no node is such a suspect."""
        topo, mine = self.topology, self.rp.index
        if topo.rail_mode != "concurrent" or len(topo.rails) < 2:
            return
        screened = sum(1 for pairs in self.walked for p in pairs if mine in p)
        bad = sum(1 for p in suspect if mine in p)
        # Rails end their confirmations at different times: wait asleep (keeping the job's pulse) before
        # the one blocking collective, which then costs nothing.
        pulse.wait(topo.world)
        flags = topo.world.allgather((topo.node, self.rail, bool(bad) and 2 * bad >= screened))
        subjects = confirm.under_load(flags, topo.rails)
        if not subjects:
            return
        partners = confirm.load_partners(subjects, flags, topo.rails, topo.pairing.seed)
        if not any(partners.values()):
            return  # too few clean nodes to partner a subject (every rank agrees)
        index = {n: i for i, n in enumerate(self.rp.nodes)}
        pairs = [(min(index[x], index[g]), max(index[x], index[g]))
                 for x, g in partners[self.rail] if x in index and g in index]
        rounds = confirm.rounds_of(pairs)
        self.sweep = dataclasses.replace(self.sweep, sizes=self.load_check_sizes)
        measure = dict(engine=self.engine, size=self.link_size(), memory=self.memory, problems=self.problems,
                       record=self.record, profile=self.profile, suite=self.suite, metric=self.metric, op=self.op,
                       slot_bytes=self.slot_bytes(), rounds=rounds)
        # Every rank is past the allgather above (every rail's confirmation is over): a blocking barrier
        # releases them together, so the subjects' NICs start at once.
        topo.world.Barrier()
        self.phase = "full"
        busy = {}  # the world's "every rail measured" barrier, once this rank has entered it
        self.rp.each_link(phase="full", body=lambda link, low, high: self.loaded(link, low, high, busy), **measure)
        if "done" not in busy:
            pulse.wait(topo.world)  # no subject pair here: enter the same barrier, and sleep
        for rail in topo.rails:  # then each rail alone, the others idle
            pulse.wait(topo.world)
            if rail == self.rail:
                self.phase = "alone"
                self.rp.each_link(phase="alone", body=self.measure, **measure)
        pulse.wait(topo.world)  # no rail's next test loads a subject while the last rail measures it alone

    def loaded(self, link, low: int, high: int, busy: dict) -> None:
        """The load check's sweep of one pair, then the pair's largest size again and again, unrecorded,
        until every rail's pairs are measured (a barrier over the world): a rail that finished first must
        not leave the others' last sizes measured with its NIC idle."""
        self.measure(link, low, high)
        busy["done"] = done = self.topology.world.Ibarrier()
        size, run = max(self.sweep.sizes), getattr(link, self.method)
        iters = self.iters(size)
        _, ranks, _ = self.direction(low, high, 0)
        try:
            turn = 0
            while not link.comm.allreduce(done.Test(), op=MPI.LOR):
                run(size, iters, 0, self.window, turn % 2, seed=(ranks[0], ranks[1], 1 << 20 | turn),
                    budget_s=self.profile.get("sweep.max_time_per_size"), policy=self.policy)
                self.rp.progress()
                turn += 1
        finally:
            pulse.wait_for(done)


def pair_bandwidth(engine, topology: Topology, rail: int, profile: Profile, record: Callable,
                   progress: Callable[[], None] | None = None, op: str = "write", memory: str = "host",
                   suite: str = "rdma_write") -> list[str]:
    """Bandwidth of `op` (write or read) in both directions of every pair of the rail (Bandwidth).
    memory "cuda" moves GPU memory to GPU memory (GPUDirect RDMA); `suite` is the catalog suite
    whose metrics (and so whose bounds) the records are."""
    return Bandwidth(engine, topology, rail, profile, record, progress, op, memory, suite).run()


def write_latency(engine, topology: Topology, rail: int, profile: Profile, record: Callable,
                  progress: Callable[[], None] | None = None) -> list[str]:
    """Write latency at latency.size (and a send/recv ping-pong for reference), both directions of every pair."""
    return op_latency(engine, topology, rail, profile, record, progress, "write")




class Latency(PairwiseDriver):
    """Latency percentiles of one operation (write, read or atomic) in both directions of every pair.

    Every verified operation is recorded by the side that checked it: the target checks the writes,
    the origin what its reads and fetch-and-adds brought back, and the target that its atomic counter
    holds exactly the number of adds. Writes also time a send/recv ping-pong, for reference."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        op = catalog.PAIR_OPS[self.op]
        self.prefix, self.what, self.errors_metric, self.noun = op.latency_prefix, op.what, op.errors, op.noun
        self.metric = f"{self.prefix}latency_p50"
        self.size = 8 if self.op == "atomic" else self.profile.get("latency.size")
        self.iters, self.warmup = self.profile.get("latency.iters"), self.profile.get("latency.warmup")
        if self.screening:  # as many samples as the gated percentile needs
            self.iters = screening_latency_iters(self.profile)

    def link_size(self) -> int:
        return self.size

    def slot_bytes(self) -> int:
        return min(self.size * self.iters, self.policy.slot_region)

    def timed(self, link, origin: int, seed):
        """(the operation's result, the ping-pong's times or None)."""
        size, iters, warmup = self.size, self.iters, self.warmup
        if self.op == "write":
            return (link.put_latency(size, iters, warmup, origin, seed, self.policy),
                    link.pingpong_latency(size, iters, warmup, origin))
        if self.op == "read":
            return link.read_latency(size, iters, warmup, origin, seed, self.policy), None
        return link.atomic_latency(iters, warmup, origin), None

    def measure(self, link, low, high):
        for origin in (0, 1):
            nodes, ranks, common = self.direction(low, high, origin)
            common["size"] = self.size
            where = f"{nodes[0]} -> {nodes[1]} rail {self.rail}, size {self.size} B"
            got, pingpong = self.timed(link, origin, (ranks[0], ranks[1], 1 << 20))  # apart from the sweep's seeds
            if got.tally is not None:  # the side that checked: the target of writes, the origin of reads and fetches
                self.checked(self.errors_metric, got.tally, self.noun, where, 1, **common)
            if got.times_ns is None:
                continue  # the side that did not time this direction
            stats = percentiles(us(got.times_ns))
            failed = False
            for field, metric in LATENCY_METRICS:
                value = getattr(stats, field)
                bound, verdict = self.judged(self.prefix + metric, value, samples=stats.samples,
                                             detail=stats.note(field) if field != "max" else None, **common)
                failed = failed or verdict == "fail"
                if verdict == "fail":
                    self.bound_failed(f"{where}: {self.what} latency {field} {value:.2f} us > bound "
                                      f"{bound:g} us ({stats.samples} samples)")
            self.headline(low, high, origin, self.metric, stats.p50, failed, self.size)
            if pingpong is not None:
                pp = percentiles(us(pingpong))
                for field, metric in LATENCY_METRICS:
                    self.judged(f"pingpong_{metric}", getattr(pp, field), samples=pp.samples,
                                detail=pp.note(field) if field != "max" else None, **{**common, "op": "pingpong"})


def op_latency(engine, topology: Topology, rail: int, profile: Profile, record: Callable,
               progress: Callable[[], None] | None, op: str, memory: str = "host",
               suite: str = "rdma_write") -> list[str]:
    """Latency percentiles of `op` (write, read or atomic) in both directions of every pair (Latency)."""
    return Latency(engine, topology, rail, profile, record, progress, op, memory, suite).run()
