"""Readers of a cluster's switch tree: Slurm's topology.conf and topology.yaml, and ibnetdiscover output.

Each gives the model of switchtree.fabric. Slurm's files hold one node grouping that every rail shares
(``Fabric.trees[None]``); ibnetdiscover output is one rail's subnet, so a folder of ``rail<N>...``
files gives each rail its own tree, with the ports of every leaf-spine cable, and its cabling
(``Fabric.cabling``: every cable and each node's LIDs), which routes are followed over.

Every error is a TopologyFileError "PATH:LINE: why" (just "PATH: why" where no line applies), so a
user can go straight to the line to fix; what a reader reads past or cannot name, without refusing the
file, is a note of the same form in ``Fabric.notes``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import hostlist
import yaml

from .cabling import Cabling
from .fabric import Fabric, Tree, Uplink
from .sources import TOOL_MESSAGE, TopologyFileError, rail_files, rail_of, read_text, where

_FORMATS = ("Slurm topology.conf (SwitchName= lines), Slurm topology.yaml (a list of topologies with a tree), "
           "ibnetdiscover output (a file, or a folder of rail<N> files)")


# --- loading: which format, which rail ------------------------------------------------------------------


def load_fabric(path) -> Fabric:
    """The switch tree in `path`: a topology.conf, topology.yaml or ibnetdiscover file, or a folder of
    per-rail ibnetdiscover files (rail0.txt, rail1.ibnetdiscover, ...)."""
    p = Path(path).expanduser()
    if p.is_dir():
        return _load_folder(p)
    if not p.exists():
        raise TopologyFileError.at(str(p), None, "no such file or folder")
    source, text = str(p), read_text(p, _FORMATS)
    kind = _detect(text, source, p.name)
    if kind == "topology.conf":
        return parse_topology_conf(text, source)
    if kind == "topology.yaml":
        return parse_topology_yaml(text, source)
    return parse_ibnetdiscover(text, source, rail_of(p.name) or 0)


def _load_folder(folder: Path) -> Fabric:
    fabric = Fabric(str(folder), "ibnetdiscover")
    for rail, f in sorted(rail_files(folder, "one ibnetdiscover output").items()):
        text = read_text(f, _FORMATS)
        kind = _detect(text, str(f), f.name)
        if kind != "ibnetdiscover":
            # One Slurm file already covers every rail: a per-rail folder of them is a mix-up.
            raise TopologyFileError.at(str(f), None, f"a rail file in a folder must be ibnetdiscover output, "
                                                     f"this is a {kind}")
        one = parse_ibnetdiscover(text, str(f), rail)
        fabric.trees.update(one.trees)
        fabric.cabling.update(one.cabling)
        fabric.notes += one.notes
    return fabric


_CONF_FIRST = re.compile(r"(switchname|blockname|blocksizes|ringname)\s*=", re.IGNORECASE)
_YAML_FIRST = re.compile(r"-\s*topology\s*:")
_IBNET_FIRST = re.compile(r"((vendid|devid|sysimgguid|switchguid|caguid|rtguid)=|(Switch|Ca|Rt)\s+\d|Non-Chassis Nodes"
                          r"|Chassis \d)")
# ibnetdiscover's other outputs: --ports (a line per port) and --list, -H, -S, -R (a line per node).
_OTHER_IBNET = ((re.compile(r"(CA|SW|RT)\s+\d+\s+\d+\s+0x[0-9a-fA-F]+\s"),
                 "`ibnetdiscover --ports` output (a line per port)"),
                (re.compile(r"(Switch|Ca|Router)\s*:\s*0x[0-9a-fA-F]+\s+ports\s+\d+"),
                 "`ibnetdiscover --list` output (its nodes, not their cables)"))


def _detect(text: str, source: str, name: str = "") -> str:
    """The format, "topology.conf", "topology.yaml" or "ibnetdiscover", from the file's first content
    (or a .yaml name); TopologyFileError naming the formats understood otherwise."""
    if name.lower().endswith((".yaml", ".yml")):
        return "topology.yaml"
    message = None  # ibnetdiscover's first message about itself, when nothing else came yet
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("#"):
            if re.match(r"#\s*Topology file", line):  # the header ibnetdiscover prints
                return "ibnetdiscover"
            continue
        if not line or line == "---" or line.startswith("%YAML"):
            continue
        if TOOL_MESSAGE.match(line):
            message = message or (number, line)
            continue
        if _CONF_FIRST.match(line):
            return "topology.conf"
        if _YAML_FIRST.match(line):
            return "topology.yaml"
        if _IBNET_FIRST.match(line):
            return "ibnetdiscover"
        for pattern, what in _OTHER_IBNET:
            if pattern.match(line):
                raise TopologyFileError.at(source, number, f"{what}: the switch tree is read from ibnetdiscover's "
                                                           f"default output, its Switch and Ca blocks with their "
                                                           f"ports: run plain `ibnetdiscover > rail0.txt`")
        raise TopologyFileError.at(source, number, f"not a switch-tree file; understood: {_FORMATS}")
    if message:
        raise TopologyFileError.at(source, message[0], f"only ibnetdiscover's own messages, no topology: "
                                                       f"{message[1][:120]!r}")
    raise TopologyFileError.at(source, None, f"empty: no switch; understood: {_FORMATS}")


# --- the tree both Slurm formats describe -------------------------------------------------------------


@dataclass
class _Switch:
    """One switch as a Slurm file declares it: its nodes (a leaf) or its child switches."""

    name: str
    line: int
    nodes: list[str] | None = None
    children: list[str] | None = None


def _slurm_tree(switches: list[_Switch], source: str, nodes_key: str, children_key: str) -> Tree:
    """The tree of Slurm's switch lines, checked: unique switches, a node on one leaf, declared
    children, no cycle. Every parent-child link is an uplink (a leaf's are the ones that matter)."""
    if not switches:
        raise TopologyFileError.at(source, None, "no switch at all")
    declared: dict[str, _Switch] = {}
    for s in switches:
        if s.name in declared:
            raise TopologyFileError.at(source, s.line, f"switch {s.name} declared twice (first at line "
                                                       f"{declared[s.name].line})")
        if s.nodes is not None and s.children is not None:
            raise TopologyFileError.at(source, s.line, f"switch {s.name} has both {nodes_key} and {children_key}: "
                                                       f"a switch holds nodes (a leaf) or switches, not both")
        declared[s.name] = s
    leaves = _slurm_leaves(switches, source)
    _check_children(switches, declared, source, children_key)
    uplinks = [Uplink(child, s.name) for s in switches for child in s.children or ()]
    return Tree(leaves=leaves, uplinks=uplinks)


def _slurm_leaves(switches: list[_Switch], source: str) -> dict[str, list[str]]:
    leaves: dict[str, list[str]] = {}
    where: dict[str, _Switch] = {}
    for s in switches:
        if s.nodes is None:
            continue
        for node in s.nodes:
            if node in where:
                # Slurm only warns ("Multiple leaf switches contain nodes"); localizing needs the one leaf
                raise TopologyFileError.at(source, s.line, f"node {node} is on two leaves: {where[node].name} "
                                                           f"(line {where[node].line}) and {s.name}: the harness "
                                                           f"cannot tell which leaf's cables its pairs cross; "
                                                           f"keep it on one")
            where[node] = s
        leaves[s.name] = list(s.nodes)
    return leaves


def _check_children(switches: list[_Switch], declared: dict[str, _Switch], source: str, key: str) -> None:
    for s in switches:
        for child in s.children or ():
            if child not in declared:
                raise TopologyFileError.at(source, s.line, f"switch {s.name}: {key} names {child}, a switch "
                                                           f"never declared")
    cycle = _cycle({s.name: s.children or [] for s in switches})
    if cycle:
        closer = declared[cycle[-2]]  # the switch whose list closes the loop
        raise TopologyFileError.at(source, closer.line, "switches form a cycle: " + " > ".join(cycle))


def _cycle(children: dict[str, list[str]]) -> list[str] | None:
    """A loop parent > child > ... > parent, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in children:
        if start in state:
            continue
        path, stack = [start], [iter(children[start])]
        state[start] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append(iter(children.get(child, ())))
    return None


def _hostlist(expr: str, source: str, line: int, key: str) -> list[str]:
    try:
        return hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as e:
        raise TopologyFileError.at(source, line, f"{key}={expr}: not a hostlist ({e})") from None


# --- topology.conf -------------------------------------------------------------------------------------

_CONF_KEYS = {"switchname": "SwitchName", "switches": "Switches", "nodes": "Nodes", "linkspeed": "LinkSpeed"}
_OTHER_PLUGINS = {"blockname": "topology/block", "blocksizes": "topology/block", "ringname": "topology/ring"}
_PAIR = re.compile(r'([^\s=]+)=(?:"([^"]*)"|([^\s"]*))')


def parse_topology_conf(text: str, source: str) -> Fabric:
    """Slurm's topology.conf for topology/tree: SwitchName= lines with Nodes= (a leaf) or Switches=."""
    switches = [_conf_switch(pairs, source, line) for line, pairs in _conf_lines(text, source)]
    return Fabric(source, "topology.conf", {None: _slurm_tree(switches, source, "Nodes=", "Switches=")})


def _conf_lines(text: str, source: str):
    """(line number, {lower-cased key: (key as written, value)}) per logical line: comments dropped,
    a trailing backslash continuing the line (as Slurm's parser does)."""
    pending, first = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        body = raw.split("#", 1)[0].rstrip()
        if not pending:
            first = number
        if body.endswith("\\"):
            pending += body[:-1] + " "
            continue
        body, pending = pending + body, ""
        if body.strip():
            yield first, _conf_pairs(body, source, first)
    if pending.strip():
        yield first, _conf_pairs(pending, source, first)


def _conf_pairs(body: str, source: str, line: int) -> dict[str, tuple[str, str]]:
    pairs: dict[str, tuple[str, str]] = {}
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):
            return pairs
        m = _PAIR.match(body, pos)
        if not m or (m.end() < len(body) and not body[m.end()].isspace()):
            token = body[pos:].split(None, 1)[0]
            raise TopologyFileError.at(source, line, f"not KEY=VALUE: {token!r}")
        key = m.group(1)
        if key.lower() in pairs:
            raise TopologyFileError.at(source, line, f"{key}= given twice")
        pairs[key.lower()] = (key, m.group(2) if m.group(2) is not None else m.group(3))
        pos = m.end()


