#!/usr/bin/env python3
"""Real RDMA devices without an RDMA NIC: Soft-RoCE (rdma_rxe) in a QEMU guest (root only).

    python tests/cluster/softroce.py check
    python tests/cluster/softroce.py run [--nodes N] [--rails R] [--leaves K] [--throttle NODE:RAIL:RATE]...
        [--loss NODE:RAIL:PERCENT]... [--delay NODE:RAIL:TIME]... [--throttle-uplink LEAF:RAIL:RATE]...
        [--timeout S] [--cpus N] -- COMMAND...
    python tests/cluster/softroce.py fault [--clear] [--throttle|--loss|--delay NODE:RAIL:VALUE]...
        [--throttle-uplink LEAF:RAIL:RATE]...
        (inside the guest, from COMMAND: change the links' faults between two runs)

`run` boots Debian's kernel (the package linux-image-amd64 depends on, fetched with
`apt-get download` and unpacked into a cache outside the checkout, never installed) under
QEMU's software emulation (TCG; the KVM of these machines cannot boot Debian kernels), with
the host's root file system shared read-only and the checkout shared read-write at the same
path, so the guest runs the host's own Python, venv, pyverbs and perftest.

Inside, for every emulated node n (1..N) and rail r (0..R-1):
- a veth pair ``n<n>r<r>`` (198.18.<r+1>.<n>/24, the node's end) -- ``n<n>r<r>p`` (the
  switch port), the port attached to bridge ``rail<r>`` (one bridge per rail: a rail plane);
- an rxe device ``rxe_n<n>r<r>`` on ``n<n>r<r>``;
- policy routing (a route table per node end, ``oif`` rules, ``iif ... lookup local`` and the
  ``local`` rule moved after them) so that traffic between two nodes' devices of a rail leaves
  one node's veth, crosses the bridge and enters the other's: all devices live in one network
  namespace (rxe does not work across namespaces), and without these rules the kernel would
  deliver local addresses through ``lo``.
- ``--throttle``, ``--loss`` and ``--delay`` put a tbf / netem qdisc on both ends of one
  node's rail link, so only that link is affected.
- ``--leaves K``: each rail is a switch tree instead of one bridge: bridge ``rail<r>`` is the
  spine, K leaf bridges ``r<r>l<L>`` join it through uplink veths ``r<r>u<L>`` (leaf side) --
  ``r<r>s<L>`` (spine side), and each node's port is on its leaf, the nodes in contiguous blocks
  (tests/cluster/emutree.py). The tree's ``topology.conf`` (``leaf1``..``leafK``, ``spine``) is
  written for COMMAND, and ``ACCEPTANCE_TOPOLOGY`` names it unless the caller set it.
  ``--throttle-uplink LEAF:RAIL:RATE`` puts a tbf on both ends of that leaf's uplink.

COMMAND runs in the current directory with ``ulimit -l unlimited`` and
``ACCEPTANCE_DEVICE_MAP`` naming a JSON file ``{"node1": ["rxe_n1r0", "rxe_n1r1"], ...}``
(list index = rail): `acceptance run --nodes N --ranks-per-node R` then measures node n's
rail r through node n's own device. COMMAND may change the faults between two runs with
`softroce.py fault` (one guest, several scenarios: the rig's tests do that).

The guest has one vCPU unless --cpus says otherwise. Under TCG on a host with two cores and
anything else running, a guest with two vCPUs waits for the host to schedule the other vCPU's
thread whenever one wakes the other (an interrupt, a packet for the other CPU): milliseconds per
round trip on some pairs and not others, and bandwidth 3x apart between healthy links. With one
vCPU every rank and the kernel's RDMA work share one CPU; the ranks' polls yield it (the verbs
engine does when there are more ranks than CPUs), so a round trip is a few context switches,
healthy links measure alike, and the guest boots in half the time. Its output is streamed here and `run` exits with its exit
code: 124 when --timeout passed (with the tail of the guest console), 2 when the rig cannot
start. Nothing is left running when `run` returns.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emutree  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ACCEPTANCE_SOFTROCE_CACHE", "/var/cache/acceptance-softroce"))
GUEST_TMPFS = ("/tmp", "/run", "/var/tmp")  # the guest's own, empty (INIT below)
META_PACKAGE = "linux-image-amd64"
DEVICE_MAP_ENV = "ACCEPTANCE_DEVICE_MAP"
PLAN_ENV = "SOFTROCE_PLAN"  # inside the guest: the plan, for `softroce.py fault`
TOPOLOGY_ENV = "ACCEPTANCE_TOPOLOGY"  # with --leaves: the tree's topology.conf, for `acceptance run`
# Debian packages the rig needs on the host (the guest uses the host's root file system).
PACKAGES = {
    "qemu-system-x86": "qemu-system-x86_64",
    "busybox-static": "/bin/busybox",
    "cpio": "cpio",
    "kmod": "depmod",
    "iproute2": "rdma",
    "rdma-core": "rdma",
    "ibverbs-providers": None,
    "ibverbs-utils": "ibv_devinfo",
    "perftest": "ib_write_bw",
    "python3-pyverbs": None,
}
INITRD_MODULES = ("virtio_pci", "9pnet_virtio", "9p")
GUEST_MODULES = ("rdma_rxe", "ib_uverbs", "rdma_ucm", "veth", "bridge", "sch_tbf", "sch_netem")
# MPI's own traffic stays off the rxe devices: UCX (the mpich wheel's default netmod) would
# otherwise open UD endpoints on them, which time out under emulation, and its packets would
# move the counters the harness judges. Overridable from the host environment.
GUEST_ENV = {"UCX_TLS": "self,sm,tcp"}
# The guest's home: shared read-write and kept between runs, so caches (matplotlib's font cache
# takes ten seconds to build under emulation) are built once per machine.
GUEST_HOME = CACHE / "home"
PASSED_ENV = ("TERM", "PYTHONHASHSEED", "MPIR_CVAR_CH4_NETMOD", "FI_PROVIDER")
MSIZE = 512 * 1024  # 9p message size: fewer round trips for Python imports over 9p


class RigError(Exception):
    """The rig cannot run here; str() says what is missing and how to get it."""


# ---- what the host has -------------------------------------------------------------------------


def _installed(package: str) -> bool:
    return subprocess.run(["dpkg", "-s", package], capture_output=True).returncode == 0


def _which(exe: str) -> str | None:
    if exe.startswith("/"):
        return exe if os.access(exe, os.X_OK) else None
    return shutil.which(exe) or next((str(Path(d, exe)) for d in ("/usr/sbin", "/sbin")
                                      if os.access(Path(d, exe), os.X_OK)), None)


def host_checks() -> list[tuple[str, bool, str]]:
    """(what, ok, detail) for everything `run` needs on the host."""
    rows = [("root", os.geteuid() == 0, "the rig must run as root (QEMU's 9p share of / as root)")]
    for pkg, exe in PACKAGES.items():
        ok = _installed(pkg) and (exe is None or _which(exe) is not None)
        rows.append((pkg, ok, "installed" if ok else f"missing: apt-get install -y --no-install-recommends {pkg}"))
    # The guest reads the unpacked kernel's modules from the host's root, where its own tmpfs hides these.
    hidden = next((d for d in GUEST_TMPFS if CACHE.resolve().is_relative_to(d)), None)
    rows.append(("cache folder", hidden is None, f"{CACHE}" if hidden is None else
                 f"{CACHE} is under {hidden}, which the guest mounts as its own tmpfs: set "
                 f"ACCEPTANCE_SOFTROCE_CACHE to a folder elsewhere"))
    pyverbs = subprocess.run(["/usr/bin/python3", "-c", "import pyverbs.device"], capture_output=True, text=True)
    rows.append(("pyverbs import", pyverbs.returncode == 0,
                 "import pyverbs.device works" if pyverbs.returncode == 0 else pyverbs.stderr.strip()[-200:]))
    try:
        kernel = cached_kernel()
        rows.append(("guest kernel", kernel is not None,
                     f"cached: {kernel}" if kernel else f"not cached: `run` fetches {resolve_kernel_package()}"))
    except RigError as exc:
        rows.append(("guest kernel", False, str(exc)))
    return rows


def unavailable_reason() -> str | None:
    """Why `run` cannot work here (None when it can); the guest kernel is fetched on demand."""
    missing = [f"{what}: {detail}" for what, ok, detail in host_checks() if not ok and what != "guest kernel"]
    return "; ".join(missing) or None


# ---- the guest kernel -----------------------------------------------------------------------------


def resolve_kernel_package() -> str:
    """The versioned kernel package linux-image-amd64 depends on (e.g. linux-image-6.1.0-57-amd64)."""
    def depends() -> list[str]:
        out = subprocess.run(["apt-cache", "depends", META_PACKAGE], capture_output=True, text=True)
        return re.findall(r"Depends:\s*(linux-image-\S+)", out.stdout)

    found = depends()
    if not found and os.geteuid() == 0:  # a fresh machine may have no package lists yet
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
        found = depends()
    if not found:
        raise RigError(f"`apt-cache depends {META_PACKAGE}` names no kernel package "
                       "(no Debian package lists? run apt-get update)")
    return found[0]


@dataclass(frozen=True)
class Kernel:
    version: str          # e.g. 6.1.0-57-amd64
    root: Path            # the unpacked package: boot/vmlinuz-<v>, lib/modules/<v>

    @property
    def image(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.version}"

    def __str__(self) -> str:
        return f"{self.version} in {self.root}"


def _kernel_at(version: str) -> Kernel:
    return Kernel(version, CACHE / f"kernel-{version}")


def cached_kernel() -> Kernel | None:
    """The cached kernel for today's linux-image-amd64, when it is complete."""
    kernel = _kernel_at(resolve_kernel_package().removeprefix("linux-image-"))
    return kernel if (kernel.root / ".complete").exists() else None


