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


# ---------------------------------------------------------------- up --leaves K --spines S (S >= 2)
# Every leaf is cabled to each spine once, and every switch forwards by destination as OpenSM's
# D-mod-K engines do (ftree, updn on a fat tree): a flow to a node on another leaf climbs to spine
# (1 + the node's LID mod S) and comes down to the node's leaf. Node K's port is LID K on every rail
# (each rail is its own subnet); the leaves follow (LID N + L), then the spines (N + K + s).
# Ports as on a real leaf: the nodes on ports 1..m in leaf order, the cable to spine s on port
# (the largest leaf) + s; a spine's cable to leaf L on port L.


def spine_names(spines: int) -> list[str]:
    return [f"spine{s}" for s in range(1, spines + 1)]


def spine_of(lid: int, spines: int) -> int:
    """The 1-based spine a flow to `lid` climbs to (D-mod-K)."""
    return 1 + lid % spines


class TwoLevel:
    """One rail's two-level tree: who is where, which port each cable is on, the LIDs and GUIDs, and
    what the InfiniBand tools would print for it (ibnetdiscover, ibroute)."""

    def __init__(self, nodes: int, leaves: int, spines: int, rail: int):
        if spines < 2 or leaves < 2:
            raise ValueError("a two-level tree needs --leaves 2 or more and --spines 2 or more")
        self.nodes, self.leaves, self.spines, self.rail = nodes, leaves, spines, rail
        self.blocks = leaf_blocks(nodes, leaves)
        self.leaf = {k: int(name[4:]) for name, members in self.blocks.items() for k in members}
        self.width = max(len(m) for m in self.blocks.values())

    # ---- ports and identities
    def node_port(self, k: int) -> int:
        return self.blocks[f"leaf{self.leaf[k]}"].index(k) + 1

    def up_port(self, spine: int) -> int:
        """A leaf's port cabled to `spine`."""
        return self.width + spine

    def leaf_lid(self, leaf: int) -> int:
        return self.nodes + leaf

    def spine_lid(self, spine: int) -> int:
        return self.nodes + self.leaves + spine

    def _guid(self, kind: int, index: int) -> int:
        return 0x02AC_0000_0000_0000 | self.rail << 32 | kind << 16 | index

    def leaf_guid(self, leaf: int) -> int:
        return self._guid(1, leaf)

    def spine_guid(self, spine: int) -> int:
        return self._guid(2, spine)

    def ca_guid(self, k: int) -> int:
        return self._guid(3, 2 * k)

    def ca_port_guid(self, k: int) -> int:
        return self.ca_guid(k) + 1

    @staticmethod
    def switch_desc(name: str) -> str:
        return f"MF0;{name}:emulated/U1"

    def ca_desc(self, k: int) -> str:
        return f"node{k} rail{self.rail}"

    # ---- forwarding
    def out_port(self, switch: str, lid: int) -> int:
        """The port a switch (leafL / spineS) sends destination `lid` out of: 0 for itself."""
        kind, index = ("leaf", int(switch[4:])) if switch.startswith("leaf") else ("spine", int(switch[5:]))
        if kind == "leaf":
            if lid == self.leaf_lid(index):
                return 0
            if lid <= self.nodes and self.leaf[lid] == index:
                return self.node_port(lid)
            if lid > self.nodes + self.leaves:  # a spine: its own cable
                return self.up_port(lid - self.nodes - self.leaves)
            return self.up_port(spine_of(lid, self.spines))
        if lid == self.spine_lid(index):
            return 0
        if lid <= self.nodes:
            return self.leaf[lid]
        if lid <= self.nodes + self.leaves:
            return lid - self.nodes
        return 1  # another spine: down to leaf1, which sends it up its own cable

    # ---- what the tools print
    def ibnetdiscover(self) -> str:
        """`ibnetdiscover` output for the rail (man ibnetdiscover's form, as tests/data/routes/dmodk.topo)."""
        out = ["#", f"# Topology file: the emulated rail {self.rail} (tests/cluster/emucluster.py up --spines "
                    f"{self.spines}), in the form of ibnetdiscover's output", "#", ""]
        ports = 41
        for leaf in range(1, self.leaves + 1):
            g = self.leaf_guid(leaf)
            out += self._switch_head(g, f"leaf{leaf}", self.leaf_lid(leaf), ports)
            for k in self.blocks[f"leaf{leaf}"]:
                out.append(f'[{self.node_port(k)}]\t"H-{self.ca_guid(k):016x}"[1]({self.ca_port_guid(k):016x}) '
                           f'\t\t# "{self.ca_desc(k)}" lid {k} 4xNDR')
            for s in range(1, self.spines + 1):
                out.append(f'[{self.up_port(s)}]\t"S-{self.spine_guid(s):016x}"[{leaf}]\t\t'
                           f'# "{self.switch_desc(f"spine{s}")}" lid {self.spine_lid(s)} 4xNDR')
            out.append("")
        for s in range(1, self.spines + 1):
            out += self._switch_head(self.spine_guid(s), f"spine{s}", self.spine_lid(s), ports)
            for leaf in range(1, self.leaves + 1):
                out.append(f'[{leaf}]\t"S-{self.leaf_guid(leaf):016x}"[{self.up_port(s)}]\t\t'
                           f'# "{self.switch_desc(f"leaf{leaf}")}" lid {self.leaf_lid(leaf)} 4xNDR')
            out.append("")
        for k in range(1, self.nodes + 1):
            leaf = self.leaf[k]
            out += ["vendid=0x2c9", "devid=0x101d", f"sysimgguid=0x{self.ca_guid(k):016x}",
                    f"caguid=0x{self.ca_guid(k):016x}", f'Ca\t1 "H-{self.ca_guid(k):016x}"\t\t# "{self.ca_desc(k)}"',
                    f'[1]({self.ca_port_guid(k):016x}) \t"S-{self.leaf_guid(leaf):016x}"[{self.node_port(k)}]\t\t'
                    f'# lid {k} lmc 0 "{self.switch_desc(f"leaf{leaf}")}" lid {self.leaf_lid(leaf)} 4xNDR', ""]
        return "\n".join(out)

    @staticmethod
    def _switch_head(guid: int, name: str, lid: int, ports: int) -> list[str]:
        return ["vendid=0x2c9", "devid=0xd2f0", f"sysimgguid=0x{guid:016x}", f"switchguid=0x{guid:016x}({guid:016x})",
                f'Switch\t{ports} "S-{guid:016x}"\t\t# "{TwoLevel.switch_desc(name)}" enhanced port 0 lid {lid} lmc 0']

    def ibroute(self) -> str:
        """Every switch's linear forwarding table as `ibroute` prints it, one after another (dump_lfts.sh)."""
        top = self.nodes + self.leaves + self.spines
        dests = {k: ("Channel Adapter", self.ca_port_guid(k), self.ca_desc(k)) for k in range(1, self.nodes + 1)}
        switches = [(f"leaf{L}", self.leaf_lid(L), self.leaf_guid(L)) for L in range(1, self.leaves + 1)]
        switches += [(f"spine{s}", self.spine_lid(s), self.spine_guid(s)) for s in range(1, self.spines + 1)]
        dests.update({lid: ("Switch", guid, self.switch_desc(name)) for name, lid, guid in switches})
        out = []
        for name, lid, guid in switches:
            out += [f"Unicast lids [0x0-0x{top:x}] of switch Lid {lid} guid 0x{guid:016x} ({self.switch_desc(name)}):",
                    "  Lid  Out   Destination", "       Port     Info "]
            for d in range(1, top + 1):
                kind, g, desc = dests[d]
                out.append(f"0x{d:04x} {self.out_port(name, d):03d} : ({kind} portguid 0x{g:016x}: '{desc}')")
            out.append(f"{top} valid lids dumped ")
        return "\n".join(out) + "\n"
