"""Component names, as users type them and as findings name them, and physical identity.

    node07                 a node (its series: the median of its NICs)
    node07:rail3           a NIC: node07's NIC on rail 3
    node07:rail3:node12    a link: the two NICs on rail 3 (either order)
    rail3                  a rail plane (its series: the median of its links)
    fleet                  every link

A NIC is physically its node, device, node GUID and port (run.json "identity", read from sysfs);
a node its name and DMI serial. When the same name comes back with another GUID (serial), the
part was replaced: the old series ends and a new one starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..records.naming import natural_key

_RAIL = re.compile(r"rail(\d+)$")


@dataclass(frozen=True)
class Name:
    kind: str                 # node | nic | link | rail | fleet
    node: str | None = None
    rail: int | None = None
    peer: str | None = None

    def __str__(self) -> str:
        return subject(self.kind, self.node, self.rail, self.peer)


def subject(kind: str, node=None, rail=None, peer=None, switch=None) -> str:
    """The canonical name of a component (a link's two ends in natural order)."""
    if kind == "link":
        a, b = sorted((node, peer), key=natural_key)
        return f"{a}:rail{rail}:{b}"
    if kind == "nic":
        return f"{node}:rail{rail}"
    if kind == "node":
        return str(node)
    if kind == "rail":
        return f"rail{rail}"
    if kind in ("switch", "uplink"):
        return f"{kind}:{switch}" + ("" if rail is None else f":rail{rail}")
    return "fleet"


def finding_name(f: dict) -> Name | None:
    """The component a finding names, from its fields; None for a switch or uplink (no series of its own)."""
    scope = f.get("scope")
    if scope == "link" and f.get("node") and f.get("peer") and f.get("rail") is not None:
        return Name("link", f["node"], int(f["rail"]), f["peer"])
    if scope == "nic" and f.get("node") and f.get("rail") is not None:
        return Name("nic", f["node"], int(f["rail"]))
    if scope == "node" and f.get("node"):
        return Name("node", f["node"])
    if scope == "rail" and f.get("rail") is not None:
        return Name("rail", rail=int(f["rail"]))
    if scope in ("switch", "uplink") and f.get("switch"):
        return None
    return Name("fleet")


def finding_subject(f: dict) -> str:
    """The component a finding names, as subject() writes it."""
    scope = f.get("scope")
    if scope == "link" and f.get("node") and f.get("peer") and f.get("rail") is not None:
        return subject("link", f["node"], f["rail"], f["peer"])
    if scope == "nic" and f.get("node") and f.get("rail") is not None:
        return subject("nic", f["node"], f["rail"])
    if scope == "node" and f.get("node"):
        return subject("node", f["node"])
    if scope == "rail" and f.get("rail") is not None:
        return subject("rail", rail=f["rail"])
    if scope in ("switch", "uplink") and f.get("switch"):
        return subject(scope, switch=f["switch"], rail=f.get("rail"))
    return "fleet"


def parse_name(text: str) -> Name:
    """A component name as typed (ValueError saying what is expected)."""
    parts = text.strip().split(":")
    if len(parts) == 1 and parts[0] in ("fleet", "cluster"):
        return Name("fleet")
    if len(parts) == 1 and _RAIL.match(parts[0]):
        return Name("rail", rail=int(_RAIL.match(parts[0]).group(1)))
    if len(parts) == 1 and parts[0]:
        return Name("node", node=parts[0])
    if len(parts) in (2, 3) and all(parts) and _RAIL.match(parts[1]):
        rail = int(_RAIL.match(parts[1]).group(1))
        if len(parts) == 2:
            return Name("nic", node=parts[0], rail=rail)
        a, b = sorted((parts[0], parts[2]), key=natural_key)
        if a == b:
            raise ValueError(f"{text!r}: a link joins two different nodes")
        return Name("link", node=a, rail=rail, peer=b)
    raise ValueError(f"{text!r}: expected NODE, NODE:railR, NODE:railR:PEER, railR or fleet "
                     "(for example node07, node07:rail3, node07:rail3:node12)")


def nic_identity(identity: dict, node: str, rail: int) -> dict:
    """{device, guid, port} of a node's NIC on a rail from run.json's "identity" (None where unknown)."""
    nic = ((identity.get(node) or {}).get("nics") or {}).get(str(rail)) or {}
    return {"device": nic.get("device"), "guid": nic.get("guid"), "port": nic.get("port")}


def node_serial(identity: dict, node: str) -> str | None:
    return (identity.get(node) or {}).get("serial")