def fetch_kernel(log=print) -> Kernel:
    """Download, unpack (no install, no hooks), depmod and build the initramfs, once per version."""
    package = resolve_kernel_package()
    kernel = _kernel_at(package.removeprefix("linux-image-"))
    if (kernel.root / ".complete").exists():
        return kernel
    log(f"softroce: fetching {package} into {kernel.root} (once)")
    CACHE.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(kernel.root, ignore_errors=True)
    kernel.root.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        got = subprocess.run(["apt-get", "download", package], cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob("*.deb"))
        if got.returncode != 0 or not debs:
            raise RigError(f"apt-get download {package} failed: {got.stderr.strip()[-300:]}")
        subprocess.run(["dpkg", "-x", str(debs[0]), str(kernel.root)], check=True)
    config = kernel.root / "boot" / f"config-{kernel.version}"
    if not re.search(r"^CONFIG_RDMA_RXE=[ym]", config.read_text(), re.M):
        raise RigError(f"{package} has no Soft-RoCE (CONFIG_RDMA_RXE is not set in {config})")
    subprocess.run(["depmod", "-b", str(kernel.root), kernel.version], check=True)
    (kernel.root / ".complete").touch()
    return kernel


INIT = r"""#!/bin/busybox sh
# PID 1 of the initramfs: mount the host's / (read-only) and the rig's shares, then hand over.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
for m in $(cat /mods/order); do insmod /mods/$m || echo "initrd: insmod $m failed"; done
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
RIG=$(arg rig); CONFIG=$(arg config); SHARES=$(arg shares)
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=MSIZE,cache=loose hostroot /newroot \
  || { echo "initrd: cannot mount the host's root"; poweroff -f; }
for d in GUEST_TMPFS; do mount -t tmpfs -o mode=1777 tmpfs /newroot/$d; done
i=0
for path in $(echo $SHARES | tr , ' '); do
  mkdir -p /newroot$path
  # share0 is the rig's run folder, which the host reads while the guest writes: no caching.
  # The others (home, checkout) are the guest's alone while it runs: cached, since Python
  # imports from the venv over uncached 9p take most of a run's time.
  cache=loose; [ $i = 0 ] && cache=none
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=MSIZE,cache=$cache share$i /newroot$path \
    || { echo "initrd: cannot mount share$i at $path"; poweroff -f; }
  i=$((i + 1))
done
mount --move /dev /newroot/dev; mkdir -p /newroot/dev/shm /newroot/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm; mount -t devpts devpts /newroot/dev/pts
mount --move /proc /newroot/proc; mount --move /sys /newroot/sys
exec switch_root /newroot /usr/bin/python3 $RIG guest $CONFIG
""".replace("MSIZE", str(MSIZE)).replace("GUEST_TMPFS", " ".join(d.lstrip("/") for d in GUEST_TMPFS))


