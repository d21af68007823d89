"""Fleet-relative bounds: a value against the median of the comparable others of the same run."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic

from acceptance.rules import judge
from acceptance.analysis import analyze, evaluate
from acceptance.analysis.load import load_records
from acceptance.rules.profile import ProfileError, load_profile
from acceptance.records.results import make_record

FLEET_BW = """
[fleet]
bounds = { "rdma_write.bandwidth" = 0.5, "rdma_write.latency_p50" = 3.0 }
"""


def profile_with(tmp_path, text: str, base: str = synthetic.SYNTHETIC_PROFILE):
    path = tmp_path / "fleet.toml"
    path.write_text(f'extends = "{base}"\n{text}')
    return load_profile(path)


def pairs_frame(values, rails=None, nodes=None, size=4096, metric="bandwidth", unit="Gbit/s"):
    """Point-to-point records of one metric and size: values[i] for link i (src -> dst, rail)."""
    n = len(values)
    nodes = nodes or [(f"node{1 + i % 2}", f"node{2 - i % 2}") for i in range(n)]
    rails = rails if rails is not None else [i // 2 for i in range(n)]
    return pd.DataFrame({"suite": "rdma_write", "metric": metric, "value": values, "size": size, "unit": unit,
                         "src": [a for a, _ in nodes], "dst": [b for _, b in nodes], "rail": rails,
                         "memory": "host", "engine": "verbs", "iteration": 0, "op": None, "scope": None,
                         "detail": None, "threshold": np.nan})


# ---- the centre ---------------------------------------------------------------------------------

def test_the_centre_is_the_median_of_the_others():
    rng = np.random.default_rng(1)
    values = rng.uniform(1, 10, 200)
    values[rng.integers(0, 200, 20)] = np.nan
    groups = rng.integers(0, 9, 200)
    centre, size = judge.Fleet.loo_median(values, groups)
    for i in range(200):
        if np.isnan(values[i]):
            assert np.isnan(centre[i]) and size[i] == 0
            continue
        peers = values[(groups == groups[i]) & ~np.isnan(values)]
        others = np.delete(peers, np.flatnonzero(peers == values[i])[0])
        assert size[i] == len(peers)
        assert (np.isnan(centre[i]) and not len(others)) or centre[i] == pytest.approx(np.median(others))


# ---- judging ------------------------------------------------------------------------------------

def test_two_slow_links_of_four_fail_against_the_other_three(tmp_path):
    """2 nodes x 2 rails, rail 1's link throttled both ways: each slow link's centre is the median
    of the 3 others, which the two healthy ones dominate."""
    profile = profile_with(tmp_path, FLEET_BW)
    judged = judge.judge_records(pairs_frame([0.06, 0.09, 0.018, 0.017]), profile)
    assert [judge.VERDICTS[c] for c in judged.verdict] == ["pass", "pass", "fail", "fail"]
    assert list(judged.bound) == ["fleet"] * 4 and list(judged.population) == [4] * 4
    assert judged.centre[2] == pytest.approx(0.06) and judged.threshold[2] == pytest.approx(0.03)
    assert list(judged.peers) == ["all pairs"] * 4


@pytest.mark.parametrize("spread", [1.5, 2.0])
def test_healthy_scatter_does_not_fail(tmp_path, spread):
    """Links up to 2x apart (the emulator's healthy spread) against a bound at half the median."""
    profile = profile_with(tmp_path, FLEET_BW)
    rng = np.random.default_rng(7)
    for _ in range(50):
        values = rng.uniform(1.0, spread, 12)
        judged = judge.judge_records(pairs_frame(values, rails=[i % 2 for i in range(12)],
                                                 nodes=[(f"node{i % 3 + 1}", f"node{(i + 1) % 3 + 1}")
                                                        for i in range(12)]), profile)
        assert (judged.verdict == judge.PASS).all(), values


def test_the_stricter_of_absolute_and_fleet_applies(tmp_path):
    profile = profile_with(tmp_path, FLEET_BW + '[rdma_write]\nbandwidth_min = { "8B" = "0.4Gbit/s" }\n')
    judged = judge.judge_records(pairs_frame([1.0, 1.0, 1.0, 0.6]), profile)
    assert list(judged.bound) == ["fleet"] * 4 and judge.VERDICTS[judged.verdict[3]] == "pass"
    judged = judge.judge_records(pairs_frame([0.2, 0.2, 0.2, 0.2]), profile)
    assert list(judged.bound) == ["absolute"] * 4 and (judged.verdict == judge.FAIL).all()


def test_too_few_peers_warns_never_passes_and_an_absolute_failure_still_fails(tmp_path):
    profile = profile_with(tmp_path, FLEET_BW + '[rdma_write]\nbandwidth_min = { "8B" = "0.5Gbit/s" }\n')
    judged = judge.judge_records(pairs_frame([1.0, 0.1]), profile)
    assert list(judged.bound) == ["fleet_too_few"] * 2 and list(judged.population) == [2, 2]
    assert [judge.VERDICTS[c] for c in judged.verdict] == ["warn", "fail"]


def test_lower_is_better_fails_above_the_multiple(tmp_path):
    profile = profile_with(tmp_path, FLEET_BW)
    judged = judge.judge_records(pairs_frame([10.0, 12.0, 11.0, 40.0], metric="latency_p50", unit="us", size=8),
                                 profile)
    assert [judge.VERDICTS[c] for c in judged.verdict] == ["pass", "pass", "pass", "fail"]
    assert judged.threshold[3] == pytest.approx(33.0)


def test_a_factor_table_by_size_leaves_smaller_sizes_to_their_absolute_bounds(tmp_path):
    profile = profile_with(tmp_path, '[fleet]\nbounds = { "rdma_write.bandwidth" = { "4KiB" = 0.5 } }\n')
    small = judge.judge_records(pairs_frame([1.0, 1.0, 1.0, 0.1], size=512), profile)
    large = judge.judge_records(pairs_frame([1.0, 1.0, 1.0, 0.1], size=4096), profile)
    assert not any(b == "fleet" for b in small.bound) and small.verdict[3] != judge.FAIL
    assert large.bound[3] == "fleet" and large.verdict[3] == judge.FAIL
    assert judge.judge_one("rdma_write", "bandwidth", 0.1, profile, 512)[2] != "fleet"
    assert judge.judge_one("rdma_write", "bandwidth", 0.1, profile, 4096)[1:] == ("info", "fleet")


def test_populations_by_kind(tmp_path):
    """Rail and node communicators are compared among themselves; the world communicator has no peers."""
    profile = profile_with(tmp_path, '[fleet]\nbounds = { "collective.busbw" = 0.5 }\n')
    scopes = ["world", "rail0", "rail1", "rail2", "node", "node", "node"]
    values = [5.0, 40.0, 41.0, 10.0, 300.0, 310.0, 100.0]
    df = pd.DataFrame({"suite": "collective", "metric": "busbw", "value": values, "size": 1 << 20, "unit": "GB/s",
                       "src": ["node1", "node1", "node1", "node1", "node1", "node2", "node3"],
                       "dst": ["node2", "node2", "node2", "node2", None, None, None],
                       "rail": [None, 0, 1, 2, None, None, None], "memory": "host", "engine": "mpi",
                       "iteration": 0, "op": "allreduce", "scope": scopes, "detail": None, "threshold": np.nan})
    judged = judge.judge_records(df, profile)
    assert list(judged.peers) == [None, "rail communicators", "rail communicators", "rail communicators",
                                  "node communicators", "node communicators", "node communicators"]
    assert [judge.VERDICTS[c] for c in judged.verdict] == ["pass", "pass", "pass", "fail", "pass", "pass", "fail"]
    assert judged.bound[0] == "absolute" and judged.population[0] == 0


def test_while_recording_only_the_floor_can_fail_and_the_record_says_fleet(tmp_path):
    profile = profile_with(tmp_path, FLEET_BW + '[rdma_write]\nbandwidth_min = { "8B" = "0.5Gbit/s" }\n')
    assert judge.judge_one("rdma_write", "bandwidth", 1.0, profile, 65536) == (0.5, "info", "fleet")
    assert judge.judge_one("rdma_write", "bandwidth", 0.1, profile, 65536) == (0.5, "fail", "fleet")
    assert judge.judge_one("rdma_write", "bandwidth", 1.0, profile, 65536, peers=False) == (0.5, "pass", "absolute")
    got = []
    judge.record(lambda *a, **k: got.append(k), profile, "rdma_write", "bandwidth", 1.0, size=65536)
    assert got[0]["bound"] == "fleet" and got[0]["verdict"] == "info"


def test_the_bound_kind_survives_results_jsonl(tmp_path):
    recs = [make_record(test="t", suite="rdma_write", metric="bandwidth", value=1.0, unit="Gbit/s",
                        nodes=["a", "b"], ranks=[0, 1], size=8, rail=0, verdict="info", bound="fleet"),
            make_record(test="t", suite="rdma_write", metric="bandwidth", value=1.0, unit="Gbit/s",
                        nodes=["a", "b"], ranks=[0, 1], size=8, rail=0, bound="line_rate", detail="x"),
            make_record(test="t", suite="rdma_write", metric="bandwidth", value=1.0, unit="Gbit/s",
                        nodes=["a", "b"], ranks=[0, 1], size=8, rail=0)]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs)
                    + json.dumps({**recs[0], "bound": "fleet", "value": 2.0}, indent=None, separators=(",", ":")) + "\n")
    df = load_records(path)
    assert [None if pd.isna(b) else b for b in df["bound"].astype(object)] == ["fleet", "line_rate", None, "fleet"]
    with pytest.raises(ValueError):
        make_record(test="t", suite="s", metric="m", value=1, unit="u", nodes=[], ranks=[], bound="guess")


