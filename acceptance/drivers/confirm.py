"""Confirmation after the scheduled rounds: which pairs of a rail to measure again, and in which rounds.

The scheduled rounds (all-pairs, or screening's K rounds that cover every node K times; runtime.schedule)
measure each pair beside every other pair of its round and every other rail: a pair can be slow there because of congestion that a
training step would also see, or because of a fault. Each rank of the rail contributes the headline
values it timed (Headline); every rank then computes the same suspects and the same confirmation
rounds from the gathered list, so no rank decides alone and nothing is sent twice.

A suspect is a pair-direction that failed its bound, or is worse than the rail's median for its
metric by `deviation` (analysis.outlier_min_deviation) or by its fleet bound's factor (fleet.bounds),
whichever is nearer: what analysis would call an outlier or fail against the fleet. Each suspect pair is measured again, and each of its
ends against a partner that screened clean (a different one per end where the rail has enough), so a
slow NIC shows with partners that are known to be good, a slow link only with its own partner, and a
pair that was merely congested does not reproduce. Confirmation pairs run in rounds of disjoint
pairs, after the screening, with no screening traffic left on the rail. Each round also measures a few
reference pairs of nodes that screened clean (with_references), so the suspects' values are compared
with values measured in the same conditions, not with the screening's (analysis.confirmed).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from ..records.naming import natural_key
from ..rules.judge import Fleet, Outlier


@dataclass(frozen=True)
class Headline:
    """One timed pair-direction: rail indices, the metric, its value, whether any bound failed, and
    the fleet factor of the value's metric and size (NaN: no fleet bound)."""
    src: int
    dst: int
    metric: str
    value: float
    failed: bool
    factor: float = float("nan")


def suspects(values: list[Headline], higher: dict[str, bool], rule: Outlier) -> list[tuple[int, int]]:
    """Undirected suspect pairs (low, high), sorted: any direction failed, or is suspect by the outlier
    rule against the median of its metric over the rail (rule.suspect: outlier_min_deviation worse,
    or at analysis.nic_fail_ratio of it, where a NIC that slow fails), or past its fleet factor
    (Fleet.outside); at least 3 values (fewer: only a failed bound counts)."""
    out: set[tuple[int, int]] = set()
    by_metric: dict[str, list[Headline]] = {}
    for h in values:
        by_metric.setdefault(h.metric, []).append(h)
    for metric, hs in by_metric.items():
        vals = np.array([h.value for h in hs], dtype=float)
        failed = np.array([h.failed for h in hs], dtype=bool)
        bad = failed.copy()
        median = float(np.median(vals)) if len(vals) >= 3 else float("nan")
        if median > 0:
            up = higher.get(metric, True)
            bad |= rule.suspect_of(vals, median, up)
            for factor in {h.factor for h in hs if not math.isnan(h.factor)}:
                at = np.array([h.factor == factor for h in hs])
                bad |= at & Fleet.outside(vals, median, factor, up)
        out.update((min(h.src, h.dst), max(h.src, h.dst)) for h, b in zip(hs, bad) if b)
    return sorted(out)


def confirmation_pairs(suspect_pairs: list[tuple[int, int]], members: int, seed: int = 0,
                       leaves: list | None = None) -> list[tuple[int, int]]:
    """The pairs to measure again: every suspect pair, and each suspect end against a clean partner
    (one on no suspect pair; chosen by a seeded draw, so every rank draws the same; on another leaf
    than the end's where the switch tree is known, so the pair crosses its uplink)."""
    involved = {x for pair in suspect_pairs for x in pair}
    clean = [x for x in range(members) if x not in involved]
    out: list[tuple[int, int]] = list(suspect_pairs)
    if clean:
        out += partnered(sorted(involved), clean, seed, leaves)
    return list(dict.fromkeys(out))  # once each, in order


