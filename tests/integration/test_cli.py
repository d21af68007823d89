"""The `acceptance` command as a user runs it: real mpiexec, real run folders."""
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_folder_from(out: str) -> Path:
    match = re.search(r"^run folder: (\S+)$", out, re.M)
    assert match, out
    return Path(match.group(1))


def test_run_passes_pytest_args_and_layout(acceptance_cli):
    p = acceptance_cli("run", "--nodes", "3", "--ranks-per-node", "1", "--", "-m", "preflight", "-k", "layout")
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"1 passed, \d+ deselected", p.stdout)
    meta = json.loads((run_folder_from(p.stdout) / "run.json").read_text())
    assert meta["topology"]["nodes"] == {"node1": [0], "node2": [1], "node3": [2]}


def test_run_failing_check_exits_1(acceptance_cli, tmp_path):
    strict = tmp_path / "strict.toml"
    strict.write_text('extends = "local"\n[preflight]\nmemlock_min = "unlimited"\n')
    # --no-report: the same verdict and findings, no report.html until `acceptance report` writes it.
    p = acceptance_cli("run", "--no-report", "--profile", str(strict), "--", "-k", "memlock")
    folder = run_folder_from(p.stdout)
    assert (folder / "findings.json").exists() and not (folder / "report.html").exists()
    assert f"report: not written (--no-report); `acceptance report {folder}` writes it" in p.stdout
    if "unlimited" in subprocess.run(["sh", "-c", "ulimit -l"], capture_output=True, text=True).stdout:
        assert p.returncode == 0
        return
    assert p.returncode == 1, p.stdout + p.stderr
    assert "RLIMIT_MEMLOCK (ulimit -l) is" in p.stdout
    assert "failed on ranks [0@node1, 1@node1, 2@node2, 3@node2] of 4" in p.stdout
    assert "exit 1 (a check failed)" in p.stdout
    assert acceptance_cli("report", str(folder)).returncode == 1 and (folder / "report.html").exists()


def test_run_hang_exits_3(acceptance_cli):
    suite = ROOT / "tests" / "mpi_suites" / "suite_hang.py"
    p = acceptance_cli("run", "--hang-timeout", "3", "--suites", str(suite), "--", f"--confcutdir={suite.parent}",
                       env={"HANG_RANK": "3", "HANG_MODE": "sleep"})
    assert p.returncode == 3, p.stdout + p.stderr
    assert "HANG: rank [3@node2] did not reach" in p.stderr
    assert "run INCOMPLETE" in p.stderr
    meta = json.loads((run_folder_from(p.stdout) / "run.json").read_text())
    assert meta["missing_ranks"] == [3]
    # What every rank measured of the test in flight is kept (issue 42: records per round, not per test).
    folder = run_folder_from(p.stdout)
    probes = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if '"probe"' in line]
    assert sorted(r["ranks"][0] for r in probes if r["test"].endswith("test_one_rank_sleeps")) == [0, 1, 2, 3]
    assert meta["salvaged"] == [{"iteration": 0, "records": 4, "ranks": 4}]
    assert "acceptance: kept 4 records of the test in flight from 4 rank(s)" in p.stdout
    assert not list((folder / "logs").glob("records-rank-*"))
    # Only node2's rank did not arrive: node2 is lost, named with why, and its drain line written.
    assert [(f["node"], f["kind"]) for f in json.loads((folder / "findings.json").read_text())
            if f["severity"] == "fail"] == [("node2", "lost")]
    assert 'NodeName=node2 State=DRAIN Reason="acceptance: lost: hung: rank 3 on it' in (folder / "drain.txt").read_text()
    # What was measured before the hang still gets its report, and its verdict is never a pass.
    assert re.search(r"^verdict: INCOMPLETE \(HANG: rank \[3@node2\] did not reach", p.stdout, re.M), p.stdout
    assert (meta["verdict"], meta["exit_code"]) == ("incomplete", 3)


