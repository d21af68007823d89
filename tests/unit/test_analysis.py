"""Analysis: re-judging records, fleet outliers, localization, burn-in, baseline, drain lines."""

import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import synthetic

from acceptance.analysis import Analysis, analyze, compare, drain_lines, evaluate, find, load_records, write_outputs
from acceptance.rules.profile import load_profile
from acceptance.rules.units import format_size
from acceptance.records.results import InputError, make_record

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def where(findings):
    """The identity of each finding: (scope, node, rail, peer)."""
    return [(f["scope"], f["node"], f["rail"], f["peer"]) for f in findings]


def rewrite(run_dir: Path, change) -> None:
    """Apply change(record) -> record | None to every line of results.jsonl."""
    path = run_dir / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    out = [r for r in (change(r) for r in records) if r is not None]
    path.write_text("".join(json.dumps(r) + "\n" for r in out))


def profile_file(tmp_path: Path, text: str, name: str = "site") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text('extends = "local"\n' + text)
    return path


FAULTS = {
    "link": ({"slow_link": ("node03", "node09", 2)}, ("link", "node03", 2, "node09")),
    "nic": ({"slow_nic": ("node05", 4)}, ("nic", "node05", 4, None)),
    "node": ({"slow_node": "node11"}, ("node", "node11", None, None)),
    "rail": ({"slow_rail": 6}, ("rail", None, 6, None)),
}


# ---- localization ---------------------------------------------------------------------

def test_four_faults_are_told_apart(tmp_path):
    kwargs = {k: v for spec, _ in FAULTS.values() for k, v in spec.items()}
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=16, rails=8, **kwargs))
    assert where(a.findings) == [FAULTS["rail"][1], FAULTS["node"][1], FAULTS["nic"][1], FAULTS["link"][1]]
    assert {f["severity"] for f in a.findings} == {"fail"}
    assert a.verdict == "fail"
    rail, node, nic, link = a.findings
    assert "node11" in node["message"] and "drain node11" in node["message"]
    assert nic["message"].startswith("node05's NIC on rail 4 is 40% slow")
    assert "15 of 15 partners" in nic["message"]
    assert link["metric"] == "bandwidth" and link["value"] == pytest.approx(0.5 * link["expected"], rel=0.03)
    assert rail["value"] == pytest.approx(0.6 * rail["expected"], rel=0.03)
    assert [d.line for d in a.drains] == [
        ('scontrol update NodeName=node11 State=DRAIN Reason="acceptance: rdma_write: bandwidth '
        f'{node["value"]:.1f} vs {node["expected"]:.1f} Gbit/s"'),
        ('scontrol update NodeName=node05 State=DRAIN Reason="acceptance: rdma_write: NIC rail 4 bandwidth '
        f'{nic["value"]:.1f} vs {nic["expected"]:.1f} Gbit/s"')]


def test_clean_run_has_no_findings(tmp_path):
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=16, rails=8))
    assert a.findings == [] and a.drains == [] and a.verdict == "pass"
    assert set(a.records["verdict"].astype(str)) <= {"pass", "info"}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_alone(tmp_path, fault):
    spec, expected = FAULTS[fault]
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=16, rails=8, **spec))
    assert where(a.findings) == [expected]
    assert a.findings[0]["severity"] == "fail" and a.findings[0]["kind"] == "outlier"
    assert len(a.findings[0]["evidence"]) <= 11


def test_evidence_is_capped_and_readable(tmp_path):
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=16, rails=8, slow_nic=("node05", 4)))
    (nic,) = a.findings
    assert len(nic["evidence"]) == 11 and nic["evidence"][-1].startswith("and ")
    first = nic["evidence"][0]
    # the worst of its links first: 0.6x healthy, with the synthetic noise of +-1% on either end
    assert "rail 4, bandwidth " in first and " B: " in first and "Gbit/s vs median" in first
    assert re.search(r"\(-4[01]%\)", first)


def test_warn_for_a_mildly_slow_link(tmp_path):
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=8, rails=2, slow_link=("node02", "node04", 1, 0.88)))
    assert where(a.findings) == [("link", "node02", 1, "node04")]
    assert a.findings[0]["severity"] == "warn" and a.drains == []


