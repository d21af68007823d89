"""Analysis + report at cluster scale: a synthetic 1,024-node x 8-rail all-pairs run.

    .venv/bin/python benchmarks/report_scale.py [--nodes 1024] [--rails 8] [--keep DIR]

Writes ~4.2 million records (one write-bandwidth record per node pair per rail,
shaped exactly like the suites' records, one slow NIC injected), then times, in
a fresh process each so peak memory is theirs alone:
  baseline  reading results.jsonl line by line with json.loads (the least any analysis must do)
  harness   acceptance.analysis.analyze + write_outputs + acceptance.report.render
and prints time, peak resident memory, the ratio to the baseline, and whether
the targets hold (analysis + report under 120 s and under 8 GiB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S, TARGET_GIB = 120.0, 8.0

BASELINE = """
import json, resource, sys, time
t = time.perf_counter()
n = 0
with open(sys.argv[1] + "/results.jsonl", "rb") as f:
    for line in f:
        json.loads(line)
        n += 1
print(json.dumps({"seconds": time.perf_counter() - t, "records": n,
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

HARNESS = """
import json, resource, sys, time
from acceptance.analysis import analyze, write_outputs
from acceptance.report import render
t = time.perf_counter()
a = analyze(sys.argv[1])
t_analysis = time.perf_counter() - t
write_outputs(sys.argv[1], a)
page = render(a, sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t, "analysis_seconds": t_analysis,
                  "findings": len(a.findings), "page_bytes": page.stat().st_size,
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _child(code: str, run_dir: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"benchmark step failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--rails", type=int, default=8)
    ap.add_argument("--keep", metavar="DIR", help="write the synthetic run here and keep it")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT / "tests"))
    from synthetic import make_run_fast

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.keep or tmp) / "run"
        t = time.perf_counter()
        make_run_fast(run_dir, nodes=args.nodes, rails=args.rails, slow_nic=("node0005", 3, 0.6))
        size = (run_dir / "results.jsonl").stat().st_size
        print(f"report_scale: {args.nodes} nodes x {args.rails} rails, results.jsonl {size / 2**20:.0f} MiB, "
              f"generated in {time.perf_counter() - t:.1f} s", flush=True)
        base = _child(BASELINE, run_dir)
        print(f"baseline (json.loads per line): {base['records']} records in {base['seconds']:.1f} s, "
              f"peak {base['peak_kib'] / 2**20:.2f} GiB", flush=True)
        h = _child(HARNESS, run_dir)
        gib = h["peak_kib"] / 2**20
        print(f"analysis + report: {h['seconds']:.1f} s (analysis {h['analysis_seconds']:.1f} s), "
              f"peak {gib:.2f} GiB, {h['findings']} findings, report.html {h['page_bytes'] / 2**20:.1f} MiB")
        print(f"ratio to baseline: time {h['seconds'] / base['seconds']:.2f}x, "
              f"memory {h['peak_kib'] / base['peak_kib']:.2f}x")
        met = h["seconds"] < TARGET_S and gib < TARGET_GIB
        print(f"targets (< {TARGET_S:.0f} s, < {TARGET_GIB:.0f} GiB): {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
