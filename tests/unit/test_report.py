"""The HTML report: content, escaping, self-containment, empty sections, scale.

Analysis objects are built here directly, with record frames shaped as
acceptance.analysis produces them (docs/records.md record keys plus src, dst, op, scope).
"""
from __future__ import annotations

import base64
import re

import numpy as np
import pandas as pd
import pytest

from acceptance.analysis import Analysis
from acceptance.rules.profile import format_profile, load_profile
from acceptance.report import render
from acceptance.records.naming import compress_ints
from acceptance.report.data import compress_hosts, fmt_num, prepare

SIZES = [8 * 4 ** k for k in range(10)]  # 8 B .. 2 MiB
OPS = ("allreduce", "alltoall")


def _frame(columns: dict, n: int) -> pd.DataFrame:
    """Scalars broadcast to n rows."""
    return pd.DataFrame({k: (v if isinstance(v, (np.ndarray, list, pd.Series)) else [v] * n)
                         for k, v in columns.items()})


def make_records(nodes: list[str], rails: int, *, iterations: int = 1, partners: int | None = None,
                 slow: tuple[str, str, int] | None = None, sweep_links: int | None = None,
                 counters: bool = False, lists: bool = True, seed: int = 0) -> pd.DataFrame:
    """Records like analysis.load_records(): p2p write bandwidth/latency, collectives, counters.

    partners: each node talks to the next `partners` nodes (in both directions) instead of all.
    slow: (src, dst, rail) whose write bandwidth is 40% of the rest and fails its threshold.
    """
    rng = np.random.default_rng(seed)
    n = len(nodes)
    names = np.array(nodes, dtype=object)
    src_i, dst_i = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    src_i, dst_i = src_i.ravel(), dst_i.ravel()
    keep = src_i != dst_i
    if partners is not None:
        keep &= ((dst_i - src_i) % n <= partners) | ((src_i - dst_i) % n <= partners)
    src_i, dst_i = src_i[keep], dst_i[keep]
    frames = []
    largest = SIZES[-1]
    for it in range(iterations):
        for rail in range(rails):
            m = len(src_i)
            bw = rng.normal(45.0, 0.6, m) - 0.3 * it
            lat = rng.normal(3.0, 0.05, m) + 0.01 * it
            verdict_bw = np.full(m, "pass", dtype=object)
            if slow is not None and rail == slow[2]:
                hit = (names[src_i] == slow[0]) & (names[dst_i] == slow[1])
                bw[hit] *= 0.4
                verdict_bw[hit] = "fail"
            common = dict(rail=float(rail), iteration=it, engine="mpi", memory="host",
                          time="2026-11-30T04:41:27.585Z", src=names[src_i], dst=names[dst_i], op=None,
                          scope="link")
            frames.append(_frame(dict(common, test=f"suites/test_rdma_write.py::test_write_bandwidth[rail{rail}]",
                                      suite="rdma_write", metric="bandwidth", value=bw, unit="Gbit/s",
                                      size=float(largest), samples=200, threshold=30.0, verdict=verdict_bw), m))
            frames.append(_frame(dict(common, test=f"suites/test_rdma_write.py::test_write_latency[rail{rail}]",
                                      suite="rdma_write", metric="latency_p99", value=lat, unit="us", size=8.0,
                                      samples=10000, threshold=20.0, verdict="pass"), m))
            frames.append(_frame(dict(common, test=f"suites/test_rdma_write.py::test_write_latency[rail{rail}]",
                                      suite="rdma_write", metric="latency_p50", value=lat * 0.6, unit="us", size=8.0,
                                      samples=10000, threshold=5.0, verdict="pass"), m))
            # the size sweep, on some links
            k = m if sweep_links is None else min(m, sweep_links)
            for size in SIZES[:-1]:
                frames.append(_frame(dict(common, src=names[src_i[:k]], dst=names[dst_i[:k]],
                                          test=f"suites/test_rdma_write.py::test_write_bandwidth[rail{rail}]",
                                          suite="rdma_write", metric="bandwidth",
                                          value=45.0 * size / (size + 65536) * rng.uniform(0.95, 1.05, k),
                                          unit="Gbit/s", size=float(size), samples=200,
                                          threshold=0.5 if size >= 65536 else 0.0001, verdict="pass"), k))
        # collectives: world, each rail, each node
        for op in OPS:
            comms = [("world", np.nan, None)] + [("rail", float(r), None) for r in range(rails)] + \
                    [("node", np.nan, nd) for nd in nodes]
            for size in SIZES:
                c = len(comms)
                scope = np.array([s for s, _, _ in comms], dtype=object)
                base = {"world": 40.0, "rail": 45.0, "node": 300.0}
                value = np.array([base[s] for s in scope]) * size / (size + (1 << 20)) * rng.uniform(0.9, 1.1, c)
                thr = np.where(scope == "node", 100.0, 20.0) * size / (size + (1 << 20)) * 0.5
                tests = np.array([f"suites/test_collectives.py::test_{op}[{s if s != 'rail' else f'rail{int(r)}'}]"
                                  for s, r, _ in comms], dtype=object)
                frames.append(_frame(dict(test=tests, suite="collective", metric="busbw", value=value, unit="GB/s",
                                          size=float(size), rail=np.array([r for _, r, _ in comms]), iteration=it,
                                          engine="mpi", memory="host", time="2026-11-30T04:41:15.597Z", samples=20,
                                          threshold=thr, verdict="pass",
                                          src=np.array([nd for _, _, nd in comms], dtype=object), dst=None,
                                          op=op, scope=scope), c))
    if counters:
        frames.append(_counter_records(names, rails))
    df = pd.concat(frames, ignore_index=True)
    if lists:
        df["nodes"] = [[s] if d is None else [s, d] for s, d in zip(df["src"], df["dst"])]
        df["ranks"] = [[0]] * len(df)
    return df


