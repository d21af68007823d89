"""The embedded default run (`acceptance run`, no arguments), once for every test here and the browser
test's report: it is the longest run of the unit tests, and these tests read the same run folder three
ways. The two modules are one xdist group (tests/conftest.py), so one worker runs it once."""
import json
import re
from collections import Counter
from itertools import permutations
from pathlib import Path

from acceptance.analysis import analyze
from acceptance.rules import catalog

# default_run: the embedded default's one run, shared with the browser test (tests/conftest.py).


def folder_of(p) -> Path:
    return Path(re.search(r"^run folder: (\S+)$", p.stdout, re.M).group(1))


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def test_every_rail_pair_direction_and_scope(default_run):
    p = default_run
    recs = records(folder_of(p))
    assert {r["suite"] for r in recs} == {"preflight", "memreg", "rdma_write", "collective", "incast"}
    # Every record is a catalog metric, in the catalog's unit.
    for r in recs:
        entry = catalog.metrics(r["suite"], r["metric"])
        assert entry and r["unit"] == entry[0].unit, r
    # Every measurement carries a threshold and a verdict (informational metrics aside).
    # Every gated measurement carries a threshold and a verdict (a sender's share of an incast is not gated).
    gated = [r for r in recs if r["metric"] in ("bandwidth", "latency_p50", "latency_p99", "busbw",
                                                "errors", "reg_time", "rss_growth") and r["suite"] != "incast"]
    assert gated and all(r["threshold"] is not None and r["verdict"] in ("pass", "fail") for r in gated)
    assert all(r["verdict"] == "pass" for r in gated)

    bw = [r for r in recs if r["metric"] == "bandwidth"]
    # 2 rails x both directions of the single pair, every size of the sweep 8B..4MiB.
    directions = {(r["rail"], tuple(r["nodes"])) for r in bw}
    assert directions == {(rail, d) for rail in (0, 1) for d in permutations(("node1", "node2"))}
    sizes = sorted({r["size"] for r in bw})
    assert sizes[0] == 8 and sizes[-1] == 4 * 2**20 and len(sizes) == 20
    assert all(r["value"] > 0 and r["unit"] == "Gbit/s" and r["engine"] == "mpi" for r in bw)
    # The target of every transfer verified it: one errors record per bandwidth record.
    assert Counter(r["metric"] for r in recs if r["suite"] == "rdma_write"
                   and "bandwidth" in r["test"])["errors"] == len([r for r in bw if r["suite"] == "rdma_write"])
    # Every verified operation was counted: ops on every data check, none failed.
    checks = [r for r in recs if r["metric"] in catalog.DATA_ERROR_NAMES]
    assert checks and all(r["ops"] > 0 and r["ops_failed"] == 0 and r["ops_missing"] == 0 for r in checks)
    lat = [r for r in recs if r["metric"] in ("latency_p50", "latency_p99", "latency_p999")]
    assert {(r["rail"], tuple(r["nodes"]), r["metric"]) for r in lat} == {
        (rail, d, m) for rail in (0, 1) for d in permutations(("node1", "node2"))
        for m in ("latency_p50", "latency_p99", "latency_p999")}
    p999 = [r for r in lat if r["metric"] == "latency_p999"]
    assert all(r["samples"] == 10000 and "fewer than the 100000" in r["detail"] for r in p999)

    coll = [r for r in recs if r["suite"] == "collective" and r["metric"] == "busbw"]
    scopes = {(r["op"], r["scope"], r["rail"], tuple(r["nodes"])) for r in coll}
    for op in ("allreduce", "alltoall"):
        assert (op, "world", None, ("node1", "node2")) in scopes
        assert (op, "rail", 0, ("node1", "node2")) in scopes
        assert (op, "rail", 1, ("node1", "node2")) in scopes
        assert (op, "node", None, ("node1",)) in scopes and (op, "node", None, ("node2",)) in scopes
    # Every rail at once (run.rail_mode concurrent): one test for both rails, whose pairs overlap in time.
    assert {r["test"] for r in bw if r["suite"] == "rdma_write"} == {"suites/test_rdma_write.py::test_write_bandwidth[rails]"}
    writes = [r for r in bw if r["suite"] == "rdma_write"]
    spans = {rail: (min(r["start"] for r in writes if r["rail"] == rail), max(r["time"] for r in writes if r["rail"] == rail))
             for rail in (0, 1)}
    assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1], spans
    assert json.loads((folder_of(p) / "run.json").read_text())["rail_mode"] == "concurrent"
    assert all(r["value"] == 0 for r in recs if r["suite"] == "collective" and r["metric"] == "errors")

    reg = [r for r in recs if r["metric"] == "reg_time"]
    assert sorted({r["ranks"][0] for r in reg}) == [0, 1, 2, 3]

    # Read and atomic latency in both directions of each rail; every atomic counter exact.
    for op in ("read", "atomic"):
        assert {(r["rail"], tuple(r["nodes"])) for r in recs if r["metric"] == f"{op}_latency_p99"} == {
            (rail, d) for rail in (0, 1) for d in permutations(("node1", "node2"))}
    # The origin checks what every fetch-and-add returned; the target, that its counter is exact.
    atomic_checks = [r for r in recs if r["metric"] == "atomic_errors"]
    assert len(atomic_checks) == 8 and all(r["value"] == 0 and r["size"] == 8 for r in atomic_checks)
    assert sorted(r["ops"] for r in atomic_checks)[:4] == [1] * 4  # the four counters
    # Which engine measured each suite, and why (no RDMA device here: not the verbs engine).
    engines = json.loads((folder_of(p) / "run.json").read_text())["engines"]
    assert set(engines) == {"memreg", "rdma_write", "collective", "incast"}
    assert all(e["engine"] == "mpi" and e["why"].startswith("mpi engine (MPICH") for e in engines.values())
    assert "passed over: verbs: " in engines["rdma_write"]["why"] and "passed over: verbs: " in engines["memreg"]["why"]
    assert "passed over: nccl: cupy not importable" in engines["collective"]["why"]  # verbs does no collectives
    assert "passed over: verbs: " in engines["incast"]["why"]  # incast runs on verbs where RDMA devices are

    # Incast with 2 nodes: one sender per rail, each node the receiver once; no fairness from 1 sender.
    inc = [r for r in recs if r["suite"] == "incast"]
    assert {(r["rail"], r["nodes"][0]) for r in inc if r["metric"] == "aggregate_bandwidth"} == {
        (rail, n) for rail in (0, 1) for n in ("node1", "node2")}
    assert {(r["rail"], tuple(r["nodes"])) for r in inc if r["metric"] == "bandwidth"} == {
        (rail, d) for rail in (0, 1) for d in permutations(("node1", "node2"))}
    assert {r["metric"] for r in inc} == {"bandwidth", "aggregate_bandwidth", "errors", "loaded_latency_p50",
                                          "loaded_latency_p99", "loaded_latency_p999", "loaded_latency_max"}