def build_initrd(kernel: Kernel, target: Path) -> None:
    """A tiny initramfs: static busybox and the virtio / 9p modules, uncompressed."""
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        t = Path(tmp)
        for d in ("bin", "mods", "proc", "sys", "dev", "newroot"):
            (t / d).mkdir()
        shutil.copy("/bin/busybox", t / "bin" / "busybox")
        order: list[str] = []
        for module in INITRD_MODULES:
            deps = subprocess.run(["modprobe", "-d", str(kernel.root), "-S", kernel.version, "--show-depends",
                                   module], capture_output=True, text=True, check=True).stdout
            for line in deps.splitlines():
                parts = line.split()
                if len(parts) < 2 or parts[0] != "insmod":
                    continue
                src = Path(parts[1])
                name = src.name.removesuffix(".xz").removesuffix(".zst")
                if name in order:
                    continue
                if src.suffix == ".xz":
                    data = subprocess.run(["xz", "-dc", str(src)], capture_output=True, check=True).stdout
                elif src.suffix == ".zst":
                    data = subprocess.run(["zstd", "-qdc", str(src)], capture_output=True, check=True).stdout
                else:
                    data = src.read_bytes()
                (t / "mods" / name).write_bytes(data)
                order.append(name)
        (t / "mods" / "order").write_text("\n".join(order) + "\n")
        (t / "init").write_text(INIT)
        (t / "init").chmod(0o755)
        files = subprocess.run(["find", "."], cwd=t, capture_output=True, text=True, check=True).stdout
        cpio = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=t, input=files.encode(),
                              capture_output=True, check=True).stdout
        gz = subprocess.run(["gzip", "-1"], input=cpio, capture_output=True, check=True).stdout
        target.write_bytes(gz)


