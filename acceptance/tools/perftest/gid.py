"""The RoCE GID and rail address perftest is given (-x, the server's address), from sysfs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

def roce_gid_index(root: str | os.PathLike, device: str, port: int) -> int | None:
    """The RoCEv2 GID the verbs engine would pick (verbs.choose_gid_index), read from sysfs; None if none.

    <root>/class/infiniband/<dev>/ports/<port>/gids/<i> and gid_attrs/types/<i> ("RoCE v2").
    """
    from ...host.sysfs import read_sysfs
    from ...engines.verbs.qp import GID_TYPE_ROCE_V2, GidRow, choose_gid_index, gid_is_zero
    base = Path(root) / "class" / "infiniband" / device / "ports" / str(port)
    try:
        indices = sorted(int(p.name) for p in (base / "gids").iterdir() if p.name.isdigit())
    except OSError:
        return None
    rows = [GidRow(i, (read_sysfs(base / "gids" / str(i)) or "").strip(), GID_TYPE_ROCE_V2) for i in indices
            if read_sysfs(base / "gid_attrs" / "types" / str(i)) == "RoCE v2"]
    rows = [r for r in rows if r.gid and not gid_is_zero(r.gid)]
    return choose_gid_index(rows) if rows else None


def ipv4_of_gid(gid: str) -> str | None:
    """"0000:0000:0000:0000:0000:ffff:c612:0101" -> "198.18.1.1"; None for a GID that is not IPv4-mapped."""
    from ...engines.verbs.qp import IPV4_MAPPED
    if not gid.lower().startswith(IPV4_MAPPED):
        return None
    digits = gid.replace(":", "")[-8:]
    return ".".join(str(int(digits[i:i + 2], 16)) for i in range(0, 8, 2))


def netdev_ipv4(netdev: str) -> str | None:
    """The IPv4 address of a network interface of this host (SIOCGIFADDR), None when it has none."""
    import fcntl
    import struct
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", netdev.encode()[:15]))  # SIOCGIFADDR
    except OSError:
        return None
    return socket.inet_ntoa(raw[20:24])


def rail_address(root: str | os.PathLike, device: str, port: int, gid_index: int | None,
                 netdev: str | None) -> str | None:
    """Where a perftest client reaches this port's server: the IPv4 address of its RoCE GID, else its
    netdev's IPv4 address (IPoIB), else None (then the host name). The rail's own address, since
    the host name is often the management network, or nothing at all."""
    from ...host.sysfs import read_sysfs
    if gid_index is not None:
        gid = read_sysfs(Path(root) / "class" / "infiniband" / device / "ports" / str(port) / "gids" / str(gid_index))
        address = ipv4_of_gid(gid or "")
        if address:
            return address
    return netdev_ipv4(netdev) if netdev else None
