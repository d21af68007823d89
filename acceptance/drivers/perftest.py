"""The perftest cross-check (suites/test_perftest.py): ib_write_bw and ib_write_lat on the pairs and
rails the harness measures.

The node pairs of perftest.rounds of the rail's scheduled rounds, spread evenly over the schedule
(RailPairs: the same schedule as rdma_write; every round where the schedule has no more), in both
directions. The destination runs the perftest server, the source (the writer) runs the client and
records perftest's numbers (acceptance.tools.perftest.record_results). Whether it can run at all is
decided from every rank's facts (rank_facts, gathered), so every rank decides the same.
"""

from __future__ import annotations

import time
from typing import Callable

from mpi4py import MPI

from ..host import nics, sysfs
from ..host.roce import traffic_class
from ..measure.sweep import sweep_from_profile
from ..records.naming import natural_key
from ..rules import judge
from ..rules.profile import Profile
from ..runtime.topology import Topology
from ..tools import perftest
from ..runtime.schedule import spread
from .p2p import RailPairs

# perftest failing to calibrate its clock on a busy CPU is not a fabric problem: try again, a moment
# later (what keeps the CPU busy comes and goes).
CLOCK_TRIES = 6
CLOCK_PAUSE_S = 1.0
# -D 5: perftest measures the middle 3 s (margin D // 4 = 1 s at each end) and skips the peak.


def rank_facts(topology: Topology, profile: Profile) -> dict:
    """What this rank brings: the tools it lacks, its node's RDMA devices, its rail's device and port."""
    root = sysfs.sysfs_root(topology.node)
    facts = {"node": topology.node, "rail": topology.rail, "root": str(root),
             "missing": sorted(tool for tool, path in perftest.find_tools().items() if path is None),
             "devices": [], "device": None, "port": None, "link_layer": None, "gid": None, "address": None}
    devices = nics.node_devices(topology.node)
    facts["devices"] = devices
    device, _ = nics.rail_device(topology, profile.get("topology.nic_rails"), devices)
    if device is None:
        return facts
    own = sysfs.ports(root, [device])
    if not own:
        return facts
    port = next((p for p in own if p.port == profile.get("verbs.port")), own[0])
    gid = profile.get("verbs.gid_index")
    if gid < 0 and port.link_layer == "Ethernet":
        gid = perftest.roce_gid_index(root, device, port.port)
    gid = gid if gid is not None and gid >= 0 else None
    facts.update(device=device, port=port.port, link_layer=port.link_layer, gid=gid,
                 address=perftest.rail_address(root, device, port.port, gid, port.netdev))
    return facts


def _nodes(names) -> str:
    return ", ".join(sorted(set(names), key=natural_key))


def skip_reason(every: list[dict], nodes: list[str], rails: set[int]) -> str | None:
    """Why the cross-check cannot run on `rails`, from facts gathered over the world (so every rank agrees)."""
    if len(nodes) < 2:
        return f"the perftest cross-check needs at least 2 nodes; this run has {len(nodes)}"
    lacking = [f for f in every if f["missing"]]
    if lacking:
        where = perftest.where_searched()
        where = "on PATH" if where == "PATH" else f"in {where}"
        tools = sorted({t for f in lacking for t in f["missing"]})
        return (f"perftest not {where} on {_nodes(f['node'] for f in lacking)}: install perftest "
                f"(no {', '.join(tools)})")
    bare = [f for f in every if not f["devices"]]
    if bare:
        return (f"no RDMA device on {_nodes(f['node'] for f in bare)} (nothing under "
                f"{bare[0]['root']}/class/infiniband): perftest needs one on every node")
    unmapped = [f for f in every if f["rail"] in rails and f["device"] is None]
    if unmapped:
        rail = min(f["rail"] for f in unmapped)
        unmapped = [f for f in unmapped if f["rail"] == rail]
        return (f"no RDMA device for rail {rail} on {_nodes(f['node'] for f in unmapped)}: map devices to "
                f"rails with topology.nic_rails")
    return None


def crosscheck(topology: Topology, rail: int, profile: Profile, record: Callable, progress: Callable[[], None],
               me: dict) -> list[str]:
    """ib_write_bw and ib_write_lat on the pairs of perftest.rounds of this rank's rail's rounds, both
    directions; `me` is this
    rank's rank_facts. Returns the failed tool runs, the pair, the rail and the tool's error named."""
    rp = RailPairs(topology, rail, progress)
    if not rp.active:
        return []
    # -u: the QP's ACK timeout exponent, and --tclass: the GRH traffic class (-T is RDMA-CM's ToS, with
    # -R only), the verbs engine's ([verbs] timeout, traffic_class, else NCCL_IB_TC): one setting for both.
    tclass, _ = traffic_class(profile.get("verbs.traffic_class"))
    side = {"device": me["device"], "ib_port": me["port"], "gid_index": me["gid"],
            "extra": ("-u", str(profile.get("verbs.timeout")), *((f"--tclass={tclass}",) if tclass else ())),
            "allowance_s": profile.get("perftest.timeout")}
    specs = (perftest.Spec("bw", size=min(sweep_from_profile(profile).sizes[-1], profile.get("perftest.max_size")),
                           duration_s=profile.get("perftest.duration"), tx_depth=profile.get("verbs.tx_depth"), **side),
             perftest.Spec("lat", size=profile.get("latency.size"), iters=profile.get("latency.iters"), **side))
    problems = []
    for comm, low, high in rp.pairs(spread(rp.rounds, profile.get("perftest.rounds"))):
        # The server's rail address: the host name may be the management network, or "(none)".
        hosts = comm.allgather(me["address"] or MPI.Get_processor_name())
        for origin in (0, 1):
            _, _, nodes, ranks = rp.direction(low, high, origin)
            server = 1 - origin  # the destination listens; the source (origin) writes
            is_server = comm.Get_rank() == server
            results = {}
            for slot, spec in enumerate(specs):
                # One TCP port per rail, pair, test and direction: the rails run at once, and pairs of a
                # round may share a host (virtual nodes; fewer than 64 of them on one host).
                tcp_port = perftest.DEFAULT_TCP_PORT + 4 * (64 * rail + low % 64) + 2 * slot + origin
                for attempt in range(CLOCK_TRIES):
                    try:
                        results[spec.kind] = perftest.run_pair(comm, is_server, spec, hosts[server],
                                                               tcp_port=tcp_port)
                        break
                    except perftest.PerftestError as e:
                        if e.clock_only and attempt + 1 < CLOCK_TRIES:
                            time.sleep(CLOCK_PAUSE_S)
                            continue
                        if e.clock_only:
                            if not is_server:
                                judge.record(record, profile, perftest.SUITE,
                                             "bandwidth" if spec.kind == "bw" else "latency_p50", None,
                                             size=spec.size, rail=rail, nodes=nodes, ranks=ranks,
                                             engine=perftest.ENGINE, samples=0, round=rp.round,
                                             detail=f"not measured: {spec.tool_name} {e} in {CLOCK_TRIES} tries")
                            break
                        problems.append(f"{nodes[0]} -> {nodes[1]} rail {rail}: {spec.tool_name}: {e}")
                progress()
            if not is_server:
                perftest.record_results(record, profile, results.get("bw"), results.get("lat"),
                                        {"rail": rail, "nodes": nodes, "ranks": ranks, "round": rp.round})
    return problems
