"""Switch ports' own counters, read through the fabric before and after a window (docs/rdma.md §5,
"Switch ports").

A host reads its own ports' PMA counters in sysfs (acceptance.host.counters); a switch's ports are read
through the fabric, or from UFM:

  ibqueryerrors -C <dev> -P <port> --switch --threshold-file /dev/null
        one walk of the subnet behind that host port: every switch, and every switch port whose error
        counters are not all zero (a port it does not list read zero)
  perfquery -x [-G] <lid|guid> <port>
        one switch port; `perfquery <lid> <port>` too when the switch has no 64-bit error counters
        (ClassPortInfo CapabilityMask2 without IsAdditionalPortCountersExtendedSupported)
  UFM telemetry and UFM REST ports JSON, saved to files
        counters per node GUID and port; switch names and the peer at the other end of each cable

Every reader gives one form, a Reading: (switch, port) -> {counter: {value, width}}, the switch its node
GUID ("0x" and 16 hex digits, as switchtree names an unnamed switch) or, for a port read by LID only,
"lid <n>". Counters carry the kernel's sysfs names of the same PMA counters (SymbolErrorCounter ->
symbol_error), so the host's kinds, classes and judge apply unchanged. A snapshot (format
"acceptance-switchports/1") is the readings of one moment; diff() turns two into the host's Deltas
through acceptance.host.counters.diff, on the same PMA rules: a counter at its all-ones cap is
saturated, never a rise.

Nothing here raises for what a fabric or a host lacks: a missing tool, a walk that fails or times out,
a host without an InfiniBand port each become a line in the snapshot's "problems". A file that is not
one of the formats raises SwitchPortsError (an InputError: exit 2) naming the file and the line.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import counters
from .command import ToolError, ToolMissing, run_bounded
from .counters import node_name
from .sysfs import ports as sysfs_ports
from ..records.results import InputError, read_json, utc_now

FORMAT = "acceptance-switchports/1"
ENV_IBQUERYERRORS = "ACCEPTANCE_IBQUERYERRORS"
ENV_PERFQUERY = "ACCEPTANCE_PERFQUERY"
# One walk of one subnet. ibqueryerrors discovers the subnet (SMPs to every node), then asks each
# switch's PMA for its counters one query at a time: seconds on a small fabric, tens of seconds
# expected at hundreds of switches; the bound keeps a wedged subnet manager or PMA from holding a run.
WALK_TIMEOUT = 300.0
PERFQUERY_TIMEOUT = 10.0  # one perfquery: a handful of MADs to one port
# The run's snapshots in its folder, taken before the first suite and after the last.
WINDOW_FILES = {"before": "switchports-before.json", "after": "switchports-after.json"}
# The node name counters.diff sees: both snapshots are of the fabric, not of a node.
FABRIC = "fabric"
ALL_PORTS = 255  # PortSelect 0xFF: the switch's ports summed (AllPortSelect), not a port
ACCESS_HINT = ("reading the fabric needs /dev/infiniband/umad* (root, or e.g. "
               f"{ENV_IBQUERYERRORS}=\"sudo -n ibqueryerrors\")")

# libibmad's field names (what perfquery and ibqueryerrors print) -> the kernel's sysfs names of the same
# PMA counters (Documentation/ABI/stable/sysfs-class-infiniband), the names acceptance.host.counter_kinds
# classes. The error and wait counters only: the data counters perfquery prints too are traffic, which
# a switch port's verdict does not need.
PMA_NAMES = {
    "SymbolErrorCounter": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped",
    "PortXmitWait": "port_xmit_wait",
}
# UFM telemetry's names for the same counters (the Infiniband_*_u_* keys of its messages).
UFM_NAMES = {
    "Infiniband_SymbolErrors_u_Errors": "symbol_error",
    "Infiniband_LinkRecovers_u_Errors": "link_error_recovery",
    "Infiniband_LinkDowned_u_Errors": "link_downed",
    "Infiniband_RcvErrors_u_Errors": "port_rcv_errors",
    "Infiniband_RcvRemotePhysErrors_u_Errors": "port_rcv_remote_physical_errors",
    "Infiniband_RcvSwRelayErrors_u_Errors": "port_rcv_switch_relay_errors",
    "Infiniband_XmtDiscards_u_Errors": "port_xmit_discards",
    "Infiniband_XmtConstraintErrors_u_Errors": "port_xmit_constraint_errors",
    "Infiniband_RcvConstraintErrors_u_Errors": "port_rcv_constraint_errors",
    "Infiniband_LinkIntegrityErrors_u_Errors": "local_link_integrity_errors",
    "Infiniband_ExcBufOverrunErrors_u_Errors": "excessive_buffer_overrun_errors",
    "Infiniband_VL15Dropped_u_Drops": "VL15_dropped",
    "Infiniband_XmitWait_u_Ticks": "port_xmit_wait",
}
EXTENDED_WIDTH = 64  # PortCountersExtended's error counters (IsAdditionalPortCountersExtendedSupported)
# perfquery's CapMask2 as printed (ClassPortInfo CapabilityMask2, shifted): bit 1 is
# IsAdditionalPortCountersExtendedSupported, the 64-bit error counters of PortCountersExtended.
ADDITIONAL_EXTENDED = 0x2


class SwitchPortsError(InputError):
    """A file or tool output that is not in a format read here: "SOURCE:LINE: why"."""


@dataclass
class Reading:
    """What one source said. source: {"id", "tool", "complete", "unlisted_zero", "unread", "seconds"}:
    complete when the source ran to its end, unlisted_zero the counters a switch port it does not list
    read zero (ibqueryerrors lists only what is not zero), unread the switch ports it could not query
    ({"name", "lid", "port"}, port 255: all). switches: the switch ids it knows for switches, None when
    it cannot tell a switch's ports from a host's (UFM telemetry)."""

    source: dict[str, Any]
    counters: dict[tuple[str, int], dict[str, dict]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    peers: dict[tuple[str, int], dict[str, str | None]] = field(default_factory=dict)
    switches: set[str] | None = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _source(source_id: str, tool: str, complete: bool = True) -> dict[str, Any]:
    return {"id": source_id, "tool": tool, "complete": complete, "unlisted_zero": [], "unread": [], "seconds": None}


def guid(text: str) -> str:
    """A GUID as switchtree writes it: "0x" and 16 lowercase hex digits ("2c903006e29b0" ->
    "0x0002c903006e29b0"); ValueError when it is not hex."""
    return f"0x{int(text, 16):016x}"


def switch_label(name: str | None) -> str | None:
    """A switch's short name: the system name of a Mellanox/NVIDIA NodeDescription ("MF0;leaf01:MQM8700/U1"
    -> "leaf01"), else the name itself; the rule switchtree's ibnetdiscover reader names switches by."""
    if not name or not name.strip():
        return None
    m = _SWITCH_DESC.match(name)
    return m.group(1).strip() if m and m.group(1).strip() else name.strip()


