"""A slow path beyond a node's leaf port blames the cable or the path, never the node (analysis.cables,
issue 41): with the fabric's routes the cable is named with both ends; with the switch tree alone, a
node whose traffic with its own leaf is normal and with other leaves slow is never drained."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic  # noqa: E402

from acceptance.analysis import analyze, cables  # noqa: E402
from acceptance.analysis.outliers import nic_outliers  # noqa: E402
from acceptance.rules.profile import load_profile  # noqa: E402
from acceptance.switchtree.fabric import Fabric  # noqa: E402

# 64 nodes on 8 leaves of 8 under 8 spines: each spine-to-leaf cable carries one node's inbound traffic
# from other leaves (D-mod-K), node i's through spine (i mod 8).
NODES, LEAVES, SPINES = 64, 8, 8
NAMES = synthetic.node_names(NODES)
TWO = synthetic.TwoLevel(NAMES, LEAVES, SPINES)


def _analyze(tmp_path, routes=True, inside=2, partners=16, **faults):
    run = synthetic.make_run_sampled(tmp_path / "run", nodes=NODES, rails=2, partners=partners, sizes=(8388608,),
                                     noise=0.01, tail=3, seed=11, latency=False, leaves=LEAVES, spines=SPINES,
                                     inside=inside, **faults)
    return analyze(run, topology=TWO.fabric(routes=routes if routes is not False else None))


def where(a):
    return [(f["severity"], f["scope"], f["switch"], f["node"], f["rail"], f.get("direction")) for f in a.findings]


def test_the_synthetic_tree_routes_by_destination():
    # node i's inbound from another leaf comes down from spine (i mod S); inside a leaf: no cable
    assert TWO.path("node01", "node02", 0) == ()
    up, down = TWO.path("node02", "node60", 0)
    assert (up.src.switch, up.dst.switch, down.src.switch, down.dst.switch) == ("leaf1", "spine4", "spine4", "leaf8")
    assert down.name() == "spine4 port 8 -> leaf8 port 12"
    assert down.undirected() == TWO.cable("leaf8", "spine4", "up").undirected() != up.undirected()
    assert TWO.path("node01", "gpu99", 0) is None
    assert len(TWO.cables(0)) == 2 * LEAVES * SPINES


@pytest.mark.parametrize("given", ["paths", "two-level"])
def test_a_slow_cable_down_to_a_leaf_is_the_cable_not_the_node_it_feeds(tmp_path, given):
    # spine3 -> leaf5 carries every flow from other leaves into node35 (index 34, 34 mod 8 = 2); the
    # routes as acceptance.switchtree.routes.Routes.from_paths gives them, or the synthetic tree's own
    a = _analyze(tmp_path, routes=TWO.routes() if given == "paths" else True,
                 slow_cable=("leaf5", "spine3", 1, "down", 0.5))
    assert where(a) == [("fail", "uplink", "leaf5", None, 1, None)]
    f = a.findings[0]
    assert f["uplinks"] == [{"leaf": "leaf5", "spine": "spine3", "leaf_port": "11", "spine_port": "5",
                             "direction": "down", "cable": "spine3 port 5 -> leaf5 port 11"}]
    assert f["message"].startswith("cable spine3 port 5 -> leaf5 port 11 on rail 1 is 50% slow")
    assert "no node is at fault" in f["message"] and a.drains == []
    # why not node35's NIC: its own leaf's pairs, which cross no cable, are normal
    assert any(e.startswith("node35's NIC is cleared") for e in f["evidence"])


def test_without_routes_the_path_beyond_the_leaf_port_is_named_and_nobody_drained(tmp_path):
    a = _analyze(tmp_path, routes=False, slow_cable=("leaf5", "spine3", 1, "down", 0.5))
    assert where(a) == [("fail", "uplink", "leaf5", "node35", 1, "rx")]
    msg = a.findings[0]["message"]
    assert msg.startswith("inbound to node35 from other leaves 0.5") and "within leaf5 1.0" in msg
    assert a.drains == [] and a.findings[0]["alternatives"] == []


def _alone(tmp_path, partners: int) -> str:
    """A node that random screening of `partners` rounds pairs with nobody on its own leaf on rail 1."""
    from acceptance.analysis import load_records
    run = synthetic.make_run_sampled(tmp_path / "schedule", nodes=NODES, rails=2, partners=partners,
                                     sizes=(8388608,), seed=11, latency=False, leaves=LEAVES, spines=SPINES)
    r = load_records(run)
    r = r[r["rail"] == 1]
    met = {n: set() for n in NAMES}
    for a, b in zip(r["src"].astype(str), r["dst"].astype(str)):
        met[a].add(b)
    leaf = {n: TWO.leaf[i] for i, n in enumerate(NAMES)}
    return next(n for n in NAMES if met[n] and all(leaf[m] != leaf[n] for m in met[n]))


def test_with_no_pair_on_its_own_leaf_the_node_is_not_blamed(tmp_path):
    # random screening: a node met nobody on its own leaf, so its NIC cannot be told from the cable down
    # to it; the cable (with routes) or the path (without) is named, its NIC as the alternative, no drain
    node = _alone(tmp_path, 6)
    i = NAMES.index(node)
    leaf, spine = TWO.leaf_names[TWO.leaf[i]], TWO.spines[i % SPINES]
    for routes in (True, False):
        a = _analyze(tmp_path / str(routes), routes=routes, inside=0, partners=6,
                     slow_cable=(leaf, spine, 1, "down", 0.5))
        assert [x[:3] for x in where(a)] == [("fail", "uplink", leaf)] and a.drains == [], where(a)
        assert a.findings[0]["alternatives"] == [{"scope": "nic", "switch": None, "node": node, "rail": 1}]
        assert "(no measured pair tells which)" in a.findings[0]["message"]


def test_a_cable_slow_both_ways_is_one_finding_with_both_directions(tmp_path):
    a = _analyze(tmp_path, slow_cable=("leaf2", "spine7", 0, "both", 0.5))
    assert where(a) == [("fail", "uplink", "leaf2", None, 0, None)]
    assert {u["direction"] for u in a.findings[0]["uplinks"]} == {"up", "down"}
    assert "leaf2 port 15 <-> spine7 port 2 (both directions)" in a.findings[0]["message"]
    assert a.drains == []


def test_a_cable_up_from_a_leaf_slows_no_node_and_is_named(tmp_path):
    # leaf2 -> spine7: the flows out of leaf2 to nodes 7, 15, ... of other leaves, no NIC's majority
    a = _analyze(tmp_path, slow_cable=("leaf2", "spine7", 0, "up", 0.5))
    assert where(a) == [("fail", "uplink", "leaf2", None, 0, None)]
    assert a.findings[0]["uplinks"][0]["cable"] == "leaf2 port 15 -> spine7 port 2"
    assert _analyze(tmp_path / "tree", routes=False, slow_cable=("leaf2", "spine7", 0, "up", 0.5)).drains == []


def test_a_nic_slow_receiving_is_its_nic_though_one_cable_carries_its_inbound(tmp_path):
    # node35's receive at 0.7x: the cable that carries its inbound flags too, but its own leaf's pairs
    # into it are as slow: the NIC, and the cable is not named
    a = _analyze(tmp_path, slow_rx=("node35", 1, 0.7))
    assert where(a) == [("fail", "nic", None, "node35", 1, "rx")]
    assert [d.node for d in a.drains] == ["node35"]
    both = _analyze(tmp_path / "both", slow_nic=("node35", 1, 0.6))
    assert [(f["scope"], f["node"]) for f in both.findings] == [("nic", "node35")]


def test_many_slow_cables_of_one_leaf_are_its_uplink(tmp_path):
    # every cable of leaf3 slow: the tree names the uplink, not 16 cables, and drains nobody
    a = _analyze(tmp_path, slow_uplink=("leaf3", 1, 0.6))
    assert [(f["scope"], f["switch"]) for f in a.findings] == [("uplink", "leaf3")]
    assert a.findings[0]["uplinks"] and "cable" not in a.findings[0]["uplinks"][0]
    assert a.drains == []


def test_a_fabric_without_routes_is_the_tree_alone():
    assert cables.routes_of(Fabric("x", "topology.conf")) is None and cables.routes_of(None) is None
    assert cables.routes_of(TWO.fabric()) is TWO


# ---- at scale, in memory --------------------------------------------------------------------------

def _pairs(rng, two: synthetic.TwoLevel, rails, partners, inside):
    nodes = len(two.names)
    rows = []
    for rail, p in enumerate(synthetic.sampled_pairs(nodes, rails, partners, rng, two.leaf, inside)):
        s = np.concatenate([p[:, 0], p[:, 1]])
        d = np.concatenate([p[:, 1], p[:, 0]])
        rows.append(pd.DataFrame({"rail": rail, "s": s, "d": d}))
    x = pd.concat(rows, ignore_index=True)
    x["value"] = 368.0 * synthetic.heavy_noise(rng, 0.01, 3.0, len(x))
    return x.assign(metric="bandwidth", size=8388608.0, unit="Gbit/s")[
        ["metric", "size", "rail", "s", "d", "value", "unit"]]


@pytest.fixture(scope="module")
def big():
    # 1,024 nodes on 32 leaves of 32 under 32 spines, 8 rails, 16 partners (2 on its own leaf)
    names = synthetic.node_names(1024)
    return synthetic.TwoLevel(names, 32, 32), load_profile(synthetic.SYNTHETIC_PROFILE)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_clean_fleet_at_1024_x_8_has_no_slow_cable(big, seed):
    # 16,384 cable directions judged, each on its ~16 crossing pair-directions: none flags by chance
    two, profile = big
    pairs = _pairs(np.random.default_rng(seed), two, 8, 16, 2)
    got = cables.locate(pairs, nic_outliers(pairs, profile), two.names, two.fabric(), profile)
    assert got.faults == [] and not got.rows.any()


def test_a_slow_cable_at_1024_x_8_is_found_and_its_node_cleared(big):
    two, profile = big
    pairs = _pairs(np.random.default_rng(7), two, 8, 16, 2)
    hit = two.crossing("leaf9", "spine20", "down")
    mine = (pairs["rail"] == 3).to_numpy() & hit[pairs["s"], pairs["d"]]
    pairs.loc[mine, "value"] *= 0.5
    nics = nic_outliers(pairs, profile)
    fed = int(np.flatnonzero(hit.any(axis=0))[0])            # the one node whose inbound it carries
    assert set(zip(nics["rail"], nics["node"], nics["direction"])) == {(3, fed, "rx")}
    got = cables.locate(pairs, nics, two.names, two.fabric(), profile)
    assert [(f.kind, f.rail, f.leaf, [u["cable"] for u in f.cables]) for f in got.faults] == [
        ("cable", 3, "leaf9", ["spine20 port 9 -> leaf9 port 52"])]
    assert got.nics.empty and got.rows.sum() == mine.sum()


def test_a_slow_spine_of_several_is_the_spine_not_the_nodes_it_feeds(tmp_path):
    # every cable of spine3 slow both ways: the inbound of node03, node11, ... (i mod 8 = 2) from other
    # leaves, and every leaf's flows to them; with routes the spine is named, and nobody drained
    faults = [(leaf, "spine3", 1, "both", 0.5) for leaf in TWO.leaf_names]
    a = _analyze(tmp_path, slow_cable=faults)
    assert [(f["scope"], f["switch"], f["rail"]) for f in a.findings if f["severity"] == "fail"] == [
        ("switch", "spine3", 1)]
    assert a.drains == []
    # the tree alone: each node it feeds, its inbound from other leaves slow, its own leaf's normal
    blind = _analyze(tmp_path / "tree", routes=False, slow_cable=faults)
    assert {(f["scope"], f["node"], f["direction"]) for f in blind.findings if f["severity"] == "fail"} == {
        ("uplink", n, "rx") for n in NAMES[2::SPINES]}
    assert blind.drains == []


def test_a_nic_slow_sending_with_no_pair_on_its_own_leaf_is_its_nic(tmp_path):
    # its outbound flows leave by whichever uplink each destination is routed to: no part beyond its
    # leaf port carries them alone, so even unmeasured at home it is the NIC (receiving would not be)
    node = _alone(tmp_path, 6)
    for routes in (True, False):
        a = _analyze(tmp_path / str(routes), routes=routes, inside=0, partners=6, slow_tx=(node, 1, 0.7))
        assert where(a) == [("fail", "nic", None, node, 1, "tx")] and [d.node for d in a.drains] == [node]
