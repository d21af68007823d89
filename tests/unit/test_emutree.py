"""The emulated switch tree's layout and the topology.conf both emulations write for it, read back by
the harness's own topology.conf parser."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import emutree  # noqa: E402

from acceptance.switchtree.lftfiles import load_routes
from acceptance.switchtree.topofiles import load_fabric, parse_topology_conf


def test_nodes_go_to_the_leaves_in_contiguous_blocks():
    assert emutree.leaf_blocks(6, 2) == {"leaf1": [1, 2, 3], "leaf2": [4, 5, 6]}
    assert emutree.leaf_blocks(5, 2) == {"leaf1": [1, 2, 3], "leaf2": [4, 5]}
    assert emutree.leaf_blocks(3, 3) == {"leaf1": [1], "leaf2": [2], "leaf3": [3]}
    assert [emutree.leaf_of(n, 6, 2) for n in range(1, 7)] == [1, 1, 1, 2, 2, 2]
    for bad in (0, 7):
        with pytest.raises(ValueError, match="--leaves must be 1..6"):
            emutree.leaf_blocks(6, bad)


@pytest.mark.parametrize("nodes, leaves", [(6, 2), (5, 2), (3, 3), (4, 1), (250, 16)])
def test_the_topology_conf_says_what_was_built(nodes, leaves):
    fabric = parse_topology_conf(emutree.topology_conf(nodes, leaves), "topology.conf")
    tree = fabric.tree(0)
    blocks = emutree.leaf_blocks(nodes, leaves)
    assert {leaf: sorted(members) for leaf, members in tree.leaves.items()} == {
        leaf: sorted(f"node{k}" for k in ks) for leaf, ks in blocks.items()}
    assert tree.spines == ["spine"] and fabric.tree(1) == tree  # every rail alike


def test_a_leaf_is_named_or_numbered():
    assert emutree.leaf_index("leaf2", 2) == 2 and emutree.leaf_index("1", 2) == 1
    with pytest.raises(ValueError, match="the tree has leaf1..leaf2"):
        emutree.leaf_index("leaf3", 2)


@pytest.mark.parametrize("nodes, leaves, spines", [(6, 3, 2), (7, 2, 3), (250, 16, 4)])
def test_a_tree_of_several_spines_prints_its_cabling_and_tables_as_the_tools_do(tmp_path, nodes, leaves, spines):
    # What `up --spines S` writes, read by the harness's own ibnetdiscover and ibroute readers: every
    # node on its leaf, and every pair across leaves up to spine 1 + (destination LID mod S) and down.
    (tmp_path / "cabling").mkdir()
    (tmp_path / "routes").mkdir()
    for rail in (0, 1):
        tree = emutree.TwoLevel(nodes, leaves, spines, rail)
        (tmp_path / "cabling" / f"rail{rail}.topo").write_text(tree.ibnetdiscover())
        (tmp_path / "routes" / f"rail{rail}.ibroute").write_text(tree.ibroute())
    fabric = load_fabric(tmp_path / "cabling")
    routes = load_routes(tmp_path / "routes", fabric)
    assert fabric.notes == [] and routes.notes == []
    blocks = emutree.leaf_blocks(nodes, leaves)
    assert fabric.tree(1).leaves == {leaf: [f"node{k}" for k in ks] for leaf, ks in blocks.items()}
    width = max(len(ks) for ks in blocks.values())
    for a, b in [(1, nodes), (nodes, 1), (1, 2), (2, nodes - 1)]:
        la, lb = emutree.leaf_of(a, nodes, leaves), emutree.leaf_of(b, nodes, leaves)
        s = 1 + b % spines
        want = [] if la == lb else [f"leaf{la} port {width + s} -> spine{s} port {la}",
                                    f"spine{s} port {lb} -> leaf{lb} port {width + s}"]
        assert [c.name() for c in routes.path(f"node{a}", f"node{b}", 1)] == want


def test_a_tree_of_several_spines_needs_two_leaves_and_two_spines():
    for leaves, spines in ((1, 2), (3, 1)):
        with pytest.raises(ValueError, match="--leaves 2 or more and --spines 2 or more"):
            emutree.TwoLevel(6, leaves, spines, 0)
