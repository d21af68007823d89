"""How the numbers move: over the run's iterations (burnin), against a baseline run (deltas), and
across nights (history: the store's per-rail and fleet trend, and the history check's drift and
intermittent findings with a sparkline each)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ...history.checked import CHECK_FILE, SHOWN_KINDS, check_problem, read_check
from ...records.results import InputError
from ...rules import catalog
from .. import figures
from ..data import fmt_int, fmt_num, fmt_size, fmt_text, is_missing, natural_key
from .common import MAX_EVIDENCE, MAX_ROWS, SEVERITY_ORDER, more, where_words


# --- 6. burn-in ------------------------------------------------------------------

def burnin(analysis) -> dict:
    """The series analysis computed (analysis.burnin): median and worst per iteration, with the change."""
    iterations = analysis.records["iteration"].dropna().unique() if len(analysis.records) else []
    if len(iterations) <= 1:
        return {"figure": None, "rows": [],
                "note": "One iteration only: no burn-in time series (run with --iterations K or --duration SEC)."}
    panels, rows = [], []
    for series in analysis.burnin:
        unit = fmt_text(series["unit"])
        if series["per_link"]:
            where = where_words(series["worst_src"], series["worst_dst"], series["worst_rail"])
        elif series["worst_scope"] == "rail":
            where = f"rail {fmt_int(series['worst_rail'])}"
        elif series["worst_scope"] == "node":
            where = fmt_text(series["worst_src"])
        else:
            where = fmt_text(series["worst_scope"] or series["worst_src"])
        panels.append({"title": series["title"], "unit": unit, "iteration": series["iteration"],
                       "median": series["median"], "worst": series["worst"],
                       "worst_label": "worst link" if series["per_link"] else "worst communicator"})
        change = series["change"]
        rows.append({"metric": series["title"], "iterations": f"{len(series['iteration']):,}",
                     "first": fmt_num(series["first"], unit), "last": fmt_num(series["last"], unit),
                     "change": "–" if change != change else f"{change:+.1%}", "worse": series["worse"],
                     "worst": fmt_num(series["worst_value"], unit), "worst_where": where,
                     "worst_iteration": fmt_int(series["worst_iteration"])})
    if not panels:
        return {"figure": None, "rows": [], "note": "No metric was measured in more than one iteration."}
    return {"figure": figures.burnin(panels, alt="median and worst link per iteration"), "rows": rows,
            "note": ""}


# --- 7. baseline deltas ----------------------------------------------------------

def deltas(analysis) -> dict:
    d = analysis.deltas
    if d is None:
        return {"given": False, "rows": [], "note": "No baseline was given "
                "(acceptance report RUN_DIR --baseline RUN_DIR compares with a previous good run)."}
    if len(d) == 0:
        return {"given": True, "rows": [], "total": "0", "regressions": "0", "more": "",
                "note": f"Nothing in common with the baseline {analysis.baseline_id or ''} to compare.".replace("  ", " ")}
    change = pd.to_numeric(d["change"], errors="coerce") if "change" in d.columns else pd.Series(np.nan, index=d.index)
    regress = d["regression"].fillna(False).astype(bool) if "regression" in d.columns else pd.Series(False, index=d.index)
    order = d.assign(chg=change, isreg=regress).sort_values(["isreg", "chg"], ascending=[False, True],
                                                               na_position="last")

    def get(r, name):
        return getattr(r, name, None)

    rows = []
    communicators = catalog.suite_names(communicators=True)
    for r in order.head(MAX_ROWS).itertuples(index=False):
        what = fmt_text(get(r, "metric"))
        op, scope = get(r, "op"), get(r, "scope")
        if not is_missing(op) and get(r, "suite") in communicators:
            what = f"{op} {what}" + (f" ({scope})" if not is_missing(scope) else "")
        rows.append({"suite": fmt_text(get(r, "suite")), "metric": what, "size": fmt_size(get(r, "size")),
                     "where": where_words(get(r, "src"), get(r, "dst"), get(r, "rail")),
                     "value": fmt_num(get(r, "value")), "baseline": fmt_num(get(r, "baseline")),
                     "change": "–" if is_missing(r.chg) else f"{r.chg:+.1%}",
                     "regression": bool(r.isreg)})
    return {"given": True, "rows": rows, "total": f"{len(d):,}", "regressions": f"{int(regress.sum()):,}",
            "more": more(len(d), len(rows), "the comparison (acceptance compare RUN_DIR BASELINE_DIR)"),
            "note": ""}


# --- 7b. history -----------------------------------------------------------------

HISTORY_METRIC = catalog.headline()   # the fleet trend's (suite, metric): the store's `fleet` medians
HISTORY_SUITE_KINDS = {"drift": "drift", "intermittent": "intermittent", "recovered": "recovered",
                       "trend": "fleet trend"}


def _trend_note(findings: list[dict], subject: str) -> tuple[str, str]:
    """(severity, kind) of the history check's finding on a rail or the fleet, or ("", "")."""
    for f in findings:
        if f.get("subject") == subject:
            return str(f.get("severity") or ""), str(f.get("kind") or "")
    return "", ""


