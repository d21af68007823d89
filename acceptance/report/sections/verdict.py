"""The verdict and what failed: the summary banner (with what the rules could detect, power), the
findings by scope and rail with the drain lines, the failed and warned records by suite and metric,
and the fleet-relative bounds."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from ...analysis.lost import lost_nodes
from ...records.naming import compress_ints
from ...rules import catalog
from ...runtime.overrides import describe as describe_overrides
from .. import digest
from ..data import fmt_int, fmt_num, fmt_size, fmt_text, is_missing, lower_is_better
from .common import (
    MAX_EVIDENCE,
    MAX_FINDINGS,
    MAX_FOLDED,
    MAX_ROWS,
    SEVERITY_ORDER,
    SHOWN_DRAINS,
    SHOWN_FINDINGS,
    more,
    where_words,
)


def _parse_time(text):
    if not text or not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _duration(start, end) -> str:
    a, b = _parse_time(start), _parse_time(end)
    if not a or not b:
        return "–"
    seconds = int(round((b - a).total_seconds()))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}min {s:02d}s" if h else f"{m}min {s:02d}s" if m else f"{s}s"


# --- 1. summary ------------------------------------------------------------------

def summary(analysis, recs: pd.DataFrame, run_dir: Path) -> dict:
    run = analysis.run or {}
    findings = analysis.findings or []
    counts = recs["verdict"].value_counts().to_dict() if len(recs) else {}
    results = (run_dir / "results.jsonl").resolve()
    profile = getattr(analysis.profile, "name", None) or (run.get("profile") or {}).get("name")
    complete = run.get("complete")
    missing = run.get("missing_ranks") or []
    parts = digest.split(findings)
    return {
        "verdict": analysis.verdict,
        "verdict_why": analysis.verdict_why,
        "verdict_code": analysis.exit_code,
        "n_fail": len(parts["confirmed"]),
        "n_warn": len(parts["warnings"]),
        "n_transient": len(parts["transient"]),
        "shape": digest.run_shape(run),
        "power": power(analysis),
        "run_id": fmt_text(run.get("run_id") or run_dir.name),
        "start": fmt_text(run.get("start")),
        "end": fmt_text(run.get("end")),
        "duration": _duration(run.get("start"), run.get("end")),
        "command": fmt_text(run.get("command")),
        "launcher": fmt_text(run.get("launcher")),
        "profile": fmt_text(profile),
        "complete": "–" if complete is None else "yes" if complete else "no",
        "incomplete": complete is False,
        "exit_code": fmt_text(run.get("exit_code")),
        "missing_ranks": compress_ints(missing) if missing and all(isinstance(r, int) for r in missing)
        else ", ".join(map(str, missing)),
        "results_path": str(results),
        "results_exists": results.exists(),
        "findings_path": str((run_dir / "findings.json").resolve()),
        "records": f"{len(recs):,}",
        "record_fail": f"{int(counts.get('fail', 0)):,}",
        "record_warn": f"{int(counts.get('warn', 0)):,}",
        "record_pass": f"{int(counts.get('pass', 0)):,}",
        "record_info": f"{int(counts.get('info', 0)):,}",
        "baseline_id": fmt_text(analysis.baseline_id) if analysis.baseline_id else "",
        "overrides": describe_overrides(run.get("overrides") or {}) if isinstance(run.get("overrides"), dict) else [],
        "left_behind": context_left_behind(run),
    }


def context_left_behind(run: dict) -> dict | None:
    """The nodes the run lost (analysis.lost), for the banner: who, why, and what it cost."""
    lost = lost_nodes(run)
    if not lost:
        return None
    nodes = (run.get("topology") or {}).get("nodes")
    launches = [a for a in run.get("attempts") or [] if isinstance(a, dict)]
    planned = launches[0].get("nodes") if launches else nodes
    total = len(planned) if isinstance(planned, (dict, list)) else None
    lost_text = f"{len(lost)} of {total} nodes" if total else f"{len(lost)} node(s)"
    rows = [{"node": fmt_text(node), "why": fmt_text(why)} for node, why in lost]
    if launches and run.get("complete") is True:  # acceptance.cli.attempts: the rest was launched again
        left = len(nodes) if isinstance(nodes, (dict, list)) else "the other"
        return {"nodes": rows, "cost": f"{lost_text} lost during the run and left behind; what was left was launched "
                                       f"again on the other {left} ({len(launches)} launches in all), in the same run "
                                       f"folder: the rounds that had ended are kept, the lost nodes' pairs after that "
                                       f"were not measured, and the tests after the loss (the world collectives "
                                       f"among them) ran on {left} nodes"}
    return {"nodes": rows,
            "cost": lost_text + " lost during the run: the tests from the loss on did not finish (what each rank had "
                                "measured of the one in flight is kept), and the run is INCOMPLETE"}


# --- 2. findings -----------------------------------------------------------------

def _value_with_unit(value, unit):
    if is_missing(value):
        return "–"
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return fmt_num(value, unit)
    return str(value)


def _finding_row(f: dict, units: dict) -> dict:
    unit = f.get("unit") or units.get(f.get("metric"))
    metric = fmt_text(f.get("metric"))
    if not is_missing(f.get("size")) and f.get("size") != "":
        metric += f" at {fmt_size(f.get('size'))}"
    evidence = [str(e) for e in (f.get("evidence") or [])]
    shown = evidence[:MAX_EVIDENCE]
    return {
        "severity": fmt_text(f.get("severity")),
        "severity_class": f.get("severity") if f.get("severity") in ("fail", "warn") else "other",
        "scope": fmt_text(f.get("scope")),
        "node": fmt_text(f.get("node")),
        "rail": fmt_int(f.get("rail")),
        "peer": fmt_text(f.get("peer")),
        "metric": metric,
        "kind": fmt_text(f.get("kind")) if f.get("kind") else "",
        "value": _value_with_unit(f.get("value"), unit),
        "expected": _value_with_unit(f.get("expected"), unit),
        "message": fmt_text(f.get("message")),
        "evidence": shown,
        "evidence_more": more(len(evidence), len(shown), "findings.json"),
    }


def _count_cell(c: dict) -> dict:
    return {"fail": c["fail"], "warn": c["warn"],
            "cls": "fail" if c["fail"] else "warn" if c["warn"] else "none"}


def finding_counts(findings_: list[dict], rails=()) -> dict:
    """The findings by scope (rows, widest first) and rail (columns), fail and warn apart; transients in
    a row of their own (they are neither)."""
    c = digest.counts(findings_, rails)
    return {"rails": [digest.rail_label(r) for r in c["rails"]],
            "rows": [{"scope": s, "cells": [_count_cell(c["cells"][(s, r)]) for r in c["rails"]],
                      "total": _count_cell(c["scope_totals"][s])} for s in c["scopes"]],
            "totals": [_count_cell(c["rail_totals"][r]) for r in c["rails"]], "total": _count_cell(c["total"]),
            "transient": [c["transient"][r] for r in c["rails"]], "transient_total": c["transient_total"]}


def findings(analysis, units: dict, rails=()) -> dict:
    """Confirmed fails worst first (shown), warnings and transients (folded), their counts by scope and
    rail, and the drain lines. rails: the run's rails, so a rail without findings shows its zeros."""
    all_ = analysis.findings or []
    parts = digest.split(all_)

    def table(items: list[dict], cap: int, shown: int | None = None) -> dict:
        rows = [_finding_row(f, units) for f in items[:cap]]
        shown = len(rows) if shown is None else shown
        return {"rows": rows[:shown], "folded": rows[shown:], "total": len(items),
                "more": more(len(items), len(rows), "findings.json")}

    drains = [str(d) for d in (analysis.drains or [])]
    return {"total": len(all_), "counts": finding_counts(all_, rails),
            "confirmed": table(parts["confirmed"], MAX_FINDINGS, SHOWN_FINDINGS),
            "warnings": table(parts["warnings"], MAX_FOLDED),
            "transient": table(parts["transient"], MAX_FOLDED),
            "drains": drains, "drains_shown": drains[:SHOWN_DRAINS], "drains_folded": drains[SHOWN_DRAINS:]}


