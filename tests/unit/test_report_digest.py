"""What an operator reads first at any fleet size (acceptance.report.digest) and the terminal summary
after a run (acceptance.cli.postrun.summary): counts by scope and rail, confirmed fails worst first,
warnings and transients apart, rail mode, schedule and power; bounded at 1,000+ findings."""
from __future__ import annotations

import pandas as pd

from acceptance.host.slurmnode import Drain
from acceptance.analysis import Analysis
from acceptance.cli.postrun import SHOWN_DRAINS, SHOWN_FINDINGS, counts_table, summary
from acceptance.report import digest
from acceptance.rules.profile import load_profile


def finding(severity, scope, rail, node="node0001", value=None, expected=None, transient=False, **kw):
    f = {"severity": severity, "scope": scope, "node": node, "rail": rail, "peer": None, "metric": "bandwidth",
         "value": value, "expected": expected, "evidence": [], "message": f"{scope} {node} rail {rail}"}
    if transient:
        f["transient"] = True
    return f | kw


FINDINGS = [
    finding("fail", "link", 0, value=90.0, expected=100.0),
    finding("warn", "link", 0),
    finding("fail", "nic", 3, node="node0005", value=60.0, expected=100.0),
    finding("fail", "link", 3, value=40.0, expected=100.0),
    finding("warn", "nic", 3, transient=True),
    finding("fail", "link", 3, transient=True),  # transient is never a fail, whatever its severity says
    finding("fail", "switch", 1, node=None, value=95.0, expected=100.0),
    finding("warn", "node", None, node="node0009"),
]


def test_counts_by_scope_and_rail_with_transients_apart():
    c = digest.counts(FINDINGS, rails=[0, 1, 2, 3])
    assert c["rails"] == [0, 1, 2, 3, None]  # rail 2 has none and still shows; no-rail findings last
    assert c["scopes"] == ["switch", "node", "nic", "link"]  # widest first
    assert c["cells"][("link", 0)] == {"fail": 1, "warn": 1}
    assert c["cells"][("link", 3)] == {"fail": 1, "warn": 0}
    assert c["cells"][("nic", 3)] == {"fail": 1, "warn": 0}
    assert c["cells"][("node", None)] == {"fail": 0, "warn": 1}
    assert c["cells"][("link", 2)] == {"fail": 0, "warn": 0}
    assert c["rail_totals"][3] == {"fail": 2, "warn": 0}
    assert c["total"] == {"fail": 4, "warn": 2}
    assert c["transient"] == {0: 0, 1: 0, 2: 0, 3: 2, None: 0} and c["transient_total"] == 2


def test_split_folds_transients_and_warnings_and_orders_fails_worst_first():
    parts = digest.split(FINDINGS)
    assert all(f["severity"] == "fail" and not f.get("transient") for f in parts["confirmed"])
    # widest scope first, then the furthest from expected
    assert [(f["scope"], f["value"]) for f in parts["confirmed"]] == [
        ("switch", 95.0), ("nic", 60.0), ("link", 40.0), ("link", 90.0)]
    assert [f["scope"] for f in parts["warnings"]] == ["node", "link"]
    assert len(parts["transient"]) == 2 and all(f["transient"] for f in parts["transient"])
    # a finding with nothing to compare (a failed test, errors against 0) is not taken for a mild one
    ordered = digest.worst_first([finding("fail", "link", 0, value=99.0, expected=100.0),
                                  finding("fail", "link", 0, value=3.0, expected=0.0)])
    assert ordered[0]["value"] == 3.0


POWER = [{"rule": "nic", "metric": "bandwidth", "size": 8388608, "rail": r, "population": 1024, "comparisons": 8192,
          "noise": 0.01, "detectable": 0.12 + 0.01 * r} for r in range(8)] + [
    {"rule": "link", "metric": "latency_p50", "size": 8, "rail": None, "population": 64, "comparisons": 64,
     "noise": 0.05, "detectable": None}]


def test_power_sentence_and_run_shape():
    # the guarantee on every rail is the weakest rail's
    assert digest.power_sentence(POWER) == ("What a PASS rules out: a NIC 19% slow (bandwidth at 8MiB), on every rail; "
                                            "nothing by the link rule (blind, too few comparisons: latency_p50 at 8B).")
    assert digest.power_sentence([]) == ""
    # as Analysis.power gives it: rails pooled (rail None), metrics with one guarantee together, a
    # guarantee of no practical use said as such, widest rule first, extra keys ignored
    run_wide = [{"rule": rule, "metric": m, "size": s, "rail": None, "detectable": d, "suite": "rdma_write"}
                for rule, m, s, d in (("pair-direction", "bandwidth", 65536, 0.93), ("link", "bandwidth", 65536, 0.138),
                                      ("link", "bandwidth", 8388608, 0.1382), ("link", "latency_p50", 8, 1.7082),
                                      ("nic", "bandwidth", 65536, 0.1), ("nic", "latency_p50", 8, 0.1),
                                      ("pair-direction", "latency_p50", 8, 1.4e50))]
    assert digest.power_sentence(run_wide) == (
        "What a PASS rules out: a NIC 10% slow (bandwidth at 64KiB; latency_p50 at 8B); a link 14% slow (bandwidth "
        "at 64KiB and 8MiB) or 171% (latency_p50 at 8B); a pair-direction 93% slow (bandwidth at 64KiB) or over "
        "1000% (latency_p50 at 8B).")
    shape = digest.run_shape({"rail_mode": "serial", "schedule": {"pattern": "screen:4", "rounds": 4, "seed": 7,
                                                                  "tree_aware": True}})
    assert shape[0].startswith("rails measured one at a time (serial")
    assert shape[1] == "pair schedule screen:4 (4 rounds, pairs chosen from the switch tree, seed 7)"
    assert digest.run_shape({}) == []


