"""The `nccl` engine: all-reduce and all-to-all on GPUs through cupy.cuda.nccl.

Same collective interface as the `mpi` engine (NAME, available, configure,
allreduce, alltoall -> mpi.Collective), on cupy device memory through an NCCL
communicator built for the given mpi4py communicator: comm rank 0 calls
ncclGetUniqueId, `comm.bcast` hands the id to every rank, each rank calls
ncclCommInitRank with its comm rank. The NCCL communicator is cached on the
mpi4py communicator (an MPI attribute: freed with it) and destroyed at exit.

What is measured and checked is exactly what the mpi engine measures and
checks (acceptance/engines/mpi.py): the same float64 inputs made of small
integers, the same byte counts (nccl-tests' "size"), the same exact comparison
with zero tolerance, and the same per-iteration slowest rank on comm rank 0
(mpi.slowest, MPI.MAX). All-to-all is nccl-tests' alltoall: one ncclSend and
one ncclRecv per peer (itself included) inside ncclGroupStart/ncclGroupEnd.

Timing: every iteration is bracketed by a pair of CUDA events recorded on the
engine's stream, start event - collective - end event, all enqueued
back-to-back; the elapsed time between the two events (cudaEventElapsedTime,
ms, resolution about 0.5 us) is that iteration's time in ns. The events are
timestamped by the GPU when the stream reaches them, so the host (Python,
the launch calls) is not in the timed path; the host reads the times once,
after the last end event has completed. As on the mpi engine, an iteration
includes waiting for the slowest peer, which is what the MPI.MAX over ranks
then reports.

Data and check functions take an array module `xp` (numpy or cupy), so the
tests run them on numpy where there is no GPU and compare them with mpi.py's.

GPUDirect RDMA detection: NCCL logs, at NCCL_DEBUG=INFO, every channel
connection it makes and whether the network side reads/writes GPU memory
directly (`[receive] via NET/IB/2/GDRDMA`) or stages through host memory
(`via NET/IB/2`). capture_nccl_debug() makes NCCL write that to per-process
files, net_paths() / parse_nccl_debug() read it back, gdr_problems() says what
is wrong, per NIC and rail.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from mpi4py import MPI

from .collective_data import ALLREDUCE, ALLTOALL, Buffers
from .mpi import Collective, checked

NAME = "nccl"
# What this engine can do (acceptance.engines.contract.OPERATIONS): the collectives, on GPUs.
OFFERS = frozenset(("allreduce", "alltoall"))

# NCCL_DEBUG_SUBSYS the engine needs: INIT carries the channel/transport lines and
# "Using network", NET the NIC list and the GPU Direct RDMA decisions.
DEBUG_SUBSYS = ("INIT", "NET")
LOG_PATTERN = "nccl-%h-%p.log"  # NCCL expands %h (host name) and %p (pid)
_LOG_FILE = re.compile(r"^nccl-(?P<host>.+)-(?P<pid>\d+)\.log$")


# ---- availability and device choice ------------------------------------------


def _cupy():
    import cupy

    return cupy


CUPY_HINT = "pip install 'acceptance[gpu]'"


def nccl_version_string(code: int) -> str:
    """NCCL's integer version: 22703 -> "2.27.3"; before 2.9 it was 2804 -> "2.8.4"."""
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def available() -> tuple[bool, str]:
    """(usable, what was found or why not); never raises."""
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ModuleNotFoundError, or CUDA libraries missing/mismatched
        return False, f"cupy not importable: {type(e).__name__}: {e} ({CUPY_HINT})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CUDARuntimeError: no driver, no device
        return False, f"no CUDA device: {e}"
    if count < 1:
        return False, "no CUDA device: cudaGetDeviceCount() returned 0"
    try:
        from cupy.cuda import nccl
    except Exception as e:  # noqa: BLE001 - available() never raises
        return False, f"cupy.cuda.nccl missing: {type(e).__name__}: {e}"
    if not getattr(nccl, "available", True) or not hasattr(nccl, "NcclCommunicator"):
        return False, ("cupy.cuda.nccl is not available: cupy found no NCCL library "
                       "(pip install nvidia-nccl-cu12, or put libnccl.so.2 on the library path)")
    try:
        version = nccl_version_string(nccl.get_version())
    except Exception as e:  # noqa: BLE001 - NcclError, or a broken NCCL library
        return False, f"cupy.cuda.nccl does not answer: {type(e).__name__}: {e}"
    try:
        names = Counter(_device_name(cupy, i) for i in range(count))
        gpus = ", ".join(name if k == 1 else f"{k}x {name}" for name, k in names.items())
    except Exception as e:  # noqa: BLE001 - names are a courtesy; the count is what matters
        gpus = f"(names unreadable: {e})"
    return True, f"NCCL {version}, {count} GPU(s): {gpus}"


