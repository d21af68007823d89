"""The switch-tree readers (switchtree.topofiles): Slurm's topology.conf and topology.yaml, ibnetdiscover output
(a file, or a folder of one per rail), each error naming file, line and why."""

from __future__ import annotations

import os
import re
from pathlib import Path

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


def _tree(text: str, source: str = "r.txt") -> Tree:
    """The one tree of an ibnetdiscover output, which must read without a note."""
    fabric = parse_ibnetdiscover(text, source)
    assert (fabric.source, fabric.format, list(fabric.trees), fabric.notes) == (source, "ibnetdiscover", [0], [])
    return fabric.trees[0]


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
    tree = _tree(IBNET, "rail0.txt")
    assert tree == RAIL_TREE
    assert tree.spines == ["spine01"] and tree.spines_of("leaf02") == ["spine01"]


def test_ibnetdiscover_without_some_blocks_still_places_the_hosts():
    # No CA blocks (the leaves' ports name their hosts), or no block for leaf02 (its hosts' and the
    # spine's ports name it): the same tree.
    assert _tree(_ibnet(LEAF01, SPINE, LEAF02)) == RAIL_TREE
    tree = _tree(_ibnet(LEAF01, SPINE, *CAS))
    assert tree.leaves == {"leaf01": ["gpu001", "gpu002"], "leaf02": ["gpu004", "gpu003"]}
    assert tree.uplinks == RAIL_TREE.uplinks


def test_ibnetdiscover_switch_names_fall_back_to_the_description_then_the_guid():
    leaf = LEAF01.replace("MF0;leaf01:MQM8700/U1", "rack3-leaf")  # a node-name-map's name
    spine = SPINE.replace('"MF0;spine01:MQM8700/U1"', '""').replace("MF0;spine01:MQM8700/U1", "")
    leaf = leaf.replace("MF0;spine01:MQM8700/U1", "")
    tree = _tree(_ibnet(leaf, spine))
    assert tree.leaves == {"rack3-leaf": ["gpu001", "gpu002"]}
    assert tree.spines == ["0xfc6a1c0300e6d000"]
    # a factory-default description two switches share names neither
    same = "Quantum Mellanox Technologies"
    tree = _tree(_ibnet(LEAF01.replace("MF0;leaf01:MQM8700/U1", same),
                        LEAF02.replace("MF0;leaf02:MQM8700/U1", same), SPINE))
    assert list(tree.leaves) == ["0xfc6a1c0300e6c7c0", "0xfc6a1c0300e6e100"] and tree.spines == ["spine01"]


def test_ibnetdiscover_grouping_lines_are_read_past():
    grouped = HEADER + "\nNon-Chassis Nodes\n\n" + LEAF01.replace(
        "switchguid=0xfc6a1c0300e6c7c0(fc6a1c0300e6c7c0)", "switchguid=0xfc6a1c0300e6c7c0(fc6a1c0300e6c7c0)\t# ")
    grouped = grouped.replace("[33]\t", "[33][ext 1]\t")
    tree = _tree(grouped)
    assert tree.leaves == {"leaf01": ["gpu001", "gpu002"]} and tree.uplinks[0] == Uplink("leaf01", "spine01", "33", "1")


def test_ibnetdiscover_errors_name_the_file_and_line():
    _assert_at(_error(parse_ibnetdiscover, _ibnet(*CAS), "rail2.txt", 2), "rail2.txt", None,
               r"no Switch in this ibnetdiscover output \(rail 2\)")
    broken = IBNET.replace('[2]\t"H-b8cef60300d8a5f0"', '[2]\t"H-b8cef60300d8a5f0" garbled', 1)
    line = next(i for i, s in enumerate(IBNET.splitlines(), 1) if s.startswith('[2]\t"H-b8cef60300d8a5f0"'))
    _assert_at(_error(parse_ibnetdiscover, broken, "rail0.txt"), "rail0.txt", line, "not an ibnetdiscover line")
    stray = HEADER + '\n[1]\t"S-fc6a1c0300e6c7c0"[1]\t\t# "x" lid 1 4xNDR\n'
    _assert_at(_error(parse_ibnetdiscover, stray, "r.txt"), "r.txt", 6, "a port line outside a Switch or Ca block")


def _line_of(text: str, start: str) -> int:
    return next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith(start))