_SWITCH_DESC = re.compile(r"[^;]*;([^:]+):")


def clear_command(switch: str, port: int) -> str:
    """How to clear a switch port's counters (a saturated one hides every later rise)."""
    if switch.startswith("lid "):
        return f"perfquery -R {switch.removeprefix('lid ')} {port}"
    return f"perfquery -R -G {switch} {port}"


# ---- ibqueryerrors -------------------------------------------------------------------------------------
# infiniband-diags/ibqueryerrors.c (rdma-core): a header per node with errors, then a row per port.
#   Errors for 0x2c903006e29b0 "MF0;sw01:SX6036/U1"    a switch (its port-0 GUID, then its name)
#   Errors for "node01 mlx4_0"                         a CA: host ports, read on the hosts themselves
#      GUID 0x2c903006e29b0 port 5: [SymbolErrorCounter == 65535] [LinkDownedCounter == 2]
#      GUID 0x2c903006e29b0 port ALL: [...]            AllPortSelect: the switch's ports summed
# A row's counters are PortCounters' (16, 8 and 4 bits; PortXmitWait 32) or, where the PMA has
# IsAdditionalPortCountersExtendedSupported, PortCountersExtended's 64-bit ones, printed with a human
# reading beside them: [SymbolErrorCounter == 1204 (1.204K)]. -r adds a "Link info:" line per port.
_IQE_HEADER = re.compile(r'^Errors for (?:0x([0-9a-fA-F]+) )?"(.*)"$')
_IQE_ROW = re.compile(r"^GUID 0x([0-9a-fA-F]+) port (\d+|ALL):((?: \[[^\]]*\])*)$")
_IQE_FIELD = re.compile(r"\[(\w+) == (\d+)( \([^)]*\))?\]")
_IQE_SUMMARY = re.compile(r"^## Summary: (\d+) nodes checked, (\d+) bad nodes found$")
_IQE_PORTS = re.compile(r"^##\s+(\d+) ports checked, (\d+) ports have errors beyond threshold$")
_IQE_FAILURES = re.compile(r"^##\s+(\d+) PMA query failures$")
_IQE_THRESHOLD = re.compile(r"\[(\w+) = (\d+)\]")
# IBWARN on stderr when a PMA query fails: "ibwarn: [pid] print_errors: IB_GSI_PORT_COUNTERS query failed
# on <node name>, Lid <lid> port <port>" (also for ClassPortInfo and PortCountersExtended)
_IQE_UNREAD = re.compile(r"query failed on (.*), Lid (\d+) port (\d+)\s*$")


