"""The perftest cross-check: ib_write_bw and ib_write_lat on the pairs and rails the harness measures.

Every scheduled node pair of the rail (the same schedule as rdma_write), in both
directions: ib_write_bw at the sweep's largest size (at most perftest.max_size) for
perftest.duration, and ib_write_lat at latency.size for latency.iters round
trips. The destination runs the perftest server, the source (the writer) runs the
client and records perftest's numbers beside the harness's own: suite perftest,
engine perftest, metrics bandwidth (the average, Gbit/s), latency_p50 (t_typical),
latency_p99, latency_p999 and latency_avg (us); latency_p50 and p99 held to
perftest.latency_p50_max / p99_max where the profile sets them, else information.

It skips, with the same reason on every rank, when a node lacks perftest or an RDMA
device, or the run has a single node; where the profile gates write latency here
(perftest.required: the hardware profiles), it fails instead, naming the nodes. A failed tool run fails the test, naming the
pair, the rail and the tool's error. A run that only failed to calibrate perftest's
clock, CLOCK_TRIES times, says so in an unmeasured record (verdict info): perftest
cannot time on that CPU, which says nothing about the fabric.
"""

import time

import pytest
from mpi4py import MPI

from acceptance.host import nics
from acceptance.host import sysfs
from acceptance.host.roce import traffic_class
from acceptance.rules import judge
from acceptance.tools import perftest
from acceptance.drivers.p2p import RailPairs
from acceptance.measure.sweep import sweep_from_profile
from acceptance.records.naming import natural_key
from acceptance.runtime.pytest_plugin import rail_mode_of

pytestmark = [pytest.mark.rail, pytest.mark.p2p]
SUITE = "perftest"

# perftest failing to calibrate its clock on a busy CPU is not a fabric problem: try again, a moment
# later (what keeps the CPU busy comes and goes).
CLOCK_TRIES = 6
CLOCK_PAUSE_S = 1.0
# -D 5: perftest measures the middle 3 s (margin D // 4 = 1 s at each end) and skips the peak.


def _this_rank(topology, profile) -> dict:
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


def _skip_reason(every: list[dict], nodes: list[str], rails: set[int]) -> str | None:
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


def test_perftest_crosscheck(request, topology, rail, profile, record, progress):
    every = topology.world.allgather(_this_rank(topology, profile))
    # Every rail at once: all ranks must agree to skip, whichever rail is short of a device.
    rails = set(topology.rails) if rail_mode_of(request.config) == "concurrent" else {rail}
    why = _skip_reason(every, topology.nodes, rails)
    if why and profile.get("perftest.required") and len(topology.nodes) > 1:
        pytest.fail(f"profile {profile.name} gates write latency on ib_write_lat (perftest.required), which "
                    f"cannot run here: {why}", pytrace=False)
    if why:
        pytest.skip(why)
    me = every[topology.world.Get_rank()]
    rp = RailPairs(topology, rail, progress)
    if not rp.active:
        return
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
    for comm, low, high in rp.pairs():
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
                                             engine=perftest.ENGINE, samples=0,
                                             detail=f"not measured: {spec.tool_name} {e} in {CLOCK_TRIES} tries")
                            break
                        problems.append(f"{nodes[0]} -> {nodes[1]} rail {rail}: {spec.tool_name}: {e}")
                progress()
            if not is_server:
                perftest.record_results(record, profile, results.get("bw"), results.get("lat"),
                                        {"rail": rail, "nodes": nodes, "ranks": ranks})
    assert not problems, f"rail {rail}: perftest failed:\n" + "\n".join(problems)
