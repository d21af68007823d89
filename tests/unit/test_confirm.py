"""Screening, then confirmation: the suspects and their rounds (drivers.confirm), and a confirmation
superseding its screening in analysis (analysis.confirmed)."""

import pandas as pd

from acceptance.analysis.confirmed import supersede
from acceptance.analysis.pipeline import find
from acceptance.drivers.confirm import Headline, confirmation_pairs, rounds_of, suspects, with_references
from acceptance.rules.profile import load_profile


def _rule(tmp_path, deviation: float, fail_ratio: float = 0.3):
    from acceptance.rules.judge import Outlier
    (tmp_path / "p.toml").write_text(f"[analysis]\noutlier_min_deviation = {deviation}\n"
                                     f"nic_fail_ratio = {fail_ratio}\n")
    return Outlier(load_profile(tmp_path / "p.toml"))


def test_suspects_are_failed_bounds_and_pairs_well_off_their_rails_median(tmp_path):
    hs = [Headline(0, 1, "bandwidth", 100.0, False), Headline(1, 0, "bandwidth", 99.0, False),
          Headline(2, 3, "bandwidth", 101.0, False), Headline(3, 2, "bandwidth", 85.0, False),  # 15% slow
          Headline(4, 5, "bandwidth", 100.0, True),                                              # failed a bound
          Headline(0, 1, "latency_p50", 2.0, False), Headline(2, 3, "latency_p50", 2.0, False),
          Headline(4, 5, "latency_p50", 2.1, False), Headline(5, 4, "latency_p50", 3.0, False)]  # 45% slow
    assert suspects(hs, {"bandwidth": True, "latency_p50": False}, _rule(tmp_path, 0.10)) == [(2, 3), (4, 5)]
    # A fleet bound nearer than the deviation (a noisy fleet's loose outlier rule, a 0.5 fleet factor).
    loose = [Headline(0, 1, "bandwidth", 100.0, False, 0.5), Headline(2, 3, "bandwidth", 100.0, False, 0.5),
             Headline(4, 5, "bandwidth", 30.0, False, 0.5), Headline(6, 7, "bandwidth", 60.0, False, 0.5)]
    assert suspects(loose, {"bandwidth": True}, _rule(tmp_path, 3.0, fail_ratio=0.05)) == [(4, 5)]
    # The NIC rule's ratio: at analysis.nic_fail_ratio of the median (80: 60 is 0.75 of it) a pair is a suspect
    # even where the deviation is loose.
    assert suspects(loose, {"bandwidth": True}, _rule(tmp_path, 3.0, fail_ratio=0.8)) == [(4, 5), (6, 7)]
    # Too few values for a median: only a failed bound makes a suspect.
    assert suspects(hs[:2], {"bandwidth": True}, _rule(tmp_path, 0.10)) == []


def test_each_suspect_end_meets_a_clean_partner_and_rounds_are_disjoint():
    pairs = confirmation_pairs([(2, 3)], 8, seed=1)
    assert pairs[0] == (2, 3) and len(pairs) == 3
    partners = {x: [b if a == x else a for a, b in pairs[1:] if x in (a, b)] for x in (2, 3)}
    assert all(len(p) == 1 and p[0] not in (2, 3) for p in partners.values())
    assert partners[2] != partners[3]  # a different clean partner for each end
    assert confirmation_pairs([(2, 3)], 8, seed=1) == pairs  # every rank draws the same
    rounds = rounds_of(pairs)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    for r in rounds:
        ends = [x for p in r for x in p]
        assert len(ends) == len(set(ends))
    assert confirmation_pairs([(0, 1)], 2) == [(0, 1)]  # nobody screened clean: the pair alone
    # With the tree: each end's clean partner is on another leaf (its uplink is crossed).
    leaves = ["a", "a", "a", "a", "b", "b", "b", "b"]
    for a, b in confirmation_pairs([(0, 1)], 8, seed=2, leaves=leaves)[1:]:
        assert leaves[a] != leaves[b]


def _records(screen: dict, again: dict, references: dict | None = None) -> pd.DataFrame:
    rows = []
    for phase, values in (("screen", screen), ("confirm", again), ("reference", references or {})):
        for (s, d), v in values.items():
            rows.append({"test": "t", "suite": "rdma_write", "metric": "bandwidth", "value": v, "unit": "Gbit/s",
                         "size": 8388608, "rail": 0, "nodes": (s, d), "src": s, "dst": d, "engine": "mpi",
                         "memory": "host", "iteration": 0, "samples": 10, "threshold": None, "verdict": "info",
                         "op": "write", "phase": phase})
    df = pd.DataFrame(rows)
    for c in ("test", "suite", "metric", "unit", "engine", "memory", "verdict", "op", "phase", "src", "dst"):
        df[c] = df[c].astype("category")
    return df


