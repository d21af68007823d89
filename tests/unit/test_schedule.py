"""Node-pair schedules (acceptance.runtime.schedule) and the `acceptance plan` estimate."""
import re
import subprocess
import sys
from collections import Counter
from itertools import combinations
from pathlib import Path

import pytest

from acceptance.cli.plan import estimate_seconds, format_seconds, pair_direction_seconds, plan_text, step_problem
from acceptance.spec.profile import load_profile
from acceptance.runtime.schedule import (
    pair_count,
    parse_pattern,
    round_count,
    round_of,
    round_robin,
    sample,
    sample_rounds,
    schedule,
)

SIZES = [*range(2, 13), 17, 31]
ACCEPTANCE = Path(sys.executable).parent / "acceptance"


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
])
def test_parse_pattern_accepts(text, expected):
    assert parse_pattern(text) == expected


@pytest.mark.parametrize("text", ["", "all", "allpairs", "sample", "sample:", "sample:0", "sample:-1",
                                  "sample:+2", "sample:1.5", "sample:x", "Sample:2", "sample:2:3"])
def test_parse_pattern_rejects_naming_the_accepted_forms(text):
    with pytest.raises(ValueError) as e:
        parse_pattern(text)
    assert "all-pairs" in str(e.value) and "sample:K" in str(e.value)


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
    rounds = round_robin(2048)
    assert len(rounds) == 2047 and all(len(pairs) == 1024 for pairs in rounds)


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


# ---- estimate -------------------------------------------------------------------

SWEEP = {"min_size": 2**20, "max_size": 2**20, "factor": 2, "bytes_per_size": 64 * 2**20,
         "min_iters": 5, "max_iters": 1000, "warmup_fraction": 0.1, "window": 4}
LATENCY = {"iters": 100, "warmup": 0, "size": 8}


def test_pair_direction_seconds_by_hand():
    # 64MiB / (1MiB x 4) = 16 timed + ceil(1.6) = 2 warmup iterations of 4 x 1MiB at 100 Gbit/s,
    # plus 5 us each, for the write and the read sweep; latency: 100 samples x 2 kinds x 5 us.
    expected = 2 * (18 * 4 * 2**20 * 8 / 100e9 + 18 * 5e-6) + 100 * 2 * 5e-6
    assert pair_direction_seconds(SWEEP, LATENCY, 100.0) == pytest.approx(expected)


def test_estimate_is_linear_in_rails_and_rounds():
    one = estimate_seconds(1, 1, SWEEP, LATENCY, 100.0)
    assert one == pytest.approx(2 * pair_direction_seconds(SWEEP, LATENCY, 100.0))  # both directions
    assert estimate_seconds(8, 1, SWEEP, LATENCY, 100.0) == pytest.approx(8 * one)
    assert estimate_seconds(1, 2047, SWEEP, LATENCY, 100.0) == pytest.approx(2047 * one)
    assert estimate_seconds(8, 2047, SWEEP, LATENCY, 100.0) == pytest.approx(8 * 2047 * one)


def test_iterations_are_clamped():
    tiny = dict(SWEEP, min_size=8, max_size=8)  # 64MiB / 32B would be 2M iterations
    big = dict(SWEEP, min_size=2**30, max_size=2**30)  # would be 0 iterations
    assert pair_direction_seconds(tiny, LATENCY, 100.0) == pytest.approx(
        2 * 1100 * (4 * 8 * 8 / 100e9 + 5e-6) + 1e-3)
    assert pair_direction_seconds(big, LATENCY, 100.0) == pytest.approx(
        2 * 6 * (4 * 2**30 * 8 / 100e9 + 5e-6) + 1e-3)


