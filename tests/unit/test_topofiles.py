"""The switch-tree readers (switchtree.topofiles): Slurm's topology.conf and topology.yaml, ibnetdiscover output
(a file, or a folder of one per rail), each error naming file, line and why."""

from __future__ import annotations

import os
import re

import pytest

from acceptance.records.results import InputError
from acceptance.switchtree.fabric import Fabric, Tree, Uplink
from acceptance.switchtree.topofiles import (TopologyFileError, load_fabric, parse_ibnetdiscover, parse_topology_conf,
                                       parse_topology_yaml)

# Slurm's topology guide and topology.conf(5): comments, LinkSpeed, a parent of the leaves.
CONF = """\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/tree plugin
##################################################################
SwitchName=s0 Nodes=dev[0-5]      LinkSpeed=900
SwitchName=s1 Nodes=dev[6-11]     LinkSpeed=900

# a third leaf, then the switch above them
SwitchName=s2 Nodes=dev[12-17]    LinkSpeed=900
SwitchName=s3 Switches=s[0-2]     LinkSpeed=1800
"""

# topology.yaml(5)'s example, its tree given leaves under a root.
YAML = """\
- topology: topo1
  cluster_default: True
  tree:
    switches:
    - switch: sw_root
      children: s[1-2]
    - switch: s1
      nodes: node[01-04]
    - switch: s2
      nodes: node[05-08]
- topology: topo2
  cluster_default: False
  block:
    block_sizes:
      - 4
      - 16
    blocks:
    - block: b1
      nodes: node[01-04]
    - block: b2
      nodes: node[05-08]
- topology: topo3
  cluster_default: False
  flat: True
"""

# `ibnetdiscover` on one rail: 2 leaves (MQM8700, named by their node descriptions) of 2 hosts, each
# leaf cabled twice to 1 spine; the header, tabs and trailing spaces as it prints them.
LEAF01 = """\
vendid=0x2c9
devid=0xd2f0
sysimgguid=0xfc6a1c0300e6c7c0
switchguid=0xfc6a1c0300e6c7c0(fc6a1c0300e6c7c0)
Switch\t41 "S-fc6a1c0300e6c7c0"\t\t# "MF0;leaf01:MQM8700/U1" enhanced port 0 lid 1 lmc 0
[1]\t"H-b8cef60300d8a4e2"[1](b8cef60300d8a4e3) \t\t# "gpu001 mlx5_0" lid 5 4xNDR
[2]\t"H-b8cef60300d8a5f0"[1](b8cef60300d8a5f1) \t\t# "gpu002 mlx5_0" lid 6 4xNDR
[33]\t"S-fc6a1c0300e6d000"[1]\t\t# "MF0;spine01:MQM8700/U1" lid 9 4xNDR
[34]\t"S-fc6a1c0300e6d000"[2]\t\t# "MF0;spine01:MQM8700/U1" lid 9 4xNDR
"""
LEAF02 = """\
vendid=0x2c9
devid=0xd2f0
sysimgguid=0xfc6a1c0300e6e100
switchguid=0xfc6a1c0300e6e100(fc6a1c0300e6e100)
Switch\t41 "S-fc6a1c0300e6e100"\t\t# "MF0;leaf02:MQM8700/U1" enhanced port 0 lid 2 lmc 0
[1]\t"H-b8cef60300d8b010"[1](b8cef60300d8b011) \t\t# "gpu004 mlx5_0" lid 8 4xNDR
[2]\t"H-b8cef60300d8b000"[1](b8cef60300d8b001) \t\t# "gpu003 mlx5_0" lid 7 4xNDR
[33]\t"S-fc6a1c0300e6d000"[3]\t\t# "MF0;spine01:MQM8700/U1" lid 9 4xNDR
[34]\t"S-fc6a1c0300e6d000"[4]\t\t# "MF0;spine01:MQM8700/U1" lid 9 4xNDR
"""
SPINE = """\
vendid=0x2c9
devid=0xd2f0
sysimgguid=0xfc6a1c0300e6d000
switchguid=0xfc6a1c0300e6d000(fc6a1c0300e6d000)
Switch\t41 "S-fc6a1c0300e6d000"\t\t# "MF0;spine01:MQM8700/U1" enhanced port 0 lid 9 lmc 0
[1]\t"S-fc6a1c0300e6c7c0"[33]\t\t# "MF0;leaf01:MQM8700/U1" lid 1 4xNDR
[2]\t"S-fc6a1c0300e6c7c0"[34]\t\t# "MF0;leaf01:MQM8700/U1" lid 1 4xNDR
[3]\t"S-fc6a1c0300e6e100"[33]\t\t# "MF0;leaf02:MQM8700/U1" lid 2 4xNDR
[4]\t"S-fc6a1c0300e6e100"[34]\t\t# "MF0;leaf02:MQM8700/U1" lid 2 4xNDR
"""