def _device_name(cupy, i: int) -> str:
    name = cupy.cuda.runtime.getDeviceProperties(i)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


class _State:
    device: int | None = None   # the CUDA device this process uses
    stream = None               # the engine's cupy stream on that device


_state = _State()


def device_for(local_rank: int, device_count: int) -> int:
    """The GPU a rank uses: local_rank % device_count (of the devices CUDA_VISIBLE_DEVICES shows)."""
    if device_count < 1:
        raise ValueError(f"no CUDA device to choose from (device count {device_count})")
    return local_rank % device_count


def used_device() -> str | None:
    """The RDMA device this rank measures through: NCCL picks its own per channel (its log names them)."""
    return None


def configure(topology, profile, log_dir: str | os.PathLike | None = None) -> None:
    """Pick this rank's GPU: local_rank % device_count, counted among the devices the
    process sees, so CUDA_VISIBLE_DEVICES (Slurm --gpu-bind, a site wrapper) is respected:
    with one visible GPU per rank every rank uses its device 0.

    More ranks on a node than GPUs makes two ranks share a GPU, and NCCL refuses two ranks
    of one communicator on one GPU ("Duplicate GPU detected"): run one rank per GPU.

    log_dir (default: $ACCEPTANCE_RUN_DIR/logs when that is set) turns on NCCL's INFO
    output for this process's communicators, one file per process (capture_nccl_debug).
    """
    cupy = _cupy()
    device = device_for(topology.me.local_rank, cupy.cuda.runtime.getDeviceCount())
    cupy.cuda.Device(device).use()
    _state.device, _state.stream = device, None
    if log_dir is None and os.environ.get("ACCEPTANCE_RUN_DIR"):
        log_dir = Path(os.environ["ACCEPTANCE_RUN_DIR"]) / "logs"
    if log_dir is not None and not _live:
        capture_nccl_debug(log_dir)


def _device(cupy) -> int:
    if _state.device is None:  # not configured (a script, a test): the current device
        _state.device = cupy.cuda.Device().id
    return _state.device


def _stream(cupy):
    if _state.stream is None:
        with cupy.cuda.Device(_device(cupy)):
            _state.stream = cupy.cuda.Stream(non_blocking=True)
    return _state.stream


# ---- NCCL debug output ----------------------------------------------------------


def capture_nccl_debug(log_dir: str | os.PathLike | None = None, env=os.environ) -> dict[str, str]:
    """Make NCCL log what the harness parses, for this process's communicators.

    Sets NCCL_DEBUG=INFO (TRACE, if set, is kept: it includes INFO), NCCL_DEBUG_SUBSYS to
    include INIT and NET, and, when log_dir is given, NCCL_DEBUG_FILE=<log_dir>/nccl-%h-%p.log
    (NCCL writes one file per process; %h host, %p pid). NCCL reads these variables once per
    process, when it first initializes (in practice the first ncclGetUniqueId /
    ncclCommInitRank), so this must run BEFORE the first communicator is created; after
    that it raises instead of silently doing nothing. Recent NCCL opens the file line-buffered,
    so net_paths() can read it while the processes still run. Returns the variables it set.
    """
    if _live:
        raise RuntimeError("NCCL debug output must be set up before the first NCCL communicator: "
                           "NCCL read NCCL_DEBUG* when that communicator was created")
    changed = {}
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        changed["NCCL_DEBUG"] = "INFO"
    subsys = env.get("NCCL_DEBUG_SUBSYS", "").strip()
    want = _with_subsystems(subsys, DEBUG_SUBSYS)
    if want != subsys:
        changed["NCCL_DEBUG_SUBSYS"] = want
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        changed["NCCL_DEBUG_FILE"] = str(Path(log_dir) / LOG_PATTERN)
    env.update(changed)
    return changed


