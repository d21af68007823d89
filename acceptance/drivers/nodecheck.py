"""The node check: this node's health in seconds, without MPI, for Slurm's HealthCheckProgram and prolog.

Each check reads this node only and answers an Outcome: pass, fail or warn with one Problem per part
(a port, a GPU, a PCIe function), skip where its hardware is absent (with why), or error where it
could not run (a tool missing, its own failure, the deadline). The bounds are the profile's: the port
checks read [preflight] as the preflight suite does, the counters [counters], the rest [node_check].

What a check keeps between runs (the counters' snapshot, the kernel log's cursor, Xid events that
still call for a reset or a reboot) comes in as `previous` and leaves as Outcome.state; the command
(acceptance.cli.nodecheck) stores it per node. An Xid that calls for a GPU reset, a reboot or an RMA
keeps failing the check until the node rebooted (a new boot id) or an operator says it was dealt
with (`node-check --forget xid`): a log line seen once must not be forgotten at the next check.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..host import counters as port_counters
from ..host import nodefacts, xid
from ..host.preflight import UNLIMITED, memlock_limit
from ..rules import judge
from ..rules.counter_verdicts import Limits, counter_verdict, problem as counter_problem
from ..rules.profile import NODE_CHECKS, Profile

STATUSES = ("pass", "warn", "skip", "error", "fail")
DEADLINE_MAX_S = 30.0


@dataclass(frozen=True)
class Problem:
    part: str                 # "mlx5_1 port 1 (rail 1)", "GPU 0000:18:00.0", "rail1"
    detail: str               # what is wrong with it, and by how much
    severity: str = "fail"    # fail | warn
    action: str = "drain"     # what the node needs (Xid's catalog: drain, reset_gpu, reboot, rma)


@dataclass
class Outcome:
    check: str
    status: str                                   # STATUSES
    problems: list[Problem] = field(default_factory=list)
    note: str = ""                                # skip / error: why; pass: what was seen
    seconds: float = 0.0
    state: dict | None = None                     # kept for the next check; None: keep the old one

    def to_json(self) -> dict:
        return {"check": self.check, "status": self.status, "note": self.note, "seconds": round(self.seconds, 3),
                "problems": [asdict(p) for p in self.problems]}


@dataclass(frozen=True)
class Context:
    profile: Profile
    root: Path               # sysfs root
    node: str
    previous: dict           # this check's state from the last run ({} the first time)


# ---- a node's values judged: shared with the preflight suite (acceptance.drivers.preflight) ------

def fails(name: str, value, profile: Profile) -> bool:
    """Whether the judge fails this preflight value against the profile (the preflight suite's bound;
    a bound the profile leaves unset fails nothing)."""
    return judge.judge_one("preflight", name, value, profile, peers=False)[1] == "fail"


def port_slow(port: nodefacts.Port, profile: Profile) -> bool:
    """An active port below preflight.port_rate, or whose rate does not parse while the profile sets one."""
    return profile.get("preflight.port_rate") is not None and (port.gbps is None or fails("port_rate", port.gbps, profile))


def mtu_short(mtu: int | None, profile: Profile) -> bool:
    """A known MTU below preflight.mtu (an unknown one is the caller's to name)."""
    return mtu is not None and fails("port_mtu", mtu, profile)


RDMA_KEYS = ("preflight.rdma_devices", "preflight.port_rate", "preflight.mtu", "preflight.link_layer")


def required(profile: Profile, *keys: str) -> str | None:
    """"preflight.port_rate = 400 Gbit/s" for the first of `keys` the profile sets, else None: why a
    node without the data fails instead of skipping."""
    for key in keys:
        value = profile.get(key)
        if value is not None:
            return f"{key} = {value:g}" if isinstance(value, float) else f"{key} = {value}"
    return None


def _judged(check: str, problems: list[Problem], note: str = "", state: dict | None = None) -> Outcome:
    status = ("fail" if any(p.severity == "fail" for p in problems)
              else "warn" if problems else "pass")
    return Outcome(check, status, problems, note, state=state)


def _skip(check: str, why: str, state: dict | None = None) -> Outcome:
    return Outcome(check, "skip", note=why, state=state)


def _error(check: str, why: str) -> Outcome:
    return Outcome(check, "error", note=why)


# ---- ports ------------------------------------------------------------------------------------

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
    rails = ctx.profile.get("topology.rails") or ctx.profile.get("run.ranks_per_node")
    minimum = ctx.profile.get("preflight.mtu")
    problems, seen = [], []
    for rail in range(rails):
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
        elif mtu_short(mtu, ctx.profile):
            problems.append(Problem(part, f"MTU {mtu} is below the profile's {minimum}"))
        else:
            seen.append(name)
    return _judged("ports", problems, f"{len(seen)} of {rails} rail interfaces up" if seen else "")


def check_ports(ctx: Context) -> Outcome:
    """Every rail port ACTIVE / LinkUp, at the profile's rate, MTU and link layer ([preflight])."""
    pattern = ctx.profile.get("node_check.port_netdev")
    if pattern:
        return _netdev_ports(ctx, pattern)
    needs = required(ctx.profile, *RDMA_KEYS)
    mapped = ctx.profile.get("topology.nic_rails")
    only = list(mapped) if mapped else None
    # ibv_devinfo is asked for an InfiniBand MTU only when the profile bounds it.
    devinfo = None if ctx.profile.get("preflight.mtu") is not None else nodefacts.Unavailable("not asked")
    try:
        ports = nodefacts.read_ports(ctx.root, devinfo, only)
    except nodefacts.Unavailable as e:
        if needs:
            return _judged("ports", [Problem("RDMA", f"{e.reason} (the profile requires it: {needs})")])
        return _skip("ports", e.reason)
    want = ctx.profile.get("preflight.rdma_devices")
    rate, mtu, layer = (ctx.profile.get(k) for k in ("preflight.port_rate", "preflight.mtu", "preflight.link_layer"))
    problems = []
    devices = sorted({p.device for p in ports})
    if fails("rdma_devices", len(devices), ctx.profile):
        problems.append(Problem("RDMA", f"{len(devices)} RDMA devices ({', '.join(devices)}), the profile expects {want}"))
    for p in ports:
        part = p.label + (f" (rail {mapped[p.device]})" if mapped and p.device in mapped else "")
        if not p.up:
            problems.append(Problem(part, f"{p.state or '?'} / {p.phys_state or '?'}"))
            continue
        if port_slow(p, ctx.profile):
            problems.append(Problem(part, f"rate {p.rate or '?'} is below the profile's {rate:g} Gbit/s"))
        if layer is not None and p.link_layer != layer:
            problems.append(Problem(part, f"link layer {p.link_layer}, the profile expects {layer}"))
        if mtu is not None and (p.mtu is None or mtu_short(p.mtu, ctx.profile)):
            problems.append(Problem(part, p.mtu_reason if p.mtu is None else f"MTU {p.mtu} is below the profile's {mtu}"))
    up = sum(p.up for p in ports)
    return _judged("ports", problems, f"{up} of {len(ports)} ports ACTIVE")


# ---- port counters since the last check -------------------------------------------------------

def check_counters(ctx: Context) -> Outcome:
    """Port error counters since the last check, judged by the profile's [counters] as a suite's window."""
    mapped = ctx.profile.get("topology.nic_rails")
    snap = port_counters.snapshot(ctx.root, devices=list(mapped) if mapped else None, node=ctx.node)
    if not snap["ports"]:
        return _skip("counters", "; ".join(snap["problems"]) or "no RDMA ports")
    state = {"snapshot": snap}
    before = ctx.previous.get("snapshot")
    if not before or port_counters.check_snapshot(before) or before.get("node") != ctx.node:
        return Outcome("counters", "pass", note=f"first check: {len(snap['ports'])} ports' counters kept "
                                                 f"for the next", state=state)
    deltas = port_counters.diff(before, snap)
    limits = Limits.from_profile(ctx.profile)
    problems = []
    for d in deltas:
        verdict = counter_verdict(d, limits)
        if verdict in ("fail", "warn"):
            problems.append(Problem(f"{d.device} port {d.port}", counter_problem(d, limits, verdict), verdict))
    return _judged("counters", problems, f"{len(snap['ports'])} ports over {deltas.seconds:.0f} s", state)


# ---- PCIe -------------------------------------------------------------------------------------

def check_pcie(ctx: Context) -> Outcome:
    """Every RDMA NIC's and GPU's PCIe link at the width and speed it and its slot can train to."""
    mapped = ctx.profile.get("topology.nic_rails")
    try:
        links = nodefacts.pcie_links(ctx.root, list(mapped) if mapped else None)
    except nodefacts.Unavailable as e:
        return _skip("pcie", e.reason)
    if not links:
        return _skip("pcie", "no RDMA NIC or NVIDIA GPU with a PCIe link in sysfs")
    return _judged("pcie", [Problem(link.part, link.describe()) for link in links if link.short()],
                   f"{len(links)} links")


# ---- memlock, GPUDirect -----------------------------------------------------------------------

def check_memlock(ctx: Context) -> Outcome:
    minimum = ctx.profile.get("preflight.memlock_min")
    limit = memlock_limit()
    if not minimum:
        return _skip("memlock", "the profile sets no preflight.memlock_min")
    short = fails("memlock", None if limit == UNLIMITED else limit, ctx.profile)
    detail = (f"RLIMIT_MEMLOCK is {limit} bytes, the profile needs {minimum}: RDMA registration fails "
              f"(limits.conf, and slurmd's LimitMEMLOCK=infinity)")
    return _judged("memlock", [Problem("memlock", detail)] if short else [], f"RLIMIT_MEMLOCK {limit}")


def check_gpudirect(ctx: Context) -> Outcome:
    if not ctx.profile.get("preflight.gpudirect"):
        return _skip("gpudirect", "the profile sets preflight.gpudirect = false")
    gpus = nodefacts.gpu_count(ctx.root)
    if not gpus:
        return _skip("gpudirect", "no NVIDIA GPU on this node")
    peer = nodefacts.peermem(ctx.root)
    dmabuf = None
    if not peer:
        try:
            dmabuf = nodefacts.dmabuf_supported()
        except nodefacts.Unavailable as e:
            dmabuf = e
    usable, how = nodefacts.gpudirect_path(peer, dmabuf)
    if not usable and isinstance(dmabuf, nodefacts.Unavailable):
        return _error("gpudirect", how)
    return _judged("gpudirect", [] if usable else [Problem("GPUDirect RDMA", how)], how)


# ---- GPUs through NVML ------------------------------------------------------------------------

def _nvml():
    try:
        import pynvml
    except ImportError as e:
        raise nodefacts.Unavailable(f"nvidia-ml-py is not installed ({e}); pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        raise nodefacts.Unavailable(f"NVML: {e}") from None
    return pynvml


def _optional(call, *args):
    """An NVML query a GPU may not support (NOT_SUPPORTED on older parts): its value or None."""
    try:
        return call(*args)
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and its siblings
        return None


def gpu_problems(nvml, index: int, margin: float) -> tuple[str, list[Problem]]:
    """(the GPU's PCI address, its problems) from NVML: uncorrectable ECC errors since the driver
    loaded, rows waiting for a remap (a GPU reset) or a remap that failed (RMA), retired pages
    waiting (pre-Ampere), clocks slowed by the hardware (thermal, power brake), temperature."""
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = nvml.nvmlDeviceGetPciInfo(h).busId
    pci = pci.decode() if isinstance(pci, bytes) else str(pci)
    part, out = f"GPU {pci}", []
    ecc = _optional(nvml.nvmlDeviceGetTotalEccErrors, h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    nvml.NVML_VOLATILE_ECC)
    if ecc:
        out.append(Problem(part, f"{ecc} uncorrectable ECC errors since the driver loaded", action="reset_gpu"))
    rows = _optional(nvml.nvmlDeviceGetRemappedRows, h)
    if rows is not None:
        _corr, unc, pending, failed = rows
        if failed:
            out.append(Problem(part, "row remapping failed: no spare rows left", action="rma"))
        elif pending:
            out.append(Problem(part, f"row remap pending ({unc} uncorrectable rows): reset the GPU to apply it",
                               action="reset_gpu"))
    retired = _optional(nvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
    if retired:
        out.append(Problem(part, "retired pages pending: reset the GPU to retire them", action="reset_gpu"))
    reasons = _optional(nvml.nvmlDeviceGetCurrentClocksEventReasons, h)
    if reasons is None:
        reasons = _optional(nvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
    hw = {"hardware slowdown": nvml.nvmlClocksThrottleReasonHwSlowdown,
          "hardware thermal slowdown": nvml.nvmlClocksThrottleReasonHwThermalSlowdown,
          "hardware power brake": nvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown}
    slow = [name for name, bit in hw.items() if reasons and reasons & bit]
    if slow:
        out.append(Problem(part, f"clocks held down: {', '.join(slow)}"))
    if reasons and reasons & nvml.nvmlClocksThrottleReasonSwThermalSlowdown:
        out.append(Problem(part, "clocks held down: software thermal slowdown", severity="warn"))
    temp = _optional(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
    limit = _optional(nvml.nvmlDeviceGetTemperatureThreshold, h, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    if temp is not None and limit:
        verdict = judge.Headroom(margin).verdict(temp, limit)
        if verdict == "fail":
            out.append(Problem(part, f"{temp} C, at its slowdown temperature {limit} C"))
        elif verdict == "warn":
            out.append(Problem(part, f"{temp} C, within {margin:g} C of its slowdown temperature {limit} C",
                               severity="warn"))
    return pci, out


def check_gpus(ctx: Context, nvml=None) -> Outcome:
    want = ctx.profile.get("preflight.gpus_per_node")
    try:
        present = nodefacts.gpu_count(ctx.root)
    except nodefacts.Unavailable as e:
        present, why = 0, e.reason
    else:
        why = "no NVIDIA GPU on this node (no PCI function of vendor 0x10de, class 0x03xx in sysfs)"
    if not present:
        if want:
            return _judged("gpus", [Problem("GPUs", f"{why}; the profile expects {want}")])
        return _skip("gpus", why)
    try:
        nvml = nvml or _nvml()
    except nodefacts.Unavailable as e:
        return _error("gpus", f"{present} NVIDIA GPUs in sysfs, but {e.reason}")
    count = nvml.nvmlDeviceGetCount()
    problems = []
    if count != present or (want and fails("gpus", count, ctx.profile)):
        expected = f"the profile expects {want}, " if want else ""
        problems.append(Problem("GPUs", f"NVML sees {count} GPUs, {expected}sysfs lists {present}"))
    margin = ctx.profile.get("node_check.gpu_temperature_margin")
    for i in range(count):
        problems += gpu_problems(nvml, i, margin)[1]
    return _judged("gpus", problems, f"{count} GPUs")


# ---- Xid --------------------------------------------------------------------------------------

STICKY = ("reset_gpu", "reboot", "rma")  # what a later quiet log does not undo


def check_xid(ctx: Context, text: str | None = None, boot_id: str | None = None) -> Outcome:
    """Xid events since the last check; those calling for a reset, a reboot or an RMA stay until a reboot."""
    if not nodefacts.gpu_count(ctx.root):
        return _skip("xid", "no NVIDIA GPU on this node")
    boot_id = xid.read_boot_id() if boot_id is None else boot_id
    cursor = xid.Cursor.loads(ctx.previous.get("cursor", ""))
    try:
        text = xid.read_kernel_log() if text is None else text
    except xid.KernelLogError as e:
        return _error("xid", f"kernel log unreadable: {e}")
    events, cursor = xid.new_events(text, cursor, boot_id)
    pending = [p for p in ctx.previous.get("pending", []) if p.get("boot_id") == boot_id or not boot_id]
    for e in events:
        if e.action in STICKY or e.action == "drain":
            pending.append({"boot_id": boot_id, "pci": e.pci, "code": e.code, "action": e.action,
                            "line": xid.summarize([e]).lines[0], "sticky": e.action in STICKY})
    problems = [Problem(f"GPU {p['pci']}", p["line"].split(": ", 1)[1] if ": " in p["line"] else p["line"],
                        action=p["action"]) for p in pending]
    # A drain-level Xid fails this check once; a reset, reboot or RMA until it was done.
    state = {"cursor": cursor.dumps(), "pending": [p for p in pending if p["sticky"]]}
    seen = f"{len(events)} new Xid events" if events else "no new Xid events"
    return _judged("xid", problems, seen, state)


CHECKS: dict[str, Callable[[Context], Outcome]] = {
    "ports": check_ports, "counters": check_counters, "pcie": check_pcie, "memlock": check_memlock,
    "gpudirect": check_gpudirect, "gpus": check_gpus, "xid": check_xid,
}
assert tuple(CHECKS) == NODE_CHECKS, "acceptance.rules.profile.NODE_CHECKS names the same checks, in order"


def run_checks(profile: Profile, root: Path, node: str, previous: dict, names: list[str],
               end: float) -> list[Outcome]:
    """Every named check at once, each in its own thread; one still running at `end` (time.monotonic())
    is an error (a wedged driver, a hung command): the node check always answers in time."""
    outcomes: dict[str, Outcome] = {}

    def one(name: str) -> None:
        t0 = time.monotonic()
        try:
            out = CHECKS[name](Context(profile, root, node, previous.get(name) or {}))
        except Exception as e:  # noqa: BLE001 - a check's own failure is "could not run", never a fail
            out = _error(name, f"{type(e).__name__}: {e}")
        out.seconds = time.monotonic() - t0
        outcomes[name] = out

    threads = [threading.Thread(target=one, args=(n,), name=f"node-check {n}", daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    deadline = profile.get("node_check.deadline")
    return [outcomes.get(n) or Outcome(n, "error", note=f"did not finish within the deadline ({deadline:g} s, "
                                                        f"node_check.deadline)", seconds=deadline)
            for n in names]


def verdict(outcomes: list[Outcome]) -> str:
    """fail when a check failed; else error when one could not run; else pass (warnings included)."""
    found = {o.status for o in outcomes}
    return "fail" if "fail" in found else "error" if "error" in found else "pass"
