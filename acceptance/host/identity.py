"""What a node physically is: its DMI serial and each rail's NIC (node GUID, port, firmware).

A node's name is a slot; a history store keys series by the parts in it, so a board or NIC
swapped under the same name starts a new series instead of continuing the old one.

    <root>/class/dmi/id/product_serial, else board_serial     the node's serial
    <root>/class/infiniband/<dev>/node_guid                   the NIC's GUID (new NIC -> new GUID)
    <root>/class/infiniband/<dev>/ports/<n>                   its lowest-numbered port
    <root>/class/infiniband/<dev>/fw_ver                      its firmware

No MPI, no pytest: plain file reads that never raise for a missing or unreadable file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .sysfs import read_sysfs, sysfs_root

# Values vendors ship in place of a serial: not an identity (compared lower-cased).
PLACEHOLDER_SERIALS = frozenset({"to be filled by o.e.m.", "not specified", "default string", "0", "",
                                 "system serial number"})


def _serial(root: Path) -> str | None:
    for name in ("product_serial", "board_serial"):
        # Real files are root-readable only: read_sysfs gives None then, as for a missing one.
        value = read_sysfs(root / "class" / "dmi" / "id" / name)
        if value is not None and value.lower() not in PLACEHOLDER_SERIALS:
            return value
    return None


def _first_port(dev: Path) -> int | None:
    try:
        numbers = [int(p.name) for p in (dev / "ports").iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return min(numbers, default=None)


def _nic(root: Path, device: str | None) -> dict:
    if device is None:
        return {"device": None, "guid": None, "port": None, "fw": None}
    dev = root / "class" / "infiniband" / device
    guid = read_sysfs(dev / "node_guid")
    return {"device": device, "guid": guid.lower() if guid else None, "port": _first_port(dev),
            "fw": read_sysfs(dev / "fw_ver") or None}


def node_identity(node: str, devices: Mapping[int, str | None]) -> dict:
    """{"serial": str|None, "nics": {"<rail>": {"device", "guid", "port", "fw"}}} for `node`,
    `devices` mapping rail -> RDMA device (None where the rank has none). Rail keys are strings (JSON)."""
    root = sysfs_root(node)
    return {"serial": _serial(root),
            "nics": {str(rail): _nic(root, dev) for rail, dev in sorted(devices.items())}}


def merge_identities(by_rank: list[tuple[str, dict]]) -> dict[str, dict]:
    """node -> its identity, from each rank's (node, node_identity(...)): the union of the ranks'
    rails, the first serial any rank of the node read, and the first `error` a rank of it met, if any."""
    merged: dict[str, dict] = {}
    for node, ident in by_rank:
        into = merged.setdefault(node, {"serial": None, "nics": {}})
        if into["serial"] is None:
            into["serial"] = ident.get("serial")
        for rail, nic in (ident.get("nics") or {}).items():
            # A rail several ranks share: keep the entry that found a device.
            if rail not in into["nics"] or into["nics"][rail].get("device") is None:
                into["nics"][rail] = nic
        if ident.get("error") and "error" not in into:
            into["error"] = ident["error"]
    return merged