def _with_subsystems(current: str, needed: Iterable[str]) -> str:
    """NCCL_DEBUG_SUBSYS that includes `needed`: a list gains them, an ^exclusion list loses them."""
    if not current:
        return ",".join(needed)
    if current.startswith("^"):
        kept = [s for s in current[1:].split(",") if s and s.strip().upper() not in needed]
        return "^" + ",".join(kept) if kept else "ALL"
    names = [s.strip() for s in current.split(",") if s.strip()]
    if "ALL" in (n.upper() for n in names):
        return current
    return ",".join(names + [n for n in needed if n not in (m.upper() for m in names)])


def net_paths(log_dir: str | os.PathLike) -> NetPaths:
    """Parse every nccl-<host>-<pid>.log in log_dir (written under capture_nccl_debug)."""
    paths = NetPaths()
    for f in sorted(Path(log_dir).glob("nccl-*.log")):
        m = _LOG_FILE.match(f.name)
        host, pid = (m["host"], int(m["pid"])) if m else ("", None)
        with open(f, errors="replace") as lines:
            parse_nccl_debug(lines, default_host=host, default_pid=pid, into=paths)
    return paths


# ---- NCCL debug parser -----------------------------------------------------------

# "host:pid:tid [cudaDev] NCCL INFO message" (src/debug.cc); some captures lack host:pid:tid.
_PREFIX = re.compile(r"(?:(?P<host>[^\s:]*):(?P<pid>\d+):(?P<tid>\d+) )?\[(?P<dev>\d+)\] "
                     r"NCCL (?P<level>INFO|WARN|TRACE) (?P<msg>.*)$")
_VERSION = re.compile(r"NCCL version (?P<version>\S+)")
# "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB ib0:10.0.0.1<0>" (net_ib init),
# "NET/Socket : Using [0]ib0:192.168.11.1<0>"; merged NICs print "[0]{mlx5_0:1/IB, mlx5_1:1/IB}".
_NIC_LIST = re.compile(r"^NET/(?P<net>\S+) : Using (?P<list>.*)$")
_NIC_ENTRY = re.compile(r"\[(?P<idx>\d+)\](?P<dev>\{[^}]*\}|[^\s\[;]+)")
_IB_DEV = re.compile(r"(?P<name>[^\s:{},]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
_VDEV = re.compile(r"^NET/(?P<net>\S+) : Made virtual device \[(?P<idx>\d+)\] name=(?P<name>\S+)")
_USING_NET = re.compile(r"^Using network (?P<net>.+?)\s*$")
# "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'" (graph/topo.cc), older "... (no module)",
# the rdma-sharp plugin's "GPU Direct RDMA (nvidia-peermem) enabled for HCA 0 'mlx5_0".
_HCA_GDR = re.compile(r"GPU Direct RDMA (?:\([^)]*\) )?(?P<state>enabled|disabled|enable)\b for HCA "
                      r"(?P<idx>\d+) '(?P<name>[^'\s]+)'?(?P<rest>.*)$", re.IGNORECASE)
# graph/paths.cc: "GPU Direct RDMA Disabled for GPU 0 / HCA 3 (distance 8 > 5)".
_GPU_GDR = re.compile(r"GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>\S+) / HCA (?P<hca>\S+) "
                      r"\((?P<why>[^)]*)\)")
# transport/{net,p2p,shm}.cc: "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
# 2.7-2.11 "Channel 00 : 0[1a000] -> 1[1a000] [receive] via NET/IB/0", 2.4 "Ring 00 : 0 -> 1 [send] via ...".
_CHANNEL = re.compile(r"^(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[[^\]]*\])? -> "
                      r"(?P<dst>\d+)(?:\[[^\]]*\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$")
# "NET/IB/2/GDRDMA", PXN "NET/IB/3(9)/GDRDMA/Shared", 2.2x GDR over PCI on C2C "NET/IB/0/GDRDMA(PCI)".
_VIA_NET = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<flags>.*)$")


