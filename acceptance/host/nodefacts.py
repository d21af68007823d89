"""Facts about this node's fabric, read from sysfs and the vendor tools (no pytest, no MPI).

Each fact function returns data or raises `Unavailable` with the concrete reason,
so a check can skip with it. `collect()` reads everything a preflight needs at
once and never raises: a fact it cannot read is stored as its `Unavailable`.

Sources (docs/rdma.md §2, §5, §6):
- RDMA devices and ports: <root>/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer},
  the netdev under <dev>/device/net/, firmware in <dev>/fw_ver, the driver from the
  <dev>/device/driver link and its version from <root>/module/<driver>/version.
- MTU: RoCE (Ethernet) ports use their netdev's <root>/class/net/<netdev>/mtu;
  InfiniBand ports the active_mtu of `ibv_devinfo` (command: $ACCEPTANCE_IBV_DEVINFO).
- rdma-core: the libibverbs file name, libibverbs.so.1.14.50.0 -> rdma-core 50.0.
- Huge pages: <root>/kernel/mm/hugepages/hugepages-<N>kB/nr_hugepages.
- GPUs: PCI functions of vendor 0x10de, class 0x0300xx (VGA) or 0x0302xx (3D).
- GPU <-> NIC distance: `nvidia-smi topo -m` (command: $ACCEPTANCE_NVIDIA_SMI); both
  the header that names NICs NIC0.. plus a "NIC Legend:" (newer drivers) and the
  header that names them mlx5_0.. (older drivers) parse into the same table.
- PCIe links as trained: <root>/bus/pci/devices/<bdf>/{current,max}_link_{speed,width} of every RDMA
  device and GPU, and of its upstream port (acceptance.host.pcie).
- RoCE's lossless class (PFC, trust, DSCP -> priority, ECN per priority) of each Ethernet port's
  netdev: `dcb -j` and MLNX_OFED's ecn sysfs (acceptance.host.roce).
- GPUDirect RDMA: the nvidia_peermem module (older: nv_peer_mem's
  <root>/kernel/mm/memory_peers/nv_mem/version), else dma-buf as CUDA reports it
  (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED through cupy).

The sysfs root is $ACCEPTANCE_SYSFS_ROOT (default /sys), through
`sysfs_root(node)` (acceptance.host.sysfs). As a testing and
emulation aid, a literal "{node}" in it is replaced by the node's name, so emulated
nodes sharing one host each read their own tree: ACCEPTANCE_SYSFS_ROOT=/tmp/fake/{node}
gives node1 /tmp/fake/node1. Real nodes have their own /sys and need no placeholder.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# One rule for the sysfs root, shared with the port counters: sysfs_root(node).
from . import pcie, roce, sysfs
from .sysfs import read_sysfs
from .command import run_command
from ..records.naming import natural_key

ENV_IBV_DEVINFO = "ACCEPTANCE_IBV_DEVINFO"
ENV_NVIDIA_SMI = "ACCEPTANCE_NVIDIA_SMI"
COMMAND_TIMEOUT_S = 20.0  # nvidia-smi topo -m takes seconds on a busy 8-GPU node
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/aarch64-linux-gnu")
# nvidia-smi topo -m distances between a GPU and a NIC, nearest first (X is self, NV# is GPU-GPU).
DISTANCES = ("PIX", "PXB", "PHB", "NODE", "SYS")
# cuda.h, CUDA >= 11.7: "Device supports buffer sharing with dma_buf mechanism".
CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124


class Unavailable(Exception):
    """A fact this node cannot provide; str() is "unavailable: <reason>"."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return f"unavailable: {self.reason}"




def _command(env: str, default: str) -> list[str]:
    cmd = shlex.split(os.environ.get(env) or default)
    if not cmd:
        raise Unavailable(f"${env} is empty")
    if shutil.which(cmd[0]) is None:
        where = f" (${env})" if os.environ.get(env) else ""
        raise Unavailable(f"{cmd[0]}{where} not found on PATH")
    return cmd


def _output(cmd: list[str]) -> str:
    ok, out = run_command(cmd, COMMAND_TIMEOUT_S)
    if not ok:
        raise Unavailable(out)
    return out


# --- RDMA devices and ports ------------------------------------------------------------

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_NUMBERED = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")
_MTU = re.compile(r"^\s*(\d+)")