def test_one_direction_of_a_link(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=2, latency=False)

    def slow(r):
        if r["metric"] == "bandwidth" and r["rail"] == 0 and r["nodes"] == ["node06", "node02"]:
            r["value"] *= 0.5
        return r
    rewrite(run, slow)
    a = analyze(run)
    assert where(a.findings) == [("link", "node06", 0, "node02")]
    assert "node06 -> node02" in a.findings[0]["message"]


def test_two_nodes_a_bad_link_is_reported_as_a_link(tmp_path):
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=2, rails=4, slow_link=("node01", "node02", 3, 0.5)))
    assert where(a.findings) == [("link", "node01", 3, "node02")]
    assert "cannot be told from a bad NIC" in a.findings[0]["evidence"][0]


def test_three_nodes_a_bad_nic(tmp_path):
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=3, rails=4, slow_nic=("node02", 1)))
    assert where(a.findings) == [("nic", "node02", 1, None)]


def test_a_bad_nic_of_four_and_one_stalled_link_is_the_nic_not_its_plane(tmp_path):
    # On 4 nodes node02's bad NIC is one of each partner's three links: one more slow direction
    # (node03 -> node01, a stall) made both its ends look slow on their typical partner, 3 of 4 NICs
    # bad, and the plane was blamed. A link to a NIC already found bad no longer counts against its
    # partner, as in the peel.
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, slow_nic=("node02", 0, 0.02), latency=False)
    top = max(synthetic.DEFAULT_SIZES)

    def stall(r):
        if r["metric"] == "bandwidth" and r["rail"] == 0 and r["nodes"] == ["node03", "node01"] \
                and r.get("size") == top:
            r["value"] *= 0.035
        return r
    rewrite(run, stall)
    a = analyze(run)
    assert [(f["scope"], f["node"], f["rail"]) for f in a.findings if f["severity"] == "fail"] == [("nic", "node02", 0)]


def test_half_the_rails_of_a_node(tmp_path):
    # node04 bad on rails 0-3 of 8: a node (>= node_fraction 0.5 of its rails)
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=8, latency=False)

    def slow(r):
        if r["metric"] == "bandwidth" and r["rail"] < 4 and "node04" in r["nodes"]:
            r["value"] *= 0.6
        return r
    rewrite(run, slow)
    assert where(analyze(run).findings) == [("node", "node04", None, None)]


def test_a_rail_failing_its_bound_everywhere(tmp_path):
    # Every link of rail 1 under the bound: its NICs are all bad -> one rail finding (no rail median test
    # with 2 rails); no node is blamed for it.
    prof = profile_file(tmp_path, '[rdma_write]\nbandwidth_min = { "8MiB" = "300Gbit/s" }\n')
    run = synthetic.make_run(tmp_path / "run", nodes=6, rails=2, profile=str(prof), latency=False)

    def slow(r):
        if r["metric"] == "bandwidth" and r["rail"] == 1 and r["size"] == 8388608:
            r["value"] *= 0.7
        return r
    rewrite(run, slow)
    a = analyze(run)
    assert where(a.findings) == [("rail", None, 1, None)]
    assert a.findings[0]["severity"] == "fail" and a.drains == []
    assert "6 of 6 nodes have a bad NIC" in a.findings[0]["message"]


def test_everything_under_the_bound_is_one_cluster_finding(tmp_path):
    prof = profile_file(tmp_path, '[analysis]\nline_rate = "400Gbit/s"\nline_rate_fraction = 0.95\n')
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=6, rails=2, profile=str(prof)))
    assert where(a.findings) == [("cluster", None, None, None)]
    assert a.findings[0]["kind"] == "bound" and a.findings[0]["expected"] == pytest.approx(380.0)


# ---- evaluate ---------------------------------------------------------------------------

def test_evaluate_judges_what_has_a_bound_and_keeps_the_tests_verdict_otherwise(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2)
    profile = load_profile("local")
    reference = evaluate(load_records(run), profile)

    def lie(r):
        r["threshold"], r["verdict"] = 1e12, "fail"
        return r
    rewrite(run, lie)
    lied = evaluate(load_records(run), profile)
    judged = lied["threshold"].notna() & (lied["threshold"] != 1e12)
    assert judged.any()
    pd.testing.assert_series_equal(lied["verdict"][judged], reference["verdict"][judged])
    bw = lied[(lied["metric"] == "bandwidth") & (lied["size"] == 65536)]
    assert (bw["threshold"] == 0.5).all() and (bw["verdict"] == "pass").all()
    # No bound for the ping-pong reference latency: the verdict the test wrote stands (fail closed).
    pingpong = lied[lied["metric"] == "pingpong_latency_p50"]
    assert len(pingpong) and (pingpong["verdict"] == "fail").all() and (pingpong["threshold"] == 1e12).all()


