"""The switch tree both emulations build with ``--leaves K``: which node sits on which leaf, and the
Slurm ``topology.conf`` that says so (what `acceptance run --topology` reads).

Every rail is a tree of its own: K leaf switches (``leaf1``..``leafK``), each joined by one uplink
to the rail's spine (``spine``). The nodes go to the leaves in contiguous blocks, the first
``nodes % K`` leaves taking one node more: 6 nodes on 2 leaves are node1..node3 on leaf1 and
node4..node6 on leaf2. The same grouping holds on every rail, as on a rail-optimized cluster.
"""

from __future__ import annotations

import re

SPINE = "spine"


def leaf_blocks(nodes: int, leaves: int) -> dict[str, list[int]]:
    """leaf name -> its node indices (1-based), in contiguous blocks."""
    if not 1 <= leaves <= nodes:
        raise ValueError(f"--leaves must be 1..{nodes} (the number of nodes), not {leaves}")
    size, extra = divmod(nodes, leaves)
    blocks, start = {}, 1
    for i in range(leaves):
        n = size + (i < extra)
        blocks[f"leaf{i + 1}"] = list(range(start, start + n))
        start += n
    return blocks


def leaf_of(node: int, nodes: int, leaves: int) -> int:
    """The 1-based leaf a node index sits on."""
    for name, members in leaf_blocks(nodes, leaves).items():
        if node in members:
            return int(name[4:])
    raise ValueError(f"node{node} is not one of node1..node{nodes}")


def leaf_index(text: str, leaves: int) -> int:
    """``leaf2`` or ``2`` -> 2, checked against the tree's leaves."""
    m = re.fullmatch(r"(?:leaf)?(\d+)", str(text))
    if not m or not 1 <= int(m[1]) <= leaves:
        raise ValueError(f"no leaf {text!r}: the tree has leaf1..leaf{leaves}" if leaves
                         else f"no leaf {text!r}: the cluster has no switch tree (up --leaves K)")
    return int(m[1])


def topology_conf(nodes: int, leaves: int) -> str:
    """Slurm's tree-plugin topology.conf for the tree (node names node1..nodeN)."""
    lines = ["# the emulated switch tree (every rail alike): leaf switches and their spine"]
    for name, members in leaf_blocks(nodes, leaves).items():
        lines.append(f"SwitchName={name} Nodes=node[{members[0]}-{members[-1]}]" if len(members) > 1
                     else f"SwitchName={name} Nodes=node{members[0]}")
    lines.append(f"SwitchName={SPINE} Switches=leaf[1-{leaves}]" if leaves > 1 else f"SwitchName={SPINE} Switches=leaf1")
    return "\n".join(lines) + "\n"
