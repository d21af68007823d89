"""Preflight: is the job itself sane before anything is measured? (suites/test_preflight.py)

Memory-lock limit (RDMA registration pins memory), the rank layout (same ranks per node, every rail
on every node), and one software stack across nodes. Then the fabric as each node sees it: its RDMA
devices; every port up, at the profile's rate, MTU and link layer; one firmware, driver, kernel and
rdma-core on every node; huge pages; its GPUs, each near its rail's NIC, with a GPUDirect RDMA path;
PCIe links at what they can train to; one RoCE lossless class.

A node's facts are read once, by its first rank (acceptance.host.nodefacts), and shared with every
rank (gather_facts). Each check takes them, writes its records on rank 0 and returns the problems,
one line each, the node named; a value is judged by the node check's own judgements
(acceptance.checks: the same judge, the same bounds, the same rails, the same advice). A check whose source no node has
raises Skip with the reason (decided from gathered facts: the same on every rank); one that some
nodes have and others lack fails naming those nodes.
"""

from __future__ import annotations

from typing import Callable

from ..checks import memlock as memlock_check
from ..checks import ports as port_checks
from ..checks import rails as rail_ports
from ..checks.base import RDMA_KEYS, bound, fails, required
from ..host.nics import mapped_devices, topology_rails
from ..host.nodefacts import Unavailable, collect, common_link_layer, far_pairs, gpudirect_path
from ..host.pcie import trained_down
from ..host.preflight import UNLIMITED, differing, layout_problems, memlock_limit, odd_ones_out, software_versions
from ..host.roce import traffic_class
from ..host.sysfs import sysfs_root
from ..rules import judge
from ..rules.profile import Profile
from ..rules.units import format_size
from ..runtime.topology import Topology

SUITE = "preflight"


class Skip(Exception):
    """Nothing to check on any node: the test skips with this reason (the same on every rank)."""


class Problems(list):
    """What is wrong, one (node, line, detail) per problem: the node travels beside the line, so a
    node's verdict never depends on how its line is worded."""

    def add(self, node: str, line: str, detail: str | None = None) -> None:
        self.append((node, line, detail if detail is not None else line))

    @property
    def nodes(self) -> set:
        return {node for node, _, _ in self}

    def detail(self, node: str) -> str:
        return next(d for n, _, d in self if n == node)

    def lines(self) -> list[str]:
        return [line for _, line, _ in self]


# --- the job ---------------------------------------------------------------------------------

def memlock(profile: Profile, record: Callable) -> list[str]:
    """This rank's locked-memory limit against preflight.memlock_min."""
    minimum = bound("memlock", profile)
    limit = memlock_limit()
    _, verdict = judge.record(record, profile, SUITE, "memlock", None if limit == UNLIMITED else limit,
                              detail=UNLIMITED if limit == UNLIMITED else None)
    if verdict == "pass":
        return []
    return [memlock_check.short(limit, minimum)]


def rank_layout(topology: Topology, profile: Profile, record: Callable) -> list[str]:
    """The same ranks on every node, rails 0..R-1 on every node."""
    ranks_by_node = {n: [r.rank for r in topology.ranks_on(n)] for n in topology.nodes}
    rails_by_node = {n: [r.rail for r in topology.ranks_on(n)] for n in topology.nodes}
    problems = layout_problems(ranks_by_node, rails_by_node, profile.get("topology.rails"))
    if topology.rank == 0:  # judged together: without topology.rails, most nodes' count is the bound
        judge.record_all(record, profile, SUITE, "ranks", [(len(ranks), dict(nodes=[node], ranks=ranks, rail=None))
                                                           for node, ranks in ranks_by_node.items()])
    return problems


def software_versions_match(topology: Topology, profile: Profile, record: Callable) -> list[str]:
    """Python, mpi4py, the MPI library and pytest the same on every node (collective)."""
    every = topology.world.allgather((topology.node, software_versions()))
    by_node = dict(every)  # one entry per node: ranks of a node share an install
    per_rank_node = {}
    for node, versions in every:
        if per_rank_node.setdefault(node, versions) != versions:
            by_node[node] = {k: f"{v} (mixed within node)" for k, v in versions.items()}
    problems = odd_ones_out(by_node)
    if topology.rank == 0:
        judge.record(record, profile, SUITE, "version_mismatches", len(problems), nodes=list(by_node), ranks=[],
                     rail=None)
    return problems


# --- the fabric, node by node ------------------------------------------------------------------