def test_a_complete_run_folder(default_run):
    p = default_run
    assert "4 local ranks as 2 virtual nodes x 2 rails" in p.stdout
    folder = folder_of(p)
    assert folder.parent == p.cwd / "reports"
    assert sorted(x.name for x in folder.iterdir()) == [
        "drain.txt", "findings.json", "junit.xml", "links.npz", "logs", "report.html", "results.jsonl", "run.json"]
    assert re.search(r"^verdict: PASS \([\d,]+ measurements within bounds; 0 confirmed failing, 0 warnings\)$",
                     p.stdout, re.M), p.stdout
    assert json.loads((folder / "findings.json").read_text()) == []
    meta = json.loads((folder / "run.json").read_text())
    assert meta["complete"] is True and meta["exit_code"] == 0
    assert meta["command"] == "acceptance run"
    assert meta["profile"]["name"] == "local"
    assert meta["topology"]["world_size"] == 4
    assert set(meta["identity"]) == set(meta["topology"]["nodes"])  # each node's physical identity
    assert meta["start"].endswith("Z") and meta["end"].endswith("Z")
    records = [json.loads(x) for x in (folder / "results.jsonl").read_text().splitlines()]
    assert {r["suite"] for r in records} >= {"preflight", "memreg", "rdma_write", "collective"}
    memlock = [r for r in records if r["metric"] == "memlock"]
    assert sorted(r["ranks"][0] for r in memlock) == [0, 1, 2, 3]


def test_the_analysis_agrees_with_the_suites_and_finds_nothing(default_run):
    folder = folder_of(default_run)
    a = analyze(folder)
    assert a.findings == [], [f["message"] for f in a.findings]
    assert len(a.records) > 100 and set(a.records["suite"].astype(str)) >= {"rdma_write", "collective", "memreg"}
    # our verdicts agree with the ones the suites wrote
    written = [json.loads(line)["verdict"] for line in (folder / "results.jsonl").read_text().splitlines()]
    assert list(a.records["verdict"].astype(str)) == written
