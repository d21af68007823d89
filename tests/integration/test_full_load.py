"""A node that gives way only under full load, on real MPI ranks (6 virtual nodes x 2 rails, the mpi engine).

node3's writes wait before every flush while two of its ranks are writing at once (tests/data/fullload):
with every rail at once its NICs are slow on both rails, one rail at a time they are not. The run must
measure node3 again both ways (records of phase "full" and "alone") and name node3, and only node3,
with a full-load finding and its drain line.
"""

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "fullload"

PROFILE = """extends = "local"
[run]
hang_timeout = "300s"
[sweep]
min_size = "1KiB"
max_size = "8KiB"
factor = 8
bytes_per_size = "1MiB"
max_iters = 100
# node3 runs 100x slower whenever both its ranks are busy, in screening too: cap its sizes
max_time_per_size = "0.3s"
"""


def test_a_node_slow_only_with_every_nic_busy_is_named(acceptance_cli, tmp_path):
    profile = tmp_path / "tiny.toml"
    profile.write_text(PROFILE)
    busy = tmp_path / "busy"
    busy.mkdir()
    p = acceptance_cli("run", "--nodes", "6", "--ranks-per-node", "2", "--profile", str(profile), "--no-report",
                       "--", "-m", "p2p", "-k", "write_bandwidth", timeout=600,
                       env={"PYTHONPATH": str(DATA), "ACCEPTANCE_TEST_COLLAPSE": "node3",
                            "ACCEPTANCE_TEST_BUSY_DIR": str(busy)})
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-4000:]
    folder = Path(next(line.split(" ", 2)[2] for line in p.stdout.splitlines() if line.startswith("run folder: ")))
    recs = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    load = [r for r in recs if r.get("phase") in ("full", "alone") and r["metric"] == "bandwidth"
            and "node3" in r["nodes"]]
    assert {(r["phase"], r["rail"]) for r in load} == {("full", 0), ("full", 1), ("alone", 0), ("alone", 1)}
    findings = json.loads((folder / "findings.json").read_text())
    failing = [(f["scope"], f["node"], f["kind"]) for f in findings if f["severity"] == "fail"]
    measured = sorted((r["phase"], r["rail"], r["size"], r["nodes"], round(r["value"], 3)) for r in load)
    assert failing == [("node", "node3", "full_load")], (findings, measured)
    drain = (folder / "drain.txt").read_text().split("\n")
    assert [line.split()[2] for line in drain if line] == ["NodeName=node3"]
