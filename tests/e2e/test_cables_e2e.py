"""End to end: a slow leaf-spine cable on an emulated two-level fabric is named with both ends, and
no node is drained (issue 41). The emulated cluster (`emucluster.py up --nodes 6 --leaves 3 --spines 2`)
makes each rail three leaf bridges cabled to each of two spine bridges, forwarding by destination from
static tables (D-mod-K), and writes the cabling and forwarding tables as ibnetdiscover and ibroute print
them; the jobs find both through the site defaults it writes (ACCEPTANCE_TOPOLOGY, ACCEPTANCE_ROUTES).
On the same cluster, a node lost mid-test is left behind and the rest measured in the same job (issue 42).
Root only."""
import json
import re
import sys
import threading
import time
from collections import Counter
from itertools import permutations
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


def test_a_node_lost_mid_test_is_left_behind_and_the_rest_measured_in_the_same_job(cluster, tmp_path):
    """node5's ranks are killed (as the OOM killer or a crash would) while rail pairs are measured: the job
    names node5 and drains it, and a second srun step in the same allocation, without node5, measures what
    was left (issue 42): every pair of the other five nodes, each exactly once, and no other finding."""
    cluster.restore()
    result = {}
    job = threading.Thread(target=lambda: result.update(zip(("rc", "log"), sbatch(
        "acceptance.sbatch", tmp_path, nodes=NODES, ACCEPTANCE_PROFILE=PROFILE, ACCEPTANCE_MARKERS="p2p",
        ACCEPTANCE_ARGS="-ktest_write_bandwidth"))))
    job.start()
    # The event: a record of round 1 in a rank's spill file (the schedule's second round has begun).
    deadline = time.monotonic() + 600
    while not any('"round": 1' in f.read_text(errors="replace")
                  for f in (tmp_path / "reports").glob("*/logs/records-rank-*.jsonl")):
        assert time.monotonic() < deadline and job.is_alive(), result.get("log", "the job wrote no round 1")
        time.sleep(0.2)
    assert cluster.kill_node_processes("node5")
    job.join(timeout=600)
    assert result["rc"] == 1, result["log"]
    assert "acceptance: node5 lost: launching what is left again on 5 nodes (launch 2 of 2)" in result["log"]
    assert re.search(r"^acceptance: srun over Slurm job \d+, without node5$", result["log"], re.M), result["log"]
    folder = run_folder(result["log"])
    run = json.loads((folder / "run.json").read_text())
    assert [a["nodes"] for a in run["attempts"]][1] == ["node1", "node2", "node3", "node4", "node6"]
    assert run["attempts"][0]["left_behind"][0]["node"] == "node5", run["attempts"]
    assert run["attempts"][0]["left_behind"][0]["why"].startswith("srun: "), run["attempts"]
    failing = [f for f in json.loads((folder / "findings.json").read_text()) if f["severity"] == "fail"]
    assert [(f["node"], f["kind"]) for f in failing] == [("node5", "lost")], failing
    assert re.search(r'NodeName=node5 State=DRAIN Reason="acceptance: lost: srun: ', (folder / "drain.txt").read_text())
    recs = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    seen = Counter((tuple(r["nodes"]), r["rail"], r["size"]) for r in recs if r["metric"] == "bandwidth")
    assert max(seen.values()) == 1, [k for k, v in seen.items() if v > 1]
    survivors = [f"node{k}" for k in (1, 2, 3, 4, 6)]
    for rail in (0, 1):
        assert {(a, b) for (a, b), r, _ in seen if r == rail} >= set(permutations(survivors, 2))
