"""RDMA port counters before and after a window: sysfs (PMA and mlx5 hw_counters) and `ethtool -S`.

A snapshot reads every port of every RDMA device on this node:

  <root>/class/infiniband/<dev>/ports/<n>/counters/*     PMA PortCounters (16/8/4/32-bit, data 64-bit)
  <root>/class/infiniband/<dev>/ports/<n>/hw_counters/*  mlx5 Q-counters (32-bit) and congestion (64-bit);
                                                         rxe's (Soft-RoCE) retransmission and packet counters
  ethtool -S <netdev>                                    RoCE ports only: PFC pause, PHY errors, drops

and two snapshots of one node diff into deltas, each with a kind (error, discard, pause, app, ...;
acceptance.host.counter_kinds) that the one judge turns into a verdict against the profile's [counters]
bounds (acceptance.rules.counter_verdicts). PMA counters clamp at all-ones
instead of wrapping, so a counter at its maximum is *saturated*: its rise is unknown, never a delta.
A snapshot records each port's rate and width too: the bits a lane received in a window, which pre-FEC
bit errors are rated against, are the port's rx_bits_phy where the driver has it, else its rate times
the window's length.

Nothing here imports pytest or mpi4py: the suites, the CLI (`acceptance counters`) and the analysis
all use it.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any


from .counter_kinds import BITS_COUNTER, CNP_COUNTERS, PACKET_COUNTERS, REQ_RESP_ERROR, RX_ERR_LANE, kind_of
from .ethtool import PER_QUEUE, EthtoolError, EthtoolMissing, ethtool_stats
from .sysfs import ports, sysfs_root
from ..records.naming import natural_key
from ..records.results import read_json, utc_now

FORMAT = "acceptance-counters/1"
SOURCES = ("counters", "hw_counters", "ethtool")

# ---- widths -------------------------------------------------------------------
# PMA PortCounters (PORT_PMA_ATTR in drivers/infiniband/core/sysfs.c). Data and packet counters are
# 32-bit in the base table but 64-bit when the PMA advertises extended width, which mlx5 does.
_PMA_WIDTHS = {
    **dict.fromkeys(("symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors",
                     "port_rcv_switch_relay_errors", "port_xmit_discards", "VL15_dropped"), 16),
    **dict.fromkeys(("link_error_recovery", "link_downed", "port_xmit_constraint_errors",
                     "port_rcv_constraint_errors"), 8),
    **dict.fromkeys(("local_link_integrity_errors", "excessive_buffer_overrun_errors"), 4),
    "port_xmit_wait": 32,
    **dict.fromkeys(("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                     "unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets",
                     "multicast_rcv_packets"), 64),
}
# mlx5 hw_counters (drivers/infiniband/hw/mlx5/counters.c): Q-counters are 32-bit in hardware even
# though sysfs prints u64, so they wrap at 2**32; congestion and PPCNT counters are 64-bit.
_Q_COUNTERS = frozenset((
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests", "rx_dct_connect", "out_of_buffer",
    "out_of_sequence", "duplicate_request", "rnr_nak_retry_err", "packet_seq_err", "implied_nak_seq_err",
    "local_ack_timeout_err", "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart",
    "roce_slow_restart_cnps", "roce_slow_restart_trans", "req_rnr_retries_exceeded",
    "req_transport_retries_exceeded",
))


def width_of(name: str, source: str) -> int | None:
    """Bits of a counter: 16 for symbol_error, 32 for an mlx5 Q-counter, 64 for ethtool; None if unknown."""
    if source == "counters":
        return _PMA_WIDTHS.get(name)
    if source == "hw_counters":
        name = name.removeprefix("vport_")  # mlx5 switchdev representors: the same Q-counters, per vport
        if name in CNP_COUNTERS:
            return 64
        return 32 if name in _Q_COUNTERS or REQ_RESP_ERROR.match(name) else 64
    if source == "ethtool":
        return 64
    raise ValueError(f"unknown counter source {source!r}; expected one of {SOURCES}")


# ---- snapshot -----------------------------------------------------------------

def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


# What the kernel prints for a PMA counter of a device without a performance management agent (an iWARP
# device such as i40iw: drivers/infiniband/core/sysfs.c): a fact about the device, not a read failure.
NO_PMA = "N/A (no PMA)"
# A port's rate as sysfs prints it, "400 Gb/sec (4X NDR)": its data rate, active width times active speed
# (Documentation/ABI/stable/sysfs-class-infiniband), and the width, the lanes it runs on.
_RATE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec \((\d+)X\b")


def link_rate(rate: str | None) -> tuple[float | None, int | None]:
    """(Gbit/s, lanes) of a sysfs rate ("200 Gb/sec (4X HDR)" -> (200.0, 4)); (None, None) when unreadable."""
    m = _RATE.match(rate or "")
    return (float(m[1]), int(m[2])) if m else (None, None)


def _read_counters(folder: Path, source: str, into: dict, issues: list[str], where: str,
                   notes: list[str]) -> None:
    try:
        files = sorted(folder.iterdir(), key=lambda p: p.name)
    except FileNotFoundError:
        return
    except OSError as e:
        issues.append(f"{where}: cannot list {folder}: {e.strerror or e}")
        return
    no_pma = 0
    for f in files:
        if f.name == "lifespan":  # hw_counters cache interval in ms, not a counter
            continue
        try:
            text = f.read_text().strip()
        except OSError as e:
            issues.append(f"{where}: cannot read {source}/{f.name}: {e.strerror or e}")
            continue
        if text == NO_PMA:
            no_pma += 1
            continue
        try:
            value = int(text)
        except ValueError:
            issues.append(f"{where}: {source}/{f.name} holds {text[:40]!r}, not a number")
            continue
        _put(into, f.name, value, source)
    if no_pma:
        notes.append(f"{where}: no PMA counters ({no_pma} files in {source}/ read {NO_PMA!r}: the device has no "
                     f"InfiniBand performance management agent, as iWARP devices do)")


def _put(into: dict, name: str, value: int, source: str) -> None:
    # A name already taken by another source (rare) is kept apart as name@source.
    key = name if name not in into else f"{name}@{source}"
    into[key] = {"value": value, "source": source, "width": width_of(name, source)}


def snapshot(root: str | os.PathLike | None = None, ethtool: bool = True,
             devices: Iterable[str] | None = None, node: str | None = None) -> dict[str, Any]:
    """Every counter of every RDMA port on this node, JSON-able (format "acceptance-counters/1").

    Never raises for what the node lacks: no devices, unreadable files, a missing or failing
    ethtool each become a line in "problems"; what the node has by design (a device without PMA
    counters) a line in "notes". Each port carries its sysfs rate, and that rate parsed: rate_gbps
    and lanes (None when unreadable).
    """
    base = Path(root) if root is not None else sysfs_root()
    issues: list[str] = []
    notes: list[str] = []
    snap: dict[str, Any] = {"format": FORMAT, "node": node or node_name(), "time": utc_now(),
                            "epoch": time.time(), "sysfs_root": str(base), "ports": [], "problems": issues,
                            "notes": notes}
    ib = base / "class" / "infiniband"
    if not ib.is_dir():
        issues.append(f"no RDMA devices: {ib} does not exist (no RDMA driver loaded, or not an RDMA node)")
        return snap
    found = ports(base, devices)
    if not found:
        issues.append(f"no RDMA ports under {ib}")
    ethtool_missing = False
    read_netdevs: dict[str, dict[str, int] | None] = {}
    for p in found:
        where = f"{p.device} port {p.port}"
        counters: dict[str, dict] = {}
        folder = ib / p.device / "ports" / str(p.port)
        _read_counters(folder / "counters", "counters", counters, issues, where, notes)
        _read_counters(folder / "hw_counters", "hw_counters", counters, issues, where, notes)
        if ethtool and p.netdev and p.link_layer == "Ethernet" and not ethtool_missing:
            if p.netdev not in read_netdevs:
                try:
                    read_netdevs[p.netdev] = ethtool_stats(p.netdev)
                except EthtoolMissing as e:
                    read_netdevs[p.netdev] = None
                    issues.append(str(e))
                    ethtool_missing = True
                except EthtoolError as e:
                    read_netdevs[p.netdev] = None
                    issues.append(f"{where} ({p.netdev}): {e}")
            for name, value in (read_netdevs[p.netdev] or {}).items():
                if not PER_QUEUE.match(name):
                    _put(counters, name, value, "ethtool")
        gbps, lanes = link_rate(p.rate)
        snap["ports"].append({"device": p.device, "port": p.port, "link_layer": p.link_layer,
                              "netdev": p.netdev, "state": p.state, "rate": p.rate, "rate_gbps": gbps,
                              "lanes": lanes, "counters": counters})
    return snap


def check_snapshot(data: Any) -> str | None:
    """Why `data` is not a counters snapshot this version reads, or None when it is."""
    if not isinstance(data, dict) or "format" not in data:
        return 'not a counters snapshot (no "format" key; write one with `acceptance counters snapshot`)'
    if data["format"] != FORMAT:
        return f"unsupported snapshot format {data['format']!r} (this version reads {FORMAT!r})"
    for key in ("node", "epoch", "ports"):
        if key not in data:
            return f'counters snapshot without "{key}"'
    return None


def load_snapshot(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a snapshot file; ValueError naming the file and the reason."""
    data = read_json(path)
    why = check_snapshot(data)
    if why:
        raise ValueError(f"{path}: {why}")
    return data