def _counter_records(names: np.ndarray, rails: int) -> pd.DataFrame:
    """Port counter records: symbol_error of every NIC, 17 on the second (a fail), zero elsewhere."""
    n = len(names)
    c = n * rails
    node_i = np.repeat(np.arange(n), rails)
    value = np.zeros(c)
    value[1] = 17
    return _frame(dict(test="suites/test_counters.py::test_port_counters", suite="counters",
                       metric="symbol_error", value=value, unit="count", size=None,
                       rail=np.tile(np.arange(rails), n).astype(float), iteration=0, engine=None,
                       memory="host", time="2026-11-30T04:41:31.000Z", samples=1,
                       threshold=0.0, verdict=np.where(value > 0, "fail", "pass"),
                       src=names[node_i], dst=None, op=None, scope="nic"), c)


def make_run(nodes: list[str], rails: int, run_id: str = "20261130-044114-bfd8") -> dict:
    profile = load_profile("local")
    return {
        "run_id": run_id, "start": "2026-11-30T04:41:15.179Z", "end": "2026-11-30T05:41:30.710Z",
        "command": "acceptance run --nodes 3 --ranks-per-node 2", "launcher": "mpiexec",
        "profile": profile.to_json(),
        "topology": {"world_size": len(nodes) * rails,
                     "nodes": {nd: list(range(i * rails, (i + 1) * rails)) for i, nd in enumerate(nodes)},
                     "rails": list(range(rails)), "ranks": []},
        "software": {nd: {"python": "3.11.7", "mpi4py": "4.1.2" if i else "4.0.0"} for i, nd in enumerate(nodes)},
        "complete": True, "exit_code": 1, "missing_ranks": [],
    }


FINDINGS = [
    {"severity": "warn", "scope": "nic", "node": "node2", "rail": 1, "peer": None, "metric": "latency_p99",
     "value": 31.5, "expected": 20.0, "evidence": ["node2 -> node1 rail 1: 31.5 us"],
     "message": "node2 rail 1 latency p99 high <b>bold</b>"},
    {"severity": "fail", "scope": "link", "node": "node1", "rail": 0, "peer": "node3", "metric": "bandwidth",
     "value": 18.0, "expected": 30.0,
     "evidence": [f"node1 -> node3 rail 0 iteration {i}: 18.0 Gbit/s < 30 Gbit/s" for i in range(30)],
     "message": "node1 -> node3 on rail 0: write bandwidth 18 Gbit/s, 40% of its peers"},
]
DRAINS = ['scontrol update NodeName=node1 State=DRAIN Reason="acceptance: rail 0 link to node3 slow"']


def small_analysis(nodes=("node1", "node2", "node3"), **kw) -> Analysis:
    nodes = list(nodes)
    records = make_records(nodes, 2, slow=(nodes[0], nodes[2], 0), **kw)
    deltas = pd.DataFrame([
        {"suite": "rdma_write", "metric": "bandwidth", "size": SIZES[-1], "rail": 0, "src": nodes[0], "dst": nodes[2],
         "op": None, "scope": "link", "value": 18.0, "baseline": 45.0, "change": -0.6, "regression": True},
        {"suite": "collective", "metric": "busbw", "size": SIZES[-1], "rail": None, "src": None, "dst": None,
         "op": "allreduce", "scope": "world", "value": 26.0, "baseline": 26.2, "change": -0.0076,
         "regression": False},
    ])
    return Analysis(run=make_run(nodes, 2), profile=load_profile("local"), records=records,
                    findings=[dict(f) for f in FINDINGS], drains=list(DRAINS), deltas=deltas,
                    baseline_id="20261129-031500-aaaa")


def _section(html: str, anchor: str) -> str:
    start = html.index(f'<section id="{anchor}">')
    return html[start:html.index("</section>", start)]


