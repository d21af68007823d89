"""`acceptance report`, `compare`, burn-in and drain, as an operator runs them."""
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic  # noqa: E402

from acceptance.records.results import make_record  # noqa: E402

FAKE_SLURM = Path(__file__).resolve().parents[1] / "fakeslurm"  # scontrol for drains without slurmctld

# How `acceptance run` says a duration (acceptance.cli.run.format_duration): "42 s", "1 min 21 s", "2 h 5 min", whatever the
# machine's speed made it.
DURATION = r"(?:\d+ d \d+ h|\d+ h \d+ min|\d+ min \d+ s|[\d.e+-]+ s|under 0\.01 s)"  # rules.units.human_seconds


def test_report_on_a_hand_made_folder_localizes_and_prints_drain_lines(acceptance_cli, tmp_path):
    src = synthetic.make_run(tmp_path / "full", nodes=8, rails=4, slow_nic=("node05", 2))
    run = tmp_path / "handmade"
    run.mkdir()
    (run / "results.jsonl").write_text((src / "results.jsonl").read_text())
    (run / "run.json").write_text(json.dumps({"run_id": "handmade", "profile": synthetic.SYNTHETIC_PROFILE,
                                              "complete": True}))
    p = acceptance_cli("report", str(run))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "verdict: FAIL (1 failing finding; 1 confirmed failing, 0 warnings)" in p.stdout, p.stdout
    assert re.search(r"FAIL nic +node05's NIC on rail 2", p.stdout), p.stdout
    drain = 'scontrol update NodeName=node05 State=DRAIN Reason="acceptance: '
    assert drain in p.stdout
    assert (run / "drain.txt").read_text().startswith(drain)
    findings = json.loads((run / "findings.json").read_text())
    assert [(f["scope"], f["node"], f["rail"]) for f in findings] == [("nic", "node05", 2)]
    assert (run / "report.html").stat().st_size > 10_000


def _append(run: Path, nodes: list) -> int:
    """Append a preflight record naming `nodes` to results.jsonl; returns its line number."""
    path = run / "results.jsonl"
    lines = path.read_text().count("\n")
    with open(path, "a") as fh:
        fh.write(json.dumps(make_record(test="suites/test_preflight.py::test_ranks", suite="preflight",
                                        metric="ranks", value=1, unit="count", nodes=nodes, ranks=[0])) + "\n")
    return lines + 1


def test_report_refuses_a_hostlist_node_name_naming_the_line(acceptance_cli, tmp_path):
    """scontrol would expand gpu[001-512] and drain 512 nodes: an input error (2), never a drain line."""
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, slow_nic=("node03", 1), latency=False,
                             collectives=False, memreg=False)
    results = (run / "results.jsonl").read_text()
    (run / "results.jsonl").write_text(results.replace('"node03"', '"gpu[001-512]"'))
    line = next(i for i, text in enumerate(results.splitlines(), 1) if '"node03"' in text)
    p = acceptance_cli("report", str(run), "--drain")
    assert p.returncode == 2, p.stdout + p.stderr
    assert (f"acceptance: {run / 'results.jsonl'}: line {line}: node name 'gpu[001-512]' is not a valid Slurm "
            f"node name (hostlist syntax '[')") in p.stderr
    assert "scontrol" not in p.stdout + p.stderr and "Traceback" not in p.stderr
    assert not (run / "drain.txt").exists() and not (run / "findings.json").exists()


def test_report_refuses_a_node_the_runs_topology_does_not_know(acceptance_cli, tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, collectives=False, memreg=False)
    line = _append(run, ["node01", "node17"])
    p = acceptance_cli("report", str(run))
    assert p.returncode == 2, p.stdout + p.stderr
    assert (f"acceptance: {run / 'results.jsonl'}: line {line}: node 'node17' is not in the run's topology "
            f"({run / 'run.json'} topology.nodes: 4 nodes, node01, node02, node03, node04)") in p.stderr


def test_report_on_a_hand_made_folder_without_topology_takes_any_slurm_name(acceptance_cli, tmp_path):
    src = synthetic.make_run(tmp_path / "full", nodes=6, rails=2, slow_nic=("node05", 1), latency=False,
                             collectives=False, memreg=False)
    run = tmp_path / "handmade"
    run.mkdir()
    (run / "results.jsonl").write_text((src / "results.jsonl").read_text().replace('"node05"', '"gpu-05.rack2"'))
    (run / "run.json").write_text(json.dumps({"run_id": "handmade", "profile": synthetic.SYNTHETIC_PROFILE,
                                              "complete": True}))
    _append(run, [])  # a record without nodes
    p = acceptance_cli("report", str(run))
    assert p.returncode == 1, p.stdout + p.stderr
    assert (run / "drain.txt").read_text().startswith("scontrol update NodeName=gpu-05.rack2 State=DRAIN ")