def test_a_rank_that_crashes_after_the_results_are_in_makes_the_run_incomplete(acceptance_cli):
    # Every rank agreed on exit 0, then rank 1 exits 7 at its very end (mpiexec may report it, or the
    # signal it then stopped the others with): the launcher's status wins.
    suite = ROOT / "tests" / "mpi_suites" / "suite_crash_at_exit.py"
    p = acceptance_cli("run", "--suites", str(suite), "--", f"--confcutdir={suite.parent}", env={"CRASH_RANK": "1"})
    assert p.returncode == 3, p.stdout + p.stderr
    assert re.search(r"acceptance: the launcher exited (\d+) after the ranks agreed on exit 0: a rank crashed",
                     p.stderr), p.stderr
    meta = json.loads((run_folder_from(p.stdout) / "run.json").read_text())
    assert (meta["complete"], meta["exit_code"]) == (False, 3) and meta["launcher_exit_code"] not in (0, None)
    assert re.search(r"^verdict: INCOMPLETE \(the launcher exited \d+", p.stdout, re.M), p.stdout


def test_a_launcher_that_does_not_exit_after_the_run_ended_is_stopped(tmp_path):
    from acceptance.cli.run import final_code, run_child
    from acceptance.records.results import RunFolder
    folder = RunFolder.create(tmp_path, "r")
    folder.write_run({"end": None, "complete": False, "exit_code": None})
    finish = (f"from acceptance.records.results import RunFolder; "
              f"RunFolder({str(folder.path)!r}).update_run(end='now', complete=True, exit_code=0)")
    launcher = [sys.executable, "-c", f"import time; {finish}; time.sleep(120)"]
    rc, overran = run_child(launcher, {"PATH": "/usr/bin:/bin"}, [], folder, end_bound=2)
    assert rc != 0 and overran.startswith("the launcher had not exited 2 s after the ranks agreed")
    assert final_code(folder, rc, overran) == 3
    assert folder.read_run()["lost"] == overran


def test_a_hang_timeout_of_zero_or_less_is_refused(acceptance_cli):
    for value in ("-5", "0", "0s"):
        p = acceptance_cli("run", f"--hang-timeout={value}")
        assert p.returncode == 2, (value, p.stdout + p.stderr)
        assert "argument --hang-timeout: expected a positive duration" in p.stderr


