"""Which node pairs talk in which round, for the pairwise measurements (RDMA write, perftest, GPUDirect).

A *round* is a set of disjoint node pairs: every node is in at most one pair, so
all pairs of a round can be measured at the same time without two transfers
sharing a NIC. Every rail uses the same schedule; with run.rail_mode "concurrent"
the rails walk it at the same time, each rank on its own rail's NIC.

Patterns (parse_pattern):
- "all-pairs": every node pair once, n - 1 rounds (n for odd n).
- "sample:K": K rounds of the all-pairs schedule, spread across it.
- "screen:K": K rounds of disjoint pairs covering every node K times (once per round; with odd n one
  node sits out each round, a different one each time). With the switch tree known (`leaves`), the
  pairs are chosen so that each leaf's nodes meet many other leaves in every round (every leaf meets
  every other leaf once K >= ceil(leaves / largest leaf)) and every leaf's uplink is crossed, and
  later rounds add a pair inside each leaf (which tells a leaf from its uplink); once those rounds would
  repeat pairs (a node meets only its slot of the other leaves: past about as many rounds as leaves),
  the rest are the random screen's. Without the tree the rounds are drawn at random from the all-pairs
  schedule under a random relabelling of the nodes, so no pair repeats. `seed` picks the draw; the
  driver keeps it in run.json ("schedule"). K at least all-pairs' rounds is every pair once, the
  circle rounds relabelled, tree or not: nothing is left for the tree to choose.
- "auto": all-pairs when it fits the time budget, else screen:K with the largest K that fits, up to
  all-pairs' rounds (choose_pattern; acceptance.runtime.estimate decides what fits). schedule() needs
  it resolved.

The all-pairs rounds come from the circle (Berger) method. With m = n nodes for odd n,
or m = n - 1 rotating nodes plus the fixed node n - 1 for even n, round r
pairs (r + i) mod m with (r - i) mod m for i = 1 .. (m - 1) / 2; node r is left
over (a bye for odd n, the fixed node's partner for even n). Two nodes a and b
meet in the one round where a + b = 2r (mod m), which exists and is unique
because m is odd, so every unordered pair occurs exactly once overall. Each
round is computed in O(n) (round_of, screen_round; a tree-aware round also trades away pairs of
earlier rounds), so every rank
computes the same schedule of a huge cluster by itself, and the counts are closed forms.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

ALL_PAIRS = "all-pairs"
SAMPLE = "sample"
SCREEN = "screen"
AUTO = "auto"
SCREEN_MIN = 2  # auto never screens with fewer rounds: one partner cannot tell a NIC from its link
_ACCEPTED = ('"all-pairs" (every node pair), "sample:K" (K partners per node), "screen:K" (K rounds of '
             'disjoint pairs, every node in each) or "auto" (all-pairs if it fits the time budget, else '
             'screen:K with the largest K that fits); K a whole number >= 1')


def parse_pattern(text: str) -> tuple[str, int | None]:
    """"all-pairs" -> ("all-pairs", None); "sample:K" -> ("sample", K); "screen:K" -> ("screen", K);
    "auto" -> ("auto", None). ValueError naming the accepted forms otherwise."""
    text = str(text).strip()
    if text in (ALL_PAIRS, AUTO):
        return text, None
    match = re.fullmatch(r"(sample|screen):(\d+)", text)
    if match and int(match[2]) >= 1:
        return match[1], int(match[2])
    raise ValueError(f"unknown pattern {text!r}; expected {_ACCEPTED}")


def _full_rounds(n: int) -> int:
    """Rounds of the complete circle schedule: n - 1 for even n, n for odd n (one bye each)."""
    if n < 2:
        return 0
    return n - 1 if n % 2 == 0 else n


def round_of(n: int, r: int) -> list[tuple[int, int]]:
    """Round r (0-based) of the circle method over nodes 0..n-1, as (low, high) pairs."""
    rounds = _full_rounds(n)
    if not 0 <= r < rounds:
        raise IndexError(f"round {r} out of range: {n} nodes have {rounds} rounds")
    m = rounds  # the number of rotating nodes; always odd
    pairs = []
    for i in range(1, (m + 1) // 2):
        a, b = (r + i) % m, (r - i) % m
        pairs.append((a, b) if a < b else (b, a))
    if n % 2 == 0:
        pairs.append((r, n - 1))  # the left-over node meets the fixed one instead of sitting out
    return pairs


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Every unordered pair exactly once, in rounds of disjoint pairs."""
    return [round_of(n, r) for r in range(_full_rounds(n))]


