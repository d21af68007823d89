"""The cables a packet crosses, from the fabric's forwarding tables.

InfiniBand forwards by destination LID: each switch's linear forwarding table (LFT) gives one out port
per LID. From node A's HCA to node B's on one rail, A's leaf looks up B's LID, the port it names is
cabled to the next switch, which looks B's LID up in turn, and so on to the port cabled to B's HCA.
Followed over the rail's cabling (switchtree.cabling), that gives each pair-direction's
switch-to-switch cables, in order (the HCA-to-leaf cables are the NICs' own, and not listed).

``Routes.path`` is asked once per measured pair-direction, so the walks are cached per (switch,
destination LID): a rail costs at most its switches times its LIDs, however many pairs are asked. A
walk that comes back to a switch (a loop in the tables), reaches a switch with no table, a LID with no
entry, a port with no cable or the wrong host gives None, and ``Routes.notes`` says how many and where.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cabling import Cabling

NO_PORT = 255  # an LFT entry that forwards nowhere (OpenSM's OSM_NO_PATH; ibroute's invalid ports)


@dataclass(frozen=True)
class PortRef:
    """A switch port: the switch by its name in the rail's Tree (else its GUID, "0x..."), the port's number."""

    switch: str
    port: int


@dataclass(frozen=True)
class Cable:
    """A switch-to-switch cable in one direction: the end a packet leaves by, and the end it enters by."""

    src: PortRef
    dst: PortRef

    def name(self) -> str:
        return f"{self.src.switch} port {self.src.port} -> {self.dst.switch} port {self.dst.port}"

    def undirected(self) -> frozenset:
        """Both ends, the same for both directions: which physical cable this is."""
        return frozenset((self.src, self.dst))


def _order(cable: Cable) -> tuple:
    return cable.src.switch, cable.src.port


@dataclass(frozen=True, eq=False)
class SwitchTable:
    """One switch's LFT, as its dump gives it: out port by destination LID (NO_PORT where none)."""

    guid: int
    name: str | None       # the description its dump gives, for messages (the Tree's name comes from the cabling)
    ports: np.ndarray      # uint8, indexed by LID
    source: str            # where its dump starts, "PATH:LINE", for messages

    def port(self, lid: int) -> int | None:
        p = int(self.ports[lid]) if lid < len(self.ports) else NO_PORT
        return None if p == NO_PORT else p