# ---- the rig's plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkFault:
    """A qdisc on both ends of node's rail link (or, with leaf, of that leaf's uplink on the rail):
    tbf (rate), or netem (loss / delay)."""

    node: int             # 0 for an uplink
    rail: int
    kind: str             # throttle | loss | delay
    value: str            # 20mbit | 5% | 10ms
    leaf: int = 0         # an uplink's leaf

    def ends(self) -> tuple[str, str]:
        if self.leaf:
            return uplink_ends(self.leaf, self.rail)
        link = node_link(self.node, self.rail)
        return link, f"{link}p"

    def __str__(self) -> str:
        where = f"leaf{self.leaf}'s uplink on rail {self.rail}" if self.leaf else f"node{self.node}:{self.rail}"
        return f"{self.kind} {where}:{self.value}"

    def qdisc(self) -> list[str]:
        if self.kind == "throttle":
            # A queue that holds what the harness has in flight (verbs.tx_depth 8 x 64 KiB in the softroce
            # profile): a throttled link is slow, not lossy. With "latency 400ms" (100 KB at 2 Mbit/s) tbf
            # dropped writes and READs, which rxe retransmitted: counter findings on both ends, and a READ
            # that failed its retries. 600 KB is 2.4 s at 2 Mbit/s, inside rxe's 4.3 s ACK timeout.
            return ["tbf", "rate", self.value, "burst", "32kbit", "limit", "600kb"]
        if self.kind == "loss":
            return ["netem", "loss", self.value]
        return ["netem", "delay", self.value]


UNITS = {"throttle": r"\d+(\.\d+)?([kmg]?bit|[kmg]?bps)", "loss": r"\d+(\.\d+)?%",
         "delay": r"\d+(\.\d+)?(us|ms|s)"}
EXAMPLES = {"throttle": "node2:1:20mbit", "loss": "node2:1:5%", "delay": "node2:1:10ms"}


def parse_fault(kind: str, text: str, nodes: int, rails: int) -> LinkFault:
    m = re.fullmatch(r"(?:node)?(\d+):(\d+):(\S+)", text)
    if not m:
        raise RigError(f"--{kind} {text!r}: expected NODE:RAIL:VALUE, e.g. {EXAMPLES[kind]}")
    node, rail, value = int(m[1]), int(m[2]), m[3]
    if not 1 <= node <= nodes:
        raise RigError(f"--{kind} {text!r}: node {node} is not one of node1..node{nodes}")
    if not 0 <= rail < rails:
        raise RigError(f"--{kind} {text!r}: rail {rail} is not one of 0..{rails - 1}")
    if not re.fullmatch(UNITS[kind], value):
        raise RigError(f"--{kind} {text!r}: {value!r} is not a value like {EXAMPLES[kind].split(':')[-1]}")
    return LinkFault(node, rail, kind, value)


def parse_uplink_fault(text: str, leaves: int, rails: int) -> LinkFault:
    """--throttle-uplink LEAF:RAIL:RATE"""
    m = re.fullmatch(r"(leaf\d+|\d+):(\d+):(\S+)", text)
    if not m:
        raise RigError(f"--throttle-uplink {text!r}: expected LEAF:RAIL:RATE, e.g. leaf2:1:20mbit")
    try:
        leaf = emutree.leaf_index(m[1], leaves)
    except ValueError as exc:
        raise RigError(f"--throttle-uplink {text!r}: {exc}") from None
    rail, value = int(m[2]), m[3]
    if not 0 <= rail < rails:
        raise RigError(f"--throttle-uplink {text!r}: rail {rail} is not one of 0..{rails - 1}")
    if not re.fullmatch(UNITS["throttle"], value):
        raise RigError(f"--throttle-uplink {text!r}: {value!r} is not a rate like 20mbit")
    return LinkFault(0, rail, "throttle", value, leaf=leaf)


def parse_faults(args, nodes: int, rails: int, leaves: int) -> list[LinkFault]:
    """Every fault option of `run` or `fault`, parsed and checked against the plan's shape."""
    return ([parse_fault(kind, text, nodes, rails) for kind in ("throttle", "loss", "delay")
             for text in getattr(args, kind)]
            + [parse_uplink_fault(text, leaves, rails) for text in args.throttle_uplink])