def test_a_failed_probe_with_no_value_stays_a_failure_naming_its_node(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2)
    with open(run / "results.jsonl", "a") as f:
        f.write(json.dumps(make_record(test="suites/test_preflight.py::test_rdma_devices", suite="preflight",
                                       metric="rdma_devices", value=0, unit="count", nodes=["node02"], ranks=[2, 3],
                                       verdict="fail", detail="unavailable: no /sys/class/infiniband")) + "\n")
        f.write(json.dumps(make_record(test="suites/test_preflight.py::test_port_rate", suite="preflight",
                                       metric="port_rate", value=None, unit="Gbit/s", nodes=["node03"], ranks=[4, 5],
                                       verdict="fail", detail="no RDMA ports")) + "\n")
    found = analyze(run).findings
    assert [(f["scope"], f["node"], f["metric"]) for f in found] == [
        ("node", "node02", "rdma_devices"), ("node", "node03", "port_rate")]
    assert all(f["severity"] == "fail" for f in found)


def test_line_rate_bound_is_the_stricter_one(tmp_path):
    profile = load_profile(profile_file(tmp_path, '[analysis]\nline_rate = "400Gbit/s"\n'
                                                  'line_rate_fraction = 0.95\nline_rate_from_size = "1MiB"\n'
                                                  '[rdma_write]\nbandwidth_min = { "64KiB" = "100Gbit/s", '
                                                  '"16MiB" = "390Gbit/s" }\n'))
    run = synthetic.make_run(tmp_path / "run", nodes=3, rails=1, sizes=(65536, 8388608, 16777216),
                             latency=False, collectives=False, memreg=False, preflight=False)
    ev = evaluate(load_records(run), profile)
    bw = ev[ev["metric"] == "bandwidth"]
    thresholds = bw.groupby(bw["size"].astype(int))["threshold"].unique().map(list).to_dict()
    assert thresholds == {65536: [100.0], 8388608: [380.0], 16777216: [390.0]}
    assert set(bw.loc[bw["size"] == 65536, "verdict"]) == {"pass"}
    assert set(bw.loc[bw["size"] > 65536, "verdict"]) == {"fail"}   # 370 Gbit/s < 380, 390


def test_busbw_bounds_convert_gbit_to_gbyte(tmp_path):
    profile = load_profile(profile_file(tmp_path, '[collectives]\nallreduce_busbw_min = { "1MiB" = "320Gbit/s" }\n'
                                                  'node_allreduce_busbw_min = { "1MiB" = "40GB/s" }\n'
                                                  'world_allreduce_busbw_min_per_nic = { "1MiB" = "160Gbit/s" }\n'))
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, memreg=False)
    ev = evaluate(load_records(run), profile)
    busbw = ev[(ev["metric"] == "busbw") & (ev["op"] == "allreduce") & (ev["size"] == 1048576)]
    by_scope = busbw.groupby(busbw["scope"].astype(str))["threshold"].unique().map(list).to_dict()
    # The world's bound is per NIC, times topology.rails (0 here, one per rank: one NIC's figure).
    assert by_scope == {"world": [20.0], "rail": [40.0], "node": [40.0]}
    # synthetic 1 MiB busbw: world ~120, rail ~36, node ~280 GB/s
    verdicts = busbw.groupby(busbw["scope"].astype(str))["verdict"].unique().map(list).to_dict()
    assert verdicts == {"world": ["pass"], "rail": ["fail"], "node": ["pass"]}
    alltoall = ev[(ev["metric"] == "busbw") & (ev["op"] == "alltoall")]
    assert alltoall.loc[alltoall["size"] == 1048576, "threshold"].to_numpy() == pytest.approx(0.0002)
    assert set(alltoall["verdict"]) == {"pass"}
    findings = find(ev, profile)
    assert where(findings) == [("rail", None, 0, None), ("rail", None, 1, None)]
    assert findings[0]["message"].startswith("allreduce over rail 0 (the rail 0 plane): collective busbw")


