"""Which of a node's RDMA ports are its rails.

A GPU node has more RDMA ports than rails: a management or in-band NIC, a storage NIC, a cloud VM's
accelerated-networking function (Azure's A100 nodes show a 40 GbE virtual function beside their eight
HDR rails), a BlueField's host port or a LAG bond. Those are listed, with why, and never judged as
rails; a rail that is missing is still a failure. The profile says what a rail is:

  topology.nic_rails   NIC name -> rail: exactly these are rails (a site profile's explicit map)
  topology.rails       how many rails a node has (0: not said)
  preflight.link_layer a rail's link layer: a port on another one is not a rail (a VPI port switched to
                       the wrong mode then leaves a rail missing, which fails)
  preflight.port_rate  a rail's rate: the NIC model most ports at this rate share is the rails' model

Without an explicit map, a virtual function is never a rail and a port on the wrong link layer is not
one. While more ports remain than topology.rails, a bond and then a port of another NIC model than the
rails' (sysfs hca_type: MT4129 is a ConnectX-7, MT4125 a ConnectX-6 Dx) are set aside too; a bond is a
rail where the bonds are all there is (RoCE fabrics that bond two ports per rail).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..host.nodefacts import Port
from ..rules.profile import Profile
from .base import bound


@dataclass(frozen=True)
class Rails:
    ports: list[Port]                                   # judged as rails
    others: list[tuple[Port, str]] = field(default_factory=list)  # not rails, each with why
    missing: str | None = None                          # why rails are missing (a failure); None when none are
    ambiguous: str | None = None                        # more rail-like ports than rails: all are judged, and why

    def describe_others(self) -> str:
        """ "not rails: mlx5_8 port 1 (Ethernet, not the profile's InfiniBand)" or ""."""
        if not self.others:
            return ""
        return "not rails: " + "; ".join(f"{p.label} ({why})" for p, why in self.others)


def _bond(port: Port) -> bool:
    # mlx5 names a LAG's RDMA device mlx5_bond_<n> (drivers/infiniband/hw/mlx5/main.c)
    return "_bond_" in port.device or port.device.startswith("bond")


def select(ports: list[Port], profile: Profile) -> Rails:
    """The rails among `ports` (every port of every RDMA device the node shows)."""
    mapped = profile.get("topology.nic_rails")
    expected = profile.get("topology.rails") or 0
    if mapped:
        rails = [p for p in ports if p.device in mapped]
        others = [(p, "not in topology.nic_rails") for p in ports if p.device not in mapped]
        absent = sorted(set(mapped) - {p.device for p in ports}, key=lambda d: mapped[d])
        missing = (f"{', '.join(f'{d} (rail {mapped[d]})' for d in absent)}: no such RDMA device "
                   f"(topology.nic_rails)") if absent else None
        return Rails(rails, others, missing)
    layer = profile.get("preflight.link_layer")
    candidates, others = [], []
    for p in ports:
        if p.virtual:
            others.append((p, "an SR-IOV virtual function: a VM's network, not a rail"))
        elif layer is not None and p.link_layer != layer:
            others.append((p, f"{p.link_layer}, not the profile's {layer}"))
        else:
            candidates.append(p)
    if expected and len(candidates) > expected:
        bonds = [p for p in candidates if _bond(p)]
        if bonds and len(candidates) - len(bonds) >= expected:
            others += [(p, "a bond (LAG) device") for p in bonds]
            candidates = [p for p in candidates if not _bond(p)]
    if expected and len(candidates) > expected:
        model = _rail_model(candidates, bound("port_rate", profile))
        if model:
            odd = [p for p in candidates if p.hca_type and p.hca_type != model]
            others += [(p, f"{p.hca_type} at {p.rate or 'an unknown rate'}, not the rail NICs' {model}") for p in odd]
            candidates = [p for p in candidates if p not in odd]
    missing = ambiguous = None
    if expected and len(candidates) < expected:
        missing = (f"{len(candidates)} rail ports, the profile expects {expected} (topology.rails)"
                   + (f"; {Rails([], others).describe_others()}" if others else ""))
    elif expected and len(candidates) > expected:
        ambiguous = (f"{len(candidates)} ports look like rails where the profile expects {expected} "
                     f"(topology.rails): all are judged; name the rails with topology.nic_rails")
    others.sort(key=lambda o: ports.index(o[0]))
    return Rails(candidates, others, missing, ambiguous)


def _rail_model(candidates: list[Port], rate: float | None) -> str | None:
    """The NIC model most candidates at the profile's rate share (else most candidates)."""
    at_rate = [p for p in candidates if rate is not None and p.gbps == rate and p.hca_type]
    pool = at_rate or [p for p in candidates if p.hca_type]
    if not pool:
        return None
    return Counter(p.hca_type for p in pool).most_common(1)[0][0]
