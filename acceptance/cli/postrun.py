"""After the suites: analysis, findings.json, drain.txt, report.html, and what to tell the operator."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from ..analysis import Analysis, analyze, write_outputs
from ..analysis.fleet import line as fleet_line
from ..analysis.verdict import suites_exit_code
from ..history.night import save_links
from ..records.results import RunFolder

SHOWN_FINDINGS = 10


def analyze_and_report(run_dir: str | Path, baseline: str | Path | None = None,
                       out: str | Path | None = None, report: bool = True,
                       topology=None, history=None) -> tuple[Analysis, Path | None]:
    """(Re)write findings.json, drain.txt, report.html, and the run's verdict and exit code in run.json
    (one analysis says all of them, so they always agree). Without `report`, no report.html (and
    None for its path): `acceptance report` writes it later from the same files. history: an open history
    Store, for the report's History section."""
    analysis = analyze(run_dir, baseline_dir=baseline, topology=topology)
    write_outputs(run_dir, analysis)
    save_links(run_dir, analysis.records)  # what `history ingest` keeps, so it need not parse results.jsonl again
    outcome = dict(verdict=analysis.verdict, exit_code=analysis.exit_code, fleet=analysis.fleet,
                   suites_exit_code=suites_exit_code(analysis.run or {}))
    if topology is not None and analysis.fabric is not None:  # the tree the findings name, kept with them
        outcome.update(fabric=analysis.fabric.to_json())
    RunFolder(run_dir).update_run(**outcome)
    analysis.run.update(outcome)
    if not report:
        return analysis, None
    from ..report import render  # matplotlib and jinja2: seconds to import on a slow node
    return analysis, render(analysis, run_dir, out, history=history)


def summary(analysis: Analysis, report: Path | None, run_dir: str | Path | None = None) -> str:
    """A few lines for the terminal: verdict, the worst findings, drain lines, where the report is."""
    lines = []
    engines = (analysis.run or {}).get("engines") or {}
    if isinstance(engines, dict) and engines:
        by_engine: dict[str, list[str]] = {}
        for suite, e in sorted(engines.items()):
            if isinstance(e, dict):
                by_engine.setdefault(e.get("engine") or "none (skipped)", []).append(suite)
        lines.append("engines: " + "; ".join(f"{name} ({', '.join(suites)})" for name, suites in by_engine.items())
                     + " (why: run.json \"engines\", report environment)")
    lines.append(f"verdict: {analysis.verdict.upper()} ({analysis.verdict_why}; {len(analysis.findings)} findings)")
    fleet = fleet_line(analysis.fleet)
    if fleet:
        lines.append(f"  {fleet}")
    unknown = analysis.extra.get("fabric_unknown")
    if unknown:
        lines.append(f"  switch tree {analysis.fabric.source} does not place {len(unknown)} node(s) of the run "
                     f"on a leaf (their pairs count toward no switch or uplink): {', '.join(unknown[:20])}"
                     + (" ..." if len(unknown) > 20 else ""))
    overridden = (analysis.run or {}).get("overrides")
    if isinstance(overridden, dict) and overridden:
        lines.append(f"  note: measured with data sources overridden ({', '.join(overridden)}; run.json \"overrides\")")
    skipped = analysis.extra.get("skipped_lines")
    if skipped:
        lines.append(f"  note: the last line of results.jsonl was cut short (a crash mid-write): {skipped} record "
                     f"lost")
    for f in analysis.findings[:SHOWN_FINDINGS]:
        lines.append(f"  {f['severity'].upper():4} {f['scope']:7} {f['message']}")
    if len(analysis.findings) > SHOWN_FINDINGS:
        lines.append(f"  ... and {len(analysis.findings) - SHOWN_FINDINGS} more in findings.json")
    if analysis.drains:
        lines.append("drain suggestions (run them, or pass --drain):")
        lines += [f"  {line}" for line in analysis.drains]
    if report is not None:
        lines.append(f"report: {report}")
    else:
        lines.append(f"report: not written (--no-report); `acceptance report {run_dir or 'RUN_DIR'}` writes it")
    return "\n".join(lines)


def execute_drains(lines: list[str]) -> int:
    """Run the scontrol lines; returns how many failed. Only ever called when the operator asked (--drain)."""
    if not lines:
        return 0
    if not shutil.which("scontrol"):
        print("acceptance: --drain: scontrol is not on PATH; nothing drained")
        return len(lines)
    failed = 0
    for line in lines:
        p = subprocess.run(shlex.split(line), capture_output=True, text=True, timeout=60)
        ok = p.returncode == 0
        failed += not ok
        print(f"acceptance: {'drained' if ok else 'FAILED'}: {line}"
              + ("" if ok else f" ({(p.stderr or p.stdout).strip()})"))
    return failed
