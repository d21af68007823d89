"""Pairs slow as a switch's group (analysis.outliers.against_switches): a leaf, uplink or spine fault
too mild, or too widespread on its rail, for any of its pairs to be an outlier alone."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic  # noqa: E402
from acceptance.analysis import analyze  # noqa: E402

NETWORK = ("switch", "uplink")


def _analyze(tmp_path, nodes, rails, leaves, with_tree=True, **faults):
    run = synthetic.make_run(tmp_path / "run", nodes=nodes, rails=rails, sizes=(8388608,), collectives=False,
                             memreg=False, latency=False, leaves=leaves, **faults)
    conf = tmp_path / "topology.conf"
    conf.write_text(synthetic.topology_conf(synthetic.node_names(nodes), leaves))
    return analyze(run, topology=conf if with_tree else None)


def _named(a):
    return [(f["severity"], f["scope"], f.get("switch"), f.get("rail")) for f in a.findings]


def test_a_mildly_slow_leaf_is_found_as_a_group(tmp_path):
    # 15% slow, healthy pairs +-3%: 54 of a rail's 120 pairs touch leaf2, so they widen the rail's
    # spread and no pair alone is an outlier; as a group their median is 15% below the others'.
    a = _analyze(tmp_path, 16, 4, 4, slow_leaf=("leaf2", 1, 0.85), bw_noise=0.03)
    assert _named(a) == [("warn", "switch", "leaf2", 1)], a.findings
    assert a.drains == []
    # Without the tree every partner of leaf2's nodes sees them 15% slow: their NICs, each typically
    # slow (outliers.nic_outliers), are what can be named; warnings, no drain.
    blind = _analyze(tmp_path, 16, 4, 4, with_tree=False, slow_leaf=("leaf2", 1, 0.85), bw_noise=0.03)
    assert {(f["severity"], f["scope"], f["node"], f["rail"]) for f in blind.findings} == {
        ("warn", "nic", n, 1) for n in synthetic.leaf_nodes(synthetic.node_names(16), 4)["leaf2"]}
    assert blind.drains == []


def test_an_uplink_carrying_most_of_its_rail_is_found(tmp_path):
    # Two leaves: the uplink's pairs are 16 of a rail's 28, its median; the group still stands out.
    a = _analyze(tmp_path, 8, 2, 2, slow_uplink=("leaf2", 1, 0.6))
    assert [(s, sc, r) for s, sc, _, r in _named(a)] == [("fail", "uplink", 1)], a.findings
    assert {a.findings[0]["switch"]} | {x["switch"] for x in a.findings[0]["alternatives"]} == {"leaf1", "leaf2", "spine"}
    assert a.drains == []


@pytest.mark.parametrize("seed", range(8))
def test_a_noisy_healthy_fleet_has_no_slow_group(tmp_path, seed):
    # +-50% per pair on 6 nodes: groups of 9 to 15 pairs differ by 10% and more by chance; the
    # gap must also stand out of the spread (outlier_z), so none is named.
    a = _analyze(tmp_path, 6, 2, 2, bw_noise=0.5, seed=seed)
    assert [f for f in a.findings if f["scope"] in NETWORK] == [], _named(a)