def parse_ibqueryerrors(text: str, source: str, stderr: str = "") -> Reading:
    """An ibqueryerrors output (its own, without a mail's "> " quoting) as a Reading of its switch ports.

    CA blocks (host ports) and the AllPortSelect "port ALL" rows are read past. The summary says whether
    the output is whole (complete), which thresholds and suppressed counters hid what (unlisted_zero:
    the counters an unlisted port read zero: those at threshold 0 and not suppressed), and how many PMA
    queries failed; the warnings on stderr name the switch ports they failed on (unread). SwitchPortsError
    "SOURCE:LINE: why" for a line that is not ibqueryerrors'."""
    reading = Reading(_source(source, "ibqueryerrors", complete=False))
    current: str | None = None   # the switch of the block being read; "" in a CA's block
    ca_ports = failures = 0
    thresholds: dict[str, int] = {}
    suppressed: set[str] = set()
    unknown: set[str] = set()
    warnings = stderr.splitlines()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("Link info:"):  # -r: the port's link, not needed here
            continue
        m = _IQE_HEADER.match(line)
        if m:
            current = guid(m[1]) if m[1] else ""
            if current:
                reading.names[current] = m[2]
                reading.switches.add(current)
            continue
        m = _IQE_ROW.match(line)
        if m:
            if current is None:
                raise SwitchPortsError(f"{source}:{number}: a port row before any 'Errors for' line")
            if not current:
                ca_ports += 1
            elif m[2] != "ALL":
                reading.counters[(current, int(m[2]))] = _iqe_counters(m[3], unknown)
            continue
        m = _IQE_FAILURES.match(line)
        if m:
            failures += int(m[1])
        elif line.startswith("ibwarn:"):  # stderr captured into the same file (2>&1)
            warnings.append(line)
        elif not _summary_line(line, reading, thresholds, suppressed):
            raise SwitchPortsError(f"{source}:{number}: not an ibqueryerrors line: {line[:80]!r}")
    unread = [{"name": m[1], "lid": int(m[2]), "port": int(m[3])}
              for m in (_IQE_UNREAD.search(ln) for ln in warnings) if m]
    reading.source["unread"] = unread
    if not reading.source["complete"]:
        reading.problems.append(f"{source}: no summary (the output was cut short): ports it does not list "
                                f"are not known to read zero")
    elif failures > len(unread):  # failures it does not name: no unlisted port can be taken as zero
        reading.source["complete"] = False
        reading.problems.append(f"{source}: {failures} PMA queries failed, {len(unread)} of them named: "
                                f"ports it does not list are not known to read zero")
    else:
        reading.source["unlisted_zero"] = [name for tool, name in PMA_NAMES.items()
                                           if tool not in suppressed and not thresholds.get(tool)]
    if ca_ports:
        reading.notes.append(f"{source}: {ca_ports} CA port row(s) read past (host ports are read on the hosts "
                             f"themselves: acceptance counters snapshot)")
    if unknown:
        reading.notes.append(f"{source}: counters not read (not PMA error counters): {', '.join(sorted(unknown))}")
    return reading


def _iqe_counters(fields: str, unknown: set[str]) -> dict[str, dict]:
    out = {}
    for name, value, human in _IQE_FIELD.findall(fields):
        if name not in PMA_NAMES:
            unknown.add(name)
            continue
        sysname = PMA_NAMES[name]
        out[sysname] = {"value": int(value),
                        "width": EXTENDED_WIDTH if human else counters.width_of(sysname, "counters")}
    return out


def _summary_line(line: str, reading: Reading, thresholds: dict[str, int], suppressed: set[str]) -> bool:
    """Read one "## ..." summary line into the reading; False when the line is not one."""
    if _IQE_SUMMARY.match(line):
        reading.source["complete"] = True
        return True
    if line.startswith("## Thresholds:") or line == "## (null)":  # "(null)": no threshold file, all 0
        thresholds.update((k, int(v)) for k, v in _IQE_THRESHOLD.findall(line))
        return True
    if line.startswith("## Suppressed:"):
        suppressed.update(line.removeprefix("## Suppressed:").split())
        return True
    return bool(_IQE_PORTS.match(line))