def _conf_switch(pairs: dict[str, tuple[str, str]], source: str, line: int) -> _Switch:
    for low, (key, _) in pairs.items():
        if low in _OTHER_PLUGINS:
            raise TopologyFileError.at(source, line, f"{key}= is {_OTHER_PLUGINS[low]}'s: this reads the switch "
                                                     f"tree of topology/tree (SwitchName= lines)")
        if low not in _CONF_KEYS:
            raise TopologyFileError.at(source, line, f"unknown key {key}= (a switch line has "
                                                     f"{', '.join(k + '=' for k in _CONF_KEYS.values())})")
    if "switchname" not in pairs:
        raise TopologyFileError.at(source, line, "a line without SwitchName=")
    name = pairs["switchname"][1]
    if not name:
        raise TopologyFileError.at(source, line, "SwitchName= is empty")
    s = _Switch(name, line)
    if "nodes" in pairs:
        s.nodes = _hostlist(pairs["nodes"][1], source, line, pairs["nodes"][0])
    if "switches" in pairs:
        s.children = _hostlist(pairs["switches"][1], source, line, pairs["switches"][0])
    return s


# --- topology.yaml -------------------------------------------------------------------------------------

_YAML_SWITCH_KEYS = ("switch", "children", "nodes")


def parse_topology_yaml(text: str, source: str) -> Fabric:
    """Slurm's topology.yaml (24.05+): the tree topology marked cluster_default, else the first tree."""
    root = _compose(text, source)
    if root is None:
        raise TopologyFileError.at(source, None, "empty: no topology")
    if not isinstance(root, yaml.SequenceNode):
        raise TopologyFileError.at(source, _line(root), "not a list of topologies (- topology: NAME ...)")
    topologies = [_yaml_mapping(item, source, "a topology") for item in root.value]
    for item, keys in zip(root.value, topologies):
        if "topology" not in keys:
            raise TopologyFileError.at(source, _line(item), "a topology without its name (topology: NAME)")
    trees = [keys for keys in topologies if "tree" in keys]
    if not trees:
        found = ", ".join(_yaml_kind(keys) for keys in topologies) or "none"
        raise TopologyFileError.at(source, None, f"no tree topology (found: {found})")
    chosen = next((keys for keys in trees if "cluster_default" in keys and _value(keys["cluster_default"][1]) is True),
                  trees[0])
    switches = _yaml_switches(chosen["tree"][1], source)
    return Fabric(source, "topology.yaml", {None: _slurm_tree(switches, source, "nodes", "children")})