def _ca(guid: str, host: str, leaf_guid: str, leaf: str, port: int, lid: int) -> str:
    port_guid = f"{int(guid, 16) + 1:x}"
    return (f"vendid=0x2c9\ndevid=0x101d\nsysimgguid=0x{guid}\ncaguid=0x{guid}\n"
            f'Ca\t1 "H-{guid}"\t\t# "{host} mlx5_0"\n'
            f'[1]({port_guid}) \t"S-{leaf_guid}"[{port}]\t\t# lid {lid} lmc 0 "MF0;{leaf}:MQM8700/U1" lid 1 4xNDR\n')


CAS = [_ca("b8cef60300d8a4e2", "gpu001", "fc6a1c0300e6c7c0", "leaf01", 1, 5),
       _ca("b8cef60300d8a5f0", "gpu002", "fc6a1c0300e6c7c0", "leaf01", 2, 6),
       _ca("b8cef60300d8b000", "gpu003", "fc6a1c0300e6e100", "leaf02", 2, 7),
       _ca("b8cef60300d8b010", "gpu004", "fc6a1c0300e6e100", "leaf02", 1, 8)]
HEADER = ("#\n# Topology file: generated on Tue Mar  4 10:12:01 2025\n#\n"
          "# Initiated from node b8cef60300d8a4e2 port b8cef60300d8a4e3\n")


def _ibnet(*blocks: str) -> str:
    return HEADER + "".join("\n" + b for b in blocks)


IBNET = _ibnet(LEAF01, SPINE, LEAF02, *CAS)

RAIL_TREE = Tree(leaves={"leaf01": ["gpu001", "gpu002"], "leaf02": ["gpu004", "gpu003"]},
                 uplinks=[Uplink("leaf01", "spine01", "33", "1"), Uplink("leaf01", "spine01", "34", "2"),
                          Uplink("leaf02", "spine01", "33", "3"), Uplink("leaf02", "spine01", "34", "4")])


def _error(call, *args) -> str:
    with pytest.raises(TopologyFileError) as e:
        call(*args)
    assert isinstance(e.value, InputError)  # the CLI's exit code 2 for a bad input file
    return str(e.value)


def _assert_at(message: str, source: str, line: int | None, why: str) -> None:
    where = f"{source}:{line}: " if line else f"{source}: "
    assert message.startswith(where), message
    assert re.search(why, message[len(where):]), message


# --- topology.conf -----------------------------------------------------------------------------------


def test_topology_conf_gives_the_leaves_and_their_uplinks_for_every_rail():
    fabric = parse_topology_conf(CONF, "/etc/slurm/topology.conf")
    assert (fabric.source, fabric.format, list(fabric.trees)) == ("/etc/slurm/topology.conf", "topology.conf", [None])
    tree = fabric.trees[None]
    assert tree.leaves == {"s0": [f"dev{i}" for i in range(6)], "s1": [f"dev{i}" for i in range(6, 12)],
                           "s2": [f"dev{i}" for i in range(12, 18)]}
    assert tree.uplinks == [Uplink("s0", "s3"), Uplink("s1", "s3"), Uplink("s2", "s3")]
    assert fabric.tree(5) is tree and tree.spines == ["s3"] and tree.leaf_of("dev7") == "s1"


