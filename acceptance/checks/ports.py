"""The ports check: every rail port ACTIVE / LinkUp, at the profile's rate, link layer and MTU
([preflight]), as many RDMA devices and rails as the profile says; ports that are not rails listed.

Each port's judgement (down, slow, link layer, MTU) is one function here, asked by the node check and
by the preflight suite alike. A value the node cannot show (a state file unreadable, an InfiniBand MTU
without ibv_devinfo, a rate that does not parse) is not a fault of the port: it is "could not be
judged", never a failure.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from dataclasses import dataclass

from ..host import nodefacts
from ..host.nodefacts import Port
from ..rules.profile import Profile
from . import rails as rail_select
from .base import RDMA_KEYS, Context, Outcome, Problem, bound, fails, judged, required, skip


@dataclass(frozen=True)
class Judged:
    """What is wrong with one port's value (known), or why it could not be judged (not known)."""
    detail: str
    known: bool = True


def down(p: Port) -> Judged | None:
    if p.unread:
        return Judged(f"state unknown: {p.unread}", known=False)
    return None if p.up else Judged(f"{p.state or '?'} / {p.phys_state or '?'}")


def slow(p: Port, profile: Profile) -> Judged | None:
    """An active port below preflight.port_rate."""
    rate = bound("port_rate", profile)
    if rate is None:
        return None
    if p.gbps is None:
        return Judged(f"rate {p.rate!r} does not parse; the profile needs {rate:g} Gbit/s", known=False)
    return Judged(f"rate {p.rate} is below the profile's {rate:g} Gbit/s") if fails("port_rate", p.gbps, profile) else None


def wrong_layer(p: Port, expected: str | None) -> Judged | None:
    if expected is None or p.link_layer == expected:
        return None
    return Judged(f"link layer {p.link_layer}, the profile expects {expected}")


def short_mtu(p: Port, profile: Profile) -> Judged | None:
    """An active port's MTU below preflight.mtu; unknown (ibv_devinfo missing, no netdev) is not judged."""
    minimum = bound("port_mtu", profile)
    if minimum is None:
        return None
    if p.mtu is None:
        return Judged(p.mtu_reason or "MTU unknown", known=False)
    return Judged(f"MTU {p.mtu} is below the profile's {minimum:g}") if fails("port_mtu", p.mtu, profile) else None


def rail_ports(ctx: Context, mtu: bool = False) -> tuple[list[Port], rail_select.Rails]:
    """(every RDMA port of the node, which are rails); nodefacts.Unavailable where the node has none.
    ibv_devinfo runs only when `mtu` and the profile bounds an MTU."""
    asked = mtu and bound("port_mtu", ctx.profile) is not None
    devinfo = None if asked else nodefacts.Unavailable("not asked")
    ports = nodefacts.read_ports(ctx.root, devinfo)
    return ports, rail_select.select(ports, ctx.profile)


# ---- a rail's network interface standing in for its port (the emulated cluster) -----------------

_SIOCGIFFLAGS, _SIOCGIFMTU = 0x8913, 0x8921
_IFF_UP, _IFF_RUNNING = 0x1, 0x40


def netdev_state(name: str) -> tuple[bool, bool, int] | None:
    """(administratively up, carrier, MTU) of an interface in this process's network namespace, by
    ioctl (sysfs shows the namespace it was mounted in, not ours); None when there is no such one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh14x", name.encode()[:15], 0)
        try:
            flags = struct.unpack("16sh14x", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, req))[1]
            mtu = struct.unpack("16si12x", fcntl.ioctl(s.fileno(), _SIOCGIFMTU, struct.pack("16si12x", name.encode()[:15], 0)))[1]
        except OSError:
            return None
    return bool(flags & _IFF_UP), bool(flags & _IFF_RUNNING), mtu


def _netdev_ports(ctx: Context, pattern: str) -> Outcome:
    count = ctx.profile.get("topology.rails") or ctx.profile.get("run.ranks_per_node")
    minimum = bound("port_mtu", ctx.profile)
    problems, seen = [], []
    for rail in range(count):
        name = pattern.replace("{rail}", str(rail))
        part = f"rail {rail} ({name})"
        found = netdev_state(name)
        if found is None:
            problems.append(Problem(part, "no such network interface"))
            continue
        up, carrier, mtu = found
        if not up:
            problems.append(Problem(part, "interface down"))
        elif not carrier:
            problems.append(Problem(part, "no carrier (link down)"))
        elif mtu is not None and fails("port_mtu", mtu, ctx.profile):
            problems.append(Problem(part, f"MTU {mtu} is below the profile's {minimum}"))
        else:
            seen.append(name)
    return judged("ports", problems, f"{len(seen)} of {count} rail interfaces up" if seen else "")


# ---- the check --------------------------------------------------------------------------------

def check(ctx: Context) -> Outcome:
    """Every rail port ACTIVE / LinkUp, at the profile's rate, MTU and link layer ([preflight])."""
    pattern = ctx.profile.get("node_check.port_netdev")
    if pattern:
        return _netdev_ports(ctx, pattern)
    needs = required(ctx.profile, *RDMA_KEYS)
    try:
        ports, rails = rail_ports(ctx, mtu=True)
    except nodefacts.Unavailable as e:
        if needs:
            return judged("ports", [Problem("RDMA", f"{e.reason} (the profile requires it: {needs})")])
        return skip("ports", e.reason)
    mapped = ctx.profile.get("topology.nic_rails")
    layer = ctx.profile.get("preflight.link_layer")
    problems, unchecked = [], []
    devices = sorted({p.device for p in ports}, key=lambda d: [p.device for p in ports].index(d))
    if fails("rdma_devices", len(devices), ctx.profile):
        problems.append(Problem("RDMA", f"{len(devices)} RDMA devices ({', '.join(devices)}), the profile "
                                        f"expects {bound('rdma_devices', ctx.profile):g}"))
    if rails.missing:
        problems.append(Problem("rails", rails.missing))
    for p in rails.ports:
        part = p.label + (f" (rail {mapped[p.device]})" if mapped and p.device in mapped else "")
        state = down(p)
        found = [state] if state else [slow(p, ctx.profile), wrong_layer(p, layer), short_mtu(p, ctx.profile)]
        for j in filter(None, found):
            if j.known:
                problems.append(Problem(part, j.detail))
            else:
                unchecked.append(f"{part}: {j.detail}")
    up = sum(p.up for p in rails.ports)
    note = "; ".join(filter(None, [f"{up} of {len(rails.ports)} rail ports ACTIVE", rails.describe_others(),
                                   rails.ambiguous]))
    return judged("ports", problems, note, unchecked=unchecked)