@dataclass
class Plan:
    """What the guest sets up and runs; written as JSON into the run folder for the guest."""

    nodes: int
    rails: int
    command: list[str]
    cwd: str
    env: dict[str, str]
    faults: list[LinkFault] = field(default_factory=list)
    work: str = ""
    leaves: int = 0       # leaf switches per rail; 0: one bridge per rail

    @staticmethod
    def load(path: str) -> Plan:
        data = json.loads(Path(path).read_text())
        data["faults"] = [LinkFault(**f) for f in data["faults"]]
        return Plan(**data)


def node_link(node: int, rail: int) -> str:
    return f"n{node}r{rail}"


def device_name(node: int, rail: int) -> str:
    return f"rxe_{node_link(node, rail)}"


def address(node: int, rail: int) -> str:
    return f"198.18.{rail + 1}.{node}"


def uplink_ends(leaf: int, rail: int) -> tuple[str, str]:
    """A leaf's uplink veth on a rail: the leaf's end, the spine's end."""
    return f"r{rail}u{leaf}", f"r{rail}s{leaf}"


def device_map(nodes: int, rails: int) -> dict[str, list[str]]:
    return {f"node{n}": [device_name(n, r) for r in range(rails)] for n in range(1, nodes + 1)}


# ---- inside the guest (PID 1) ----------------------------------------------------------------------


def _sh(*cmd: str) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RigError(f"{' '.join(cmd)} failed ({p.returncode}): {(p.stderr or p.stdout).strip()}")


def _sysctl(key: str, value: str) -> None:
    Path("/proc/sys", key.replace(".", "/")).write_text(value)


def _guest_network(plan: Plan, modroot: str) -> None:
    for module in GUEST_MODULES:
        _sh("modprobe", "-d", modroot, module)
    _sh("ip", "link", "set", "lo", "up")
    # Every packet crosses a CPU's backlog twice (veth -> bridge -> veth), and with one vCPU both rails'
    # windows share one backlog: at the default 1000 a slow vCPU dropped packets of healthy links, which
    # rxe retransmitted and the error counters then blamed on them.
    _sysctl("net.core.netdev_max_backlog", "100000")
    for key in ("all", "default"):
        _sysctl(f"net.ipv4.conf.{key}.rp_filter", "0")
        _sysctl(f"net.ipv4.conf.{key}.accept_local", "1")
        # Every address is local to this one kernel: without these, each node's veth on a rail
        # answers ARP for every other node's address too, and traffic goes to the wrong device.
        _sysctl(f"net.ipv4.conf.{key}.arp_ignore", "1")
        _sysctl(f"net.ipv4.conf.{key}.arp_announce", "2")
    port_bridge = {}
    for r in range(plan.rails):
        _sh("ip", "link", "add", f"rail{r}", "type", "bridge")
        _sh("ip", "link", "set", f"rail{r}", "up")
        port_bridge.update({(n, r): f"rail{r}" for n in range(1, plan.nodes + 1)})
        for name, members in (emutree.leaf_blocks(plan.nodes, plan.leaves).items() if plan.leaves else ()):
            leaf = int(name[4:])
            bridge, (up, down) = f"r{r}l{leaf}", uplink_ends(leaf, r)
            _sh("ip", "link", "add", bridge, "type", "bridge")
            _sh("ip", "link", "set", bridge, "up")
            _sh("ip", "link", "add", up, "type", "veth", "peer", "name", down)
            _sh("ip", "link", "set", up, "master", bridge)
            _sh("ip", "link", "set", down, "master", f"rail{r}")
            for end in (up, down):  # the rail's CPU, as for its nodes' ends below
                Path(f"/sys/class/net/{end}/queues/rx-0/rps_cpus").write_text(f"{1 << (r % os.cpu_count()):x}")
                _sh("ip", "link", "set", end, "up")
            port_bridge.update({(n, r): bridge for n in members})
    table = 100
    for n in range(1, plan.nodes + 1):
        for r in range(plan.rails):
            link, addr = node_link(n, r), address(n, r)
            _sh("ip", "link", "add", link, "type", "veth", "peer", "name", f"{link}p")
            _sh("ip", "link", "set", f"{link}p", "master", port_bridge[n, r])
            _sysctl(f"net.ipv4.conf.{link}.rp_filter", "0")
            _sysctl(f"net.ipv4.conf.{link}.accept_local", "1")
            _sh("ip", "addr", "add", f"{addr}/24", "dev", link)
            # One CPU handles every packet a rail's veth ends receive (RPS): veths otherwise enqueue
            # on whichever CPU sent, which reorders a QP's packets, and rxe then retransmits.
            for end in (link, f"{link}p"):
                Path(f"/sys/class/net/{end}/queues/rx-0/rps_cpus").write_text(f"{1 << (r % os.cpu_count()):x}")
            _sh("ip", "link", "set", f"{link}p", "up")
            _sh("ip", "link", "set", link, "up")
            # rxe looks its route up with the device as oif: send out of this node's own veth.
            _sh("ip", "route", "add", f"198.18.{r + 1}.0/24", "dev", link, "src", addr, "table", str(table))
            # The device's own address stays local (a QP connected to its own port loops back in rxe).
            _sh("ip", "route", "add", "local", addr, "dev", link, "table", str(table))
            _sh("ip", "rule", "add", "pref", "10", "iif", link, "lookup", "local")
            _sh("ip", "rule", "add", "pref", "20", "oif", link, "lookup", str(table))
            table += 1
    _sh("ip", "rule", "add", "pref", "1000", "lookup", "local")
    _sh("ip", "rule", "del", "pref", "0", "lookup", "local")
    for fault in plan.faults:
        apply_fault(fault)
    for n in range(1, plan.nodes + 1):
        for r in range(plan.rails):
            _sh("rdma", "link", "add", device_name(n, r), "type", "rxe", "netdev", node_link(n, r))