def test_latency_bounds_convert_seconds_to_us(tmp_path):
    profile = load_profile(profile_file(tmp_path, '[rdma_write]\nlatency_p50_max = "1.75us"\n'
                                                  'latency_p99_max = "0.002ms"\n'))
    run = synthetic.make_run(tmp_path / "run", nodes=3, rails=1, collectives=False, memreg=False,
                             preflight=False)
    ev = evaluate(load_records(run), profile)
    p50, p99 = ev[ev["metric"] == "latency_p50"], ev[ev["metric"] == "latency_p99"]
    assert p50["threshold"].to_numpy() == pytest.approx(1.75) and set(p50["verdict"]) == {"pass"}
    assert p99["threshold"].to_numpy() == pytest.approx(2.0) and set(p99["verdict"]) == {"fail"}  # ~2.25 us
    assert set(ev.loc[ev["metric"] == "latency_max", "verdict"]) == {"info"}


def test_errors_memlock_ranks(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False)

    def change(r):
        if r["metric"] == "memlock" and r["nodes"] == ["node02"]:
            r["value"] = 65536
            r.pop("detail", None)
        if r["metric"] == "errors" and r["suite"] == "rdma_write" and r["nodes"] == ["node03", "node04"] \
                and r["rail"] == 1 and r["size"] == 65536:
            r["value"] = 12
        return r
    rewrite(run, change)
    a = analyze(run)
    ev = a.records
    memlock = ev[ev["metric"] == "memlock"]
    assert set(memlock.loc[memlock["src"] == "node02", "verdict"]) == {"fail"}
    assert set(memlock.loc[memlock["src"] != "node02", "verdict"]) == {"pass"}   # null = unlimited
    assert set(ev.loc[ev["metric"] == "ranks", "verdict"]) == {"pass"}
    assert ("node", "node02", None, None) in where(a.findings)
    assert ("link", "node03", 1, "node04") in where(a.findings)
    link = next(f for f in a.findings if f["scope"] == "link")
    assert "corrupts data" in link["message"] and link["severity"] == "fail"
    memlock_finding = next(f for f in a.findings if f["scope"] == "node")
    assert "memlock limit (ulimit -l) is 65536 B, the profile needs 8388608 B" in memlock_finding["message"]
    assert any(d.line.startswith("scontrol update NodeName=node02 State=DRAIN") for d in a.drains)


def test_memreg_failure_on_one_node_and_on_all(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False)

    def slow(r):
        if r["metric"] == "reg_time" and r["nodes"] == ["node03"] and r["size"] == 4096:
            r["value"] = 90000.0   # 90 ms > 50 ms
        return r
    rewrite(run, slow)
    a = analyze(run)
    assert where(a.findings) == [("node", "node03", None, None)]
    assert a.findings[0]["metric"] == "reg_time" and a.findings[0]["expected"] == pytest.approx(50000.0)

    def all_slow(r):
        if r["metric"] == "reg_time" and r["size"] == 4096:
            r["value"] = 90000.0
        return r
    rewrite(run, all_slow)
    a = analyze(run)
    assert where(a.findings) == [("cluster", None, None, None)] and a.drains == []


def test_findings_are_ordered(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=4, slow_link=("node01", "node02", 0, 0.88),
                             slow_nic=("node03", 1), slow_rail=2)

    def slow(r):
        if r["metric"] == "version_mismatches":
            r["value"] = 2
        return r
    rewrite(run, slow)
    a = analyze(run)
    assert where(a.findings) == [("rail", None, 2, None), ("nic", "node03", 1, None),
                                 ("cluster", None, None, None), ("link", "node01", 0, "node02")]
    assert [f["severity"] for f in a.findings] == ["fail", "fail", "fail", "warn"]


# ---- burn-in ----------------------------------------------------------------------------

