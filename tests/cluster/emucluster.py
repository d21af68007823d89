#!/usr/bin/env python3
"""An emulated multi-node, multi-rail Slurm cluster on one machine (root only).

    python tests/cluster/emucluster.py up --nodes N --rails R [--leaves K [--spines S]]
    python tests/cluster/emucluster.py status
    python tests/cluster/emucluster.py throttle node3 1 20mbit
    python tests/cluster/emucluster.py throttle-uplink leaf2 1 20mbit
    python tests/cluster/emucluster.py restore
    python tests/cluster/emucluster.py link-down node2 1
    python tests/cluster/emucluster.py link-up node2 1
    python tests/cluster/emucluster.py down

Network (all addresses from 198.18.0.0/15, nothing leaves the machine):
- node K (1..N) is the network namespace ``acc-node<K>``;
- management: veth ``mgmt`` (198.18.0.K/24) in the namespace, peer ``acc-n<K>m`` on
  bridge ``acc-mgmt`` (198.18.0.254/24, the slurmctld address) in the root namespace;
- rail r (0..R-1): veth ``rail<r>`` (198.18.<r+1>.K/24) in the namespace, peer
  ``acc-n<K>r<r>`` on bridge ``acc-rail<r>`` (198.18.<r+1>.254/24, one switch plane);
- the root namespace routes between planes (net.ipv4.ip_forward=1 while up, the old
  value is restored on down); in each namespace 198.18.0.0/15 goes via the rail0
  gateway, and traffic sourced from rail r's address goes out rail r (policy rules),
  so cross-rail traffic works.
- ``up --leaves K``: every rail is a switch tree instead of one bridge. The rail's bridge
  ``acc-rail<r>`` (still the gateway) is its spine; K leaf bridges ``acc-r<r>l<L>`` each join it
  through an uplink veth, ``acc-r<r>u<L>`` on the leaf -- ``acc-r<r>s<L>`` on the spine; node K's
  rail port is on its leaf. Nodes go to the leaves in contiguous blocks (tests/cluster/emutree.py:
  6 nodes on 2 leaves are node1..3 on leaf1, node4..6 on leaf2), so a pair on one leaf never
  leaves it and a pair on two leaves crosses both leaves' uplinks and the spine. The tree is
  written as Slurm's ``topology.conf`` (``leaf1``..``leafK``, ``spine``) into the state folder,
  and site.env's ``ACCEPTANCE_TOPOLOGY`` names it, so the sbatch jobs localize over it.
- ``up --leaves K --spines S`` (S >= 2): each leaf is cabled to each of S spines (spine 1 the rail's
  bridge, the others ``acc-r<r>p<s>``; the cable to spine s is ``acc-r<r>u<L>p<s>`` -- ``acc-r<r>s<L>p<s>``,
  spine 1's keeps the names above). Every bridge forwards by destination from static entries (D-mod-K:
  a flow to node K from another leaf climbs to spine 1 + K mod S; emutree.TwoLevel), the leaf-spine
  ports neither learn nor flood (the tree has loops), and every node has a permanent ARP entry for
  each peer and the gateway. Each rail's cabling and forwarding tables are written as ibnetdiscover
  and ibroute print them (``cabling/rail<r>.topo``, ``routes/rail<r>.ibroute``), and site.env's
  ``ACCEPTANCE_TOPOLOGY`` and ``ACCEPTANCE_ROUTES`` name the two folders.

Slurm: munged (own key, own socket), slurmctld on 198.18.0.254:16817 and one
``slurmd -N node<K>`` per namespace (started with ``nsenter --net=/run/netns/acc-node<K>``,
listening on 198.18.0.K:17000+K). The config is written to /etc/slurm/slurm.conf (an
existing one is backed up and put back on down), so plain ``sbatch``/``srun``/``sinfo``
use this cluster while it is up. One partition ``emu`` (default, OverSubscribe=YES),
each node claims CPUs=R, MpiDefault=pmi2. State, logs and pid files live in
/run/acceptance-emucluster/, removed on down.

While up, /etc/acceptance/site.env holds the sbatch jobs' defaults for this cluster (the
`emulated` profile, pmi2, each rank's MPI traffic on its rail: SITE_DEFAULTS), so
``sbatch --wait -N 4 slurm/acceptance.sbatch`` needs no environment; down puts back any
site.env that was there before.

How ranks use their rail: a job must set, per rank,
``MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE=rail${SLURM_LOCALID} MPIR_CVAR_NOLOCAL=1``
so that MPICH (libfabric tcp provider) sends local rank i's traffic over rail i and never
over shared memory; e.g. inside the batch script::

    srun --mpi=pmi2 bash -c 'MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp \\
        FI_TCP_IFACE=rail$SLURM_LOCALID MPIR_CVAR_NOLOCAL=1 exec python prog.py'

``MPIR_CVAR_CH4_NETMOD=ofi`` matters: the PyPI mpich wheel (5.0.x) has both the ucx and
ofi netmods and picks ucx by default; ucx ignores the FI_* variables and, since all
"nodes" share one kernel, moves the data through shared memory, so no byte crosses the
rail link and a throttle has no effect (measured: ~20 Gbit/s with node2 rail0 at 20mbit).

``throttle NODE RAIL RATE`` puts a tbf qdisc on both ends of that node's rail link
(namespace side ``rail<r>`` egress and root side ``acc-n<K>r<r>`` egress); ``restore``
removes every qdisc we put on any link. ``throttle-uplink LEAF RAIL RATE`` does the same on both
ends of a leaf's uplink on that rail: every pair crossing the leaf slows, the pairs inside it do not.
Under several spines it needs ``--spine S``, and ``--direction up`` or ``down`` slows one end only.

``link-down NODE RAIL`` sets the namespace side ``rail<r>`` of that node's rail link down (a dead
port: the kernel drops the routes through it, the address stays); ``link-up NODE RAIL`` sets it up
again and puts back what ``up`` had set for that rail (address, routes, policy rule) if it is gone.
``status`` lists the links that are down.

``up --health-check SECONDS``: slurm.conf runs ``slurm/node-check.sh`` (``acceptance node-check
--slurm``) as Slurm's HealthCheckProgram every SECONDS on every node (HealthCheckNodeState=ANY), and
site.env also names the checkout's Python (ACCEPTANCE_PYTHON) and the node check's state folder
(ACCEPTANCE_NODE_CHECK_STATE, ``node-check/`` in the state folder, one file per node, gone on down).
``--health-check-program PATH`` runs another program instead (for tests). Without --health-check
there is no health check at all.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, also when run as a script
from localslurm import slurm_conf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emutree  # noqa: E402

STATE = Path("/run/acceptance-emucluster")
CHECKOUT = Path(__file__).resolve().parents[2]
NODE_CHECK = CHECKOUT / "slurm" / "node-check.sh"  # the HealthCheckProgram of `up --health-check`
SLURM_CONF = Path("/etc/slurm/slurm.conf")
MARK = "# managed by acceptance emucluster"
# The sbatch jobs' site defaults (slurm/common.sh): while up, a plain
# `sbatch --wait -N 4 slurm/acceptance.sbatch` runs with the emulated profile, each rank on its rail.
SITE_ENV = Path("/etc/acceptance/site.env")
SITE_DEFAULTS = {
    "ACCEPTANCE_PROFILE": "emulated",
    "ACCEPTANCE_SRUN_MPI": "pmi2",
    "ACCEPTANCE_RAIL_IFACE_PREFIX": "rail",  # FI_TCP_IFACE=rail<local rank>
    "FI_PROVIDER": "tcp",
    "MPIR_CVAR_CH4_NETMOD": "ofi",           # ucx would move the bytes through shared memory
    "MPIR_CVAR_NOLOCAL": "1",
    # Eight ranks share two cores: MPICH sleeps while it waits instead of spinning, so the pair being
    # measured gets the CPUs (2.5x faster, links 10x less apart in bandwidth).
    "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1",
}
CTLD_ADDR = "198.18.0.254"
CTLD_PORT = 16817
NS_PREFIX = "acc-node"
MGMT_BR = "acc-mgmt"
MARKER_ENV = "ACC_EMUCLUSTER"
# Per-rank environment that puts local rank i's MPI traffic on rail i (see the module docstring).
RANK_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "MPIR_CVAR_NOLOCAL": "1"}


def rank_env(local_id: int) -> dict:
    return {**RANK_ENV, "FI_TCP_IFACE": f"rail{local_id}"}


REQUIRED = ("ip", "tc", "bridge", "nsenter", "munged", "slurmctld", "slurmd", "sinfo", "sbatch", "srun", "scancel")


def _exe(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the emulated cluster needs root (network namespaces, bridges, slurmd)"
    missing = [n for n in REQUIRED if not (shutil.which(n) or Path("/usr/sbin", n).exists())]
    if missing:
        return f"missing tools: {', '.join(missing)} (install slurm-wlm, munge, iproute2, util-linux)"
    return None


def _run(cmd: list[str], check: bool = True, timeout: float = 30, env: dict | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if check and p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    return p


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run([_exe("ip"), *args], check=check)


def _node_name(node) -> str:
    s = str(node)
    return s if s.startswith("node") else f"node{int(s)}"


def _node_index(node) -> int:
    return int(_node_name(node)[4:])


def client_env(base: dict | None = None) -> dict:
    """Environment for Slurm clients that talk to the emulated cluster (default slurm.conf)."""
    return {k: v for k, v in (base or os.environ).items() if not k.startswith("SLURM_")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie counts as gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill(pid: int, wait: float = 5.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if not _alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


class EmuCluster:
    def __init__(self, state: Path = STATE):
        self.dir = Path(state)
        self.meta_file = self.dir / "meta.json"
        self.host = socket.gethostname().split(".")[0]

    # ---------------------------------------------------------------- layout
    def meta(self) -> dict | None:
        try:
            return json.loads(self.meta_file.read_text())
        except (OSError, ValueError):
            return None

    @property
    def nodes(self) -> list[str]:
        m = self.meta() or {}
        return [f"node{k}" for k in range(1, m.get("nodes", 0) + 1)]

    @property
    def rails(self) -> int:
        return (self.meta() or {}).get("rails", 0)

    @property
    def leaves(self) -> int:
        """Leaf switches per rail; 0 when every rail is one bridge."""
        return (self.meta() or {}).get("leaves", 0)

    @property
    def health_check(self) -> int:
        """HealthCheckInterval in seconds; 0 without a health check."""
        return (self.meta() or {}).get("health_check", 0)

    @property
    def node_check_state(self) -> Path | None:
        """The node check's state folder (site.env's ACCEPTANCE_NODE_CHECK_STATE) while up with a health check."""
        return self.dir / "node-check" if self.health_check else None

    @property
    def spines(self) -> int:
        """Spines per rail with --spines (every leaf cabled to each); 0 for one spine or none."""
        return (self.meta() or {}).get("spines", 0)

    @property
    def topology_conf(self) -> Path | None:
        """The tree's topology.conf while up with --leaves (one spine)."""
        return self.dir / "topology.conf" if self.leaves and not self.spines else None

    @property
    def cabling(self) -> Path:
        """With --spines: the folder of rail<N>.topo, each rail's cabling as ibnetdiscover prints it."""
        return self.dir / "cabling"

    @property
    def routes(self) -> Path:
        """With --spines: the folder of rail<N>.ibroute, each rail's forwarding tables as ibroute prints them."""
        return self.dir / "routes"

    @staticmethod
    def namespaces() -> list[str]:
        p = _ip("netns", "list", check=False)
        return sorted(line.split()[0] for line in p.stdout.splitlines() if line.startswith(NS_PREFIX))

    @staticmethod
    def links() -> list[str]:
        """Our links in the root namespace (bridges and veth peers)."""
        p = _ip("-o", "link", "show", check=False)
        names = []
        for line in p.stdout.splitlines():
            m = re.match(r"\d+: ([^:@]+)", line)
            if m and m.group(1).startswith("acc-"):
                names.append(m.group(1))
        return names

    @staticmethod
    def bridges() -> list[str]:
        p = _ip("-o", "link", "show", "type", "bridge", check=False)
        return [n for n in re.findall(r"^\d+: ([^:@]+)", p.stdout, re.MULTILINE) if n.startswith("acc-")]

    def run_in(self, node, cmd, **kw) -> subprocess.CompletedProcess:
        """Run a command (list, or str for a shell) in a node's network namespace."""
        ns = f"/run/netns/{NS_PREFIX}{_node_index(node)}"
        argv = ["nsenter", f"--net={ns}"] + (["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd))
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        kw.setdefault("check", False)
        return subprocess.run(argv, **kw)  # noqa: PLW1510 (check defaults to False via kw)

    # ---------------------------------------------------------------- up
    def healthy(self) -> bool:
        m = self.meta()
        if not m:
            return False
        st = self.status()
        want_ns = {f"{NS_PREFIX}{k}" for k in range(1, m["nodes"] + 1)}
        names = set(st["daemons"])
        want_d = {"munged", "slurmctld"} | {f"slurmd-node{k}" for k in range(1, m["nodes"] + 1)}
        return (want_ns <= set(st["namespaces"]) and want_d <= names and all(st["daemons"].values())
                and len(st["nodes"]) == m["nodes"] and all(s == "idle" for s in st["nodes"].values()))

    def up(self, nodes: int = 2, rails: int = 2, timeout: float = 60, leaves: int = 0, health_check: int = 0,
           health_check_program: str | Path | None = None, spines: int = 0) -> EmuCluster:
        """`health_check`: Slurm's HealthCheckInterval in seconds (0: no health check), running
        `health_check_program` (default slurm/node-check.sh) on every node. `spines` (2 or more, with
        `leaves`): every leaf cabled to each spine, forwarding by destination (module docstring)."""
        if not 1 <= nodes <= 250 or not 1 <= rails <= 200:
            raise ValueError("need 1..250 nodes and 1..200 rails")
        if leaves:
            emutree.leaf_blocks(nodes, leaves)  # ValueError for a bad count, before anything is built
        if spines > 1:
            emutree.TwoLevel(nodes, leaves, spines, 0)
        elif spines:
            raise ValueError("--spines is 2 or more (a tree of one spine is --leaves K alone)")
        if health_check < 0:
            raise ValueError("--health-check needs a positive number of seconds")
        program = str(Path(health_check_program or NODE_CHECK).resolve()) if health_check else None
        if program and not os.access(program, os.X_OK):
            raise ValueError(f"health check program not executable: {program}")
        shape = (f"{nodes} nodes x {rails} rails" + (f", {leaves} leaves per rail" if leaves else "")
                 + (f" under {spines} spines, D-mod-K" if spines else "")
                 + (f", health check every {health_check} s ({program})" if health_check else ""))
        m = self.meta()
        if (m and m.get("nodes") == nodes and m.get("rails") == rails and m.get("leaves", 0) == leaves
                and m.get("spines", 0) == spines
                and m.get("health_check", 0) == health_check and m.get("health_check_program") == program
                and self.healthy()):
            print(f"emucluster already up and healthy: {shape}")
            return self
        if m or self.namespaces() or self.links() or self.dir.exists():
            print("emucluster partially up or of another size: cleaning up first")
            self.down()
        try:
            self.dir.mkdir(parents=True)
            (self.dir / "log").mkdir()
            meta = {"nodes": nodes, "rails": rails, "leaves": leaves, "spines": spines, "host": self.host}
            if health_check:
                meta.update(health_check=health_check, health_check_program=program)
            self.meta_file.write_text(json.dumps(meta))
            self._net_up(nodes, rails, leaves, spines)
            self._write_conf(nodes, rails, health_check, program)
            extra = {}
            if spines:
                extra.update(self._write_fabric(nodes, rails, leaves, spines))
            elif leaves:
                self.topology_conf.write_text(emutree.topology_conf(nodes, leaves))
                extra["ACCEPTANCE_TOPOLOGY"] = str(self.topology_conf)
            if health_check:
                self.node_check_state.mkdir()
                extra["ACCEPTANCE_PYTHON"] = str(CHECKOUT / ".venv" / "bin" / "python")
                extra["ACCEPTANCE_NODE_CHECK_STATE"] = str(self.node_check_state)
            self._write_site_env(extra)
            self._start_munge()
            self._start_slurm(nodes)
            self._wait_idle(nodes, timeout)
        except BaseException:
            print(f"emucluster up failed; logs in {self.dir / 'log'} (kept as {self.dir}.failed-logs)",
                  file=sys.stderr)
            shutil.rmtree(f"{self.dir}.failed-logs", ignore_errors=True)
            try:
                shutil.copytree(self.dir / "log", f"{self.dir}.failed-logs")
            except OSError:
                pass
            self.down()
            raise
        print(f"emucluster up: {shape}, slurmctld {CTLD_ADDR}:{CTLD_PORT}, state {self.dir}"
              + (f", topology {self.topology_conf}" if self.topology_conf else "")
              + (f", cabling {self.cabling}, routes {self.routes}" if spines else ""))
        return self

    def _write_fabric(self, nodes: int, rails: int, leaves: int, spines: int) -> dict:
        """What the fabric's tools would print for the two-level trees, one file per rail: the cabling
        (ibnetdiscover) and the forwarding tables (ibroute); the site defaults that name them."""
        self.cabling.mkdir()
        self.routes.mkdir()
        for r in range(rails):
            tree = emutree.TwoLevel(nodes, leaves, spines, r)
            (self.cabling / f"rail{r}.topo").write_text(tree.ibnetdiscover())
            (self.routes / f"rail{r}.ibroute").write_text(tree.ibroute())
        return {"ACCEPTANCE_TOPOLOGY": str(self.cabling), "ACCEPTANCE_ROUTES": str(self.routes)}

    def _net_up(self, nodes: int, rails: int, leaves: int = 0, spines: int = 0) -> None:
        fwd = Path("/proc/sys/net/ipv4/ip_forward")
        (self.dir / "ip_forward.orig").write_text(fwd.read_text().strip())
        # bridges: management + one per rail
        for br, addr in [(MGMT_BR, f"{CTLD_ADDR}/24")] + [(f"acc-rail{r}", f"198.18.{r + 1}.254/24")
                                                          for r in range(rails)]:
            _ip("link", "add", br, "type", "bridge")
            _ip("addr", "add", addr, "dev", br)
            _ip("link", "set", br, "up")
        fwd.write_text("1")
        port_bridge = {(k, r): f"acc-rail{r}" for k in range(1, nodes + 1) for r in range(rails)}
        if leaves:
            for r in range(rails):
                for s in range(2, spines + 1):
                    _ip("link", "add", self._spine_bridge(r, s), "type", "bridge")
                    _ip("link", "set", self._spine_bridge(r, s), "up")
                for name, members in emutree.leaf_blocks(nodes, leaves).items():
                    leaf = int(name[4:])
                    bridge = self._uplink(leaf, r)[0]
                    _ip("link", "add", bridge, "type", "bridge")
                    _ip("link", "set", bridge, "up")
                    for s in range(1, max(spines, 1) + 1):
                        _, up, down = self._uplink(leaf, r, s)
                        _ip("link", "add", up, "type", "veth", "peer", "name", down)
                        _ip("link", "set", up, "master", bridge)
                        _ip("link", "set", down, "master", self._spine_bridge(r, s))
                        _ip("link", "set", up, "up")
                        _ip("link", "set", down, "up")
                    port_bridge.update({(k, r): bridge for k in members})
        for k in range(1, nodes + 1):
            ns = f"{NS_PREFIX}{k}"
            _ip("netns", "add", ns)
            def nsip(*a: str, ns: str = ns) -> subprocess.CompletedProcess:
                return _ip("-n", ns, *a)

            nsip("link", "set", "lo", "up")
            # loose reverse-path filter: cross-rail replies may come in on another rail
            for key in ("all", "default"):
                self.run_in(k, ["sysctl", "-qw", f"net.ipv4.conf.{key}.rp_filter=2"])
            links = [("mgmt", f"acc-n{k}m", MGMT_BR, f"198.18.0.{k}/24")]
            links += [(f"rail{r}", f"acc-n{k}r{r}", port_bridge[k, r], f"198.18.{r + 1}.{k}/24")
                      for r in range(rails)]
            for inner, outer, br, addr in links:
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
                if spines > 1 and inner.startswith("rail"):  # the switches' static tables name it
                    nsip("link", "set", inner, "address", self._mac(k, int(inner[4:])))
                _ip("link", "set", outer, "master", br)
                _ip("link", "set", outer, "up")
                nsip("addr", "add", addr, "dev", inner)
                nsip("link", "set", inner, "up")
            for r in range(rails):
                for route in self._rail_routes(r):
                    nsip("route", "add", *route)
                nsip("rule", "add", *self._rail_rule(k, r))
        if spines > 1:
            self._forward_by_destination(nodes, rails, leaves, spines)

    @staticmethod
    def _mac(k: int, r: int) -> str:
        """Node k's port on rail r (k 255: the rail's gateway, spine 1's bridge)."""
        return f"02:ac:{r:02x}:00:00:{k:02x}"

    def _forward_by_destination(self, nodes: int, rails: int, leaves: int, spines: int) -> None:
        """Static tables in place of flooding and learning, as a subnet manager programs an InfiniBand
        fabric: every leaf-spine port neither learns nor floods (the leaves and spines make loops, which
        flooding would run around), each bridge forwards each node's MAC out of the port its D-mod-K
        table gives (emutree.TwoLevel.out_port), and every neighbour is written in, since no ARP
        request crosses a switch-to-switch port."""
        for r in range(rails):
            tree = emutree.TwoLevel(nodes, leaves, spines, r)
            gateway = self._mac(255, r)
            _ip("link", "set", self._spine_bridge(r), "address", gateway)
            for leaf in range(1, leaves + 1):
                for s in range(1, spines + 1):
                    for dev in self._uplink(leaf, r, s)[1:]:
                        _run([_exe("bridge"), "link", "set", "dev", dev, "learning", "off", "flood", "off",
                              "mcast_flood", "off", "bcast_flood", "off"])
            def fdb(mac: str, dev: str) -> None:
                _run([_exe("bridge"), "fdb", "replace", mac, "dev", dev, "master", "static"])

            for k in range(1, nodes + 1):
                mac = self._mac(k, r)
                for leaf in range(1, leaves + 1):
                    port = tree.out_port(f"leaf{leaf}", k)
                    fdb(mac, f"acc-n{k}r{r}" if tree.leaf[k] == leaf
                        else self._uplink(leaf, r, port - tree.width)[1])
                for s in range(1, spines + 1):
                    fdb(mac, self._uplink(tree.out_port(f"spine{s}", k), r, s)[2])
                _ip("neigh", "replace", f"198.18.{r + 1}.{k}", "lladdr", mac, "dev", self._spine_bridge(r),
                    "nud", "permanent")
            for leaf in range(1, leaves + 1):  # the gateway is spine 1's own address
                fdb(gateway, self._uplink(leaf, r, 1)[1])
            for k in range(1, nodes + 1):
                self._neighbours(k, r, nodes)

    def _neighbours(self, k: int, r: int, nodes: int) -> None:
        """Node k's permanent ARP entries on rail r: every other node's port and the gateway."""
        for j in [*range(1, nodes + 1), 255]:
            if j != k:
                addr = f"198.18.{r + 1}.{254 if j == 255 else j}"
                _ip("-n", f"{NS_PREFIX}{k}", "neigh", "replace", addr, "lladdr", self._mac(j, r), "dev", f"rail{r}",
                    "nud", "permanent")

    @staticmethod
    def _rail_addr(k: int, r: int) -> str:
        return f"198.18.{r + 1}.{k}/24"

    @staticmethod
    def _rail_routes(r: int) -> list[list[str]]:
        """The routes `up` sets in a node's namespace for rail r: other rail subnets via rail0's
        gateway (main table, rail 0 only); table 100+r for traffic from rail r's address, which leaves
        on rail r."""
        table = str(100 + r)
        main = [["198.18.0.0/15", "via", "198.18.1.254", "dev", "rail0"]] if r == 0 else []
        return main + [[f"198.18.{r + 1}.0/24", "dev", f"rail{r}", "table", table],
                       ["198.18.0.0/24", "dev", "mgmt", "table", table],
                       ["198.18.0.0/15", "via", f"198.18.{r + 1}.254", "dev", f"rail{r}", "table", table]]

    @staticmethod
    def _rail_rule(k: int, r: int) -> list[str]:
        return ["from", f"198.18.{r + 1}.{k}", "table", str(100 + r), "priority", str(1000 + r)]

    def _write_conf(self, nodes: int, rails: int, health_check: int = 0, program: str | None = None) -> None:
        if SLURM_CONF.exists() and not SLURM_CONF.read_text(errors="replace").startswith(MARK):
            shutil.copy2(SLURM_CONF, self.dir / "slurm.conf.orig")
        elif not SLURM_CONF.exists():
            (self.dir / "slurm.conf.none").touch()
        d = self.dir
        node_lines = "\n".join(
            f"NodeName=node{k} NodeAddr=198.18.0.{k} NodeHostname={self.host} Port={17000 + k} CPUs={rails}"
            for k in range(1, nodes + 1))
        text = f"{MARK} ({d}); restored on `emucluster.py down`\n" + slurm_conf(
            cluster="acc-emu", folder=d, controller=f"{self.host}({CTLD_ADDR})", port=CTLD_PORT,
            munge_socket=d / "munge" / "munge.socket.2", mpi_default="pmi2", nodes=node_lines, partition="emu",
            extra=(f"HealthCheckProgram={program}\nHealthCheckInterval={health_check}\nHealthCheckNodeState=ANY\n"
                   if health_check else ""))
        (d / "state").mkdir(exist_ok=True)
        (d / "slurm.conf").write_text(text)
        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        tmp = SLURM_CONF.with_name(".slurm.conf.emucluster")
        tmp.write_text(text)
        tmp.replace(SLURM_CONF)

    def _write_site_env(self, extra: dict | None = None) -> None:
        if SITE_ENV.exists() and not SITE_ENV.read_text(errors="replace").startswith(MARK):
            shutil.copy2(SITE_ENV, self.dir / "site.env.orig")
        SITE_ENV.parent.mkdir(parents=True, exist_ok=True)
        tmp = SITE_ENV.with_name(".site.env.emucluster")
        tmp.write_text(f"{MARK} ({self.dir}); restored on `emucluster.py down`\n"
                       + "".join(f"{k}={v}\n" for k, v in {**SITE_DEFAULTS, **(extra or {})}.items()))
        tmp.replace(SITE_ENV)

    def _restore_site_env(self) -> None:
        backup = self.dir / "site.env.orig"
        if backup.exists():
            shutil.copy2(backup, SITE_ENV)
        elif SITE_ENV.exists() and SITE_ENV.read_text(errors="replace").startswith(MARK):
            SITE_ENV.unlink()

    def _daemon_env(self) -> dict:
        env = client_env()
        env[MARKER_ENV] = str(self.dir)
        return env

    def _start_munge(self) -> None:
        m = self.dir / "munge"
        m.mkdir(mode=0o700)
        key = m / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        _run([_exe("munged"), "--force", f"--key-file={key}", f"--socket={m}/munge.socket.2",
              f"--pid-file={m}/munged.pid", f"--log-file={self.dir}/log/munged.log", f"--seed-file={m}/seed",
              # Many clients at once on a busy machine (sbatch --wait polls, every slurmd and step):
              # the default 2 threads refuse some ("If munged is up, restart with --num-threads=10").
              "--num-threads=10"],
             env=self._daemon_env())

    def _start_slurm(self, nodes: int) -> None:
        env = self._daemon_env()
        _run([_exe("slurmctld")], env=env)
        for k in range(1, nodes + 1):
            _run(["nsenter", f"--net=/run/netns/{NS_PREFIX}{k}", _exe("slurmd"), "-N", f"node{k}"], env=env)

    def sinfo(self) -> dict[str, str]:
        try:
            p = _run([_exe("sinfo"), "-h", "-N", "-o", "%N %T"], check=False, timeout=10, env=client_env())
        except subprocess.TimeoutExpired:
            return {}
        out = {}
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def _wait_idle(self, nodes: int, timeout: float) -> None:
        want = {f"node{k}" for k in range(1, nodes + 1)}
        end = time.monotonic() + timeout
        states: dict = {}
        while time.monotonic() < end:
            states = self.sinfo()
            if want <= {n for n, s in states.items() if s == "idle"}:
                return
            time.sleep(0.5)
        logs = sorted(str(p) for p in (self.dir / "log").glob("*.log"))
        raise RuntimeError(f"emucluster nodes not idle after {timeout:.0f} s: {states or 'no sinfo answer'}\n"
                           f"logs: {' '.join(logs)}")

    # ---------------------------------------------------------------- down
    def _our_daemons(self) -> dict[str, int]:
        """Live daemons we started: from pid files, else by the marker in their environment."""
        found: dict[str, int] = {}
        pidfiles = {"munged": self.dir / "munge" / "munged.pid", "slurmctld": self.dir / "slurmctld.pid"}
        for f in sorted(self.dir.glob("slurmd-*.pid")):
            pidfiles[f.stem] = f
        for name, f in pidfiles.items():
            pid = _read_pid(f)
            if pid and _alive(pid) and _comm(pid) in ("munged", "slurmctld", "slurmd"):
                found[name] = pid
        marker = f"{MARKER_ENV}={self.dir}".encode()
        for pid in _pids():
            comm = _comm(pid)
            if comm in ("munged", "slurmctld", "slurmd") and pid not in found.values() and marker in _environ(pid):
                found[f"{comm}-{pid}"] = pid
        return found

    def down(self) -> None:
        conf_ours = SLURM_CONF.exists() and SLURM_CONF.read_text(errors="replace").startswith(MARK)
        daemons = self._our_daemons()
        if conf_ours and any(n.startswith("slurmctld") for n in daemons):
            try:
                _run([_exe("scancel"), "--full", "-u", "root"], check=False, timeout=10, env=client_env())
                time.sleep(0.5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        # slurmds first, then the controller, then munge
        order = sorted(daemons, key=lambda n: (0 if n.startswith("slurmd") else 1 if n.startswith("slurmctld")
                                               else 2))
        for name in order:
            _kill(daemons[name])
        # anything left inside our namespaces (job steps, stray ranks)
        for ns in self.namespaces():
            p = _ip("netns", "pids", ns, check=False)
            for pid in (int(x) for x in p.stdout.split() if x.isdigit()):
                _kill(pid, wait=2)
        for ns in self.namespaces():
            _ip("netns", "delete", ns, check=False)
        for name in self.links():  # veth peers vanish with their namespace; bridges stay
            _ip("link", "delete", name, check=False)
        orig = self.dir / "ip_forward.orig"
        if orig.exists():
            Path("/proc/sys/net/ipv4/ip_forward").write_text(orig.read_text().strip())
        backup = self.dir / "slurm.conf.orig"
        if backup.exists():
            shutil.copy2(backup, SLURM_CONF)
        elif conf_ours:  # no config existed before ours (slurm.conf.none)
            SLURM_CONF.unlink(missing_ok=True)
        self._restore_site_env()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---------------------------------------------------------------- throttle
    def _rail_link(self, node, rail: int) -> tuple[str, str, str]:
        k = _node_index(node)
        ns, inner, outer = f"{NS_PREFIX}{k}", f"rail{int(rail)}", f"acc-n{k}r{int(rail)}"
        if ns not in self.namespaces() or outer not in self.links():
            raise ValueError(f"no such node/rail: {_node_name(node)} rail {rail}")
        return ns, inner, outer

    @staticmethod
    def _uplink(leaf: int, rail: int, spine: int = 1) -> tuple[str, str, str]:
        """A leaf's bridge and the two ends (leaf side, spine side) of its uplink veth to `spine` on a rail."""
        tail = f"p{spine}" if spine > 1 else ""
        return f"acc-r{rail}l{leaf}", f"acc-r{rail}u{leaf}{tail}", f"acc-r{rail}s{leaf}{tail}"

    @staticmethod
    def _spine_bridge(rail: int, spine: int = 1) -> str:
        """Spine 1 is the rail's bridge (the gateway); the others are bridges of their own."""
        return f"acc-rail{rail}" if spine == 1 else f"acc-r{rail}p{spine}"

    @staticmethod
    def _tbf(rate: str) -> list[str]:
        return ["root", "tbf", "rate", str(rate), "burst", "32kbit", "latency", "400ms"]

    def throttle(self, node, rail: int, rate: str) -> None:
        ns, inner, outer = self._rail_link(node, rail)
        _run([_exe("tc"), "qdisc", "replace", "dev", outer, *self._tbf(rate)])
        _run([_exe("tc"), "-n", ns, "qdisc", "replace", "dev", inner, *self._tbf(rate)])

    def throttle_uplink(self, leaf, rail: int, rate: str, spine: int | None = None, direction: str = "both") -> None:
        """tbf on a leaf's uplink on a rail (to `spine`, which a tree of several spines needs): on both
        ends, or only on the leaf's ("up": what the leaf sends to the spine) or the spine's ("down")."""
        index = emutree.leaf_index(leaf, self.leaves)
        if not 0 <= int(rail) < self.rails:
            raise ValueError(f"no rail {rail}: the cluster has rails 0..{self.rails - 1}")
        if self.spines and spine is None:
            raise ValueError(f"which spine: leaf{index} has a cable to each of spine1..spine{self.spines} (--spine S)")
        if spine is not None and not 1 <= int(spine) <= max(self.spines, 1):
            raise ValueError(f"no spine {spine}: the tree has spine1..spine{max(self.spines, 1)}")
        if direction not in ("both", "up", "down"):
            raise ValueError(f"direction is both, up or down, not {direction!r}")
        _, up, down = self._uplink(index, int(rail), int(spine or 1))
        for dev in {"both": (up, down), "up": (up,), "down": (down,)}[direction]:
            _run([_exe("tc"), "qdisc", "replace", "dev", dev, *self._tbf(rate)])

    def _all_rail_links(self) -> list[tuple[str | None, str]]:
        out: list[tuple[str | None, str]] = [(None, n) for n in self.links()
                                             if re.fullmatch(r"acc-n\d+[rm]\d*|acc-r\d+[us]\d+(p\d+)?", n)]
        for ns in self.namespaces():
            p = _ip("-n", ns, "-o", "link", "show", check=False)
            for name in re.findall(r"^\d+: ([^:@]+)", p.stdout, re.MULTILINE):
                if name.startswith(("rail", "mgmt")):
                    out.append((ns, name))
        return out

    def throttles(self) -> dict[str, str]:
        found = {}
        for ns, dev in self._all_rail_links():
            ns_args = ["-n", ns] if ns else []
            p = _run([_exe("tc"), *ns_args, "qdisc", "show", "dev", dev, "root"], check=False)
            for line in p.stdout.splitlines():
                if re.search(r"\b(tbf|htb)\b", line):
                    found[f"{ns + ':' if ns else ''}{dev}"] = line.strip()
        return found

    def restore(self) -> None:
        for ns, dev in self._all_rail_links():
            ns_args = ["-n", ns] if ns else []
            _run([_exe("tc"), *ns_args, "qdisc", "del", "dev", dev, "root"], check=False)

    # ---------------------------------------------------------------- links
    def link_down(self, node, rail: int) -> None:
        """Set a node's rail link down on the node's side (``rail<r>`` in its namespace). The kernel
        drops the routes through it (also the main table's 198.18.0.0/15 for rail 0); the address
        and the policy rule stay. link_up puts back what is lost."""
        ns, inner, _ = self._rail_link(node, rail)
        _ip("-n", ns, "link", "set", inner, "down")

    def link_up(self, node, rail: int) -> None:
        """Set a node's rail link up again and restore the address, routes and policy rule `up` set
        for that rail where they are gone (replace: a no-op for what is still there)."""
        ns, inner, _ = self._rail_link(node, rail)
        k, r = _node_index(node), int(rail)
        _ip("-n", ns, "link", "set", inner, "up")
        _ip("-n", ns, "addr", "replace", self._rail_addr(k, r), "dev", inner)
        for route in self._rail_routes(r):
            _ip("-n", ns, "route", "replace", *route)
        rule = self._rail_rule(k, r)
        if not _ip("-n", ns, "rule", "show", *rule[:-2], "priority", rule[-1], check=False).stdout.strip():
            _ip("-n", ns, "rule", "add", *rule)
        if self.spines:  # a link set down loses its permanent neighbours too
            self._neighbours(k, r, len(self.nodes))
        # a veth has carrier as soon as both ends are up; wait for it (and the bridge port) briefly
        end = time.monotonic() + 5
        while time.monotonic() < end:
            if "LOWER_UP" in _ip("-n", ns, "-o", "link", "show", inner, check=False).stdout:
                break
            time.sleep(0.05)

    def links_down(self) -> list[str]:
        """The nodes' links set down (``node2:rail1``): no UP among the link's flags in the namespace."""
        down = []
        for ns in self.namespaces():
            p = _ip("-n", ns, "-o", "link", "show", check=False)
            for name, flags in re.findall(r"^\d+: ([^:@]+)(?:@[^:]*)?: <([^>]*)>", p.stdout, re.MULTILINE):
                if name.startswith(("rail", "mgmt")) and "UP" not in flags.split(","):
                    down.append(f"node{ns[len(NS_PREFIX):]}:{name}")
        return sorted(down, key=lambda s: (int(s.split(":")[0][4:]), s))

    # ---------------------------------------------------------------- helpers
    def kill_node_processes(self, node, sig: int = signal.SIGKILL) -> list[int]:
        """Kill the job processes run by a node's slurmd (SLURMD_NODENAME=nodeK), not the daemons."""
        marker = f"SLURMD_NODENAME={_node_name(node)}".encode()
        killed = []
        for pid in _pids():
            if _comm(pid) in ("slurmd", "slurmstepd", "slurmctld", "munged"):
                continue
            if marker in _environ(pid):
                try:
                    os.kill(pid, sig)
                    killed.append(pid)
                except OSError:
                    pass
        return killed

    def status(self) -> dict:
        daemons = self._our_daemons() if self.dir.exists() else {}
        return {
            "up": self.meta() is not None,
            "meta": self.meta(),
            "namespaces": self.namespaces(),
            "bridges": self.bridges(),
            "daemons": {n: _alive(p) for n, p in daemons.items()},
            "daemon_pids": daemons,
            "nodes": self.sinfo() if any(n.startswith("slurmctld") for n in daemons) else {},
            "throttles": self.throttles(),
            "links_down": self.links_down(),
            "slurm_conf": str(SLURM_CONF) if SLURM_CONF.exists() else None,
            "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="create namespaces, bridges and start munged/slurmctld/slurmds")
    p_up.add_argument("--nodes", type=int, default=2)
    p_up.add_argument("--rails", type=int, default=2)
    p_up.add_argument("--leaves", type=int, default=0, metavar="K",
                      help="a switch tree per rail: K leaf bridges (node blocks) under one spine, "
                           "and a topology.conf naming them (default 0: one bridge per rail)")
    p_up.add_argument("--spines", type=int, default=0, metavar="S",
                      help="with --leaves: S spines (2 or more), every leaf cabled to each, each bridge forwarding "
                           "by destination (D-mod-K) from static tables; the cabling and forwarding tables are "
                           "written as ibnetdiscover and ibroute print them (default 0: one spine)")
    p_up.add_argument("--timeout", type=float, default=60, help="seconds to wait for all nodes idle")
    p_up.add_argument("--health-check", type=int, default=0, metavar="SECONDS",
                      help="run slurm/node-check.sh as Slurm's HealthCheckProgram every SECONDS on every node "
                           "(default 0: no health check)")
    p_up.add_argument("--health-check-program", metavar="PATH",
                      help="with --health-check: run this program instead of slurm/node-check.sh")
    sub.add_parser("down", help="stop everything and restore the machine")
    p_th = sub.add_parser("throttle", help="tbf on both ends of one node's rail link")
    p_th.add_argument("node")
    p_th.add_argument("rail", type=int)
    p_th.add_argument("rate", help="tc rate, e.g. 20mbit")
    p_tu = sub.add_parser("throttle-uplink", help="tbf on both ends of a leaf's uplink on a rail (up --leaves)")
    p_tu.add_argument("leaf", help="leaf2 or 2")
    p_tu.add_argument("rail", type=int)
    p_tu.add_argument("rate", help="tc rate, e.g. 20mbit")
    p_tu.add_argument("--spine", type=int, help="the spine whose cable it is (a tree of --spines S needs it)")
    p_tu.add_argument("--direction", choices=("both", "up", "down"), default="both",
                      help="both ends (default), up (leaf to spine only) or down (spine to leaf only)")
    sub.add_parser("restore", help="remove all throttles")
    for name, what in (("link-down", "set a node's rail link down (its side, rail<r> in the namespace)"),
                       ("link-up", "set a node's rail link up again, with its address, routes and rule")):
        p_l = sub.add_parser(name, help=what)
        p_l.add_argument("node", help="node2 or 2")
        p_l.add_argument("rail", type=int)
    p_st = sub.add_parser("status", help="namespaces, bridges, daemons, sinfo, throttles")
    p_st.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    if args.cmd != "status" or os.geteuid() != 0:
        reason = unavailable_reason()
        if reason:
            print(f"emucluster: {reason}", file=sys.stderr)
            return 2
    c = EmuCluster()
    try:
        if args.cmd == "up":
            if args.health_check_program and not args.health_check:
                raise ValueError("--health-check-program needs --health-check SECONDS")
            c.up(args.nodes, args.rails, timeout=args.timeout, leaves=args.leaves, health_check=args.health_check,
                 health_check_program=args.health_check_program, spines=args.spines)
        elif args.cmd == "down":
            c.down()
            print("emucluster down: machine clean")
        elif args.cmd == "throttle":
            c.throttle(args.node, args.rail, args.rate)
            print(f"throttled {_node_name(args.node)} rail{args.rail} to {args.rate} (both ends)")
        elif args.cmd == "throttle-uplink":
            c.throttle_uplink(args.leaf, args.rail, args.rate, args.spine, args.direction)
            print(f"throttled leaf{emutree.leaf_index(args.leaf, c.leaves)}'s uplink"
                  f"{f' to spine{args.spine}' if args.spine else ''} on rail{args.rail} to {args.rate} "
                  f"({'both ends' if args.direction == 'both' else args.direction})")
        elif args.cmd == "restore":
            c.restore()
            print("all throttles removed")
        elif args.cmd == "link-down":
            c.link_down(args.node, args.rail)
            print(f"{_node_name(args.node)} rail{args.rail} down")
        elif args.cmd == "link-up":
            c.link_up(args.node, args.rail)
            print(f"{_node_name(args.node)} rail{args.rail} up")
        elif args.cmd == "status":
            st = c.status()
            if args.json:
                print(json.dumps(st, indent=2))
            else:
                print(f"up:         {st['up']} {st['meta'] or ''}")
                print(f"namespaces: {' '.join(st['namespaces']) or '-'}")
                print(f"bridges:    {' '.join(st['bridges']) or '-'}")
                print("daemons:    " + (" ".join(f"{n}={p}{'' if st['daemons'][n] else '(dead)'}"
                                              for n, p in st["daemon_pids"].items()) or "-"))
                print("sinfo:      " + (" ".join(f"{n}:{s}" for n, s in st["nodes"].items()) or "-"))
                print("throttles:  " + ("\n            ".join(f"{d}: {q}" for d, q in st["throttles"].items())
                                        or "-"))
                print(f"links down: {' '.join(st['links_down']) or '-'}")
                if (st["meta"] or {}).get("health_check"):
                    print(f"health:     every {st['meta']['health_check']} s: {st['meta']['health_check_program']}")
                print(f"slurm.conf: {st['slurm_conf'] or '-'}   ip_forward: {st['ip_forward']}")
    except (RuntimeError, ValueError) as e:
        print(f"emucluster {args.cmd}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
