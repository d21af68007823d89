"""NCCL's setup as the plan counts it, and the shorter collectives "auto" may fall back to.

On the hardware engines NCCL sets up each communicator on its first collective (its init), and an
all-to-all's first call connects every rank to each of its peers (docs/plan.md, "NCCL's setup at
scale"). Setup is what those cost (setup_costs: the constants below, or a profile's [plan]); the
estimate (acceptance.runtime.estimate) counts them in the collectives and the world's setup line, and
where even screen:2 does not fit, "auto" tries collective_cuts: fewer iterations at the sizes without
a bound (fewer_iterations), the all-to-all left out over the largest communicators.

Where each figure comes from is SOURCES (the estimate's cost_sources lists them with its own); a
constant not in it is an assumption.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from ..measure.sweep import sweep_from_profile
from .screening import bounded_sizes, bounds_of

# NCCL's setup, on the hardware engines (the mpi engine's is in its launch; a profile whose [plan] states
# collective_setup has fitted its own). A communicator's init (bootstrap all-gathers of N-1 steps each,
# topology, its rings' and trees' connections) is made on its first collective (engines.nccl.communicator):
# the world's, each rail's, each node's. It grows with the ranks, WORLD_SETUP_PER_RANK_S each (assumed),
# up to what NCCL's init is reported to take at large scale, WORLD_SETUP_MAX_S, and no further (no larger
# figure is published).
WORLD_SETUP_PER_RANK_S = 0.01
WORLD_SETUP_MAX_S = 150.0
# An all-to-all's first call connects each rank to every one of its peers: NCCL makes send/recv connections
# on demand, not at init. Over the network ALLTOALL_CONNECT_PEER_S a peer (NVIDIA/nccl-tests#78: the first
# iteration of an all-to-all over 240 GPUs took about 10 minutes, 600 s / 239 peers, taken as linear in the
# peers), inside a node NODE_CONNECT_PEER_S (NVIDIA/nccl#1487). A profile's plan.alltoall_connect replaces
# both (a site that timed its own NCCL: the first size of test_alltoall less the second, over its peers).
ALLTOALL_CONNECT_PEER_S = 600 / 239
NODE_CONNECT_PEER_S = 0.214
# The figures the estimate lists by name (cost_sources): the init's, and the all-to-all's connections'.
SETUP_CONSTANTS = ("WORLD_SETUP_PER_RANK_S", "WORLD_SETUP_MAX_S")
CONNECT_CONSTANTS = ("ALLTOALL_CONNECT_PEER_S", "NODE_CONNECT_PEER_S")

# Where a figure comes from (the estimate's SOURCES holds these too); WORLD_SETUP_PER_RANK_S is assumed.
SOURCES = {
    "WORLD_SETUP_MAX_S": "reported: NVIDIA/nccl#1156 (kwen2501, 2024-01-23): \"2.5-minute init time at large "
                         "scale (e.g. above certain K GPUs)\", NCCL's default init path; the count is not given: "
                         "reached at 15,000 ranks (WORLD_SETUP_PER_RANK_S, assumed) and held there, no larger "
                         "figure being published (assumed); NVIDIA/nccl#534 reports 5-6 s per communicator at "
                         "16 nodes (2021)",
    "ALLTOALL_CONNECT_PEER_S": "reported: NVIDIA/nccl-tests#78 (awan-10, 2021-03-11): \"10 minutes here for "
                               "nccl-tests ... for the first iteration\" of an all-to-all over 240 GPUs (DGX-2, "
                               "NCCL 2.8.3, every HCA; about 3 minutes with one), 600 s / 239 peers; NCCL makes "
                               "send/recv connections on demand (sjeaugey, NVIDIA/nccl#415), so taken as linear "
                               "in a rank's peers (assumed); NCCL 2.19.4 connects an all-to-all in rounds of 128 "
                               "peers, so a newer NCCL may connect faster: state it in plan.alltoall_connect",
    "NODE_CONNECT_PEER_S": "reported: NVIDIA/nccl#1487 (kiskra-nvidia, 2024-10-18): the first ncclSend/ncclRecv "
                           "between two GPUs of a DGX H100 took 214 ms, the next ones 3-14 us",
}


@dataclass(frozen=True)
class Setup:
    """What NCCL's setup costs (the hardware engines; 0 on the mpi engine, whose costs are fitted with it,
    and where a profile's [plan] states the collective setup of its own rig): a communicator's init on its
    first collective, and an all-to-all's connections on its first call."""
    per_rank_s: float
    max_s: float
    net_peer_s: float           # one peer's connection over the network
    node_peer_s: float          # ... inside a node (NVLink)
    net_peer_from: str | None   # "plan.alltoall_connect" where the profile states it

    def init(self, ranks: int) -> float:
        """A communicator's init: WORLD_SETUP_PER_RANK_S a rank, at most WORLD_SETUP_MAX_S."""
        return min(ranks * self.per_rank_s, self.max_s) if ranks > 1 else 0.0

    def connect(self, ranks: int, local: int) -> float:
        """One rank's connections to each of its peers on an all-to-all's first call over `ranks` ranks,
        `local` of them (itself included) on its own node."""
        if ranks < 2:
            return 0.0
        local = max(1, min(local, ranks))
        return (local - 1) * self.node_peer_s + (ranks - local) * self.net_peer_s


