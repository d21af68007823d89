"""Which RDMA devices are a node's, and which rail each one serves.

A node's devices are those under <sysfs>/class/infiniband (the sysfs root of
`sysfs.sysfs_root(node)`). Where several virtual nodes share one host's devices
(the Soft-RoCE rig, local emulation), a device map says which are whose:
ACCEPTANCE_DEVICE_MAP names a JSON file {"node1": ["rxe_n1r0", "rxe_n1r1"], ...},
the list index being the rail; a node then owns only its own entries.

A device's rail: the device map's index, else the profile's topology.nic_rails,
else the rail of the rank a launcher bound to it (ACCEPTANCE_NIC), else, when the
node has exactly as many devices as the job has rails, the i-th device in natural
order is the i-th rail.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from . import counters, sysfs
from ..records.naming import natural_key
from ..records.results import read_json

ENV_DEVICE_MAP = "ACCEPTANCE_DEVICE_MAP"


class DeviceMapError(ValueError):
    """The device map file cannot be used; str() names the file and why."""


def device_map(env: Mapping[str, str] = os.environ) -> dict[str, list[str]] | None:
    """The device map in effect ({node: [device of rail 0, device of rail 1, ...]}), or None."""
    path = env.get(ENV_DEVICE_MAP)
    if not path:
        return None
    try:
        data = read_json(path, f"{ENV_DEVICE_MAP}={path}")
    except ValueError as e:
        raise DeviceMapError(str(e)) from None
    if not isinstance(data, dict) or not all(
            isinstance(node, str) and isinstance(devs, list) and all(isinstance(d, str) for d in devs)
            for node, devs in data.items()):
        raise DeviceMapError(f'{ENV_DEVICE_MAP}={path}: expected {{"node1": ["<device of rail 0>", ...], ...}}')
    return data


def mapped_devices(node: str, env: Mapping[str, str] = os.environ) -> list[str] | None:
    """The node's devices by rail from the device map; None without a map ([] when it lists the node not)."""
    mapping = device_map(env)
    return None if mapping is None else list(mapping.get(node, []))


def node_devices(node: str, present: Iterable[str] | None = None) -> list[str]:
    """The node's RDMA devices in natural order: those present (by default every device under the
    node's sysfs root), or with a device map the node's own ones among them."""
    if present is None:
        try:
            present = [d.name for d in (sysfs.sysfs_root(node) / "class" / "infiniband").iterdir()]
        except OSError:
            present = []
    mine = mapped_devices(node)
    return sorted((d for d in set(present) if mine is None or d in mine), key=natural_key)


def device_rails(node: str, devices: Iterable[str], nic_rails: Mapping[str, int] | None,
                 bound: Mapping[int, str] | None, rails: Iterable[int]) -> dict[str, int | None]:
    """device -> rail (None when unknown) for a node's devices, by the rules of the module docstring."""
    devices = list(devices)
    mine = mapped_devices(node)
    if mine is not None:
        return {d: mine.index(d) if d in mine else None for d in devices}
    return counters.rails_of(devices, nic_rails or {}, bound, rails)


def topology_rails(topology, nic_rails: Mapping[str, int] | None, node: str | None = None,
                   devices: Iterable[str] | None = None) -> dict[str, int | None]:
    """device -> rail for one node of the job (this rank's node by default); devices: the node's
    devices when known already, else node_devices(node)."""
    node = node or topology.node
    bound = {r.rail: r.nic for r in topology.ranks_on(node) if r.nic}
    found = node_devices(node) if devices is None else devices
    return device_rails(node, found, nic_rails, bound, topology.rails)


def rail_device(topology, nic_rails: Mapping[str, int] | None,
                present: Iterable[str] | None = None) -> tuple[str | None, str]:
    """(this rank's device for its rail, or None; why not). present: the host's device names (by
    default those in sysfs). The rank's bound NIC wins when several devices serve its rail."""
    devices = node_devices(topology.node, present)
    rails = topology_rails(topology, nic_rails, devices=devices)
    mine = [d for d, r in rails.items() if r == topology.rail]
    where = f"rail {topology.rail} (rank {topology.rank} on {topology.node})"
    if not mine:
        if not devices:
            return None, f"{where} has no RDMA device: this node lists none"
        shown = ", ".join(f"{d} -> {'rail ' + str(r) if r is not None else 'no rail'}" for d, r in rails.items())
        return None, (f"{where} has no RDMA device: {shown} (rails {topology.rails}); "
                      "map devices to rails with [topology] nic_rails")
    nic = topology.me.nic
    return (nic if nic in mine else mine[0]), ""