def _yaml_kind(keys: dict) -> str:
    kinds = [k for k in keys if k in ("block", "flat", "torus3d")] or ["no type"]
    return f"{_value(keys['topology'][1])} ({'/'.join(kinds)})"


def _compose(text: str, source: str):
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        why = " ".join(str(x) for x in (e.context, e.problem) if x)
        raise TopologyFileError.at(source, mark.line + 1 if mark else None, f"not YAML: {why}") from None
    except yaml.YAMLError as e:
        raise TopologyFileError.at(source, None, f"not YAML: {e}") from None


def _line(node) -> int:
    return node.start_mark.line + 1


def _value(node):
    """A node's Python value (a bool for `true`, a list for a sequence...)."""
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


def _yaml_mapping(node, source: str, what: str) -> dict:
    """key -> (key node, value node) of a mapping node; a duplicate key is an error (YAML allows it)."""
    if not isinstance(node, yaml.MappingNode):
        raise TopologyFileError.at(source, _line(node), f"{what} must be a mapping (key: value)")
    keys: dict = {}
    for k, v in node.value:
        key = str(_value(k))
        if key in keys:
            raise TopologyFileError.at(source, _line(k), f"{key}: given twice")
        keys[key] = (k, v)
    return keys


def _yaml_switches(tree, source: str) -> list[_Switch]:
    keys = _yaml_mapping(tree, source, "tree")
    if "switches" not in keys or not isinstance(keys["switches"][1], yaml.SequenceNode):
        raise TopologyFileError.at(source, _line(tree), "tree: needs switches: (a list of - switch: NAME)")
    return [_yaml_switch(entry, source) for entry in keys["switches"][1].value]