def test_topology_conf_keys_are_case_insensitive_and_lines_continue():
    text = ("switchname=leafA NODES=gpu[001-002],gpu010  # two and one\n"
            "SWITCHNAME=leafB nodes=\"gpu[003-004]\"\n"
            "SwitchName=spine \\\n    Switches=leafA,leafB\n")
    tree = parse_topology_conf(text, "t.conf").trees[None]
    assert tree.leaves == {"leafA": ["gpu001", "gpu002", "gpu010"], "leafB": ["gpu003", "gpu004"]}
    assert tree.uplinks == [Uplink("leafA", "spine"), Uplink("leafB", "spine")]


def test_topology_conf_multi_level_keeps_every_parent_child_link():
    text = ("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[3-4]\nSwitchName=l3 Nodes=n[5-6]\n"
            "SwitchName=agg1 Switches=l[1-2]\nSwitchName=agg2 Switches=l3\nSwitchName=core Switches=agg[1-2]\n")
    tree = parse_topology_conf(text, "t.conf").trees[None]
    assert list(tree.leaves) == ["l1", "l2", "l3"]
    assert tree.uplinks == [Uplink("l1", "agg1"), Uplink("l2", "agg1"), Uplink("l3", "agg2"),
                            Uplink("agg1", "core"), Uplink("agg2", "core")]
    assert tree.spines_of("l3") == ["agg2"]


@pytest.mark.parametrize("text, line, why", [
    ("SwitchName=s1 Nodes=a1\n# c\nSwitchName=s2 Node=a2\n", 3, r"unknown key Node= .*SwitchName="),
    ("SwitchName=s1 Nodes=a1\nNodes=a2 LinkSpeed=1\n", 2, "a line without SwitchName="),
    ("\nSwitchName=s1 Nodes=gpu[001-\n", 2, r"Nodes=gpu\[001-: not a hostlist \(unbalanced brackets\)"),
    ("SwitchName=s1 Nodes=gpu[1-2]\nSwitchName=s2 Nodes=gpu[2-3]\n", 2,
     r"node gpu2 is on two leaves: s1 \(line 1\) and s2"),
    ("SwitchName=s1 Nodes=a1\nSwitchName=s2 Nodes=a2\nswitchname=s1 Nodes=a3\n", 3,
     r"switch s1 declared twice \(first at line 1\)"),
    ("SwitchName=s1 Nodes=a1\nSwitchName=top Switches=s[1-2]\n", 2, "switch top: Switches= names s2, a switch never"),
    ("SwitchName=s1 Nodes=a1 Switches=s2\nSwitchName=s2 Nodes=a2\n", 1, "both Nodes= and Switches="),
    ("SwitchName=s1 Nodes=a1\nSwitchName=a Switches=b,s1\nSwitchName=b Switches=a\n", 3,
     "switches form a cycle: a > b > a"),
    ("SwitchName=s1 Switches=s1\n", 1, "cycle: s1 > s1"),
    ("SwitchName=s1 Nodes=a1 stray\n", 1, "not KEY=VALUE: 'stray'"),
    ("SwitchName=s1 Nodes=a1 Nodes=a2\n", 1, "Nodes= given twice"),
    ("BlockName=block1 Nodes=node[1-32]\n", 1, "BlockName= is topology/block's"),
    ("SwitchName= Nodes=a1\n", 1, "SwitchName= is empty"),
])
def test_topology_conf_errors_name_the_file_and_line(text, line, why):
    _assert_at(_error(parse_topology_conf, text, "/etc/slurm/topology.conf"), "/etc/slurm/topology.conf", line, why)


def test_a_topology_conf_with_no_switch_is_an_error():
    _assert_at(_error(parse_topology_conf, "# nothing here yet\n\n", "t.conf"), "t.conf", None, "no switch at all")


# --- topology.yaml -----------------------------------------------------------------------------------


