"""The report's sections: from an Analysis to small, pre-formatted template contexts.

Each builder returns plain dicts and lists of strings (the template only lays them
out) and caps every table, worst first, so the page stays small at any cluster size.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from ..history.checked import CHECK_FILE, SHOWN_KINDS, check_problem, read_check
from ..records.naming import compress_ints
from ..records.results import InputError
from ..rules import catalog
from ..runtime.overrides import describe as describe_overrides
from . import digest, figures
from .data import (
    collective_labels,
    compress_hosts,
    fmt_int,
    fmt_num,
    fmt_size,
    fmt_text,
    is_missing,
    lower_is_better,
    natural_key,
    natural_sorted,
)

MAX_ROWS = 50          # rows of a capped table
SHOWN_FINDINGS = 20    # confirmed failing findings shown, worst first; the next ones folded
MAX_FINDINGS = 100     # confirmed failing findings in the page at most (shown and folded)
MAX_FOLDED = 50        # warnings, and transients, listed in their folded tables
SHOWN_DRAINS = 20      # drain lines shown; the rest folded (all of them are in drain.txt)
MAX_EVIDENCE = 25      # evidence lines per finding
SEVERITY_ORDER = {"fail": 0, "warn": 1}


def _more(total: int, shown: int, where: str) -> str:
    return f"{total - shown:,} more in {where}" if total > shown else ""


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


def _where(src, dst, rail=None) -> str:
    parts = []
    if not is_missing(src):
        parts.append(f"{src} → {dst}" if not is_missing(dst) else str(src))
    if not is_missing(rail):
        parts.append(f"rail {int(rail)}")
    return ", ".join(parts) or "–"


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
    }


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
        "evidence_more": _more(len(evidence), len(shown), "findings.json"),
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
                "more": _more(len(items), len(rows), "findings.json")}

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
            "more": _more(len(entries), len(rows), 'run.json "power"'), "error": ""}


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
                     "where": _where(r.src, r.dst, r.rail), "size": fmt_size(r.size),
                     "test": fmt_text(r.test)})
    return {"rows": rows, "more": _more(len(table), len(rows), "results.jsonl")}


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
    return {"rows": rows, "more": _more(len(pops), len(rows), 'run.json "fleet"'), "judged": f"{s['judged']:,}",
            "outside": f"{s['outside']:,}", "too_few": f"{s['too_few']:,}",
            "min_population": analysis.profile.get("fleet.min_population")}


# --- 3. heatmaps -----------------------------------------------------------------

def _codes(series: pd.Series, nodes: list[str]) -> np.ndarray:
    """Position of each value in nodes (-1 when absent); per category, not per record, when categorical."""
    index = pd.Index(nodes, dtype=object)
    if isinstance(series.dtype, pd.CategoricalDtype):
        table = index.get_indexer(pd.Index(series.cat.categories.astype(object), dtype=object))
        codes = series.cat.codes.to_numpy()
        return np.where(codes >= 0, table[np.maximum(codes, 0)] if len(table) else -1, -1).astype(np.int64)
    return index.get_indexer(pd.Index(series.astype(object), dtype=object)).astype(np.int64)


def _link_matrix(sub: pd.DataFrame, nodes: list[str]):
    """Median over iterations per (src, dst) -> n x n matrix; failed -> n x n bool; plus summary numbers."""
    n = len(nodes)
    s, d = _codes(sub["src"], nodes), _codes(sub["dst"], nodes)
    ok = (s >= 0) & (d >= 0)
    frame = pd.DataFrame({"key": (s * n + d)[ok], "v": sub["value"].to_numpy(float)[ok],
                          "f": (sub["verdict"].to_numpy(object)[ok] == "fail")})
    grouped = frame.groupby("key", sort=False)
    values = grouped["v"].median()
    failed = grouped["f"].max()
    matrix = np.full((n, n), np.nan)
    matrix.flat[values.index.to_numpy()] = values.to_numpy()
    fmask = np.zeros((n, n), dtype=bool)
    fmask.flat[failed.index.to_numpy()] = failed.to_numpy(bool)
    return matrix, fmask, values


def _matrix_caption(values: pd.Series, nodes: list[str], failed: np.ndarray, unit: str,
                    higher_better: bool, iterations: int) -> str:
    n = len(nodes)
    finite = values.dropna()
    if finite.empty:
        return "no values"
    key = int(finite.idxmin() if higher_better else finite.idxmax())
    worst = f"{nodes[key // n]} → {nodes[key % n]} {fmt_num(finite[key], unit)}"
    parts = [f"{len(finite):,} of {n * (n - 1):,} directed links measured",
             f"median {fmt_num(float(finite.median()), unit)}",
             f"worst {worst}"]
    n_failed = int(failed.sum())
    parts.append(f"{n_failed:,} below threshold (red frame)" if higher_better and n_failed else
                 f"{n_failed:,} above threshold (red frame)" if n_failed else "none beyond threshold")
    if iterations > 1:
        parts.append(f"each cell the median of {iterations} iterations")
    return "; ".join(parts)


def topology_nodes(run: dict) -> list[str]:
    nodes = (run.get("topology") or {}).get("nodes") or {}
    return [str(n) for n in nodes]


def _pairwise(recs: pd.DataFrame, role: str) -> list[tuple[str, pd.DataFrame, bool]]:
    """(label, records, higher is better) of each pairwise metric with `role` (catalog: heatmap,
    curve) that this run recorded between two nodes, in the catalog's order."""
    out = []
    for suite, name in catalog.with_role(role):
        sub = recs[(recs["suite"] == suite) & (recs["metric"] == name) & recs["src"].notna() & recs["dst"].notna()
                   & recs["value"].notna()]
        if len(sub):
            out.append((catalog.label(suite, name), sub, catalog.direction(suite, name) is not False))
    return out