def parse_rate(text: str | None) -> float | None:
    """Gbit/s of a sysfs rate: "400 Gb/sec (4X NDR)" -> 400.0, "2.5 Gb/sec (1X SDR)" -> 2.5; else None."""
    m = _RATE.match(text or "")
    return float(m.group(1)) if m else None


def _state_name(text: str | None) -> str:
    """ "4: ACTIVE" -> "ACTIVE"; a bare name stays as it is."""
    m = _NUMBERED.match(text or "")
    return m.group(2) if m else (text or "").strip()


def port_is_up(state: str | None, phys_state: str | None) -> bool:
    """state "4: ACTIVE" and phys_state "5: LinkUp"."""
    return _state_name(state) == "ACTIVE" and _state_name(phys_state) == "LinkUp"


@dataclass(frozen=True)
class Port:
    device: str
    port: int
    state: str                  # "4: ACTIVE"
    phys_state: str             # "5: LinkUp"
    rate: str                   # "400 Gb/sec (4X NDR)"
    gbps: float | None          # 400.0; None when the rate text does not parse
    link_layer: str             # "InfiniBand" or "Ethernet"
    netdev: str | None
    mtu: int | None             # bytes; None when unknown, with the reason in mtu_reason
    mtu_reason: str | None = None
    hca_type: str | None = None  # the device's model as the driver names it ("MT4129": ConnectX-7); None unknown
    virtual: bool = False       # an SR-IOV virtual function (its PCI function has a physfn): a VM's NIC
    unread: str | None = None   # why its state could not be read (a sysfs file missing or unreadable)

    @property
    def up(self) -> bool:
        return port_is_up(self.state, self.phys_state)

    @property
    def label(self) -> str:
        return f"{self.device} port {self.port}"


def rdma_devices(root: Path, only: Iterable[str] | None = None) -> list[str]:
    """RDMA device names in natural order (mlx5_2 before mlx5_10); only: the node's own devices when
    virtual nodes share one host's (acceptance.host.nics' device map)."""
    d = Path(root) / "class" / "infiniband"
    if not d.is_dir():
        raise Unavailable(f"no {d} (no RDMA device, or its driver is not loaded)")
    names = sorted((p.name for p in d.iterdir()), key=natural_key)
    return names if only is None else [n for n in names if n in set(only)]


def parse_mtu(text: str | None) -> int | None:
    """ibv_devinfo's "4096 (5)" -> 4096."""
    m = _MTU.match(text or "")
    return int(m.group(1)) if m else None


def parse_ibv_devinfo(text: str) -> dict[str, dict]:
    """`ibv_devinfo` (any -d/-i/-v) -> {hca_id: {field: value, ..., "ports": {n: {field: value}}}}.

    Values are the text after the colon, e.g. "PORT_ACTIVE (4)", "4096 (5)", "InfiniBand".
    """
    devices: dict[str, dict] = {}
    dev = port = None
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            dev, port = {"ports": {}}, None
            devices[value] = dev
        elif dev is None:
            continue
        elif key == "port" and value.isdigit():
            port = dev["ports"].setdefault(int(value), {})
        elif port is not None:
            port.setdefault(key, value)
        else:
            dev.setdefault(key, value)
    return devices


def ibv_devinfo() -> dict[str, dict]:
    """This node's `ibv_devinfo`, parsed; Unavailable when the tool is missing or fails."""
    cmd = _command(ENV_IBV_DEVINFO, "ibv_devinfo")
    return parse_ibv_devinfo(_output(cmd))