def test_topology_yaml_reads_the_cluster_default_tree():
    fabric = parse_topology_yaml(YAML, "topology.yaml")
    assert (fabric.format, list(fabric.trees)) == ("topology.yaml", [None])
    assert fabric.trees[None] == Tree(leaves={"s1": ["node01", "node02", "node03", "node04"],
                                              "s2": ["node05", "node06", "node07", "node08"]},
                                      uplinks=[Uplink("s1", "sw_root"), Uplink("s2", "sw_root")])


def test_topology_yaml_takes_the_tree_marked_default_else_the_first_tree():
    two = ("- topology: a\n  tree:\n    switches:\n    - switch: la\n      nodes: n[1-2]\n"
           "- topology: b\n  cluster_default: true\n  tree:\n    switches:\n"
           "    - switch: lb\n      nodes: [n3, 'n[4-5]']\n")
    assert list(parse_topology_yaml(two, "t.yaml").trees[None].leaves) == ["lb"]
    assert parse_topology_yaml(two, "t.yaml").trees[None].leaves["lb"] == ["n3", "n4", "n5"]
    first = two.replace("cluster_default: true", "cluster_default: false")
    assert list(parse_topology_yaml(first, "t.yaml").trees[None].leaves) == ["la"]
    # the default is a block topology: the first tree still describes the switches
    block_default = ("- topology: blocks\n  cluster_default: true\n  block:\n    block_sizes: [4]\n"
                     "    blocks:\n    - block: b1\n      nodes: n[1-4]\n" + first)
    assert list(parse_topology_yaml(block_default, "t.yaml").trees[None].leaves) == ["la"]