def test_a_confirmation_supersedes_its_screening_and_a_suspect_that_did_not_reproduce_is_transient():
    names = [f"node{i}" for i in range(1, 9)]
    screen = {(a, b): 395.0 for i, a in enumerate(names) for b in names[i + 1:i + 2]}
    screen |= {(b, a): 395.0 for (a, b) in list(screen)}
    screen[("node3", "node4")] = 300.0   # congested in screening only
    screen[("node5", "node6")] = 200.0   # a real fault
    again = {("node3", "node4"): 390.0, ("node5", "node6"): 201.0}
    df = _records(screen, again)
    profile = load_profile("h100-ndr400")  # outlier_min_deviation 10%
    kept, transient = supersede(df, profile)
    assert len(kept) == len(df) - 2  # the two screen rows replaced by their confirmations
    assert set(kept.loc[kept["phase"] == "confirm", "value"]) == {390.0, 201.0}
    assert [(f["scope"], f["node"], f["peer"], f["severity"], f["transient"]) for f in transient] == [
        ("link", "node3", "node4", "warn", True)]
    assert "transient" in transient[0]["message"] and "nothing to drain" in transient[0]["message"]
    # Through the whole analysis: the transient link is a warning, never failing.
    findings = find(df, profile)
    assert [f for f in findings if f.get("transient")] == transient
    assert not any(f["severity"] == "fail" and {f["node"], f["peer"]} == {"node3", "node4"} for f in findings)
    # The fault reproduced: it fails on its confirmation (201 Gbit/s < the 360 Gbit/s bound).
    assert any(f["severity"] == "fail" and {f["node"], f["peer"]} <= {"node5", "node6"} and f["value"] == 201.0
               for f in findings), findings


def test_each_confirmation_round_measures_clean_pairs_beside_the_suspects():
    suspect = [(2, 3)]
    rounds = rounds_of(confirmation_pairs(suspect, 12, seed=1))
    with_refs, refs = with_references(rounds, suspect, 12, seed=1)
    assert with_references(rounds, suspect, 12, seed=1) == (with_refs, refs)  # every rank draws the same
    assert refs and all(2 not in p and 3 not in p for p in refs)  # never a suspect's end
    for before, after in zip(rounds, with_refs):
        assert after[:len(before)] == before and 0 < len(after) - len(before) <= 3
        ends = [x for p in after for x in p]
        assert len(ends) == len(set(ends))  # still disjoint: the references ran in the same round
    assert set(p for r in with_refs for p in r if p not in [q for b in rounds for q in b]) == refs
    # Nobody clean and idle: the rounds as they were, no reference.
    assert with_references([[(0, 1)]], [(0, 1)], 2) == ([[(0, 1)]], set())


def _quiet_confirmation(fault: float, congestion: float) -> tuple[dict, dict, dict]:
    """Eight nodes in a ring of pairs at 500 Gbit/s alone; screening loaded by `congestion` (the median
    dip); node5 -> node6 at `fault` of its peers, in screening and again; the references beside it."""
    names = [f"node{i}" for i in range(1, 9)]
    loaded = 500.0 * (1 - congestion)
    screen = {(a, b): loaded for i, a in enumerate(names) for b in names[i + 1:i + 2]}
    screen |= {(b, a): loaded for (a, b) in list(screen)}
    screen[("node5", "node6")] = fault * loaded
    again = {("node5", "node6"): fault * 500.0}
    references = {("node1", "node2"): 500.0, ("node2", "node1"): 498.0, ("node7", "node8"): 501.0,
                  ("node8", "node7"): 499.0}
    return screen, again, references


def test_a_fault_smaller_than_the_screening_s_congestion_is_confirmed_against_references_beside_it():
    """Alone, a suspect measures faster than the loaded screening median: against that median a 15%
    fault under a 10% congestion dip read as transient. Against the pairs that screened clean, measured
    in the same rounds, it is confirmed, and the detectors judge its screening value among its peers."""
    profile = load_profile("h100-ndr400")  # outlier_min_deviation 10%
    screen, again, references = _quiet_confirmation(0.85, 0.10)
    kept, transient = supersede(_records(screen, again), profile)  # no references: the old comparison
    assert [(f["node"], f["peer"]) for f in transient] == [("node5", "node6")]
    df = _records(screen, again, references)
    kept, transient = supersede(df, profile)
    assert transient == []
    assert "reference" not in set(kept["phase"].astype(str))  # the yardstick is never judged itself
    slow = kept[(kept["src"] == "node5") & (kept["dst"] == "node6")]
    assert list(slow["phase"].astype(str)) == ["screen"] and list(slow["value"]) == [0.85 * 450.0]
    findings = find(df, profile)
    assert any({f["node"], f.get("peer")} & {"node5", "node6"} and f["severity"] in ("warn", "fail")
               and not f.get("transient") for f in findings), findings
    # A congested pair that is normal beside the references stays transient.
    screen[("node5", "node6")] = 0.7 * 450.0
    kept, transient = supersede(_records(screen, {("node5", "node6"): 497.0}, references), profile)
    assert [(f["node"], f["peer"], f["kind"]) for f in transient] == [("node5", "node6", "transient")]
    assert "measured beside it" in transient[0]["message"]
    assert list(kept.loc[(kept["src"] == "node5") & (kept["dst"] == "node6"), "value"]) == [497.0]


