"""Which node pairs talk in which round, for the pairwise RDMA-write measurements.

A *round* is a set of disjoint node pairs: every node is in at most one pair, so
all pairs of a round can be measured at the same time without two transfers
sharing a NIC. Rails are measured one after another and every rail uses the
same schedule.

The rounds come from the circle (Berger) method. With m = n nodes for odd n,
or m = n - 1 rotating nodes plus the fixed node n - 1 for even n, round r
pairs (r + i) mod m with (r - i) mod m for i = 1 .. (m - 1) / 2; node r is left
over (a bye for odd n, the fixed node's partner for even n). Two nodes a and b
meet in the one round where a + b = 2r (mod m), which exists and is unique
because m is odd, so every unordered pair occurs exactly once overall. Each
round is computed on its own in O(n) (round_of), so a caller can walk the
schedule of a huge cluster lazily, and the counts are closed forms.
"""
from __future__ import annotations

import re

ALL_PAIRS = "all-pairs"
SAMPLE = "sample"
_ACCEPTED = '"all-pairs" (every node pair) or "sample:K" (K partners per node, K a whole number >= 1)'


def parse_pattern(text: str) -> tuple[str, int | None]:
    """"all-pairs" -> ("all-pairs", None); "sample:K" -> ("sample", K)."""
    text = str(text).strip()
    if text == ALL_PAIRS:
        return ALL_PAIRS, None
    match = re.fullmatch(r"sample:(\d+)", text)
    if match and int(match[1]) >= 1:
        return SAMPLE, int(match[1])
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


def sample(n: int, k: int) -> list[list[tuple[int, int]]]:
    """K partners per node: each node gets k distinct partners for even n (k <= n - 1);
    for odd n, k - 1 for a node whose bye round is chosen (node r sits out round r), else k."""
    return [round_of(n, r) for r in sample_rounds(n, k)]


def schedule(n: int, pattern: str) -> list[list[tuple[int, int]]]:
    kind, k = parse_pattern(pattern)
    return round_robin(n) if kind == ALL_PAIRS else sample(n, k)


def round_count(n: int, pattern: str) -> int:
    kind, k = parse_pattern(pattern)
    rounds = _full_rounds(n)
    return rounds if kind == ALL_PAIRS else min(k, rounds)


def pair_count(n: int, pattern: str) -> int:
    """Unordered node pairs measured per rail."""
    return round_count(n, pattern) * (n // 2)  # every round has floor(n/2) pairs