@pytest.mark.parametrize("text, line, why", [
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      nodes: [a1\n", 6, "not YAML: .*"),
    ("topology: t\n", 1, r"not a list of topologies"),
    ("- tree:\n    switches: []\n", 1, r"a topology without its name"),
    ("- topology: t\n  tree:\n    switch: s1\n", 3, r"tree: needs switches:"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      node: a1\n", 5, r"unknown key node: .*nodes"),
    ("- topology: t\n  tree:\n    switches:\n    - nodes: a1\n", 4, r"a switch without its name"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      nodes: a[1-\n", 5, r"nodes=a\[1-: not a hostlist"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      nodes: a1\n    - switch: s1\n      nodes: a2\n",
     6, r"switch s1 declared twice \(first at line 4\)"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      nodes: a[1-2]\n"
     "    - switch: s2\n      nodes: a2\n", 6, "node a2 is on two leaves: s1"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      nodes: a1\n      children: s2\n"
     "    - switch: s2\n      nodes: a2\n", 4, "both nodes and children"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: top\n      children: s[1-2]\n"
     "    - switch: s1\n      nodes: a1\n", 4, "switch top: children names s2, a switch never declared"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: x\n      children: y\n    - switch: y\n      children: x\n",
     6, "switches form a cycle: x > y > x"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      nodes: a1\n      nodes: a2\n", 6,
     "nodes: given twice"),
])
def test_topology_yaml_errors_name_the_file_and_line(text, line, why):
    _assert_at(_error(parse_topology_yaml, text, "/etc/slurm/topology.yaml"), "/etc/slurm/topology.yaml", line, why)


def test_a_topology_yaml_without_a_tree_names_what_it_has():
    text = YAML.split("- topology: topo2")[1]
    _assert_at(_error(parse_topology_yaml, "- topology: topo2" + text, "t.yaml"), "t.yaml", None,
               r"no tree topology \(found: topo2 \(block\), topo3 \(flat\)\)")
    _assert_at(_error(parse_topology_yaml, "# empty\n", "t.yaml"), "t.yaml", None, "empty: no topology")


# --- ibnetdiscover -------------------------------------------------------------------------------------


def test_ibnetdiscover_gives_leaves_in_port_order_and_each_uplink_with_its_ports():
    tree = parse_ibnetdiscover(IBNET, "rail0.txt")
    assert tree == RAIL_TREE
    assert tree.spines == ["spine01"] and tree.spines_of("leaf02") == ["spine01"]


def test_ibnetdiscover_without_some_blocks_still_places_the_hosts():
    # No CA blocks (the leaves' ports name their hosts), or no block for leaf02 (its hosts' and the
    # spine's ports name it): the same tree.
    assert parse_ibnetdiscover(_ibnet(LEAF01, SPINE, LEAF02), "r.txt") == RAIL_TREE
    tree = parse_ibnetdiscover(_ibnet(LEAF01, SPINE, *CAS), "r.txt")
    assert tree.leaves == {"leaf01": ["gpu001", "gpu002"], "leaf02": ["gpu004", "gpu003"]}
    assert tree.uplinks == RAIL_TREE.uplinks


def test_ibnetdiscover_switch_names_fall_back_to_the_description_then_the_guid():
    leaf = LEAF01.replace("MF0;leaf01:MQM8700/U1", "rack3-leaf")  # a node-name-map's name
    spine = SPINE.replace('"MF0;spine01:MQM8700/U1"', '""').replace("MF0;spine01:MQM8700/U1", "")
    leaf = leaf.replace("MF0;spine01:MQM8700/U1", "")
    tree = parse_ibnetdiscover(_ibnet(leaf, spine), "r.txt")
    assert tree.leaves == {"rack3-leaf": ["gpu001", "gpu002"]}
    assert tree.spines == ["0xfc6a1c0300e6d000"]
    # a factory-default description two switches share names neither
    same = "Quantum Mellanox Technologies"
    tree = parse_ibnetdiscover(_ibnet(LEAF01.replace("MF0;leaf01:MQM8700/U1", same),
                                      LEAF02.replace("MF0;leaf02:MQM8700/U1", same), SPINE), "r.txt")
    assert list(tree.leaves) == ["0xfc6a1c0300e6c7c0", "0xfc6a1c0300e6e100"] and tree.spines == ["spine01"]


def test_ibnetdiscover_grouping_lines_are_read_past():
    grouped = HEADER + "\nNon-Chassis Nodes\n\n" + LEAF01.replace(
        "switchguid=0xfc6a1c0300e6c7c0(fc6a1c0300e6c7c0)", "switchguid=0xfc6a1c0300e6c7c0(fc6a1c0300e6c7c0)\t# ")
    grouped = grouped.replace("[33]\t", "[33][ext 1]\t")
    tree = parse_ibnetdiscover(grouped, "r.txt")
    assert tree.leaves == {"leaf01": ["gpu001", "gpu002"]} and tree.uplinks[0] == Uplink("leaf01", "spine01", "33", "1")


def test_ibnetdiscover_errors_name_the_file_and_line():
    _assert_at(_error(parse_ibnetdiscover, _ibnet(*CAS), "rail2.txt", 2), "rail2.txt", None,
               r"no Switch in this ibnetdiscover output \(rail 2\)")
    broken = IBNET.replace('[2]\t"H-b8cef60300d8a5f0"', '[2]\t"H-b8cef60300d8a5f0" garbled', 1)
    line = next(i for i, s in enumerate(IBNET.splitlines(), 1) if s.startswith('[2]\t"H-b8cef60300d8a5f0"'))
    _assert_at(_error(parse_ibnetdiscover, broken, "rail0.txt"), "rail0.txt", line, "not an ibnetdiscover line")
    stray = HEADER + '\n[1]\t"S-fc6a1c0300e6c7c0"[1]\t\t# "x" lid 1 4xNDR\n'
    _assert_at(_error(parse_ibnetdiscover, stray, "r.txt"), "r.txt", 6, "a port line outside a Switch or Ca block")


# --- load_fabric: the format, the rails ------------------------------------------------------------------


def test_load_fabric_detects_each_format(tmp_path):
    (tmp_path / "topology.conf").write_text(CONF)
    (tmp_path / "topology.yaml").write_text(YAML)
    (tmp_path / "slurm-topo").write_text("# no suffix: the content says yaml\n" + YAML)
    (tmp_path / "fabric.txt").write_text(IBNET)
    (tmp_path / "noheader.txt").write_text(_ibnet(LEAF01, SPINE, LEAF02).split("\n", 5)[5])
    assert load_fabric(tmp_path / "topology.conf").format == "topology.conf"
    assert load_fabric(str(tmp_path / "topology.yaml")).format == "topology.yaml"
    assert load_fabric(tmp_path / "slurm-topo").trees[None].leaves["s1"][0] == "node01"
    fabric = load_fabric(tmp_path / "fabric.txt")
    assert fabric == Fabric(str(tmp_path / "fabric.txt"), "ibnetdiscover", {0: RAIL_TREE})
    assert Fabric.from_json(fabric.to_json()) == fabric
    assert load_fabric(tmp_path / "noheader.txt").trees == {0: RAIL_TREE}


def test_a_single_ibnetdiscover_file_named_for_a_rail_is_that_rail(tmp_path):
    (tmp_path / "rail3.ibnetdiscover").write_text(IBNET)
    assert list(load_fabric(tmp_path / "rail3.ibnetdiscover").trees) == [3]


def test_a_folder_of_rail_files_gives_a_tree_per_rail(tmp_path):
    (tmp_path / "rail0.txt").write_text(IBNET)
    (tmp_path / "rail1.ibnetdiscover").write_text(_ibnet(LEAF01, SPINE, *CAS[:2]))
    (tmp_path / "README").write_text("how these were made\n")
    fabric = load_fabric(tmp_path)
    assert (fabric.source, fabric.format, sorted(fabric.trees)) == (str(tmp_path), "ibnetdiscover", [0, 1])
    assert fabric.trees[0] == RAIL_TREE and list(fabric.trees[1].leaves) == ["leaf01"]
    assert fabric.tree(1).leaf_of("gpu003") is None and fabric.unknown(["gpu003", "gpu009"]) == ["gpu009"]


def test_folder_errors_name_the_folder_or_file(tmp_path):
    _assert_at(_error(load_fabric, tmp_path), str(tmp_path), None, r"no rail<N> files")
    (tmp_path / "rail0.txt").write_text(IBNET)
    (tmp_path / "rail0.old").write_text(IBNET)
    _assert_at(_error(load_fabric, tmp_path), str(tmp_path), None, "two files for rail 0: rail0.old and rail0.txt")
    (tmp_path / "rail0.old").unlink()
    (tmp_path / "rail1.conf").write_text(CONF)
    _assert_at(_error(load_fabric, tmp_path), str(tmp_path / "rail1.conf"), None,
               "must be ibnetdiscover output, this is a topology.conf")


def test_load_fabric_errors_name_the_file(tmp_path):
    _assert_at(_error(load_fabric, tmp_path / "nope.conf"), str(tmp_path / "nope.conf"), None, "no such file")
    (tmp_path / "odd.txt").write_text("# a comment\n\nhello world\n")
    _assert_at(_error(load_fabric, tmp_path / "odd.txt"), str(tmp_path / "odd.txt"), 3,
               "not a switch-tree file; understood: Slurm topology.conf .*topology.yaml.*ibnetdiscover")
    (tmp_path / "empty.conf").write_text("# to be written\n")
    _assert_at(_error(load_fabric, tmp_path / "empty.conf"), str(tmp_path / "empty.conf"), None, "empty: no switch")
    (tmp_path / "blob").write_bytes(b"\xff\xfe\x00binary")
    _assert_at(_error(load_fabric, tmp_path / "blob"), str(tmp_path / "blob"), None, "not a text file")
    (tmp_path / "bad.conf").write_text(CONF + "SwitchName=s9 Nodes=dev1\n")
    _assert_at(_error(load_fabric, tmp_path / "bad.conf"), str(tmp_path / "bad.conf"), 11, "node dev1 is on two leaves")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_an_error(tmp_path):
    f = tmp_path / "topology.conf"
    f.write_text(CONF)
    f.chmod(0)
    try:
        _assert_at(_error(load_fabric, f), str(f), None, "cannot read: Permission denied")
    finally:
        f.chmod(0o644)
