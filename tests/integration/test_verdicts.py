"""The run's verdict is PASS, FAIL or INCOMPLETE, and is the exit code, on real runs and on run folders."""
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic

ONE_FAILING_TEST = '''
import pytest

@pytest.mark.preflight
def test_only_check(topology):
    assert topology.node != "node2", "node2 is not fit"
'''


def folder_of(p) -> Path:
    return Path(re.search(r"^run folder: (\S+)$", p.stdout, re.M).group(1))


def verdict_line(p) -> str:
    return next(line for line in p.stdout.splitlines() if line.startswith("verdict: "))


def test_a_run_whose_only_test_fails_is_a_fail_with_the_failure_as_a_finding(acceptance_cli, tmp_path):
    suite = tmp_path / "test_one.py"
    suite.write_text(ONE_FAILING_TEST)
    p = acceptance_cli("run", "--suites", str(suite), "--", f"--confcutdir={tmp_path}", "-p", "acceptance.runtime.pytest_plugin")
    assert p.returncode == 1, p.stdout + p.stderr
    assert verdict_line(p).startswith("verdict: FAIL (1 failing finding, 1 failed test;"), p.stdout
    folder = folder_of(p)
    run = json.loads((folder / "run.json").read_text())
    assert (run["verdict"], run["exit_code"]) == ("fail", 1)
    (finding,) = json.loads((folder / "findings.json").read_text())
    assert (finding["scope"], finding["node"], finding["kind"]) == ("node", "node2", "test")
    assert "test_only_check failed: call: AssertionError: node2 is not fit" in finding["message"]
    assert (folder / "drain.txt").read_text().startswith('scontrol update NodeName=node2 State=DRAIN')
    html = (folder / "report.html").read_text()
    assert 'class="banner fail"' in html and "exit code 1" in html


def test_a_suite_that_does_not_import_exits_2(acceptance_cli, tmp_path):
    suite = tmp_path / "test_broken.py"
    suite.write_text("import no_such_module_here\n\ndef test_x():\n    pass\n")
    p = acceptance_cli("run", "--suites", str(suite))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "No module named 'no_such_module_here'" in p.stdout and "acceptance: exit 2" in p.stdout


def _run_folder(tmp_path, **run) -> Path:
    folder = synthetic.make_run(tmp_path / "run", nodes=4, rails=2)
    meta = json.loads((folder / "run.json").read_text())
    meta.update(run)
    (folder / "run.json").write_text(json.dumps(meta))
    return folder


def test_report_of_an_incomplete_run_is_incomplete(acceptance_cli, tmp_path):
    folder = _run_folder(tmp_path, complete=False, exit_code=3, missing_ranks=[2])
    p = acceptance_cli("report", str(folder))
    assert p.returncode == 3, p.stdout + p.stderr
    assert verdict_line(p).startswith("verdict: INCOMPLETE (ranks [2] missing;")
    assert 'class="banner incomplete"' in (folder / "report.html").read_text()
    run = json.loads((folder / "run.json").read_text())
    assert (run["verdict"], run["exit_code"], run["complete"]) == ("incomplete", 3, False)


def test_report_of_a_run_that_measured_nothing_is_incomplete(acceptance_cli, tmp_path):
    folder = _run_folder(tmp_path)
    (folder / "results.jsonl").write_text("")
    p = acceptance_cli("report", str(folder))
    assert p.returncode == 3, p.stdout + p.stderr
    assert verdict_line(p).startswith("verdict: INCOMPLETE (nothing was measured against a bound")


def test_bad_run_folder_files_exit_2_naming_file_and_line(acceptance_cli, tmp_path):
    folder = _run_folder(tmp_path)
    lines = (folder / "results.jsonl").read_text().splitlines(keepends=True)
    (folder / "results.jsonl").write_text("".join(lines[:2] + ['{"test": "x", oops\n'] + lines[2:]))
    p = acceptance_cli("report", str(folder))
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"acceptance: {folder / 'results.jsonl'}: line 3: not a JSON record" in p.stderr
    assert "Traceback" not in p.stderr
    (folder / "results.jsonl").write_text("".join(lines))
    (folder / "run.json").write_text("{not json")
    p = acceptance_cli("report", str(folder))
    assert p.returncode == 2 and f"acceptance: {folder / 'run.json'}: not valid JSON" in p.stderr, p.stderr


def test_a_truncated_last_line_is_counted_and_shown(acceptance_cli, tmp_path):
    folder = _run_folder(tmp_path)
    with open(folder / "results.jsonl", "a") as f:
        f.write('{"test": "suites/test_rdma_write.py::test_write_bandwidth[rail0]", "suite": "rdma_wr')
    p = acceptance_cli("report", str(folder))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "note: the last line of results.jsonl was cut short (a crash mid-write): 1 record lost" in p.stdout
