"""Where a run's facts came from, when not from the nodes themselves.

Tests and emulation replace data sources: a sysfs tree, stand-in tools, virtual nodes on one
host sharing its devices. A run measured that way says so, in run.json ("overrides") and as a
banner at the top of its report, so nobody mistakes it for a cluster's own numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Environment variable -> what it replaces.
SOURCES = {
    "ACCEPTANCE_SYSFS_ROOT": "sysfs (RDMA devices, ports, counters, GPUs) is read from this tree, not /sys",
    "ACCEPTANCE_IBV_DEVINFO": "ibv_devinfo is this command",
    "ACCEPTANCE_NVIDIA_SMI": "nvidia-smi is this command",
    "ACCEPTANCE_ETHTOOL": "ethtool is this command",
    "ACCEPTANCE_DCB": "dcb (RoCE PFC and trust) is this command",
    "ACCEPTANCE_IBQUERYERRORS": "ibqueryerrors (switch port counters) is this command",
    "ACCEPTANCE_PERFQUERY": "perfquery (switch port counters) is this command",
    "ACCEPTANCE_PERFTEST_DIR": "ib_write_bw / ib_write_lat come from this folder",
    "ACCEPTANCE_DEVICE_MAP": "each virtual node's RDMA devices are named by this map (nodes share one host)",
}


def in_effect(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """{what: value} of every override set, virtual nodes included."""
    found = {name: env[name] for name in SOURCES if env.get(name)}
    from .topology import emulation  # noqa: PLC0415 - topology initializes MPI; only needed here
    try:
        emu = emulation(env)
    except Exception:  # noqa: BLE001 - a bad setting is the topology's to report
        emu = None
    if emu is not None:
        found["virtual nodes"] = f"{emu[0]} nodes x {emu[1]} ranks on one host (local emulation)"
    return found


def describe(overrides: Mapping[str, str]) -> list[str]:
    """One line per override, for the report's banner."""
    return [f"{name}={value}: {SOURCES[name]}" if name in SOURCES else f"{name}: {value}"
            for name, value in overrides.items()]