# ---- perfquery ------------------------------------------------------------------------------------------
# infiniband-diags/perfquery.c: "# Port extended counters: Lid 2052 port 1 (CapMask: 0x5300 CapMask2:
# 0x0000002)" (-x) or "# Port counters: Lid 2052 port 1 (CapMask: 0x5300)", then "Name:.....value" lines.
_PQ_HEADER = re.compile(r"^# Port (extended )?counters: Lid (\d+) port (\d+) "
                        r"\(CapMask: 0x[0-9A-Fa-f]+(?: CapMask2: 0x([0-9A-Fa-f]+))?\)$")
_PQ_FIELD = re.compile(r"^(\w+):\.*(\d+|0x[0-9A-Fa-f]+)$")


def parse_perfquery(text: str, source: str, switch: str | None = None) -> Reading:
    """perfquery output, one block per port, as a Reading: the switch is `switch` (what the caller asked
    perfquery for), else "lid <n>" from the block's header. An extended block's error counters are 64-bit
    and count only where CapMask2 has IsAdditionalPortCountersExtendedSupported (0x2); a PortCounters
    block's are 16, 8 and 4 bits. Both blocks of one port: the 64-bit counters win. Blocks of all ports
    summed (port 255) are read past. SwitchPortsError "SOURCE:LINE: why" for any other line."""
    reading = Reading(_source(source, "perfquery"))
    key: tuple[str, int] | None = None
    block: str | None = None  # "extended" | "base": whose error counters the block holds; None: none
    holding: dict[tuple[str, int], int] = {}  # the ports whose blocks hold error counters: a header's line
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _PQ_HEADER.match(line)
        if m:
            key = (switch or f"lid {m[2]}", int(m[3]))
            reading.switches.add(key[0])
            block = ("base" if not m[1] else "extended" if int(m[4] or "0", 16) & ADDITIONAL_EXTENDED else None)
            if key[1] == ALL_PORTS:
                block = None
                continue
            reading.counters.setdefault(key, {})
            if block:
                holding.setdefault(key, number)
            else:
                reading.notes.append(f"{source}:{number}: {key[0]} port {key[1]}: no 64-bit error counters "
                                     f"(CapMask2 0x{m[4]}): `perfquery` without -x reads its PortCounters")
            continue
        m = _PQ_FIELD.match(line)
        if not m:
            raise SwitchPortsError(f"{source}:{number}: not a perfquery line: {line[:80]!r}")
        if key is None:
            raise SwitchPortsError(f"{source}:{number}: a counter before any '# Port ... counters' line")
        if block and m[1] in PMA_NAMES:
            name = PMA_NAMES[m[1]]
            width = EXTENDED_WIDTH if block == "extended" else counters.width_of(name, "counters")
            reading.counters[key] = _merge(reading.counters[key], {name: {"value": int(m[2], 0), "width": width}})
    for key, number in holding.items():
        if not reading.counters[key]:  # fields under other names (an old libibmad's SymbolErrors, ...)
            reading.notes.append(f"{source}:{number}: {key[0]} port {key[1]}: no error counter named as "
                                 f"libibmad names them (SymbolErrorCounter, LinkDownedCounter, ...): not read")
    return reading


def _merge(have: dict[str, dict], new: dict[str, dict]) -> dict[str, dict]:
    """One port's counters from two blocks: the wider reading of each counter wins (PortCountersExtended
    over PortCounters: it does not stop at 65535)."""
    out = dict(have)
    for name, c in new.items():
        if name not in out or (c["width"] or 0) > (out[name]["width"] or 0):
            out[name] = c
    return out


# ---- UFM ------------------------------------------------------------------------------------------------

def parse_ufm(data: Any, source: str) -> Reading:
    """UFM JSON as a Reading: a telemetry message ({"values": [{node_guid, port_num, Infiniband_*...}]}:
    counters per node and port, whose widths UFM does not say, so none is seen saturated; it does not say
    which nodes are switches) or the REST ports resource (a list of ports: switch names, and each cable's
    peer, seen from the switch's port or from a host's). SwitchPortsError naming the entry otherwise."""
    if isinstance(data, dict) and isinstance(data.get("values"), list):
        return _ufm_telemetry(data["values"], source)
    if isinstance(data, list) and all(isinstance(p, dict) and "guid" in p and "number" in p for p in data):
        return _ufm_ports(data, source)
    raise SwitchPortsError(f"{source}: neither UFM telemetry ({{\"values\": [...]}}) nor UFM's ports resource "
                           f"(a list of ports with guid and number)")