def apply_fault(fault: LinkFault) -> None:
    """The fault's qdisc on both ends of its link (replacing any earlier one there)."""
    for end in fault.ends():
        _sh("tc", "qdisc", "replace", "dev", end, "root", *fault.qdisc())


def clear_faults(plan: Plan) -> None:
    """Every link back to its plain qdisc."""
    ends = [(node_link(n, r), f"{node_link(n, r)}p") for n in range(1, plan.nodes + 1) for r in range(plan.rails)]
    ends += [uplink_ends(leaf, r) for leaf in range(1, plan.leaves + 1) for r in range(plan.rails)]
    for pair in ends:
        for end in pair:
            subprocess.run(["tc", "qdisc", "del", "dev", end, "root"], capture_output=True)


def guest_fault(args) -> int:
    """`softroce.py fault ...` inside the guest: change the links' faults between two commands."""
    path = os.environ.get(PLAN_ENV)
    if not path or not Path(path).is_file():
        print(f"softroce: fault runs inside the guest of `softroce.py run` (no {PLAN_ENV} here)", file=sys.stderr)
        return 2
    plan = Plan.load(path)
    try:
        faults = parse_faults(args, plan.nodes, plan.rails, plan.leaves)
        if args.clear:
            clear_faults(plan)
        for fault in faults:
            apply_fault(fault)
    except RigError as exc:
        print(f"softroce: {exc}", file=sys.stderr)
        return 2
    said = ", ".join(map(str, faults))
    print(f"softroce: links {'cleared' if args.clear else ''}{'; ' if args.clear and said else ''}{said}", flush=True)
    return 0


def _wait_ready(plan: Plan, timeout: float = 60) -> None:
    """Every device's port ACTIVE with its IPv4 RoCE v2 GID in the table."""
    deadline = time.monotonic() + timeout
    pending = [(n, r) for n in range(1, plan.nodes + 1) for r in range(plan.rails)]
    while pending:
        n, r = pending[0]
        port = Path("/sys/class/infiniband", device_name(n, r), "ports", "1")
        state = (port / "state").read_text() if (port / "state").exists() else ""
        mapped = "0000:0000:0000:0000:0000:ffff:" + "%02x%02x:%02x%02x" % tuple(map(int, address(n, r).split(".")))
        gids = [g.read_text().strip() for g in (port / "gids").glob("*")] if port.exists() else []
        if "ACTIVE" in state and mapped in gids:
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise RigError(f"{device_name(n, r)} not ready after {timeout:g} s: state {state.strip()!r}, "
                           f"{mapped} not among its GIDs")
        time.sleep(0.1)