@dataclass(frozen=True)
class Connection:
    """One channel connection NCCL logged: a peer pair on a channel, one direction, one transport."""

    host: str
    pid: int | None
    cuda_dev: int | None        # the logging rank's CUDA device (the [n] of the line prefix)
    channel: int
    src: int                    # NCCL ranks of the communicator
    dst: int
    direction: str | None       # "send" / "receive" for NET; None for P2P / SHM
    transport: str              # "NET", "P2P", "SHM", ...
    via: str                    # the text after "via "
    net: str | None = None      # "IB", "IBext_v8", "Socket", ...
    net_dev: int | None = None  # the <n> of NET/IB/<n>: an index into this process's NIC list
    proxy: int | None = None    # PXN: the local rank whose NIC carries the traffic
    hca: str | None = None      # NIC name, from the NIC list ("mlx5_2"); None if NCCL did not list it
    gdr: bool = False           # "/GDRDMA": the NIC reads/writes GPU memory directly

    @property
    def network(self) -> bool:
        return self.transport == "NET"

    @property
    def kind(self) -> str:
        """P2P/CUMEM, P2P/IPC, SHM, NET/IB, ...: the transport and its first qualifier."""
        if self.network:
            return f"NET/{self.net}"
        parts = self.via.split("/")
        return "/".join(parts[:2]) if self.transport == "P2P" and len(parts) > 1 else self.transport


@dataclass
class NcclProcess:
    """What one process (host, pid) logged about its network setup."""

    host: str
    pid: int | None
    version: str | None = None
    network: str | None = None                                  # "Using network IB"
    nics: dict[str, dict[int, str]] = field(default_factory=dict)  # net -> NET/<net>/<n> index -> device
    links: dict[str, str] = field(default_factory=dict)          # device -> "IB" / "RoCE"
    hca_gdr: dict[str, tuple[bool, str]] = field(default_factory=dict)  # HCA -> (GDR supported, the line)
    gpu_gdr: list[tuple[bool, str]] = field(default_factory=list)       # (enabled, the GPU/HCA distance line)
    warnings: list[str] = field(default_factory=list)

    def nic(self, net: str, dev: int) -> str | None:
        table = self.nics.get(net)
        if table is None:  # a net plugin ("IBext_v8") lists its NICs as "NET/IB : Using ..."
            table = next((t for name, t in self.nics.items() if net.startswith(name)), None)
        if table is None and len(self.nics) == 1:
            table = next(iter(self.nics.values()))
        return None if table is None else table.get(dev)


@dataclass(frozen=True)
class NicPaths:
    """One NIC on one host: its network connections and whether they used GPUDirect RDMA."""

    host: str
    hca: str
    net: str
    devs: tuple[int, ...]       # the NET/<net>/<n> indices it appeared under
    link: str | None            # "IB" / "RoCE" when NCCL said
    connections: int            # network channel connections (send and receive)
    gdr_connections: int
    receives: int
    gdr_receives: int
    gdr_support: bool | None    # "GPU Direct RDMA Enabled/Disabled for HCA": None if not logged
    evidence: tuple[str, ...]   # the NCCL lines about GDR for this HCA

    @property
    def gdr(self) -> bool | None:
        """Every network connection used GDRDMA (None: no network traffic through this NIC)."""
        return None if not self.connections else self.gdr_connections == self.connections

    @property
    def via(self) -> str:
        return "NET/{}/{}".format(self.net, ",".join(map(str, self.devs)))


