"""After the suites: analysis, findings.json, drain.txt, report.html, and what to tell the operator."""

from __future__ import annotations

from pathlib import Path

from ..analysis import Analysis, analyze, write_outputs
from ..analysis.finding import clean_value
from ..analysis.fleet import line as fleet_line
from ..analysis.verdict import suites_exit_code
from ..history.night import save_links
from ..records.results import RunFolder
from ..report import digest

SHOWN_FINDINGS = 10    # confirmed failing findings printed, worst first
SHOWN_DRAINS = 10      # drain lines printed; all of them are in drain.txt (and --drain runs all)
MAX_RAIL_COLUMNS = 12  # the counts table per rail up to this many rails; beyond, totals per scope


def analyze_and_report(run_dir: str | Path, baseline: str | Path | None = None,
                       out: str | Path | None = None, report: bool = True,
                       topology=None, history=None, routes=None) -> tuple[Analysis, Path | None]:
    """(Re)write findings.json, drain.txt, report.html, and the run's verdict and exit code in run.json
    (one analysis says all of them, so they always agree). Without `report`, no report.html (and
    None for its path): `acceptance report` writes it later from the same files. history: an open history
    Store, for the report's History section."""
    analysis = analyze(run_dir, baseline_dir=baseline, topology=topology, routes=routes)
    write_outputs(run_dir, analysis)
    save_links(run_dir, analysis.records)  # what `history ingest` keeps, so it need not parse results.jsonl again
    outcome = dict(verdict=analysis.verdict, exit_code=analysis.exit_code, fleet=analysis.fleet,
                   suites_exit_code=suites_exit_code(analysis.run or {}))
    power = getattr(analysis, "power", None)  # what each rule can detect (analysis.model); what a PASS rules out
    if power is not None:  # JSON numbers: the entries may hold numpy scalars
        outcome.update(power=[{k: clean_value(v) for k, v in e.items()} for e in power])
    if (topology is not None or routes is not None) and analysis.fabric is not None:  # the tree the findings name
        outcome.update(fabric=analysis.fabric.to_json())
    RunFolder(run_dir).update_run(**outcome)
    analysis.run.update(outcome)
    if not report:
        return analysis, None
    from ..report import render  # matplotlib and jinja2: seconds to import on a slow node
    return analysis, render(analysis, run_dir, out, history=history)


def _cell(c: dict) -> str:
    return f"{c['fail']}/{c['warn']}" if c["fail"] or c["warn"] else "."


def counts_table(findings: list[dict], rails=()) -> list[str]:
    """Findings by scope and rail, "fail/warn" per cell, transients in a row of their own; a few lines
    at any fleet size (a scope per row, a rail per column; totals only beyond MAX_RAIL_COLUMNS rails)."""
    c = digest.counts(findings, rails)
    if not c["scopes"] and not c["transient_total"]:
        return []
    columns = c["rails"] if len(c["rails"]) <= MAX_RAIL_COLUMNS else []
    head = ["scope", *(digest.rail_label(r) for r in columns), "all"]
    rows = [[s, *(_cell(c["cells"][(s, r)]) for r in columns), _cell(c["scope_totals"][s])] for s in c["scopes"]]
    if c["transient_total"]:
        rows.append(["transient", *(str(c["transient"][r] or ".") for r in columns), str(c["transient_total"])])
    widths = [max(len(row[k]) for row in [head, *rows]) for k in range(len(head))]
    return ["  ".join(v.ljust(w) if k == 0 else v.rjust(w) for k, (v, w) in enumerate(zip(row, widths))).rstrip()
            for row in [head, *rows]]


