"""A rank on its NIC's NUMA node: its CPUs and its memory where the NIC's PCIe root port is.

A rank on the far socket reads and writes its buffers across the inter-socket link, which shows as a
lower bandwidth and a longer latency that belong to the placement, not to the link (perftest's own
advice: run on the NIC's local cores, e.g. `numactl --cpunodebind --membind`).

Sources (the kernel's sysfs ABI):
- <root>/class/infiniband/<dev>/device/numa_node: the NUMA node of the device's PCI function; -1 where
  the platform does not say (a single-node machine, a virtual device such as rxe)
  (Documentation/ABI/testing/sysfs-bus-pci);
- <root>/devices/system/node/node<N>/cpulist: that node's CPUs, as "0-31,64-95"
  (Documentation/ABI/stable/sysfs-devices-node).
Memory: set_mempolicy(2) MPOL_PREFERRED on that node (pages come from it while it has free memory,
then from the others rather than failing), for every page this process touches from now on.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from pathlib import Path

from ..records.naming import compress_ints
from .sysfs import read_sysfs, sysfs_root

MPOL_PREFERRED = 1
# set_mempolicy(2)'s syscall number per machine (os.uname().machine), from the kernel's tables:
# - x86_64: arch/x86/entry/syscalls/syscall_64.tbl, "238 common set_mempolicy" (239 is get_mempolicy);
# - aarch64, riscv64: include/uapi/asm-generic/unistd.h, "__NR_set_mempolicy 237" (236 is
#   get_mempolicy), the table arch/arm64 and arch/riscv include;
# - ppc64le: arch/powerpc/kernel/syscalls/syscall.tbl, "261 nospu set_mempolicy".
# Another machine is not guessed: a wrong number would make some other syscall with these arguments.
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "riscv64": 237, "ppc64le": 261}


def parse_cpulist(text: str | None) -> set[int]:
    """"0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}; empty for None or ""."""
    cpus: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def device_node(device: str, root: Path | None = None) -> int | None:
    """The NUMA node of an RDMA device's PCI function; None where sysfs gives none (-1, missing)."""
    text = read_sysfs((root or sysfs_root()) / "class" / "infiniband" / device / "device" / "numa_node")
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def node_cpus(node: int, root: Path | None = None) -> set[int]:
    return parse_cpulist(read_sysfs((root or sysfs_root()) / "devices" / "system" / "node" / f"node{node}" / "cpulist"))


@dataclass(frozen=True)
class Placement:
    """Where a rank runs, once bound (or why it is not)."""

    node: int | None        # the NIC's NUMA node; None: not known
    cpus: tuple[int, ...]   # the CPUs this rank may run on now
    memory: bool            # its memory policy prefers that node
    why: str                # in words, for run.json

    def __str__(self) -> str:
        return self.why


def _set_preferred(node: int) -> str | None:
    """set_mempolicy(MPOL_PREFERRED, {node}); None when done, else why not."""
    machine = os.uname().machine
    number = SYS_SET_MEMPOLICY.get(machine)
    if number is None:
        return f"set_mempolicy: no syscall number known for {machine}"
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    if libc.syscall(number, MPOL_PREFERRED, mask, ctypes.c_ulong(words * 64 + 1)) != 0:
        return f"set_mempolicy: {os.strerror(ctypes.get_errno())}"
    return None


def bind_to_device(device: str, root: Path | None = None) -> Placement:
    """Bind this process to `device`'s NUMA node: its CPUs (those of the node this process may use;
    all of the node's where Slurm's binding left none there) and its memory. Never raises: a rank that
    cannot be bound measures where it is, and its Placement says why."""
    allowed = os.sched_getaffinity(0)
    node = device_node(device, root)
    if node is None:
        return Placement(None, tuple(sorted(allowed)), False, f"{device}: no NUMA node in sysfs; not bound")
    cpus = node_cpus(node, root)
    if not cpus:
        return Placement(node, tuple(sorted(allowed)), False, f"{device}: NUMA node {node} lists no CPUs; not bound")
    target = (cpus & allowed) or cpus
    try:
        os.sched_setaffinity(0, target)
    except OSError as e:
        return Placement(node, tuple(sorted(allowed)), False,
                         f"{device}: NUMA node {node}: cannot run on its CPUs ({e.strerror}); not bound")
    failed = _set_preferred(node)
    shown = compress_ints(target)
    return Placement(node, tuple(sorted(target)), failed is None,
                     f"{device}: NUMA node {node}, CPUs {shown}, memory "
                     + ("preferred there" if failed is None else f"not bound ({failed})"))