def _yaml_switch(entry, source: str) -> _Switch:
    keys = _yaml_mapping(entry, source, "a switch")
    for key, (k, _) in keys.items():
        if key not in _YAML_SWITCH_KEYS:
            raise TopologyFileError.at(source, _line(k), f"unknown key {key}: (a switch has "
                                                         f"{', '.join(_YAML_SWITCH_KEYS)})")
    if "switch" not in keys or _value(keys["switch"][1]) in (None, ""):
        raise TopologyFileError.at(source, _line(entry), "a switch without its name (switch: NAME)")
    s = _Switch(str(_value(keys["switch"][1])), _line(entry))
    if "nodes" in keys:
        s.nodes = _yaml_hostlist(keys["nodes"][1], source, "nodes")
    if "children" in keys:
        s.children = _yaml_hostlist(keys["children"][1], source, "children")
    return s


def _yaml_hostlist(node, source: str, key: str) -> list[str]:
    """A hostlist string, or a list of them (both read the same)."""
    value = _value(node)
    if value is None:
        return []
    parts = value if isinstance(value, list) else [value]
    if not all(isinstance(p, (str, int)) for p in parts):
        raise TopologyFileError.at(source, _line(node), f"{key}: must be a hostlist such as node[01-04]")
    out: list[str] = []
    for p in parts:
        out += [n for n in _hostlist(str(p), source, _line(node), key) if n not in out]
    return out


# --- ibnetdiscover -------------------------------------------------------------------------------------

