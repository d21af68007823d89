"""Localization over a rail's switch tree: which leaf, uplink or spine explains a rail's bad pairs.

A pair on one leaf never leaves it; a pair on two leaves crosses both leaves' uplinks and the
spine. So every component of the tree touches a known set of the rail's measured pairs, and so do
the endpoints (a NIC: the pairs of its node). The bad pairs are explained greedily by the component
that accounts for most of them, each candidate held to the pairs it touches: a component is a
candidate only if at least `fraction` of the pairs through each of its parts are bad (a leaf: the
pairs inside it and the pairs crossing it; a rail plane: the intra-leaf and the cross-leaf pairs),
so one slow NIC on a leaf never passes for the leaf, and a leaf whose inside pairs are normal is
its uplink, not the switch. An explained component's pairs stop counting (like the NIC peel).

Candidates that touch exactly the same measured pairs cannot be told apart by them (two leaves'
uplinks and the spine when a rail has two leaves; a leaf and its only node's NIC): the first, in
PREFERENCE order, explains, and the others travel with it as alternatives.

Only switch, uplink and spine explanations are claimed here; when a NIC or the rail plane explains
best, the endpoint localization (analysis.localize) decides as it does without a tree, with the
alternatives this found.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..switchtree.fabric import Tree

# Among candidates touching the same pairs: the most specific first, an endpoint before the network.
PREFERENCE = {"nic": 0, "uplink": 1, "switch": 2, "spine": 3, "rail": 4}


@dataclass
class Component:
    """One explanation on one rail. scope: nic | uplink | switch (a leaf) | spine | rail."""

    scope: str
    rail: int
    name: str | None = None        # the leaf (uplink, switch) or the spine
    node: int | None = None        # a NIC's node code
    bad: int = 0                   # bad pairs it explains
    pairs: int = 0                 # measured pairs it touches, not explained before it
    parts: dict = field(default_factory=dict)   # part -> (bad, pairs): "inside", "crossing", "other"
    pair_mask: np.ndarray | None = None        # over the rail's measured pairs, those it explains
    alternatives: list[Component] = field(default_factory=list)

    @property
    def key(self) -> tuple:
        return (PREFERENCE[self.scope], self.name or "", -1 if self.node is None else self.node)

    def ref(self, names: list[str]) -> dict:
        """This component as an alternative: {scope, switch, node, rail} (node as its name)."""
        return {"scope": "switch" if self.scope == "spine" else self.scope, "switch": self.name,
                "node": None if self.node is None else names[self.node], "rail": self.rail}


def leaf_codes(tree: Tree, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Per node code, its leaf's index in the tree (-1: the tree does not place it); the leaf names."""
    leaves = list(tree.leaves)
    at = {n: i for i, leaf in enumerate(leaves) for n in tree.leaves[leaf]}
    return np.array([at.get(n, -1) for n in names], dtype=np.int64), leaves


def single_spine(tree: Tree, leaves: list[str]) -> str | None:
    """The spine every leaf's uplinks go to, when there is one: only then is "the spine" a component
    the pairs can see (with several spines, a pair's path through them is the fabric's choice)."""
    spines = {s for leaf in leaves for s in tree.spines_of(leaf)}
    return next(iter(spines)) if len(spines) == 1 else None