def test_drift_and_instability(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=2, iterations=8, latency=False,
                             drift=("node03", "node06", 1, 0.7), noisy=("node02", "node07", 0, 0.4))
    a = analyze(run)
    drift = [f for f in a.findings if f["kind"] == "drift"]
    unstable = [f for f in a.findings if f["kind"] == "instability"]
    assert where(drift) == [("link", "node03", 1, "node06")]
    assert where(unstable) == [("link", "node02", 0, "node07")]
    assert drift[0]["severity"] == unstable[0]["severity"] == "warn"
    assert drift[0]["value"] == pytest.approx(0.72 * drift[0]["expected"], rel=0.05)
    assert "drifted" in drift[0]["message"] and "CV" in unstable[0]["message"]
    assert {f["kind"] for f in a.findings} <= {"drift", "instability", "outlier"}


def test_burn_in_follows_each_bandwidth_at_its_largest_size(tmp_path):
    """The catalog says which trend metrics are followed at their largest size (trend = "largest"):
    read bandwidth as write bandwidth, never a series mixing every message size."""
    run = synthetic.make_run(tmp_path / "run", nodes=6, rails=2, iterations=3, latency=False, read=True)
    series = {s["metric"]: s for s in analyze(run).burnin if s["suite"] == "rdma_write"}
    largest = format_size(max(synthetic.DEFAULT_SIZES))
    assert series["bandwidth"]["title"] == f"write bandwidth at {largest}"
    assert series["read_bandwidth"]["title"] == f"read bandwidth at {largest}"


def test_burn_in_without_faults_has_no_findings(tmp_path):
    assert analyze(synthetic.make_run(tmp_path / "run", nodes=6, rails=2, iterations=5)).findings == []


def test_a_drifting_nic_is_one_finding(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=2, iterations=6, latency=False)

    def degrade(r):
        if r["metric"] == "bandwidth" and r["rail"] == 1 and "node05" in r["nodes"]:
            r["value"] *= 1 - 0.06 * r["iteration"]
        return r
    rewrite(run, degrade)
    drift = [f for f in analyze(run).findings if f["kind"] == "drift"]
    assert where(drift) == [("nic", "node05", 1, None)]


# ---- baseline ---------------------------------------------------------------------------

def test_baseline_regression(tmp_path):
    base = synthetic.make_run(tmp_path / "base", nodes=8, rails=2)
    now = synthetic.make_run(tmp_path / "now", nodes=8, rails=2, slow_link=("node03", "node06", 1, 0.9))
    a = analyze(now, baseline_dir=base)
    regressions = [f for f in a.findings if f["kind"] == "regression"]
    assert where(regressions) == [("link", "node03", 1, "node06")]
    assert regressions[0]["severity"] in ("warn", "fail")
    d = a.deltas
    assert set(d.columns) >= {"suite", "metric", "size", "rail", "src", "dst", "op", "scope", "value", "baseline",
                              "change", "regression"}
    bad = d[d["regression"]]
    assert set(zip(bad["src"], bad["dst"])) == {("node03", "node06"), ("node06", "node03")}
    bw = bad[bad["metric"] == "bandwidth"]
    assert bw["change"].to_numpy() == pytest.approx(-0.1, abs=1e-6)
    lat = bad[bad["metric"] == "latency_p50"]
    assert (lat["change"] < 0).all()   # slower latency is negative too
    assert a.baseline_id == "synthetic-0"


def test_baseline_identical_has_no_regression(tmp_path):
    base = synthetic.make_run(tmp_path / "base", nodes=8, rails=2)
    a = analyze(base, baseline_dir=base)
    assert a.findings == [] and not a.deltas["regression"].any() and (a.deltas["change"] == 0).all()
    assert len(compare(a.records, a.records, a.profile)) == len(a.deltas)


def test_find_with_baseline_frame(tmp_path):
    base = load_records(synthetic.make_run(tmp_path / "base", nodes=6, rails=2))
    now = load_records(synthetic.make_run(tmp_path / "now", nodes=6, rails=2, slow_nic=("node02", 0, 0.85)))
    findings = find(now, load_profile("local"), baseline=base)
    assert ("nic", "node02", 0, None) in where([f for f in findings if f["kind"] == "regression"])


# ---- drain lines ------------------------------------------------------------------------

def finding(scope, node, severity="fail", **kw):
    f = {"severity": severity, "scope": scope, "node": node, "rail": kw.get("rail"), "peer": None, "suite": "rdma_write",
         "metric": "bandwidth", "value": 200.0, "expected": 370.0, "evidence": [], "message": "m",
         "kind": "outlier", "unit": "Gbit/s", "size": 8388608}
    f.update(kw)
    return f


