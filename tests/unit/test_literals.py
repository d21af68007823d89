"""The catalog (acceptance.rules.catalog) is the only place that knows what a metric is: analysis,
report, export and history choose records through it, never by a suite or metric name written out.
The first test reads the source as test_layout does; the second declares a throwaway pairwise
metric and shows it reaches analysis, the report and Prometheus with no other edit (docs/records.md,
"Adding a metric")."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("analysis", "report", "export", "history")

# Strings that equal a catalog name but are not one, each with why. (file, string): anywhere in that file;
# (file, function, None): any name inside that function.
ALLOWED = {
    # A record's and run.json's field of MPI ranks (load's record columns, the environment table), not
    # preflight's metric "ranks".
    ("acceptance/analysis/load.py", "ranks"),
    ("acceptance/analysis/lost.py", "ranks"),
    ("acceptance/report/sections/environment.py", "ranks"),
    # The power table's key for the error that kept it from being computed, not counters' metric "error".
    ("acceptance/report/sections/verdict.py", "error"),
    # The section builders' names in the package's __all__ (the report's sections), not the suites.
    ("acceptance/report/sections/__init__.py", "counters"),
    ("acceptance/report/sections/__init__.py", "incast"),
    # Reading old schemas: records written then carry the names they had then, whatever the catalog
    # says now (docs/records.md "Schema versions").
    ("acceptance/analysis/load.py", "_schema1", None),
    ("acceptance/analysis/load.py", "_schema2", None),
}


def _names() -> set[str]:
    from acceptance.rules import catalog
    out = set(catalog.SUITES)
    for s in catalog.SUITES.values():
        for m in s.metrics:
            out.update(m.names)
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _literals(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, string) of every string constant in the file that is a catalog name, docstrings and names
    inside an ALLOWED function left out (comments are not in the tree)."""
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (rel, node.name, None) in ALLOWED:
            skip |= {id(n) for n in ast.walk(node)}
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                  and id(node) not in skip and (rel, node.value) not in ALLOWED)


def test_no_suite_or_metric_name_is_written_out_in_analysis_report_export_or_history():
    names = _names()
    found = [f"{path.relative_to(ROOT)}:{line}: {value!r}"
             for package in PACKAGES for path in sorted((ROOT / "acceptance" / package).rglob("*.py"))
             for line, value in _literals(path, names)]
    assert found == [], ("suite or metric names written out (declare what the code needs on the catalog's "
                         "Metric or Suite, acceptance/rules/catalog.py, and look it up there):\n" + "\n".join(found))


def test_the_allowlist_is_still_needed():
    """Every ALLOWED entry still matches something: a stale one would hide the next real literal."""
    names = _names()
    for entry in ALLOWED:
        path = ROOT / entry[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if len(entry) == 3:
            assert any(isinstance(n, ast.FunctionDef) and n.name == entry[1] for n in ast.walk(tree)), entry
        else:
            assert entry[1] in names and any(isinstance(n, ast.Constant) and n.value == entry[1]
                                             for n in ast.walk(tree)), entry


# Run in a fresh interpreter: the metric is declared before anything reads the catalog, as an entry in
# catalog.py would be (the modules that derive tables from it at import see it too).
THROWAWAY = textwrap.dedent("""
    import dataclasses, json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from acceptance.rules import catalog

    # RDMA SEND bandwidth: the whole of what adding a pairwise metric takes, its catalog entry.
    SEND = catalog.Metric(("send_bandwidth",), "Gbit/s", True, "sizemap", "rdma_write.send_bandwidth_min",
                          label="send bandwidth", outlier=True, trend="largest", line_rate=True, heatmap=True,
                          curve=True, export="send_bandwidth",
                          setting=lambda f: f.SizeMap(f.Rate("0Gbit/s"), help="SEND bandwidth bound by size"))
    suite = catalog.SUITES["rdma_write"]
    catalog.SUITES["rdma_write"] = dataclasses.replace(suite, metrics=suite.metrics + (SEND,))

    import synthetic
    from acceptance.analysis import analyze
    from acceptance.export import prometheus
    from acceptance.report import render

    run = Path(sys.argv[1])
    synthetic.make_run(run, nodes=6, rails=2, collectives=False, memreg=False, preflight=False, latency=False)
    # The engine's records of it: the write bandwidth's pairs, one link slow in SEND only.
    lines = (run / "results.jsonl").read_text().splitlines()
    sends = []
    for line in lines:
        r = json.loads(line)
        if r["suite"] == "rdma_write" and r["metric"] == "bandwidth":
            r["metric"] = "send_bandwidth"
            r["test"] = r["test"].replace("bandwidth", "send_bandwidth")
            if r["nodes"] == ["node02", "node04"] and r["rail"] == 1:
                r["value"] *= 0.5
            sends.append(json.dumps(r))
    (run / "results.jsonl").write_text("\\n".join(lines + sends) + "\\n")
    # The profile bounds it as it bounds write bandwidth (its key: the entry's `setting`).
    meta = json.loads((run / "run.json").read_text())
    values = meta["profile"]["values"]["rdma_write"]
    values["send_bandwidth_min"] = values["bandwidth_min"]
    (run / "run.json").write_text(json.dumps(meta))

    a = analyze(run)
    html = render(a, run).read_text(encoding="utf-8")
    text = prometheus.render(a)
    print(json.dumps({
        "findings": [{k: f.get(k) for k in ("severity", "scope", "node", "rail", "peer", "metric", "message")}
                     for f in a.findings],
        "html": html,
        "families": sorted({l.split()[2] for l in text.splitlines() if l.startswith("# TYPE ")}),
        "samples": [l for l in text.splitlines() if l.startswith("acceptance_nic_send_bandwidth")],
    }))
""")


def test_a_pairwise_metric_declared_in_the_catalog_alone_reaches_analysis_report_and_prometheus(tmp_path):
    out = subprocess.run([sys.executable, "-c", THROWAWAY, str(tmp_path / "run"), str(ROOT)],
                         capture_output=True, text=True, cwd=ROOT / "tests", timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.splitlines()[-1])
    # analysis: judged against the fleet and localized to the slow link, named by the new metric
    ours = [f for f in got["findings"] if f["metric"] == "send_bandwidth"]
    assert ours, got["findings"]
    assert {(f["scope"], f["rail"]) for f in ours} == {("link", 1)}, ours
    assert {f["node"] for f in ours} | {f["peer"] for f in ours} == {"node02", "node04"}, ours
    assert all(f["severity"] == "fail" for f in ours), ours
    # report: its heatmap per rail and its curve against size, under its label
    assert 'alt="rail 1: send bandwidth at 8MiB, source x destination node"' in got["html"]
    assert 'alt="send bandwidth against message size per rail"' in got["html"]
    # Prometheus: its NIC and rail families in the unit family of its quantity
    fams = set(got["families"])
    assert {"acceptance_nic_send_bandwidth_bytes_per_second", "acceptance_rail_send_bandwidth_bytes_per_second"} <= fams
    assert got["samples"]