def _frac_ok(bad: np.ndarray, tot: np.ndarray, fraction: float) -> np.ndarray:
    """Part by part: no pair measured, or at least `fraction` of them bad."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (tot == 0) | (bad >= fraction * tot)


def explain_rail(u: np.ndarray, v: np.ndarray, bad: np.ndarray, leaf: np.ndarray, leaf_names: list[str],
                 spine: str | None, rail: int, fraction: float, nic_fraction: float,
                 n_nodes: int) -> list[Component]:
    """The rail's bad pairs (bad: over the measured undirected pairs u < v) explained, greedily.

    Returns every chosen component, endpoint ones (nic, rail) included, each with its alternatives.
    """
    lu, lv = leaf[u], leaf[v]
    placed = (lu >= 0) & (lv >= 0)
    intra, cross = placed & (lu == lv), placed & (lu != lv)
    n_leaves = len(leaf_names)
    active = np.ones(len(u), bool)
    chosen: list[Component] = []
    while True:
        cands = _candidates(u, v, lu, lv, intra, cross, active, bad, n_leaves, n_nodes, fraction,
                            nic_fraction, leaf_names, spine, rail)
        if not cands:
            return chosen
        cands.sort(key=lambda c: (-c.bad, c.pairs, c.key))
        head = cands[0]
        top = [c for c in cands[1:] if c.bad == head.bad and c.pairs == head.pairs]
        head.pair_mask = _mask(head, u, v, lu, lv, intra, cross, leaf_names) & active
        head.alternatives = [c for c in top
                             if np.array_equal(_mask(c, u, v, lu, lv, intra, cross, leaf_names) & active,
                                               head.pair_mask)]
        if head.scope in ("uplink", "switch"):
            i = leaf_names.index(head.name)
            away = active & (lu != i) & (lv != i)
            head.parts["other"] = (int((away & bad).sum()), int(away.sum()))
        chosen.append(head)
        active &= ~head.pair_mask


def _candidates(u, v, lu, lv, intra, cross, active, bad, n_leaves, n_nodes, fraction, nic_fraction,
                leaf_names, spine, rail) -> list[Component]:
    a, b = active, active & bad
    if not b.any():
        return []
    out: list[Component] = []

    def count(idx_u, idx_v, mask, n):
        return (np.bincount(idx_u[mask & b], minlength=n) + np.bincount(idx_v[mask & b], minlength=n),
                np.bincount(idx_u[mask & a], minlength=n) + np.bincount(idx_v[mask & a], minlength=n))

    nic_bad, nic_tot = count(u, v, np.ones(len(u), bool), n_nodes)
    for n in np.flatnonzero((nic_bad >= 2) & _frac_ok(nic_bad, nic_tot, nic_fraction)):
        out.append(Component("nic", rail, node=int(n), bad=int(nic_bad[n]), pairs=int(nic_tot[n])))
    if n_leaves:
        in_bad = np.bincount(lu[intra & b], minlength=n_leaves)
        in_tot = np.bincount(lu[intra & a], minlength=n_leaves)
        x_bad, x_tot = count(np.where(cross, lu, 0), np.where(cross, lv, 0), cross, n_leaves)
        for i, name in enumerate(leaf_names):
            parts = {"inside": (int(in_bad[i]), int(in_tot[i])), "crossing": (int(x_bad[i]), int(x_tot[i]))}
            if x_bad[i] >= 2 and _frac_ok(x_bad[i], x_tot[i], fraction):
                out.append(Component("uplink", rail, name=name, bad=int(x_bad[i]), pairs=int(x_tot[i]),
                                     parts=parts))
            sw_bad, sw_tot = in_bad[i] + x_bad[i], in_tot[i] + x_tot[i]
            if sw_bad >= 2 and _frac_ok(in_bad[i], in_tot[i], fraction) and _frac_ok(x_bad[i], x_tot[i], fraction):
                out.append(Component("switch", rail, name=name, bad=int(sw_bad), pairs=int(sw_tot), parts=parts))
        c_bad, c_tot = int((cross & b).sum()), int((cross & a).sum())
        i_bad, i_tot = int((intra & b).sum()), int((intra & a).sum())
        parts = {"inside": (i_bad, i_tot), "crossing": (c_bad, c_tot)}
        if spine is not None and c_bad >= 2 and _frac_ok(c_bad, c_tot, fraction):
            out.append(Component("spine", rail, name=spine, bad=c_bad, pairs=c_tot, parts=parts))
        r_bad, r_tot = int(b.sum()), int(a.sum())
        if r_bad >= 2 and _frac_ok(i_bad, i_tot, fraction) and _frac_ok(c_bad, c_tot, fraction):
            out.append(Component("rail", rail, bad=r_bad, pairs=r_tot, parts=parts))
    return out


def _mask(c: Component, u, v, lu, lv, intra, cross, leaf_names) -> np.ndarray:
    if c.scope == "nic":
        return (u == c.node) | (v == c.node)
    if c.scope == "rail":
        return np.ones(len(u), bool)
    if c.scope == "spine":
        return cross.copy()
    i = leaf_names.index(c.name)
    on = (lu == i) | (lv == i)
    return on & cross if c.scope == "uplink" else on
