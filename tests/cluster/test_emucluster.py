"""End-to-end: a 2-node x 2-rail emulated Slurm cluster (network namespaces, rail bridges, tc)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emucluster
from emucluster import EmuCluster, client_env

ROOT = Path(__file__).resolve().parents[2]
VENV_PY = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PY if VENV_PY.exists() else Path(sys.executable))

_reason = emucluster.unavailable_reason()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(_reason is not None, reason=_reason or "")]

PING = r"""
import sys, time
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.Get_rank(); peer = 1 - r; n = 4 << 20; iters = int(sys.argv[1])
a = np.ones(n, np.uint8); b = np.empty(n, np.uint8)
c.Sendrecv(a[:4096], peer, recvbuf=b[:4096], source=peer)
c.Barrier(); t = time.perf_counter()
for _ in range(iters):
    c.Sendrecv(a, peer, recvbuf=b, source=peer)
dt = time.perf_counter() - t
if r == 0:
    print(f"GBPS {n * 8 * iters / dt / 1e9:.4f}", flush=True)
"""


def _rail_env() -> str:
    return " ".join(f"{k}={v}" for k, v in emucluster.rank_env(0).items())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = EmuCluster()
    if c.meta() is not None or c.namespaces():
        pytest.skip(f"an emucluster is already up ({c.dir}); run `emucluster.py down` first")
    conf = emucluster.SLURM_CONF
    before = {
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
        "slurm_conf": conf.read_bytes() if conf.exists() else None,
    }
    work = tmp_path_factory.mktemp("emu")
    work.chmod(0o755)
    try:
        c.up(nodes=2, rails=2)
        yield c, before, work
    finally:
        c.down()


def _sbatch(work: Path, name: str, body: str, timeout: float = 90) -> tuple[int, str]:
    script, out = work / f"{name}.sh", work / f"{name}.out"
    script.write_text("#!/bin/bash\n" + body)
    try:
        p = subprocess.run(["sbatch", "--wait", "-N", "2", "-n", "2", "-o", str(out), str(script)],
                           cwd=work, env=client_env(), capture_output=True, text=True, timeout=timeout,
                           check=False)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", "--full", "-u", "root"], env=client_env(), capture_output=True, timeout=10,
                       check=False)
        raise
    text = out.read_text() if out.exists() else ""
    return p.returncode, p.stdout + p.stderr + text


def _gbps(work: Path, name: str, iters: int = 3) -> float:
    (work / "ping.py").write_text(PING)
    rc, out = _sbatch(work, name, f"srun -N 2 --ntasks-per-node=1 --mpi=pmi2 env {_rail_env()} "
                                  f"{PYTHON} {work / 'ping.py'} {iters}\n")
    assert rc == 0, out
    m = re.search(r"GBPS ([0-9.]+)", out)
    assert m, out
    return float(m.group(1))


def test_cluster_is_up(cluster):
    c, _, _ = cluster
    st = c.status()
    assert st["namespaces"] == ["acc-node1", "acc-node2"]
    assert set(st["bridges"]) == {"acc-mgmt", "acc-rail0", "acc-rail1"}
    assert st["nodes"] == {"node1": "idle", "node2": "idle"}
    for k in (1, 2):
        addrs = c.run_in(f"node{k}", ["ip", "-o", "-4", "addr"]).stdout
        for a in (f"198.18.0.{k}/24", f"198.18.1.{k}/24", f"198.18.2.{k}/24"):
            assert a in addrs


def test_cross_rail_tcp(cluster):
    """node1 rail0 reaches node2 rail1 through the root namespace's routing between planes."""
    c, _, _ = cluster
    srv = subprocess.Popen(["nsenter", "--net=/run/netns/acc-node2", sys.executable, "-c",
                            ("import socket; s = socket.socket(); s.bind(('198.18.2.2', 5555)); s.listen();"
                             "s.settimeout(10); c, a = s.accept(); print(a[0]); c.close()")],
                           stdout=subprocess.PIPE, text=True)
    try:
        client = ("import socket, time\nfor _ in range(50):\n    try:\n"
                  "        socket.create_connection(('198.18.2.2', 5555), 3, ('198.18.1.1', 0)).close(); break\n"
                  "    except OSError: time.sleep(0.1)\n")
        assert c.run_in("node1", [sys.executable, "-c", client]).returncode == 0
        out, _ = srv.communicate(timeout=15)
        assert out.strip() == "198.18.1.1"
    finally:
        srv.kill()
        srv.wait()


def test_sbatch_wait(cluster):
    _, _, work = cluster
    rc, out = _sbatch(work, "hello", "srun -N2 --ntasks-per-node=1 hostname\necho node=$SLURMD_NODENAME\n")
    assert rc == 0, out
    assert "node=node1" in out


