"""benchmarks/rank0_scale.py --quick runs end to end and prints its table.

Times are the benchmark's business, not a test's (the machine is shared): only the table's shape is
checked, and the two figures that do not depend on the clock: rank 0's traced peak memory grows
at most linearly with the rank count (a teardown's: flat, each rank's records staged as they arrive), and the decision it answers every rank with stays bounded even when
every rank failed with its own text.
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "rank0_scale.py"
NUM = r"\s+[\d.]+"
ROW = r"(?P<step>[a-z ]*?)\s+(?P<unit>ms|MiB|KiB out)(?P<cells>(?:" + NUM + r"){3})\s+(?P<growth>[\d.]+)(  SUPERLINEAR)?"


def test_quick_run_prints_the_table_and_exits_0():
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    lines = p.stdout.splitlines()
    assert re.fullmatch(r"\s*step\s+N=64\s+N=128\s+N=256\s+x/doubling", lines[5]), out
    rows, step = {}, None
    for line in lines[7:]:
        m = re.fullmatch(ROW, line)
        if m:
            step = m["step"].strip() or step
            rows[(step, m["unit"])] = float(m["growth"])
    expected = {("merge passed", "ms"), ("merge failed", "ms"), ("merge mixed", "ms"), ("phase passed", "ms"),
                ("phase passed", "KiB out"), ("phase failed", "ms"), ("phase failed", "MiB"),
                ("phase failed", "KiB out"), ("census", "ms"), ("census", "MiB"), ("describe", "ms"),
                ("keepalive", "ms")}
    assert set(rows) == expected, out
    assert rows[("phase failed", "MiB")] < 2.3, out   # at most linear: ~2 a doubling; flat with the records staged
    assert rows[("census", "MiB")] < 2.3, out
    assert rows[("phase failed", "KiB out")] < 1.3, out  # every rank failed, the answer stays bounded
    assert re.fullmatch(r"superlinear \(growth per doubling > [\d.]+\): .+", lines[-1]), out