def sample_rounds(n: int, k: int) -> list[int]:
    """Indices of the circle rounds that sample:k uses: min(k, rounds) of them, spread evenly.

    Spread rather than the first k because node a meets 2r - a (mod m) in round r:
    consecutive rounds give partners two indices apart, i.e. all near each other,
    while spread rounds give partners at distances across the whole cluster.
    """
    rounds = _full_rounds(n)
    k = min(k, rounds)
    return [j * rounds // k for j in range(k)]  # distinct, since rounds / k >= 1


def spread(items: Sequence, most: int) -> list:
    """At most `most` of `items`, evenly spread over them (0: every one): the same on every rank."""
    total = len(items)
    if not most or most >= total:
        return list(items)
    return [items[j * total // most] for j in range(most)]


def sample(n: int, k: int) -> list[list[tuple[int, int]]]:
    """K partners per node: each node gets k distinct partners for even n (k <= n - 1);
    for odd n, k - 1 for a node whose bye round is chosen (node r sits out round r), else k."""
    return [round_of(n, r) for r in sample_rounds(n, k)]


def _relabel(n: int, seed: int) -> list[int]:
    """A seeded permutation of 0..n-1 (Python's random is the same on every rank and platform)."""
    order = list(range(n))
    random.Random(f"screen/{n}/{seed}").shuffle(order)
    return order


def screen_round_indices(n: int, k: int, seed: int = 0) -> list[int]:
    """The circle rounds random screening uses: min(k, rounds) distinct ones, drawn with `seed`."""
    rounds = _full_rounds(n)
    return random.Random(f"rounds/{n}/{seed}").sample(range(rounds), min(k, rounds))


def _leaf_slots(n: int, leaves: Sequence[Hashable], seed: int) -> list[list[int]]:
    """Nodes grouped by leaf, leaves in first-seen order, each leaf's nodes in a seeded order."""
    if len(leaves) != n:
        raise ValueError(f"leaves: expected the leaf of each of the {n} nodes, got {len(leaves)}")
    groups: dict[Hashable, list[int]] = {}
    for node, leaf in enumerate(leaves):
        groups.setdefault(leaf, []).append(node)
    rng = random.Random(f"leaves/{n}/{seed}")
    out = list(groups.values())
    for members in out:
        rng.shuffle(members)
    return out


def _tree_round(slots: list[list[int]], r: int) -> list[tuple[int, int]]:
    """Round r of tree-aware screening over the leaves' seeded slot lists.

    Slot j of leaf a meets slot j of leaf (c - a) mod L, with c = (j + r * step) mod L: an involution,
    so the pairs are disjoint. A leaf's slots meet different leaves (up to L - 1 of them in one round),
    and over the rounds c runs through every residue, so every leaf meets every other leaf in the
    first ceil(L / largest leaf) rounds. Every later round also pairs two nodes inside each leaf of 3
    or more (slots j0, j0 + 1, moving with r): a pair that crosses no uplink tells a leaf from its
    uplink. Nodes left over (c = 2a, a partner leaf too small for slot j, a partner taken inside its
    leaf) pair with each other in (slot, leaf) order, which puts consecutive ones on different
    leaves; with an odd count the last one sits out.
    """
    count = len(slots)
    biggest = max(len(m) for m in slots)
    step = biggest % count or 1  # a multiple of L would give every round the same partners
    inside: list[int | None] = [None] * count  # the first of the two slots paired inside each leaf
    if r >= -(-count // biggest):
        inside = [(2 * r) % (len(m) - 1) if len(m) >= 3 else None for m in slots]

    def taken(leaf: int, j: int) -> bool:
        return inside[leaf] is not None and j - inside[leaf] in (0, 1)

    pairs, left = [], []
    for a, members in enumerate(slots):
        if inside[a] is not None:
            x, y = members[inside[a]], members[inside[a] + 1]
            pairs.append((x, y) if x < y else (y, x))
    for j in range(biggest):
        c = (j + r * step) % count
        for a, members in enumerate(slots):
            if j >= len(members) or taken(a, j):
                continue
            b = (c - a) % count
            if b == a or j >= len(slots[b]) or taken(b, j):
                left.append(members[j])
            elif a < b:
                x, y = members[j], slots[b][j]
                pairs.append((x, y) if x < y else (y, x))
    for x, y in zip(left[::2], left[1::2]):
        pairs.append((x, y) if x < y else (y, x))
    return pairs


def screen_round(n: int, r: int, seed: int = 0, leaves: Sequence[Hashable] | None = None,
                 k: int | None = None) -> list[tuple[int, int]]:
    """Round r (0-based) of screen:k over nodes 0..n-1, as (low, high) pairs; O(n), or O(n r) with the tree.

    With `leaves` (the leaf switch of each node, any hashable, two or more distinct) the round is
    tree-aware (_tree_round, with the pairs of earlier rounds traded away: _fresh, so it needs them);
    otherwise it is circle round screen_round_indices(n, k, seed)[r] under the seeded relabelling of
    the nodes (k defaults to r + 1)."""
    if n < 2:
        raise IndexError(f"round {r} out of range: {n} nodes have no rounds")
    if _follows_tree(n, r + 1 if k is None else k, leaves):
        if not 0 <= r < min(r + 1 if k is None else k, _full_rounds(n)):
            raise IndexError(f"round {r} out of range: screen:{k} over {n} nodes has "
                             f"{min(k, _full_rounds(n))} rounds")
        return screen(n, r + 1, seed, leaves)[r]
    indices = screen_round_indices(n, r + 1 if k is None else k, seed)
    if not 0 <= r < len(indices):
        raise IndexError(f"round {r} out of range: screen:{k} over {n} nodes has {len(indices)} rounds")
    label = _relabel(n, seed)
    pairs = []
    for a, b in round_of(n, indices[r]):
        x, y = label[a], label[b]
        pairs.append((x, y) if x < y else (y, x))
    return pairs


def screen(n: int, k: int, seed: int = 0, leaves: Sequence[Hashable] | None = None) -> list[list[tuple[int, int]]]:
    """screen:k: k rounds of disjoint pairs, every node in each round (odd n: one sits out), O(n) each."""
    if n < 2:
        return []
    label = _relabel(n, seed)

    def circle(i: int) -> list[tuple[int, int]]:
        return [(min(label[a], label[b]), max(label[a], label[b])) for a, b in round_of(n, i)]
    if not _follows_tree(n, k, leaves):
        return [circle(i) for i in screen_round_indices(n, k, seed)]
    # The tree's rounds while they give every node a new partner: a node meets only its slot in the
    # other leaves, so past about as many rounds as leaves they repeat pairs. Then the random screen's
    # rounds, their pairs measured before traded away as well (_fresh).
    slots = _leaf_slots(n, leaves, seed)
    used: set[tuple[int, int]] = set()
    out: list[list[tuple[int, int]]] = []
    later = iter(screen_round_indices(n, _full_rounds(n), seed))
    tree = True
    for r in range(min(k, _full_rounds(n))):
        pairs = _fresh(_tree_round(slots, r), used) if tree else []
        if not tree or any(p in used for p in pairs):
            tree = False
            pairs = _fresh(circle(next(later)), used)
        out.append(pairs)
        used.update(pairs)
    return out


def _fresh(pairs: list[tuple[int, int]], used: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """The round with pairs measured in an earlier round traded between them where that makes both new:
    (a, b) and (c, d) become (a, c) and (b, d), or (a, d) and (b, c). A small leaf meets the same leaves
    again in later rounds; a repeated pair would tell nothing new about either end. O(round) with the set."""
    fresh = [p for p in pairs if p not in used]
    stale = [p for p in pairs if p in used]
    kept = []
    while len(stale) >= 2:
        (a, b), (c, d) = stale.pop(), stale.pop()
        for x, y in (((a, c), (b, d)), ((a, d), (b, c))):
            x, y = (min(x), max(x)), (min(y), max(y))
            if x not in used and y not in used:
                fresh += [x, y]
                break
        else:
            kept.append((a, b))
            stale.append((c, d))
            if len(stale) == 1:
                break
    return fresh + kept + stale


def _follows_tree(n: int, k: int, leaves: Sequence[Hashable] | None) -> bool:
    """Whether screen:k over n nodes follows the tree: two leaves or more, and fewer rounds than all pairs."""
    if leaves is not None and len(leaves) != n:
        raise ValueError(f"leaves: expected the leaf of each of the {n} nodes, got {len(leaves)}")
    return leaves is not None and k < _full_rounds(n) and len(set(leaves)) >= 2


def tree_aware(pattern: str, leaves: Sequence[Hashable] | None) -> bool:
    """Whether schedule(n, pattern, leaves=leaves) follows the switch tree (run.json "schedule")."""
    kind, k = parse_pattern(pattern)
    return kind == SCREEN and leaves is not None and _follows_tree(len(leaves), k, leaves)


def schedule(n: int, pattern: str, seed: int = 0,
             leaves: Sequence[Hashable] | None = None) -> list[list[tuple[int, int]]]:
    """The rounds of `pattern` over nodes 0..n-1 (a rail's members in rail-communicator order): a list
    of rounds, each a list of disjoint (low, high) node pairs, measured at the same time.

    n: nodes on the rail. pattern: "all-pairs", "sample:K" or "screen:K" ("auto" must be resolved
    first: acceptance.runtime.estimate.resolve_pattern). seed: screen:K's draw (ignored by the
    others). leaves: for screen:K, the leaf switch of each node (len n; any hashable names), which
    makes the rounds tree-aware; None or a single leaf: random. Every rank computes the identical
    schedule from (n, pattern, seed, leaves); each round costs O(n). round_count and pair_count give
    the sizes in closed form.
    """
    kind, k = parse_pattern(pattern)
    if kind == AUTO:
        raise ValueError('pattern "auto" must be resolved to all-pairs or screen:K first '
                         "(acceptance.runtime.estimate.resolve_pattern)")
    if kind == ALL_PAIRS:
        return round_robin(n)
    if kind == SAMPLE:
        return sample(n, k)
    return screen(n, k, seed, leaves)


def round_count(n: int, pattern: str) -> int:
    """Rounds of `pattern` over n nodes, in closed form (the same with or without the tree)."""
    kind, k = parse_pattern(pattern)
    if kind == AUTO:
        raise ValueError('pattern "auto" has no round count until it is resolved')
    rounds = _full_rounds(n)
    if kind == ALL_PAIRS:
        return rounds
    if n < 2:
        return 0
    return min(k, rounds)  # sample and screen alike: more rounds than all-pairs has would repeat pairs


def pair_count(n: int, pattern: str) -> int:
    """Unordered node pairs measured per rail: floor(n/2) in every round."""
    return round_count(n, pattern) * (n // 2)


def coverage(n: int, pattern: str, seed: int = 0, leaves: Sequence[Hashable] | None = None) -> dict:
    """What one rail's schedule measures: {"pairs": the fraction of its n(n-1)/2 node pairs, "leaf_pairs":
    the fraction of the pairs of distinct leaves with at least one node pair between them measured (None
    without two leaves)}. Closed form where the pattern meets every pair, or no tree is given (the
    circle's rounds never repeat a pair); else the rounds are enumerated, O(pairs measured): a
    tree-aware screen may repeat a pair its trades could not avoid."""
    total = n * (n - 1) // 2
    count = len(set(leaves)) if leaves is not None else 0
    if total == 0:
        return {"pairs": 0.0, "leaf_pairs": None}
    if round_count(n, pattern) >= _full_rounds(n):
        return {"pairs": 1.0, "leaf_pairs": 1.0 if count >= 2 else None}
    if count < 2:
        return {"pairs": pair_count(n, pattern) / total, "leaf_pairs": None}
    import numpy as np  # here: the schedule itself needs only the standard library
    pairs = np.array([p for r in schedule(n, pattern, seed, leaves) for p in r], dtype=np.int64).reshape(-1, 2)
    code = {leaf: i for i, leaf in enumerate(dict.fromkeys(leaves))}
    of = np.array([code[leaf] for leaf in leaves], dtype=np.int64)
    a, b = of[pairs[:, 0]], of[pairs[:, 1]]
    crossing = a != b
    met = np.unique(np.minimum(a, b)[crossing] * count + np.maximum(a, b)[crossing])
    return {"pairs": len(np.unique(pairs[:, 0] * n + pairs[:, 1])) / total,
            "leaf_pairs": len(met) / (count * (count - 1) // 2)}


def choose_pattern(n: int, fits: Callable[[str], bool]) -> tuple[str, list[str]]:
    """What "auto" becomes: (pattern, what was given up). all-pairs when fits("all-pairs"); else
    screen:K with the largest K (SCREEN_MIN <= K <= all-pairs' rounds, where screening meets every pair)
    for which fits() holds, found by bisection (the estimate grows with K); else screen:SCREEN_MIN,
    which does not fit either (the caller says so).

    fits() is called O(log n) times."""
    full = _full_rounds(n)
    if n < 2 or fits(ALL_PAIRS):
        return ALL_PAIRS, []
    low, high = SCREEN_MIN, max(SCREEN_MIN, full)
    if not fits(f"{SCREEN}:{low}"):
        return f"{SCREEN}:{low}", [f"all-pairs ({full} rounds); even screen:{low} does not fit"]
    while low < high:
        mid = (low + high + 1) // 2
        if fits(f"{SCREEN}:{mid}"):
            low = mid
        else:
            high = mid - 1
    if low >= full:
        return f"{SCREEN}:{low}", [f"all-pairs' full sweep: screen:{low} instead, every pair once at "
                                   f"screening's sizes"]
    return f"{SCREEN}:{low}", [f"all-pairs ({full} rounds per rail, every node meets all {n - 1} others): "
                               f"screen:{low} instead, {low} partners per node"]


@dataclass(frozen=True)
class Resume:
    """Where a relaunch takes up the schedule after a lost node (acceptance.cli.attempts): each rail's
    members in the first launch (its rounds are theirs), the nodes lost since (left out of every pair),
    and for the test in hand each rail's first round not known to have ended (0: the whole schedule)."""
    planned: Mapping[int, Sequence[str]]
    lost: frozenset[str]
    first: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Pairing:
    """A run's node pairing, the same on every rank: a resolved pattern (not "auto"), the seed of a
    screening draw, and where the switch tree is known each rail's leaf of each node (by node name;
    rail None: every rail, as acceptance.switchtree.fabric.Fabric.trees keys it). In a relaunch,
    `resume` keeps the first launch's rounds."""
    pattern: str
    seed: int = 0
    leaves: Mapping[int | None, Mapping[str, Hashable]] = field(default_factory=dict)
    resume: Resume | None = None

    def leaves_of(self, nodes: Sequence[str], rail: int | None) -> list[Hashable] | None:
        """The leaf of each of `nodes` on `rail` (nodes the tree lacks share one unnamed leaf), or None."""
        tree = self.leaves.get(rail, self.leaves.get(None))
        return [tree.get(node, "(not in the tree)") for node in nodes] if tree else None

    def rounds(self, nodes: Sequence[str], rail: int | None = None) -> list[list[tuple[int, int]]]:
        """The rounds over a rail's members, `nodes` in rail-communicator order (schedule())."""
        return [pairs for _, pairs in self.numbered(nodes, rail)]

    def numbered(self, nodes: Sequence[str], rail: int | None = None) -> list[tuple[int, list[tuple[int, int]]]]:
        """(index in the schedule, round) for each round to measure over a rail's members. In a relaunch:
        the first launch's rounds over its members, from the first round not known to have ended, each
        without the pairs of a lost node (so a round stays disjoint and keeps its index), as indices
        into `nodes`; a round left with no pair is dropped."""
        if self.resume is None:
            return list(enumerate(schedule(len(nodes), self.pattern, self.seed, self.leaves_of(nodes, rail))))
        members = list(self.resume.planned.get(rail, ()) or nodes)
        index = {node: i for i, node in enumerate(nodes)}
        out = []
        for r, pairs in enumerate(schedule(len(members), self.pattern, self.seed, self.leaves_of(members, rail))):
            if r < self.resume.first.get(rail, 0):
                continue
            kept = [tuple(sorted((index[members[a]], index[members[b]]))) for a, b in pairs
                    if members[a] in index and members[b] in index]
            if kept:
                out.append((r, kept))
        return out

    def screening(self) -> bool:
        """A screening pattern (screen:K): fewer sizes and samples (runtime.screening)."""
        return parse_pattern(self.pattern)[0] == SCREEN

    def to_json(self, nodes: int, requested: str | None = None, gave_up: Sequence[str] = ()) -> dict:
        """run.json "schedule": {"pattern", "rounds", "seed", "tree_aware"}, and what was asked and given up."""
        kind, k = parse_pattern(self.pattern)
        out = {"pattern": self.pattern, "rounds": round_count(nodes, self.pattern), "seed": self.seed,
               "tree_aware": kind == SCREEN and bool(self.leaves) and k < _full_rounds(nodes)}
        if requested is not None and requested != self.pattern:
            out["requested"] = requested
        if gave_up:
            out["gave_up"] = list(gave_up)
        return out
