"""End-to-end: `acceptance node-check --slurm` as real slurmd's HealthCheckProgram on the emulated cluster.

A rail's interface taken down drains its node with our reason; brought back, the node is resumed after
its passes; a node an admin drained keeps its drain and reason throughout; a bad profile changes nothing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emucluster
from emucluster import EmuCluster, client_env

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 5  # HealthCheckInterval: slurmd runs the check on every node this often

_reason = emucluster.unavailable_reason()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(_reason is not None, reason=_reason or "")]


@pytest.fixture(scope="module")
def cluster():
    c = EmuCluster()
    if c.meta() is not None or c.namespaces():
        pytest.skip(f"an emucluster is already up ({c.dir}); run `emucluster.py down` first")
    try:
        c.up(nodes=4, rails=2, health_check=INTERVAL)
        yield c
    finally:
        c.down()


def nodes() -> dict[str, tuple[str, str]]:
    """node -> (state, reason) as sinfo prints them (%T, %E)."""
    p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], env=client_env(), capture_output=True,
                       text=True, timeout=20, check=True)
    out = {}
    for line in p.stdout.splitlines():
        name, state, reason = line.split("|", 2)
        out[name] = (state.rstrip("*~#"), reason)
    return out


def wait_for(what, timeout: float):
    end = time.monotonic() + timeout
    while True:
        seen = nodes()
        if what(seen):
            return seen
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout:g} s: {seen}")
        time.sleep(1)


def test_a_port_down_drains_its_node_and_its_repair_resumes_it_but_never_an_admins_drain(cluster):
    c = cluster
    c.link_down("node3", 1)
    seen = wait_for(lambda s: s["node3"][0].startswith("drain"), 60)
    assert seen["node3"][1].startswith("acceptance: ports: rail 1 (rail1): interface down"), seen
    assert all(seen[n] == ("idle", "none") for n in ("node1", "node2", "node4")), seen

    subprocess.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=maintenance"],
                   env=client_env(), check=True, timeout=20)
    c.link_up("node3", 1)
    seen = wait_for(lambda s: s["node3"] == ("idle", "none"), 90)
    assert seen["node2"] == ("drained", "maintenance"), seen
    # node2 passes its checks every interval and is still never resumed: its reason is not ours.
    time.sleep(2 * INTERVAL)
    assert nodes()["node2"] == ("drained", "maintenance")


def test_a_bad_profile_exits_2_and_changes_no_node(cluster):
    before = nodes()
    env = {**client_env(), "ACCEPTANCE_PROFILE": str(ROOT / "no-such-profile.toml"), "SLURMD_NODENAME": "node4"}
    for node in ("node2", "node4"):
        p = subprocess.run(["ip", "netns", "exec", f"acc-{node}", str(ROOT / "slurm" / "node-check.sh")],
                           env={**env, "SLURMD_NODENAME": node}, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "profile error" in p.stderr and "slurm:" not in p.stdout, p.stdout + p.stderr
    after = nodes()
    assert {n: after[n] for n in ("node2", "node4")} == {n: before[n] for n in ("node2", "node4")}
