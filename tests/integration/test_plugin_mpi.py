"""The collective plugin's behaviours, on real `mpiexec -n 4` runs of the suites in tests/mpi_suites."""
import json
import re
import xml.etree.ElementTree as ET

import pytest


def junit_cases(folder):
    root = ET.parse(folder / "junit.xml").getroot()
    return {c.get("name"): c for c in root.iter("testcase")}


def test_outcomes_are_merged_at_rank0(mpi_pytest):
    run = mpi_pytest("suite_outcomes.py", "-rA")
    out = run.out
    assert run.rc == 1, out
    # Reported once, by rank 0, naming the failing rank and its node.
    # The summary repeats the text only when pytest sees CI set, so count in the failures section.
    failures = out.split("short test summary info")[0]
    assert failures.count("boom on rank 1") == 2, out  # the assertion line and its 'E' explanation, once
    assert "failed on rank [1@node1] of 4" in out
    assert re.search(r"FAILED .*test_fails_on_rank1_only", out)
    # A skip on one rank only fails as inconsistent, naming the odd rank.
    assert re.search(r"FAILED .*test_skips_on_rank2_only", out)
    assert "skipped on rank [2@node2]: Skipped: only rank 2 lacks the device" in out
    # A fixture skip on one rank is a setup error, and the test body never ran anywhere.
    assert re.search(r"ERROR .*test_fixture_skip_on_rank3", out)
    # Consistent skip and xfail stay what they are; later tests still run on every rank.
    assert re.search(r"SKIPPED .*no RDMA devices on any rank", out)
    assert re.search(r"XFAIL .*test_xfails_everywhere", out)
    assert re.search(r"PASSED .*test_runs_after_failures", out)
    assert "2 failed, 2 passed, 1 skipped, 1 xfailed, 1 error" in out

    files = sorted(p.name for p in run.folder.rglob("*.xml"))
    assert files == ["junit.xml"]
    cases = junit_cases(run.folder)
    assert cases["test_fails_on_rank1_only"].find("failure") is not None
    props = {p.get("name"): p.get("value") for p in cases["test_fails_on_rank1_only"].iter("property")}
    assert props["failed_ranks"] == "1@node1"
    logs = sorted(p.name for p in (run.folder / "logs").iterdir())
    assert logs == ["landed.jsonl", "rank-1.log", "rank-2.log", "rank-3.log"]
    # Rank 0 marked each test as it wrote its records (what a relaunch after a lost node leaves out).
    assert "test_runs_after_failures" in (run.folder / "logs" / "landed.jsonl").read_text()
    assert "test session starts" in (run.folder / "logs" / "rank-3.log").read_text()

    meta = run.run_json()
    assert meta["complete"] is True and meta["exit_code"] == 1 and meta["missing_ranks"] == []
    assert meta["topology"]["nodes"] == {"node1": [0, 1], "node2": [2, 3]}
    assert [r["rail"] for r in meta["topology"]["ranks"]] == [0, 1, 0, 1]
    records = [json.loads(line) for line in (run.folder / "results.jsonl").read_text().splitlines()]
    probes = [r for r in records if r["metric"] == "probe"]
    # in the order the ranks' records reached rank 0 (RunFolder.stage_lines), each rank's once
    assert sorted((r["ranks"], r["nodes"], r["rail"], r["value"]) for r in probes) == [
        ([0], ["node1"], 0, 0), ([1], ["node1"], 1, 10), ([2], ["node2"], 0, 20), ([3], ["node2"], 1, 30)]


def test_passing_suite_exits_0_with_complete_run_folder(mpi_pytest):
    run = mpi_pytest("suite_pass.py")
    assert run.rc == 0, run.out
    assert "2 passed" in run.out
    meta = run.run_json()
    assert meta["complete"] is True and meta["exit_code"] == 0
    assert set(meta["software"]) == {"node1", "node2"}
    assert (run.folder / "junit.xml").exists()


def test_exit_on_first_failure_stops_every_rank_at_the_same_test(mpi_pytest):
    run = mpi_pytest("suite_outcomes.py", "-x")
    assert run.rc == 1, run.out
    assert "1 failed, 1 passed" in run.out
    for r in (1, 2, 3):
        assert "1 failed, 1 passed" in (run.folder / "logs" / f"rank-{r}.log").read_text()


