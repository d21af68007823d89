"""Node-pair schedules (acceptance.runtime.schedule): all-pairs, sample:K, screen:K, and what auto chooses.
The estimate and `acceptance plan`: tests/unit/test_plan.py."""
import math
from collections import Counter
from itertools import combinations

import pytest

from acceptance.runtime.schedule import (
    Pairing,
    choose_pattern,
    coverage,
    pair_count,
    parse_pattern,
    round_count,
    round_of,
    round_robin,
    sample,
    sample_rounds,
    schedule,
    screen_round,
    tree_aware,
)

SIZES = [*range(2, 13), 17, 31]


def partners(rounds) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {}
    for pairs in rounds:
        for a, b in pairs:
            seen.setdefault(a, []).append(b)
            seen.setdefault(b, []).append(a)
    return seen


# ---- parse_pattern ------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("all-pairs", ("all-pairs", None)),
    ("sample:1", ("sample", 1)),
    ("sample:16", ("sample", 16)),
    (" sample:3 ", ("sample", 3)),
    ("screen:1", ("screen", 1)),
    ("screen:8", ("screen", 8)),
    ("auto", ("auto", None)),
])
def test_parse_pattern_accepts(text, expected):
    assert parse_pattern(text) == expected


@pytest.mark.parametrize("text", ["", "all", "allpairs", "sample", "sample:", "sample:0", "sample:-1",
                                  "sample:+2", "sample:1.5", "sample:x", "Sample:2", "sample:2:3", "screen",
                                  "screen:0", "screen:k", "auto:3"])
def test_parse_pattern_rejects_naming_the_accepted_forms(text):
    with pytest.raises(ValueError) as e:
        parse_pattern(text)
    assert all(form in str(e.value) for form in ("all-pairs", "sample:K", "screen:K", "auto"))


# ---- round_robin ----------------------------------------------------------------

