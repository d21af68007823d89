"""The memreg, rdma_write and collectives suites on real MPI ranks, through `acceptance run`."""
import json
import re
from itertools import permutations
from pathlib import Path



def folder_of(p) -> Path:
    return Path(re.search(r"^run folder: (\S+)$", p.stdout, re.M).group(1))


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def profile(tmp_path: Path, text: str) -> str:
    """A profile over `local` that measures only what the test looks at: the default sweep's large
    sizes move 64 MiB each, and this file's runs share two cores with the rest of `make test`."""
    path = tmp_path / "small.toml"
    path.write_text('extends = "local"\n' + text)
    return str(path)


SMALL = '[sweep]\nmax_size = "64KiB"\nfactor = 8\n[latency]\niters = 2000\n'


def test_serial_rail_mode_measures_one_rail_after_another(acceptance_cli, tmp_path):
    """--rail-mode serial (for diagnosis): one test per rail, rail 0's pairs done before rail 1's begin."""
    small = tmp_path / "small.toml"
    small.write_text('extends = "local"\n[sweep]\nmin_size = "8B"\nmax_size = "64KiB"\nfactor = 8\n')
    p = acceptance_cli("run", "--profile", str(small), "--", "-m", "p2p", "-k", "write_bandwidth",
                       env={"ACCEPTANCE_RAIL_MODE": "serial"})
    assert p.returncode == 0, p.stdout + p.stderr
    bw = [r for r in records(folder_of(p)) if r["metric"] == "bandwidth"]
    assert {(r["test"].rsplit("[", 1)[1], r["rail"]) for r in bw} == {("rail0]", 0), ("rail1]", 1)}
    assert max(r["time"] for r in bw if r["rail"] == 0) <= min(r["start"] for r in bw if r["rail"] == 1)
    assert json.loads((folder_of(p) / "run.json").read_text())["rail_mode"] == "serial"
    bad = acceptance_cli("run", "--", "-m", "p2p", "-k", "write_bandwidth", env={"ACCEPTANCE_RAIL_MODE": "both"})
    assert bad.returncode == 2 and "must be one of concurrent, serial, got 'both'" in bad.stdout + bad.stderr, (
        bad.stdout + bad.stderr)


def test_one_pair_on_one_rail(acceptance_cli, tmp_path):
    p = acceptance_cli("run", "--profile", profile(tmp_path, SMALL), "--nodes", "2", "--ranks-per-node", "1",
                       "--", "-m", "p2p")
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"test_write_bandwidth\[rails?0?\]", p.stdout) is None  # quiet: only the summary line
    assert "6 passed" in p.stdout  # write / read bandwidth, write / read / atomic latency, incast
    recs = records(folder_of(p))
    assert {(r["rail"], tuple(r["nodes"])) for r in recs if r["metric"] == "bandwidth"} == {
        (0, ("node1", "node2")), (0, ("node2", "node1"))}


def test_odd_node_count_measures_every_pair_with_byes(acceptance_cli, tmp_path):
    p = acceptance_cli("run", "--profile", profile(tmp_path, SMALL), "--nodes", "3", "--ranks-per-node", "1",
                       "--", "-m", "p2p", "-k", "bandwidth")
    assert p.returncode == 0, p.stdout + p.stderr
    pairs = {tuple(r["nodes"]) for r in records(folder_of(p)) if r["metric"] == "bandwidth"}
    assert pairs == set(permutations(("node1", "node2", "node3"), 2))


def test_flipped_bit_is_caught_with_its_offset(acceptance_cli, tmp_path):
    p = acceptance_cli("run", "--profile", profile(tmp_path, '[sweep]\nmax_size = "64KiB"\n'), "--nodes", "2",
                       "--ranks-per-node", "1", "--", "-m", "p2p", "-k", "bandwidth",
                       env={"ACCEPTANCE_TEST_FLIP_BIT": "4096:3"})
    assert p.returncode == 1, p.stdout + p.stderr
    # The interposer flips the byte at offset 4096 of every batch's region: one write of each batch.
    assert re.search(r"node1 -> node2 rail 0, size 8192 B: \d+ of \d+ writes arrived wrong: \d+ wrong bytes?; first: "
                     r"batch 0, slot 0: first wrong byte at offset 4096 of 8192: expected 0x[0-9a-f]{2}, "
                     r"got 0x[0-9a-f]{2} \(1 wrong byte\)", p.stdout), p.stdout
    errors = [r for r in records(folder_of(p)) if r["metric"] == "errors" and r["verdict"] == "fail"]
    # Every size above the offset, both directions; smaller sizes are intact.
    assert errors and all(r["size"] > 4096 and "offset 4096" in r["detail"] for r in errors)