# ---- profiles ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, said", [
    ('bounds = { "rdma_write.bandwith" = 0.5 }', "names no metric that can be judged against the fleet"),
    ('bounds = { "rdma_write.bandwidth" = 2.0 }', "higher is better, so its factor is the fraction"),
    ('bounds = { "rdma_write.latency_p50" = 0.5 }', "lower is better, so its factor is the multiple"),
    ('bounds = { "rdma_write.*" = 0.5 }', "matches metrics where higher is better and metrics where lower"),
    ('bounds = { "preflight.port_rate" = 0.5 }', "names no metric that can be judged against the fleet"),
    ('bounds = { "rdma_write.bandwidth" = { "4K" = 0.5 } }', "unknown size unit"),
    ('bounds = { "rdma_write.bandwidth" = "half" }', "expected a number or a table"),
    ('min_population = 1', "must be >= 2"),
    ('pairs = "node"', "must be one of all, rail"),
])
def test_bad_fleet_settings_name_the_key_and_why(tmp_path, text, said):
    with pytest.raises(ProfileError) as info:
        profile_with(tmp_path, f"[fleet]\n{text}\n", base="local")
    assert "fleet." in str(info.value) and said in str(info.value), str(info.value)


def test_patterns_and_size_tables_read_back(tmp_path):
    from acceptance.rules.profile import format_profile
    p = profile_with(tmp_path, '[fleet]\nbounds = { "rdma_write.latency_p5*" = 3, "rdma_write.bandwidth" = '
                               '{ "4KiB" = 0.5, "1MiB" = 0.8 } }\n', base="local")
    assert p.get("fleet.bounds") == [["rdma_write.latency_p5*", 3.0], ["rdma_write.bandwidth", [[4096, 0.5],
                                                                                                 [1048576, 0.8]]]]
    again = tmp_path / "again.toml"
    again.write_text(format_profile(p))
    assert load_profile(again).get("fleet.bounds") == p.get("fleet.bounds")