@pytest.mark.parametrize("old, new, leaf01, noted", [
    # two CAs with the same "<host> <device>": two hosts claim one name (a cloned image), neither is it
    ("gpu002 mlx5_0", "gpu001 mlx5_0", ["0xb8cef60300d8a4e2", "0xb8cef60300d8a5f0"], 2),
    # a host that set its description before its name; the adapter's factory default
    ("gpu002 mlx5_0", "localhost mlx5_0", ["gpu001", "0xb8cef60300d8a5f0"], 1),
    ("gpu002 mlx5_0", "MT4123 ConnectX6   Mellanox Technologies", ["gpu001", "0xb8cef60300d8a5f0"], 1),
])
def test_a_ca_whose_description_names_no_host_is_its_own_node_by_guid(old, new, leaf01, noted):
    fabric = parse_ibnetdiscover(IBNET.replace(old, new), "rail0.txt")
    assert fabric.trees[0].leaves["leaf01"] == leaf01 and fabric.trees[0].uplinks == RAIL_TREE.uplinks
    assert len(fabric.notes) == 1
    _assert_at(fabric.notes[0], "rail0.txt", None, rf"{noted} of 4 CAs name no host in their NodeDescription "
                                                   r"\(0xb8cef60300d8a\w+ .*\): each is its own node, named by "
                                                   r"its GUID, which no Slurm node matches; .*rdma-ndd")


@pytest.mark.parametrize("first, second", [("gpu001 mlx5_0", "gpu001 mlx5_1"),  # rdma-ndd's "%h %d"
                                           ("gpu001", "gpu001")])  # its "%h" alone
def test_one_hosts_hcas_on_one_leaf_are_one_node(first, second):
    two = IBNET.replace("gpu001 mlx5_0", first).replace("gpu002 mlx5_0", second)
    assert _tree(two).leaves == {"leaf01": ["gpu001"], "leaf02": ["gpu004", "gpu003"]}


@pytest.mark.parametrize("first, third", [("gpu001 mlx5_0", "gpu001 mlx5_1"),  # one host's HCAs on two rails
                                          ("gpu001", "gpu001")])  # or two hosts whose descriptions name one host
def test_a_node_on_two_leaves_of_one_subnet_is_an_error_naming_both(first, third):
    text = IBNET.replace("gpu001 mlx5_0", first).replace("gpu003 mlx5_0", third)
    on01, on02 = _line_of(text, '[1]\t"H-b8cef60300d8a4e2"'), _line_of(text, '[2]\t"H-b8cef60300d8b000"')
    _assert_at(_error(parse_ibnetdiscover, text, "rail0.txt"), "rail0.txt", on02,
               rf"node gpu001 is on two leaves: leaf01 \(port 1, line {on01}, CA 0xb8cef60300d8a4e2\) and leaf02 "
               r"\(port 2, CA 0xb8cef60300d8b000\): a rail's tree places a node on one leaf. .*several rails of "
               r"this one subnet \(give Slurm's topology.conf instead\) or two hosts' NodeDescriptions")


def test_tool_messages_among_the_blocks_are_noted_and_a_loopback_cable_is_no_uplink():
    warned = IBNET.replace("\nvendid=0x2c9\ndevid=0xd2f0\nsysimgguid=0xfc6a1c0300e6e100",
                           "\nibwarn: [3407] mad_rpc: _do_madrpc failed; dport (DR path slid 0; dlid 0; 0,1,34)"
                           "\nvendid=0x2c9\ndevid=0xd2f0\nsysimgguid=0xfc6a1c0300e6e100", 1)
    looped = SPINE + ('[5]\t"S-fc6a1c0300e6d000"[6]\t\t# "MF0;spine01:MQM8700/U1" lid 9 4xNDR\n'
                      '[6]\t"S-fc6a1c0300e6d000"[5]\t\t# "MF0;spine01:MQM8700/U1" lid 9 4xNDR\n')
    text = warned.replace(SPINE, looped)
    fabric = parse_ibnetdiscover(text, "rail0.txt")
    assert fabric.trees == {0: RAIL_TREE}
    _assert_at(fabric.notes[0], "rail0.txt", _line_of(text, "ibwarn:"), r"ibnetdiscover reported a problem while "
               r"discovering \(read past\): 'ibwarn: \[3407\] mad_rpc: .*0,1,34\)'; what it could not reach is not")


# --- real captures' shapes (tests/data: each file names the public capture it follows) ----------------------

IBDATA = Path(__file__).resolve().parents[1] / "data" / "ibnetdiscover"
SLURMDATA = Path(__file__).resolve().parents[1] / "data" / "topology"
FACTORY = "MT23108 InfiniHost Mellanox Technologies"
MAN_CAS = {"0008f1040a001354": "node001", "0008f1040a000558": "node002", "0008f1040a000984": "node003",
           "005442b10000a900": "node004"}