def setup_costs(profile, mpi: bool, c) -> Setup:
    """NCCL's setup as the estimate counts it (Setup). c: the engine's costs (estimate.Costs), whose
    alltoall_connect_s is the profile's plan.alltoall_connect where it states one."""
    hardware = not mpi and profile.get("plan.collective_setup") is None
    if profile.get("plan.alltoall_connect") is not None:
        peer = c.alltoall_connect_s
        return Setup(WORLD_SETUP_PER_RANK_S if hardware else 0.0, WORLD_SETUP_MAX_S if hardware else 0.0,
                     peer, peer, "plan.alltoall_connect")
    if not hardware:
        return Setup(0.0, 0.0, 0.0, 0.0, "none")
    return Setup(WORLD_SETUP_PER_RANK_S, WORLD_SETUP_MAX_S, ALLTOALL_CONNECT_PEER_S, NODE_CONNECT_PEER_S, None)


def collective_cuts(profile, nodes: int, rails: int, setup: Setup) -> list[tuple[object, list[str]]]:
    """The shorter collectives "auto" may fall back to, in the order of what they give up, each (profile,
    one line per key it changed): fewer iterations at the sweep's sizes without a bound, then the
    all-to-all left out over the world, then over each rail too (collectives.alltoall_max_ranks), each of
    these with and without the fewer iterations. An all-to-all's connections do not shrink with its sizes
    (setup.connect: the profile's Setup): over thousands of ranks only leaving it out saves them."""
    iters_cut = fewer_iterations(profile)
    world, rail, node = nodes * rails, nodes, rails
    limits = sorted({n for n in (rail, node) if n < world}, reverse=True)
    out = []
    for k in range(len(limits) + 1):
        left = []
        values = copy.deepcopy(profile.values)
        if k:
            limit = limits[k - 1]
            values["collectives"]["alltoall_max_ranks"] = limit
            for scope, n, local in (("world", world, rails), ("rails", rail, 1), ("node", node, rails)):
                if n > limit:
                    connect, why = setup.connect(n, local), ""
                    if connect:
                        source = "NVIDIA/nccl-tests#78" if setup.net_peer_from is None else setup.net_peer_from
                        why = (f": its first call would connect each rank to its {n - 1:,} peers, about "
                               f"{_seconds(connect)} at {setup.net_peer_s:.3g} s a peer, {source}")
                    left.append(f"test_alltoall[{scope}], left out over its {n:,} ranks (collectives.alltoall_max_"
                                f"ranks = {limit}){why}; collectives.alltoall_busbw_min is not judged there")
        variants = [([], None)] if k else []
        if iters_cut:
            variants.append(([iters_cut[1]], iters_cut[0]))
        for lines, max_iters in variants:
            v = copy.deepcopy(values)
            if max_iters is not None:
                v["sweep"]["max_iters"] = max_iters
            out.append((dataclasses.replace(profile, values=v), [*lines, *left]))
    return out


def fewer_iterations(profile) -> tuple[int, str] | None:
    """(sweep.max_iters, the line saying so): the most iterations the sweep times at a size where a bound
    starts (a collective's busbw by size, a pairwise bandwidth's, with its window), so every bounded size
    keeps its count and only the sizes without a bound (the latency-bound small ones) time fewer; None
    where that is no fewer."""
    sweep, window = sweep_from_profile(profile), profile.get("sweep.window")
    sizes = list(sweep.sizes)
    keep = [sweep.iters(s, s * window) for s in bounded_sizes(profile)]
    for _, table in bounds_of(profile, "sizemap", ("collective",)):
        for start, _value in table:
            at = next((s for s in sizes if s >= start), None)
            if at is not None:
                keep.append(sweep.iters(at))
    need = max([sweep.min_iters, *keep])
    if need >= sweep.max_iters:
        return None
    return need, (f"sweep.max_iters {sweep.max_iters} -> {need}: a size without a bound times at most {need} "
                  f"iterations (the collectives' small sizes, the smallest pairwise size), a size with a bound as "
                  f"many as before")


def _seconds(s: float) -> str:
    """"45 s", "12 min", "5 h 40 min", "1 d 22 h": a rough duration for a line of text."""
    for unit, sub, name, sub_name in ((86400, 3600, "d", "h"), (3600, 60, "h", "min"), (60, 1, "min", "s")):
        if s >= unit:
            whole = round(s / sub) * sub
            return f"{whole // unit:.0f} {name} {whole % unit // sub:.0f} {sub_name}"
    return f"{s:.2g} s" if s < 10 else f"{s:.0f} s"