def power(analysis) -> dict:
    """What the run's rules could detect (Analysis.power; run.json "power" when the analysis has none):
    the headline sentence and the table behind it."""
    try:
        entries = getattr(analysis, "power", None)
    except Exception as e:  # a report must still come out when an odd Analysis cannot say its power
        return {"sentence": "", "rows": [], "more": "", "error": f"{type(e).__name__}: {e}"}
    if entries is None:
        entries = (analysis.run or {}).get("power")
    entries = [e for e in entries or [] if isinstance(e, dict)]
    entries.sort(key=lambda e: (digest.scope_rank(e.get("rule")), str(e.get("metric")),
                                -1 if e.get("rail") is None else e.get("rail")))

    def spread(x) -> str:
        try:
            return f"{100 * float(x):.1f}%"
        except (TypeError, ValueError):
            return "–"

    rows = [{"rule": digest.SCOPE_WORDS.get(e.get("rule"), fmt_text(e.get("rule"))), "metric": fmt_text(e.get("metric")),
             "size": fmt_size(e.get("size")), "rail": fmt_int(e.get("rail")),
             "population": fmt_num(e.get("population")), "comparisons": fmt_num(e.get("comparisons")),
             "noise": spread(e.get("noise")),
             "detectable": "nothing" if digest.detectable(e) is None else digest.pct(digest.detectable(e))}
            for e in entries[:MAX_ROWS]]
    return {"sentence": digest.power_sentence(entries), "rows": rows,
            "more": more(len(entries), len(rows), 'run.json "power"'), "error": ""}