_GUID = r"([0-9a-fA-F]+)"
_IDS = re.compile(r"(vendid|devid|sysimgguid|switchguid|caguid|rtguid)=0x[0-9a-fA-F]+(\([0-9a-fA-F]+\))?\s*(#.*)?$")
_NODE = re.compile(r'(Switch|Ca|Rt)\s+\d+\s+"([SHR])-' + _GUID + r'"\s*(?:#\s*"(.*)".*)?$')
_PORT = re.compile(r"\[(\d+)\](?:\[ext \d+\])?(?:\(" + _GUID + r"\))?\s*"
                   r'"([SHR])-' + _GUID + r'"\[(\d+)\](?:\[ext \d+\])?\s*(?:\(' + _GUID + r"\))?\s*(?:#(.*))?$")
_PEER_DESC = re.compile(r'"(.*)"\s+lid\s+(\d+)')  # a switch's line: the peer's description and its port's LID
_OWN_LID = re.compile(r"\s*lid\s+(\d+)\s+lmc\s+\d+")   # a CA's line: its own port's base LID first
_GROUPING = re.compile(r"(Non-Chassis Nodes|Chassis \d+(\s+\(guid 0x[0-9a-fA-F]+\))?|Hostname: .*)$")
_SWITCH_DESC = re.compile(r"[^;]*;([^:]+):")  # Mellanox/NVIDIA "MF0;leaf01:MQM8700/U1"
# A CA's NodeDescription that names its host: rdma-ndd's default "%h %d" ("gpu001 mlx5_0", the short host
# name), MLNX_OFED's "gpu001 HCA-1", or "%h" alone. A factory default ("MT23108 InfiniHost Mellanox
# Technologies") names none. The host is the Slurm node name it must match: no space, bracket or comma.
_HOST_DESC = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\s+(?:HCA-\d+|[a-z][a-z0-9_]*\d))?")
_NO_HOST = ("localhost", "localhost.localdomain")  # a host that set its description before its name
_SET_DESCRIPTIONS = ("set each host's NodeDescription to \"<hostname> <device>\" (rdma-ndd of rdma-core writes "
                     "it at boot; or write /sys/class/infiniband/<device>/node_desc) and run ibnetdiscover again, "
                     "or run `ibnetdiscover --node-name-map FILE` with a line '0x<CA GUID> <node>' per CA")


@dataclass
class _IbNode:
    kind: str                  # "S" switch, "H" CA (a host's NIC), "R" router
    desc: str | None = None    # the NodeDescription its own block gives
    seen_as: list[str] = field(default_factory=list)  # as its peers' lines name it (a node-name-map's name)
    declared: int = 0          # the line of its Switch/Ca block, 0 when only a peer names it


def parse_ibnetdiscover(text: str, source: str, rail: int = 0) -> Fabric:
    """One rail's tree from `ibnetdiscover` output: leaves are the switches with a CA port, spines the
    switches linked only to switches, and every leaf-spine cable an Uplink with both ports. A CA is its
    host's node when its NodeDescription names the host (a host's several CAs are one node), else its
    GUID (a note says so). `rail` is the rail this subnet is: the key of its tree, named in errors."""
    nodes, links, lids, notes = _ib_scan(text, source)
    switches = [g for g, n in nodes.items() if n.kind == "S"]
    if not any(nodes[g].declared for g in switches):
        raise TopologyFileError.at(source, None, f"no Switch in this ibnetdiscover output (rail {rail})")
    names = _switch_names(nodes, switches)
    hosts, unnamed = _ca_names(nodes)
    notes += _unnamed_notes(nodes, hosts, unnamed, source)
    ports = _ports_by_switch(links, switches)
    on_leaf = _place_hosts(ports, hosts, names, source)
    leaves = [g for g in switches if on_leaf[g]]
    spines = {g for g in switches if not on_leaf[g] and any(nodes[r].kind == "S" for _, (r, _, _) in ports[g])}
    uplinks = [Uplink(names[g], names[r], str(p), str(rp)) for g in leaves for p, (r, rp, _) in ports[g]
               if r in spines]
    fabric = Fabric(source, "ibnetdiscover", {rail: Tree(leaves={names[g]: on_leaf[g] for g in leaves},
                                                         uplinks=uplinks)}, notes)
    fabric.cabling[rail] = _cabling(source, names, links, lids, hosts)
    return fabric