def _pngs(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


# --- tests --------------------------------------------------------------------------

def test_report_contents(tmp_path):
    analysis = small_analysis()
    path = render(analysis, tmp_path)
    assert path == tmp_path / "report.html" and path.exists()
    html = path.read_text(encoding="utf-8")

    banner = html[html.index('<header id="verdict"'):html.index("</header>")]
    assert "FAIL" in banner and "1 failing finding" in banner and "1 warning" in banner
    assert "20261130-044114-bfd8" in banner and "2026-11-30T04:41:15.179Z" in banner
    assert "acceptance run --nodes 3 --ranks-per-node 2" in banner
    assert str((tmp_path / "results.jsonl").resolve()) in banner

    findings = _section(html, "findings")
    # worst first: the fail row before the warn row, though analysis listed the warning first
    assert findings.index("node1 -&gt; node3 on rail 0") < findings.index("latency p99 high")
    assert "<details>" in findings and "iteration 29" not in findings and "5 more in findings.json" in findings
    assert "18 Gbit/s" in findings and "30 Gbit/s" in findings
    assert "<pre" in findings and "scontrol update NodeName=node1 State=DRAIN" in findings

    heat = _section(html, "heatmaps")
    images = re.findall(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]+"', heat)
    assert len(images) == 4  # 2 rails x (bandwidth, latency p99)
    assert "rail 0" in heat and "rail 1" in heat and "at 2MiB" in heat
    assert "1 below threshold" in heat
    for png in _pngs(html):
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"http" not in png  # no matplotlib address in the PNG metadata either

    assert "<img" in _section(html, "sweeps")
    collectives = _section(html, "collectives")
    assert "<img" in collectives and "allreduce" in collectives and "alltoall" in collectives
    baseline = _section(html, "baseline")
    assert "20261129-031500-aaaa" in baseline and "REGRESSION" in baseline and "-60.0%" in baseline
    assert baseline.index("-60.0%") < baseline.index("-0.8%")
    assert "No counter data in this run" in _section(html, "counters")
    env = _section(html, "environment")
    assert "node[1-3]" in env and "4.0.0" in env and "4.1.2" in env
    thresholds = _section(html, "thresholds")
    profile_text = format_profile(analysis.profile)
    assert profile_text.splitlines()[0].replace("'", "&#39;") in thresholds
    assert "[rdma_write]" in thresholds
    assert 'id="history"' not in html and 'href="#history"' not in html  # only with a history store
    # A row key that is also a dict method (values, items) must not render as the method.
    assert not re.search(r"built-in method|bound method| object at 0x", html)


def test_fleet_bounds_table_counts_each_population(tmp_path):
    # run.json "fleet" as a real run writes it; its "values" key is also a dict method's name.
    analysis = small_analysis()
    analysis.extra["fleet"] = {"judged": 300, "outside": 18, "too_few": 0, "populations": [
        {"suite": "rdma_write", "metric": "bandwidth", "op": "write", "size": 32768, "memory": "host",
         "engine": "mpi", "peers": "all pairs", "values": 1260, "population": 1260, "median": 2.305,
         "factor": 0.05, "outside": 18, "too_few": 0, "unit": "Gbit/s"}]}
    fleet = _section(render(analysis, tmp_path).read_text(encoding="utf-8"), "fleet")
    assert '<td>all pairs</td><td class="num">1,260</td>' in fleet, fleet
    assert "2.305 Gbit/s" in fleet and "0.05 ×" in fleet


def test_report_is_self_contained(tmp_path):
    html = render(small_analysis(), tmp_path).read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html
    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(http|//)', html, re.IGNORECASE)
    assert "<script" not in html.lower()
    assert "<link" not in html.replace('<link rel="icon" href="data:,">', "")
    assert "@import" not in html and "url(" not in html
    for src in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert src.startswith(("data:", "#")), src


def test_report_escapes_names_and_messages(tmp_path):
    evil = "<script>alert(1)</script>"
    analysis = small_analysis(nodes=("node1", "node2", evil))
    analysis.findings.append({"severity": "fail", "scope": "node", "node": evil, "rail": None, "peer": None,
                              "metric": "bandwidth", "value": 1.0, "expected": 30.0, "evidence": [evil],
                              "message": "node <b>down</b> & out"})
    analysis.drains.append(f"scontrol update NodeName={evil} State=DRAIN")
    analysis.run["command"] = f"acceptance run {evil}"
    html = render(analysis, tmp_path).read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "node &lt;b&gt;down&lt;/b&gt; &amp; out" in html
    assert "<b>" not in html


def test_empty_sections_say_so(tmp_path):
    analysis = Analysis(run={"run_id": "r1", "profile": {"name": "local"}}, profile=load_profile("local"),
                        records=pd.DataFrame(), findings=[], drains=[])
    path = render(analysis, tmp_path, out=tmp_path / "sub" / "r.html")
    assert path == tmp_path / "sub" / "r.html"
    html = path.read_text(encoding="utf-8")
    # No run.json saying the run completed, nothing measured: never a pass.
    assert "INCOMPLETE" in html[html.index('<header id="verdict"'):html.index("</header>")]
    assert "No findings" in _section(html, "findings") and "No node to drain" in _section(html, "findings")
    assert "No point-to-point records" in _section(html, "heatmaps")
    assert "No pairwise bandwidth records" in _section(html, "sweeps")
    assert "No collective busbw records" in _section(html, "collectives")
    assert "One iteration only" in _section(html, "burnin")
    assert "No baseline was given" in _section(html, "baseline")
    assert "No counter data in this run" in _section(html, "counters")
    assert "<img" not in html


def test_zero_records_with_columns_and_empty_deltas(tmp_path):
    columns = ["test", "suite", "metric", "value", "unit", "size", "rail", "nodes", "ranks", "engine", "memory",
               "iteration", "time", "samples", "threshold", "verdict", "src", "dst", "op", "scope"]
    deltas = pd.DataFrame(columns=["suite", "metric", "size", "rail", "src", "dst", "op", "scope", "value",
                                   "baseline", "change", "regression"])
    analysis = Analysis(run=make_run(["n1"], 1), profile=load_profile("local"),
                        records=pd.DataFrame(columns=columns), findings=[], drains=[], deltas=deltas,
                        baseline_id="base")
    html = render(analysis, tmp_path).read_text(encoding="utf-8")
    assert "Nothing in common with the baseline base" in _section(html, "baseline")


def test_burnin_counters_and_records_without_analysis_columns(tmp_path):
    nodes = ["node1", "node2", "node3", "node4"]
    records = make_records(nodes, 2, iterations=4, counters=True, slow=("node2", "node4", 1))
    # as results.jsonl has them: no src/dst columns (the report derives them from nodes)
    records = records.drop(columns=["src", "dst"])
    analysis = Analysis(run=make_run(nodes, 2), profile=load_profile("local"), records=records,
                        findings=[], drains=[])
    html = render(analysis, tmp_path).read_text(encoding="utf-8")
    burn = _section(html, "burnin")
    assert "<img" in burn and "write bandwidth at 2MiB" in burn and "allreduce busbw" in burn
    assert "node2 → node4, rail 1" in burn  # the worst link of the run
    heat = _section(html, "heatmaps")
    assert "median of 4 iterations" in heat and "1 below threshold" in heat
    counters = _section(html, "counters")
    assert "symbol_error" in counters and "17" in counters and "node1" in counters
    coll = _section(html, "collectives")
    assert "rail 0" in coll and "world" in coll and "node" in coll
    assert "failed and warned measurements" in html.lower()


def _slow_nic(records: pd.DataFrame, node: str, rail: int, factor: float) -> pd.DataFrame:
    """Every link of node's NIC on rail at factor x its bandwidth (and latency / factor)."""
    hit = ((records["src"] == node) | (records["dst"] == node)) & (records["rail"] == rail)
    bw, lat = hit & (records["metric"] == "bandwidth"), hit & records["metric"].str.startswith("latency")
    records.loc[bw, "value"] *= factor
    records.loc[lat, "value"] /= factor
    return records


def test_large_cluster_gets_node_strips(tmp_path):
    """300 nodes x 8 rails, sampled partners: a rails x nodes strip per metric, the slow NIC first among the
    worst, ringed by its finding; findings counted by scope and rail; capped tables, a modest page."""
    nodes = [f"gpu{i:04d}" for i in range(1, 301)]
    records = make_records(nodes, 8, partners=8, sweep_links=40, lists=False)
    records = _slow_nic(records, "gpu0042", 5, 0.5)
    findings = [{"severity": "fail", "scope": "link", "node": f"gpu{i:04d}", "rail": 3, "peer": "gpu0010",
                 "metric": "bandwidth", "value": 18.0, "expected": 30.0, "evidence": [], "message": f"slow {i}"}
                for i in range(1, 251)]
    findings.append({"severity": "fail", "scope": "nic", "node": "gpu0042", "rail": 5, "peer": None,
                     "metric": "bandwidth", "value": 22.5, "expected": 45.0, "evidence": [],
                     "message": "gpu0042's NIC on rail 5 is 50% slow"})
    run = make_run(nodes, 8)
    run["software"]["gpu0123"] = {"python": "3.12.1", "mpi4py": "4.1.2"}
    analysis = Analysis(run=run, profile=load_profile("local"), records=records, findings=findings,
                        drains=[f"scontrol update NodeName=gpu{i:04d} State=DRAIN" for i in range(1, 251)])
    html = render(analysis, tmp_path).read_text(encoding="utf-8")
    assert len(html) < 3_000_000, len(html)
    heat = _section(html, "heatmaps")
    assert "each NIC's typical link" in heat and "node × node heatmaps" not in heat
    assert len(re.findall(r"<img ", heat)) == 2  # one strip per metric, not one matrix per rail and metric
    assert "300 nodes × 8 rails, 2,400 NICs measured" in heat
    for metric in ("write bandwidth at 2MiB", "write latency p99 at 8B"):
        block = heat[heat.index(f"<h3>{metric}</h3>"):]
        first = re.search(r"<tr[^>]*><td>(gpu\d+)</td><td class=\"num\">(\d+)</td><td class=\"num\">([\d.]+) ×", block)
        assert first.groups()[:2] == ("gpu0042", "5"), first.group(0)
        assert abs(float(first.group(3)) - (0.5 if "bandwidth" in metric else 2.0)) < 0.05
        assert 'class="row-fail"' in block[:block.index("</table>")]  # its finding's mark
    findings_html = _section(html, "findings")
    shown = findings_html[:findings_html.index('id="confirmed-more"')]
    assert shown.count('<tr class="row-fail">') == 20  # the worst 20 shown, the next 80 folded
    assert "The next 80 confirmed failing findings" in findings_html
    assert "151 more in findings.json" in findings_html  # 251 confirmed, 100 in the page
    drains = findings_html[findings_html.index("<h3>Nodes to drain (250)</h3>"):]
    assert drains.index("NodeName=gpu0020 ") < drains.index("The other 230 drain lines") < drains.index("NodeName=gpu0021 ")
    assert findings_html.index("gpu0042&#39;s NIC") < findings_html.index("slow 1<")  # the NIC before links
    counts = findings_html[findings_html.index('<table class="counts">'):]
    counts = counts[:counts.index("</table>")]
    assert re.search(r"<th>link</th>(<td[^>]*>·</td>){3}<td[^>]*><span class=\"sev-fail\">250</span></td>", counts)
    env = _section(html, "environment")
    assert "gpu[0001-0300]" in env and "3.12.1" in env
    assert env.count("<tr") < 40


def test_heatmap_mode_follows_the_node_count():
    """Up to 64 nodes a node x node matrix per rail; beyond, the strips (no matrix of mostly empty cells)."""
    from acceptance.report import sections

    for n, mode in ((64, "matrix"), (65, "strip")):
        nodes = [f"n{i:03d}" for i in range(n)]
        recs = prepare(make_records(nodes, 1, partners=1, sweep_links=0, lists=False))
        out = sections.heatmaps(recs, make_run(nodes, 1), [])
        assert out["mode"] == mode and out["nodes"] == n
        assert bool(out["rails"]) == (mode == "matrix") and bool(out["strips"]) == (mode == "strip")


def test_the_latency_map_is_ib_write_lat_where_it_ran_and_says_when_it_is_the_harness_loop():
    """Issue 41: the pairwise latency map shows a C loop's timing (perftest's ib_write_lat on the same pairs)
    where the run has it; else the harness's own write latency, saying so."""
    from acceptance.report import sections

    nodes = [f"n{i}" for i in range(4)]
    raw = make_records(nodes, 1, lists=False)
    titles = lambda out: [f["figure"]["alt"] for r in out["rails"] for f in r["figures"] if f["figure"]]
    alone = sections.heatmaps(prepare(raw), make_run(nodes, 1), [])
    assert any("write latency p99" in t for t in titles(alone))
    assert alone["timing"] == ["write latency p99: the harness's own timing loop, which adds its own time to each "
                               "sample (no perftest records of these pairs)."]
    lat = raw[(raw["suite"] == "rdma_write") & (raw["metric"] == "latency_p99")].copy()
    lat["suite"], lat["value"] = "perftest", lat["value"] / 4  # ib_write_lat: the fabric's own latency
    both = sections.heatmaps(prepare(pd.concat([raw, lat], ignore_index=True)), make_run(nodes, 1), [])
    assert any("ib_write_lat latency p99" in t for t in titles(both))
    assert not any(t.startswith("rail 0: write latency p99") for t in titles(both))
    assert both["timing"] == ["write latency p99: drawn from ib_write_lat latency p99 (a C loop timed each sample), "
                              "not from the harness's own loop."]


def test_node_rail_medians_are_each_nics_typical_link():
    """Per (rail, node): the median over the node's links as source or destination, relative to the rail."""
    from acceptance.report.sections.maps import node_rail_medians

    sub = pd.DataFrame({"src": ["a", "a", "b", "c"], "dst": ["b", "c", "c", "a"], "rail": [0.0, 0.0, 0.0, 1.0],
                        "value": [100.0, 50.0, 100.0, 10.0]})
    rel, links, medians = node_rail_medians(sub, ["a", "b", "c", "d"], [0.0, 1.0])
    assert list(medians) == [100.0, 10.0]
    assert rel[0, :3].tolist() == [0.75, 1.0, 0.75] and np.isnan(rel[0, 3])  # d: never measured
    assert links.tolist() == [[2, 2, 2, 0], [1, 0, 1, 0]]


def test_findings_fold_warnings_and_transients_and_show_power(tmp_path):
    """Confirmed fails shown; warnings and transients folded in <details> with their counts; rail mode,
    schedule and what a PASS rules out in the banner."""
    analysis = small_analysis()
    analysis.findings.append({"severity": "warn", "scope": "nic", "node": "node3", "rail": 0, "peer": None,
                              "metric": "bandwidth", "value": 40.0, "expected": 45.0, "evidence": [],
                              "message": "node3 rail 0 did not reproduce", "transient": True})
    analysis.run.update(rail_mode="concurrent",
                        schedule={"pattern": "screen:3", "rounds": 3, "seed": 11, "tree_aware": False})

    class Powered(Analysis):
        power = [{"rule": "nic", "metric": "bandwidth", "size": 2097152, "rail": r, "population": 3,
                  "comparisons": 6, "noise": 0.013, "detectable": 0.3 + 0.05 * r} for r in range(2)]

    html = render(Powered(**vars(analysis)), tmp_path).read_text(encoding="utf-8")
    banner = html[html.index('<header id="verdict"'):html.index("</header>")]
    assert "1 confirmed failing finding," in banner and "1 warning" in banner and "1 transient" in banner
    assert "What a PASS rules out: a NIC 35% slow (bandwidth at 2MiB), on every rail." in banner
    assert "rails measured concurrently" in banner and "pair schedule screen:3 (3 rounds, random pairs, seed 11)" in banner
    power = html[html.index('<details class="fold" id="power">'):]
    assert "<td class=\"num\">35%</td>" in power[:power.index("</details>")] and "1.3%" in power[:power.index("</details>")]
    findings = _section(html, "findings")
    shown = findings[:findings.index('<details class="fold"')]
    assert "node1 -&gt; node3 on rail 0" in shown and "latency p99 high" not in shown
    assert "node3 rail 0 did not reproduce" not in shown
    warnings = findings[findings.index('id="warnings"'):]
    assert warnings.startswith('id="warnings"><summary>Warnings (1)') and "latency p99 high" in warnings
    transient = findings[findings.index('id="transient"'):]
    assert transient.startswith('id="transient"><summary>Transient suspects (1)')
    assert "node3 rail 0 did not reproduce" in transient
    assert '<tr class="transient"><th>transient</th><td class="num">1</td>' in findings


def test_the_banner_says_which_nodes_were_left_behind_and_why(tmp_path):
    """Issue 42: a node lost during the run is said at the top of the report, with why and what it cost."""
    analysis = small_analysis()
    analysis.run.update(complete=False, exit_code=3, missing_ranks=[4, 5], lost_nodes=["node3"],
                        lost="srun: tasks 4-5 on node3 ended first (Killed); the launcher then stopped the job")
    banner = render(analysis, tmp_path).read_text(encoding="utf-8")
    banner = banner[banner.index('<header id="verdict"'):banner.index("</header>")]
    assert "<strong>Left behind:</strong> 1 of 3 nodes lost during the run" in banner
    assert "<li>node3: srun: tasks 4-5 on node3 ended first (Killed)" in banner
    clean = render(small_analysis(), tmp_path / "clean").read_text(encoding="utf-8")
    assert "Left behind" not in clean


def test_helpers():
    assert compress_hosts(["node1", "node2", "node3", "node7", "login"]) == "login,node[1-3,7]"
    assert compress_hosts(["gpu001", "gpu002", "gpu010"]) == "gpu[001-002,010]"
    assert compress_ints([0, 1, 2, 3, 8]) == "0-3,8"
    assert fmt_num(None) == "–" and fmt_num(3.0, "us") == "3 us" and fmt_num(1048576) == "1,048,576"
    assert fmt_num(0.1234567) == "0.1235"
    df = pd.DataFrame({"test": ["suites/test_collectives.py::test_allreduce[rail1]"], "suite": ["collective"],
                       "metric": ["busbw"], "value": [1.0], "nodes": [["a", "b"]]})
    prepared = prepare(df)
    assert prepared.loc[0, "src"] == "a" and prepared.loc[0, "dst"] == "b"
    assert prepared.loc[0, "verdict"] == "info" and prepared.loc[0, "iteration"] == 0


@pytest.mark.parametrize("verdict,findings,complete,code", [
    ("pass", [], True, 0), ("pass", [FINDINGS[0]], True, 0), ("fail", FINDINGS, True, 1),
    ("incomplete", FINDINGS, False, 3)])
def test_banner_verdicts(tmp_path, verdict, findings, complete, code):
    """The headline is the run's verdict (a warning does not change it; an incomplete run is never a
    pass, whatever it found), with its exit code, as on the terminal and in run.json."""
    analysis = small_analysis()
    analysis.findings = [dict(f) for f in findings]
    analysis.run.update(complete=complete, exit_code=code)
    html = render(analysis, tmp_path).read_text(encoding="utf-8")
    assert f'class="banner {verdict}"' in html and f"<title>{verdict.upper()}" in html
    assert f"exit code {code}" in html


@pytest.mark.odd_records
def test_renders_the_frame_load_records_returns(tmp_path):
    """Categorical text columns, nullable integers, railN scopes: the frame analysis hands over."""
    import json

    import acceptance.analysis as analysis_module
    from acceptance.records.results import REQUIRED_KEYS

    load_records = getattr(analysis_module, "load_records", None)
    if load_records is None:
        pytest.skip("acceptance.analysis.load_records is not there yet")
    nodes = ["node1", "node2", "node3"]
    records = make_records(nodes, 2, iterations=2, slow=("node1", "node3", 0))
    records["ranks"] = [[0, 1]] * len(records)
    with open(tmp_path / "results.jsonl", "w") as fh:
        for rec in records[list(REQUIRED_KEYS)].to_dict("records"):
            rec = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in rec.items()}
            for key in ("size", "rail"):
                rec[key] = None if rec[key] is None else int(rec[key])
            fh.write(json.dumps(rec) + "\n")
    try:
        frame = load_records(tmp_path)
    except NotImplementedError:
        pytest.skip("load_records is not implemented yet")
    finding = dict(FINDINGS[1], kind="outlier", unit="Gbit/s", size=SIZES[-1])
    analysis = Analysis(run=make_run(nodes, 2), profile=load_profile("local"), records=frame,
                        findings=[finding], drains=list(DRAINS))
    html = render(analysis, tmp_path).read_text(encoding="utf-8")
    heat = _section(html, "heatmaps")
    assert len(re.findall(r"<img ", heat)) == 4 and "1 below threshold" in heat
    assert "median of 2 iterations" in heat
    findings = _section(html, "findings")
    assert "bandwidth at 2MiB" in findings and "outlier" in findings and "18 Gbit/s" in findings
    assert "Failed and warned measurements" in findings and "node1 → node3, rail 0" in findings
    coll = _section(html, "collectives")
    assert "rail 0" in coll and "rail 1" in coll
    assert "<img" in _section(html, "burnin")


# --- the switch tree per rail -----------------------------------------------------------

def _fabric(nodes: list[str], leaves: int, spines=("spine1", "spine2"), shared: bool = True):
    from acceptance.switchtree.fabric import Fabric, Tree, Uplink

    per = -(-len(nodes) // leaves)
    lv = {f"leaf{i + 1}": nodes[i * per:(i + 1) * per] for i in range(leaves)}
    tree = Tree(lv, [Uplink(leaf, s, f"{j + 1}", f"{i + 1}") for i, leaf in enumerate(lv)
                     for j, s in enumerate(spines)])
    return Fabric(source="/etc/slurm/topology.conf", format="topology.conf", trees={None: tree} if shared
                  else {0: tree, 1: Tree(dict(lv), list(tree.uplinks))})


def _network_finding(scope, switch, rail, severity="fail", uplinks=(), alternatives=()):
    return {"severity": severity, "scope": scope, "node": None, "rail": rail, "peer": None,
            "metric": "bandwidth", "value": 20.0, "expected": 45.0, "evidence": [], "kind": "bound",
            "message": f"{scope} {switch} on rail {rail} slow", "switch": switch, "uplinks": list(uplinks),
            "alternatives": list(alternatives)}


def _alts(html: str) -> list[str]:
    return [a.replace("&amp;", "&") for a in re.findall(r'<img src="data:image/png;base64,[^"]+" alt="([^"]*)"', html)]


def test_switch_tree_shades_the_named_leaf_and_uplink(tmp_path):
    nodes = [f"node{i:02d}" for i in range(1, 33)]
    analysis = Analysis(run=make_run(nodes, 2), profile=load_profile("local"),
                        records=make_records(nodes[:4], 2), findings=[], drains=[])
    analysis.fabric = _fabric(nodes, 4)
    analysis.findings = [
        _network_finding("switch", "leaf2", 0),
        _network_finding("uplink", "leaf3", 1, severity="warn",
                         uplinks=[{"leaf": "leaf3", "spine": "spine2", "leaf_port": "2", "spine_port": "3"}],
                         alternatives=[{"scope": "switch", "switch": "spine2", "node": None, "rail": 1}]),
        dict(FINDINGS[0], scope="node", node="node05", rail=None),
    ]
    html = render(analysis, tmp_path).read_text(encoding="utf-8")
    assert '<a href="#fabric">' in html
    heat, section = html.index('<section id="heatmaps">'), html.index('<section id="fabric">')
    assert heat < section < html.index('<section id="sweeps">')
    trees = _section(html, "fabric")
    assert "topology.conf" in trees and "<h3>rail 0</h3>" in trees and "<h3>rail 1</h3>" in trees
    alts = _alts(trees)
    assert len(alts) == 2  # one figure per rail: the shading differs
    rail0, rail1 = alts
    assert rail0.startswith("rail 0: switch tree (2 spines, 4 leaves, 8 uplinks, 32 nodes)")
    assert "Shaded red (fail): leaf leaf2 (fail switch finding)" in rail0 and "uplink leaf" not in rail0
    assert "node node05" in rail0 and "node node05" in rail1  # rail None: every rail
    assert "Shaded amber (warn): uplink leaf3 → spine2 (ports 2–3)" in rail1 and "leaf2" not in rail1
    assert "cannot tell" in rail1 and "spine spine2 (cannot be told from a warn uplink finding)" in rail1
    assert "leaf leaf2" in trees[trees.index("<h3>rail 0</h3>"):trees.index("<h3>rail 1</h3>")]
    for png in _pngs(trees):
        assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_switch_tree_rails_drawn_alike_share_a_figure(tmp_path):
    nodes = [f"node{i:02d}" for i in range(1, 9)]
    analysis = Analysis(run=make_run(nodes, 4), profile=load_profile("local"), records=pd.DataFrame(),
                        findings=[_network_finding("switch", "leaf1", 2)], drains=[])
    analysis.fabric = _fabric(nodes, 2, spines=("spine1",))
    trees = _section(render(analysis, tmp_path).read_text(encoding="utf-8"), "fabric")
    assert [h for h in re.findall(r"<h3>([^<]*)</h3>", trees)] == ["rails 0-1,3", "rail 2"]
    same, shaded = _alts(trees)
    assert "Nothing shaded" in same and "same tree and the same shading" in same
    assert "leaf leaf1" in shaded


def test_switch_tree_of_a_large_fabric_collapses_unshaded_leaves(tmp_path):
    nodes = [f"gpu{i:04d}" for i in range(1, 1025)]
    analysis = Analysis(run=make_run(nodes[:8], 1), profile=load_profile("local"), records=pd.DataFrame(),
                        findings=[_network_finding("switch", "leaf60", 0)], drains=[])
    analysis.fabric = _fabric(nodes, 64, spines=tuple(f"spine{i}" for i in range(1, 9)), shared=False)
    analysis.fabric.trees.pop(1)
    trees = _section(render(analysis, tmp_path).read_text(encoding="utf-8"), "fabric")
    (alt,) = _alts(trees)
    assert "64 leaves" in alt and "leaf leaf60" in alt and "32 unshaded leaves drawn as one box" in alt
    (png,) = _pngs(trees)
    assert len(png) < 600_000


def test_no_switch_tree_without_a_fabric(tmp_path):
    analysis = small_analysis()
    analysis.findings.append(_network_finding("switch", "leaf2", 0))
    assert analysis.fabric is None
    html = render(analysis, tmp_path).read_text(encoding="utf-8")
    assert 'id="fabric"' not in html and "#fabric" not in html and "Switch tree" not in html
    assert len(re.findall(r"<img ", _section(html, "heatmaps"))) == 4


def test_every_pairwise_latency_panel_the_catalog_declares_is_drawn():
    """Read, atomic and GPU write latency are drawn as write latency is (catalog Metric.panel), each
    percentile against size, or side by side at the one size measured."""
    from acceptance.report import sections
    rows = []
    for suite, metric in (("rdma_write", "latency_p50"), ("rdma_write", "read_latency_p99"),
                          ("rdma_write", "atomic_latency_p50"), ("gpudirect", "latency_p99")):
        for size in (8, 64):
            rows.append({"suite": suite, "metric": metric, "value": 2.0, "unit": "us", "size": size, "rail": 0.0,
                         "src": "n1", "dst": "n2", "threshold": np.nan})
    rows.append({"suite": "gpudirect", "metric": "pingpong_latency_p50", "value": 1.0, "unit": "us", "size": 8,
                 "rail": 0.0, "src": "n1", "dst": "n2", "threshold": np.nan})
    drawn = sections.sweeps(pd.DataFrame(rows))
    alts = " | ".join(f["figure"]["alt"] for f in drawn["figures"])
    for title in ("write latency latency_p50", "read latency read_latency_p99", "atomic latency atomic_latency_p50",
                  "GPU write latency latency_p99"):
        assert f"{title} against message size" in alts, alts
    assert not [n for n in drawn["notes"] if "latency" in n]
    none = sections.sweeps(pd.DataFrame(rows[:0], columns=list(rows[0])))
    assert not none["figures"] and "No pairwise latency records (write, read, atomic, GPU write) in this run." in none["notes"]