# ---- diff ---------------------------------------------------------------------

@dataclass
class Delta:
    device: str
    port: int
    netdev: str | None
    name: str
    source: str
    kind: str
    width: int | None
    before: int
    after: int
    delta: int | None          # None: saturated, or reset / wrapped
    saturated: str | None      # None | "during" (rose to its cap) | "before" (already at its cap)
    seconds: float
    rate: float | None         # delta / seconds
    note: str | None = None    # "reset or wrapped"; pre_fec kind: how its bits were had, or why they are unknown
    packets: int | None = None  # retransmit kind: the port's packets sent + received in the window
    ppm: float | None = None    # retransmit kind: delta per million of those packets (None: unknown)
    bits: int | None = None     # pre_fec kind: the bits this counter's lane (or port) received in the window
    ber: float | None = None    # pre_fec kind: delta / bits, the pre-FEC bit error rate (None: unknown)
    bits_from: str | None = None  # pre_fec kind: "rx_bits_phy", or "rate" (the port's rate x the window)


class DiffResult(list):
    """diff()'s answer: a list of Delta, plus `notes` (ports and counters present in one snapshot only,
    and the snapshots' own problems and notes), `node` and `seconds` (the window)."""

    def __init__(self, deltas: Iterable[Delta] = (), notes: list[str] | None = None, node: str = "",
                 seconds: float = 0.0):
        super().__init__(deltas)
        self.notes = list(notes or [])
        self.node = node
        self.seconds = seconds