def _cabling(source: str, names: dict[int, str], links: dict, lids: dict[tuple[int, int], int],
             hosts: dict[int, str]) -> Cabling:
    """What routes are followed over: the switches' names, the cables, each node's CA ports and LIDs."""
    on_host: dict[str, list[tuple[int, int, int | None]]] = {}
    for (g, p) in sorted(links):
        if g in hosts:
            on_host.setdefault(hosts[g], []).append((g, p, lids.get((g, p))))
    return Cabling(source, dict(names), {end: (peer, peer_port) for end, (peer, peer_port, _) in links.items()},
                   on_host)


def _ports_by_switch(links: dict, switches: list[int]) -> dict[int, list[tuple[int, tuple[int, int, int]]]]:
    """Each switch's cabled ports in port order: [(port, (peer guid, peer port, line))]."""
    ports: dict[int, list] = {g: [] for g in switches}
    for (g, p), peer in links.items():
        if g in ports:
            ports[g].append((p, peer))
    return {g: sorted(v) for g, v in ports.items()}


def _ib_scan(text: str, source: str) -> tuple[dict[int, _IbNode], dict[tuple[int, int], tuple[int, int, int]],
                                              dict[tuple[int, int], int], list[str]]:
    """The nodes (by GUID, in the order the file names them, blocks first), the cables, each seen from
    both ends: (guid, port) -> (peer guid, peer port, the line that showed it), the CA ports' base LIDs
    ((guid, port) -> LID, from the CA's own line or its switch's), and the notes: the messages
    ibnetdiscover printed about itself (a capture with 2>&1), read past."""
    nodes: dict[int, _IbNode] = {}
    links: dict[tuple[int, int], tuple[int, int, int]] = {}
    lids: dict[tuple[int, int], int] = {}
    notes: list[str] = []
    current: int | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or _GROUPING.match(line):
            continue
        if TOOL_MESSAGE.match(line):
            notes.append(where(source, number, f"ibnetdiscover reported a problem while discovering (read past): "
                                                f"{line[:160]!r}; what it could not reach is not in this tree"))
            continue
        if _IDS.match(line):
            current = None  # a new block's ids: its ports follow its Switch/Ca line
            continue
        m = _NODE.match(line)
        if m:
            current = int(m.group(3), 16)
            node = nodes.setdefault(current, _IbNode(m.group(2)))
            node.kind, node.desc, node.declared = m.group(2), m.group(4), number
            continue
        m = _PORT.match(line)
        if not m:
            raise TopologyFileError.at(source, number, f"not an ibnetdiscover line: {line[:80]!r}")
        if current is None:
            raise TopologyFileError.at(source, number, "a port line outside a Switch or Ca block")
        peer, peer_port = int(m.group(4), 16), int(m.group(5))
        desc = _PEER_DESC.search(m.group(7) or "")
        known = nodes.setdefault(peer, _IbNode(m.group(3)))
        if desc:
            known.seen_as.append(desc.group(1))
            if m.group(3) == "H" and int(desc.group(2)):  # LID 0: the port has none (no subnet manager yet)
                lids.setdefault((peer, peer_port), int(desc.group(2)))
        own = _OWN_LID.match(m.group(7) or "")
        if own and nodes[current].kind == "H" and int(own.group(1)):
            lids.setdefault((current, int(m.group(1))), int(own.group(1)))
        links.setdefault((current, int(m.group(1))), (peer, peer_port, number))
        links.setdefault((peer, peer_port), (current, int(m.group(1)), number))
    return _blocks_first(nodes), links, lids, notes


def _blocks_first(nodes: dict[int, _IbNode]) -> dict[int, _IbNode]:
    """Declared nodes in file order, then those only a peer names: leaves keep the file's order."""
    order = sorted(nodes, key=lambda g: (nodes[g].declared == 0, nodes[g].declared))
    return {g: nodes[g] for g in order}