def partnered(ends: list[int], clean: list[int], seed: int, leaves: list | None = None) -> list[tuple[int, int]]:
    """Each of `ends` with a partner from `clean` (a seeded shuffle, taken in turn; on another leaf than
    the end's where `leaves` is given and the rail has one), as (low, high) pairs in the order of `ends`."""
    clean = list(clean)
    random.Random(seed).shuffle(clean)
    out = []
    for i, x in enumerate(ends):
        g = clean[i % len(clean)]
        if leaves is not None and leaves[g] == leaves[x]:
            g = next((clean[(i + j) % len(clean)] for j in range(1, len(clean))
                      if leaves[clean[(i + j) % len(clean)]] != leaves[x]), g)
        out.append((min(x, g), max(x, g)))
    return out


def under_load(nic_suspect: list[tuple[str, int, bool]], rails: list[int]) -> list[str]:
    """The nodes to measure under full load and one rail at a time: those whose NIC was a suspect (most
    of its screened pairs) on at least two rails and on at least half of the rails, in name order.
    `nic_suspect`: (node, rail, suspect) of every rank, as every rank gathered it."""
    count: dict[str, int] = {}
    for node, _, bad in nic_suspect:
        count[node] = count.get(node, 0) + bool(bad)
    need = max(2, -(-len(rails) // 2))
    return sorted((n for n, c in count.items() if c >= need), key=natural_key)


def load_partners(subjects: list[str], nic_suspect: list[tuple[str, int, bool]], rails: list[int],
                  seed: int) -> dict[int, list[tuple[str, str]]]:
    """rail -> (subject, partner) for the load check: every subject with a node that was no suspect on
    that rail, a different partner on each rail and for each subject, so that analysis can tell the
    subject (on every rail) from its partners (one rail each). A subject that cannot be partnered so on
    every rail is left out (the ordinary findings still name it)."""
    nodes = sorted({node for node, _, _ in nic_suspect}, key=natural_key)
    random.Random(seed).shuffle(nodes)
    bad = {(node, rail) for node, rail, b in nic_suspect if b}
    used = set(subjects)
    at = dict.fromkeys(rails, 0)  # each rail's place in `nodes`: one pass per rail in all (O(N x rails))
    out: dict[int, list[tuple[str, str]]] = {rail: [] for rail in rails}
    for x in subjects:
        mates = {}
        for rail in rails:
            while at[rail] < len(nodes) and (nodes[at[rail]] in used or (nodes[at[rail]], rail) in bad):
                at[rail] += 1
            if at[rail] == len(nodes):
                return out  # no healthy node left for this rail: the rest are left out
            mates[rail] = nodes[at[rail]]
            used.add(mates[rail])
        for rail, mate in mates.items():
            out[rail].append((x, mate))
    return out


# Reference pairs per confirmation round: with both directions, six values a round beside the suspects'
# (a median over the rounds that one slow reference does not move).
REFERENCE_PAIRS = 3


def with_references(rounds: list[list[tuple[int, int]]], suspect_pairs: list[tuple[int, int]], members: int,
                    seed: int = 0, per_round: int = REFERENCE_PAIRS) -> tuple[list[list[tuple[int, int]]], set]:
    """The confirmation rounds with up to `per_round` reference pairs added to each: pairs of nodes on no
    suspect pair and idle in that round (a seeded draw, so every rank draws the same). Returns the rounds
    and the set of reference pairs (low, high)."""
    involved = {x for pair in suspect_pairs for x in pair}
    clean = [x for x in range(members) if x not in involved]
    rng = random.Random(seed)
    out, refs = [], set()
    for pairs in rounds:
        busy = {x for pair in pairs for x in pair}
        idle = [x for x in clean if x not in busy]
        rng.shuffle(idle)
        added = [(min(a, b), max(a, b)) for a, b in zip(idle[0:2 * per_round:2], idle[1:2 * per_round:2])]
        refs.update(added)
        out.append(list(pairs) + added)
    return out, refs


def rounds_of(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Pairs packed greedily into rounds of disjoint pairs (no node twice in a round), in order."""
    rounds: list[list[tuple[int, int]]] = []
    busy: list[set[int]] = []
    for a, b in pairs:
        for r, used in enumerate(busy):
            if a not in used and b not in used:
                rounds[r].append((a, b))
                used.update((a, b))
                break
        else:
            rounds.append([(a, b)])
            busy.append({a, b})
    return rounds