# ---- a run: faults stand apart, healthy passes, too few never passes ------------------------------

FLEET_RUN = '[fleet]\nbounds = { "rdma_write.bandwidth" = 0.8, "rdma_write.latency_p50" = 1.25 }\n'


@pytest.mark.parametrize("fault, where", [
    ({"slow_link": ("node02", "node04", 1, 0.5)}, ("link", "node02", 1)),
    ({"slow_nic": ("node03", 1, 0.5)}, ("nic", "node03", 1)),
    ({"slow_node": ("node05", 0.5)}, ("node", "node05", None)),
    ({"slow_rail": (1, 0.5)}, ("rail", None, 1)),
])
def test_what_stands_apart_fails_and_is_localized(tmp_path, fault, where):
    profile = profile_with(tmp_path, FLEET_RUN)
    run = synthetic.make_run(tmp_path / "run", nodes=6, rails=4, latency=False, collectives=False, memreg=False,
                             preflight=False, **fault)
    a = analyze(run, profile=profile)
    assert a.verdict == "fail"
    failing = [f for f in a.findings if f["severity"] == "fail"]
    assert {(f["scope"], f["node"], f["rail"]) for f in failing} == {where}, failing
    assert all(f["bound"] == "fleet" and "other measurements of all pairs" in f["basis"] for f in failing), failing
    assert a.fleet["outside"] > 0


