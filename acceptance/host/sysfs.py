"""This node's sysfs: its root (a fake tree in tests and emulation), its files, its RDMA ports.

    <root>/class/infiniband/<dev>/ports/<n>/{link_layer,state,rate}   one Port each
    <root>/class/infiniband/<dev>/device/net/<netdev>                 the port's netdev

Used by the counters, the node facts, the NICs' rails, perftest's device choice and autoprofile.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..records.naming import natural_key

ENV_SYSFS_ROOT = "ACCEPTANCE_SYSFS_ROOT"
NODE_PLACEHOLDER = "{node}"


def sysfs_root(node: str | None = None) -> Path:
    """ACCEPTANCE_SYSFS_ROOT (a fake tree in tests), else /sys.

    A literal "{node}" in it becomes `node`, so emulated nodes sharing one host each
    read their own tree (ACCEPTANCE_SYSFS_ROOT=/tmp/fake/{node}).
    """
    raw = os.environ.get(ENV_SYSFS_ROOT) or "/sys"
    return Path(raw.replace(NODE_PLACEHOLDER, node) if node is not None else raw)


@dataclass(frozen=True)
class Port:
    device: str          # mlx5_0
    port: int            # 1
    link_layer: str | None  # InfiniBand | Ethernet
    netdev: str | None   # ens1f0np0 (RoCE) or ibp24s0 (IPoIB); None when the device has none
    state: str | None    # as sysfs prints it: "4: ACTIVE"
    rate: str | None     # "400 Gb/sec (4X NDR)"


def read_sysfs(path: Path) -> str | None:
    """A sysfs file's text without the trailing newline; None when missing or unreadable."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _netdev(dev: Path, port: int) -> str | None:
    """The port's netdev under <dev>/device/net (the one whose 0-based dev_port matches, when there are
    several); else the netdev of the port's first GID (gid_attrs/ndevs/0)."""
    try:
        nets = sorted((p for p in (dev / "device" / "net").iterdir()), key=lambda p: natural_key(p.name))
    except OSError:
        nets = []
    if len(nets) > 1:  # a multi-port device
        for net in nets:
            if read_sysfs(net / "dev_port") == str(port - 1):
                return net.name
    if nets:
        return nets[0].name
    # The GID's ndev can be an upper device (bond0 under RoCE LAG), hence only second choice.
    return read_sysfs(dev / "ports" / str(port) / "gid_attrs" / "ndevs" / "0") or None


def ports(root: str | os.PathLike | None = None, devices: Iterable[str] | None = None) -> list[Port]:
    """Every port under <root>/class/infiniband, devices in natural order (mlx5_2 before mlx5_10)."""
    base = Path(root) if root is not None else sysfs_root()
    wanted = set(devices) if devices is not None else None
    found = []
    try:
        devs = sorted((d for d in (base / "class" / "infiniband").iterdir()), key=lambda d: natural_key(d.name))
    except OSError:
        return []
    for dev in devs:
        if wanted is not None and dev.name not in wanted:
            continue
        try:
            numbers = sorted(int(p.name) for p in (dev / "ports").iterdir() if p.name.isdigit())
        except OSError:
            continue
        for n in numbers:
            port = dev / "ports" / str(n)
            found.append(Port(device=dev.name, port=n, link_layer=read_sysfs(port / "link_layer"),
                              netdev=_netdev(dev, n), state=read_sysfs(port / "state"), rate=read_sysfs(port / "rate")))
    return found
