"""The measurements by kind: bandwidth and latency against message size (sweeps, with the catalog's
latency panels), collectives' bus bandwidth, port counters, incast per receiver, and the perftest
cross-check beside the harness's own numbers."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...rules import catalog
from .. import figures
from ..data import collective_labels, fmt_int, fmt_num, fmt_size, fmt_text, is_missing, natural_key
from .common import MAX_ROWS, SEVERITY_ORDER, more, pairwise, where_words


# --- 4. bandwidth and latency against size ------------------------------------

def sweeps(recs: pd.DataFrame) -> dict:
    figs, notes = [], []
    curves = [(title, sub[sub["size"].notna()]) for title, sub, _ in pairwise(recs, "curve")[0]]
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
                             "where": where_words(top["src"], top["dst"], top["rail"]) if top is not None else "–",
                             "failed": f"{int((sub['verdict'] == 'fail').sum()):,}"})
    hot = c[(c["value"].fillna(0) != 0) | c["verdict"].isin(["fail", "warn"])]
    hot = hot.assign(_sev=hot["verdict"].map(SEVERITY_ORDER).fillna(2)).sort_values(
        ["_sev", "value"], ascending=[True, False])
    rows = [{"node": fmt_text(r.src), "peer": fmt_text(r.dst), "rail": fmt_int(r.rail), "metric": fmt_text(r.metric),
             "value": fmt_num(r.value, r.unit if not is_missing(r.unit) else None), "verdict": fmt_text(r.verdict),
             "detail": fmt_text(r.detail)}
            for r in hot.head(MAX_ROWS).itertuples(index=False)]
    return {"available": True, "summary": summary_rows, "rows": rows,
            "more": more(len(hot), len(rows), "results.jsonl"),
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
    return {"rows": shown, "more": more(len(rows), len(shown), f"results.jsonl (suite {suites})"),
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