def guest_main(plan_path: str) -> None:
    """PID 1 in the guest: set up the rails, run the command, record its exit code, power off."""
    plan = Plan.load(plan_path)
    work = Path(plan.work)
    log = open(work / "output", "ab", buffering=0)
    rc = 2
    try:
        os.environ.update(PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME=str(GUEST_HOME),
                          LANG="C.UTF-8")
        modroot = str(work / "modroot")
        wrapper = Path("/run/softroce-modprobe")
        wrapper.write_text(f"#!/bin/sh\nexec /sbin/modprobe -d {modroot} \"$@\"\n")
        wrapper.chmod(0o755)
        Path("/proc/sys/kernel/modprobe").write_text(str(wrapper))
        import resource
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        _guest_network(plan, modroot)
        _wait_ready(plan)
        devices = Path("/run/softroce-devices.json")
        devices.write_text(json.dumps(device_map(plan.nodes, plan.rails)))
        env = {**os.environ, **plan.env, DEVICE_MAP_ENV: str(devices), PLAN_ENV: plan_path}
        if plan.leaves:  # the tree the command localizes over, unless the caller named another
            topology = work / "topology.conf"
            topology.write_text(emutree.topology_conf(plan.nodes, plan.leaves))
            env.setdefault(TOPOLOGY_ENV, str(topology))
        (work / "ready").touch()
        proc = subprocess.Popen(plan.command, cwd=plan.cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        rc = proc.wait()
    except Exception as exc:  # noqa: BLE001 - reported to the host, then power off either way
        log.write(f"softroce guest: {type(exc).__name__}: {exc}\n".encode())
        rc = 2 if not isinstance(exc, FileNotFoundError) else 127
    finally:
        (work / "rc").write_text(str(rc))
        log.close()
        os.sync()
        os.execv("/bin/busybox", ["busybox", "poweroff", "-f"])


# ---- on the host ------------------------------------------------------------------------------------


def _shares(cwd: Path) -> list[Path]:
    """Host folders the guest sees read-write at the same path: the checkout, and cwd when outside it."""
    shares = [CHECKOUT]
    if not cwd.is_relative_to(CHECKOUT):
        shares.append(cwd)
    return shares


def _stream(path: Path, pos: int, out) -> int:
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        return pos
    if data:
        out.write(data)
        out.flush()
    return pos + len(data)


def run(plan: Plan, timeout: float, memory_mib: int = 3072, cpus: int = 1, log=print) -> int:
    """Boot the guest, run plan.command in it, stream its output; the command's exit code."""
    reason = unavailable_reason()
    if reason:
        raise RigError(reason)
    kernel = fetch_kernel(log)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=CACHE))
    qemu = None
    try:
        (work / "modroot" / "lib" / "modules").mkdir(parents=True)
        (work / "modroot" / "lib" / "modules" / kernel.version).symlink_to(
            kernel.root / "lib" / "modules" / kernel.version)
        build_initrd(kernel, work / "initrd.cpio.gz")
        plan.work = str(work)
        (work / "plan.json").write_text(json.dumps(asdict(plan)))
        GUEST_HOME.mkdir(parents=True, exist_ok=True)
        shares = [work, GUEST_HOME, *_shares(Path(plan.cwd))]
        cmdline = (f"console=ttyS0 panic=-1 loglevel=4 rig={Path(__file__).resolve()} "
                   f"config={work / 'plan.json'} shares={','.join(map(str, shares))}")
        argv = ["qemu-system-x86_64", "-accel", "tcg,thread=multi", "-cpu", "max", "-m", str(memory_mib),
                "-smp", str(cpus), "-nodefaults", "-display", "none", "-no-reboot",
                "-serial", f"file:{work / 'console.log'}",
                "-kernel", str(kernel.image), "-initrd", str(work / "initrd.cpio.gz"), "-append", cmdline,
                "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"]
        for i, path in enumerate(shares):
            argv += ["-virtfs", f"local,path={path},mount_tag=share{i},security_model=none,multidevs=remap"]
        started = time.monotonic()
        qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=open(work / "qemu.err", "wb"), start_new_session=True,
                                preexec_fn=_die_with_parent)
        _session_nice(qemu.pid, os.getpriority(os.PRIO_PROCESS, 0))
        pos, ready = 0, False
        out = sys.stdout.buffer
        while qemu.poll() is None:
            if not ready and (work / "ready").exists():
                ready = True
                log(f"softroce: guest ready in {time.monotonic() - started:.0f} s "
                    f"({plan.nodes} node(s) x {plan.rails} rail(s)"
                    f"{f', {plan.leaves} leaves per rail' if plan.leaves else ''}, kernel {kernel.version})")
            pos = _stream(work / "output", pos, out)
            if time.monotonic() - started > timeout:
                _stop(qemu)
                _stream(work / "output", pos, out)
                log(f"softroce: timed out after {timeout:g} s; the guest console's last lines:")
                log(_tail(work / "console.log"))
                return 124
            time.sleep(0.2)
        _stream(work / "output", pos, out)
        if (work / "rc").exists():
            return int((work / "rc").read_text())
        err = (work / "qemu.err").read_text(errors="replace").strip()
        log(f"softroce: the guest ended without an exit code (QEMU exit {qemu.returncode}"
            f"{': ' + err[-500:] if err else ''}); the guest console's last lines:")
        log(_tail(work / "console.log"))
        return 2
    finally:
        if qemu is not None:
            _stop(qemu)
        if not os.environ.get("SOFTROCE_KEEP"): shutil.rmtree(work, ignore_errors=True)