def summary(analysis: Analysis, report: Path | None, run_dir: str | Path | None = None) -> str:
    """A few lines for the terminal, bounded at any fleet size: verdict, what was measured and what a PASS
    rules out, the findings by scope and rail, the worst confirmed ones, the drains, where the rest is."""
    lines = []
    run = analysis.run or {}
    engines = run.get("engines") or {}
    if isinstance(engines, dict) and engines:
        by_engine: dict[str, list[str]] = {}
        for suite, e in sorted(engines.items()):
            if isinstance(e, dict):
                by_engine.setdefault(e.get("engine") or "none usable", []).append(suite)
        lines.append("engines: " + "; ".join(f"{name} ({', '.join(suites)})" for name, suites in by_engine.items())
                     + " (why: run.json \"engines\", report environment)")
    parts = digest.split(analysis.findings)
    confirmed, warnings, transient = parts["confirmed"], parts["warnings"], parts["transient"]
    tally = f"{len(confirmed)} confirmed failing, {len(warnings)} warning{'s' if len(warnings) != 1 else ''}" \
        + (f", {len(transient)} transient" if transient else "")
    lines.append(f"verdict: {analysis.verdict.upper()} ({analysis.verdict_why}; {tally})")
    for shape in digest.run_shape(run):
        lines.append(f"  {shape}")
    power = getattr(analysis, "power", None)
    sentence = digest.power_sentence(power if power is not None else run.get("power") or [])
    if sentence:
        lines.append(f"  {sentence}")
    fleet = fleet_line(analysis.fleet)
    if fleet:
        lines.append(f"  {fleet}")
    unknown = analysis.extra.get("fabric_unknown")
    if unknown:
        lines.append(f"  switch tree {analysis.fabric.source} does not place {len(unknown)} node(s) of the run "
                     f"on a leaf (their pairs count toward no switch or uplink): {', '.join(unknown[:20])}"
                     + (" ..." if len(unknown) > 20 else ""))
    overridden = run.get("overrides")
    if isinstance(overridden, dict) and overridden:
        lines.append(f"  note: measured with data sources overridden ({', '.join(overridden)}; run.json \"overrides\")")
    skipped = analysis.extra.get("skipped_lines")
    if skipped:
        lines.append(f"  note: the last line of results.jsonl was cut short (a crash mid-write): {skipped} record "
                     f"lost")
    table = counts_table(analysis.findings, (run.get("topology") or {}).get("rails") or ())
    if table:
        lines.append("findings by scope and rail (confirmed failing/warning):")
        lines += [f"  {row}" for row in table]
    if confirmed:
        shown = confirmed[:SHOWN_FINDINGS]
        lines.append(f"confirmed failing findings, worst first ({len(shown)} of {len(confirmed)}):")
        for f in shown:
            lines.append(f"  FAIL {str(f.get('scope')):7} {f.get('message')}")
    rest = [f"{len(confirmed) - SHOWN_FINDINGS} more confirmed failing" if len(confirmed) > SHOWN_FINDINGS else "",
            f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}" if warnings else "",
            f"{len(transient)} transient (did not reproduce; never drained)" if transient else ""]
    rest = [r for r in rest if r]
    if rest:
        where = Path(run_dir) / "findings.json" if run_dir is not None else "findings.json"
        lines.append(f"  ... {', '.join(rest)}: in {where}" + (" and the report" if report is not None else ""))
    if analysis.drains:
        drain_txt = Path(run_dir) / "drain.txt" if run_dir is not None else "drain.txt"
        lines.append(f"drain suggestions: {len(analysis.drains)} node{'s' if len(analysis.drains) != 1 else ''} "
                     f"(run them, or pass --drain)" + (f"; the first {SHOWN_DRAINS}:" if len(analysis.drains) >
                                                       SHOWN_DRAINS else ":"))
        lines += [f"  {line}" for line in analysis.drains[:SHOWN_DRAINS]]
        lines.append(f"  all {len(analysis.drains)} in {drain_txt}" if len(analysis.drains) > SHOWN_DRAINS
                     else f"  (also in {drain_txt})")
    if report is not None:
        lines.append(f"report: {report}")
    else:
        lines.append(f"report: not written (--no-report); `acceptance report {run_dir or 'RUN_DIR'}` writes it")
    return "\n".join(lines)


def execute_drains(drains) -> int:
    """Drain each node (host.slurmnode.apply_drain: one argv, no shell; a node drained by someone else
    keeps its reason); returns how many failed. Only ever called when the operator asked (--drain)."""
    from ..host.slurmnode import apply_drain
    failed = 0
    for d in drains:
        outcome, text = apply_drain(d)
        failed += outcome == "failed"
        print(f"acceptance: {'FAILED: ' if outcome == 'failed' else ''}{text}")
    return failed