def _describe(text: str, names: dict[str, str], lines: str = "") -> str:
    """`text` with each CA's factory description (GUID -> new one in `names`) replaced on its lines that
    start with `lines` ("[": the switches' port lines only, where a node-name-map's name shows)."""
    out = []
    for line in text.splitlines(keepends=True):
        guid = next((g for g in names if f'"H-{g}"' in line and line.startswith(lines)), None)
        out.append(line.replace(FACTORY, names[guid]) if guid else line)
    return "".join(out)


def test_cas_that_all_keep_their_factory_description_are_refused_saying_how_to_name_them():
    # at main: the four were one node "MT23108" on both switches, with no word said
    f = IBDATA / "factory-descriptions.topo"
    message = _error(load_fabric, f)
    _assert_at(message, str(f), None, rf"no CA's NodeDescription names its host \(4 CAs: 0x0008f1040a000984 "
                                      rf'"{FACTORY}", 0x005442b10000a900 ".*" and 1 more\), so no Slurm node can be '
                                      r"placed on a leaf: set each host's NodeDescription to \"<hostname> <device>\" "
                                      r"\(rdma-ndd .*`ibnetdiscover --node-name-map FILE`")


def test_named_and_factory_described_cas_are_never_merged():
    f = IBDATA / "factory-descriptions.topo"
    fabric = parse_ibnetdiscover(_describe(f.read_text(), {"0008f1040a001354": "node001 HCA-1"}), str(f))
    assert fabric.trees[0].leaves == {"ISR9024 Voltaire": ["0x0008f1040a000558", "node001"],  # a dual-port CA once
                                      "SW-6IB4 Voltaire": ["0x005442b10000a900", "0x0008f1040a000984"]}
    assert fabric.trees[0].uplinks == []  # two leaves cabled to each other: no spine
    _assert_at(fabric.notes[0], str(f), None, rf'3 of 4 CAs name no host .*\(0x0008f1040a000984 "{FACTORY}"')
    assert len(fabric.notes) == 1


def test_a_node_name_map_names_the_cas_a_switch_line_shows():
    # ibnetdiscover --node-name-map renames a CA on its switches' lines, never on its own Ca line
    f = IBDATA / "factory-descriptions.topo"
    tree = _tree(_describe(f.read_text(), MAN_CAS, lines="["))
    assert tree.leaves == {"ISR9024 Voltaire": ["node002", "node001"], "SW-6IB4 Voltaire": ["node004", "node003"]}
    # the map's name wins over a NodeDescription that names a host too
    assert _tree(IBNET.replace('"gpu001 mlx5_0" lid 5', '"node001" lid 5')).leaves["leaf01"] == ["node001", "gpu002"]


def test_a_capture_that_starts_with_ibnetdiscovers_warning_is_read_with_a_note(tmp_path):
    f = IBDATA / "warning-first-loopbacks.topo"
    fabric = load_fabric(f)
    # SwitchIB's loopback cables (1-2, 19-21) and its cable to the SX6012 are no uplink; EDR to SDR all read
    assert fabric.trees == {0: Tree(leaves={"SwitchIB Mellanox Technologies": ["lab216", "lab111"],
                                            "switch-ab12cd": ["lab101", "lab100", "lab96"]})}
    assert len(fabric.notes) == 1
    _assert_at(fabric.notes[0], str(f), 1, r"ibnetdiscover reported a problem while discovering \(read past\): "
                                           r"'src/query_smp.c:195; umad \(DR path .*Connection timed out'")
    assert Fabric.from_json(fabric.to_json()) == fabric
    (tmp_path / "rail0.txt").write_text(IBNET)
    (tmp_path / "rail1.txt").write_text(f.read_text())
    folder = load_fabric(tmp_path)
    assert folder.trees[1] == fabric.trees[0] and folder.notes == [fabric.notes[0].replace(str(f),
                                                                                           str(tmp_path / "rail1.txt"))]


def test_a_file_that_is_not_ibnetdiscover_output_is_still_refused_after_its_messages(tmp_path):
    warning = "ibwarn: [3407] mad_rpc: _do_madrpc failed; dport (DR path slid 0; dlid 0; 0,1)\n"
    (tmp_path / "odd.txt").write_text(warning + "hello world\n")
    _assert_at(_error(load_fabric, tmp_path / "odd.txt"), str(tmp_path / "odd.txt"), 2, "not a switch-tree file")
    (tmp_path / "failed.txt").write_text(warning + "ibnetdiscover: iberror: failed: discover failed\n")
    _assert_at(_error(load_fabric, tmp_path / "failed.txt"), str(tmp_path / "failed.txt"), 1,
               r"only ibnetdiscover's own messages, no topology: 'ibwarn: \[3407\] mad_rpc")