def _ufm_telemetry(values: list, source: str) -> Reading:
    reading = Reading(_source(source, "ufm"), switches=None)
    for i, v in enumerate(values):
        try:
            key = (guid(str(v["node_guid"])), int(v["port_num"]))
            got = {UFM_NAMES[k]: {"value": _count(x), "width": None} for k, x in v.items() if k in UFM_NAMES}
        except (KeyError, TypeError, ValueError) as e:
            raise SwitchPortsError(f"{source}: values[{i}]: not a port's counters ({type(e).__name__}: {e})") from None
        reading.counters[key] = got
    return reading


def _count(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x) or x < 0:
        raise ValueError(f"{x!r} is not a count")
    return int(x)


def _ufm_ports(ports: list[dict], source: str) -> Reading:
    reading = Reading(_source(source, "ufm"))
    for i, p in enumerate(ports):
        try:
            _ufm_port(p, reading)
        except (TypeError, ValueError) as e:
            raise SwitchPortsError(f"{source}: [{i}]: not a port ({type(e).__name__}: {e})") from None
    return reading


def _ufm_port(p: Mapping[str, Any], reading: Reading) -> None:
    """One port of UFM's ports resource into the reading: a switch's port names its switch and the peer
    at the other end of its cable; a host's port cabled to a switch port names that switch port's peer."""
    own = guid(str(p["guid"]))
    peer = guid(str(p["peer_guid"])) if p.get("peer_guid") and p.get("peer_node_name") else None
    peer_port = str(p.get("peer_port_dname") or "")
    if str(p.get("description", "")).startswith("Switch"):  # "Switch IB Port"; a host's is "Computer IB Port"
        reading.switches.add(own)
        reading.names.setdefault(own, str(p.get("system_name") or own))
        if peer:
            reading.peers[(own, int(p["number"]))] = {"name": str(p["peer_node_name"]), "port": peer_port,
                                                      "guid": peer}
    elif peer and peer_port.isdigit():  # a switch port is a number; a host's is a name ("HCA-2/1")
        reading.switches.add(peer)
        reading.names.setdefault(peer, str(p["peer_node_name"]))
        reading.peers[(peer, int(peer_port))] = {"name": str(p.get("system_name") or own),
                                                 "port": str(p.get("dname") or ""), "guid": own}


# ---- files ----------------------------------------------------------------------------------------------

def read_files(paths: Iterable[str | os.PathLike]) -> list[Reading]:
    """Saved outputs (ibqueryerrors, perfquery, UFM JSON), each by its format. Each file's source is
    "<tool> #<k>" (the k-th file of that tool), so that the same files in the same order before and
    after a window are the same sources. SwitchPortsError for a file that cannot be read or is no format."""
    readings, seen = [], {}
    for path in paths:
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise SwitchPortsError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
        tool = ("ufm" if text.lstrip().startswith(("{", "[")) else
                "perfquery" if any(ln.startswith("# Port ") for ln in text.splitlines()) else "ibqueryerrors")
        seen[tool] = seen.get(tool, 0) + 1
        if tool == "ufm":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise SwitchPortsError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None
            reading = parse_ufm(data, str(path))
        elif tool == "perfquery":
            reading = parse_perfquery(text, str(path))
        else:
            reading = parse_ibqueryerrors(text, str(path))
        reading.source["id"] = f"{tool} #{seen[tool]}"
        readings.append(reading)
    return readings


# ---- the tools, run here --------------------------------------------------------------------------------



def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "no message")


def fabric_ports(root: str | os.PathLike | None = None) -> list[tuple[str, int]]:
    """This host's ACTIVE InfiniBand ports (device, port): where walks of the fabric start from."""
    return [(p.device, p.port) for p in sysfs_ports(root)
            if p.link_layer == "InfiniBand" and "ACTIVE" in (p.state or "")]


