"""The switch fabric: a tree per rail (leaves, the uplinks joining them to spines, the spines).

A rail-optimized cluster is a tree per rail: node n's NIC on rail r plugs into a leaf of rail r,
and leaves join spines through uplinks. A pair on one leaf never leaves it; a pair on two leaves
crosses both leaves' uplinks and a spine. Slurm's topology.conf and topology.yaml give one node
grouping that holds on every rail (``Fabric.trees`` keyed by None); per-rail ibnetdiscover output
gives each rail its own tree, with the ports of each uplink where known.

ibnetdiscover output also gives each rail's cabling, and with the fabric's forwarding tables
(``topology.routes``) the cables each pair crosses: ``Fabric.routes`` (switchtree.routes).

The readers of those files live in switchtree.topofiles and switchtree.lftfiles; this module is only
the model, with the JSON form that run.json keeps (``Fabric.to_json`` / ``Fabric.from_json``): the
trees in full, the routes as a summary only (their tables are too large for run.json), which
rules.switches.kept_fabric reads the tables again by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cabling import Cabling
from .routes import Routes


@dataclass(frozen=True)
class Uplink:
    """One cable from a leaf to a spine (ports as the switches name them, where known)."""

    leaf: str
    spine: str
    leaf_port: str | None = None
    spine_port: str | None = None

    def to_json(self) -> dict:
        return {"leaf": self.leaf, "spine": self.spine, "leaf_port": self.leaf_port, "spine_port": self.spine_port}


@dataclass
class Tree:
    """One rail's tree: leaf -> its nodes (in file order), and the uplinks from leaves to spines."""

    leaves: dict[str, list[str]] = field(default_factory=dict)
    uplinks: list[Uplink] = field(default_factory=list)

    @property
    def spines(self) -> list[str]:
        return sorted({u.spine for u in self.uplinks})

    def leaf_of(self, node: str) -> str | None:
        for leaf, nodes in self.leaves.items():
            if node in nodes:
                return leaf
        return None

    def spines_of(self, leaf: str) -> list[str]:
        return sorted({u.spine for u in self.uplinks if u.leaf == leaf})

    def uplinks_of(self, leaf: str) -> list[Uplink]:
        return [u for u in self.uplinks if u.leaf == leaf]

    def to_json(self) -> dict:
        return {"leaves": {k: list(v) for k, v in self.leaves.items()},
                "uplinks": [u.to_json() for u in self.uplinks]}

    @classmethod
    def from_json(cls, d: dict) -> Tree:
        return cls(leaves={str(k): [str(n) for n in v] for k, v in (d.get("leaves") or {}).items()},
                   uplinks=[Uplink(str(u["leaf"]), str(u["spine"]), u.get("leaf_port"), u.get("spine_port"))
                            for u in d.get("uplinks") or []])


@dataclass
class Fabric:
    """The switches of a cluster: one tree for every rail (key None) or one per rail (key: rail)."""

    source: str                 # the file or folder read
    format: str                 # "topology.conf" | "topology.yaml" | "ibnetdiscover"
    trees: dict[int | None, Tree] = field(default_factory=dict)
    # what the reader read past or could not name, "PATH:LINE: why" (ibnetdiscover's own warnings, CAs
    # without a host name): the tree holds, but a user should know
    notes: list[str] = field(default_factory=list)
    # per rail, what its ibnetdiscover output says of ports and LIDs (none from Slurm's files): not in run.json
    cabling: dict[int, Cabling] = field(default_factory=dict, compare=False, repr=False)
    # the cables each pair crosses, where the forwarding tables are known (topology.routes)
    routes: Routes | None = field(default=None, compare=False, repr=False)

    def tree(self, rail: int) -> Tree | None:
        """Rail `rail`'s tree: its own, else the one every rail shares, else None."""
        return self.trees.get(rail, self.trees.get(None))

    @property
    def nodes(self) -> set[str]:
        return {n for t in self.trees.values() for ns in t.leaves.values() for n in ns}

    def unknown(self, nodes) -> list[str]:
        """The nodes of a run that no tree places on a leaf (in the order given)."""
        known = self.nodes
        return [n for n in nodes if n not in known]

    def to_json(self) -> dict:
        return {"source": self.source, "format": self.format,
                "trees": [{"rail": rail, **t.to_json()} for rail, t in self.trees.items()], "notes": list(self.notes),
                **({"routes": self.routes.summary()} if self.routes else {})}

    @classmethod
    def from_json(cls, d: dict) -> Fabric:
        trees = {}
        for t in d.get("trees") or []:
            rail = t.get("rail")
            trees[None if rail is None else int(rail)] = Tree.from_json(t)
        return cls(source=str(d.get("source") or ""), format=str(d.get("format") or ""), trees=trees,
                   notes=[str(n) for n in d.get("notes") or []])