def test_drain_lines_only_for_failing_nodes_and_nics():
    lines = drain_lines([finding("rail", None, rail=3), finding("node", "node07"), finding("nic", "node05", rail=4),
                         finding("link", "node01", rail=1), finding("nic", "node09", severity="warn", rail=2),
                         finding("cluster", None), finding("nic", "node07", rail=1)])
    assert [d.line for d in lines] == [
        'scontrol update NodeName=node07 State=DRAIN Reason="acceptance: rdma_write: bandwidth 200.0 vs 370.0 Gbit/s"',
        'scontrol update NodeName=node05 State=DRAIN Reason="acceptance: rdma_write: NIC rail 4 bandwidth 200.0 vs 370.0 Gbit/s"']
    assert lines[0].argv == ["scontrol", "update", "NodeName=node07", "State=DRAIN",
                             "Reason=acceptance: rdma_write: bandwidth 200.0 vs 370.0 Gbit/s"]


def test_drain_line_quotes_odd_names_safely():
    odd = "node5;(rm)&|<x>*?~#!{y}"  # a Slurm node name (validate.is_node_name) the shell would misread
    (drain,) = drain_lines([finding("node", odd, metric='bad"metric\\$`x`\n')])
    line = drain.line
    argv = shlex.split(line)
    assert argv == drain.argv
    assert argv[:2] == ["scontrol", "update"] and argv[2] == f"NodeName={odd}" and argv[3] == "State=DRAIN"
    assert argv[4].startswith("Reason=acceptance: ") and len(argv) == 5
    reason = line.split("Reason=", 1)[1]
    assert reason.startswith('"') and reason.endswith('"') and '"' not in reason[1:-1]
    assert not any(c in reason for c in "\\$`\n")


def test_drain_lines_name_only_exact_slurm_names_of_the_run():
    """Never a hostlist (scontrol would drain every node it expands to), never a node the run's
    topology does not have; None (no topology) leaves only the name rule."""
    odd = ["gpu[001-512]", "a,b", "a b", "a=b", 'node"5 $(rm -rf /);`x`', "n\n1", "x" * 256]
    findings = [finding("node", n) for n in odd] + [finding("node", "node07"), finding("nic", "node05", rail=4)]
    assert [d.node for d in drain_lines(findings)] == ["node07", "node05"]
    assert [d.node for d in drain_lines(findings, {"node05", "node06"})] == ["node05"]
    assert drain_lines(findings, set()) == []


# ---- run folders ------------------------------------------------------------------------

def test_analyze_minimal_run_folder(tmp_path):
    src = synthetic.make_run(tmp_path / "full", nodes=6, rails=2, slow_nic=("node04", 1))
    run = tmp_path / "minimal"
    run.mkdir()
    (run / "results.jsonl").write_text((src / "results.jsonl").read_text())
    # A built-in name: the h100 profile (real-cluster outlier settings; its bounds are not the point here).
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "profile": "h100-ndr400"}))
    a = analyze(run)
    assert isinstance(a, Analysis) and a.run["run_id"] == "r1" and a.profile.name == "h100-ndr400"
    assert ("nic", "node04", 1, None) in where(a.findings)
    # A path.
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "profile": synthetic.SYNTHETIC_PROFILE}))
    assert where(analyze(run).findings) == [("nic", "node04", 1, None)]
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "profile": {"name": "synthetic",
                                                                          "source": synthetic.SYNTHETIC_PROFILE}}))
    assert where(analyze(run).findings) == [("nic", "node04", 1, None)]


def test_analyze_profile_argument_wins(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False)
    prof = profile_file(tmp_path, '[rdma_write]\nbandwidth_min = { "8MiB" = "1000Gbit/s" }\n')
    assert analyze(run).findings == []
    assert analyze(run, profile=str(prof)).findings[0]["scope"] == "cluster"
    assert analyze(run, profile=load_profile(prof)).verdict == "fail"


def test_missing_results_names_the_path(tmp_path):
    with pytest.raises(InputError, match=str(tmp_path / "results.jsonl")):
        load_records(tmp_path)
    (tmp_path / "results.jsonl").write_text("")
    with pytest.raises(InputError, match="run.json"):
        analyze(tmp_path)
    assert analyze(tmp_path, profile="local").findings == []