def _switch_names(nodes: dict[int, _IbNode], switches: list[int]) -> dict[int, str]:
    """Each switch's name from its description ("MF0;leaf01:MQM8700/U1" -> leaf01), else its GUID; a
    name two switches share (a factory default such as "Quantum Mellanox Technologies") is no name."""
    named = {g: _switch_name(nodes[g].desc if nodes[g].declared else next(iter(nodes[g].seen_as), None))
             for g in switches}
    shared = {n for n in named.values() if n and list(named.values()).count(n) > 1}
    return {g: n if n and n not in shared else f"0x{g:016x}" for g, n in named.items()}


def _switch_name(desc: str | None) -> str | None:
    if not desc or not desc.strip():
        return None
    m = _SWITCH_DESC.match(desc)
    return m.group(1).strip() if m and m.group(1).strip() else desc.strip()


def _ca_desc(node: _IbNode) -> str:
    return " ".join((node.desc or next(iter(node.seen_as), "")).split())


def _ca_names(nodes: dict[int, _IbNode]) -> tuple[dict[int, str], list[int]]:
    """Each CA's node, and the CAs named by GUID. The node is the host a description names: a switch's
    line first (under --node-name-map it gives the map's name, the CA's own line its NodeDescription).
    "<host> <device>" on two CAs is two hosts claiming one name (a cloned image): neither is named."""
    said = {g: next((d for d in [*n.seen_as, n.desc] if _host(d)), None) for g, n in nodes.items() if n.kind == "H"}
    twice = Counter(" ".join(d.split()) for d in said.values() if d and len(d.split()) == 2)
    names, unnamed = {}, []
    for g, d in said.items():
        if d is None or twice[" ".join(d.split())] > 1:
            names[g] = f"0x{g:016x}"
            unnamed.append(g)
        else:
            names[g] = _host(d)
    return names, unnamed


def _unnamed_notes(nodes: dict[int, _IbNode], hosts: dict[int, str], unnamed: list[int], source: str) -> list[str]:
    """The note on the CAs named by GUID; an error when that is every CA (the tree could place no node)."""
    if not unnamed:
        return []
    listed = ", ".join(f'0x{g:016x} "{_ca_desc(nodes[g])}"' for g in unnamed[:3])
    more = f" and {len(unnamed) - 3} more" if len(unnamed) > 3 else ""
    if len(unnamed) == len(hosts):
        raise TopologyFileError.at(source, None, f"no CA's NodeDescription names its host ({len(hosts)} CAs: "
                                                 f"{listed}{more}), so no Slurm node can be placed on a leaf: "
                                                 f"{_SET_DESCRIPTIONS}")
    return [where(source, None, f"{len(unnamed)} of {len(hosts)} CAs name no host in their NodeDescription "
                                 f"({listed}{more}: a factory default, or a description two CAs share): each is its "
                                 f"own node, named by its GUID, which no Slurm node matches; {_SET_DESCRIPTIONS}")]


def _host(desc: str | None) -> str | None:
    m = _HOST_DESC.fullmatch((desc or "").strip())
    return m.group(1) if m and m.group(1).lower() not in _NO_HOST else None


def _place_hosts(ports: dict, hosts: dict[int, str], names: dict[int, str], source: str) -> dict[int, list[str]]:
    """The nodes cabled to each switch, in port order, each once (a host's two CAs or ports on one leaf);
    a node on two leaves is an error: a rail's tree places it on one."""
    first: dict[str, tuple[int, int, int, int]] = {}  # node -> (switch, port, line, CA) where first seen
    on_leaf: dict[int, list[str]] = {}
    for g, cabled in ports.items():
        out = on_leaf[g] = []
        for p, (peer, _, line) in cabled:
            node = hosts.get(peer)
            if node is None:
                continue
            seen = first.setdefault(node, (g, p, line, peer))
            if seen[0] != g:
                raise TopologyFileError.at(source, line, (
                    f"node {node} is on two leaves: {names[seen[0]]} (port {seen[1]}, line {seen[2]}, CA "
                    f"0x{seen[3]:016x}) and {names[g]} (port {p}, CA 0x{peer:016x}): a rail's tree places a node "
                    f"on one leaf. Either its CAs are on several rails of this one subnet (give Slurm's "
                    f"topology.conf instead) or two hosts' NodeDescriptions name the same host (fix them)"))
            if node not in out:
                out.append(node)
    return on_leaf