def test_rounds_record_each_size_once_and_still_catch_a_flipped_bit(acceptance_cli, tmp_path):
    # sweep.rounds = 2: each direction's sweep runs twice and each size records its best round, once;
    # the target checks every round's own pattern.
    twice = tmp_path / "twice.toml"
    twice.write_text('extends = "local"\n[sweep]\nrounds = 2\nmax_size = "64KiB"\n')
    p = acceptance_cli("run", "--profile", str(twice), "--nodes", "2", "--ranks-per-node", "1", "--",
                       "-m", "p2p", "-k", "bandwidth", env={"ACCEPTANCE_TEST_FLIP_BIT": "4096:3"})
    assert p.returncode == 1, p.stdout + p.stderr
    recs = [r for r in records(folder_of(p)) if r["suite"] == "rdma_write" and r["size"] is not None]
    keys = [(tuple(r["nodes"]), r["size"], r["metric"]) for r in recs]
    assert len(keys) == len(set(keys)), keys
    sizes = sorted({r["size"] for r in recs})
    assert sizes[-1] == 65536
    for nodes in (("node1", "node2"), ("node2", "node1")):
        assert {r["size"] for r in recs if tuple(r["nodes"]) == nodes and r["metric"] == "bandwidth"} == set(sizes)
    errors = [r for r in recs if r["metric"] == "errors" and r["verdict"] == "fail"]
    assert errors and all(r["size"] > 4096 and "offset 4096" in r["detail"] and r["samples"] == 2 for r in errors)


def test_bound_violation_names_pair_rail_size_value_and_bound(acceptance_cli, tmp_path):
    strict = profile(tmp_path, '[sweep]\nmin_size = "512KiB"\n[rdma_write]\nbandwidth_min = { "1MiB" = "100000Gbit/s" }\n')
    p = acceptance_cli("run", "--profile", strict, "--nodes", "2", "--ranks-per-node", "1",
                       "--", "-m", "p2p", "-k", "bandwidth")
    assert p.returncode == 1
    assert re.search(r"node1 -> node2 rail 0, size 1048576 B: write bandwidth [\d.]+ Gbit/s < bound 100000 Gbit/s",
                     p.stdout), p.stdout
    failed = [r for r in records(folder_of(p)) if r["metric"] == "bandwidth" and r["verdict"] == "fail"]
    assert {r["size"] for r in failed} == {2**20, 2**21, 2**22} and all(r["threshold"] == 100000 for r in failed)