def test_write_outputs(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=2, slow_nic=("node03", 1))
    a = analyze(run)
    write_outputs(run, a)
    findings = json.loads((run / "findings.json").read_text())
    assert findings == a.findings and findings[0]["scope"] == "nic"
    # slow both ways: no direction (docs/records.md, "A finding")
    assert findings[0]["direction"] is None
    assert (run / "findings.json").read_text().startswith("[\n  {")
    assert (run / "drain.txt").read_text().splitlines() == [d.line for d in a.drains]
    clean = synthetic.make_run(tmp_path / "clean", nodes=4, rails=2)
    write_outputs(clean, analyze(clean))
    assert json.loads((clean / "findings.json").read_text()) == []
    assert (clean / "drain.txt").read_text() == ""


# ---- loading ----------------------------------------------------------------------------

def test_load_records_columns(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=3, rails=2)
    df = load_records(run)
    assert {"src", "dst", "op", "scope", "iteration", "nodes", "threshold", "verdict"} <= set(df.columns)
    bw = df[df["metric"] == "bandwidth"].iloc[0]
    assert bw["src"] == bw["nodes"][0] and bw["dst"] == bw["nodes"][1] and bw["unit"] == "Gbit/s"
    assert pd.isna(bw["op"]) and pd.isna(bw["scope"])  # fields of the record, never the test id
    coll = df[(df["suite"] == "collective") & (df["scope"] == "world")].iloc[0]
    assert coll["op"] == "allreduce" and coll["nodes"] == ("node01", "node02", "node03")
    memreg = df[df["suite"] == "memreg"].iloc[0]
    assert pd.isna(memreg["dst"]) and memreg["rail"] == 0
    assert str(df["suite"].dtype) == "category" and str(df["size"].dtype) == "Int64"


@pytest.mark.odd_records
def test_load_records_odd_lines(tmp_path):
    base = {"test": "t::x[rail0]", "suite": "rdma_write", "metric": "bandwidth", "value": 1.5, "unit": "Gbit/s",
            "size": 8, "rail": 0, "nodes": ["a", "b"], "ranks": [0, 1], "engine": "mpi", "memory": "host",
            "iteration": 0, "time": "2026-01-01T00:00:00.000Z", "samples": 1, "threshold": None, "verdict": "info"}
    odd_names = dict(base, nodes=['we"ird]', "ü\\n"], test='t::x["q", \\]')
    reordered = {k: base[k] for k in reversed(list(base))}
    compact = json.dumps(base, separators=(",", ":"))
    no_iteration = {k: v for k, v in base.items() if k != "iteration"}
    nan_value = json.dumps(dict(base, value=float("nan")))
    lines = [json.dumps(base), json.dumps(odd_names), json.dumps(reordered), compact, "", json.dumps(no_iteration),
             nan_value, json.dumps(dict(base, detail="d, with \"quotes\""))]
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(lines) + '\n{"test": "cut sho')
    df = load_records(path)
    assert len(df) == 7 and df.attrs["skipped_lines"] == 1
    assert list(df["src"]) == ["a", 'we"ird]', "a", "a", "a", "a", "a"]
    assert df["dst"].iloc[1] == "ü\\n" and df["test"].iloc[1] == 't::x["q", \\]'
    assert df["value"].iloc[[0, 1, 2, 3, 4, 6]].tolist() == [1.5] * 6 and np.isnan(df["value"].iloc[5])
    assert list(df["iteration"]) == [0] * 7
    assert df["detail"].iloc[6] == 'd, with "quotes"'
    path.write_text("\n".join(lines[:2]) + "\nnot json\n" + json.dumps(base) + "\n")
    with pytest.raises(ValueError, match="line 3"):
        load_records(path)


def test_fast_generator_shape(tmp_path):
    run = synthetic.make_run_fast(tmp_path / "fast", nodes=20, rails=2, slow_nic=("node07", 1))
    df = load_records(run)
    assert len(df) == 20 * 19 // 2 * 2
    keys = json.loads((run / "results.jsonl").read_text().splitlines()[0]).keys()
    assert list(keys) == ["test", "suite", "metric", "value", "unit", "size", "rail", "nodes", "ranks", "engine",
                          "memory", "iteration", "time", "samples", "threshold", "verdict"]
    assert where(analyze(run).findings) == [("nic", "node07", 1, None)]