@dataclass
class NetPaths:
    """Parsed NCCL_DEBUG=INFO output: per process, per channel connection, per NIC."""

    processes: dict[tuple[str, int | None], NcclProcess] = field(default_factory=dict)
    connections: list[Connection] = field(default_factory=list)

    def process(self, host: str, pid: int | None) -> NcclProcess:
        key = (host, pid)
        if key not in self.processes:
            self.processes[key] = NcclProcess(host, pid)
        return self.processes[key]

    @property
    def hosts(self) -> list[str]:
        return sorted({h for h, _ in self.processes} | {c.host for c in self.connections})

    @property
    def versions(self) -> list[str]:
        return sorted({p.version for p in self.processes.values() if p.version})

    def hca_of(self, c: Connection) -> str | None:
        """The NIC name of a network connection, from its own process's NIC list, else its host's."""
        if c.hca or not c.network:
            return c.hca
        for (host, _), p in self.processes.items():
            if host == c.host and (name := p.nic(c.net, c.net_dev)):
                return name
        return None

    def nics(self, host: str | None = None) -> list[NicPaths]:
        """Per (host, NIC): network connections and GDRDMA use; NICs NCCL listed but sent nothing through too."""
        groups: dict[tuple[str, str, str], list[Connection]] = {}
        for c in self.connections:
            if c.network and (host is None or c.host == host):
                name = self.hca_of(c) or f"NET/{c.net}/{c.net_dev}"
                groups.setdefault((c.host, name, c.net), []).append(c)
        for (h, _), p in self.processes.items():
            if host is not None and h != host:
                continue
            for net, table in p.nics.items():
                for name in table.values():
                    if not any(k[0] == h and k[1] == name for k in groups):
                        groups.setdefault((h, name, net), [])
        out = []
        for (h, name, net), conns in sorted(groups.items()):
            procs = [p for (ph, _), p in self.processes.items() if ph == h]
            support = [p.hca_gdr[name] for p in procs if name in p.hca_gdr]
            links = [p.links[name] for p in procs if name in p.links]
            evidence = tuple(dict.fromkeys(line for _, line in support))
            receives = [c for c in conns if c.direction == "receive"]
            out.append(NicPaths(
                host=h, hca=name, net=net,
                devs=tuple(sorted({c.net_dev for c in conns} | {i for p in procs for i, n in p.nics.get(net, {}).items()
                                                                 if n == name})),
                link=links[0] if links else None,
                connections=len(conns), gdr_connections=sum(c.gdr for c in conns),
                receives=len(receives), gdr_receives=sum(c.gdr for c in receives),
                gdr_support=(all(ok for ok, _ in support) if support else None),
                evidence=evidence,
            ))
        return out

    def intranode(self, host: str | None = None) -> dict[str, int]:
        """Connections per intra-node transport (P2P/CUMEM, P2P/IPC, SHM, ...)."""
        return dict(Counter(c.kind for c in self.connections if not c.network and (host is None or c.host == host)))

    def networks(self, host: str | None = None) -> list[str]:
        """What "Using network ..." said (IB, Socket, a plugin's name)."""
        return sorted({p.network for (h, _), p in self.processes.items() if p.network and (host in (None, h))})


def parse_nccl_debug(lines: Iterable[str] | str, default_host: str = "", default_pid: int | None = None,
                     into: NetPaths | None = None) -> NetPaths:
    """Parse NCCL_DEBUG=INFO output (one process's file, or many processes' lines mixed).

    Each line is attributed to its process by its "host:pid:tid [dev]" prefix; NCCL's bare
    "NCCL version" line to the process of the line before it; lines of a capture without
    prefixes to (default_host, default_pid).
    """
    paths = into if into is not None else NetPaths()
    if isinstance(lines, str):
        lines = lines.splitlines()
    pending: list[tuple[NcclProcess, dict]] = []
    last = (default_host, default_pid)
    for raw in lines:
        line = raw.rstrip("\r\n")
        m = _PREFIX.search(line)
        if m:
            host = m["host"] if m["host"] is not None else default_host
            pid = int(m["pid"]) if m["pid"] is not None else default_pid
            level, msg, dev = m["level"], m["msg"], int(m["dev"])
            last = (host, pid)
        else:  # NCCL prints its bare "NCCL version ..." line amid the lines of the process that does
            (host, pid), level, msg, dev = last, None, line.strip(), None
        v = _VERSION.search(msg)
        if v:
            paths.process(host, pid).version = v["version"]
            continue
        if level is None:
            continue
        proc = paths.process(host, pid)
        if level == "WARN":
            proc.warnings.append(msg)
            continue
        if (c := _CHANNEL.match(msg)) is not None:
            pending.append((proc, dict(c.groupdict(), cuda_dev=dev)))
        elif (n := _NIC_LIST.match(msg)) is not None:
            listed = n["list"].split("; OOB")[0]
            for e in _NIC_ENTRY.finditer(listed):
                devs = _IB_DEV.findall(e["dev"])
                if devs:
                    name = "+".join(d[0] for d in devs)
                    proc.links[name] = devs[0][2]
                else:  # a socket interface "ib0:10.0.0.1<0>"
                    name = e["dev"].split(":")[0]
                proc.nics.setdefault(n["net"], {})[int(e["idx"])] = name
        elif (vd := _VDEV.match(msg)) is not None:
            proc.nics.setdefault(vd["net"], {})[int(vd["idx"])] = vd["name"]
        elif (u := _USING_NET.match(msg)) is not None:
            proc.network = u["net"]
        elif (g := _HCA_GDR.search(msg)) is not None:
            proc.hca_gdr[g["name"]] = (g["state"].lower().startswith("enable"), msg)
        elif (d := _GPU_GDR.search(msg)) is not None:
            proc.gpu_gdr.append((d["state"] == "Enabled", msg))
    # Connections resolve NIC names once the whole input is read: the NIC list may come later.
    for proc, g in pending:
        via = g["via"]
        transport = via.split("/")[0]
        conn = {"host": proc.host, "pid": proc.pid, "cuda_dev": g["cuda_dev"], "channel": int(g["ch"]),
                "src": int(g["src"]), "dst": int(g["dst"]), "direction": g["dir"], "transport": transport,
                "via": via}
        if (vn := _VIA_NET.match(via)) is not None:
            dev_n = int(vn["dev"])
            conn.update(transport="NET", net=vn["net"], net_dev=dev_n,
                        proxy=int(vn["proxy"]) if vn["proxy"] else None,
                        gdr="/GDRDMA" in vn["flags"], hca=proc.nic(vn["net"], dev_n))
        paths.connections.append(Connection(**conn))
    return paths