def walk(cas: Iterable[tuple[str, int]] | None = None, timeout: float = WALK_TIMEOUT,
         root: str | os.PathLike | None = None) -> list[Reading]:
    """One ibqueryerrors walk from each host port in `cas` (default: every ACTIVE InfiniBand port of this
    host), all at once: a rail-optimized fabric is a subnet per rail, each walked from its own port.
    A walk that cannot run is a problem of its Reading, never an exception. ACCEPTANCE_IBQUERYERRORS
    replaces the command (e.g. "sudo -n ibqueryerrors")."""
    cas = list(cas) if cas is not None else fabric_ports(root)
    if not cas:
        return [Reading(_source("ibqueryerrors", "ibqueryerrors", complete=False),
                        problems=["no ACTIVE InfiniBand port on this host to walk the fabric from: switch ports "
                                  "were not read"])]
    with ThreadPoolExecutor(max_workers=len(cas)) as pool:
        return list(pool.map(lambda ca: _walk_one(ca, timeout), cas))


def _walk_one(ca: tuple[str, int], timeout: float) -> Reading:
    command = os.environ.get(ENV_IBQUERYERRORS) or "ibqueryerrors"
    source = f"ibqueryerrors -C {ca[0]} -P {ca[1]}"
    # --threshold-file /dev/null: every counter above 0 is listed, whatever the site's error_thresholds
    argv = [*shlex.split(command), "-C", ca[0], "-P", str(ca[1]), "--switch", "--threshold-file", os.devnull]
    started = time.monotonic()
    failed = Reading(_source(source, "ibqueryerrors", complete=False))
    try:
        rc, out, err = run_bounded(argv, timeout)
    except ToolMissing as e:
        failed.problems.append(f"{e}: install infiniband-diags (rdma-core), or set {ENV_IBQUERYERRORS}; "
                               f"switch ports behind {ca[0]} port {ca[1]} were not read")
        return failed
    except ToolError as e:
        failed.problems.append(f"{e}; switch ports behind {ca[0]} port {ca[1]} were not read")
        return failed
    if rc not in (0, 1):  # 1: it found ports with errors, which is what it is asked for
        failed.problems.append(f"`{shlex.join(argv)}` exited {rc}: {_first_line(err)} ({ACCESS_HINT}); switch "
                               f"ports behind {ca[0]} port {ca[1]} were not read")
        return failed
    try:
        reading = parse_ibqueryerrors(out, source, err)
    except SwitchPortsError as e:
        failed.problems.append(f"{e}; switch ports behind {ca[0]} port {ca[1]} were not read")
        return failed
    reading.source["seconds"] = round(time.monotonic() - started, 3)
    return reading


def query_ports(targets: Iterable[tuple[str, int]], ca: tuple[str, int] | None = None,
                timeout: float = PERFQUERY_TIMEOUT) -> list[Reading]:
    """perfquery of each (switch, port), one after another: the switch a LID ("1187") or a node GUID
    ("0x..."), asked from host port `ca` (default: perfquery's). `perfquery -x`, then plain `perfquery`
    where that answer has no error counters (a switch without 64-bit ones). ACCEPTANCE_PERFQUERY replaces
    the command. Meant for a few ports (a process and a few MADs each: tens of milliseconds); a whole
    fabric is ibqueryerrors' walk. A port that cannot be read is a problem, never an exception."""
    command = os.environ.get(ENV_PERFQUERY) or "perfquery"
    base = [*shlex.split(command), *(["-C", ca[0], "-P", str(ca[1])] if ca else [])]
    reading = Reading(_source("perfquery", "perfquery"))
    for dest, port in targets:
        is_guid = dest.lower().startswith("0x")
        switch = guid(dest) if is_guid else f"lid {int(dest)}"
        reading.switches.add(switch)
        got: dict[str, dict] = {}
        why: list[str] = []
        for extended in (True, False):
            argv = [*base, *(["-x"] if extended else []), *(["-G"] if is_guid else []), dest, str(port)]
            try:
                rc, out, err = run_bounded(argv, timeout)
                if rc != 0:
                    raise ToolError(f"`{shlex.join(argv)}` exited {rc}: {_first_line(err)}")
                got = _merge(got, parse_perfquery(out, shlex.join(argv), switch).counters.get((switch, port), {}))
            except ToolMissing as e:
                reading.problems.append(f"{e}: install infiniband-diags (rdma-core), or set {ENV_PERFQUERY}; "
                                        f"switch ports were not read")
                return [reading]
            except (ToolError, SwitchPortsError) as e:
                why.append(str(e))
            if got:
                break
        if got:
            reading.counters[(switch, port)] = got
        else:
            reading.problems.append(f"{switch} port {port} not read: "
                                    f"{'; '.join(why) or 'no error counters in either answer'} ({ACCESS_HINT})")
    return [reading]


