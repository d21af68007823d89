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
pairs, after the screening, with no screening traffic left on the rail.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np


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


def suspects(values: list[Headline], higher: dict[str, bool], deviation: float) -> list[tuple[int, int]]:
    """Undirected suspect pairs (low, high), sorted: any direction failed, or is worse than the median
    of its metric over the rail by `deviation` or past its fleet factor (at least 3 values; fewer: only a
    failed bound counts)."""
    out: set[tuple[int, int]] = set()
    by_metric: dict[str, list[Headline]] = {}
    for h in values:
        by_metric.setdefault(h.metric, []).append(h)
    for metric, hs in by_metric.items():
        vals = np.array([h.value for h in hs], dtype=float)
        median = float(np.median(vals)) if len(vals) >= 3 else float("nan")
        up = higher.get(metric, True)
        for h, v in zip(hs, vals):
            # The nearer of the two limits: a fraction (higher is better) or a multiple of the median.
            low = max(1 - deviation, h.factor) if up and h.factor == h.factor else 1 - deviation
            high = min(1 + deviation, h.factor) if not up and h.factor == h.factor else 1 + deviation
            slow = median > 0 and ((v < low * median) if up else (v > high * median))
            if h.failed or slow:
                out.add((min(h.src, h.dst), max(h.src, h.dst)))
    return sorted(out)


def confirmation_pairs(suspect_pairs: list[tuple[int, int]], members: int, seed: int = 0,
                       leaves: list | None = None) -> list[tuple[int, int]]:
    """The pairs to measure again: every suspect pair, and each suspect end against a clean partner
    (one on no suspect pair; chosen by a seeded draw, so every rank draws the same; on another leaf
    than the end's where the switch tree is known, so the pair crosses its uplink)."""
    involved = {x for pair in suspect_pairs for x in pair}
    clean = [x for x in range(members) if x not in involved]
    rng = random.Random(seed)
    rng.shuffle(clean)
    out: list[tuple[int, int]] = list(suspect_pairs)
    if not clean:
        return out
    for i, x in enumerate(sorted(involved)):
        g = clean[i % len(clean)]
        if leaves is not None and leaves[g] == leaves[x]:
            g = next((clean[(i + j) % len(clean)] for j in range(1, len(clean))
                      if leaves[clean[(i + j) % len(clean)]] != leaves[x]), g)
        out.append((min(x, g), max(x, g)))
    return list(dict.fromkeys(out))  # once each, in order


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