def _saturates(source: str, width: int | None) -> bool:
    # IBTA PMA counters clamp at all-ones; sysfs Q-counters and ethtool counters wrap or are 64-bit.
    return source == "counters" and width is not None and width < 64


def saturated(snap: Mapping[str, Any]) -> list[str]:
    """Error and discard counters of one snapshot that sit at their maximum, as readable lines."""
    lines = []
    for port in snap.get("ports", []):
        for name, c in port.get("counters", {}).items():
            width = c.get("width")
            if (_saturates(c.get("source", ""), width) and c.get("value") == 2**width - 1
                    and kind_of(name) in ("error", "retransmit", "discard")):
                lines.append(f"{port['device']} port {port['port']}: {name} at {2**width - 1} ({width}-bit)")
    return lines


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> DiffResult:
    """Counter changes between two snapshots of one node (ValueError for two nodes or a bad snapshot).

    A PMA counter narrower than 64 bits that reads its maximum 2**w-1 afterwards is saturated:
    "during" if it was below before, "before" if it already was; delta is None (the rise is unknown).
    A counter that went down was reset or wrapped: delta None, note "reset or wrapped".
    Snapshots written before ports carried rate_gbps and lanes are read too (their rate text is parsed).
    """
    for label, snap in (("before", before), ("after", after)):
        why = check_snapshot(snap)
        if why:
            raise ValueError(f"{label}: {why}")
    if before["node"] != after["node"]:
        raise ValueError(f"snapshots of different nodes: before is from {before['node']}, "
                         f"after from {after['node']}; diff two snapshots of the same node")
    seconds = float(after["epoch"]) - float(before["epoch"])
    notes: list[str] = []
    for key in ("problems", "notes"):  # "notes": absent from snapshots of older versions
        said_before, said_after = list(before.get(key) or []), list(after.get(key) or [])
        for line in said_before:
            notes.append(f"{'both snapshots' if line in said_after else 'before snapshot'}: {line}")
        notes += [f"after snapshot: {line}" for line in said_after if line not in said_before]
    old = {(p["device"], p["port"]): p for p in before["ports"]}
    new = {(p["device"], p["port"]): p for p in after["ports"]}
    for key in old.keys() - new.keys():
        notes.append(f"{key[0]} port {key[1]}: only in the before snapshot (port gone: device reset, "
                     f"driver reload or failed NIC?)")
    for key in new.keys() - old.keys():
        notes.append(f"{key[0]} port {key[1]}: only in the after snapshot (port appeared during the window)")
    deltas = []
    links: dict[tuple, tuple[float | None, int | None, str | None]] = {}
    for key in sorted(new.keys() & old.keys(), key=lambda k: (natural_key(k[0]), k[1])):
        a, b = new[key], old[key]
        links[key] = _link(b, a)
        was, now = b.get("counters") or {}, a.get("counters") or {}
        for side, names in (("before", sorted(was.keys() - now.keys())), ("after", sorted(now.keys() - was.keys()))):
            if names:
                shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
                notes.append(f"{key[0]} port {key[1]}: {len(names)} counter(s) only in the {side} snapshot, "
                             f"not compared: {shown}")
        for name, c in now.items():
            if name not in was:
                continue
            deltas.append(_delta(key, a.get("netdev"), name, was[name], c, seconds))
    return DiffResult(_per_packet(deltas, links), notes, str(after["node"]), seconds)