class _Walks:
    """One rail: its tables followed over its cabling, each walk cached."""

    # what a walk that leads nowhere met, and what may have caused it
    _WHAT = {"loop": ("go round a loop in the forwarding tables", ""),
             "no table": ("reach a switch whose forwarding table was not given", ""),
             "no entry": ("reach a switch with no entry for the destination LID", ""),
             "no cable": ("leave a switch by a port the cabling shows no cable on", "tables and cabling of two times?"),
             "wrong host": ("reach a host that does not have the destination LID", "tables and cabling of two times?")}

    def __init__(self, rail: int, cabling: Cabling, tables: dict[int, SwitchTable]):
        self.rail = rail
        self._cabling, self._tables = cabling, tables
        self._index = {g: i for i, g in enumerate(cabling.switches)}  # a memo key is index << 16 | LID
        self._ends: dict[str, list[tuple[int | None, int | None]]] = {}  # node -> (its leaf, its LID) per CA port
        self._owner: dict[int, tuple[int, int]] = {}  # LID -> the CA port that has it
        self._node_of: dict[int, str] = {}
        for node, ports in cabling.hosts.items():
            ends = []
            for guid, port, lid in ports:
                peer = cabling.links.get((guid, port))
                ends.append((peer[0] if peer and peer[0] in cabling.switches else None, lid))
                if lid is not None:
                    self._owner[lid], self._node_of[lid] = (guid, port), node
            self._ends[node] = ends
        # a node with one CA port on the rail, its leaf and LID: a memo key is one OR away (most calls)
        self._from = {n: self._index[e[0][0]] << 16 for n, e in self._ends.items() if len(e) == 1 and e[0][0]}
        self._to = {n: e[0][1] for n, e in self._ends.items() if len(e) == 1 and e[0][1]}
        self._memo: dict[int, tuple[Cable, ...] | None] = {}
        self._cables: dict[tuple[int, int], Cable] = {}  # one object per cable direction, shared by the paths
        self._problems: dict[str, list] = {}  # kind -> [walks, the first one's words]

    def path(self, src: str, dst: str) -> tuple[Cable, ...] | None:
        """The one path from every CA port of src to every one of dst; None when they differ (a host
        with two ports on the rail: which one a pair used is not known) or one is unknown."""
        key = self._from.get(src, -1) | self._to.get(dst, -1)
        if key >= 0 and key in self._memo:
            return self._memo[key]
        srcs, dsts = self._ends.get(src), self._ends.get(dst)
        if not srcs or not dsts:
            return None
        found = None
        for leaf, _ in srcs:
            for _, lid in dsts:
                walked = self._walk(leaf, lid) if leaf is not None and lid is not None else None
                if walked is None or (found is not None and walked != found):
                    return None
                found = walked
        return found

    def _walk(self, start: int, lid: int) -> tuple[Cable, ...] | None:
        """The cables from switch `start` to LID `lid`'s CA port: at most one step per switch (a switch
        seen twice is a loop), cached for every switch the walk passed."""
        memo, index = self._memo, self._index
        trail: list[tuple[int, Cable]] = []
        seen: set[int] = set()
        sw = start
        while True:
            key = index[sw] << 16 | lid
            if key in memo:
                result = memo[key]
                break
            if sw in seen:
                at = next(i for i, (s, _) in enumerate(trail) if s == sw)
                self._problem("loop", f"{self._dest(lid)}: {', '.join(c.name() for _, c in trail[at:])}")
                result = None
                break
            seen.add(sw)
            result, step = self._step(sw, lid)
            if step is None:
                memo[key] = result
                break
            trail.append((sw, step))
            sw = self._cabling.links[(sw, step.src.port)][0]
        for s, cable in reversed(trail):
            result = None if result is None else (cable, *result)
            memo[index[s] << 16 | lid] = result
        return result

    def _step(self, sw: int, lid: int) -> tuple[tuple[Cable, ...] | None, Cable | None]:
        """At switch `sw`: ((), None) when its entry for `lid` leads to the LID's own CA port, (None, None)
        when it leads nowhere (noted), else (None, the cable to the next switch)."""
        switches = self._cabling.switches
        table = self._tables.get(sw)
        if table is None:
            self._problem("no table", f"{switches[sw]} (0x{sw:016x}) on the way to {self._dest(lid)}")
            return None, None
        out = table.port(lid)
        if not out:  # port 0 is the switch's own management port, no way to a host
            self._problem("no entry", f"{switches[sw]} for {self._dest(lid)} ({table.source})")
            return None, None
        peer = self._cabling.links.get((sw, out))
        if peer is None:
            self._problem("no cable", f"{switches[sw]} port {out} for {self._dest(lid)}")
            return None, None
        if peer[0] in switches:
            cable = self._cables.get((sw, out))
            if cable is None:
                cable = self._cables[(sw, out)] = Cable(PortRef(switches[sw], out), PortRef(switches[peer[0]], peer[1]))
            return None, cable
        if self._owner.get(lid) == peer:
            return (), None
        self._problem("wrong host", f"{switches[sw]} port {out} for {self._dest(lid)} leads to CA 0x{peer[0]:016x} "
                                    f"port {peer[1]}")
        return None, None

    def _dest(self, lid: int) -> str:
        return f"LID {lid} ({self._node_of[lid]})"

    def _problem(self, kind: str, example: str) -> None:
        seen = self._problems.setdefault(kind, [0, example])
        seen[0] += 1

    def notes(self) -> list[str]:
        out = []
        for kind, (n, example) in self._problems.items():
            what, why = self._WHAT[kind]
            out.append(f"rail {self.rail}: {n} walk(s) toward a destination {what}, e.g. {example}"
                       f"{f' ({why})' if why else ''}: the cables of the pairs they carry are unknown")
        return out

    def cables(self) -> list[Cable]:
        switches = self._cabling.switches
        return sorted((self._cables.get(end) or Cable(PortRef(switches[end[0]], end[1]),
                                                      PortRef(switches[peer[0]], peer[1]))
                       for end, peer in self._cabling.links.items() if end[0] in switches and peer[0] in switches),
                      key=_order)

    def summary(self) -> dict:
        return {"rail": self.rail, "switches": len(self._cabling.switches),
                "tables": sum(g in self._tables for g in self._cabling.switches)}