# ---- snapshots ------------------------------------------------------------------------------------------

def snapshot(readings: Iterable[Reading], epoch: float | None = None) -> dict[str, Any]:
    """The readings of one moment as one JSON-able snapshot (format "acceptance-switchports/1"): ports
    [{switch, name, port, source, peer, counters}], sources, problems, notes. A port two sources read (one
    subnet walked from two host ports) is kept once. Ports of a source that cannot tell switches from hosts
    (UFM telemetry) are kept when UFM's ports resource names their node a switch, or all of them, with a
    note, without it."""
    readings = list(readings)
    names = {k: v for r in readings for k, v in r.names.items()}
    peers = {k: v for r in readings for k, v in r.peers.items()}
    # every switch of the fabric: UFM's ports resource lists them all (a walk names only those with errors)
    known = set().union(*(r.switches for r in readings if r.switches is not None and r.source["tool"] == "ufm"))
    problems = [p for r in readings for p in r.problems]
    notes = [n for r in readings for n in r.notes]
    ports: dict[tuple[str, int], dict] = {}
    twice = dropped = 0
    for r in readings:
        for key, got in r.counters.items():
            if r.switches is None and known and key[0] not in known:
                dropped += 1
                continue
            if key in ports:
                twice += 1
                continue
            ports[key] = {"switch": key[0], "name": names.get(key[0]), "port": key[1], "source": r.source["id"],
                          "peer": peers.get(key), "counters": got}
    if any(r.switches is None for r in readings) and not known:
        notes.append("UFM telemetry does not say which nodes are switches: every port it lists is kept (give UFM's "
                     "ports resource too, to keep the switches' ports only and name them)")
    if dropped:
        notes.append(f"{dropped} port(s) of nodes no source names a switch were left out (host ports are read on "
                     f"the hosts themselves)")
    if twice:
        notes.append(f"{twice} switch port(s) were read by more than one walk: one subnet walked from several host "
                     f"ports (one --ca per subnet reads it once)")
    return {"format": FORMAT, "host": node_name(), "time": utc_now(),
            "epoch": time.time() if epoch is None else epoch, "sources": [r.source for r in readings],
            "ports": sorted(ports.values(), key=lambda p: (p["switch"], p["port"])), "problems": problems,
            "notes": notes}


def check_snapshot(data: Any) -> str | None:
    """Why `data` is not a switch ports snapshot this version reads, or None when it is."""
    if not isinstance(data, dict) or "format" not in data:
        return 'not a switch ports snapshot (no "format" key; write one with `acceptance counters switches snapshot`)'
    if data["format"] != FORMAT:
        return f"unsupported snapshot format {data['format']!r} (this version reads {FORMAT!r})"
    for key in ("epoch", "sources", "ports"):
        if key not in data:
            return f'switch ports snapshot without "{key}"'
    return None