def test_ibnetdiscovers_other_outputs_are_refused_naming_the_output_it_takes(tmp_path):
    f = IBDATA / "ports-report.txt"
    _assert_at(_error(load_fabric, f), str(f), 4, r"`ibnetdiscover --ports` output \(a line per port\): the switch "
                                                  r"tree is read from ibnetdiscover's default output, .* run plain "
                                                  r"`ibnetdiscover > rail0.txt`")
    (tmp_path / "list.txt").write_text('Ca\t : 0x0002c9030002a47c ports 2 devid 0x6340 vendid 0x2c9 "c0 HCA-1"\n')
    _assert_at(_error(load_fabric, tmp_path / "list.txt"), str(tmp_path / "list.txt"), 1,
               r"`ibnetdiscover --list` output \(its nodes, not their cables\)")


@pytest.mark.parametrize("name, leaves", [
    ("one-switch-two-hosts.topo", {"MT43132 Mellanox Technologies": ["compute-00-01", "compute-00-00"]}),
    ("sun-dcs-one-host.topo", {"Sun DCS 36 QDR switch localhost": ["nsn33-43"]}),
])
def test_small_real_captures_read_right(name, leaves):
    fabric = load_fabric(IBDATA / name)
    assert (fabric.trees, fabric.notes) == ({0: Tree(leaves=leaves)}, [])


def test_real_topology_conf_shapes_read_right():
    puppet = load_fabric(SLURMDATA / "puppet-managed.conf").trees[None]
    assert [(leaf, len(nodes)) for leaf, nodes in puppet.leaves.items()] == [("s0", 36), ("s1", 1), ("s2", 1),
                                                                             ("s3", 1)]
    assert puppet.leaves["s0"][-4:] == ["login1", "login2", "head1", "head2"] and puppet.uplinks == []
    tara = load_fabric(SLURMDATA / "no-final-newline.conf").trees[None]
    assert tara.leaves["s3"] == ["hpc-dgx1-001", "hpc-dgx1-002"] and tara.spines == ["s4"]
    assert tara.uplinks == [Uplink(f"s{i}", "s4") for i in range(4)]


def test_a_topology_conf_node_on_two_leaves_is_refused_naming_both():
    # Slurm runs with it, only warning "Multiple leaf switches contain nodes"
    f = SLURMDATA / "leaf-overlap.conf"
    _assert_at(_error(load_fabric, f), str(f), 7, r"node dgx-n051 is on two leaves: s2 \(line 5\) and s4: the "
                                                  r"harness cannot tell which leaf's cables its pairs cross; keep it")


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
    assert sorted(fabric.cabling) == [0, 1] and sorted(fabric.cabling[1].hosts) == ["gpu001", "gpu002"]


def test_ibnetdiscover_keeps_the_cabling_that_routes_are_followed_over():
    leaf01, spine01 = 0xfc6a1c0300e6c7c0, 0xfc6a1c0300e6d000
    cabling = parse_ibnetdiscover(IBNET, "rail0.txt").cabling[0]
    assert cabling.source == "rail0.txt"
    assert cabling.switches == {leaf01: "leaf01", spine01: "spine01", 0xfc6a1c0300e6e100: "leaf02"}
    assert cabling.links[(leaf01, 34)] == (spine01, 2) and cabling.links[(spine01, 2)] == (leaf01, 34)
    assert cabling.hosts == {"gpu001": [(0xb8cef60300d8a4e2, 1, 5)], "gpu002": [(0xb8cef60300d8a5f0, 1, 6)],
                             "gpu003": [(0xb8cef60300d8b000, 1, 7)], "gpu004": [(0xb8cef60300d8b010, 1, 8)]}
    # without the CAs' own blocks each LID is the one their switch's line gives; "lid 0" is none yet
    no_lid = LEAF02.replace('"gpu003 mlx5_0" lid 7', '"gpu003 mlx5_0" lid 0')
    switches_only = parse_ibnetdiscover(_ibnet(LEAF01, SPINE, no_lid), "r.txt")
    assert switches_only.cabling[0].hosts == {**cabling.hosts, "gpu003": [(0xb8cef60300d8b000, 1, None)]}


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