MATRIX_MAX_NODES = 64  # node x node matrices up to this many nodes; beyond, a cell per link is noise
STRIP_WORST = 10       # the worst NICs listed under a node strip


def _heat_subset(sub: pd.DataFrame, higher: bool) -> tuple[pd.DataFrame, str]:
    """The records a heatmap shows: bandwidth at the largest size; latency at its smallest (the size
    latency is gated at), or at its one size."""
    sizes = sub["size"].dropna()
    if sizes.empty:
        return sub, ""
    size = sizes.max() if higher else sizes.min()
    return sub[sub["size"] == size], f" at {fmt_size(size)}"


def _rail_keys(subs) -> list[float]:
    rails = sorted(set().union(*(set(sub["rail"].dropna().unique()) for sub in subs)))
    return [float(r) for r in rails] + ([np.nan] if any(sub["rail"].isna().any() for sub in subs) else [])


def _matrices(shown, nodes: list[str]) -> list[dict]:
    """Per rail, a node x node matrix of each heatmap metric (the few-node view)."""
    out = []
    for rail in _rail_keys([sub for _, sub, _ in shown]):
        label = f"rail {int(rail)}" if not np.isnan(rail) else "no rail"
        entry = {"label": label, "figures": []}
        for title, sub_all, higher in shown:
            sub = sub_all[sub_all["rail"] == rail] if not np.isnan(rail) else sub_all[sub_all["rail"].isna()]
            if sub.empty:
                entry["figures"].append({"figure": None, "caption": f"{label}: no {title} records."})
                continue
            sub, size_note = _heat_subset(sub, higher)
            unit = fmt_text(sub["unit"].iloc[0])
            matrix, failed, values = _link_matrix(sub, nodes)
            iterations = int(sub["iteration"].nunique())
            fig_title = f"{label}: {title}{size_note}"
            fig = figures.heatmap(matrix, failed, nodes, title=fig_title, unit=unit, higher_better=higher,
                                  alt=f"{fig_title}, source x destination node")
            entry["figures"].append({"figure": fig, "caption": _matrix_caption(values, nodes, failed, unit,
                                                                               higher, iterations)})
        out.append(entry)
    return out


def node_rail_medians(sub: pd.DataFrame, nodes: list[str], rails: list[float]):
    """Each NIC's typical link: per (rail, node), the median over the node's records on that rail (as
    source or destination) of value / the rail's median. Returns (relative: rails x nodes, links:
    rails x nodes record counts, the rails' medians). Whole columns at once: 8 M values at 1,024 x 8
    all-pairs."""
    n, r = len(nodes), len(rails)
    rail_col = sub["rail"].to_numpy(float)
    ri = pd.Index(np.nan_to_num(np.asarray(rails, float), nan=-1.0)).get_indexer(np.nan_to_num(rail_col, nan=-1.0))
    v = sub["value"].to_numpy(float)
    ok = (ri >= 0) & np.isfinite(v)
    medians = pd.Series(v[ok]).groupby(ri[ok]).median().reindex(range(r)).to_numpy(float)
    rel = v / np.where(ri >= 0, medians[np.maximum(ri, 0)], np.nan)
    s, d = _codes(sub["src"], nodes), _codes(sub["dst"], nodes)
    keys = np.concatenate([np.where(ok & (s >= 0), s * r + ri, -1), np.where(ok & (d >= 0), d * r + ri, -1)])
    vals = np.concatenate([rel, rel])
    keep = keys >= 0
    grouped = pd.Series(vals[keep]).groupby(keys[keep]).median()
    flat = np.full(n * r, np.nan)
    flat[grouped.index.to_numpy()] = grouped.to_numpy()
    links = np.bincount(keys[keep], minlength=n * r)
    return flat.reshape(n, r).T, links.reshape(n, r).T, medians


def _finding_marks(findings_: list[dict], nodes: list[str], rails: list[float]) -> np.ndarray:
    """rails x nodes: 2 where a failing NIC or node finding names the cell, 1 for a warning (transients
    are not marks: they did not reproduce)."""
    marks = np.zeros((len(rails), len(nodes)), dtype=int)
    col = {name: i for i, name in enumerate(nodes)}
    row = {rl: i for i, rl in enumerate(rails) if not np.isnan(rl)}
    for f in findings_:
        if digest.is_transient(f) or f.get("scope") not in ("nic", "node") or f.get("node") not in col:
            continue
        level = 2 if f.get("severity") == "fail" else 1
        j = col[f["node"]]
        if f["scope"] == "node" or is_missing(f.get("rail")):
            marks[:, j] = np.maximum(marks[:, j], level)
        elif float(f["rail"]) in row:
            i = row[float(f["rail"])]
            marks[i, j] = max(marks[i, j], level)
    return marks


