"""Localization over a switch tree (analysis.tree) and the pairs that would decide (analysis.deciding)."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from acceptance.analysis import deciding, tree
from acceptance.switchtree.fabric import Fabric, Tree, Uplink


def _tree(nodes: int, leaves: int) -> tuple[Tree, list[str]]:
    names = [f"n{i:02d}" for i in range(nodes)]
    per = -(-nodes // leaves)
    lv = {f"leaf{i + 1}": names[i * per:(i + 1) * per] for i in range(leaves)}
    return Tree(lv, [Uplink(leaf, "spine") for leaf in lv]), names


def _explain(nodes, leaves, is_bad, pairs=None):
    t, names = _tree(nodes, leaves)
    pairs = pairs if pairs is not None else list(combinations(range(nodes), 2))
    u, v = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    leaf, leaf_names = tree.leaf_codes(t, names)
    where = {i: leaf_names[leaf[i]] for i in range(nodes)}
    bad = np.array([is_bad(where[a], where[b], a, b) for a, b in pairs])
    return tree.explain_rail(u, v, bad, leaf, leaf_names, tree.single_spine(t, leaf_names), 0, 0.8, 0.5, nodes)


def _scopes(chosen):
    return [(c.scope, c.name if c.scope != "nic" else c.node) for c in chosen]


def test_a_slow_uplink_is_the_uplink_not_its_nodes():
    chosen = _explain(32, 4, lambda la, lb, a, b: (la == "leaf3") != (lb == "leaf3"))
    assert _scopes(chosen) == [("uplink", "leaf3")]
    assert chosen[0].parts["inside"] == (0, 28) and chosen[0].parts["other"] == (0, 276)


def test_a_slow_leaf_is_the_switch():
    assert _scopes(_explain(32, 4, lambda la, lb, a, b: "leaf2" in (la, lb))) == [("switch", "leaf2")]


def test_a_slow_spine_is_the_spine_and_a_slow_rail_is_left_to_the_plane():
    assert _scopes(_explain(32, 4, lambda la, lb, a, b: la != lb)) == [("spine", "spine")]
    assert _scopes(_explain(32, 4, lambda la, lb, a, b: True))[0] == ("rail", None)


def test_one_slow_nic_on_a_leaf_is_never_the_leaf():
    assert _scopes(_explain(32, 4, lambda la, lb, a, b: 5 in (a, b))) == [("nic", 5)]
    # two NICs on one leaf: still two NICs
    assert sorted(_scopes(_explain(32, 4, lambda la, lb, a, b: bool({5, 6} & {a, b})))) == [("nic", 5), ("nic", 6)]


def test_an_uplink_and_a_nic_on_another_leaf_are_both_named():
    chosen = _explain(32, 4, lambda la, lb, a, b: ((la == "leaf3") != (lb == "leaf3")) or 2 in (a, b))
    assert sorted(_scopes(chosen)) == [("nic", 2), ("uplink", "leaf3")]


def test_two_leaves_cannot_tell_their_uplinks_from_the_spine():
    chosen = _explain(6, 2, lambda la, lb, a, b: la != lb)
    assert len(chosen) == 1 and chosen[0].scope == "uplink"
    assert {(a.scope, a.name) for a in chosen[0].alternatives} == {("uplink", "leaf2"), ("spine", "spine")}


def test_a_leaf_with_one_node_cannot_be_told_from_its_nic():
    t = Tree({"leaf1": ["a"], "leaf2": ["b", "c", "d"], "leaf3": ["e", "f", "g"]},
             [Uplink(x, "spine") for x in ("leaf1", "leaf2", "leaf3")])
    names = ["a", "b", "c", "d", "e", "f", "g"]
    pairs = list(combinations(range(7), 2))
    leaf, leaf_names = tree.leaf_codes(t, names)
    bad = np.array([0 in p for p in pairs])
    u, v = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    chosen = tree.explain_rail(u, v, bad, leaf, leaf_names, "spine", 0, 0.8, 0.5, 7)
    assert chosen[0].scope == "nic" and {a.scope for a in chosen[0].alternatives} == {"uplink", "switch"}


def test_deciding_pairs():
    t, names = _tree(8, 2)
    up1, up2, spine = ({"scope": "uplink", "switch": "leaf1"}, {"scope": "uplink", "switch": "leaf2"},
                       {"scope": "switch", "switch": "spine"})
    assert deciding.deciding_pairs(up1, up2, t, names) == []       # two leaves: nothing decides
    assert deciding.deciding_pairs(up1, spine, t, names) == []
    sw = {"scope": "switch", "switch": "leaf1"}
    assert deciding.deciding_pairs(up1, sw, t, names)[0] == ("n00", "n01")  # a pair inside leaf1
    t3, names3 = _tree(9, 3)
    assert deciding.deciding_pairs({"scope": "uplink", "switch": "leaf1"}, {"scope": "switch", "switch": "spine"},
                                   t3, names3)[0] == ("n03", "n06")    # across the two other leaves


def test_pattern_gaps_name_what_a_sparse_pattern_leaves_open():
    t, names = _tree(8, 2)
    across_only = {(a, b) for a in names[:4] for b in names[4:]}
    gaps = deciding.pattern_gaps(t, names, across_only)
    whats = [g["what"] for g in gaps]
    assert "leaf leaf1 from its uplink (no pair inside it)" in whats and "leaf leaf1's uplink from spine spine (no pair across two other leaves)" in whats
    assert next(g for g in gaps if g["what"] == "leaf leaf1 from its uplink (no pair inside it)")["pairs"] == [("n00", "n01")]


@pytest.mark.parametrize("rail", [None, 1])
def test_fabric_json_round_trip(rail):
    t, _ = _tree(6, 2)
    f = Fabric("x.conf", "topology.conf", {rail: t})
    back = Fabric.from_json(f.to_json())
    assert back.tree(1).leaves == t.leaves and back.tree(1).spines == ["spine"]
    assert back.unknown(["n00", "zz"]) == ["zz"]
