"""The perftest cross-check suite on real MPI ranks, through `acceptance run`.

This machine has perftest but no RDMA device, so the suite must skip, with the same
reason on every rank. With fake per-node sysfs trees (ACCEPTANCE_SYSFS_ROOT=<tmp>/{node})
and stand-in tools (ACCEPTANCE_PERFTEST_DIR, tests/data/perftest/fake_perftest.py: a real
TCP listen/connect, the report files of tests/data/perftest) it runs end to end.
"""
import json
import re
import sys
from itertools import permutations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fakesysfs

DATA = Path(__file__).resolve().parents[1] / "data" / "perftest"
ARGS = ("run", "--nodes", "2", "--ranks-per-node", "1", "--", "-m", "p2p", "-k", "perftest", "-rs")


def folder_of(p) -> Path:
    return Path(re.search(r"^run folder: (\S+)$", p.stdout, re.MULTILINE).group(1))


def install_fakes(folder: Path, options: str = "") -> Path:
    """ib_write_bw writes perftest 6.06's (legacy) file, ib_write_lat 6.29's standard JSON."""
    folder.mkdir(parents=True)
    log = folder / "calls.log"
    for tool, report in (("ib_write_bw", "ib_write_bw_ndr_legacy.json"), ("ib_write_lat", "ib_write_lat_ndr.json")):
        script = folder / tool
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{DATA / "fake_perftest.py"}" '
                          f'--fake-report "{DATA / report}" --fake-log "{log}" {options} -- "$@"\n')
        script.chmod(0o755)
    return log


def fake_nodes(root: Path, nodes=("node1", "node2")) -> str:
    for node in nodes:
        fakesysfs.ib_device(root / node, "mlx5_0")
    return f"{root}/{{node}}"


def test_skips_on_every_rank_without_an_rdma_device(acceptance_cli, tmp_path):
    p = acceptance_cli(*ARGS, env={"ACCEPTANCE_SYSFS_ROOT": str(tmp_path / "empty-sys")})
    assert p.returncode == 3, p.stdout + p.stderr  # the only check skipped: incomplete, not a pass
    reason = (f"no RDMA device on node1, node2 (nothing under {tmp_path / 'empty-sys'}/class/infiniband): "
              f"perftest needs one on every node")
    assert "1 skipped" in p.stdout and reason in p.stdout, p.stdout
    # Rank 1's own session skipped with the same reason (a rank-local skip would fail as inconsistent).
    assert reason in (folder_of(p) / "logs" / "rank-1.log").read_text()
    assert not [r for r in (folder_of(p) / "results.jsonl").read_text().splitlines() if '"perftest"' in r]


