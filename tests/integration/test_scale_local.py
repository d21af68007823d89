"""The plugin and the schedule at 32 virtual nodes x 2 rails: 64 local ranks, the mpi engine, tiny sizes.

Screening (screen:3) on every rail at once, then confirmation; every node meets 3 partners per rail in
write bandwidth, and 2 in the sampled tests (rdma_write.sample_rounds = 2: atomic latency here),
both rails' rounds overlap in time, run.json keeps the schedule and its seed, and a healthy run of 64
ranks sharing two cores passes (what is slow only because the cores are shared is confirmed transient).
"""

import json
from collections import Counter
from pathlib import Path

from acceptance.runtime.screening import screening_sizes
from acceptance.rules.profile import load_profile

PROFILE = """extends = "local"
[run]
hang_timeout = "300s"
[sweep]
min_size = "8B"
max_size = "4KiB"
factor = 8
bytes_per_size = "64KiB"
max_iters = 20
[latency]
iters = 200
warmup = 10
[rdma_write]
pattern = "screen:3"
sample_rounds = 2
"""


def test_screening_32_nodes_2_rails_at_once(acceptance_cli, tmp_path):
    profile = tmp_path / "tiny.toml"
    profile.write_text(PROFILE)
    p = acceptance_cli("run", "--nodes", "32", "--ranks-per-node", "2", "--profile", str(profile), "--no-report",
                       "--", "-m", "p2p", "-k", "write_bandwidth or atomic_latency", timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    folder = Path(next(line.split(" ", 2)[2] for line in p.stdout.splitlines() if line.startswith("run folder: ")))
    run = json.loads((folder / "run.json").read_text())
    assert run["rail_mode"] == "concurrent"
    assert run["schedule"]["pattern"] == "screen:3" and run["schedule"]["rounds"] == 3
    assert isinstance(run["schedule"]["seed"], int)
    recs = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    bw = [r for r in recs if r["suite"] == "rdma_write" and r["metric"] == "bandwidth" and r.get("phase") == "screen"]
    # Screening measures the smallest size and the sizes with bounds only.
    assert {r["size"] for r in bw} == set(screening_sizes(load_profile(profile)))
    for rail in (0, 1):
        # Every node in one pair per round: 3 partners, each pair measured in both directions.
        ends = Counter(n for r in bw if r["rail"] == rail and r["size"] == 8 for n in r["nodes"])
        assert set(ends) == {f"node{i}" for i in range(1, 33)} and set(ends.values()) == {6}, ends
        # The sampled test walks 2 of the 3 rounds: 2 partners, both directions; the same rounds on every rank.
        atomic = [r for r in recs if r["metric"] == "atomic_latency_p50" and r["rail"] == rail
                  and r.get("phase") == "screen"]
        ends = Counter(n for r in atomic for n in r["nodes"])
        assert set(ends) == {f"node{i}" for i in range(1, 33)} and set(ends.values()) == {4}, ends
        assert len({r["round"] for r in atomic}) == 2
    spans = {rail: (min(r["start"] for r in bw if r["rail"] == rail), max(r["time"] for r in bw if r["rail"] == rail))
             for rail in (0, 1)}
    assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1], spans
    findings = json.loads((folder / "findings.json").read_text())
    assert not [f for f in findings if f["severity"] == "fail"], findings
    # Each rail's confirmation (where it had suspects) measured pairs that screened clean beside them:
    # the yardstick its suspects were judged against (analysis.confirmed).
    for rail, metric in {(r["rail"], r["metric"]) for r in recs if r.get("phase") == "confirm"
                         and r["metric"] in ("bandwidth", "atomic_latency_p50")}:
        refs = [r for r in recs if r.get("phase") == "reference" and r["rail"] == rail and r["metric"] == metric]
        assert refs, f"rail {rail}: {metric}'s confirmation without references"
