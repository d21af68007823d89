"""Which rank runs on which node and rail, and the communicators that follow.

Node name: SLURMD_NODENAME, else a virtual node of local emulation, else the
host name. Local rank: SLURM_LOCALID, else the emulated slot, else an MPI
shared-memory split. NIC: the one a launcher bound (ACCEPTANCE_NIC), else the
device map's entry for the node and local rank (virtual nodes sharing one host's
devices, acceptance.host.nics), else unknown. Rail: the local rank (GPU i <-> NIC i <->
rail i in a rail-optimized cluster) unless the profile maps this rank's NIC to a rail.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from typing import Mapping

from mpi4py import MPI

from ..host import nics
from ..records.naming import natural_key
from .schedule import ALL_PAIRS, Pairing

# Set by `acceptance run` for local emulation: ranks r*R .. r*R+R-1 form node r+1.
ENV_NODES = "ACCEPTANCE_VIRTUAL_NODES"
ENV_RANKS_PER_NODE = "ACCEPTANCE_RANKS_PER_NODE"
# Virtual nodes left out (comma-separated names): a relaunch after a lost node runs the others, which keep
# their names (node1, node2, node4, ... once node3 is lost).
ENV_EXCLUDE = "ACCEPTANCE_VIRTUAL_EXCLUDE"
# The RDMA NIC a launcher bound to this rank (e.g. mlx5_3), for profiles that map NICs to rails.
ENV_NIC = "ACCEPTANCE_NIC"


class TopologyError(Exception):
    pass


@dataclass(frozen=True)
class RankInfo:
    rank: int
    node: str
    local_rank: int
    rail: int
    host: str
    nic: str | None = None


def emulation(env: Mapping[str, str] = os.environ) -> tuple[int, int] | None:
    """(nodes, ranks_per_node) when local emulation is on, else None."""
    if ENV_NODES not in env and ENV_RANKS_PER_NODE not in env:
        return None
    try:
        nodes, per_node = int(env[ENV_NODES]), int(env[ENV_RANKS_PER_NODE])
    except (KeyError, ValueError):
        raise TopologyError(
            f"{ENV_NODES} and {ENV_RANKS_PER_NODE} must both be set to positive integers "
            f"(got {env.get(ENV_NODES)!r}, {env.get(ENV_RANKS_PER_NODE)!r})") from None
    if nodes < 1 or per_node < 1:
        raise TopologyError(f"local emulation needs at least 1 node and 1 rank per node, got {nodes} x {per_node}")
    return nodes, per_node


def virtual_nodes(nodes: int, env: Mapping[str, str] = os.environ) -> list[str]:
    """The virtual nodes of local emulation that run: node1..nodeN but those ENV_EXCLUDE names."""
    left_out = {n for n in env.get(ENV_EXCLUDE, "").split(",") if n}
    return [name for name in (f"node{k}" for k in range(1, nodes + 1)) if name not in left_out]


def rail_of(local_rank: int, nic: str | None, nic_rails: Mapping[str, int]) -> int:
    if nic and nic in nic_rails:
        return nic_rails[nic]
    return local_rank


def local_identity(world: MPI.Comm, nic_rails: Mapping[str, int],
                   env: Mapping[str, str] = os.environ) -> RankInfo:
    """This rank's place. Collective on `world` (the shared-memory split)."""
    rank, size = world.Get_rank(), world.Get_size()
    host = socket.gethostname()
    # Every rank takes part in the split, whatever it ends up using.
    shared = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    shared_rank = shared.Get_rank()
    shared.Free()
    emu = emulation(env)
    if emu is not None:
        nodes, per_node = emu
        names = virtual_nodes(nodes, env)
        if len(names) * per_node != size:
            raise TopologyError(f"local emulation of {len(names)} nodes x {per_node} ranks needs "
                                f"{len(names) * per_node} ranks, but the job has {size}")
        node, local_rank = names[rank // per_node], rank % per_node
    else:
        node = env.get("SLURMD_NODENAME") or host
        local_rank = int(env["SLURM_LOCALID"]) if "SLURM_LOCALID" in env else shared_rank
    nic = env.get(ENV_NIC) or None
    if nic is None:  # virtual nodes sharing one host's devices: the device map names each rail's
        try:
            mapped = nics.mapped_devices(node, env)
        except nics.DeviceMapError as e:
            raise TopologyError(str(e)) from None
        nic = mapped[local_rank] if mapped and local_rank < len(mapped) else None
    return RankInfo(rank, node, local_rank, rail_of(local_rank, nic, nic_rails), host, nic)


class Topology:
    """The whole job's rank -> node -> rail map plus this rank's communicators."""

    def __init__(self, world: MPI.Comm, ranks: list[RankInfo]):
        self.world = world
        self.ranks = ranks
        self.me = ranks[world.Get_rank()]
        self.nodes = sorted({r.node for r in ranks}, key=natural_key)
        self.rails = sorted({r.rail for r in ranks})
        # How node pairs meet on each rail (the pytest plugin resolves it from the profile).
        self.pairing = Pairing(ALL_PAIRS)
        # Whether every rail's tests run at once (run.rail_mode; set by the plugin like the pairing).
        self.rail_mode = "serial"
        node_index = {n: i for i, n in enumerate(self.nodes)}
        # Each node's ranks, grouped once: a scan of every rank per node is O(N^2) at thousands of ranks.
        self._on: dict[str, list[RankInfo]] = {n: [] for n in self.nodes}
        for r in ranks:
            self._on[r.node].append(r)
        # Collective: every rank creates both communicators at the same time.
        self.node_comm = world.Split(node_index[self.me.node], self.me.local_rank)
        self.rail_comm = world.Split(self.me.rail, node_index[self.me.node])

    @property
    def rank(self) -> int:
        return self.me.rank

    @property
    def node(self) -> str:
        return self.me.node

    @property
    def rail(self) -> int:
        return self.me.rail

    def ranks_on(self, node: str) -> list[RankInfo]:
        return list(self._on.get(node, ()))

    def label(self, rank: int) -> str:
        return f"{rank}@{self.ranks[rank].node}"

    def to_json(self) -> dict:
        return {
            "world_size": len(self.ranks),
            "nodes": {n: [r.rank for r in self.ranks_on(n)] for n in self.nodes},
            "rails": self.rails,
            "ranks": [asdict(r) for r in self.ranks],
        }