def gather_facts(topology: Topology) -> dict:
    """node -> NodeFacts for every node of the job, in natural node order (collective)."""
    first = topology.rank == min(r.rank for r in topology.ranks_on(topology.node))
    mine = collect(sysfs_root(topology.node), only=mapped_devices(topology.node)) if first else None
    got = {node: facts for node, facts in topology.world.allgather((topology.node, mine)) if facts is not None}
    return {node: got[node] for node in topology.nodes}


def _ranks(topology, node):
    return [r.rank for r in topology.ranks_on(node)]


def _grouped(missing):
    """ "reason" when every node gives the same one, else "node1, node2: reason; node3: other"."""
    by_reason = {}
    for node, why in missing.items():
        by_reason.setdefault(why.reason, []).append(node)
    if len(by_reason) == 1:
        return next(iter(by_reason))
    return "; ".join(f"{', '.join(nodes)}: {reason}" for reason, nodes in by_reason.items())


def _available(facts_by_node, attr, what, needs=None):
    """(node -> fact) for the nodes that have it, and one problem line per node that does not.

    When no node has it: skips, unless the profile requires it (`needs` says which setting),
    in which case every node fails, named; decided from gathered facts, so the same on every rank.
    Only a profile that sets no such requirement (local, emulated) skips for missing hardware.
    """
    have, missing = {}, {}
    for node, facts in facts_by_node.items():
        value = getattr(facts, attr)
        (missing if isinstance(value, Unavailable) else have)[node] = value
    if not have and not needs:
        raise Skip(f"{what} unavailable on every node: {_grouped(missing)}")
    because = f" (the profile requires it: {needs})" if needs else ""
    problems = Problems()
    for node, why in missing.items():
        problems.add(node, f"{node}: {what} {why}{because}", f"{what} {why}{because}")
    return have, problems


def _record_missing(topology, profile, fabric, record, metric, have, problems):
    """Rank 0: a null, failing record for each node whose data is missing while the profile needs it."""
    if topology.rank != 0:
        return
    for node in fabric:
        if node not in have and node in problems.nodes:
            judge.record(record, profile, SUITE, metric, None, missing="fail", nodes=[node],
                         ranks=_ranks(topology, node), rail=None, detail=problems.detail(node))


def _rails(topology, profile, fabric):
    """node -> RDMA device -> rail (None when unknown), as the counter windows map them."""
    nic_rails = profile.get("topology.nic_rails")
    return {node: topology_rails(topology, nic_rails, node, f.devices if isinstance(f.devices, list) else [])
            for node, f in fabric.items()}


def _rail_ports(profile, have):
    """The ports the port checks cover: each node's rails as the node check selects them
    (acceptance.checks.rails): a storage, management or VM-network port, a bond beside the rails, is
    not held to the fabric's bounds."""
    return {node: rail_ports.select(ports, profile).ports for node, ports in have.items()}


def _record_port_lines(topology, profile, fabric, record, metric, lines_by_node, problems, all_good):
    """Rank 0: per node, how many ports are wrong (the lines in the detail; null where no port data)."""
    if topology.rank != 0:
        return
    for node, facts in fabric.items():
        lines = lines_by_node.get(node)
        judge.record(record, profile, SUITE, metric, None if lines is None else len(lines), nodes=[node],
                     ranks=_ranks(topology, node), rail=None, missing=_missing(problems, node),
                     detail=str(facts.ports) if lines is None else "; ".join(lines) or all_good)


def _missing(problems, node):
    """The verdict of a node's null value: it fails where a problem names the node."""
    return "fail" if node in problems.nodes else "info"


