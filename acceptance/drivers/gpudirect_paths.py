"""Did NCCL's network traffic use GPUDirect RDMA? One record per rail per node.

After the nccl engine ran the collectives with its debug output captured
(acceptance.engines.nccl.capture_nccl_debug), its per-process NCCL logs say, for
every channel connection, whether the NIC read/wrote GPU memory directly
(`via NET/IB/2/GDRDMA`) or NCCL staged the data through host memory
(`via NET/IB/2`). A staged rail still passes traffic and still reaches some
bandwidth, so only this check names the cause: nvidia_peermem not loaded,
dma-buf unsupported, or a GPU-NIC distance beyond NCCL_NET_GDR_LEVEL.

Records, suite "collective", judged by the one judge (acceptance.rules.catalog): "gdrdma" (bool) is
1 when the rail's network receives on the node (NCCL writing into GPU memory) all used GDRDMA, and
must be; "gdrdma_sends", recorded where they did, is 1 when the sends did too, and warns at 0 (GPU
Direct RDMA read off: NCCL_NET_GDR_READ, NCCL's default on PCIe-only platforms). A rail whose NIC
carried no network traffic gets "gdrdma_support" (info) when NCCL said whether GPU Direct RDMA is
enabled for that NIC.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..host.counters import rails_of
from ..rules import judge
from ..engines.nccl_log import NetPaths, NicPaths

SUITE = "collective"
METRIC = "gdrdma"


def _short(host: str) -> str:
    return host.split(".")[0]  # NCCL logs the host name up to its first '.'


def node_of(host: str, topology) -> str:
    """The topology's node for a host name NCCL logged; the host name itself when no rank ran there."""
    nodes = sorted({r.node for r in topology.ranks if _short(r.host) == _short(host) or r.node == host})
    return nodes[0] if len(nodes) == 1 else host


def rails_for(paths: NetPaths, topology, nic_rails: Mapping[str, int] | None = None) -> dict[str, int | None]:
    """NIC name -> rail, as the counters suite maps them (acceptance.host.counters.rails_of): the
    profile's topology.nic_rails first, else the rail of the rank bound to the NIC
    (ACCEPTANCE_NIC), else the i-th NIC NCCL listed on the node (natural order) is rail i
    when the node has as many NICs as rails, else None."""
    out: dict[str, int | None] = {}
    for host in paths.hosts:
        node = node_of(host, topology)
        devices = {n.hca for n in paths.nics(host) if n.net != "Socket"}
        bound = {r.rail: r.nic for r in topology.ranks if r.node == node and r.nic}
        for dev, rail in rails_of(devices, nic_rails or {}, bound, topology.rails).items():
            if out.get(dev) is None:
                out[dev] = rail
    return out


def record_gdr(paths: NetPaths, topology, rails: Mapping[str, int | None], record: Callable, profile) -> list[str]:
    """Record "gdrdma" (and "gdrdma_sends", "gdrdma_support") per (node, rail) from parsed NCCL logs
    through the judge; return the failures' messages.

    record(metric, value, unit, **fields) is the suite's recorder (acceptance.records.results.Recorder.bind);
    NICs that map to no rail are recorded with rail None and named in the detail.
    """
    groups: dict[tuple[str, int | None], list[NicPaths]] = {}
    for nic in paths.nics():
        if nic.net == "Socket" and not nic.connections:
            continue  # the bootstrap interface NCCL lists on every node
        groups.setdefault((node_of(nic.host, topology), rails.get(nic.hca)), []).append(nic)
    problems = []
    for (node, rail), nics in sorted(groups.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        ranks = [r.rank for r in topology.ranks if r.node == node and (rail is None or r.rail == rail)]
        names = ", ".join(n.hca for n in nics)
        common = {"nodes": [node], "rail": rail, "ranks": ranks, "engine": "nccl", "memory": "cuda"}
        evidence = [line for n in nics for line in n.evidence]
        total = sum(n.connections for n in nics)
        if not total:
            support = [n.gdr_support for n in nics if n.gdr_support is not None]
            if rail is None or not support:
                continue
            judge.record(record, profile, SUITE, "gdrdma_support", int(all(support)), samples=1,
                         detail=f"{names}: no network traffic in these communicators; NCCL: " + "; ".join(evidence),
                         **common)
            continue
        gdr = sum(n.gdr_connections for n in nics)
        receives, gdr_receives = sum(n.receives for n in nics), sum(n.gdr_receives for n in nics)
        used = gdr == total
        staged = receives == 0 or gdr_receives < receives
        via = ", ".join(n.via for n in nics)
        detail = (f"{names} ({via}): {gdr}/{total} network channel connections with GDRDMA "
                  f"({gdr_receives}/{receives} receives)")
        if not used and all(n.net == "Socket" for n in nics):
            detail += "; TCP sockets (NET/Socket), not RDMA: NCCL found no usable IB/RoCE device"
        elif not used:
            detail += ("; NCCL staged through host memory (nvidia_peermem not loaded or dma-buf "
                       "unsupported; NCCL_NET_GDR_LEVEL?)" if staged else
                       "; sends only: GPU Direct RDMA read is off (NCCL_NET_GDR_READ)")
        if evidence:
            detail += "; NCCL: " + "; ".join(evidence)
        receives_ok = used or not staged
        _, verdict = judge.record(record, profile, SUITE, METRIC, int(receives_ok), samples=total, detail=detail,
                                  **common)
        if verdict == "fail":
            problems.append(f"{node} rail {rail if rail is not None else '?'}: {detail}")
        sends = total - receives
        if receives_ok and sends:
            judge.record(record, profile, SUITE, "gdrdma_sends", int(gdr - gdr_receives == sends), samples=sends,
                         detail=detail, **common)
    return problems