def read_ports(root: Path, devinfo=None, only: Iterable[str] | None = None) -> list[Port]:
    """Every port of every RDMA device, in natural device order.

    devinfo: parsed ibv_devinfo for InfiniBand MTUs; None runs it when an
    InfiniBand port needs it; an Unavailable leaves those MTUs unknown with its reason.
    """
    root = Path(root)
    devices = rdma_devices(root, only)
    if not devices:
        raise Unavailable(f"no RDMA device in {root / 'class' / 'infiniband'}")
    out = []
    for p in sysfs.ports(root, devices):  # one enumeration of ports and netdevs, shared with the counters
        name, n, netdev = p.device, p.port, p.netdev
        dev, pdir = root / "class" / "infiniband" / name, root / "class" / "infiniband" / name / "ports" / str(n)
        rate, link_layer = p.rate or "", p.link_layer or "unknown"
        mtu, why = None, None
        if link_layer == "Ethernet":
            text = read_sysfs(root / "class" / "net" / netdev / "mtu") if netdev else None
            mtu = int(text) if text and text.isdigit() else None
            if mtu is None:
                why = "Ethernet MTU unknown: " + (f"no {root / 'class' / 'net' / netdev / 'mtu'}" if netdev
                                                  else f"no netdev under {dev / 'device' / 'net'}")
        else:
            if devinfo is None:
                try:
                    devinfo = ibv_devinfo()
                except Unavailable as e:
                    devinfo = e
            if isinstance(devinfo, Unavailable):
                why = f"InfiniBand MTU unknown: {devinfo.reason}"
            else:
                fields = devinfo.get(name, {}).get("ports", {}).get(n)
                mtu = parse_mtu(fields.get("active_mtu")) if fields else None
                if mtu is None:
                    why = f"InfiniBand MTU unknown: no active_mtu for {name} port {n} in ibv_devinfo's output"
        phys_state = read_sysfs(pdir / "phys_state")
        unread = [f for f, text in (("state", p.state), ("phys_state", phys_state)) if text is None]
        # hca_type: mlx5 prints "MT<PCI device id>" (drivers/infiniband/hw/mlx5/main.c, hca_type_show), what
        # ibstat calls "CA type"; physfn: the link from a virtual function to its physical function
        # (Documentation/ABI/testing/sysfs-bus-pci).
        out.append(Port(name, n, p.state or "", phys_state or "", rate, parse_rate(rate), link_layer, netdev, mtu,
                        why, hca_type=read_sysfs(dev / "hca_type") or None,
                        virtual=(dev / "device" / "physfn").exists(),
                        unread=(f"cannot read {', '.join(unread)} in {pdir}" if unread else None)))
    return out


def common_link_layer(ports: list[Port]) -> str | None:
    """The most common link layer (ties: the alphabetically first), None without ports."""
    seen = Counter(p.link_layer for p in ports)
    return min(seen, key=lambda k: (-seen[k], k)) if seen else None


# --- versions -------------------------------------------------------------------------

_LIBIBVERBS = re.compile(r"^libibverbs\.so\.1\.\d+\.(\d+)\.(\d+)$")


def rdma_core_version(lib_dirs=None) -> str:
    """rdma-core release from the libibverbs file name: libibverbs.so.1.14.50.0 -> "50.0"."""
    found = []
    for d in lib_dirs if lib_dirs is not None else LIB_DIRS:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            m = _LIBIBVERBS.match(name)
            if m:
                found.append((int(m.group(1)), int(m.group(2))))
    if not found:
        return "not installed"
    major, minor = max(found)
    return f"{major}.{minor}"


def driver_of(root: Path, device: str) -> str:
    """ "mlx5_core 24.04-0.6.6.0" (a versioned out-of-tree module such as MOFED's), or
    "mlx5_core in-tree (kernel 6.8.0-45-generic)"."""
    root = Path(root)
    link = root / "class" / "infiniband" / device / "device" / "driver"
    if not os.path.lexists(link):
        return "unknown driver"
    name = os.path.basename(os.path.realpath(link))
    version = read_sysfs(root / "module" / name / "version")
    return f"{name} {version}" if version else f"{name} in-tree (kernel {platform.release()})"


def fabric_versions(root: Path, lib_dirs=None, only: Iterable[str] | None = None) -> dict[str, str]:
    """What must match on every node: kernel, rdma-core, RDMA driver, and the RDMA devices' firmware
    (the node's common version, then "mlx5_3 at <version>" for each device that differs)."""
    root = Path(root)
    versions = {"kernel": platform.release(), "rdma-core": rdma_core_version(lib_dirs)}
    try:
        devices = rdma_devices(root, only)
    except Unavailable:
        devices = []
    drivers = set()
    firmware: dict[str, list[str]] = {}
    for name in devices:
        fw = read_sysfs(root / "class" / "infiniband" / name / "fw_ver") or "unknown"
        firmware.setdefault(fw, []).append(name)
        drivers.add(driver_of(root, name))
    if firmware:
        # One value per node, not one per device name: names differ between nodes (PCI order,
        # virtual nodes sharing a host), the firmware must not. The odd devices are named.
        common = max(sorted(firmware), key=lambda fw: len(firmware[fw]))
        odd = [f"{name} at {fw}" for fw, names in sorted(firmware.items()) if fw != common for name in names]
        versions["firmware"] = "; ".join([common, *odd])
    if drivers:
        versions["driver"] = ", ".join(sorted(drivers))
    return versions