@pytest.mark.parametrize("hang_rank, mode, missing", [
    (2, "sleep", [2]),          # rank 2 never reaches the sync point; the others wait there
    (0, "sleep", [0]),          # rank 0 itself is the straggler: its watchdog reports
    (2, "barrier", [0, 1, 2, 3]),  # everyone stuck in the test: the location tells the culprit
])
def test_hang_ends_the_job_with_exit_3_naming_the_rank(mpi_pytest, hang_rank, mode, missing):
    timeout = 4
    run = mpi_pytest("suite_hang.py", "--hang-timeout", str(timeout),
                     env={"HANG_RANK": str(hang_rank), "HANG_MODE": mode})
    # Ended by the watchdog (exit 3 and its HANG report), not by the hung rank's 300 s sleep: no wall time
    # is asserted (a loaded machine is slower), mpi_pytest's own timeout bounds a job that never ends.
    assert run.rc == 3, run.out
    labels = ", ".join(f"{r}@node{r // 2 + 1}" for r in missing)
    assert re.search(rf"HANG: ranks? \[{re.escape(labels)}\] did not reach "
                     rf"\S*suite_hang.py::test_one_rank_sleeps \(call\) within {timeout} s", run.out), run.out
    # The sleeping rank's location is named, set apart from the others.
    assert re.search(rf"rank \[{hang_rank}@node\d\] at \S*suite_hang.py:\d+ in test_one_rank_sleeps: time.sleep",
                     run.out), run.out
    meta = run.run_json()
    assert meta["complete"] is False and meta["exit_code"] == 3 and meta["missing_ranks"] == missing
    cases = junit_cases(run.folder)
    assert "HANG" in cases["test_one_rank_sleeps"].find("failure").get("message")
    assert cases["test_before_the_hang"].find("failure") is None
    assert "test_never_reached" not in cases


def test_hang_report_quotes_the_rank_that_failed_before_a_collective(mpi_pytest):
    # Rank 1 raises before the Barrier that ranks 0, 2, 3 wait in: the classic MPI test deadlock.
    run = mpi_pytest("suite_hang.py", "--hang-timeout", "3", env={"HANG_RANK": "1", "HANG_MODE": "raise"})
    assert run.rc == 3, run.out
    assert "HANG: ranks [0@node1, 2@node2, 3@node2] did not reach" in run.out
    assert "rank [1@node1] arrived having failed" in run.out
    assert "RuntimeError: rank 1 failed before the collective" in run.out
    assert "rank 1 failed before the collective" in run.run_json()["hang"]


def test_hang_timeout_marker_overrides_the_option(mpi_pytest):
    # The marked test sleeps 2 s on one rank with --hang-timeout 1: allowed by hang_timeout(30).
    run = mpi_pytest("suite_hang.py", "--hang-timeout", "1", "-k", "marker or never",
                     env={"HANG_RANK": "1", "HANG_MODE": "marker"})
    assert run.rc == 0, run.out
    assert "2 passed" in run.out


def test_progress_fixture_restarts_the_hang_deadline(mpi_pytest):
    run = mpi_pytest("suite_hang.py", "--hang-timeout", "2", "-k", "progress", env={"HANG_MODE": "progress"})
    assert run.rc == 0, run.out
    assert "1 passed" in run.out


@pytest.mark.parametrize("idle", ["sync", "wait"])
def test_a_test_longer_than_the_deadline_passes_when_every_step_is_inside_it(mpi_pytest, idle):
    # 6 steps of 0.5 s on ranks 1 and 3 under --hang-timeout 1.5 (the test takes twice that); ranks 0
    # and 2 have nothing to do and wait at the sync point or inside the test: the job's progress
    # keeps their deadline.
    run = mpi_pytest("suite_hang.py", "--hang-timeout", "1.5", "-k", "busy_elsewhere",
                     env={"HANG_MODE": "elsewhere", "HANG_IDLE": idle})
    assert run.rc == 0, run.out
    assert "1 passed" in run.out and "HANG" not in run.out