def test_throttle_drops_and_restore_recovers(cluster):
    """The throttle caps the link at its rate, and restore lifts the cap. Measured against the
    throttle's own rate, which does not depend on how fast this machine is (a healthy veth moves
    0.5 to 10 Gbit/s here, depending on what else runs)."""
    c, _, work = cluster
    rate = 0.02  # Gbit/s: 20mbit
    healthy = _gbps(work, "healthy")
    print(f"healthy {healthy:.3f} Gbit/s")
    assert healthy > 5 * rate
    c.throttle("node2", 0, "20mbit")
    try:
        assert len(c.throttles()) == 2  # both ends of node2's rail0 link
        throttled = _gbps(work, "throttled", iters=2)
        print(f"throttled {throttled:.4f} Gbit/s")
    finally:
        c.restore()
    assert c.throttles() == {}
    assert throttled < 1.5 * rate  # tbf's burst lets a little more through at first
    restored = _gbps(work, "restored")
    print(f"restored {restored:.3f} Gbit/s")
    assert restored > 5 * rate


def test_kill_node_processes(cluster):
    c, _, work = cluster
    script, out = work / "sleep.sh", work / "sleep.out"
    script.write_text("#!/bin/bash\nsrun --kill-on-bad-exit=1 -N2 --ntasks-per-node=1 sleep 60\n")
    p = subprocess.Popen(["sbatch", "--wait", "-N", "2", "-n", "2", "-o", str(out), str(script)],
                         cwd=work, env=client_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        killed: list[int] = []
        end = time.monotonic() + 20
        while not killed and time.monotonic() < end:
            time.sleep(0.3)
            killed = c.kill_node_processes("node2")
        assert killed, "no job process of node2 found"
        p.wait(timeout=30)
        assert p.returncode != 0  # the step lost a task
        assert c.status()["daemons"]["slurmd-node2"]  # slurmd itself survives
    finally:
        if p.poll() is None:
            subprocess.run(["scancel", "--full", "-u", "root"], env=client_env(), capture_output=True, timeout=10,
                       check=False)
            p.wait(timeout=30)


RAIL_CONNECT = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, sys.argv[1].encode())
s.bind((sys.argv[2], 0))
s.settimeout(3)
try:
    s.connect((sys.argv[3], int(sys.argv[4])))
except OSError as e:
    sys.exit(f"connect: {e}")
"""


def _rail_link(k: int, rail: int) -> dict:
    out = subprocess.run(["ip", "-n", f"acc-node{k}", "-j", "link", "show", f"rail{rail}"], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    return json.loads(out)[0]


def _rail_connect(c: EmuCluster, server: socket.socket, k: int, rail: int) -> subprocess.CompletedProcess:
    """TCP from node k's rail address, bound to rail<rail>, to the rail's gateway (ping is not installed)."""
    gw, port = server.getsockname()
    return c.run_in(f"node{k}", [sys.executable, "-c", RAIL_CONNECT, f"rail{rail}", f"198.18.{rail + 1}.{k}",
                                 gw, str(port)], timeout=30)


def test_link_down_and_up(cluster):
    """link-down takes node2's rail1 down inside its namespace and traffic over it stops; link-up brings it
    back with the routes the kernel dropped, and traffic flows again."""
    c, _, _ = cluster
    def routes() -> str:
        return c.run_in("node2", ["ip", "route", "show", "table", "all"]).stdout + c.run_in("node2", ["ip", "rule"]).stdout

    before = routes()
    server = socket.create_server(("198.18.2.254", 0))
    server.settimeout(10)
    try:
        p = _rail_connect(c, server, 2, 1)
        assert p.returncode == 0, p.stdout + p.stderr
        server.accept()[0].close()

        c.link_down("node2", 1)
        try:
            link = _rail_link(2, 1)
            assert link["operstate"] == "DOWN" and "UP" not in link["flags"], link
            assert c.status()["links_down"] == ["node2:rail1"]
            p = _rail_connect(c, server, 2, 1)
            assert p.returncode != 0, "traffic over a link that is down"
            assert "198.18.2.0/24 dev rail1 table 101" not in routes()  # what the kernel drops
        finally:
            c.link_up("node2", 1)
        link = _rail_link(2, 1)
        assert link["operstate"] == "UP" and "UP" in link["flags"], link
        assert c.links_down() == []
        p = _rail_connect(c, server, 2, 1)
        assert p.returncode == 0, p.stdout + p.stderr
        conn, peer = server.accept()
        conn.close()
        assert peer[0] == "198.18.2.2"
    finally:
        server.close()
    after = routes()
    strip = re.compile(r"^.*(fe80::|ff00::).*\n", re.MULTILINE)  # IPv6 link-local comes back on its own
    assert sorted(strip.sub("", after).splitlines()) == sorted(strip.sub("", before).splitlines())


def test_down_leaves_machine_clean(cluster):
    c, before, _ = cluster
    c.link_down("node1", 1)  # down also works with a link down
    pids = list(c.status()["daemon_pids"].values())
    c.down()
    c.down()  # idempotent
    assert c.namespaces() == [] and c.links() == [] and c.bridges() == []
    netns = Path("/run/netns")
    assert not [ns for ns in (os.listdir(netns) if netns.exists() else []) if ns.startswith("acc-")]
    for pid in pids:
        assert not emucluster._alive(pid)
    assert c._our_daemons() == {}
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == before["ip_forward"]
    conf = emucluster.SLURM_CONF
    assert (conf.read_bytes() if conf.exists() else None) == before["slurm_conf"]
    assert not c.dir.exists()