# --- memory and GPUs --------------------------------------------------------------------

def hugepages_bytes(root: Path) -> int:
    """Memory reserved in huge pages of every size, in bytes."""
    d = Path(root) / "kernel" / "mm" / "hugepages"
    if not d.is_dir():
        raise Unavailable(f"no {d} (kernel without huge page support)")
    total = 0
    for sub in d.iterdir():
        m = re.fullmatch(r"hugepages-(\d+)kB", sub.name)
        count = read_sysfs(sub / "nr_hugepages") if m else None
        if m and count and count.isdigit():
            total += int(count) * int(m.group(1)) * 1024
    return total


def nvidia_gpus(root: Path) -> list[str]:
    """PCI addresses of NVIDIA display/3D controllers (vendor 0x10de, class 0x0300xx / 0x0302xx)."""
    d = Path(root) / "bus" / "pci" / "devices"
    if not d.is_dir():
        raise Unavailable(f"no {d}")
    out = []
    for dev in d.iterdir():
        vendor, cls = (read_sysfs(dev / "vendor") or "").lower(), (read_sysfs(dev / "class") or "").lower()
        if vendor == "0x10de" and cls.startswith(("0x0300", "0x0302")):
            out.append(dev.name)
    return sorted(out)


def gpu_count(root: Path) -> int:
    return len(nvidia_gpus(root))


def pcie_links(root: Path, only: Iterable[str] | None = None) -> list:
    """The PCIe links of this node's RDMA devices and NVIDIA GPUs (acceptance.host.pcie)."""
    out = pcie.links(Path(root), _or_empty(rdma_devices, root, only), _or_empty(nvidia_gpus, root))
    if not out:
        raise Unavailable("no RDMA device or GPU with a PCIe link in sysfs (current_link_speed, current_link_width)")
    return out


def roce_qos(root: Path, only: Iterable[str] | None = None) -> dict:
    """device -> its RoCE port's lossless settings (acceptance.host.roce), for every Ethernet port."""
    devices = rdma_devices(Path(root), only)
    found = {p.device: roce.read_qos(Path(root), p.netdev) for p in sysfs.ports(Path(root), devices)
             if p.link_layer == "Ethernet" and p.netdev}
    if not found:
        raise Unavailable("no RoCE port (no RDMA port with an Ethernet link layer and a netdev)")
    return found


def _or_empty(fact, *args) -> list:
    """A list fact, or [] where this node has none of it."""
    try:
        return fact(*args)
    except Unavailable:
        return []


# --- nvidia-smi topo -m -----------------------------------------------------------------

_TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_CELL = re.compile(r"^(X|PIX|PXB|PHB|NODE|SYS|SOC|NV\d+|N/A)$")
_GPU = re.compile(r"^GPU(\d+)$")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


@dataclass
class Affinity:
    """`nvidia-smi topo -m` as data: nics[gpu][nic] = "PIX" ...; cpus / numa: the GPU's CPU and NUMA affinity."""
    nics: dict[int, dict[str, str]] = field(default_factory=dict)
    cpus: dict[int, str] = field(default_factory=dict)
    numa: dict[int, str] = field(default_factory=dict)

    def nearest(self, gpu: int) -> tuple[str, str] | None:
        """(nic, distance) of the GPU's nearest NIC; ties go to the first in natural order."""
        row = self.nics.get(gpu) or {}
        if not row:
            return None
        nic = min(row, key=lambda n: (distance_rank(row[n]), natural_key(n)))
        return nic, row[nic]


def distance_rank(distance: str) -> int:
    """Position in PIX < PXB < PHB < NODE < SYS (SOC, the old name of SYS, counts as SYS);
    anything else (N/A, NV#) ranks after SYS."""
    d = "SYS" if distance == "SOC" else distance
    return DISTANCES.index(d) if d in DISTANCES else len(DISTANCES)


def _fields(line: str) -> list[str]:
    # Real output is tab-separated, with cells like " X ". Copies from a terminal or an
    # issue thread have the tabs expanded to spaces (sometimes one: "mlx5_10 mlx5_11"), so
    # there split on any whitespace and rejoin the multi-word column names.
    if "\t" in line:
        return [f.strip() for f in line.split("\t")]
    words, out, i = line.split(), [], 0
    while i < len(words):
        for name in _TRAILING:
            parts = name.split()
            if words[i:i + len(parts)] == parts:
                out.append(name)
                i += len(parts)
                break
        else:
            out.append(words[i])
            i += 1
    return out