def load_snapshot(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a snapshot file; SwitchPortsError naming the file and the reason."""
    try:
        data = read_json(path)
    except ValueError as e:
        raise SwitchPortsError(str(e)) from None
    why = check_snapshot(data)
    if why:
        raise SwitchPortsError(f"{path}: {why}")
    return data


def save(snap: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write a snapshot atomically (a reader never sees half of one); OSError when it cannot."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(snap, indent=1) + "\n")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def take(run_dir: str | os.PathLike, when: str, cas: Iterable[tuple[str, int]] | None = None,
         timeout: float = WALK_TIMEOUT) -> dict[str, Any]:
    """Walk the fabric now and keep the snapshot in the run folder as its `when` ("before" | "after")
    snapshot, which the run's analysis diffs. Never raises for what the fabric or host lacks (problems)."""
    snap = snapshot(walk(cas, timeout))
    save(snap, Path(run_dir) / WINDOW_FILES[when])
    return snap


def load_window(run_dir: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A run folder's before and after snapshots, or None when it does not have both."""
    paths = [Path(run_dir) / WINDOW_FILES[w] for w in ("before", "after")]
    if not all(p.is_file() for p in paths):
        return None
    return load_snapshot(paths[0]), load_snapshot(paths[1])


def summary(snap: Mapping[str, Any]) -> list[str]:
    """What a snapshot read, in lines for a person: a headline, then each problem and note."""
    ports = snap.get("ports") or []
    switches = len({p["switch"] for p in ports})
    seconds = [s["seconds"] for s in snap.get("sources") or [] if s.get("seconds") is not None]
    took = f" in {max(seconds):,.1f} s" if seconds else ""
    lines = [f"switch ports: {len(ports)} port(s) of {switches} switch(es) read{took} from "
             f"{len(snap.get('sources') or [])} source(s), {len(snap.get('problems') or [])} problem(s)"]
    lines += [f"  problem: {p}" for p in snap.get("problems") or []]
    lines += [f"  note: {n}" for n in snap.get("notes") or []]
    return lines


# ---- diff -----------------------------------------------------------------------------------------------

def port_facts(*snaps: Mapping[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """(switch, port) -> {"name", "peer"} from the snapshots, the later ones winning where they say more."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for snap in snaps:
        for p in snap["ports"]:
            had = out.setdefault((p["switch"], p["port"]), {"name": None, "peer": None})
            had["name"] = p.get("name") or had["name"]
            had["peer"] = p.get("peer") or had["peer"]
    return out


def _zero_read(snap: Mapping[str, Any], source_id: str, name: str | None, port: int) -> set[str]:
    """The counters `snap`'s source `source_id` read as zero at a switch port it did not list: none unless
    it ran to its end and did not fail on that port (an ibqueryerrors walk lists only what is not zero)."""
    src = next((s for s in snap["sources"] if s.get("id") == source_id), None)
    if not src or not src.get("complete"):
        return set()
    if any(u.get("name") == name and u.get("port") in (port, ALL_PORTS) for u in src.get("unread") or []):
        return set()
    return set(src.get("unlisted_zero") or ())


def _filled(port: Mapping[str, Any] | None, other: Mapping[str, Any], snap: Mapping[str, Any]
            ) -> dict[str, dict] | None:
    """A port's counters in `snap`, with those it did not list where `snap` read them as zero (the width of
    `other`'s reading of the same counter); None when it is not there and not known to read zero."""
    have = dict(port["counters"]) if port else {}
    zero = _zero_read(snap, (port or other)["source"], other.get("name"), other["port"])
    for name, c in other["counters"].items():
        if name not in have and name in zero:
            have[name] = {"value": 0, "width": c.get("width")}
    return have if port or have else None


def _as_host(snap: Mapping[str, Any], ports: Mapping[tuple[str, int], dict[str, dict]]) -> dict[str, Any]:
    """Switch ports in the shape of a host counters snapshot, their counters PMA counters (which stop at
    all ones), so that acceptance.host.counters.diff judges them as it judges a host's."""
    return {"format": counters.FORMAT, "node": FABRIC, "epoch": snap["epoch"], "problems": snap.get("problems") or [],
            "notes": snap.get("notes") or [],
            "ports": [{"device": switch, "port": port, "counters": {
                name: {"value": c["value"], "source": "counters", "width": c.get("width")} for name, c in got.items()}}
                for (switch, port), got in ports.items()]}


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> counters.DiffResult:
    """What changed on every switch port between two snapshots: the host's Deltas (device: the switch,
    port: its port), by acceptance.host.counters.diff. A port or counter one snapshot does not list reads
    zero there when that snapshot's source read it as zero (ibqueryerrors' walk lists only ports with
    errors): a port that appears with errors rose from zero, one that disappears was cleared. Otherwise
    it is not compared, and a note says so. SwitchPortsError for a snapshot this version does not read."""
    for label, snap in (("before", before), ("after", after)):
        why = check_snapshot(snap)
        if why:
            raise SwitchPortsError(f"{label}: {why}")
    old = {(p["switch"], p["port"]): p for p in before["ports"]}
    new = {(p["switch"], p["port"]): p for p in after["ports"]}
    was, now, notes = {}, {}, []
    for key in sorted(old.keys() | new.keys()):
        b, a = old.get(key), new.get(key)
        got_b = _filled(b, a, before) if a else b["counters"]
        got_a = _filled(a, b, after) if b else a["counters"]
        if got_b is None or got_a is None:
            side, src = ("before", a["source"]) if got_b is None else ("after", b["source"])
            notes.append(f"{key[0]} port {key[1]}: not in the {side} snapshot, whose {src!r} did not read it "
                         f"(a walk that failed or was cut short, or another source): not compared")
            continue
        was[key], now[key] = got_b, got_a
    result = counters.diff(_as_host(before, was), _as_host(after, now))
    return counters.DiffResult(result, notes + result.notes, result.node, result.seconds)