_STAGED = ("NCCL staged through host memory "
           "(nvidia_peermem not loaded or dma-buf unsupported; NCCL_NET_GDR_LEVEL?)")


def gdr_problems(paths: NetPaths, rails: dict[str, int | None]) -> list[str]:
    """What is wrong with GPUDirect RDMA, one line per NIC; rails maps NIC names to rails.

    A NIC whose receives (NCCL writing into GPU memory) lack GDRDMA is staging through
    host memory. A NIC whose receives use GDRDMA but whose sends do not has GPU Direct
    RDMA *read* off: NCCL's default on PCIe-only platforms (NCCL_NET_GDR_READ), reported
    separately. Network traffic over NET/Socket is TCP, not RDMA at all.
    """
    problems = []
    nics = paths.nics()
    several = len({n.host for n in nics if n.connections}) > 1
    for nic in nics:
        if not nic.connections or nic.gdr:
            continue
        where = f"{nic.host}: " if several and nic.host else ""
        rail = rails.get(nic.hca)
        label = f"rail {rail if rail is not None else '?'} ({nic.hca})"
        if nic.net == "Socket":
            problems.append(f"{where}{label}: network traffic via {nic.via}: TCP sockets, not RDMA "
                            f"(NCCL found no usable IB/RoCE device: NCCL_IB_DISABLE? NCCL_IB_HCA?)")
            continue
        if nic.receives and nic.gdr_receives == nic.receives:
            problems.append(f"{where}{label}: sends via {nic.via} without GDRDMA "
                            f"({nic.connections - nic.gdr_connections} of {nic.connections - nic.receives}): "
                            f"NCCL reads send data through host memory (GPU Direct RDMA read is off: "
                            f"NCCL_NET_GDR_READ=1; NCCL's default only on NVLink platforms)")
            continue
        line = f"{where}{label}: network traffic via {nic.via} without GDRDMA: {_STAGED}"
        if nic.evidence:
            line += " [NCCL: " + "; ".join(nic.evidence) + "]"
        problems.append(line)
    return problems


# ---- communicators ----------------------------------------------------------------

_live: list = []        # every NCCL communicator this process made, destroyed at exit
_keyval: int | None = None


def _destroy(nc) -> None:
    # At exit or on free there is nothing useful to do with an error; cupy's destroy() is a
    # no-op the second time.
    with contextlib.suppress(Exception):
        nc.destroy()


def _on_free(comm, keyval, nc) -> None:
    _destroy(nc)


@atexit.register
def destroy_all() -> None:
    """Destroy every NCCL communicator of this process; the collective plugin calls it before
    MPI_Finalize (and atexit, before mpi4py's own finalize, catches any other exit)."""
    while _live:
        _destroy(_live.pop())


def _new_nccl_comm(comm: MPI.Comm):
    """ncclGetUniqueId on comm rank 0, comm.bcast, ncclCommInitRank on every rank (collective)."""
    cupy = _cupy()
    from cupy.cuda import nccl

    uid, error = None, None
    if comm.Get_rank() == 0:
        try:
            uid = nccl.get_unique_id()
        except Exception as e:  # noqa: BLE001 - every rank must hear of it, or the others wait in InitRank
            error = f"ncclGetUniqueId failed on comm rank 0: {type(e).__name__}: {e}"
    uid, error = comm.bcast((uid, error), root=0)
    if error:
        raise RuntimeError(error)
    with cupy.cuda.Device(_device(cupy)):
        return nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())


