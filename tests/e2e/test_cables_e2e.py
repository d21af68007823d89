"""End to end: a slow leaf-spine cable on an emulated two-level fabric is named with both ends, and
no node is drained (issue 41). The emulated cluster (`emucluster.py up --nodes 6 --leaves 3 --spines 2`)
makes each rail three leaf bridges cabled to each of two spine bridges, forwarding by destination from
static tables (D-mod-K), and writes the cabling and forwarding tables as ibnetdiscover and ibroute print
them; the jobs find both through the site defaults it writes (ACCEPTANCE_TOPOLOGY, ACCEPTANCE_ROUTES).
Root only."""
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cluster.emucluster import EmuCluster, unavailable_reason  # noqa: E402
from e2e.jobs import run_folder, sbatch  # noqa: E402

REASON = unavailable_reason()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

NODES = 6
# The fleet-judged sizes only (32 and 128 KiB), bandwidth only: what names a cable.
PROFILE = str(ROOT / "tests" / "profiles" / "emulated-cables.toml")
RATE = "30mbit"  # 0.01x-0.03x of a healthy pair from 32 KiB up (the emulated profile's [fleet])


@pytest.fixture(scope="module")
def cluster():
    emu = EmuCluster()
    try:
        yield emu.up(nodes=NODES, rails=2, leaves=3, spines=2)
    finally:
        emu.down()


def test_a_slow_leaf_spine_cable_is_named_with_both_ends_and_drains_nobody(cluster, tmp_path):
    # node3, node4 on leaf2. D-mod-K sends a flow to an even LID (node2, node4, node6) through spine1:
    # the cable leaf2 -- spine1 carries node3's and node4's flows to node2 and node6 up, and the other
    # leaves' flows to node4 down. node3 -> node4 (inside leaf2) clears node4's NIC; node3 -> node1
    # (through spine2) clears node3's.
    cluster.throttle_uplink("leaf2", 1, RATE, spine=1)
    rc, log = sbatch("acceptance.sbatch", tmp_path, nodes=NODES, ACCEPTANCE_PROFILE=PROFILE,
                     ACCEPTANCE_MARKERS="p2p", ACCEPTANCE_ARGS="-ktest_write_bandwidth")
    assert rc == 1, log
    assert f"routes {cluster.routes} (ibroute: forwarding tables of 2 rail(s))" in log
    folder = run_folder(log)
    failing = [f for f in json.loads((folder / "findings.json").read_text()) if f["severity"] == "fail"]
    assert [(f["scope"], f["rail"], f["node"]) for f in failing] == [("uplink", 1, None)], failing
    ends = {(u["leaf"], u["leaf_port"], u["spine"], u["spine_port"], u["direction"]) for u in failing[0]["uplinks"]}
    assert ends == {("leaf2", "3", "spine1", "2", "up"), ("leaf2", "3", "spine1", "2", "down")}, failing
    assert "cable leaf2 port 3 <-> spine1 port 2 (both directions) on rail 1" in failing[0]["message"]
    assert "network ticket" in failing[0]["message"] and "drain" not in failing[0]["message"]
    assert not re.search(r"State=DRAIN", log) and (folder / "drain.txt").read_text() == ""