def test_history_keeps_the_confirmed_value_of_a_link():
    from acceptance.analysis.confirmed import confirmed_only
    df = _records({("node1", "node2"): 300.0, ("node2", "node1"): 395.0}, {("node1", "node2"): 390.0})
    kept = confirmed_only(df)
    assert sorted(kept["value"]) == [390.0, 395.0]


def test_records_without_phases_are_left_alone():
    df = _records({("node1", "node2"): 1.0}, {})
    bare = df.drop(columns="phase")
    assert supersede(bare, load_profile("fleet"))[0] is bare
    kept, transient = supersede(df, load_profile("fleet"))
    assert kept is df and transient == []


def test_the_load_check_takes_nodes_suspect_on_most_rails_and_a_new_clean_partner_per_rail():
    from acceptance.drivers.confirm import load_partners, under_load
    flags = [(f"node{n}", r, (n == 5) or (n == 3 and r == 0)) for n in range(1, 9) for r in (0, 1)]
    assert under_load(flags, [0, 1]) == ["node5"]  # node3 is a suspect on one rail of two
    assert under_load([(n, 0, b) for n, _, b in flags if _ == 0], [0]) == []  # one rail: nothing to compare
    partners = load_partners(["node5"], flags, [0, 1], seed=7)
    mates = [g for rail in (0, 1) for x, g in partners[rail]]
    assert [x for rail in (0, 1) for x, _ in partners[rail]] == ["node5", "node5"]
    assert len(set(mates)) == 2 and "node5" not in mates  # one per rail
    assert partners[0][0][1] != "node3"  # clean on its rail: node3 was a suspect on rail 0
    assert load_partners(["node5"], flags, [0, 1], seed=7) == partners  # every rank draws the same
    few = [(f"node{n}", r, n == 1) for n in (1, 2) for r in (0, 1)]
    assert load_partners(["node1"], few, [0, 1], seed=0) == {0: [], 1: []}  # one clean node cannot partner 2 rails


def _load_records(slow_alone: float) -> pd.DataFrame:
    """8 nodes x 2 rails at 8 MiB: node5 slow on both rails in every phase measured with all rails busy
    (screen, confirm, full) and `slow_alone` when its rails run one at a time."""
    names = [f"node{i}" for i in range(1, 9)]
    rows = []

    def add(phase, s, d, rail, v):
        rows.append({"test": "t", "suite": "rdma_write", "metric": "bandwidth", "value": v, "unit": "Gbit/s",
                     "size": 8388608, "rail": rail, "nodes": (s, d), "src": s, "dst": d, "engine": "mpi",
                     "memory": "host", "iteration": 0, "samples": 10, "threshold": None, "verdict": "info",
                     "op": "write", "phase": phase})
    for rail in (0, 1):
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                v = 150.0 if "node5" in (a, b) else 395.0
                add("screen", a, b, rail, v)
                add("screen", b, a, rail, v)
        partner = ("node1", "node2")[rail]
        for s, d in (("node5", partner), (partner, "node5")):
            add("confirm", s, d, rail, 151.0)
            add("full", s, d, rail, 149.0)
            add("alone", s, d, rail, slow_alone)
    df = pd.DataFrame(rows)
    for c in ("test", "suite", "metric", "unit", "engine", "memory", "verdict", "op", "phase", "src", "dst"):
        df[c] = df[c].astype("category")
    return df


def test_a_node_slow_only_with_every_nic_busy_is_named_once_and_drained():
    from acceptance.analysis.output import drain_lines
    profile = load_profile("h100-ndr400")
    findings = find(_load_records(slow_alone=392.0), profile)
    loaded = [f for f in findings if f["kind"] == "full_load"]
    assert [(f["node"], f["scope"], f["severity"]) for f in loaded] == [("node5", "node", "fail")], findings
    assert "falls under full load" in loaded[0]["message"] and "one rail at a time" in loaded[0]["message"]
    assert len(loaded[0]["evidence"]) == 2  # both rails
    # It explains node5's slow NICs: no second finding for them; its partners are not named.
    assert not [f for f in findings if f["node"] == "node5" and f["kind"] != "full_load"
                and f["scope"] in ("nic", "node") and f["metric"] == "bandwidth"], findings
    assert not [f for f in findings if f["severity"] == "fail" and f["node"] in ("node1", "node2")
                and f["scope"] in ("nic", "node")], findings
    assert [d.node for d in drain_lines(findings)] == ["node5"]


def test_a_node_slow_alone_too_keeps_its_ordinary_finding():
    findings = find(_load_records(slow_alone=150.0), load_profile("h100-ndr400"))
    assert not [f for f in findings if f["kind"] == "full_load"]
    assert [f for f in findings if f["severity"] == "fail" and f["node"] == "node5" and f["scope"] in ("nic", "node")]


def test_history_leaves_out_the_load_check():
    from acceptance.analysis.confirmed import confirmed_only
    df = _load_records(slow_alone=392.0)
    kept = confirmed_only(df)
    assert not set(kept["phase"].astype(str)) & {"full", "alone"}
    assert (kept["phase"] == "confirm").sum() == (df["phase"] == "confirm").sum()