def _link(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[float | None, int | None, str | None]:
    """(Gbit/s, lanes, None) of a port that was ACTIVE at one rate in both snapshots, so that it carried
    bits at that rate all through the window; else (None, lanes or None, why not)."""
    gbps, lanes = _rate_of(after)
    was, _ = _rate_of(before)
    if gbps is None or was is None:
        return None, lanes, "the port's rate is unknown"
    if was != gbps:
        return None, lanes, f"the port's rate changed during the window ({was:g} -> {gbps:g} Gb/sec)"
    states = {str(p.get("state")) for p in (before, after)}
    if not all("ACTIVE" in state for state in states):
        return None, lanes, f"the port was not ACTIVE throughout the window ({' -> '.join(sorted(states))})"
    return gbps, lanes, None


def _rate_of(port: Mapping[str, Any]) -> tuple[float | None, int | None]:
    if "rate_gbps" in port:
        return port["rate_gbps"], port.get("lanes")
    return link_rate(port.get("rate"))  # a snapshot written before ports carried rate_gbps


def _per_packet(deltas: list[Delta], links: Mapping[tuple, tuple[float | None, int | None, str | None]]
                ) -> list[Delta]:
    """Counters related to their port's traffic. Retransmit: packets (the first PACKET_COUNTERS pair
    the port has, both deltas known) and ppm; no retransmission is 0 ppm even without a packet count.
    Pre-FEC errors: the bits received and the bit error rate; no error is a rate of 0 even when the bits
    are unknown. The bits are the port's rx_bits_phy where it rose (the upstream mlx5 driver does not
    expose it), else the port's rate times the window's length (a link carries bits whenever it is up,
    which is how the NIC's own tools rate its bit errors), when the port was ACTIVE at one rate in both
    snapshots (links: _link). A lane counter (rx_err_lane_<l>_phy) gets a lane's share: the port's bits
    over its width (the "4X" of its rate), or, where the width is unknown, over its active lanes. mlx5
    lists a fixed number of lane counters whatever the port uses (a 2-lane 100G port shows 4, two of them
    0 for ever): a lane is active when its counter has ever counted, which every PAM4 lane does."""
    by_port: dict[tuple, dict[str, int | None]] = {}
    active: dict[tuple, int] = {}
    for d in deltas:
        by_port.setdefault((d.device, d.port), {})[d.name] = d.delta
        if RX_ERR_LANE.match(d.name) and d.after > 0:
            active[(d.device, d.port)] = active.get((d.device, d.port), 0) + 1
    out = []
    for d in deltas:
        seen = by_port[(d.device, d.port)]
        if d.kind == "retransmit":
            packets = next((seen[a] + seen[b] for a, b in PACKET_COUNTERS
                            if seen.get(a) is not None and seen.get(b) is not None), None)
            ppm = (0.0 if d.delta == 0 else None if d.delta is None or not packets
                   else d.delta / packets * 1e6)
            d = replace(d, packets=packets, ppm=ppm)
        elif d.kind == "pre_fec":
            d = _bit_error_rate(d, seen, links[(d.device, d.port)], active.get((d.device, d.port), 0))
        out.append(d)
    return out


def _bit_error_rate(d: Delta, seen: Mapping[str, int | None], link: tuple[float | None, int | None, str | None],
                    active: int) -> Delta:
    """A pre_fec Delta with its bits, where they came from (bits_from, and in words: note) and its BER."""
    gbps, width, why = link
    lane = bool(RX_ERR_LANE.match(d.name))
    lanes = (width or max(1, active)) if lane else 1
    share = f" over {lanes} lanes" if lane else ""
    port_bits = seen.get(BITS_COUNTER)
    if port_bits:
        bits, source, how = port_bits // lanes, "rx_bits_phy", f"bits from rx_bits_phy{share}"
    elif gbps is not None and d.seconds > 0:
        bits, source = round(gbps * 1e9 * d.seconds / lanes), "rate"
        how = f"bits from the port's rate, {gbps:g} Gb/sec{share} for {d.seconds:,.1f} s (no rx_bits_phy)"
    else:
        counted = ("no rx_bits_phy" if BITS_COUNTER not in seen
                   else "rx_bits_phy did not rise" if port_bits == 0 else "rx_bits_phy was reset")
        bits = source = None
        how = f"bits received unknown: {counted}, and {why or 'the window has no length'}"
    ber = 0.0 if d.delta == 0 else None if d.delta is None or not bits else d.delta / bits
    return replace(d, bits=bits, ber=ber, bits_from=source, note=d.note or how)


def _delta(key, netdev, name: str, old: Mapping, new: Mapping, seconds: float) -> Delta:
    source = new.get("source", "counters")
    base_name = name.split("@", 1)[0]
    width = new.get("width", width_of(base_name, source) if source in SOURCES else None)
    b, a = int(old["value"]), int(new["value"])
    saturated = note = None
    value: int | None = a - b
    if _saturates(source, width) and a == 2 ** width - 1:
        saturated = "during" if b < a else "before"
        value = None
    elif a < b:
        value, note = None, "reset or wrapped"
    rate = value / seconds if value is not None and seconds > 0 else None
    return Delta(device=key[0], port=key[1], netdev=netdev, name=name, source=source, kind=kind_of(base_name),
                 width=width, before=b, after=a, delta=value, saturated=saturated, seconds=seconds, rate=rate,
                 note=note)


def rails_of(devices: Iterable[str], nic_rails: Mapping[str, int], bound: Mapping[int, str] | None,
             rails: Iterable[int]) -> dict[str, int | None]:
    """device -> rail: the profile's nic_rails first; else the rail whose rank was bound to the device;
    else, when the node has exactly as many devices as rails, the i-th device (natural order) is the
    i-th rail; else None."""
    ordered = sorted(set(devices), key=natural_key)
    rails = sorted(set(rails))
    by_device = {dev: rail for rail, dev in (bound or {}).items() if dev}
    out: dict[str, int | None] = {}
    for i, dev in enumerate(ordered):
        if dev in nic_rails:
            out[dev] = int(nic_rails[dev])
        elif dev in by_device:
            out[dev] = by_device[dev]
        elif len(ordered) == len(rails):
            out[dev] = rails[i]
        else:
            out[dev] = None
    return out


# ---- human output -------------------------------------------------------------


def deltas_json(deltas: Iterable[Delta]) -> list[dict]:
    return [asdict(d) for d in deltas]