def test_a_healthy_run_passes_its_fleet_bounds(tmp_path):
    profile = profile_with(tmp_path, FLEET_RUN)
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=6, rails=4), profile=profile)
    assert a.verdict == "pass" and a.findings == []
    assert a.fleet["judged"] == 6 * 5 * 4 * 3 and a.fleet["outside"] == 0 and a.fleet["too_few"] == 0
    assert {p["peers"] for p in a.fleet["populations"]} == {"all pairs"}


def test_too_few_peers_everywhere_is_incomplete_not_pass(tmp_path):
    """One link on one rail, bandwidth only: nothing to compare it with, and nothing else judged."""
    profile = profile_with(tmp_path, FLEET_RUN + '[rdma_write]\nbandwidth_min = {}\n')
    run = synthetic.make_run(tmp_path / "run", nodes=2, rails=1, sizes=(65536,), latency=False, collectives=False,
                             memreg=False, preflight=False)
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text("".join(f"{x}\n" for x in lines if '"metric": "bandwidth"' in x))
    a = analyze(run, profile=profile)
    assert a.verdict == "incomplete" and a.fleet["too_few"] == 2 and a.fleet["judged"] == 0
    warn, = [f for f in a.findings if f["kind"] == "fleet"]
    assert warn["severity"] == "warn" and warn["bound"] == "fleet_too_few"
    assert "not judged against the fleet: too few comparable measurements" in warn["message"]


def test_evaluate_puts_the_bound_and_its_population_on_every_record(tmp_path):
    profile = profile_with(tmp_path, FLEET_RUN)
    ev = evaluate(load_records(synthetic.make_run(tmp_path / "run", nodes=3, rails=2)), profile)
    bw = ev[ev["metric"] == "bandwidth"]
    assert set(bw["bound"].astype(str)) == {"fleet"} and set(bw["population"]) == {12}
    assert set(ev.loc[ev["metric"] == "errors", "bound"].astype(str)) == {"absolute"}
    assert ev.loc[ev["metric"] == "errors", "population"].eq(0).all()


def test_a_failed_test_is_no_pair_even_when_nothing_else_failed(tmp_path):
    """A p2p test failed by its port counters: its test_failed record names nodes, and is no pair."""
    run = synthetic.make_run(tmp_path / "run", nodes=2, rails=1, latency=False, collectives=False, memreg=False,
                             preflight=False)
    failed = make_record(test=synthetic.BW_TEST.format(0), suite="rdma_write", metric="test_failed", value=None,
                         unit="", nodes=["node01", "node02"], ranks=[0, 1], rail=0, verdict="fail",
                         detail="call: port error counters rose")
    with open(run / "results.jsonl", "a") as fh:
        fh.write(json.dumps(failed) + "\n")
    a = analyze(run, profile=profile_with(tmp_path, FLEET_RUN))
    assert a.verdict == "fail" and any(f["kind"] == "test" for f in a.findings), a.findings


def test_a_failed_test_is_explained_by_a_failing_record_of_its_file_from_the_field(tmp_path):
    """Port counters are recorded for the whole suite file (their test is the file): a test failed by
    them is explained by its record's `file` field, never by cutting its test id."""
    run = synthetic.make_run(tmp_path / "run", nodes=2, rails=1, latency=False, collectives=False, memreg=False,
                             preflight=False)
    test = synthetic.BW_TEST.format(0)
    counter = make_record(test="suites/counted.py", suite="counters", metric="symbol_error", value=3.0,
                          unit="count", nodes=["node01"], ranks=[0], rail=0, verdict="fail", device="mlx5_0", port=1)
    failed = dict(make_record(test=test, suite="rdma_write", metric="test_failed", value=None, unit="",
                              nodes=["node01", "node02"], ranks=[0, 1], rail=0, verdict="fail",
                              detail="teardown: port error counters rose"))
    with open(run / "results.jsonl", "a") as fh:
        fh.write(json.dumps(counter) + "\n")
        for file in (None, "suites/counted.py"):
            rec = {**failed, "test": f"{test}-{file}", **({"file": file} if file else {})}
            fh.write(json.dumps(rec) + "\n")
    a = analyze(run, profile=profile_with(tmp_path, FLEET_RUN))
    unexplained = [f for f in a.findings if f["kind"] == "test"]
    assert unexplained and all(f"{test}-None" in f["message"] for f in unexplained), unexplained