def parse_topo(text: str) -> Affinity:
    """Parse `nvidia-smi topo -m`; NIC columns named NIC<k> are resolved through the NIC Legend."""
    lines = text.splitlines()
    legend = {}
    for i, line in enumerate(lines):
        if line.strip() == "NIC Legend:":
            for entry in lines[i + 1:]:
                m = _LEGEND.match(entry)
                if m:
                    legend[m.group(1)] = m.group(2)
                elif entry.strip():
                    break
    start = None
    for i, line in enumerate(lines):
        f = [x for x in _fields(line) if x]
        if f and f[0] == "GPU0" and (len(f) == 1 or not _CELL.match(f[1])):
            start, header = i, f
            break
    if start is None:
        raise ValueError("no matrix header (a line starting with GPU0) in the nvidia-smi topo -m output")
    n = next((k for k, name in enumerate(header) if name in _TRAILING), len(header))
    columns, trailing = header[:n], header[n:]
    aff = Affinity()
    for line in lines[start + 1:]:
        f = _fields(line)
        if not line.strip() or not f or f[0] not in columns:
            if aff.nics:
                break
            continue
        m = _GPU.match(f[0])
        if not m:
            continue  # a NIC's row repeats what the GPU rows say
        gpu = int(m.group(1))
        cells = f[1:1 + len(columns)]
        if len(cells) < len(columns) or not all(cells):
            raise ValueError(f"row {f[0]} has {len(cells)} distance cells for {len(columns)} columns: {line!r}")
        aff.nics[gpu] = {legend.get(c, c): d for c, d in zip(columns, cells) if not _GPU.match(c)}
        # Trailing columns: empty cells dropped (drivers print "0\t\tN/A" under three headers).
        rest = dict(zip(trailing, [x for x in f[1 + len(columns):] if x]))
        if "CPU Affinity" in rest:
            aff.cpus[gpu] = rest["CPU Affinity"]
        if "NUMA Affinity" in rest:
            aff.numa[gpu] = rest["NUMA Affinity"]
    if not aff.nics:
        raise ValueError("no GPU rows in the nvidia-smi topo -m output")
    return aff


def topo_text() -> str:
    """The output of `nvidia-smi topo -m`; Unavailable when nvidia-smi is missing or fails."""
    return _output(_command(ENV_NVIDIA_SMI, "nvidia-smi") + ["topo", "-m"])


def gpu_names() -> list[str]:
    """This node's GPU models as nvidia-smi names them ("NVIDIA H100 80GB HBM3"); Unavailable without it."""
    out = _output(_command(ENV_NVIDIA_SMI, "nvidia-smi") + ["--query-gpu=name", "--format=csv,noheader"])
    return [line.strip() for line in out.splitlines() if line.strip()]


def topology_affinity() -> Affinity:
    text = topo_text()
    try:
        return parse_topo(text)
    except ValueError as e:
        raise Unavailable(f"cannot parse nvidia-smi topo -m: {e}") from None


def far_pairs(affinity: Affinity, rail_nics: Mapping[int, str], max_distance: str = "PXB") -> list[str]:
    """One readable problem per rail whose GPU (GPU i serves rail i) is farther from the
    rail's NIC than max_distance, or that the table does not show."""
    if max_distance not in DISTANCES:
        raise ValueError(f"max_distance must be one of {', '.join(DISTANCES)}, got {max_distance!r}")
    limit = distance_rank(max_distance)
    problems = []
    for rail, nic in sorted(rail_nics.items()):
        row = affinity.nics.get(rail)
        if row is None:
            gpus = ", ".join(f"GPU{g}" for g in sorted(affinity.nics)) or "none"
            problems.append(f"rail {rail}: no GPU{rail} in nvidia-smi topo -m (GPUs: {gpus})")
            continue
        distance = row.get(nic)
        if distance is None:
            nics = ", ".join(sorted(row, key=natural_key)) or "none"
            problems.append(f"rail {rail}: {nic} is not in nvidia-smi topo -m (NICs: {nics})")
            continue
        if distance_rank(distance) <= limit:
            continue
        text = f"rail {rail}: GPU{rail} <-> {nic} is {distance}, expected {max_distance} or closer"
        near = affinity.nearest(rail)
        if near and near[0] != nic:
            text += f"; the nearest NIC of GPU{rail} is {near[0]} ({near[1]})"
        problems.append(text)
    return problems


