"""benchmarks/history_scale.py --quick runs end to end and prints its four figures.

Only the output's shape and the exit status are checked, never PASS or MISS: how fast the store is
on this machine is the benchmark's business, not a test's.
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "history_scale.py"

FIGURES = (
    r"ingest one night: [\d.]+ s, worst of 3 real ingests of 4,032-record run folders as acceptance run leaves "
    r"them .*\(target <= 60 s\): (PASS|MISS)",
    r"store growth: [\d.]+ MB a night, .*\(target <= 100 MB\): (PASS|MISS)",
    r"one link's series: [\d.]+ s, worst of 5 calls for node07:rail1:node12 over 20 nights "
    r"\(target <= 1 s\): (PASS|MISS)",
    r"fleet-wide drift scan: [\d.]+ s, check_night\(\) of tonight's 4,032 links against the pinned night and K=7 "
    r"accepted nights \(target <= 60 s\): (PASS|MISS)",
)


def test_quick_run_prints_the_four_figures_and_exits_0():
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    lines = p.stdout.splitlines()
    for pattern in FIGURES:
        assert len([line for line in lines if re.fullmatch(pattern, line)]) == 1, f"no line {pattern!r} in:\n{out}"
    assert re.fullmatch(r"targets: [0-4]/4 met", lines[-1]), out
    assert re.search(r"^  \(a folder without links.npz, parsed at ingest: [\d.]+ s\)$", p.stdout, re.M), out
    assert "WARN drift node05:rail1" in p.stdout, out  # tonight's slowed NIC is what the scan found