def test_skips_when_a_node_lacks_the_tools(acceptance_cli, tmp_path):
    empty = tmp_path / "nothing"
    empty.mkdir()
    env = {"ACCEPTANCE_SYSFS_ROOT": fake_nodes(tmp_path / "sys"), "ACCEPTANCE_PERFTEST_DIR": str(empty)}
    p = acceptance_cli(*ARGS, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (f"perftest not in ACCEPTANCE_PERFTEST_DIR={empty} on node1, node2: install perftest "
            f"(no ib_write_bw, ib_write_lat)") in p.stdout, p.stdout
    # A profile that gates write latency on ib_write_lat cannot pass without it: the suite fails.
    required = tmp_path / "required.toml"
    required.write_text('extends = "local"\n[perftest]\nrequired = true\n')
    p = acceptance_cli(*ARGS[:1], "--profile", str(required), *ARGS[1:], env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    assert (f"profile required gates write latency on ib_write_lat (perftest.required), which cannot run here: "
            f"perftest not in ACCEPTANCE_PERFTEST_DIR={empty} on node1, node2") in p.stdout, p.stdout


def test_runs_end_to_end_with_stand_in_tools_and_records_both_directions(acceptance_cli, tmp_path):
    log = install_fakes(tmp_path / "bin")
    env = {"ACCEPTANCE_SYSFS_ROOT": fake_nodes(tmp_path / "sys"), "ACCEPTANCE_PERFTEST_DIR": str(tmp_path / "bin")}
    p = acceptance_cli(*ARGS, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed" in p.stdout, p.stdout
    recs = [json.loads(line) for line in (folder_of(p) / "results.jsonl").read_text().splitlines()]
    mine = [r for r in recs if r["suite"] == "perftest"]
    assert {(tuple(r["nodes"]), r["metric"]) for r in mine} == {
        (d, m) for d in permutations(("node1", "node2"))
        for m in ("bandwidth", "latency_p50", "latency_p99", "latency_p999", "latency_avg")}
    assert len(mine) == 10
    assert all(r["engine"] == "perftest" and r["rail"] == 0 and r["verdict"] == "info" and r["threshold"] is None
               and r["test"] == "suites/test_perftest.py::test_perftest_crosscheck[rails]" for r in mine)
    # The writer (client) records: ranks follow nodes.
    assert all(r["ranks"] == ([0, 1] if r["nodes"] == ["node1", "node2"] else [1, 0]) for r in mine)
    bw = [r for r in mine if r["metric"] == "bandwidth"]
    # The local profile's sweep ends at 4 MiB: asked for with -s, reported back by the tool.
    assert all(r["value"] == 391.62 and r["unit"] == "Gbit/s" and r["size"] == 4 * 2**20 and r["samples"] == 5000
               and r["detail"] == "ib_write_bw average; peak 392.14 Gbit/s, 5000 iterations, 0.005836 Mpps"
               for r in bw)
    p50 = [r for r in mine if r["metric"] == "latency_p50"]
    assert all(r["value"] == 1.04 and r["unit"] == "us" and r["size"] == 8 and r["samples"] == 99997 for r in p50)
    assert {r["value"] for r in mine if r["metric"] == "latency_p999"} == {2.31}
    # Each direction ran a server (no host argument) and a client (the server's host last) per tool.
    calls = [line.split() for line in log.read_text().splitlines()]
    assert sorted(c[0] for c in calls) == ["client"] * 4 + ["server"] * 4
    for c in calls:
        args = c[2:]
        assert args[args.index("-d") + 1] == "mlx5_0" and "-F" in args and "--report_gbits" in args
        assert any(a.startswith("--out_json_file=") for a in args)
    assert len({c[c.index("-p") + 1] for c in calls}) == 4  # one TCP port per test and direction
    # The stand-ins are said: in run.json, on the terminal, and in the report's banner.
    overrides = json.loads((folder_of(p) / "run.json").read_text())["overrides"]
    assert overrides == {"ACCEPTANCE_SYSFS_ROOT": f"{tmp_path / 'sys'}/{{node}}",
                         "ACCEPTANCE_PERFTEST_DIR": str(tmp_path / "bin"),
                         "virtual nodes": "2 nodes x 1 ranks on one host (local emulation)"}
    assert "note: measured with data sources overridden (ACCEPTANCE_SYSFS_ROOT, ACCEPTANCE_PERFTEST_DIR" in p.stdout
    # The report sets perftest's numbers beside the harness's (none here: only perftest ran).
    html = (folder_of(p) / "report.html").read_text()
    assert "Not this cluster's own data sources" in html and "ib_write_bw / ib_write_lat come from" in html
    section = html[html.index('<section id="crosscheck">'):html.index('<section id="counters">')]
    assert "write bandwidth" in section and "391.6 Gbit/s" in section and "4MiB" in section, section


def test_a_failing_tool_fails_the_test_naming_pair_rail_and_error(acceptance_cli, tmp_path):
    install_fakes(tmp_path / "bin", options="--fake-fail server")
    env = {"ACCEPTANCE_SYSFS_ROOT": fake_nodes(tmp_path / "sys"), "ACCEPTANCE_PERFTEST_DIR": str(tmp_path / "bin")}
    p = acceptance_cli(*ARGS, env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    for pair in ("node1 -> node2", "node2 -> node1"):
        for tool in ("ib_write_bw", "ib_write_lat"):
            assert re.search(rf"{pair} rail 0: {tool}: {tool} server: exited 1 before listening on TCP port \d+: "
                             r"Couldn't get context for the device \| Unable to init the socket connection",
                             p.stdout), p.stdout
    # No measurement recorded; the failure itself is, and is a finding (both nodes: the job).
    recs = [json.loads(line) for line in (folder_of(p) / "results.jsonl").read_text().splitlines()]
    assert [(r["metric"], r["nodes"]) for r in recs if r["suite"] == "perftest"] == [
        ("test_failed", ["node1", "node2"])]
    found = json.loads((folder_of(p) / "findings.json").read_text())
    test = [f for f in found if f["kind"] == "test"]
    assert len(test) == 1 and test[0]["scope"] == "cluster" and "ib_write_bw server: exited 1" in test[0]["message"]


def test_the_profile_gates_ib_write_lat_on_the_job_traffic_class(acceptance_cli, tmp_path):
    """perftest.latency_p50_max holds ib_write_lat's median (1.04 us in the stand-in's report) and fails
    it above; both tools run at the job's traffic class (NCCL_IB_TC, GRH --tclass)."""
    log = install_fakes(tmp_path / "bin")
    strict = tmp_path / "strict.toml"
    strict.write_text('extends = "local"\n[perftest]\nlatency_p50_max = "1us"\n')
    env = {"ACCEPTANCE_SYSFS_ROOT": fake_nodes(tmp_path / "sys"), "ACCEPTANCE_PERFTEST_DIR": str(tmp_path / "bin"),
           "NCCL_IB_TC": "106"}
    p = acceptance_cli(*ARGS[:1], "--profile", str(strict), *ARGS[1:], env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    recs = [json.loads(line) for line in (folder_of(p) / "results.jsonl").read_text().splitlines()]
    p50 = [r for r in recs if r["suite"] == "perftest" and r["metric"] == "latency_p50"]
    assert len(p50) == 2 and all(r["value"] == 1.04 and r["threshold"] == 1.0 and r["verdict"] == "fail" for r in p50)
    assert all(r["verdict"] == "info" for r in recs if r["suite"] == "perftest" and r["metric"] == "latency_p99")
    calls = [line.split() for line in log.read_text().splitlines()]
    assert calls and all("--tclass=106" in c for c in calls), calls


def test_the_cross_check_runs_in_perftest_rounds_of_the_schedule(acceptance_cli, tmp_path):
    """4 nodes meet in 3 rounds; perftest.rounds = 1 measures the pairs of one of them, both ways, and
    every node in it (the plan counts the same: runtime.estimate)."""
    log = install_fakes(tmp_path / "bin")
    one = tmp_path / "one.toml"
    one.write_text('extends = "local"\n[perftest]\nrounds = 1\n')
    nodes = [f"node{k}" for k in range(1, 5)]
    env = {"ACCEPTANCE_SYSFS_ROOT": fake_nodes(tmp_path / "sys", nodes), "ACCEPTANCE_PERFTEST_DIR": str(tmp_path / "bin")}
    p = acceptance_cli("run", "--profile", str(one), "--nodes", "4", *ARGS[3:], env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [json.loads(line) for line in (folder_of(p) / "results.jsonl").read_text().splitlines()]
    pairs = {tuple(r["nodes"]) for r in recs if r["suite"] == "perftest" and r["metric"] == "bandwidth"}
    assert len(pairs) == 4 and {n for pair in pairs for n in pair} == set(nodes), pairs  # 2 pairs, both ways
    assert sorted(line.split()[0] for line in log.read_text().splitlines()) == ["client"] * 8 + ["server"] * 8