@pytest.mark.parametrize("seconds, text", [
    (0.04, "0.04 s"), (45, "45 s"), (725, "12 min 5 s"), (3 * 3600 + 12 * 60, "3 h 12 min"),
    (3599.7, "1 h 0 min"), (2 * 86400 + 4 * 3600, "2 d 4 h")])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_plan_text_rate_sources(tmp_path):
    assert "400 Gbit/s   (from --rate)" in plan_text(4, 2, "all-pairs", "local", rate="400Gbit/s")
    bare = tmp_path / "bare.toml"
    bare.write_text("")  # no rdma_write.bandwidth_min
    assert "100 Gbit/s   (assumed" in plan_text(4, 2, None, str(bare))
    path = tmp_path / "fab.toml"
    path.write_text('[rdma_write]\nbandwidth_min = { "8B" = "1Gbit/s", "64MiB" = "360Gbit/s" }\n')
    assert "360 Gbit/s   (profile fab's rdma_write.bandwidth_min" in plan_text(4, 2, None, str(path))


@pytest.mark.parametrize("nodes, rails, pattern, rate, words", [
    (1, 8, "all-pairs", None, "--nodes"),
    (4, 0, "all-pairs", None, "--rails"),
    (4, 8, "pairs", None, "sample:K"),
    (4, 8, "all-pairs", "400", "has no unit"),
    (4, 8, "all-pairs", "0Gbit/s", "above zero"),
])
def test_plan_text_rejects(nodes, rails, pattern, rate, words):
    with pytest.raises(ValueError, match=words):
        plan_text(nodes, rails, pattern, "local", rate=rate)


# ---- CLI ------------------------------------------------------------------------

def run_cli(*args):
    return subprocess.run([str(ACCEPTANCE), "plan", *args], capture_output=True, text=True, timeout=120)


def test_cli_plan_2048_nodes():
    proc = run_cli("--nodes", "2048", "--rails", "8")
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(":", 1) for line in proc.stdout.splitlines())
    assert lines["rounds per rail"].split()[0] == "2047"
    assert lines["node pairs per rail"].split()[0] == "2096128"
    assert lines["pair-directions per rail"].split()[0] == str(2 * 2096128)
    assert lines["total pair-directions"].split()[0] == str(8 * 2 * 2096128)
    assert "estimated duration" in lines


def test_cli_plan_bad_pattern_exits_2():
    proc = run_cli("--nodes", "16", "--rails", "8", "--pattern", "sample:0")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("acceptance: unknown pattern 'sample:0'")
    assert "sample:K" in proc.stderr


def test_cli_plan_too_few_nodes_exits_2():
    proc = run_cli("--nodes", "1", "--rails", "8")
    assert proc.returncode == 2 and proc.stderr.startswith("acceptance: --nodes")


def test_cli_plan_help_explains_rounds_and_sample():
    proc = subprocess.run([str(ACCEPTANCE), "plan", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "A round is" in proc.stdout and "sample:K" in proc.stdout


def test_plan_checks_the_longest_step_against_the_hang_timeout(tmp_path):
    # 32 nodes x 8 rails of h100-ndr400: a rail takes far longer than the 15 min deadline, a step does not.
    text = plan_text(32, 8, None, "h100-ndr400")
    assert re.search(r"longest step: +\d+ s +\(a round of test_write_bandwidth: one pair's sweep, both directions\); "
                     r"run.hang_timeout 15 min 0 s: fits", text), text
    tight = tmp_path / "tight.toml"
    tight.write_text('extends = "h100-ndr400"\n[run]\nhang_timeout = "20s"\n')
    assert "DOES NOT FIT" in plan_text(32, 8, None, str(tight))
    assert step_problem(load_profile(str(tight)), 360).startswith(
        "the longest step (a round of test_write_bandwidth: one pair's sweep, both directions) takes about")
    assert step_problem(load_profile("h100-ndr400"), 360) is None


def test_plan_exits_2_when_a_step_cannot_fit(acceptance_cli, tmp_path):
    tight = tmp_path / "tight.toml"
    tight.write_text('extends = "h100-ndr400"\n[run]\nhang_timeout = "20s"\n')
    p = acceptance_cli("plan", "--nodes", "32", "--rails", "8", "--profile", str(tight))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "DOES NOT FIT" in p.stdout
    assert "not within profile tight's run.hang_timeout of 20 s" in p.stderr
    assert acceptance_cli("plan", "--nodes", "32", "--rails", "8", "--profile", "h100-ndr400").returncode == 0
