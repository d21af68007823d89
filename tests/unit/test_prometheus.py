"""`acceptance report --prometheus`: the node_exporter textfile of a run (acceptance/export/prometheus.py)."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import synthetic

from acceptance.export import prometheus
from acceptance.analysis import analyze

LARGEST = synthetic.DEFAULT_SIZES[-1]
HEALTHY_BPS = synthetic.healthy_bandwidth(LARGEST) * 1e9 / 8          # Gbit/s -> bytes/s
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*)\} (\S+)$')
LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


def _unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m[1], m[1]), v)


def parse(text: str) -> list[tuple[str, dict, float]]:
    """Samples of an exposition text; fails on any line that is neither a comment nor a sample,
    and on a sample whose family has no # HELP and # TYPE gauge before it."""
    samples, typed, helped = [], set(), set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind == "gauge", line
            typed.add(name)
        elif line.startswith("#"):
            continue
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name = m[1]
            assert name in typed and name in helped, f"{name}: no HELP/TYPE before its samples"
            samples.append((name, {k: _unescape(v) for k, v in LABEL.findall(m[2])}, float(m[3])))
    return samples


def series(samples, name, **labels):
    return [(lab, v) for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items())]


def one(samples, name, **labels) -> float:
    found = series(samples, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return found[0][1]


@pytest.fixture(scope="module")
def slow_nic(tmp_path_factory):
    run = synthetic.make_run(tmp_path_factory.mktemp("prom") / "run", nodes=8, rails=4, slow_nic=("node05", 2))
    analysis = analyze(run)
    return analysis, parse(prometheus.render(analysis))


def test_slow_nic_stands_out_in_its_nic_series(slow_nic):
    _, s = slow_nic
    bw = series(s, "acceptance_nic_write_bandwidth_bytes_per_second")
    assert len(bw) == 8 * 4 and {lab["size_bytes"] for lab, _ in bw} == {str(LARGEST)}
    slow = one(s, "acceptance_nic_write_bandwidth_bytes_per_second", node="node05", rail="2")
    assert slow == pytest.approx(0.6 * HEALTHY_BPS, rel=0.02)
    for lab, v in bw:
        if (lab["node"], lab["rail"]) != ("node05", "2"):
            assert v == pytest.approx(HEALTHY_BPS, rel=0.02), lab
    lat = one(s, "acceptance_nic_write_latency_p99_seconds", node="node05", rail="2", size_bytes="8")
    assert lat == pytest.approx(synthetic.LATENCY["latency_p99"] / 0.6 * 1e-6, rel=0.04)
    assert one(s, "acceptance_nic_write_latency_p99_seconds", node="node01", rail="2") == pytest.approx(
        synthetic.LATENCY["latency_p99"] * 1e-6, rel=0.04)
    # rail planes: the median over the plane's links
    assert len(series(s, "acceptance_rail_write_bandwidth_bytes_per_second")) == 4
    assert one(s, "acceptance_rail_write_bandwidth_bytes_per_second", rail="0") == pytest.approx(HEALTHY_BPS, rel=0.01)


def test_findings_counts_and_drain(slow_nic):
    analysis, s = slow_nic
    assert one(s, "acceptance_run_info") == 1
    assert series(s, "acceptance_run_info")[0][0] == {"run_id": "synthetic-0", "profile": "synthetic",
                                                      "verdict": "fail"}
    counts = {(lab["severity"], lab["scope"]): v for lab, v in series(s, "acceptance_findings")}
    assert counts == {(sev, scope): float(sev == "fail" and scope == "nic")
                      for sev in ("fail", "warn") for scope in ("link", "nic", "node", "rail", "switch", "uplink", "cluster")}
    [(lab, v)] = series(s, "acceptance_finding")
    assert v == 1
    assert lab == {"run_id": "synthetic-0", "profile": "synthetic", "severity": "fail", "scope": "nic",
                   "kind": analysis.findings[0]["kind"], "node": "node05", "rail": "2", "metric": "bandwidth",
                   "size_bytes": str(LARGEST)}
    assert series(s, "acceptance_node_drain_suggested") == [({"run_id": "synthetic-0", "profile": "synthetic",
                                                              "node": "node05"}, 1.0)]


def test_run_facts_from_run_json(slow_nic):
    analysis, s = slow_nic
    assert one(s, "acceptance_run_complete") == 1
    assert one(s, "acceptance_run_exit_code") == 0
    assert one(s, "acceptance_run_start_timestamp_seconds") == synthetic.BASE_TIME.timestamp()
    assert one(s, "acceptance_run_end_timestamp_seconds") == synthetic.BASE_TIME.timestamp() + 3600
    assert one(s, "acceptance_run_records") == len(analysis.records)
    assert one(s, "acceptance_run_iterations") == 1


def test_collective_busbw_at_the_largest_size(slow_nic):
    _, s = slow_nic
    size = synthetic.COLLECTIVE_SIZES[-1]
    busbw = series(s, "acceptance_collective_busbw_bytes_per_second")
    # 2 ops x (world + 4 rails + node)
    assert len(busbw) == 2 * 6 and {lab["size_bytes"] for lab, _ in busbw} == {str(size)}
    for op in ("allreduce", "alltoall"):
        for scope, rail, kind in (("world", None, "world"), ("rail", "3", "rail"), ("node", None, "node")):
            labels = {"op": op, "scope": scope} | ({"rail": rail} if rail else {})
            want = synthetic.BUSBW[kind] * size / (size + 262144) * 1e9
            assert one(s, "acceptance_collective_busbw_bytes_per_second", **labels) == pytest.approx(want, rel=0.011)
    assert all("rail" not in lab for lab, _ in series(s, "acceptance_collective_busbw_bytes_per_second",
                                                      scope="world"))


def test_every_series_is_labelled_and_none_is_per_link(slow_nic):
    _, s = slow_nic
    assert all(name.startswith("acceptance_") for name, _, _ in s)
    assert all(lab["run_id"] == "synthetic-0" and lab["profile"] == "synthetic" for _, lab, _ in s)
    # only findings name a peer; bounded by nodes x rails, not by node pairs (8 x 7 x 4 = 224 links)
    assert {name for name, lab, _ in s if "peer" in lab} <= {"acceptance_finding"}
    assert len(s) < 2 * 8 * 4 + 60
    keys = [(name, tuple(sorted(lab.items()))) for name, lab, _ in s]
    assert len(keys) == len(set(keys)), "duplicate series: node_exporter would reject the file"


def test_clean_run_has_zero_findings_and_no_drains(tmp_path):
    a = analyze(synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, memreg=False))
    s = parse(prometheus.render(a))
    assert series(s, "acceptance_run_info")[0][0]["verdict"] == "pass"
    assert {v for _, v in series(s, "acceptance_findings")} == {0.0}
    assert not series(s, "acceptance_finding") and not series(s, "acceptance_node_drain_suggested")
    assert not series(s, "acceptance_nic_write_latency_p99_seconds")   # no latency records, no family
    assert len(series(s, "acceptance_nic_write_bandwidth_bytes_per_second")) == 8


