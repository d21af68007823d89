"""Port counter windows: snapshot this node's RDMA ports, run something, record the deltas.

Used around each suite (every port of the node, by the node's first rank) and around
each incast round (the rank's own rail port). The deltas become records of suite
`counters`; their verdicts come from the profile's [counters] limits and the analysis
turns the failing ones into findings naming node, device, port and rail.
"""

from __future__ import annotations

from collections.abc import Callable

from ..host import counters, nics, sysfs
from ..rules import counter_verdicts
from ..rules.profile import Profile
from .topology import Topology


class PortWatch:
    """A set of this node's RDMA devices, with their rails, to snapshot."""

    def __init__(self, topology: Topology, devices: list[str], rails: dict[str, int | None],
                 limits: counter_verdicts.Limits):
        self.node, self.root = topology.node, sysfs.sysfs_root(topology.node)
        self.devices, self.rails, self.limits = devices, rails, limits

    @classmethod
    def _node_devices(cls, topology: Topology, profile: Profile) -> dict[str, int | None] | None:
        if not profile.get("counters.enabled"):
            return None
        devices = nics.node_devices(topology.node)
        if not devices:
            return None
        return nics.topology_rails(topology, profile.get("topology.nic_rails"), devices=devices)

    @classmethod
    def for_node(cls, topology: Topology, profile: Profile) -> PortWatch | None:
        """Every port of the node, on the node's first rank only (None elsewhere, when off, or with no ports)."""
        if topology.node_comm.Get_rank() != 0:
            return None
        rails = cls._node_devices(topology, profile)
        if rails is None:
            return None
        return cls(topology, list(rails), rails, counter_verdicts.Limits.from_profile(profile))

    @classmethod
    def for_rail(cls, topology: Topology, profile: Profile, rail: int) -> PortWatch | None:
        """The port(s) of this node that carry `rail` (None when off or unknown)."""
        rails = cls._node_devices(topology, profile)
        if rails is None:
            return None
        mine = [d for d, r in rails.items() if r == rail]
        return cls(topology, mine, rails, counter_verdicts.Limits.from_profile(profile)) if mine else None

    def snapshot(self) -> dict:
        return counters.snapshot(self.root, devices=self.devices, node=self.node)

    def record(self, before: dict, after: dict, record: Callable, note: str | None = None,
               **fields) -> list[str]:
        """Record the window's deltas (suite counters); returns the lines of counters that fail."""
        deltas = counters.diff(before, after)
        for rec in counter_verdicts.to_records(deltas, self.limits, self.rails):
            if note:
                rec["detail"] = f"{rec['detail']}; {note}"
            metric, value, unit = rec.pop("metric"), rec.pop("value"), rec.pop("unit")
            record(metric, value, unit, suite="counters", **{**rec, **fields})
        node = after.get("node", "?")
        return [line for d in deltas if counter_verdicts.counter_verdict(d, self.limits) == "fail"
                for line in counter_verdicts.problems([d], self.limits, node)]