def _session_nice(pid: int, nice: int) -> None:
    """Give the guest's session the nice this rig runs at. Under autogroup scheduling (Linux's
    default: /proc/sys/kernel/sched_autogroup_enabled) a process's nice counts only against the
    processes of its own session, and each session (QEMU's, each `acceptance run` of the tests beside
    it) gets an equal share of the CPU; the session's own nice (/proc/PID/autogroup) weighs it
    against the others. Without autogroup, or without the right to lower it, nothing changes."""
    if nice:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")


def _die_with_parent() -> None:
    """In the QEMU child: SIGKILL when the rig dies, even by SIGKILL (PR_SET_PDEATHSIG)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no console output)"


def _on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["guest"]:
        guest_main(argv[1])
        return 0
    ap = argparse.ArgumentParser(prog="softroce.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="what the rig needs and whether this machine has it")
    f = sub.add_parser("fault", help="inside the guest, between two commands: change the links' faults",
                       epilog="example (in the guest): softroce.py fault --clear --loss node2:0:1%%")
    f.add_argument("--clear", action="store_true", help="remove every fault first")
    for kind, what in (("throttle", "tc tbf"), ("loss", "netem packet loss"), ("delay", "netem delay")):
        f.add_argument(f"--{kind}", action="append", default=[], metavar=f"NODE:RAIL:{kind.upper()}",
                       help=f"{what} on both ends of that node's rail link")
    f.add_argument("--throttle-uplink", action="append", default=[], metavar="LEAF:RAIL:RATE",
                   help="tc tbf on both ends of that leaf's uplink (run --leaves)")
    p = sub.add_parser("run", help="boot the guest and run COMMAND on its rxe devices",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example: softroce.py run --nodes 2 --rails 2 --throttle node2:1:20mbit -- "
                              ".venv/bin/acceptance run --nodes 2 --ranks-per-node 2 --profile softroce")
    p.add_argument("--nodes", type=int, default=2, help="emulated nodes (default 2)")
    p.add_argument("--rails", type=int, default=2, help="rails per node: rxe devices per node (default 2)")
    p.add_argument("--leaves", type=int, default=0, metavar="K",
                   help="a switch tree per rail: K leaf bridges under one spine, with its topology.conf "
                        "(default 0: one bridge per rail)")
    p.add_argument("--throttle", action="append", default=[], metavar="NODE:RAIL:RATE",
                   help="tc tbf on both ends of that node's rail link, e.g. node2:1:20mbit")
    p.add_argument("--loss", action="append", default=[], metavar="NODE:RAIL:PERCENT",
                   help="netem packet loss on both ends of that node's rail link, e.g. node2:1:5%%")
    p.add_argument("--delay", action="append", default=[], metavar="NODE:RAIL:TIME",
                   help="netem delay on both ends of that node's rail link, e.g. node2:1:10ms")
    p.add_argument("--throttle-uplink", action="append", default=[], metavar="LEAF:RAIL:RATE",
                   help="tc tbf on both ends of that leaf's uplink on that rail (with --leaves), e.g. leaf2:1:20mbit")
    p.add_argument("--timeout", type=float, default=900, help="seconds before the guest is stopped (exit 124)")
    p.add_argument("--memory", type=int, default=3072, help="guest memory in MiB (default 3072)")
    p.add_argument("--cpus", type=int, default=1, help="guest vCPUs (default 1: see the module docstring)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = ap.parse_args(argv)
    if args.cmd == "fault":
        return guest_fault(args)
    if args.cmd == "check":
        rows = host_checks()
        for what, ok, detail in rows:
            print(f"{what:18} {'ok     ' if ok else 'MISSING'} {detail}")
        return 0 if all(ok for what, ok, _ in rows if what != "guest kernel") else 1
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("run needs a COMMAND after --")
    if args.nodes < 1 or args.rails < 1 or args.nodes > 250:
        ap.error("--nodes must be 1..250 and --rails at least 1")
    if not 0 <= args.leaves <= args.nodes:
        ap.error(f"--leaves must be 0..{args.nodes} (the number of nodes)")
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        faults = parse_faults(args, args.nodes, args.rails, args.leaves)
        env = {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith(("ACCEPTANCE_", "UCX_"))}
        plan = Plan(args.nodes, args.rails, command, os.getcwd(), {**GUEST_ENV, **env}, faults, leaves=args.leaves)
        return run(plan, args.timeout, args.memory, args.cpus,
                   log=lambda m: print(m, file=sys.stderr, flush=True))
    except RigError as exc:
        print(f"softroce: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("softroce: interrupted; the guest was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