def communicator(comm: MPI.Comm, make: Callable[[MPI.Comm], object] = _new_nccl_comm):
    """The NCCL communicator for `comm`, made on first use (collective then) and cached on it:
    freeing `comm` destroys it, and so does the end of the process."""
    global _keyval
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval(delete_fn=_on_free)
    nc = comm.Get_attr(_keyval)
    if nc is None:
        nc = make(comm)
        comm.Set_attr(_keyval, nc)
        _live.append(nc)
    return nc


# ---- timing -------------------------------------------------------------------------


def _event_times(cupy, op: Callable[[], None], iters: int, warmup: int, stream,
                 buffers: Buffers | None = None, verified: frozenset[int] = frozenset()) -> np.ndarray:
    """Per-iteration ns from a CUDA event pair around each op on `stream` (see the module doc).

    With `buffers`, the iterations in `verified` and the last are poisoned and stamped before their
    start event and checked after their end event, on the same stream: outside the timed pair."""
    if iters < 0 or warmup < 0:
        raise ValueError(f"iters and warmup must be >= 0, got iters={iters}, warmup={warmup}")
    for _ in range(warmup):
        op()
    stream.synchronize()
    starts = [cupy.cuda.Event() for _ in range(iters)]
    ends = [cupy.cuda.Event() for _ in range(iters)]
    for i, (start, end) in enumerate(zip(starts, ends)):
        check = buffers is not None and (i in verified or i == iters - 1)
        if check:
            with stream:
                buffers.before(i)
        start.record(stream)
        op()
        end.record(stream)
        if check:
            with stream:
                buffers.after(i, i == iters - 1)
    if iters:
        ends[-1].synchronize()
    elapsed = cupy.cuda.get_elapsed_time
    return np.array([round(elapsed(s, e) * 1e6) for s, e in zip(starts, ends)], dtype=np.int64)


# ---- collectives ----------------------------------------------------------------------


def allreduce(comm: MPI.Comm, size: int, iters: int, warmup: int,
              verified: frozenset[int] = frozenset()) -> Collective:
    """Sum of float64 vectors of `size` bytes on the GPU; inputs are small integers, so the sum is exact."""
    cupy = _cupy()
    from cupy.cuda import nccl

    rank, n = comm.Get_rank(), comm.Get_size()
    count = ALLREDUCE.elements(size, n)
    nc = communicator(comm)
    stream = _stream(cupy)
    with cupy.cuda.Device(_device(cupy)):
        b = Buffers(cupy, ALLREDUCE, count, rank, n)
        cupy.cuda.Device().synchronize()  # inputs are built on the default stream
        sp, rp, sptr, dtype, op_sum = b.send.data.ptr, b.recv.data.ptr, stream.ptr, nccl.NCCL_FLOAT64, nccl.NCCL_SUM

        def op():
            nc.allReduce(sp, rp, count, dtype, op_sum, sptr)

        times = _event_times(cupy, op, iters, warmup, stream, b, verified)
    return checked(comm, ALLREDUCE.nbytes(count, n), times, b.tally)


def alltoall(comm: MPI.Comm, size: int, iters: int, warmup: int,
             verified: frozenset[int] = frozenset()) -> Collective:
    """Each rank sends `size` bytes in total (a block per rank, itself included), as nccl-tests
    alltoall: one ncclSend + ncclRecv per peer inside one ncclGroupStart/ncclGroupEnd."""
    cupy = _cupy()
    from cupy.cuda import nccl

    rank, n = comm.Get_rank(), comm.Get_size()
    block = ALLTOALL.elements(size, n)
    nc = communicator(comm)
    stream = _stream(cupy)
    with cupy.cuda.Device(_device(cupy)):
        b = Buffers(cupy, ALLTOALL, block, rank, n)
        cupy.cuda.Device().synchronize()
        step = block * 8
        sp, rp, sptr, dtype = b.send.data.ptr, b.recv.data.ptr, stream.ptr, nccl.NCCL_FLOAT64
        group_start, group_end, nsend, nrecv = nccl.groupStart, nccl.groupEnd, nc.send, nc.recv

        def op():
            group_start()
            for peer in range(n):
                nsend(sp + peer * step, block, dtype, peer, sptr)
                nrecv(rp + peer * step, block, dtype, peer, sptr)
            group_end()

        times = _event_times(cupy, op, iters, warmup, stream, b, verified)
    return checked(comm, ALLTOALL.nbytes(block, n), times, b.tally)
