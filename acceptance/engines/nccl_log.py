"""NCCL's debug output: asking NCCL for it, and reading back which NIC and path each connection took.

NCCL logs, at NCCL_DEBUG=INFO, every channel connection it makes and whether the network side
reads/writes GPU memory directly (`[receive] via NET/IB/2/GDRDMA`) or stages through host memory
(`via NET/IB/2`). debug_env() has NCCL write that to per-process files, net_paths() /
parse_nccl_debug() read it back, gdr_problems() says what is wrong, per NIC and rail. Plain text
parsing: no cupy, no MPI.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# NCCL_DEBUG_SUBSYS the engine needs: INIT carries the channel/transport lines and
# "Using network", NET the NIC list and the GPU Direct RDMA decisions.
DEBUG_SUBSYS = ("INIT", "NET")
LOG_PATTERN = "nccl-%h-%p.log"  # NCCL expands %h (host name) and %p (pid)
LOG_FILE = re.compile(r"^nccl-(?P<host>.*)-(?P<pid>\d+)\.log$")  # host empty where NCCL knew none


# ---- NCCL debug output ----------------------------------------------------------


def debug_env(log_dir: str | os.PathLike | None = None, env=os.environ) -> dict[str, str]:
    """Set NCCL_DEBUG, NCCL_DEBUG_SUBSYS and (with log_dir) NCCL_DEBUG_FILE in `env` so that NCCL logs what
    this module parses; the variables it changed."""
    changed = {}
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        changed["NCCL_DEBUG"] = "INFO"
    subsys = env.get("NCCL_DEBUG_SUBSYS", "").strip()
    want = with_subsystems(subsys, DEBUG_SUBSYS)
    if want != subsys:
        changed["NCCL_DEBUG_SUBSYS"] = want
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        changed["NCCL_DEBUG_FILE"] = str(Path(log_dir) / LOG_PATTERN)
    env.update(changed)
    return changed


def with_subsystems(current: str, needed: Iterable[str]) -> str:
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
    """Parse every nccl-<host>-<pid>.log in log_dir (written under debug_env)."""
    paths = NetPaths()
    for f in sorted(Path(log_dir).glob("nccl-*.log")):
        m = LOG_FILE.match(f.name)
        host, pid = (m["host"], int(m["pid"])) if m else ("", None)
        with open(f, errors="replace") as lines:
            parse_nccl_debug(lines, default_host=host, default_pid=pid, into=paths)
    return paths


# ---- NCCL debug parser -----------------------------------------------------------

# "host:pid:tid [cudaDev] NCCL INFO message" (src/debug.cc); some captures lack host:pid:tid, some
# have an empty host (":22901:22901 [0] ..."), `mpirun --tag-output` puts "[rank] " before it.
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

    Each line is attributed to its process by its "host:pid:tid [dev]" prefix (an empty host is
    default_host: the same process's NIC list and connections must meet); NCCL's bare "NCCL version"
    line to the process of the line before it; lines of a capture without prefixes to
    (default_host, default_pid). Other lines (Init timings, nccl-tests' table, "Connected all rings
    ... GDR n", which is the communicator's flag and not a NIC's: the channels' /GDRDMA is) are
    passed over.
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
            host = m["host"] or default_host
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