def _fleet_trend(store, run_id, findings: list[dict]) -> dict:
    """Per rail plane and for the fleet: its median write bandwidth night by night, up to tonight."""
    suite, name = HISTORY_METRIC
    key = f"{suite}.{name}"
    s = store.fleet_series(key)
    nights = store.nights()
    tonight = store.night(run_id) if run_id else None
    notes = []
    if tonight is not None:
        keep = nights[(nights["started"] < tonight["started"]) |
                      ((nights["started"] == tonight["started"]) & (nights["id"] <= tonight["id"]))]
        s = s[s["night"].isin(set(keep["id"]))]
    elif run_id:
        notes.append(f"This run ({run_id}) is not in the store (acceptance history check RUN_DIR keeps and "
                     f"judges it): the trend shows the store's nights without it.")
    label = f"{catalog.label(suite, name)}"
    if s.empty:
        return {"figure": None, "rows": [], "nights": "0", "notes": notes,
                "note": f"No night in the store has {label} values yet.", "label": label}
    order = s.drop_duplicates("night")[["night", "run_id", "started", "pinned"]].reset_index(drop=True)
    position = {n: i for i, n in enumerate(order["night"])}
    dates = [str(d)[:10] for d in order["started"]]
    pinned_at = next((i for i, p in enumerate(order["pinned"]) if p), None)
    tonight_at = position.get(tonight["id"]) if tonight is not None else None
    last = nights[nights["id"].isin(set(order["night"]))].iloc[-1]
    meta = json.loads(last.get("metrics") or "{}").get(key) or {}
    unit = meta.get("unit") or ""
    size = f" at {fmt_size(meta['size'])}" if meta.get("size") else ""
    rails = sorted(int(r) for r in s["rail"].unique() if r >= 0) + ([-1] if (s["rail"] < 0).any() else [])
    lines, rows = [], []
    for rail in rails:
        g = s[s["rail"] == rail]
        values = np.full(len(order), np.nan)
        values[[position[n] for n in g["night"]]] = g["value"].to_numpy(float)
        subject = "fleet" if rail < 0 else f"rail{rail}"
        what = "fleet" if rail < 0 else f"rail {rail}"
        lines.append({"label": what, "values": values, "fleet": rail < 0})
        now = values[tonight_at] if tonight_at is not None else np.nan
        ref = values[pinned_at] if pinned_at is not None else np.nan
        before = values[:tonight_at] if tonight_at is not None else values
        prev = before[np.isfinite(before)]
        change = (now - ref) / ref if np.isfinite(now) and np.isfinite(ref) and ref else None
        sev, kind = _trend_note(findings, subject)
        rows.append({"what": what, "fleet": rail < 0, "nights": f"{int(np.isfinite(values).sum()):,}",
                     "pinned": fmt_num(ref if np.isfinite(ref) else None, unit),
                     "previous": fmt_num(float(prev[-1]) if len(prev) else None, unit),
                     "tonight": fmt_num(now if np.isfinite(now) else None, unit),
                     "change": "–" if change is None else f"{change:+.1%}",
                     "worse": bool(sev) and change is not None and change < 0,
                     "finding": f"{sev.upper()} {HISTORY_SUITE_KINDS.get(kind, kind)}" if sev else "",
                     "finding_class": sev if sev in ("fail", "warn") else "other"})
    title = f"median {label}{size} per rail plane and the fleet, night by night"
    fig = figures.fleet_trend(dates, lines, pinned=pinned_at, tonight=tonight_at, unit=unit, title=title,
                              alt=f"{title}; {len(dates)} nights from {dates[0]} to {dates[-1]}")
    pinned = store.pinned()
    if pinned is None:
        notes.append("No run is pinned (acceptance history pin RUN_DIR: the cluster's acceptance run): "
                     "the nights are judged against the rolling median alone.")
    elif pinned_at is None:
        notes.append(f"The pinned run {pinned['run_id']} ({str(pinned['started'])[:10]}) is not among these "
                     "nights (later than this one, or without values).")
    return {"figure": fig, "rows": rows, "nights": f"{len(dates):,}", "notes": notes, "note": "", "label": label,
            "first": dates[0], "last": dates[-1], "tonight": tonight_at is not None}