def drain_file(run_dir: Path) -> str:
    path = run_dir / "drain.txt"
    return str(path.resolve()) if path.exists() else ""


def failing_records(recs: pd.DataFrame) -> dict:
    """Failed and warned measurements grouped by suite and metric, with the worst of each group."""
    bad = recs[recs["verdict"].isin(["fail", "warn"])]
    if bad.empty:
        return {"rows": [], "more": ""}
    bad = bad.assign(_lower=[lower_is_better(s, m) for s, m in zip(bad["suite"], bad["metric"])])
    badness = np.where(bad["_lower"].to_numpy(bool), bad["value"].to_numpy(float),
                       -bad["value"].to_numpy(float))
    bad = bad.assign(_bad=np.nan_to_num(badness, nan=-np.inf))
    bad = bad.assign(bound=bad["bound"].astype(object).where(bad["bound"].notna(), "absolute"))
    keys = ["verdict", "suite", "metric", "bound"]
    counts = bad.groupby(keys, dropna=False, sort=False).size().rename("count")
    worst = bad.sort_values("_bad", ascending=False).drop_duplicates(keys).set_index(keys)
    table = worst.join(counts).reset_index()
    table["_sev"] = table["verdict"].map(SEVERITY_ORDER).fillna(2)
    table = table.sort_values(["_sev", "count"], ascending=[True, False])
    rows = []
    for r in table.head(MAX_ROWS).itertuples(index=False):
        rows.append({"verdict": fmt_text(r.verdict), "suite": fmt_text(r.suite), "metric": fmt_text(r.metric),
                     "count": f"{int(r.count):,}", "worst": fmt_num(r.value, r.unit if not is_missing(r.unit) else None),
                     "threshold": fmt_num(r.threshold, r.unit if not is_missing(r.unit) else None),
                     "bound": BOUND_WORDS.get(r.bound, fmt_text(r.bound)),
                     "where": where_words(r.src, r.dst, r.rail), "size": fmt_size(r.size),
                     "test": fmt_text(r.test)})
    return {"rows": rows, "more": more(len(table), len(rows), "results.jsonl")}


# How a threshold was derived (results.BOUND_ORIGINS), as the report says it.
BOUND_WORDS = {"absolute": "profile", "line_rate": "line rate", "recorded": "set by the test",
               "fleet": "fleet", "fleet_too_few": "too few peers"}


def fleet(analysis) -> dict:
    """The fleet-relative bounds of the run: each population, worst (most outside) first."""
    s = analysis.fleet
    pops = sorted(s["populations"], key=lambda p: (-p["outside"], -p["too_few"], p["suite"], p["metric"],
                                                    -1 if p["size"] is None else p["size"]))
    rows = [{"metric": f"{p['suite']} {catalog.label(p['suite'], p['metric'])}"
                       + (f" ({p['op']})" if p.get("op") else ""),
             "size": fmt_size(p["size"]), "peers": fmt_text(p["peers"]), "values": f"{p['values']:,}",
             "median": fmt_num(p["median"], p["unit"]),
             "factor": "–" if p["factor"] is None else f"{p['factor']:g} ×",
             "outside": f"{p['outside']:,}", "too_few": f"{p['too_few']:,}",
             "cls": "fail" if p["outside"] else "warn" if p["too_few"] else ""}
            for p in pops[:MAX_ROWS]]
    return {"rows": rows, "more": more(len(pops), len(rows), 'run.json "fleet"'), "judged": f"{s['judged']:,}",
            "outside": f"{s['outside']:,}", "too_few": f"{s['too_few']:,}",
            "min_population": analysis.profile.get("fleet.min_population")}