class Powered(Analysis):
    power = POWER  # what Analysis.power computes from a real run's records


def _analysis(findings, drains, run=None, cls=Analysis):
    run = {"run_id": "big", "profile": {}, "complete": True, "topology": {"rails": list(range(8))}} | (run or {})
    return cls(run=run, profile=load_profile("local"), records=pd.DataFrame(), findings=findings, drains=drains)


def test_terminal_summary_is_bounded_at_a_thousand_findings(tmp_path):
    findings = ([finding("fail", "link", i % 8, node=f"node{i:04d}", value=50.0 + i % 40, expected=100.0)
                 for i in range(1200)]
                + [finding("fail", "nic", i % 8, node=f"node{i:04d}", value=60.0, expected=100.0) for i in range(300)]
                + [finding("warn", "link", i % 8) for i in range(400)]
                + [finding("warn", "nic", i % 8, transient=True) for i in range(150)])
    drains = [Drain(f"node{i:04d}", "acceptance: x: y") for i in range(300)]
    run = {"rail_mode": "concurrent", "schedule": {"pattern": "screen:8", "rounds": 8, "seed": 3, "tree_aware": False}}
    text = summary(_analysis(findings, drains, run, Powered), tmp_path / "report.html", tmp_path)
    lines = text.splitlines()
    assert len(lines) < 45 and max(map(len, lines)) < 400, text
    assert "1500 confirmed failing, 400 warnings, 150 transient" in lines[0]
    assert "rails measured concurrently" in text and "pair schedule screen:8 (8 rounds, random pairs, seed 3)" in text
    # Only a screening draws its pairs: all-pairs has neither a seed nor random pairs.
    from acceptance.report.digest import run_shape
    assert run_shape({"schedule": {"pattern": "all-pairs", "rounds": 7, "seed": 5, "tree_aware": False}}) == [
        "pair schedule all-pairs (7 rounds)"]
    assert run_shape({"schedule": {"pattern": "screen:4", "rounds": 4, "seed": 5, "tree_aware": True,
                                   "requested": "auto"}}) == [
        "pair schedule screen:4 (4 rounds, pairs chosen from the switch tree, seed 5, auto chose it)"]
    assert "What a PASS rules out: a NIC 19% slow" in text
    table = lines[lines.index("findings by scope and rail (confirmed failing/warning):") + 1:][:4]
    assert table[0].split() == ["scope"] + [w for r in range(8) for w in ("rail", str(r))] + ["all"]
    assert table[1].split()[0] == "nic" and table[1].split()[-1] == "300/0"
    assert table[2].split()[0] == "link" and table[2].split()[-1] == "1200/400"
    assert table[3].split()[0] == "transient" and table[3].split()[-1] == "150"
    shown = [line for line in lines if line.startswith("  FAIL ")]
    assert len(shown) == SHOWN_FINDINGS and all(" nic " in line for line in shown)  # NICs before links
    assert f"... {1500 - SHOWN_FINDINGS} more confirmed failing, 400 warnings, 150 transient" in text
    assert str(tmp_path / "findings.json") in text
    assert sum("scontrol update" in line for line in lines) == SHOWN_DRAINS
    assert f"drain suggestions: 300 nodes" in text and f"all 300 in {tmp_path / 'drain.txt'}" in text


def test_terminal_summary_of_a_clean_run_is_short(tmp_path):
    text = summary(_analysis([], []), None, tmp_path)
    assert "confirmed failing" in text.splitlines()[0] and "findings by scope" not in text and "scontrol" not in text
    assert "--no-report" in text


def test_counts_table_falls_back_to_totals_with_many_rails():
    many = [finding("fail", "nic", r) for r in range(20)]
    rows = counts_table(many)
    assert rows[0].split() == ["scope", "all"] and rows[1].split() == ["nic", "20/0"]
    assert counts_table([]) == []


def test_a_run_writes_its_power_to_run_json(tmp_path):
    """postrun writes Analysis.power to run.json "power", as JSON numbers, beside the verdict."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from synthetic import make_run

    from acceptance.cli.postrun import analyze_and_report

    run = make_run(tmp_path / "run", nodes=6, rails=2, slow_nic=("node03", 1, 0.5), collectives=False, memreg=False,
                   preflight=False, latency=False)
    analysis, report = analyze_and_report(run, report=False)
    written = json.loads((run / "run.json").read_text())
    assert report is None and written["verdict"] == analysis.verdict
    assert written["power"] == json.loads(json.dumps(analysis.power))
    assert written["power"] and all({"rule", "metric", "detectable"} <= set(e) for e in written["power"])


def test_prometheus_counts_transients_apart():
    """A transient is neither a fail nor a warning in acceptance_findings / acceptance_finding; it is counted
    per rail in acceptance_transient_findings (every rail of the run, zeros included)."""
    from acceptance.export import prometheus

    text = prometheus.render(_analysis(FINDINGS, []))
    lines = [line for line in text.splitlines() if not line.startswith("#")]

    def value(prefix: str) -> float:
        [line] = [line for line in lines if line.startswith(prefix)]
        return float(line.rsplit(" ", 1)[1])

    base = 'run_id="big",profile="local"'
    assert value(f'acceptance_findings{{{base},severity="fail",scope="link"}}') == 2  # not the transient one
    assert value(f'acceptance_findings{{{base},severity="warn",scope="nic"}}') == 0
    assert sum(line.startswith("acceptance_finding{") for line in lines) == 6
    assert value(f'acceptance_transient_findings{{{base},rail="3"}}') == 2
    assert value(f'acceptance_transient_findings{{{base},rail="7"}}') == 0