def _series_words(series: list[dict], unit: str, flags: bool) -> str:
    if flags:
        hit = sum(1 for p in series if p.get("value"))
        return f"findings on {hit} of {len(series)} nights"
    def point(p):
        mark = " (pinned)" if p.get("pinned") else " (tonight)" if p.get("tonight") else ""
        return f"{fmt_num(p.get('value'))}{mark}"
    shown = [p for p in series if p.get("pinned")][:1] + [series[-1]]
    text = " → ".join(point(p) for p in shown) if len(series) > 1 else point(series[-1])
    return text + (f" {unit}" if unit else "")


def history(store, run_dir: Path, run: dict) -> dict:
    """The History section (acceptance report --history PATH): the store's per-rail and fleet trend, and a
    sparkline of every part with a drift or intermittent finding in RUN_DIR/history.json."""
    run_id = run.get("run_id")
    notes, check = [], None
    try:
        check = read_check(run_dir)
    except InputError as e:
        notes.append(f"{e}")
    if check is not None:
        problem = check_problem(check, run_id)
        if problem:
            notes.append(f"{problem}: its findings are not shown; rerun acceptance history check {run_dir}.")
            check = None
    findings = [f for f in (check or {}).get("findings", []) if isinstance(f, dict)]
    trend = _fleet_trend(store, run_id, findings)
    out = {"store": str(Path(store.path).resolve()), "trend": trend, "checked": check is not None,
           "check_file": str((Path(run_dir) / CHECK_FILE).resolve()), "rows": [], "other": [], "more": "",
           "references": "", "notes": notes, "total": 0}
    if check is None:
        if not notes:
            notes.append(f"acceptance history check {run_dir} has not been run for this night (no {CHECK_FILE}): "
                         "no drift or intermittent findings to show; the fleet trend is the store's.")
        return out
    judged = check.get("store")
    if judged and Path(str(judged)).resolve() != Path(store.path).resolve():
        notes.append(f"The history check judged this night against the store {judged}; the fleet trend is "
                     f"from {out['store']}.")
    refs = []
    if check.get("pinned"):
        refs.append(f"the pinned run {check['pinned']}")
    if check.get("rolling"):
        refs.append(f"the median of the last {len(check['rolling'])} accepted night(s)")
    out["references"] = " and ".join(refs) if refs else "nothing yet (no pinned run, no accepted night)"
    shown = [f for f in findings if f.get("kind") in SHOWN_KINDS]
    shown.sort(key=lambda f: (SEVERITY_ORDER.get(f.get("severity"), 2), str(f.get("kind")),
                              natural_key(str(f.get("subject")))))
    for f in shown[:MAX_ROWS]:
        series = [p for p in (f.get("series") or []) if isinstance(p, dict)]
        flags = f.get("kind") == "intermittent"
        sev = f.get("severity") if f.get("severity") in ("fail", "warn") else "other"
        subject = fmt_text(f.get("subject"))
        fig = None
        if series:
            fig = figures.sparkline([p.get("value") for p in series], pinned=[bool(p.get("pinned")) for p in series],
                                    tonight=[bool(p.get("tonight")) for p in series], flags=flags, severity=sev,
                                    alt=f"{subject}: {f.get('kind')} over {len(series)} nights, "
                                        f"{series[0].get('date')} to {series[-1].get('date')}")
        out["rows"].append({
            "subject": subject, "kind": fmt_text(f.get("kind")), "severity": fmt_text(f.get("severity")),
            "severity_class": sev, "message": fmt_text(f.get("message")), "figure": fig,
            "dates": f"{series[0].get('date')} → {series[-1].get('date')}" if series else "–",
            "points": _series_words(series, f.get("unit") or "", flags) if series else "no series",
            "evidence": [str(e) for e in (f.get("evidence") or [])][:MAX_EVIDENCE]})
    out["total"] = len(shown)
    out["more"] = more(len(shown), len(out["rows"]), CHECK_FILE)
    rest = [f for f in findings if f.get("kind") not in SHOWN_KINDS]
    rest.sort(key=lambda f: (SEVERITY_ORDER.get(f.get("severity"), 2), str(f.get("kind"))))
    out["other"] = [{"subject": fmt_text(f.get("subject")), "kind": fmt_text(HISTORY_SUITE_KINDS.get(
                        f.get("kind"), f.get("kind"))), "severity": fmt_text(f.get("severity")),
                     "severity_class": f.get("severity") if f.get("severity") in ("fail", "warn") else "other",
                     "message": fmt_text(f.get("message"))} for f in rest[:MAX_ROWS]]
    if len(rest) > MAX_ROWS:
        out["more"] = "; ".join(filter(None, [out["more"], more(len(rest), MAX_ROWS, CHECK_FILE)]))
    return out