# --- GPUDirect RDMA -----------------------------------------------------------------------

def peermem(root: Path) -> str | None:
    """The loaded peer-memory module, "nvidia_peermem 550.54.15" or "nv_peer_mem 1.3"; None when neither is."""
    root = Path(root)
    mod = root / "module" / "nvidia_peermem"
    if mod.is_dir():
        return f"nvidia_peermem {read_sysfs(mod / 'version') or '(no version)'}"
    old = read_sysfs(root / "kernel" / "mm" / "memory_peers" / "nv_mem" / "version")
    if old is not None:
        return f"nv_peer_mem {old}"
    return None


def dmabuf_supported(device: int = 0) -> bool:
    """CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of a visible GPU, through cupy."""
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ImportError, or CUDA libraries that fail to load
        raise Unavailable(f"cupy not importable ({type(e).__name__}: {e}); pip install 'acceptance[gpu]'") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CUDARuntimeError without a driver or device
        raise Unavailable(f"no CUDA device visible ({type(e).__name__}: {e})") from None
    if count <= device:
        raise Unavailable(f"no CUDA device {device} visible ({count} devices)")
    try:
        return bool(cupy.cuda.driver.deviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device))
    except Exception as e:  # noqa: BLE001 - CUDADriverError on drivers before CUDA 11.7
        raise Unavailable(f"cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) failed "
                          f"({type(e).__name__}: {e})") from None


def gpudirect_path(peer: str | None, dmabuf) -> tuple[bool, str]:
    """(usable, how) from peermem() and dmabuf_supported() (a bool or its Unavailable)."""
    if peer:
        return True, f"{peer} loaded"
    if dmabuf is True:
        return True, "nvidia_peermem not loaded; dma-buf supported (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 1)"
    if isinstance(dmabuf, Unavailable):
        return False, f"nvidia_peermem not loaded, and dma-buf support is unknown: {dmabuf.reason}"
    return False, "nvidia_peermem not loaded, and dma-buf is unsupported (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0)"


# --- everything at once -----------------------------------------------------------------

@dataclass
class NodeFacts:
    """One node's facts; each field holds the data or the Unavailable that says why not."""
    root: str
    devices: object      # list[str] | Unavailable
    ports: object        # list[Port] | Unavailable
    versions: object     # dict[str, str] | Unavailable
    hugepages: object    # int (bytes) | Unavailable
    gpus: object         # int | Unavailable
    topo: object         # Affinity | Unavailable
    peermem: object      # str | None | Unavailable
    dmabuf: object       # bool | Unavailable
    pcie: object = field(default_factory=lambda: Unavailable("not collected"))  # list[pcie.Link] | Unavailable
    qos: object = field(default_factory=lambda: Unavailable("not collected"))  # dict[str, roce.QoS] | Unavailable


def _fact(fn, *args):
    try:
        return fn(*args)
    except Unavailable as e:
        return e
    except Exception as e:  # noqa: BLE001 - a fact must never take its rank out of a collective check
        return Unavailable(f"{type(e).__name__}: {e}")


def collect(root: Path, lib_dirs=None, only: Iterable[str] | None = None) -> NodeFacts:
    """Every fact of this node; never raises. nvidia-smi and cupy are only asked on GPU nodes,
    and dma-buf only where no peer-memory module is loaded. only: the node's own RDMA devices
    where virtual nodes share one host's (None: every device under root)."""
    root = Path(root)
    gpus = _fact(gpu_count, root)
    has_gpus = isinstance(gpus, int) and gpus > 0
    no_gpu = gpus if isinstance(gpus, Unavailable) else Unavailable("no NVIDIA GPU on this node")
    peer = _fact(peermem, root)
    if not has_gpus:
        dmabuf = no_gpu
    elif isinstance(peer, str):
        dmabuf = Unavailable("not asked: a peer-memory module is loaded")
    else:
        dmabuf = _fact(dmabuf_supported)
    return NodeFacts(
        root=str(root),
        devices=_fact(rdma_devices, root, only),
        ports=_fact(read_ports, root, None, only),
        versions=_fact(fabric_versions, root, lib_dirs, only),
        hugepages=_fact(hugepages_bytes, root),
        gpus=gpus,
        topo=_fact(topology_affinity) if has_gpus else no_gpu,
        peermem=peer,
        dmabuf=dmabuf,
        pcie=_fact(pcie_links, root, only),
        qos=_fact(roce_qos, root, only),
    )