def test_a_crash_in_analysis_or_report_exits_3_with_the_traceback(tmp_path, monkeypatch, capsys):
    """A harness bug after the suites: never "a check failed" (1), and never a pass."""
    from acceptance.cli import run as cli_run
    from acceptance.cli import postrun
    from acceptance.records.results import RunFolder

    def broken(*_a, **_k):
        raise ZeroDivisionError("a bug in the report")

    monkeypatch.setattr(postrun, "analyze_and_report", broken)
    assert cli_run.post_run(RunFolder(tmp_path), drain=False) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: a bug in the report" in err
    assert "analysis or report failed (a harness error" in err


# ---- fields, not test ids ---------------------------------------------------------------

def _rename_tests(run: Path, old: str, new: str) -> None:
    results = run / "results.jsonl"
    results.write_text(results.read_text().replace(old, new))


def test_renaming_a_collective_test_keeps_its_bound_and_findings(tmp_path):
    profile = load_profile(profile_file(tmp_path, '[collectives]\nallreduce_busbw_min = { "1MiB" = "320Gbit/s" }\n'))
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, memreg=False)
    before = evaluate(load_records(run), profile)
    _rename_tests(run, "::test_allreduce[", "::test_sum_everywhere[")
    after = evaluate(load_records(run), profile)
    assert after["test"].astype(str).str.contains("test_sum_everywhere").any()
    cols = ["op", "scope", "threshold", "verdict", "bound"]
    pd.testing.assert_frame_equal(before[cols].astype(object), after[cols].astype(object))
    assert (before["verdict"] == "fail").any()
    strip = lambda fs: [{k: v for k, v in f.items() if k != "evidence"} for f in fs]  # noqa: E731
    assert strip(find(after, profile)) == strip(find(before, profile))


def test_schema_1_folders_derive_op_and_scope_from_test_ids(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=3, rails=2, latency=False, memreg=False)
    lines = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    for r in lines:  # as schema 1 wrote them: no op / scope fields, no schema in run.json
        r.pop("op", None), r.pop("scope", None)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    meta = json.loads((run / "run.json").read_text())
    meta.pop("schema")
    (run / "run.json").write_text(json.dumps(meta))
    df = load_records(run)
    assert df.attrs["schema"] == 1
    coll = df[df["suite"] == "collective"]
    assert set(coll["op"].astype(str)) == {"allreduce", "alltoall"}
    assert set(coll["scope"].astype(str)) == {"world", "rail", "node"}
    assert df.loc[df["suite"] != "collective", "op"].isna().all()


def test_a_newer_schema_is_refused(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=2, rails=1, latency=False, memreg=False, collectives=False)
    meta = json.loads((run / "run.json").read_text())
    meta["schema"] = 99
    (run / "run.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match=r"run.json: schema 99 is newer than this harness reads"):
        load_records(run)


# ---- every pairwise suite, by the same detectors ------------------------------------------

def test_a_slow_gpu_nic_is_localized_like_a_host_nic(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=2, gpudirect=True, slow_gpu_nic=("node05", 1, 0.5),
                             latency=False, memreg=False, collectives=False, preflight=False)
    a = analyze(run)
    (f,) = [f for f in a.findings if f["severity"] == "fail"]
    assert (f["scope"], f["node"], f["rail"], f["suite"], f["metric"]) == ("nic", "node05", 1, "gpudirect", "bandwidth")
    assert f["message"].startswith("GPUDirect: node05's NIC on rail 1")
    assert [d.node for d in a.drains] == ["node05"]


def test_read_bandwidth_is_compared_with_the_fleet_and_localized(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=2, read=True, slow_link=("node02", "node06", 0, 0.5),
                             latency=False, memreg=False, collectives=False, preflight=False)
    a = analyze(run)
    links = [f for f in a.findings if f["scope"] == "link"]
    assert {(f["node"], f["peer"], f["rail"]) for f in links} <= {("node02", "node06", 0), ("node06", "node02", 0)}
    assert links and all(f["suite"] == "rdma_write" for f in links)
    evidence = "\n".join(line for f in links for line in f["evidence"])
    assert ", read_bandwidth " in evidence and ", bandwidth " in evidence