def _strips(shown, nodes: list[str], findings_: list[dict]) -> list[dict]:
    """Per heatmap metric, one rails x nodes strip of each NIC's typical link, and its worst NICs."""
    rails = _rail_keys([sub for _, sub, _ in shown])
    rail_names = [str(int(rl)) if not np.isnan(rl) else "–" for rl in rails]
    marks = _finding_marks(findings_, nodes, rails)
    out = []
    for title, sub_all, higher in shown:
        sub, size_note = _heat_subset(sub_all, higher)
        unit = fmt_text(sub["unit"].iloc[0])
        rel, links, medians = node_rail_medians(sub, nodes, rails)
        fig_title = f"{title}{size_note}: each NIC's typical link, relative to its rail"
        fig = figures.node_strip(rel, marks, nodes, rail_names, title=fig_title, higher_better=higher,
                                 alt=f"{title}{size_note}, rails x {len(nodes):,} nodes, each cell a NIC's median "
                                     "link relative to its rail's median")
        badness = np.abs(np.log(np.where(rel > 0, rel, np.nan)))
        badness = np.where((rel < 1) if higher else (rel > 1), badness, np.nan)
        order = np.argsort(np.nan_to_num(-badness.ravel(), nan=np.inf), kind="stable")[:STRIP_WORST]
        worst = []
        for flat in order:
            i, j = divmod(int(flat), len(nodes))
            if np.isnan(badness[i, j]):
                break
            worst.append({"node": nodes[j], "rail": rail_names[i], "relative": f"{rel[i, j]:.2f} ×",
                          "value": fmt_num(rel[i, j] * medians[i], unit), "median": fmt_num(medians[i], unit),
                          "links": f"{int(links[i, j]):,}", "mark": ("fail", "warn", "")[2 - marks[i, j]]})
        measured = int((links > 0).sum())
        k = max(1, -(-len(nodes) // (figures.STRIP_BAND * figures.STRIP_BANDS)))
        caption = (f"{len(nodes):,} nodes × {len(rails)} rail{'s' if len(rails) != 1 else ''}, "
                   f"{measured:,} NICs measured; a cell: the median over the NIC's links (as source or "
                   f"destination) of {title}{size_note} / its rail's median"
                   + (f"; a column is the {'lowest' if higher else 'highest'} of {k} nodes" if k > 1 else "")
                   + ". Ringed: a NIC or node finding (red: fail, amber: warning).")
        out.append({"figure": fig, "caption": caption, "worst": worst, "title": f"{title}{size_note}",
                    "lower": "lowest" if higher else "highest"})
    return out


def heatmaps(recs: pd.DataFrame, run: dict, findings_: list[dict] | None = None) -> dict:
    """Up to MATRIX_MAX_NODES nodes: per rail, a node x node matrix of each heatmap metric. Beyond, a
    cell per link is noise (and a sampled pattern leaves most cells empty): per metric, a strip of
    every NIC's typical link relative to its rail, and the worst NICs named."""
    shown = _pairwise(recs, "heatmap")
    if not shown:
        return {"available": False, "mode": "none", "rails": [], "strips": [], "nodes": 0,
                "note": "No point-to-point records (the pairwise suites: rdma_write, gpudirect) in this run: "
                        "no heatmaps."}
    nodes = natural_sorted(set(topology_nodes(run)).union(*(set(sub["src"].unique()) | set(sub["dst"].unique())
                                                            for _, sub, _ in shown)))
    if len(nodes) <= MATRIX_MAX_NODES:
        return {"available": True, "mode": "matrix", "rails": _matrices(shown, nodes), "strips": [],
                "nodes": len(nodes), "note": ""}
    return {"available": True, "mode": "strip", "rails": [], "strips": _strips(shown, nodes, findings_ or []),
            "nodes": len(nodes), "note": ""}


# --- 3b. the switch tree of each rail ----------------------------------------------

MAX_TREES = 16         # tree figures at most (one per rail, or per group of rails drawn alike)
NODE_SCOPES = ("nic", "node", "link")


def _mark_of(severity) -> str | None:
    return severity if severity in ("fail", "warn") else None


def _tree_marks(tree, rail, findings) -> tuple[dict, dict]:
    """What the findings on `rail` (None: every finding) shade in `tree`: the marks figures.tree draws,
    and why, in words, per component (for the alt text and the caption)."""
    marks = {"leaves": {}, "spines": {}, "uplinks": {}, "nodes": {}, "plane": None}
    why: dict[tuple, list[str]] = {}
    missing: list[str] = []
    spines = set(tree.spines)
    leaf_of = {n: leaf for leaf, ns in tree.leaves.items() for n in ns}

    def on(r) -> bool:
        return rail is None or r is None or is_missing(r) or int(r) == rail

    def put(kind, key, mark, reason):
        if kind == "plane":
            marks["plane"] = figures.worse_mark(marks["plane"], mark)
        else:
            marks[kind][key] = figures.worse_mark(marks[kind].get(key), mark)
        why.setdefault((kind, key), []).append(reason)

    def switch(name, mark, reason):
        if name in tree.leaves:
            put("leaves", name, mark, reason)
        elif name in spines:
            put("spines", name, mark, reason)
        elif name:
            missing.append(f"switch {name}")

    def uplinks(leaf, cables, mark, reason):
        pairs = [(str(c.get("leaf") or leaf), str(c.get("spine"))) for c in cables or [] if c.get("spine")]
        if not pairs and leaf in tree.leaves:
            pairs = [(u.leaf, u.spine) for u in tree.uplinks_of(leaf)]
        known = {(u.leaf, u.spine) for u in tree.uplinks}
        for pair in pairs:
            if pair in known:
                put("uplinks", pair, mark, reason)
            else:
                missing.append(f"uplink {pair[0]} → {pair[1]}")
        if not pairs and leaf:
            missing.append(f"{leaf}'s uplinks")

    def node(name, mark, reason):
        if name is None or is_missing(name):
            return
        if str(name) not in leaf_of:
            missing.append(f"node {name}")
        else:
            put("nodes", str(name), mark, reason)

    for f in findings:
        mark = _mark_of(f.get("severity"))
        if mark is None:
            continue
        scope = f.get("scope")
        what = f"{mark} {scope} finding"
        if on(f.get("rail")):
            if scope == "switch":
                switch(f.get("switch"), mark, what)
            elif scope == "uplink":
                uplinks(f.get("switch"), f.get("uplinks"), mark, what)
            elif scope in NODE_SCOPES:
                node(f.get("node"), mark, what)
                if scope == "link":
                    node(f.get("peer"), mark, what)
            elif scope in ("rail", "cluster"):
                put("plane", None, mark, what)
        for a in f.get("alternatives") or []:
            if not isinstance(a, dict) or not on(a.get("rail", f.get("rail"))):
                continue
            alt, reason = f"{mark}-alt", f"cannot be told from a {what}"
            if a.get("scope") == "switch":
                switch(a.get("switch"), alt, reason)
            elif a.get("scope") == "uplink":
                uplinks(a.get("switch"), a.get("uplinks"), alt, reason)
            elif a.get("scope") in NODE_SCOPES:
                node(a.get("node"), alt, reason)
            elif a.get("scope") == "rail":
                put("plane", None, alt, reason)
    return marks, {"why": why, "missing": list(dict.fromkeys(missing)), "leaf_of": leaf_of}


def _cable_words(tree, leaf, spine) -> str:
    ports = [f"{u.leaf_port or '?'}–{u.spine_port or '?'}" for u in tree.uplinks
             if u.leaf == leaf and u.spine == spine and (u.leaf_port or u.spine_port)]
    return f"uplink {leaf} → {spine}" + (f" (ports {', '.join(ports[:4])}{', …' if len(ports) > 4 else ''})"
                                         if ports else "")


def _shading_words(tree, marks: dict, why: dict) -> list[str]:
    """Sentences naming what is shaded, strongest first: "Shaded fail: leaf leaf2 (fail switch finding)." """
    items: dict[str, list[str]] = {}
    for kind, label in (("leaves", "leaf"), ("spines", "spine"), ("uplinks", None), ("nodes", "node")):
        for key, mark in marks[kind].items():
            name = _cable_words(tree, *key) if kind == "uplinks" else f"{label} {key}"
            reasons = ", ".join(dict.fromkeys(why.get((kind, key), [])))
            items.setdefault(mark, []).append(f"{name} ({reasons})")
    if marks["plane"]:
        items.setdefault(marks["plane"], []).append(
            f"the whole rail plane ({', '.join(dict.fromkeys(why.get(('plane', None), [])))})")
    heads = {"fail": "Shaded red (fail)", "warn": "Shaded amber (warn)",
             "fail-alt": "Hatched light red, dashed (a fail the measured pairs cannot tell from another "
                         "explanation)",
             "warn-alt": "Hatched light amber, dashed (a warning the measured pairs cannot tell from another "
                         "explanation)"}
    out = []
    for mark in sorted(items, key=lambda m: -figures.MARK_RANK[m]):
        names = items[mark]
        shown = names[:12]
        more = f" and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
        out.append(f"{heads[mark]}: {'; '.join(shown)}{more}.")
    return out


def _tree_rails(analysis, recs: pd.DataFrame, run: dict) -> list[int | None]:
    """The rails to draw a tree for: each rail with its own tree, and, when one tree is shared, every
    rail the run knows (its topology, its records, its findings); [None] when it knows none."""
    trees = analysis.fabric.trees
    own = {int(r) for r in trees if r is not None}
    if None not in trees:
        return sorted(own)
    known = set(own)
    for r in (run.get("topology") or {}).get("rails") or []:
        if isinstance(r, (int, np.integer)) or (isinstance(r, str) and r.isdigit()):
            known.add(int(r))
    if len(recs):
        known.update(int(r) for r in recs["rail"].dropna().unique())
    for f in analysis.findings or []:
        if not is_missing(f.get("rail")):
            known.add(int(f.get("rail")))
    return sorted(known) or [None]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def fabric_trees(analysis, recs: pd.DataFrame, run: dict) -> dict:
    """Each rail's switch tree with what the findings name shaded; rails drawn alike share a figure."""
    fab = getattr(analysis, "fabric", None)
    if fab is None or not fab.trees:
        return {"available": False, "rails": [], "facts": "", "note": ""}
    findings_ = analysis.findings or []
    groups: list[dict] = []
    for rail in _tree_rails(analysis, recs, run):
        tree = fab.tree(rail) if rail is not None else fab.trees.get(None)
        if tree is None:
            continue
        marks, info = _tree_marks(tree, rail, findings_)
        key = repr(sorted((k, sorted(v.items()) if isinstance(v, dict) else v) for k, v in marks.items()))
        for g in groups:
            if g["tree"] is tree and g["key"] == key:
                g["rails"].append(rail)
                break
        else:
            groups.append({"tree": tree, "key": key, "rails": [rail], "marks": marks, "info": info})
    out = []
    for g in groups[:MAX_TREES]:
        tree, marks, info, rails = g["tree"], g["marks"], g["info"], g["rails"]
        if rails == [None]:
            label = "every rail"
        elif len(rails) == 1:
            label = f"rail {rails[0]}"
        else:
            label = f"rails {compress_ints(rails)}"
        nodes = sum(len(v) for v in tree.leaves.values())
        spines = tree.spines
        shape = ((f"{len(spines)} spine{'' if len(spines) == 1 else 's'}, " if spines else "no spines, ")
                 + f"{len(tree.leaves)} lea{'f' if len(tree.leaves) == 1 else 'ves'}, "
                 f"{len(tree.uplinks)} uplink{'' if len(tree.uplinks) == 1 else 's'}, {nodes:,} nodes")
        leaf_keep = (set(marks["leaves"]) | {leaf for leaf, _ in marks["uplinks"]}
                     | {info["leaf_of"][n] for n in marks["nodes"]})
        _, hidden = figures.collapse(list(tree.leaves), leaf_keep, figures.MAX_LEAVES)
        _, hidden_spines = figures.collapse(spines, set(marks["spines"]) | {s for _, s in marks["uplinks"]},
                                            figures.MAX_SPINES)
        words = _shading_words(tree, marks, info["why"])
        if not words:
            words = [f"Nothing shaded: no finding names a switch, uplink or node of {label}."]
        if len(rails) > 1:
            words.insert(0, "The same tree and the same shading on each of these rails.")
        drawn = []
        if hidden:
            drawn.append(f"{hidden} unshaded leaves drawn as one box")
        if hidden_spines:
            drawn.append(f"{hidden_spines} unshaded spines drawn as one box")
        if info["missing"]:
            drawn.append("named by findings but not in this tree: " + ", ".join(info["missing"][:8])
                         + (" …" if len(info["missing"]) > 8 else ""))
        title = f"{label}: switch tree"
        alt = f"{title} ({shape}). " + " ".join(words) + (f" ({'; '.join(drawn)}.)" if drawn else "")
        fig = figures.tree(tree, title=title, marks=marks, alt=alt, summarize=compress_hosts)
        out.append({"label": label, "figure": fig,
                    "caption": f"{shape}. " + " ".join(words) + (f" {_sentence('; '.join(drawn))}." if drawn else "")})
    names = topology_nodes(run)
    unknown = fab.unknown(names) if names else []
    note = ""
    if unknown:
        note = (f"{len(unknown):,} of the run's {len(names):,} nodes are on no leaf of this tree: "
                f"{compress_hosts(unknown)}.")
    if None not in fab.trees:
        ran = {int(r) for r in (run.get("topology") or {}).get("rails") or [] if isinstance(r, (int, np.integer))}
        without = sorted(ran - {int(r) for r in fab.trees})
        if without:
            note += f" No tree for rail{'' if len(without) == 1 else 's'} {compress_ints(without)}."
    if len(groups) > MAX_TREES:
        note += f" {len(groups) - MAX_TREES} more rails' trees not drawn."
    rails_word = "one tree for every rail" if set(fab.trees) == {None} else \
        f"{len([r for r in fab.trees if r is not None])} rail trees"
    facts = f"From {fab.format or 'a topology file'} {fab.source}".rstrip() + f" ({rails_word})."
    return {"available": True, "rails": out, "facts": facts, "note": note.strip()}


# --- 4. bandwidth and latency against size ------------------------------------

def sweeps(recs: pd.DataFrame) -> dict:
    figs, notes = [], []
    curves = [(title, sub[sub["size"].notna()]) for title, sub, _ in _pairwise(recs, "curve")]
    for title, bw in curves:
        unit = fmt_text(bw["unit"].iloc[0])
        stats = bw.groupby(["rail", "size"], dropna=False)["value"].agg(["median", "min", "max"]).reset_index()
        thr = bw.groupby("size")["threshold"].median().dropna().reset_index()
        figs.append({"figure": figures.sweep(stats, title=f"{title} against message size",
                                             ylabel=f"bandwidth ({unit})", logy=True, threshold=thr,
                                             alt=f"{title} against message size per rail"),
                     "caption": "Per rail: median over links (line) and min–max over links (band); "
                                "dashed red: the profile's bound (records' threshold column)."})
    if not curves:
        notes.append("No pairwise bandwidth records (write, read, GPU write) in this run.")
    panels = _latency_panels(recs)
    for panel, lat, order, short, timings in panels:
        unit = fmt_text(lat["unit"].iloc[0])
        sizes = lat["size"].dropna().unique()
        if len(sizes) > 1:
            for metric in [m for m in order if m in set(lat["metric"].unique())][:4]:
                sub = lat[lat["metric"] == metric]
                stats = sub.groupby(["rail", "size"], dropna=False)["value"].agg(["median", "min", "max"]).reset_index()
                thr = sub.groupby("size")["threshold"].median().dropna().reset_index()
                figs.append({"figure": figures.sweep(stats, title=f"{panel} {short[metric]} against size",
                                                     ylabel=f"latency ({unit})", logy=True, threshold=thr,
                                                     alt=f"{panel} {metric} against message size"),
                             "caption": f"Per rail: median over links and min–max band. {timings}"})
        else:
            stats = lat.groupby(["rail", "metric"], observed=True)["value"].agg(["median", "min", "max"]).reset_index()
            rank = {m: i for i, m in enumerate(order)}
            stats = stats.sort_values("metric", key=lambda s: s.map(rank))
            size = fmt_size(sizes[0]) if len(sizes) else "–"
            fig = figures.latency_points(stats.assign(metric=stats["metric"].map(short)),
                                         title=f"{panel} at {size} (the only latency size measured)",
                                         ylabel=f"latency ({unit})",
                                         alt=f"{panel} percentiles at {size} per rail")
            figs.append({"figure": fig,
                         "caption": f"Per rail: median over links (dot) and min–max over links (bar). {timings}"})
    if not panels:
        notes.append("No pairwise latency records (write, read, atomic, GPU write) in this run.")
    return {"figures": figs, "notes": notes}


def _latency_panels(recs: pd.DataFrame) -> list[tuple[str, pd.DataFrame, list[str], dict[str, str], str]]:
    """(title, records, metric order, short label of each metric, what a sample is) of each report
    latency panel (catalog Metric.panel) that this run has records for, in the catalog's order."""
    out = []
    for suite, panel, names in catalog.panels():
        lat = recs[(recs["suite"] == suite) & recs["metric"].isin(names) & recs["value"].notna()]
        if lat.empty:
            continue
        short = {n: catalog.label(suite, n).removeprefix(panel + " ").replace(" latency", "") for n in names}
        by_timing: dict[str, list[str]] = {}
        for n in names:
            timing = catalog.metric(suite, n).timing
            if timing:
                by_timing.setdefault(timing, []).append(short[n])
        timings = " ".join(f"{', '.join(shown) if len(by_timing) > 1 else 'Each sample'}: "
                           f"{catalog.TIMING_WORDS[t]}." for t, shown in by_timing.items())
        out.append((panel, lat, names, short, timings))
    return out


# --- 5. collectives --------------------------------------------------------------

def _of(recs: pd.DataFrame, pairs) -> pd.Series:
    """Boolean mask: the record's (suite, metric) is one of pairs."""
    mask = pd.Series(False, index=recs.index)
    for suite, name in set(pairs):
        mask |= (recs["suite"] == suite) & (recs["metric"] == name)
    return mask


def collectives(recs: pd.DataFrame) -> dict:
    coll = recs[_of(recs, catalog.communicator_panels()) & recs["value"].notna() & recs["size"].notna()]
    if coll.empty:
        return {"figure": None, "rows": [], "note": "No collective busbw records in this run."}
    coll = collective_labels(coll)
    scope_order = {"world": 0, "rail": 1, "node": 2}
    panels, rows = [], []
    for (op, scope), sub in sorted(coll.groupby(["op", "scope"], sort=False),
                                   key=lambda t: (t[0][0], scope_order.get(t[0][1], 9), t[0][1])):
        unit = fmt_text(sub["unit"].iloc[0])
        per = sub.groupby(["comm", "size"])["value"].median().reset_index()
        comms = sorted(per["comm"].unique(), key=natural_key)
        lines = []
        if len(comms) <= 8:
            for comm in comms:
                c = per[per["comm"] == comm].sort_values("size")
                lines.append({"label": comm if scope != "world" else "world", "size": c["size"].to_numpy(),
                              "median": c["value"].to_numpy(), "min": None, "max": None})
        else:
            agg = per.groupby("size")["value"].agg(["median", "min", "max"]).reset_index()
            lines.append({"label": f"median of {len(comms)} ({scope})", "size": agg["size"].to_numpy(),
                          "median": agg["median"].to_numpy(), "min": agg["min"].to_numpy(),
                          "max": agg["max"].to_numpy()})
        thr = sub.groupby("size")["threshold"].median().dropna().reset_index()
        panels.append({"op": op, "scope": scope, "lines": lines, "threshold": thr, "unit": unit})
        largest = sub["size"].max()
        at = per[per["size"] == largest]
        worst = at.loc[at["value"].idxmin()] if len(at) else None
        thr_at = thr[thr["size"] == largest]["threshold"]
        rows.append({"op": op, "scope": scope, "comms": f"{len(comms):,}", "size": fmt_size(largest),
                     "median": fmt_num(float(at["value"].median()) if len(at) else None, unit),
                     "worst": fmt_num(worst["value"], unit) if worst is not None else "–",
                     "worst_comm": fmt_text(worst["comm"]) if worst is not None else "–",
                     "threshold": fmt_num(float(thr_at.iloc[0]) if len(thr_at) else None, unit),
                     "failed": f"{int((sub['verdict'] == 'fail').sum()):,}"})
    fig = figures.collectives(panels, alt="collective busbw against message size per op and scope")
    return {"figure": fig, "rows": rows, "note": ""}


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
            where = _where(series["worst_src"], series["worst_dst"], series["worst_rail"])
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
                     "where": _where(get(r, "src"), get(r, "dst"), get(r, "rail")),
                     "value": fmt_num(get(r, "value")), "baseline": fmt_num(get(r, "baseline")),
                     "change": "–" if is_missing(r.chg) else f"{r.chg:+.1%}",
                     "regression": bool(r.isreg)})
    return {"given": True, "rows": rows, "total": f"{len(d):,}", "regressions": f"{int(regress.sum()):,}",
            "more": _more(len(d), len(rows), "the comparison (acceptance compare RUN_DIR BASELINE_DIR)"),
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
    out["more"] = _more(len(shown), len(out["rows"]), CHECK_FILE)
    rest = [f for f in findings if f.get("kind") not in SHOWN_KINDS]
    rest.sort(key=lambda f: (SEVERITY_ORDER.get(f.get("severity"), 2), str(f.get("kind"))))
    out["other"] = [{"subject": fmt_text(f.get("subject")), "kind": fmt_text(HISTORY_SUITE_KINDS.get(
                        f.get("kind"), f.get("kind"))), "severity": fmt_text(f.get("severity")),
                     "severity_class": f.get("severity") if f.get("severity") in ("fail", "warn") else "other",
                     "message": fmt_text(f.get("message"))} for f in rest[:MAX_ROWS]]
    if len(rest) > MAX_ROWS:
        out["more"] = "; ".join(filter(None, [out["more"], _more(len(rest), MAX_ROWS, CHECK_FILE)]))
    return out


# --- 8. counters -----------------------------------------------------------------

def counters(recs: pd.DataFrame) -> dict:
    c = recs[recs["suite"].isin(catalog.suite_names(ports=True))]
    if c.empty:
        return {"available": False, "summary": [], "rows": [], "more": "",
                "note": "No counter data in this run."}
    summary_rows = []
    groups = sorted(c.groupby("metric", sort=False, observed=True),
                    key=lambda t: (-int((t[1]["verdict"] == "fail").sum()), -int((t[1]["verdict"] == "warn").sum()),
                                   -int((t[1]["value"].fillna(0) != 0).sum()), str(t[0])))
    for metric, sub in groups:
        values = sub["value"]
        nonzero = sub[values.fillna(0) != 0]
        top = sub.loc[values.idxmax()] if values.notna().any() and values.max() != 0 else None
        summary_rows.append({"metric": fmt_text(metric), "unit": fmt_text(sub["unit"].iloc[0]),
                             "records": f"{len(sub):,}", "nonzero": f"{len(nonzero):,}",
                             "total": fmt_num(float(values.sum())),
                             "max": fmt_num(top["value"]) if top is not None else "–",
                             "where": _where(top["src"], top["dst"], top["rail"]) if top is not None else "–",
                             "failed": f"{int((sub['verdict'] == 'fail').sum()):,}"})
    hot = c[(c["value"].fillna(0) != 0) | c["verdict"].isin(["fail", "warn"])]
    hot = hot.assign(_sev=hot["verdict"].map(SEVERITY_ORDER).fillna(2)).sort_values(
        ["_sev", "value"], ascending=[True, False])
    rows = [{"node": fmt_text(r.src), "peer": fmt_text(r.dst), "rail": fmt_int(r.rail), "metric": fmt_text(r.metric),
             "value": fmt_num(r.value, r.unit if not is_missing(r.unit) else None), "verdict": fmt_text(r.verdict),
             "detail": fmt_text(r.detail)}
            for r in hot.head(MAX_ROWS).itertuples(index=False)]
    return {"available": True, "summary": summary_rows, "rows": rows,
            "more": _more(len(hot), len(rows), "results.jsonl"),
            "note": "" if len(hot) else "Every counter is zero."}


# --- 8b. incast -------------------------------------------------------------------

def incast(recs: pd.DataFrame, samples: pd.Series | None = None) -> dict:
    """One row per (rail, receiver): aggregate into it, fairness, its latency under load; worst first.
    The columns are the catalog's (Metric.column): "aggregate" (its record's samples are the senders),
    "fair" (its detail names the slowest sender), "p99".
    samples: the records' `samples` (the report's frame leaves it out), whose aggregate's is its senders."""
    columns = catalog.columns()
    inc = recs[_of(recs, columns)]
    if inc.empty:
        return {"rows": [], "more": "", "note": "No incast records in this run."}
    senders = samples.reindex(inc.index) if samples is not None else pd.Series(np.nan, index=inc.index)
    inc = inc.assign(receiver=inc["src"].astype(object), rail_key=inc["rail"].astype(float),
                     samples=pd.to_numeric(senders, errors="coerce").to_numpy(dtype=float))
    per = inc.groupby(["rail_key", "receiver", "suite", "metric"], dropna=False, observed=True).agg(
        value=("value", "median"), threshold=("threshold", "median"),
        failed=("verdict", lambda v: int((v == "fail").sum())), detail=("detail", "last"),
        samples=("samples", "last"), unit=("unit", "first")).reset_index()
    table = {}
    for r in per.itertuples(index=False):
        row = table.setdefault((r.rail_key, r.receiver), {"failed": 0, "senders": "–", "slowest": "–"})
        column = columns[(r.suite, r.metric)]
        row[column] = fmt_num(r.value, r.unit if r.unit != "ratio" else None)
        row["failed"] += r.failed
        if column == "aggregate" and pd.notna(r.samples):
            row["senders"] = str(int(r.samples))  # the aggregate's samples are its senders (drivers.incast)
        if column == "fair":
            row["fair_value"] = r.value
            if isinstance(r.detail, str):
                row["slowest"] = r.detail
    rows = []
    for (rail, receiver), row in table.items():
        rows.append({"rail": fmt_int(rail), "receiver": fmt_text(receiver), "senders": row["senders"],
                     "aggregate": row.get("aggregate", "–"), "fair": row.get("fair", "–"),
                     "p99": row.get("p99", "–"), "slowest": row["slowest"],
                     "verdict": "fail" if row["failed"] else "pass",
                     "_key": (-row["failed"], row.get("fair_value", 1.0), rail, natural_key(str(receiver)))})
    rows.sort(key=lambda r: r.pop("_key"))
    shown = rows[:MAX_ROWS]
    suites = ", ".join(sorted({s for s, _ in columns}))
    return {"rows": shown, "more": _more(len(rows), len(shown), f"results.jsonl (suite {suites})"),
            "note": "" if any(r["fair"] != "–" for r in rows)
            else "Fairness needs 2 senders into a receiver, i.e. at least 3 nodes on a rail."}


# --- 8c. perftest cross-check -------------------------------------------------------

def crosscheck(recs: pd.DataFrame) -> dict:
    """Per rail: perftest's bandwidth and latency beside the harness's own at the same size (medians):
    the catalog's cross-check metrics (Metric.crosscheck) beside the same metric of the suite they check."""
    beside = {(s, n): other for s, n, other in catalog.crosschecks()}
    pt = recs[_of(recs, beside) & recs["value"].notna()]
    if pt.empty:
        return {"rows": [], "note": "No perftest records in this run (perftest or an RDMA device missing)."}
    own = {other: recs[(recs["suite"] == other) & recs["value"].notna()] for other in set(beside.values())}
    rows = []
    for (suite, rail, metric), g in pt.groupby(["suite", "rail", "metric"], dropna=False, observed=True):
        other = beside[(suite, metric)]
        size = g["size"].median()
        checked = own[other]
        mine = checked[(checked["metric"] == metric) & (checked["rail"] == rail) & (checked["size"] == size)]
        theirs, ours = float(g["value"].median()), float(mine["value"].median()) if len(mine) else None
        unit = fmt_text(g["unit"].iloc[0])
        engine = ", ".join(sorted(map(str, mine["engine"].dropna().unique()))) if len(mine) else "–"
        ratio = "–" if not ours or not theirs else f"{ours / theirs:.2f}"
        rows.append({"rail": fmt_int(rail), "metric": catalog.label(other, metric),
                     "size": fmt_size(size), "theirs": fmt_num(theirs, unit), "harness": fmt_num(ours, unit),
                     "engine": engine, "ratio": ratio, "pairs": f"{len(g):,}"})
    return {"rows": rows, "note": "Latency: perftest reports half a ping-pong round trip; the mpi engine's put "
                                  "latency is a full put + flush round trip, the verbs engine's is perftest's method."}


# --- 9. environment --------------------------------------------------------------

MAX_NODE_ROWS = 16


def environment(run: dict) -> dict:
    topo = run.get("topology") or {}
    nodes = topo.get("nodes") or {}
    if not isinstance(nodes, dict):
        nodes = {str(n): [] for n in nodes}
    names = natural_sorted(nodes)
    rails = topo.get("rails") or []
    facts = [("nodes", f"{len(names):,}" + (f" ({compress_hosts(names)})" if names else "")),
             ("ranks (world size)", fmt_text(topo.get("world_size"))),
             ("rails", compress_ints(rails) if rails and all(isinstance(r, int) for r in rails) else
              ", ".join(map(str, rails)) or "–")]
    engines = run.get("engines") or {}
    if isinstance(engines, dict):
        for suite, e in sorted(engines.items()):
            if isinstance(e, dict):
                facts.append((f"engine: {suite}", f"{e.get('engine') or 'none usable'}: {e.get('why') or '–'}"))
    ranks = topo.get("ranks") or []
    nics = {}
    for r in ranks if isinstance(ranks, list) and len(ranks) <= 100_000 else []:
        if isinstance(r, dict) and r.get("nic"):
            nics.setdefault(r.get("rail"), set()).add(str(r["nic"]))
    if nics:
        facts.append(("NICs per rail", "; ".join(f"rail {k}: {', '.join(sorted(v))}" for k, v in
                                                 sorted(nics.items(), key=lambda t: natural_key(t[0])))))
    # nodes -> ranks: all of them when few; else the first ones and the odd ones out.
    per_node = {n: list(nodes.get(n) or []) for n in names}
    counts = pd.Series({n: len(v) for n, v in per_node.items()}, dtype=int)
    usual = int(counts.mode().iat[0]) if len(counts) else 0
    odd = [n for n in names if len(per_node[n]) != usual]
    if len(names) <= MAX_NODE_ROWS:
        listed = names
    else:
        listed = list(dict.fromkeys(names[:4] + odd[:MAX_NODE_ROWS]))
    node_rows = [{"node": n, "count": str(len(per_node[n])), "ranks": compress_ints(per_node[n])
                  if all(isinstance(x, int) for x in per_node[n]) else ", ".join(map(str, per_node[n])),
                  "odd": n in odd} for n in listed]
    node_note = ""
    if len(names) > len(listed):
        node_note = (f"{len(names) - len(odd):,} of {len(names):,} nodes have {usual} ranks"
                     + (f"; {len(odd):,} differ (listed first {min(len(odd), MAX_NODE_ROWS)})" if odd else "")
                     + f"; showing {len(listed)} nodes.")
    # software: nodes grouped by identical versions.
    software = run.get("software") or {}
    keys = list(dict.fromkeys(k for v in software.values() if isinstance(v, dict) for k in v))
    groups: dict[tuple, list[str]] = {}
    for node, versions in software.items():
        versions = versions if isinstance(versions, dict) else {}
        groups.setdefault(tuple(str(versions.get(k, "–")) for k in keys), []).append(str(node))
    ordered = sorted(groups.items(), key=lambda t: -len(t[1]))
    sw_rows = [{"count": f"{len(ns):,}", "nodes": compress_hosts(ns), "versions": list(vals), "odd": i > 0}
               for i, (vals, ns) in enumerate(ordered[:20])]
    return {"facts": facts, "node_rows": node_rows, "node_note": node_note,
            "software_keys": keys, "software_rows": sw_rows,
            "software_note": ("identical on every node" if len(groups) == 1 else
                              f"{len(groups)} different version sets; the odd ones out are highlighted"
                              if groups else "no software versions in run.json"),
            "software_more": _more(len(ordered), len(sw_rows), "run.json")}
