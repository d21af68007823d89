"""Incast on one rail: K senders write to one receiver at once.

The rail's nodes are split into groups of at most K+1 (sizes differ by at most one);
all groups run at once, and within a group every member is the receiver once, so a
rail takes K+1 rounds whatever its size. In a round each sender writes windowed puts
into the receiver for incast.duration while the receiver times small put+flush
round trips to its first sender: the latency a victim of incast sees. Recorded:
per-sender bandwidth, the aggregate into the receiver (all bytes over the slowest
sender's time), fairness (slowest / fastest sender, from 2 senders up), the loaded
latency percentiles, data errors, and the counter deltas of each port in the round.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..rules import judge
from ..runtime.portwatch import PortWatch
from ..rules.profile import Profile
from ..runtime.topology import Topology
from .p2p import LATENCY_METRICS
from ..measure.stats import percentiles
from ..measure.units import gbit_per_s, us
from ..measure.verify import Policy


def groups_of(n: int, senders: int) -> list[list[int]]:
    """Rail members 0..n-1 in groups of at most senders+1, as even as possible."""
    if n < 2:
        return []
    k = max(1, min(senders, n - 1))
    return [list(map(int, g)) for g in np.array_split(np.arange(n), math.ceil(n / (k + 1)))]


# Long: one incast round's choreography over MPI (groups, barrier, timed sends, gather, verdicts),
# which every rank must run in this order; pieces would hide the order.
def incast(engine, topology: Topology, rail: int, profile: Profile, record: Callable,
           progress: Callable[[], None] | None = None) -> list[str]:
    """Run every incast round of `rail`; returns the problems (failed bounds, bad data, rising error counters)."""
    if topology.rail != rail:
        return []
    progress = progress or (lambda: None)
    comm = topology.rail_comm
    members = comm.allgather((topology.rank, topology.node))
    groups = groups_of(len(members), profile.get("incast.senders"))
    index = comm.Get_rank()
    color = next(i for i, g in enumerate(groups) if index in g)
    group = groups[color]
    gcomm = comm.Split(color, group.index(index))
    size = profile.get("incast.size")
    window = profile.get("sweep.window")
    duration = profile.get("incast.duration")
    probe_size, probe_iters = profile.get("latency.size"), profile.get("latency.iters")
    watch = PortWatch.for_rail(topology, profile, rail)
    ranks = [members[i][0] for i in group]
    nodes = [members[i][1] for i in group]
    link = engine.IncastGroup(gcomm, max(size, probe_size), window, Policy.from_profile(profile).slot_region)
    problems: list[str] = []
    try:
        for receiver in range(len(group)):
            senders = [s for s in range(len(group)) if s != receiver]
            k = len(senders)
            me = gcomm.Get_rank()
            where = f"incast of {k} into {nodes[receiver]} rail {rail}"
            common = {"rail": rail, "engine": engine.NAME, "size": size}
            before = watch.snapshot() if watch else None
            got = link.round(receiver, size, window, duration, probe_size, probe_iters,
                             seed=lambda s, r=receiver: (ranks[s], ranks[r], r))
            if watch:
                role = "receiver" if me == receiver else "sender"
                problems += watch.record(before, watch.snapshot(), record,
                                         note=f"{role} of the incast of {k} into {nodes[receiver]}")
            mine = None
            if got.times_ns is not None:
                elapsed = int(got.times_ns.sum())
                moved = size * window * len(got.times_ns)
                bw = gbit_per_s(moved, elapsed)
                judge.record(record, profile, "incast", "bandwidth", bw, nodes=[nodes[me], nodes[receiver]],
                             ranks=[ranks[me], ranks[receiver]], samples=len(got.times_ns),
                             detail=f"1 of {k} senders", **common)
                mine = (moved, elapsed, bw)
            every = gcomm.gather(mine, root=receiver)
            if me == receiver:
                at = dict(nodes=[nodes[receiver]], ranks=[ranks[receiver]], **common)
                sent = [every[s] for s in senders]
                total = gbit_per_s(sum(m for m, _, _ in sent), max(t for _, t, _ in sent))
                aggregate_min, verdict = judge.record(record, profile, "incast", "aggregate_bandwidth", total,
                                                      samples=k, detail=f"{k} sender{'s' if k != 1 else ''}", **at)
                if verdict == "fail":
                    problems.append(f"{where}: aggregate {total:.3f} Gbit/s < bound {aggregate_min:g} Gbit/s")
                if k >= 2:
                    rates = {nodes[s]: every[s][2] for s in senders}
                    fair = min(rates.values()) / max(rates.values()) if max(rates.values()) > 0 else 0.0
                    slow, fast = min(rates, key=rates.get), max(rates, key=rates.get)
                    fairness_min, verdict = judge.record(
                        record, profile, "incast", "fairness", fair, samples=k,
                        detail=f"slowest {slow} {rates[slow]:.3f}, fastest {fast} {rates[fast]:.3f} Gbit/s", **at)
                    if verdict == "fail":
                        problems.append(f"{where}: fairness {fair:.2f} < bound {fairness_min:g} (slowest {slow} "
                                        f"{rates[slow]:.3f} Gbit/s, fastest {fast} {rates[fast]:.3f} Gbit/s)")
                stats = percentiles(us(got.latency_ns))
                lat = dict(at, size=probe_size, nodes=[nodes[receiver], nodes[senders[0]]],
                           ranks=[ranks[receiver], ranks[senders[0]]])
                for field, metric in LATENCY_METRICS:
                    value = getattr(stats, field)
                    bound, verdict = judge.record(record, profile, "incast", f"loaded_{metric}", value,
                                                  samples=stats.samples,
                                                  detail=stats.note(field) if field != "max" else None, **lat)
                    if verdict == "fail":
                        problems.append(f"{where}: put latency p99 under load {value:.2f} us > bound {bound:g} us "
                                        f"({stats.samples} samples)")
                for s, tally in got.mismatches:
                    judge.record(record, profile, "incast", "errors", tally.wrong,
                                 nodes=[nodes[s], nodes[receiver]], ranks=[ranks[s], ranks[receiver]], samples=1,
                                 detail=tally.summary("writes"), **tally.fields(), **common)
                    if tally.failed:
                        problems.append(f"{where}: data from {nodes[s]}: {tally.summary('writes')}")
            progress()
    finally:
        link.free()
        gcomm.Free()
    return problems