def test_burn_in_takes_medians_over_iterations_then_links(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=1, iterations=3, noisy=("node01", "node02", 0, 0.3),
                             collectives=False, memreg=False, preflight=False, latency=False)
    s = parse(prometheus.render(analyze(run)))
    assert one(s, "acceptance_run_iterations") == 3
    per_link: dict = {}
    for line in (run / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["metric"] == "bandwidth" and r["size"] == LARGEST:
            per_link.setdefault(tuple(r["nodes"]), []).append(r["value"])

    def median(xs):
        xs = sorted(xs)
        return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2

    links = {k: median(v) for k, v in per_link.items()}
    for node in synthetic.node_names(4):
        want = median([v for k, v in links.items() if node in k]) * 1e9 / 8
        assert one(s, "acceptance_nic_write_bandwidth_bytes_per_second", node=node) == pytest.approx(want, rel=1e-9)
    assert one(s, "acceptance_rail_write_bandwidth_bytes_per_second", rail="0") == pytest.approx(
        median(list(links.values())) * 1e9 / 8, rel=1e-9)


def _add_counters(run: Path) -> None:
    """Port counter records as the counters suite writes them: metric = counter, device, port, saturated."""
    rows = []
    for window, (sym, rcv, data) in enumerate([(5, 0, 10**9), (17, 0, 2 * 10**9), (0, 0, 10**9)]):
        for metric, value in (("symbol_error", sym), ("port_rcv_errors", rcv), ("port_xmit_data", data),
                              ("rx_prio3_pause", data)):
            rows.append(synthetic._record("suites/test_rdma_write.py::test_write_bandwidth[rail1]", "counters",
                                          metric, value, "count", nodes=["node02"], ranks=[3], rail=1, engine=None,
                                          detail=f"mlx5_1 port 1: window {window}", device="mlx5_1", port=1))
    rows.append(synthetic._record("suites/test_rdma_write.py::test_write_bandwidth[rail0]", "counters",
                                  "link_downed", 1, "count", nodes=["node03"], ranks=[4], rail=0, engine=None,
                                  detail="mlx5_0 port 2", device="mlx5_0", port=2))
    rows.append(synthetic._record("suites/test_rdma_write.py::test_write_bandwidth[rail0]", "counters",
                                  "rx_discards_phy", 40, "count", nodes=["node03"], ranks=[4], rail=0, engine=None,
                                  detail="mlx5_0 port 2; saturated before the window", device="mlx5_0", port=2,
                                  saturated="before"))
    with open(run / "results.jsonl", "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def test_port_error_counters_worst_window_nonzero_only(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, memreg=False, collectives=False)
    _add_counters(run)
    s = parse(prometheus.render(analyze(run)))
    got = {(lab["node"], lab["rail"], lab["device"], lab["port"], lab["counter"], lab["kind"]): v
           for lab, v in series(s, "acceptance_port_error_increase")}
    # the worst window (17, not 5 or 0); zero error counters, traffic (port_xmit_data) and pause frames left out
    assert got == {("node02", "1", "mlx5_1", "1", "symbol_error", "error"): 17.0,
                   ("node03", "0", "mlx5_0", "2", "link_downed", "error"): 1.0,
                   ("node03", "0", "mlx5_0", "2", "rx_discards_phy", "discard"): 40.0}


def _unchecked(monkeypatch) -> None:
    """Analysis refuses a node name that is not a Slurm node name (analysis.validate); the exporter
    still escapes whatever it is given, so these tests let an odd name through."""
    from acceptance.analysis import pipeline
    monkeypatch.setattr(pipeline, "check_record_nodes", lambda *_a, **_k: None)


def test_label_values_are_escaped(tmp_path, monkeypatch):
    assert prometheus.escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    odd = 'rack "7"\\node\n05'
    run = synthetic.make_run(tmp_path / "run", nodes=6, rails=2, slow_nic=("node05", 1), latency=False,
                             memreg=False, collectives=False, preflight=False)
    _rename(run, "node05", odd)
    _unchecked(monkeypatch)
    analysis = analyze(run)
    text = prometheus.render(analysis)
    assert 'node="rack \\"7\\"\\\\node\\n05",rail="1"' in text
    assert all(SAMPLE.match(line) for line in text.splitlines() if not line.startswith("#"))
    s = parse(text)
    # a finding names it, but no scontrol line ever names what is not a Slurm node name
    assert any(f["node"] == odd for f in analysis.findings) and analysis.drains == []
    assert series(s, "acceptance_node_drain_suggested") == []
    assert one(s, "acceptance_nic_write_bandwidth_bytes_per_second", node=odd, rail="1") == pytest.approx(
        0.6 * HEALTHY_BPS, rel=0.02)


def _rename(run: Path, old: str, new: str) -> None:
    path = run / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r["nodes"] = [new if n == old else n for n in r["nodes"]]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_findings_are_capped_but_counted(slow_nic):
    analysis, _ = slow_nic
    f = analysis.findings[0]
    many = [dict(f, node=f"node{i:04d}") for i in range(prometheus.FINDINGS_MAX + 500)]
    text = prometheus.render(dataclasses.replace(analysis, findings=many))
    s = parse(text)
    assert len(series(s, "acceptance_finding")) == prometheus.FINDINGS_MAX
    assert one(s, "acceptance_findings", severity="fail", scope="nic") == prometheus.FINDINGS_MAX + 500
    assert "# 500 more findings are counted in acceptance_findings" in text


def test_write_replaces_the_file_atomically(slow_nic, tmp_path, monkeypatch):
    analysis, _ = slow_nic
    path = tmp_path / "acceptance.prom"
    path.write_text("old\n")
    assert prometheus.write(analysis, path) == path
    assert path.read_text() == prometheus.render(analysis)
    assert os.listdir(tmp_path) == ["acceptance.prom"]          # no temporary file left behind
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask        # node_exporter may run as another user

    def broken(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(prometheus.os, "replace", broken)
    path.write_text("old\n")
    with pytest.raises(OSError):
        prometheus.write(analysis, path)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["acceptance.prom"]


def test_path_problem(tmp_path):
    assert prometheus.path_problem(tmp_path / "a.prom") is None
    assert "is a folder" in prometheus.path_problem(tmp_path)
    assert "does not exist" in prometheus.path_problem(tmp_path / "missing" / "a.prom")


@pytest.mark.skipif(not shutil.which("promtool"),
                    reason="promtool not on PATH (Debian package `prometheus`; `make test` installs it)")
def test_promtool_accepts_the_file_without_lint_warnings(tmp_path, monkeypatch):
    run = synthetic.make_run(tmp_path / "run", nodes=6, rails=2, slow_nic=("node05", 1), iterations=2, read=True,
                             gpudirect=True)
    _add_counters(run)
    _rename(run, "node03", 'rack "7"\\node\n03')  # node05 stays a Slurm name: it is drained
    _unchecked(monkeypatch)
    analysis = analyze(run)
    text = prometheus.render(analysis)
    # every family this test can produce is present, so all of them are linted
    names = {name for name, _, _ in parse(text)}
    assert {f"acceptance_{k}" for k in prometheus._HELP} <= names
    p = subprocess.run(["promtool", "check", "metrics"], check=False, input=text, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "" and p.stderr.strip() == "", p.stdout + p.stderr


# ---- the night's history check (RUN_DIR/history.json, `acceptance history check`) ----------------------

def _history_finding(kind, severity, subject, scope, node=None, rail=None, peer=None, metric=None):
    return {"kind": kind, "severity": severity, "subject": subject, "scope": scope, "node": node, "rail": rail,
            "peer": peer, "metric": metric, "message": f"{subject} {kind}", "evidence": [],
            "series": [{"date": "2026-01-01", "run_id": "n0", "value": 1.0, "pinned": True, "tonight": False,
                        "verdict": "pass"}]}


HISTORY = {"store": "/x/history", "night": 5, "run_id": "synthetic-0", "pinned": "n0", "rolling": ["n1"],
           "findings": [
               _history_finding("drift", "fail", "node03:rail1:node06", "link", "node03", 1, "node06", "bandwidth"),
               _history_finding("drift", "warn", "node07", "node", "node07", metric="latency_p99"),
               _history_finding("intermittent", "fail", "node02:rail0", "nic", "node02", 0),
               _history_finding("trend", "warn", "rail1", "rail", rail=1, metric="bandwidth"),
               _history_finding("recovered", "warn", "node05:rail2", "nic", "node05", 2)]}


def test_history_findings_become_labelled_series(slow_nic):
    analysis, _ = slow_nic
    s = parse(prometheus.render(analysis, HISTORY))
    base = {"run_id": "synthetic-0", "profile": "synthetic"}
    got = sorted(series(s, "acceptance_history_finding"), key=str)
    assert got == sorted([
        (base | {"kind": "drift", "severity": "fail", "subject": "node03:rail1:node06", "scope": "link",
                 "node": "node03", "rail": "1", "peer": "node06", "metric": "bandwidth"}, 1.0),
        (base | {"kind": "drift", "severity": "warn", "subject": "node07", "scope": "node", "node": "node07",
                 "metric": "latency_p99"}, 1.0),
        (base | {"kind": "intermittent", "severity": "fail", "subject": "node02:rail0", "scope": "nic",
                 "node": "node02", "rail": "0"}, 1.0)], key=str)
    counts = {(lab["kind"], lab["severity"]): v for lab, v in series(s, "acceptance_history_findings")}
    assert counts == {(k, sev): float((k, sev) in {("drift", "fail"), ("drift", "warn"), ("intermittent", "fail"),
                                                   ("trend", "warn"), ("recovered", "warn")})
                      for k in ("drift", "intermittent", "recovered", "trend") for sev in ("fail", "warn")}
    # the run's own families are unchanged by it
    assert prometheus.render(analysis).splitlines() == [
        line for line in prometheus.render(analysis, HISTORY).splitlines() if "acceptance_history_" not in line]


def test_history_without_findings_and_without_a_check(slow_nic):
    analysis, _ = slow_nic
    text = prometheus.render(analysis, {"run_id": "synthetic-0", "findings": []})
    s = parse(text)
    assert {v for _, v in series(s, "acceptance_history_findings")} == {0.0}
    assert len(series(s, "acceptance_history_findings")) == 4 * 2
    assert "acceptance_history_finding " not in text and "acceptance_history_finding{" not in text  # not even HELP
    assert "acceptance_history_finding gauge" not in text
    assert "acceptance_history_" not in prometheus.render(analysis)   # not checked: no history family at all


@pytest.mark.skipif(not shutil.which("promtool"),
                    reason="promtool not on PATH (Debian package `prometheus`; `make test` installs it)")
def test_promtool_accepts_the_history_series(slow_nic):
    analysis, _ = slow_nic
    odd = dict(HISTORY, findings=HISTORY["findings"] + [
        _history_finding("drift", "fail", 'rack "7"\\node\n03:rail1', "nic", 'rack "7"\\node\n03', 1)])
    text = prometheus.render(analysis, odd)
    names = {name for name, _, _ in parse(text)}
    assert {f"acceptance_{k}" for k in prometheus._HISTORY_HELP} <= names
    assert 'subject="rack \\"7\\"\\\\node\\n03:rail1"' in text
    p = subprocess.run(["promtool", "check", "metrics"], check=False, input=text, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "" and p.stderr.strip() == "", p.stdout + p.stderr


def test_write_passes_the_history_on(slow_nic, tmp_path):
    analysis, _ = slow_nic
    path = prometheus.write(analysis, tmp_path / "acceptance.prom", history=HISTORY)
    assert path.read_text() == prometheus.render(analysis, HISTORY)
