"""Discriminating pairs: which node pairs would tell apart explanations the measured pairs cannot.

Each component of a rail's tree touches a known set of node pairs (analysis.tree): a NIC the pairs
of its node, a leaf every pair with an end on it, its uplink the pairs with exactly one end on it,
the spine every pair across two leaves. Two explanations that touched the same measured pairs are
told apart by a pair in one set and not the other; when there is none (two leaves' uplinks and the
spine of a rail with two leaves; a leaf and its only node), no measurement can decide, and only
the switches' own port counters can.
"""

from __future__ import annotations

from itertools import combinations

from ..switchtree.fabric import Tree

MAX_PAIRS = 5


def leaf_map(tree: Tree) -> dict[str, str]:
    return {n: leaf for leaf, ns in tree.leaves.items() for n in ns}


def touches(c: dict, a: str, b: str, tree: Tree, where: dict[str, str]) -> bool:
    """Does component c ({scope, switch, node}) carry pair a-b on this tree (where: node -> leaf)?"""
    la, lb = where.get(a), where.get(b)
    scope, name = c.get("scope"), c.get("switch")
    if scope == "nic":
        return c.get("node") in (a, b)
    if scope == "rail":
        return True
    if scope == "uplink":
        return la is not None and lb is not None and (la == name) != (lb == name)
    if scope == "switch" and name in tree.leaves:
        return name in (la, lb)
    if scope == "switch":  # a spine: every pair across two leaves below it
        return la is not None and lb is not None and la != lb and name in tree.spines_of(la) \
            and name in tree.spines_of(lb)
    return False


def deciding_pairs(first: dict, second: dict, tree: Tree, nodes: list[str],
                   measured: set[tuple[str, str]] = frozenset(), limit: int = MAX_PAIRS) -> list[tuple[str, str]]:
    """Up to `limit` unmeasured pairs of `nodes` that one component carries and the other does not."""
    out, where = [], leaf_map(tree)
    for a, b in combinations(nodes, 2):
        if (a, b) in measured or (b, a) in measured:
            continue
        if touches(first, a, b, tree, where) != touches(second, a, b, tree, where):
            out.append((a, b))
            if len(out) >= limit:
                break
    return out


def pattern_gaps(tree: Tree, nodes: list[str], measured: set[tuple[str, str]]) -> list[dict]:
    """What a pair pattern leaves undecidable on a tree: per leaf, {leaf, what, pairs} where pairs
    (possibly empty: nothing can decide) would decide."""
    gaps, where = [], leaf_map(tree)
    placed = [n for n in nodes if n in where]
    for leaf, on in tree.leaves.items():
        members = [n for n in on if n in placed]
        if not members:
            continue
        up = {"scope": "uplink", "switch": leaf}
        if len(members) == 1:
            gaps.append({"leaf": leaf, "what": f"{members[0]}'s NIC from leaf {leaf} or its uplink (its only node)", "pairs": []})
        else:
            pairs = deciding_pairs(up, {"scope": "switch", "switch": leaf}, tree, placed, measured)
            inside = [p for p in combinations(members, 2) if p in measured or p[::-1] in measured]
            if not inside:
                gaps.append({"leaf": leaf, "what": f"leaf {leaf} from its uplink (no pair inside it)", "pairs": pairs[:1]})
        spines = tree.spines_of(leaf)
        if len(spines) == 1:
            pairs = deciding_pairs(up, {"scope": "switch", "switch": spines[0]}, tree, placed, measured)
            across = _others_measured(where, leaf, measured)
            if not across:
                gaps.append({"leaf": leaf, "what": f"leaf {leaf}'s uplink from spine {spines[0]} (no pair across two other leaves)",
                             "pairs": pairs[:1]})
    return gaps


def _others_measured(where: dict[str, str], leaf: str, measured) -> bool:
    """Is any measured pair across two leaves other than `leaf`?"""
    for a, b in measured:
        la, lb = where.get(a), where.get(b)
        if la and lb and la != lb and leaf not in (la, lb):
            return True
    return False
