"""`acceptance report RUN --prometheus FILE`, as a site's nightly job runs it."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic


def test_report_writes_the_textfile_and_says_where(acceptance_cli, tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=4, slow_nic=("node05", 2))
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    out = textfiles / "acceptance.prom"
    p = acceptance_cli("report", str(run), "--prometheus", str(out))
    assert p.returncode == 1, p.stdout + p.stderr          # the verdict still decides the exit code
    assert f"prometheus: {out}" in p.stdout.splitlines()
    assert p.stderr == ""
    text = out.read_text()
    assert 'acceptance_run_info{run_id="synthetic-0",profile="synthetic",verdict="fail"} 1' in text
    assert ('acceptance_finding{run_id="synthetic-0",profile="synthetic",severity="fail",scope="nic",'
            'kind="outlier",node="node05",rail="2",metric="bandwidth",size_bytes="8388608"} 1') in text
    assert 'acceptance_node_drain_suggested{run_id="synthetic-0",profile="synthetic",node="node05"} 1' in text
    assert [f.name for f in textfiles.iterdir()] == ["acceptance.prom"]   # no temporary file left
    assert (run / "findings.json").exists() and (run / "report.html").exists()
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], check=False, input=text, capture_output=True,
                               text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("where, message", [
    ("missing/acceptance.prom", "does not exist"),
    (".", "is a folder; give a file in it"),
])
def test_report_rejects_a_bad_prometheus_path_before_analyzing(acceptance_cli, tmp_path, where, message):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, memreg=False)
    target = tmp_path / where
    p = acceptance_cli("report", str(run), "--prometheus", str(target))
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("acceptance: --prometheus: ") and message in p.stderr, p.stderr
    assert not (run / "findings.json").exists()                # checked before the analysis ran


def test_report_notes_a_name_node_exporter_would_skip(acceptance_cli, tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, memreg=False)
    p = acceptance_cli("report", str(run), "--prometheus", str(tmp_path / "acceptance.txt"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "reads only *.prom files" in p.stderr
    assert (tmp_path / "acceptance.txt").read_text().startswith("# acceptance run synthetic-0: verdict pass")