@pytest.mark.parametrize("n", SIZES)
def test_round_robin_is_a_complete_round_robin(n):
    rounds = round_robin(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    every = [pair for pairs in rounds for pair in pairs]
    assert all(0 <= a < b < n for a, b in every)  # written (low, high), in range
    assert Counter(every) == Counter(combinations(range(n), 2))  # each unordered pair exactly once
    for pairs in rounds:
        assert len(pairs) == n // 2
        nodes = [node for pair in pairs for node in pair]
        assert len(nodes) == len(set(nodes))  # no node twice in a round


@pytest.mark.parametrize("n", SIZES)
def test_round_of_is_that_round(n):
    rounds = round_robin(n)
    assert [round_of(n, r) for r in range(len(rounds))] == rounds
    with pytest.raises(IndexError):
        round_of(n, len(rounds))


def test_odd_n_idles_node_r_in_round_r():
    for n in (3, 5, 17):
        for r, pairs in enumerate(round_robin(n)):
            assert set(range(n)) - {x for p in pairs for x in p} == {r}


@pytest.mark.parametrize("n", [-1, 0, 1])
def test_fewer_than_two_nodes_have_no_rounds(n):
    assert round_robin(n) == [] and sample(n, 3) == []
    assert round_count(n, "all-pairs") == pair_count(n, "sample:2") == 0


def test_round_robin_2048():
    # every 89th round (each is computed on its own): enumerating all 2047 is not needed to size them
    assert round_count(2048, "all-pairs") == 2047
    assert all(len(round_of(2048, r)) == 1024 for r in range(0, 2047, 89))
    assert len(round_of(2048, 2046)) == 1024


# ---- sample ---------------------------------------------------------------------

@pytest.mark.parametrize("n", SIZES)
def test_sample_gives_k_distinct_partners(n):
    full = len(round_robin(n))
    for k in range(1, full + 1):
        chosen = sample_rounds(n, k)
        seen = partners(sample(n, k))
        for node in range(n):
            mine = seen.get(node, [])
            assert len(mine) == len(set(mine))
            if n % 2 == 0:
                assert len(mine) == k
            else:  # node r sits out round r of the circle method
                assert len(mine) == (k - 1 if node in chosen else k)


def test_sample_spreads_its_rounds_over_the_schedule():
    # 10 nodes have 9 rounds; 3 partners come from rounds 0, 3, 6, not 0, 1, 2.
    assert sample_rounds(10, 3) == [0, 3, 6]
    assert sample(10, 3) == [round_of(10, r) for r in (0, 3, 6)]
    assert sample_rounds(2048, 4) == [0, 511, 1023, 1535]


def test_sample_with_k_at_least_the_rounds_is_all_pairs():
    for n in (5, 8):
        assert sample(n, 100) == round_robin(n) == schedule(n, "all-pairs")
    assert schedule(8, "sample:2") == sample(8, 2)


# ---- counts -------------------------------------------------------------------

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("pattern", ["all-pairs", "sample:1", "sample:3", "sample:100"])
def test_counts_match_enumeration(n, pattern):
    rounds = schedule(n, pattern)
    assert round_count(n, pattern) == len(rounds)
    assert pair_count(n, pattern) == sum(len(pairs) for pairs in rounds)


def test_counts_for_2048_nodes():
    assert round_count(2048, "all-pairs") == 2047
    assert pair_count(2048, "all-pairs") == 2096128 == 2048 * 2047 // 2
    assert round_count(2048, "sample:16") == 16
    assert pair_count(2048, "sample:16") == 16 * 1024


# ---- screen ---------------------------------------------------------------------

def leaves_of(n: int, per_leaf: int) -> list[str]:
    return [f"leaf{i // per_leaf}" for i in range(n)]


def assert_rounds_cover_every_node(n, rounds):
    for pairs in rounds:
        nodes = [x for p in pairs for x in p]
        assert all(0 <= a < b < n for a, b in pairs)
        assert len(nodes) == len(set(nodes))  # disjoint
        assert len(nodes) == n - n % 2  # every node but one bye for odd n


@pytest.mark.parametrize("n", [*SIZES, 64, 101])
@pytest.mark.parametrize("tree", [None, 4, 5])
def test_screen_rounds_are_disjoint_and_cover_every_node(n, tree):
    leaves = leaves_of(n, tree) if tree else None
    rounds = schedule(n, "screen:4", seed=7, leaves=leaves)
    assert len(rounds) == round_count(n, "screen:4") == min(4, n - 1 if n % 2 == 0 else n)
    assert sum(len(p) for p in rounds) == pair_count(n, "screen:4")
    assert_rounds_cover_every_node(n, rounds)
    assert [screen_round(n, r, seed=7, leaves=leaves, k=4) for r in range(len(rounds))] == rounds


def test_random_screen_never_repeats_a_pair_and_gives_byes_to_different_nodes():
    for n in (10, 31, 64):
        rounds = schedule(n, "screen:6", seed=1)
        pairs = [p for r in rounds for p in r]
        assert len(pairs) == len(set(pairs))  # rounds of the all-pairs schedule, relabelled
        if n % 2:
            byes = [next(iter(set(range(n)) - {x for p in r for x in p})) for r in rounds]
            assert len(byes) == len(set(byes))


@pytest.mark.parametrize("tree", [None, 8])
def test_screen_is_the_same_for_the_same_seed_and_differs_between_seeds(tree):
    leaves = leaves_of(64, tree) if tree else None
    assert schedule(64, "screen:3", seed=5, leaves=leaves) == schedule(64, "screen:3", seed=5, leaves=leaves)
    assert schedule(64, "screen:3", seed=5, leaves=leaves) != schedule(64, "screen:3", seed=6, leaves=leaves)


@pytest.mark.parametrize("n, per_leaf", [(48, 4), (64, 8), (96, 8), (60, 6), (45, 5)])
def test_tree_aware_screen_meets_every_leaf_pair_when_k_allows(n, per_leaf):
    leaves = leaves_of(n, per_leaf)
    count = len(set(leaves))
    k = math.ceil(count / per_leaf)  # a leaf's nodes meet up to one other leaf each per round
    rounds = schedule(n, f"screen:{k}", seed=3, leaves=leaves)
    met = {frozenset((leaves[a], leaves[b])) for r in rounds for a, b in r if leaves[a] != leaves[b]}
    assert met == {frozenset(p) for p in combinations(sorted(set(leaves)), 2)}
    for r in rounds:  # every leaf's uplink is crossed in every round
        crossing = {leaves[x] for a, b in r if leaves[a] != leaves[b] for x in (a, b)}
        assert crossing == set(leaves)
    assert tree_aware(f"screen:{k}", leaves) and not tree_aware(f"screen:{k}", None)
    assert not tree_aware("all-pairs", leaves) and not tree_aware("screen:2", ["one"] * n)


@pytest.mark.parametrize("n, per_leaf", [(8, 4), (48, 4), (45, 5)])
def test_tree_aware_screen_pairs_inside_every_leaf_once_the_leaves_have_met(n, per_leaf):
    leaves = leaves_of(n, per_leaf)
    k = math.ceil(len(set(leaves)) / per_leaf) + 1
    rounds = schedule(n, f"screen:{k}", seed=4, leaves=leaves)
    inside = {leaves[a] for a, b in rounds[-1] if leaves[a] == leaves[b]}
    assert inside == set(leaves)  # a pair that crosses no uplink tells a leaf from its uplink


def test_tree_aware_screen_with_uneven_leaves_and_one_leaf():
    leaves = ["a"] * 9 + ["b"] * 2 + ["c"] * 5 + ["d"]
    rounds = schedule(17, "screen:5", seed=0, leaves=leaves)
    assert len(rounds) == 5
    assert_rounds_cover_every_node(17, rounds)
    # one leaf: no tree to follow, so the random screen (same seed, same rounds)
    assert schedule(12, "screen:3", seed=2, leaves=["x"] * 12) == schedule(12, "screen:3", seed=2)
    with pytest.raises(ValueError, match="leaf of each"):
        schedule(5, "screen:2", leaves=["a", "b"])


@pytest.mark.parametrize("n, per_leaf", [(16, 4), (17, 4), (64, 8)])
def test_screen_with_all_pairs_rounds_meets_every_pair_once_tree_or_not(n, per_leaf):
    """screen:N-1 (N odd: N) is what auto grows to: every pair once, the circle relabelled, so the tree
    has nothing left to choose."""
    leaves = leaves_of(n, per_leaf)
    full = n - 1 if n % 2 == 0 else n
    for tree in (None, leaves):
        rounds = schedule(n, f"screen:{full}", seed=2, leaves=tree)
        pairs = [p for r in rounds for p in r]
        assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2
        assert [screen_round(n, r, seed=2, leaves=tree, k=full) for r in range(full)] == rounds
    assert not tree_aware(f"screen:{full}", leaves) and tree_aware(f"screen:{full - 1}", leaves)
    assert Pairing(f"screen:{full}", leaves={None: dict(enumerate(leaves))}).to_json(n)["tree_aware"] is False
    assert coverage(n, f"screen:{full}", leaves=leaves) == {"pairs": 1.0, "leaf_pairs": 1.0}


def test_tree_aware_screen_past_its_leaves_continues_with_new_pairs():
    """A node meets only its slot of the other leaves, so past about as many rounds as leaves the tree's
    rounds would repeat pairs: the random screen's rounds take over, and a long screen keeps measuring
    new pairs (what auto's larger K is for)."""
    n, leaves = 256, leaves_of(256, 32)  # 8 leaves
    rounds = schedule(n, "screen:60", seed=1, leaves=leaves)
    assert_rounds_cover_every_node(n, rounds)
    pairs = {p for r in rounds for p in r}
    assert len(pairs) >= 0.98 * pair_count(n, "screen:60")
    got = coverage(n, "screen:60", seed=1, leaves=leaves)
    assert got == {"pairs": len(pairs) / (n * (n - 1) // 2), "leaf_pairs": 1.0}
    assert rounds[:3] == schedule(n, "screen:3", seed=1, leaves=leaves)  # the tree's first rounds as before


def test_coverage_is_closed_form_without_the_tree():
    assert coverage(1024, "screen:90") == {"pairs": 90 * 512 / (1024 * 1023 / 2), "leaf_pairs": None}
    assert coverage(16000, "all-pairs")["pairs"] == 1.0 and coverage(1, "all-pairs")["pairs"] == 0.0
    assert coverage(8, "sample:3", leaves=["a"] * 8) == {"pairs": 12 / 28, "leaf_pairs": None}  # one leaf


def test_screen_at_16000_nodes_is_closed_form_and_one_round_is_linear():
    assert round_count(16000, "screen:16") == 16 and pair_count(16000, "screen:16") == 16 * 8000
    one = screen_round(16000, 3, seed=9, leaves=leaves_of(16000, 40), k=16)
    assert len(one) == 8000


def test_auto_must_be_resolved_before_a_schedule():
    with pytest.raises(ValueError, match="resolve"):
        schedule(8, "auto")
    with pytest.raises(ValueError, match="resolved"):
        round_count(8, "auto")


# ---- choose_pattern (auto) ---------------------------------------------------------

def test_auto_chooses_all_pairs_when_it_fits():
    assert choose_pattern(64, lambda p: True) == ("all-pairs", [])


def test_auto_chooses_the_largest_k_that_fits_with_few_tries():
    asked = []

    def fits(p):
        asked.append(p)
        return p != "all-pairs" and int(p.split(":")[1]) <= 11

    pattern, gave_up = choose_pattern(4096, fits)
    assert pattern == "screen:11"
    assert gave_up and "all-pairs" in gave_up[0] and "screen:11" in gave_up[0]
    assert len(asked) <= 2 + math.ceil(math.log2(4096))  # bisection, not a walk over K


def test_auto_grows_screening_up_to_every_pair():
    pattern, gave_up = choose_pattern(64, lambda p: p != "all-pairs")
    assert pattern == "screen:63" and "every pair once" in gave_up[0]


def test_auto_falls_back_to_the_minimum_and_says_it_does_not_fit():
    pattern, gave_up = choose_pattern(4096, lambda p: False)
    assert pattern == "screen:2" and "does not fit" in gave_up[0]


# ---- Pairing (what every rank of a run computes) ------------------------------------------

def test_pairing_follows_each_rails_tree_by_node_name():
    nodes = [f"node{i}" for i in range(1, 9)]
    tree = {n: ("s1" if i < 4 else "s2") for i, n in enumerate(nodes)}
    pairing = Pairing("screen:3", seed=11, leaves={None: tree})
    assert pairing.leaves_of(nodes, 5) == [tree[n] for n in nodes]
    assert pairing.rounds(nodes, 0) == schedule(8, "screen:3", seed=11, leaves=[tree[n] for n in nodes])
    assert Pairing("screen:3", seed=11).rounds(nodes) == schedule(8, "screen:3", seed=11)
    assert Pairing("screen:3", 11, {None: tree}).to_json(8, "auto", ["all-pairs"]) == {
        "pattern": "screen:3", "rounds": 3, "seed": 11, "tree_aware": True, "requested": "auto",
        "gave_up": ["all-pairs"]}
    assert Pairing("all-pairs").to_json(8, "all-pairs") == {"pattern": "all-pairs", "rounds": 7, "seed": 0,
                                                            "tree_aware": False}


@pytest.mark.parametrize("n, leaves, k", [(4, 2, 3), (8, 2, 4), (16, 4, 5), (64, 8, 8), (1025, 33, 8)])
def test_tree_aware_screening_measures_no_pair_twice(n, leaves, k):
    """Small leaves meet the same leaves again in later rounds: their pairs are traded, not repeated,
    so each node gets k distinct partners (a repeat tells nothing new about either end)."""
    tree = [f"leaf{i * leaves // n}" for i in range(n)]
    rounds = schedule(n, f"screen:{k}", seed=3, leaves=tree)
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == len(set(pairs)) == pair_count(n, f"screen:{k}")
    assert_rounds_cover_every_node(n, rounds)


def test_spread_takes_at_most_that_many_evenly_and_every_one_for_zero():
    from acceptance.runtime.schedule import spread
    assert spread(list(range(10)), 4) == [0, 2, 5, 7]
    assert spread(range(3), 16) == [0, 1, 2] and spread(range(5), 0) == [0, 1, 2, 3, 4]
    rounds = [[(0, 1)], [(0, 2)], [(0, 3)]]
    assert spread(rounds, 1) == [[(0, 1)]]