class _Given:
    """One rail's paths as given (Routes.from_paths)."""

    def __init__(self, rail: int | None, paths: dict[tuple[str, str], tuple[Cable, ...]]):
        self.rail, self._paths = rail, paths

    def path(self, src: str, dst: str) -> tuple[Cable, ...] | None:
        return self._paths.get((src, dst))

    def cables(self) -> list[Cable]:
        return sorted({c for path in self._paths.values() for c in path}, key=_order)

    def notes(self) -> list[str]:
        return []

    def summary(self) -> dict:
        return {"rail": self.rail, "pairs": len(self._paths)}


class Routes:
    """The switch-to-switch cables of each pair-direction, per rail (a rail None: every rail's)."""

    def __init__(self, rails: dict, source: str = "", format: str = "", digest: str = "", notes: list[str] = ()):
        self._rails = rails
        self.source, self.format, self.digest = source, format, digest
        self._notes = list(notes)

    @classmethod
    def from_tables(cls, cabling: dict[int, Cabling], tables: dict[int, dict[int, SwitchTable]], source: str,
                    format: str, digest: str, notes: list[str]) -> Routes:
        """Each rail's tables (switch GUID -> its LFT) followed over that rail's cabling."""
        return cls({rail: _Walks(rail, cabling[rail], t) for rail, t in sorted(tables.items())},
                   source, format, digest, notes)

    @classmethod
    def from_paths(cls, paths: dict[tuple[str, str, int | None], tuple[Cable, ...]]) -> Routes:
        """Routes that are just these paths, (src node, dst node, rail) -> cables (a rail None: every rail's)."""
        by_rail: dict[int | None, dict[tuple[str, str], tuple[Cable, ...]]] = {}
        for (src, dst, rail), cables in paths.items():
            by_rail.setdefault(rail, {})[(src, dst)] = tuple(cables)
        return cls({rail: _Given(rail, p) for rail, p in by_rail.items()}, "given paths", "paths")

    def path(self, src_node: str, dst_node: str, rail: int | None) -> tuple[Cable, ...] | None:
        """The switch-to-switch cables (not the HCA-to-leaf ones) a packet from src_node's HCA to
        dst_node's HCA on `rail` crosses, in order; () when both are on one leaf; None when unknown (a
        node or LID not in the tables, a loop, a dead end)."""
        walks = self._rails.get(rail) or self._rails.get(None)
        return walks.path(src_node, dst_node) if walks else None

    def cables(self, rail: int | None) -> list[Cable]:
        """Every switch-to-switch cable direction of the rail (of the paths given, for from_paths)."""
        walks = self._rails.get(rail) or self._rails.get(None)
        return walks.cables() if walks else []

    @property
    def rails(self) -> list[int | None]:
        return sorted(self._rails, key=lambda r: (r is not None, r or 0))

    @property
    def notes(self) -> list[str]:
        """What reading the tables set aside, then what the walks so far could not follow."""
        return self._notes + [n for rail in self.rails for n in self._rails[rail].notes()]

    def summary(self) -> dict:
        """What run.json keeps: where the tables are, what they cover, and the digest that tells whether
        the files read again later are still the ones of the run."""
        return {"source": self.source, "format": self.format, "digest": self.digest,
                "rails": [self._rails[r].summary() for r in self.rails], "notes": self.notes}