def test_report_drain_executes_only_when_asked(acceptance_cli, tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=4, slow_nic=("node05", 2))
    log = tmp_path / "scontrol.log"
    env = {"PATH": f"{FAKE_SLURM}:{os.environ['PATH']}", "FAKE_SCONTROL_LOG": str(log),
           "FAKE_SCONTROL_STATE": str(tmp_path / "nodes.json")}
    acceptance_cli("report", str(run), env=env)
    assert not log.exists()
    p = acceptance_cli("report", str(run), "--drain", env=env)
    assert "drained node05: acceptance: rdma_write: NIC rail 2 " in p.stdout, p.stdout
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0] == ["show", "node", "-o", "node05"]
    assert calls[1][:3] == ["update", "NodeName=node05", "State=DRAIN"]
    assert calls[1][3].startswith("Reason=acceptance: rdma_write: NIC rail 2 ") and len(calls[1]) == 4
    # Drained by an admin meanwhile: a later --drain leaves the node and its reason as they are.
    (tmp_path / "nodes.json").write_text(json.dumps({"node05": {"state": "IDLE+DRAIN", "reason": "maintenance"}}))
    p = acceptance_cli("report", str(run), "--drain", env=env)
    assert "node05 is already drained by someone else (maintenance); left as it is" in p.stdout, p.stdout
    assert json.loads((tmp_path / "nodes.json").read_text())["node05"]["reason"] == "maintenance"


def test_compare_names_the_regressed_link(acceptance_cli, tmp_path):
    base = synthetic.make_run(tmp_path / "base", nodes=6, rails=2, seed=1)
    now = synthetic.make_run(tmp_path / "now", nodes=6, rails=2, seed=1, slow_link=("node02", "node04", 1, 0.88))
    p = acceptance_cli("compare", str(now), str(base))
    assert p.returncode == 1, p.stdout + p.stderr
    regressions = [line for line in p.stdout.splitlines() if line.endswith("REGRESSION")]
    # Only that link regressed (bandwidth down 12%, latency up by as much), in both directions.
    assert regressions and all(" rail 1 " in line for line in regressions)
    assert all(set(re.findall(r"node\d+", line)) == {"node02", "node04"} for line in regressions)
    assert any("bandwidth" in line and "(-12" in line for line in regressions)
    same = acceptance_cli("compare", str(base), str(base))
    assert same.returncode == 0 and " 0 regressions" in same.stdout


def test_compare_refuses_runs_judged_differently_unless_forced(acceptance_cli, tmp_path):
    """Another profile, another engine for a suite, other nodes: exit 2 naming each; --force compares."""
    base = synthetic.make_run(tmp_path / "base", nodes=6, rails=2, seed=1)
    now = synthetic.make_run(tmp_path / "now", nodes=7, rails=2, seed=1, profile="local")
    for folder, engine in ((base, "verbs"), (now, "mpi")):
        meta = json.loads((folder / "run.json").read_text())
        meta["engines"] = {"rdma_write": {"engine": engine, "why": "test"}}
        (folder / "run.json").write_text(json.dumps(meta))
    p = acceptance_cli("compare", str(now), str(base))
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{now} and the baseline {base} are not comparable:" in p.stderr
    assert "  profile: local here, synthetic in the baseline" in p.stderr
    assert "  engine of rdma_write: mpi here, verbs in the baseline" in p.stderr
    assert "  nodes: 7 nodes here, 6 in the baseline; only here: node07" in p.stderr
    assert "(--force compares them anyway)" in p.stderr and "regressions" not in p.stdout
    p = acceptance_cli("report", str(now), "--baseline", str(base))
    assert p.returncode == 2 and "not comparable" in p.stderr
    forced = acceptance_cli("compare", str(now), str(base), "--force")
    assert forced.returncode in (0, 1), forced.stdout + forced.stderr
    assert forced.stdout.startswith("acceptance: comparing anyway (--force), although:\n  profile: local here")
    assert "metrics compared with" in forced.stdout


def test_report_rejects_a_folder_that_is_not_a_run(acceptance_cli, tmp_path):
    p = acceptance_cli("report", str(tmp_path))
    assert p.returncode == 2
    assert f"{tmp_path}: not a run folder (run.json missing)" in p.stderr


def test_burn_in_iterations_repeat_the_suites(acceptance_cli, tmp_path):
    # A short sweep: what is tested is the repetition, not the measurement (burn-in's analysis: unit tests).
    (tmp_path / "short.toml").write_text('extends = "local"\n[sweep]\nmax_size = "64KiB"\n')
    p = acceptance_cli("run", "--iterations", "2", "--nodes", "2", "--ranks-per-node", "1",
                       "--profile", str(tmp_path / "short.toml"), "--", "-m", "p2p", "-k", "write_bandwidth")
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(rf"burn-in iteration 1/2 done \(exit 0\), elapsed {DURATION}, remaining ~{DURATION}\n", p.stdout)
    assert re.search(rf"burn-in iteration 2/2 done \(exit 0\), elapsed {DURATION}, remaining 0 s\n", p.stdout)
    folder = Path(re.search(r"^run folder: (\S+)$", p.stdout, re.M).group(1))
    iterations = {json.loads(line)["iteration"] for line in (folder / "results.jsonl").read_text().splitlines()}
    assert iterations == {0, 1}
    meta = json.loads((folder / "run.json").read_text())
    assert meta["iterations"] == 2 and meta["iteration_exit_codes"] == [0, 0] and meta["complete"] is True
    assert (folder / "report.html").exists()


def test_burn_in_duration_stops_by_itself(acceptance_cli):
    p = acceptance_cli("run", "--duration", "1s", "--nodes", "2", "--ranks-per-node", "1",
                       "--", "-m", "preflight")
    assert p.returncode == 0, p.stdout + p.stderr
    # However many iterations fit in the second, the last one says nothing remains.
    lines = re.findall(rf"burn-in iteration (\d+) done \(exit 0\), elapsed {DURATION}, remaining (0 s|~{DURATION})\n",
                       p.stdout)
    assert lines and lines[-1][1] == "0 s" and [int(k) for k, _ in lines] == list(range(1, len(lines) + 1))