def rdma_devices(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """Every node has RDMA devices, as many as preflight.rdma_devices where set."""
    have, _ = _available(fabric, "devices", "RDMA devices", required(profile, *RDMA_KEYS))
    want = bound("rdma_devices", profile)
    problems = Problems()
    for node, facts in fabric.items():
        if node not in have:
            problems.add(node, f"{node}: no RDMA devices ({facts.devices})")
        elif fails("rdma_devices", len(have[node]), profile):
            problems.add(node, f"{node}: {len(have[node])} RDMA devices ({', '.join(have[node]) or 'none'}), "
                               f"the profile expects {want:g}")
    if topology.rank == 0:
        for node, facts in fabric.items():
            judge.record(record, profile, SUITE, "rdma_devices", len(have[node]) if node in have else None,
                         nodes=[node], ranks=_ranks(topology, node), rail=None, missing=_missing(problems, node),
                         detail=", ".join(have[node]) if node in have else str(facts.devices))
    return problems.lines()


def ports_up(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """Every rail port ACTIVE / LinkUp."""
    have, problems = _available(fabric, "ports", "RDMA ports", required(profile, *RDMA_KEYS))
    selected = {node: rail_ports.select(ports, profile) for node, ports in have.items()}
    down = {node: [f"{p.label}: {j.detail}" for p in rails.ports for j in [port_checks.down(p)] if j and j.known]
            for node, rails in selected.items()}
    for node, rails in selected.items():
        if rails.missing:
            down[node].append(f"rails: {rails.missing}")
    for node, lines in down.items():
        for line in lines:
            problems.add(node, f"{node} {line}")
    _record_port_lines(topology, profile, fabric, record, "ports_down", down, problems, None)
    return problems.lines()


def port_rate(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """Every active rail port at preflight.port_rate or faster (one record per port)."""
    have, problems = _available(fabric, "ports", "RDMA ports", required(profile, "preflight.port_rate"))
    _record_missing(topology, profile, fabric, record, "port_rate", have, problems)
    have = _rail_ports(profile, have)
    rails = _rails(topology, profile, fabric)
    checked = []
    for node, ports in have.items():
        for p in ports:
            if not p.up:
                continue  # ports_up names it
            slow = port_checks.slow(p, profile)
            if slow:
                problems.add(node, f"{node} {p.label}: {slow.detail}")
            checked.append((node, p, slow is not None))
    _record_ports(topology, profile, record, rails, "port_rate", checked, lambda p: p.gbps,
                  lambda p: f"{p.label}: {p.rate}")
    return problems.lines()


def _record_ports(topology: Topology, profile: Profile, record: Callable, rails: dict, metric: str,
                  checked: list, value: Callable, detail: Callable) -> None:
    """Rank 0 records each checked (node, port, bad) of `metric`: a port whose value is missing fails
    where the check found it bad."""
    if topology.rank != 0:
        return
    for node, p, bad in checked:
        judge.record(record, profile, SUITE, metric, value(p), nodes=[node], ranks=_ranks(topology, node),
                     rail=rails[node].get(p.device), missing="fail" if bad else "info", detail=detail(p),
                     device=p.device, port=p.port)


def port_mtu(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """Every active rail port's MTU known, and at preflight.mtu or above (one record per port)."""
    needs = required(profile, "preflight.mtu")
    have, problems = _available(fabric, "ports", "RDMA ports", needs)
    _record_missing(topology, profile, fabric, record, "port_mtu", have, problems)
    have = _rail_ports(profile, have)
    up = {node: [p for p in ports if p.up] for node, ports in have.items()}
    if not needs and not any(p.mtu is not None for ports in up.values() for p in ports):
        reasons = {node: Unavailable(next((p.mtu_reason for p in ports if p.mtu_reason), "no active port"))
                   for node, ports in up.items()}
        raise Skip(f"port MTU unavailable on every node: {_grouped(reasons)}")
    rails = _rails(topology, profile, fabric)
    checked = []
    for node, ports in up.items():
        for p in ports:
            short = port_checks.short_mtu(p, profile)
            if short:
                problems.add(node, f"{node} {p.label}: {short.detail}")
            checked.append((node, p, short is not None))
    _record_ports(topology, profile, record, rails, "port_mtu", checked, lambda p: p.mtu,
                  lambda p: f"{p.label}: {p.mtu_reason}" if p.mtu is None else
                  f"{p.label}: {p.netdev} mtu" if p.link_layer == "Ethernet" else f"{p.label}: ibv_devinfo active_mtu")
    return problems.lines()


def link_layer(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """Every rail port on preflight.link_layer, else on the job's most common one."""
    have, problems = _available(fabric, "ports", "RDMA ports", required(profile, "preflight.link_layer"))
    have = _rail_ports(profile, have)
    expected, source = profile.get("preflight.link_layer"), "the profile's preflight.link_layer"
    if expected is None:
        expected, source = common_link_layer([p for ports in have.values() for p in ports]), "the job's most common"
    odd = {node: [f"{p.label}: {j.detail}" for p in ports for j in [port_checks.wrong_layer(p, expected)] if j]
           for node, ports in have.items()}
    for node, lines in odd.items():
        for line in lines:
            problems.add(node, f"{node} {line} ({source})")
    _record_port_lines(topology, profile, fabric, record, "link_layer_mismatches", odd, problems,
                       f"every port {expected}")
    return problems.lines()


def fabric_versions_match(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """One firmware, driver, kernel and rdma-core on every node."""
    _available(fabric, "devices", "RDMA devices")
    have, missing = _available(fabric, "versions", "fabric versions")
    problems = odd_ones_out(have) + missing.lines()
    if topology.rank == 0:
        first = next(iter(have.values()))
        judge.record(record, profile, SUITE, "fabric_version_mismatches", len(problems), nodes=list(fabric), ranks=[],
                     rail=None, detail="; ".join(problems) if problems else ", ".join(f"{k} {v}" for k, v in first.items()))
    return problems


def hugepages(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """At least preflight.hugepages_min reserved in huge pages on every node."""
    minimum = int(bound("hugepages", profile) or 0)
    have, problems = _available(fabric, "hugepages", "huge pages", f"preflight.hugepages_min = {format_size(minimum)}")
    for node, size in have.items():
        if fails("hugepages", size, profile):
            problems.add(node, f"{node}: {format_size(size)} reserved in huge pages, the profile needs at least "
                               f"{format_size(minimum)}")
    if topology.rank == 0:
        for node, facts in fabric.items():
            judge.record(record, profile, SUITE, "hugepages", have.get(node), nodes=[node],
                         ranks=_ranks(topology, node), rail=None, missing=_missing(problems, node),
                         detail=None if node in have else str(facts.hugepages))
    return problems.lines()


def gpus(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """preflight.gpus_per_node NVIDIA GPUs on every node, where set."""
    want = bound("gpus", profile)
    have, missing = _available(fabric, "gpus", "GPU count", required(profile, "preflight.gpus_per_node"))
    if want is None and not any(have.values()):
        raise Skip("no NVIDIA GPU on any node, and the profile does not ask for GPUs (preflight.gpus_per_node unset)")
    problems = Problems()
    if want is not None:
        problems += missing
        for node, count in have.items():
            if fails("gpus", count, profile):
                problems.add(node, f"{node}: {count} NVIDIA GPUs, the profile expects {want:g}")
    if topology.rank == 0:
        for node, facts in fabric.items():
            judge.record(record, profile, SUITE, "gpus", have.get(node), nodes=[node], ranks=_ranks(topology, node),
                         rail=None, missing=_missing(problems, node), detail=None if node in have else str(facts.gpus))
    return problems.lines()


def _gpu_nodes(fabric):
    return {node: f for node, f in fabric.items() if isinstance(f.gpus, int) and f.gpus > 0}


def gpu_nic_affinity(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """Each rail's GPU within preflight.gpu_nic_max_distance of its NIC (nvidia-smi topo -m)."""
    gpu_nodes = _gpu_nodes(fabric)
    if not gpu_nodes:
        raise Skip("no NVIDIA GPU on any node")
    have, problems = _available(gpu_nodes, "topo", "nvidia-smi topo -m")
    farthest = profile.get("preflight.gpu_nic_max_distance")
    rails = _rails(topology, profile, fabric)
    rail_nics = {node: {r: d for d, r in rails[node].items() if r is not None} for node in have}
    if not any(rail_nics.values()):
        raise Skip(f"which NIC serves which rail is unknown on every GPU node: no node has one RDMA device per "
                   f"rail ({len(topology.rails)}); map them with topology.nic_rails")
    far = {node: far_pairs(have[node], rail_nics[node], farthest) for node in have if rail_nics[node]}
    for node, lines in far.items():
        for line in lines:
            problems.add(node, f"{node} {line}")
    if topology.rank == 0:
        for node, facts in gpu_nodes.items():
            lines = far.get(node)
            if lines is not None:
                detail = "; ".join(lines) or f"every rail's GPU within {farthest} of its NIC"
            elif node in have:
                detail = "which NIC serves which rail is unknown; map them with topology.nic_rails"
            else:
                detail = str(facts.topo)
            judge.record(record, profile, SUITE, "gpu_nic_far", None if lines is None else len(lines), nodes=[node],
                         ranks=_ranks(topology, node), rail=None, missing=_missing(problems, node), detail=detail)
    return problems.lines()


def pcie_links(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """Every RDMA NIC's and GPU's PCIe link at what it can train to (acceptance.host.pcie); a node
    without the data is recorded, not judged."""
    have = {node: f.pcie for node, f in fabric.items() if isinstance(f.pcie, list)}
    if not have:
        raise Skip("PCIe link state unavailable on every node: "
                   + _grouped({node: f.pcie for node, f in fabric.items()}))
    lines = {node: trained_down(found) for node, found in have.items()}
    problems = Problems()
    for node, found in lines.items():
        for line in found:
            problems.add(node, f"{node}: {line}", line)
    if topology.rank == 0:
        for node, facts in fabric.items():
            found = lines.get(node)
            detail = (str(facts.pcie) if found is None  # not read on this node: recorded, not judged
                      else "; ".join(found) or f"{len(have[node])} links at their maximum")
            judge.record(record, profile, SUITE, "pcie_trained_down", None if found is None else len(found),
                         nodes=[node], ranks=_ranks(topology, node), rail=None, missing="info", detail=detail)
    return problems.lines()


def roce_lossless_class(topology: Topology, profile: Profile, fabric: dict,
                        record: Callable) -> tuple[int | None, list[str]]:
    """(the traffic class judged, the problems): every node's RoCE rail ports with one lossless setup;
    with preflight.lossless, the priority the traffic class maps to lossless and congestion-controlled."""
    lossless = profile.get("preflight.lossless")
    have, problems = _available(fabric, "qos", "RoCE QoS", "preflight.lossless = true" if lossless else None)
    mapped = profile.get("topology.nic_rails")  # rail NICs only, where mapped (not a storage NIC)
    have = {node: {dev: q for dev, q in qos.items() if not mapped or dev in mapped} for node, qos in have.items()}
    if not any(have.values()) and not problems:
        raise Skip("no RoCE port among the rail NICs (topology.nic_rails) of any node")
    # One traffic class for every rank's judgement: rank 0's (the job's NCCL_IB_TC, or the profile's).
    tclass = topology.world.bcast(traffic_class(profile.get("verbs.traffic_class"))[0] if topology.rank == 0
                                  else None, root=0)
    # Compared rail by rail: device names differ between nodes (rxe_n1r0, rxe_n2r0; mlx5_ numbering).
    rails = _rails(topology, profile, fabric)
    by_rail = {node: {(f"rail {rails[node][dev]}" if rails[node].get(dev) is not None else dev): q.summary()
                      for dev, q in qos.items()} for node, qos in have.items()}
    for node, line in differing(by_rail):
        problems.add(node, line)
    if lossless:
        for node, qos in have.items():
            for q in qos.values():
                for line in q.lossless_problems(tclass):
                    problems.add(node, f"{node}: {line}", line)
    if topology.rank == 0:
        for node, facts in fabric.items():
            qos = have.get(node)
            mine = [d for n, _, d in problems if n == node]
            detail = (str(facts.qos) if qos is None else "; ".join(mine) or
                      "; ".join(f"{dev}: {q.summary()} (read: {', '.join(q.read)})" for dev, q in qos.items()))
            judge.record(record, profile, SUITE, "roce_qos_problems", None if qos is None else len(mine),
                         nodes=[node], ranks=_ranks(topology, node), rail=None, missing=_missing(problems, node),
                         detail=detail)
    return tclass, problems.lines()


def gpudirect(topology: Topology, profile: Profile, fabric: dict, record: Callable) -> list[str]:
    """A GPUDirect RDMA path (nvidia_peermem loaded, or dma-buf) on every GPU node, as the node
    check's gpudirect decides it (acceptance.host.nodefacts.gpudirect_path)."""
    gpu_nodes = _gpu_nodes(fabric)
    expected = required(profile, "preflight.gpus_per_node")
    if not gpu_nodes and not expected:
        raise Skip("no NVIDIA GPU on any node")
    status = {node: gpudirect_path(f.peermem if isinstance(f.peermem, str) else None, f.dmabuf)
              for node, f in gpu_nodes.items()}
    if expected:  # GPU nodes are required: one without GPUs has no GPUDirect path either
        status.update({node: (False, f"no NVIDIA GPU ({expected})") for node in fabric if node not in gpu_nodes})
    if topology.rank == 0:
        for node, (ok, how) in status.items():
            judge.record(record, profile, SUITE, "gpudirect_missing", 0 if ok else 1, nodes=[node],
                         ranks=_ranks(topology, node), rail=None, detail=how)
    return [f"{node}: no GPUDirect RDMA path: {how}" for node, (ok, how) in status.items() if not ok]