@pytest.mark.parametrize("idle", ["sync", "wait"])
def test_a_rank_stuck_in_one_step_is_named_while_the_others_idle(mpi_pytest, idle):
    timeout = 2
    run = mpi_pytest("suite_hang.py", "--hang-timeout", str(timeout), "-k", "busy_elsewhere",
                     env={"HANG_MODE": "elsewhere", "HANG_IDLE": idle, "HANG_RANK": "3", "STEPS": "2"})
    assert run.rc == 3, run.out
    missing = "3@node2" if idle == "sync" else "0@node1, 1@node1, 2@node2, 3@node2"
    assert re.search(rf"HANG: ranks? \[{missing}\] did not reach \S*test_busy_elsewhere \(call\) within {timeout} s",
                     run.out), run.out
    assert re.search(r"rank \[3@node2\] at \S*suite_hang.py:\d+ in test_busy_elsewhere: time.sleep\(300\)",
                     run.out), run.out
    assert run.run_json()["complete"] is False


def test_below_thread_multiple_the_watchdog_keeps_out_of_mpi_and_still_ends_the_job(mpi_pytest):
    # Rank 0 is the straggler, so its watchdog thread reports: at MPI_THREAD_SERIALIZED it makes no
    # MPI call, writes run.json and junit.xml and exits; the launcher ends the other ranks.
    run = mpi_pytest("suite_hang.py", "--hang-timeout", "3", "-k", "before_the_hang or one_rank_sleeps",
                     env={"HANG_RANK": "0", "MPI4PY_RC_THREAD_LEVEL": "serialized"})
    assert run.rc != 0, run.out
    assert re.search(r"HANG: ranks? \[0@node1.*\] did not reach \S*test_one_rank_sleeps \(call\)", run.out), run.out
    meta = run.run_json()
    assert meta["complete"] is False and meta["exit_code"] == 3 and 0 in meta["missing_ranks"]
    assert "HANG" in junit_cases(run.folder)["test_one_rank_sleeps"].find("failure").get("message")


def test_a_hang_while_collecting_still_writes_run_json_and_junit(mpi_pytest):
    run = mpi_pytest("suite_slow_import.py", "--hang-timeout", "3", env={"HANG_RANK": "2"})
    assert run.rc == 3, run.out
    assert re.search(r"HANG: rank \[2@node2\] did not reach session \(collection\)", run.out), run.out
    meta = run.run_json()
    assert meta["complete"] is False and meta["exit_code"] == 3 and meta["missing_ranks"] == [2]
    assert (run.folder / "junit.xml").exists()
    assert "HANG" in (run.folder / "junit.xml").read_text()


def test_collection_mismatch_exits_2_with_a_diff(mpi_pytest):
    run = mpi_pytest("suite_collection.py")
    assert run.rc == 2, run.out
    assert "collected tests differ between ranks" in run.out
    assert "ranks [0@node1, 1@node1]: 2 tests" in run.out
    assert "rank [2@node2]: 3 tests" in run.out
    assert "only there: tests/mpi_suites/suite_collection.py::test_case[2]" in run.out


def test_single_process_without_launcher(mpi_pytest):
    run = mpi_pytest("suite_pass.py", launcher=False)
    assert run.rc == 0, run.out
    meta = run.run_json()
    assert meta["topology"]["world_size"] == 1 and meta["launcher"] == "none"


def test_malformed_profile_exits_2_naming_file_and_key(mpi_pytest, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\nhang_timeout = "ten minutes"\n')
    run = mpi_pytest("suite_pass.py", "--profile", str(bad))
    assert run.rc == 2, run.out
    assert f"{bad}: run.hang_timeout:" in run.out


def test_a_rank_stuck_at_its_end_exits_3_naming_the_step():
    """The bound around NCCL teardown and MPI_Finalize, in a real process."""
    import subprocess
    import sys
    code = ("import sys, time\nfrom acceptance.runtime.pytest_plugin import _bounded\n"
            "with _bounded('rank 1@node1: NCCL teardown and MPI_Finalize', 1.0, sys.stderr):\n    time.sleep(60)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert "acceptance: rank 1@node1: NCCL teardown and MPI_Finalize did not finish within 1 s; exiting 3" in p.stderr
    assert 'File "<string>", line 4 in <module>' in p.stderr  # the stack of where it was stuck
