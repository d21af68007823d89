"""outcomes.merge / describe: one verdict from every rank's phase outcome."""
from acceptance.runtime.outcomes import SHOWN_FAILURES, SHOWN_RANKS, describe, merge, phase_summary

LABELS = {0: "0@n1", 1: "1@node1", 2: "2@n2", 3: "3@n2"}


def passed(when="call"):
    return phase_summary("passed", when, False, "")


def failed(text, when="call"):
    return phase_summary("failed", when, False, text)


def skipped(text, when="setup"):
    return phase_summary("skipped", when, False, text)


def test_phase_summary_shape():
    assert phase_summary("failed", "call", True, "boom") == {
        "outcome": "failed", "when": "call", "xfail": True, "text": "boom"}


def test_all_pass_keeps_rank_zero_outcome():
    got = merge({r: passed() for r in range(4)}, LABELS)
    assert got == {"outcome": "passed", "longrepr": None, "ranks": []}


def test_one_rank_failed():
    s = {r: passed() for r in range(4)}
    s[1] = failed("assert 1 == 2\nE   boom\n")
    got = merge(s, LABELS)
    assert got["outcome"] == "failed"
    assert got["ranks"] == [1]
    assert got["longrepr"] == (
        "failed on rank [1@node1] of 4\n"
        "---- failed on rank [1@node1] ----\n"
        "assert 1 == 2\nE   boom")
    assert got["longrepr"].splitlines()[0] == "failed on rank [1@node1] of 4"


def test_identical_failures_grouped():
    s = {r: passed() for r in range(4)}
    s[0] = failed("same text")
    s[2] = failed("same text")
    got = merge(s, LABELS)
    assert got["outcome"] == "failed"
    assert got["ranks"] == [0, 2]
    assert got["longrepr"] == (
        "failed on ranks [0@n1, 2@n2] of 4\n"
        "---- failed on ranks [0@n1, 2@n2] ----\n"
        "same text")
    assert got["longrepr"].count("----\n") == 1


def test_two_different_failures_two_sections_ordered_by_first_rank():
    s = {0: passed(), 1: failed("B text"), 2: failed("A text"), 3: failed("B text")}
    got = merge(s, LABELS)
    assert got["ranks"] == [1, 2, 3]
    assert got["longrepr"] == (
        "failed on ranks [1@node1, 2@n2, 3@n2] of 4\n"
        "---- failed on ranks [1@node1, 3@n2] ----\n"
        "B text\n"
        "---- failed on rank [2@n2] ----\n"
        "A text")


def test_distinct_failures_beyond_the_shown_ones_are_counted_with_their_ranks():
    # Every rank failing with its own numbers: the text rank 0 answers every rank with stays bounded.
    n = 4096
    got = merge({r: failed(f"bandwidth {r} below the bound") for r in range(n)}, {})
    assert got["ranks"] == list(range(n))
    assert got["longrepr"].count("\n---- failed on rank [") == SHOWN_FAILURES
    assert f"bandwidth {SHOWN_FAILURES - 1} below" in got["longrepr"]
    assert f"bandwidth {SHOWN_FAILURES} below" not in got["longrepr"]
    more = got["longrepr"].splitlines()[-1]
    assert more == (f"---- and {n - SHOWN_FAILURES} more distinct failures, on ranks ["
                    + ", ".join(str(r) for r in range(SHOWN_FAILURES, SHOWN_FAILURES + SHOWN_RANKS))
                    + f", ... and {n - SHOWN_FAILURES - SHOWN_RANKS} more]: texts not shown ----")
    assert len(got["longrepr"]) < 3000


def test_failure_wins_over_skip():
    s = {0: skipped("Skipped: x"), 1: failed("boom"), 2: passed(), 3: passed()}
    got = merge(s, LABELS)
    assert got["outcome"] == "failed"
    assert got["ranks"] == [1]
    assert got["longrepr"].startswith("failed on rank [1@node1] of 4\n")


def test_skip_on_one_rank_is_inconsistent():
    s = {r: passed() for r in range(4)}
    s[1] = skipped("('x.py', 3, 'Skipped: first line')\nSkipped: no GPU on this node\n")
    got = merge(s, LABELS)
    assert got["outcome"] == "failed"
    assert got["ranks"] == [1]
    lines = got["longrepr"].splitlines()
    assert lines[0].startswith("inconsistent outcome across ranks")
    assert lines[1:] == [
        "  passed on ranks [0@n1, 2@n2, 3@n2]",
        "  skipped on rank [1@node1]: Skipped: no GPU on this node",
    ]


def test_xfail_vs_pass_is_inconsistent():
    s = {0: passed(), 1: passed(), 2: phase_summary("skipped", "call", True, "reason: flaky nic")}
    got = merge(s, LABELS)
    assert got["outcome"] == "failed"
    assert got["ranks"] == [2]
    assert got["longrepr"].splitlines()[1:] == [
        "  passed on ranks [0@n1, 1@node1]",
        "  xskipped on rank [2@n2]: reason: flaky nic",
    ]


def test_all_skipped_is_consistent():
    s = {r: skipped("Skipped: no rdma") for r in range(3)}
    assert merge(s, LABELS) == {"outcome": "skipped", "longrepr": None, "ranks": []}


def test_all_xfail_is_consistent():
    s = {r: phase_summary("skipped", "call", True, "x") for r in range(2)}
    assert merge(s, LABELS) == {"outcome": "skipped", "longrepr": None, "ranks": []}


def test_single_rank():
    assert merge({0: passed()}, {}) == {"outcome": "passed", "longrepr": None, "ranks": []}


def test_labels_fall_back_to_rank_number():
    got = merge({0: passed(), 1: failed("x")}, {})
    assert got["longrepr"].splitlines()[0] == "failed on rank [1] of 2"


def test_describe_singular_and_plural():
    assert describe([3], LABELS) == "rank [3@n2]"
    assert describe([0, 3], LABELS) == "ranks [0@n1, 3@n2]"
    assert describe([7], LABELS) == "rank [7]"


def test_describe_shortens_past_shown_ranks():
    assert SHOWN_RANKS == 16
    ranks = list(range(SHOWN_RANKS + 5))
    text = describe(ranks, {})
    assert text == "ranks [" + ", ".join(str(r) for r in range(16)) + ", ... and 5 more]"


def test_describe_exactly_shown_ranks_not_shortened():
    text = describe(list(range(SHOWN_RANKS)), {})
    assert "more" not in text
    assert text.endswith(", 15]")