def test_malformed_profile_exits_2_before_launching(acceptance_cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[run]\nhang_timout = 5\n")
    p = acceptance_cli("run", "--profile", str(bad))
    assert p.returncode == 2
    assert f"{bad}: run.hang_timout: unknown key" in p.stderr
    assert "did you mean 'hang_timeout'" in p.stderr
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def test_bad_toml_exits_2(acceptance_cli, tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("[run\n")
    p = acceptance_cli("profiles", "show", str(bad))
    assert p.returncode == 2
    assert f"{bad}: invalid TOML" in p.stderr


def test_profiles_list_and_show(acceptance_cli):
    listing = acceptance_cli("profiles")
    assert listing.returncode == 0 and re.search(r"^local\s+Built-in default", listing.stdout, re.M)
    show = acceptance_cli("profiles", "show", "local")
    assert show.returncode == 0
    assert 'hang_timeout = "1min"' in show.stdout and 'memlock_min = "8MiB"' in show.stdout


def test_doctor_one_line_per_capability(acceptance_cli):
    p = acceptance_cli("doctor")
    assert p.returncode == 0
    lines = p.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["mpi", "launcher", "slurm", "verbs", "perftest", "gpu", "nccl"]
    assert all(re.match(r"^\w+: (usable|unavailable) — .+", line) for line in lines), lines
    assert lines[0].startswith("mpi: usable — MPICH")
    # No RDMA device here: the verbs engine says why, concretely.
    assert re.match(r"^verbs: unavailable — (get_device_list\(\) failed: .+ \(no /sys/class/infiniband|"
                    r"pyverbs not importable|no RDMA devices \()",
                    lines[3]), lines[3]


def test_python_dash_m_and_help(tmp_path):
    p = subprocess.run([sys.executable, "-m", "acceptance", "run", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for word in ("--launcher", "--nodes", "--ranks-per-node", "--profile", "exit codes", "-- -m"):
        assert word in p.stdout


def test_pytest_suites_directly_without_launcher(tmp_path):
    """`pytest suites -m preflight` as a user types it, single process, no launcher."""
    p = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "suites"), "-m", "preflight",
                        "--run-dir", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"}, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "3 passed" in p.stdout
    assert json.loads((tmp_path / "run" / "run.json").read_text())["complete"] is True


def test_pytest_suites_directly_under_mpiexec(tmp_path):
    mpiexec = Path(sys.executable).parent / "mpiexec"
    p = subprocess.run([str(mpiexec), "-n", "4", sys.executable, "-m", "mpi4py", "-m", "pytest",
                        str(ROOT / "suites"), "-m", "preflight", "--run-dir", str(tmp_path / "run")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("3 passed") == 1  # only rank 0 reports
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["topology"]["world_size"] == 4 and meta["launcher"] == "mpiexec"
    # Without emulation all ranks share this host: one node, rails 0..3.
    assert meta["topology"]["rails"] == [0, 1, 2, 3]


def test_a_launcher_that_stopped_the_others_after_an_agreed_failure_keeps_the_failure(tmp_path):
    """srun --kill-on-bad-exit ends the step at the first rank exiting 1: 143 is not a crash then,
    unless srun says the first task to end did something else."""
    from acceptance.cli import lost
    from acceptance.cli.run import final_code
    from acceptance.records.results import RunFolder
    folder = RunFolder.create(tmp_path, "r")
    folder.write_run({"complete": True, "exit_code": 1})
    assert final_code(folder, 143, None, [lost.from_line("srun: error: node1: task 0: Exited with exit code 1")]) == 1
    assert final_code(folder, 1, None, []) == 1
    assert folder.read_run()["complete"] is True
    assert final_code(folder, 143, None, [lost.from_line("srun: error: node2: task 3: Killed")]) == 3
    assert folder.read_run()["lost"].startswith("the launcher exited 143 after the ranks agreed on exit 1 "
                                                "(srun: the first to end: Killed)")


def test_a_hardware_profile_never_measures_with_another_engine(acceptance_cli, tmp_path):
    """h100-ndr400's bounds are written for the verbs engine (run.engines): on a machine without RDMA the
    RDMA-write suite fails naming the engine and why, and no record of it comes from the mpi engine."""
    p = acceptance_cli("run", "--no-report", "--nodes", "2", "--ranks-per-node", "2", "--profile", "h100-ndr400",
                       "--", "-m", "p2p", "-k", "write_bandwidth")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "bounds for rdma_write are written for the verbs engine (run.engines), which cannot run here" in p.stdout
    folder = run_folder_from(p.stdout)
    recs = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert not [r for r in recs if r["suite"] == "rdma_write" and r["metric"] != "test_failed"]
    assert json.loads((folder / "run.json").read_text())["engines"]["rdma_write"]["engine"] is None


def test_sigterm_stops_every_rank_and_keeps_the_run_folder(tmp_path):
    """`acceptance run` killed by SIGTERM (timeout, systemd, a wrapper) stops its MPI job: no rank is
    left running, the run is INCOMPLETE and run.json says why."""
    import os
    import signal
    import time
    suite = ROOT / "tests" / "mpi_suites" / "suite_hang.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ACCEPTANCE_", "PMI", "PYTEST_"))}
    env.update(HANG_RANK="3", HANG_MODE="sleep")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "acceptance"), "run", "--no-report", "--hang-timeout", "600", "--suites",
                             str(suite), "--", f"--confcutdir={suite.parent}"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        folder = None
        while time.monotonic() < deadline:  # wait for the ranks to reach the test that hangs
            found = sorted((tmp_path / "reports").glob("*/run.json"))
            if found and not folder:
                folder = found[0].parent
            if folder and subprocess.run(["pgrep", "-f", str(folder)], capture_output=True).stdout.count(b"\n") >= 4:
                break
            time.sleep(0.5)
        assert folder is not None, "the run never started"
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out + err
    assert "acceptance was sent SIGTERM: it stopped the MPI job (every rank)" in err, err
    left = subprocess.run(["pgrep", "-f", str(folder)], capture_output=True, text=True).stdout.split()
    assert left == [] or all(not os.path.exists(f"/proc/{pid}") for pid in left), left
    meta = json.loads((folder / "run.json").read_text())
    assert meta["complete"] is False and "SIGTERM" in meta["lost"]