def test_single_process_skips_what_needs_two_nodes(acceptance_cli):
    p = acceptance_cli("run", "--nodes", "1", "--ranks-per-node", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "passed" in p.stdout and "skipped" in p.stdout
    p = acceptance_cli("run", "--nodes", "1", "--ranks-per-node", "1", "--", "-rs", "-m", "p2p or collective")
    assert "point-to-point writes need at least 2 nodes; this run has 1" in p.stdout
    assert "allreduce over world needs at least 2 ranks in the communicator: this run has one rank" in p.stdout


def test_incast_records_fairness_and_catches_unfairness_and_corruption(acceptance_cli, tmp_path):
    strict = tmp_path / "fair.toml"
    # Perfect fairness cannot happen: the bound makes every incast of 2 or more senders fail.
    strict.write_text('extends = "local"\n[incast]\nsenders = 2\nfairness_min = 1.01\nduration = "0.2s"\n')
    p = acceptance_cli("run", "--profile", str(strict), "--nodes", "3", "--ranks-per-node", "1",
                       "--", "-m", "congestion", env={"ACCEPTANCE_TEST_FLIP_BIT": "100"})
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(r"incast of 2 into node1 rail 0: fairness [\d.]+ < bound 1.01 \(slowest node[23] [\d.]+ "
                     r"Gbit/s, fastest node[23] [\d.]+ Gbit/s\)", p.stdout), p.stdout
    assert re.search(r"incast of 2 into node2 rail 0: data from node1: 1 of \d+ writes arrived wrong: 1 wrong byte; "
                     r"first: batch 0, slot 0: first wrong byte at offset 100", p.stdout), p.stdout
    recs = [r for r in records(folder_of(p)) if r["suite"] == "incast"]
    fair = [r for r in recs if r["metric"] == "fairness"]
    assert sorted(r["nodes"][0] for r in fair) == ["node1", "node2", "node3"]
    assert all(0 < r["value"] <= 1 and r["verdict"] == "fail" and r["threshold"] == 1.01 for r in fair)
    # Each sender of each round recorded its own bandwidth: 3 rounds x 2 senders.
    assert len([r for r in recs if r["metric"] == "bandwidth"]) == 6
    errors = [r for r in recs if r["metric"] == "errors"]
    assert len(errors) == 6 and all(r["verdict"] == "fail" for r in errors)
    findings = json.loads((folder_of(p) / "findings.json").read_text())
    # Unfair on every node: one cluster finding, not three nodes to drain.
    assert [f["scope"] for f in findings if f["metric"] == "fairness"] == ["cluster"]


def test_gpudirect_suite_skips_on_every_rank_without_a_gpu(acceptance_cli):
    p = acceptance_cli("run", "--", "-m", "gpudirect", "-rs")
    assert p.returncode == 3, p.stdout + p.stderr  # every check skipped: nothing measured, never a pass
    assert "4 skipped" in p.stdout and "inconsistent" not in p.stdout, p.stdout  # every rail at once: one test each
    assert re.search(r"SKIPPED \[1\] .*test_gpudirect.py:\d+: no usable GPU on node1, node2: cupy not importable",
                     p.stdout), p.stdout
    assert "no NVIDIA GPU on any node" in p.stdout  # the preflight's support check carries the marker


def test_a_dead_link_fails_its_pairs_and_the_rail_goes_on(mpi_pytest):
    """3 nodes x 1 rail, every link to node2 failing: the node1 <-> node3 pair is still measured in its
    round, the two dead pairs are recorded unmeasured (null, fail) and named, and the job ends (exit 1)."""
    run = mpi_pytest("suite_dead_link.py", n=3, nodes=3, timeout=120)
    assert run.rc == 1, run.out
    assert "node1 <-> node2 rail 0: bandwidth not measured: RuntimeError: 8 work requests got no completion" in run.out
    assert "node2 <-> node3 rail 0: bandwidth not measured" in run.out
    recs = records(run.folder)
    dead = [r for r in recs if r["value"] is None and r["metric"] == "bandwidth"]
    assert sorted(tuple(r["nodes"]) for r in dead) == [("node1", "node2"), ("node2", "node3")]
    assert all(r["verdict"] == "fail" and r["samples"] == 0 and "not measured" in r["detail"] for r in dead)
    measured = {tuple(r["nodes"]) for r in recs if r["metric"] == "bandwidth" and r["value"] is not None}
    assert measured == {("node1", "node3"), ("node3", "node1")}


def test_eight_virtual_nodes_measure_every_pair_and_every_collective(acceptance_cli, tmp_path):
    """8 nodes x 1 rank: 7 rounds of 4 pairs per test, ranks idle between steps, a deadline far shorter
    than a test; every one of the 28 pairs is measured both ways and every collective runs."""
    small = tmp_path / "small.toml"
    small.write_text('extends = "local"\n[run]\nhang_timeout = "30s"\n'
                     '[sweep]\nmin_size = "8B"\nmax_size = "64KiB"\nfactor = 8\n[latency]\niters = 2000\nwarmup = 100\n')
    p = acceptance_cli("run", "--nodes", "8", "--ranks-per-node", "1", "--profile", str(small), "--",
                       "-m", "p2p or collective", timeout=600)
    assert p.returncode in (0, 1), p.stdout + p.stderr  # a noisy 2-core box may raise a fleet outlier
    assert "HANG" not in p.stdout + p.stderr
    recs = records(folder_of(p))
    nodes = [f"node{i}" for i in range(1, 9)]
    for metric in ("bandwidth", "latency_p50"):
        measured = {tuple(r["nodes"]) for r in recs if r["metric"] == metric and r["suite"] == "rdma_write"
                    and r["value"] is not None}
        assert measured == set(permutations(nodes, 2)), metric
    coll = {(r["op"], r["scope"], tuple(r["nodes"])) for r in recs
            if r["suite"] == "collective" and r["metric"] == "busbw"}
    for op in ("allreduce", "alltoall"):
        assert (op, "world", tuple(nodes)) in coll and (op, "rail", tuple(nodes)) in coll
    assert not [r for r in recs if r["metric"] == "errors" and r["value"] != 0]
