"""Findings that are not point-to-point: collectives, memreg, preflight, port counters."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd

from ..rules import catalog
from ..records.results import FAILED_METRIC
from .base import EVIDENCE_MAX, codes_of, floats_of
from .evaluate import direction_of
from .load import FIELD_COLUMNS, with_fields
from .finding import make_finding
from .wording import capped, fmt_value, size_text, data_loss, fleet_basis



# Facts of a node's NIC that a communicator's test records (catalog Metric.nic_fact: GPUDirect in use).
GDR_METRICS = tuple(dict.fromkeys(n for _, n in catalog.with_role("nic_fact")))


def _in(series: pd.Series, values) -> np.ndarray:
    """Boolean mask: series is one of values (fast for categoricals)."""
    out = np.zeros(len(series), dtype=bool)
    for v in values:
        out |= codes_of(series, v)
    return out


def _as_text(x, m) -> str:
    """A value or bound in a metric's failure text (Metric.fails): bytes as "N B", a missing one as
    "unlimited" where its bound may be."""
    if x is None or math.isnan(x):
        return "unlimited" if m.unlimited else fmt_value(x)
    return f"{int(x)} B" if m.unit == "bytes" else fmt_value(x)


def _bound_text(suite: str, metric: str, value, bound, unit: str, how=None, row=None) -> str:
    higher = direction_of(suite, metric)
    unit = unit or ""
    m = catalog.metric(suite, metric)
    if m is not None and m.fails:
        return m.fails.format(value=_as_text(value, m), bound=_as_text(bound, m))
    if metric in catalog.DATA_ERROR_NAMES:
        counts = {k: getattr(row, k, None) for k in ("ops", "ops_failed", "ops_missing")}
        return (f"returned wrong data ({data_loss(metric, value, counts['ops'], counts['ops_failed'], counts['ops_missing'], suite=suite, op=getattr(row, 'op', None))})")
    rel = "<" if higher else ">"
    which = "fleet bound" if how == "fleet" else "bound"
    return f"{metric} {fmt_value(value)} {unit} {rel} {which} {fmt_value(bound)} {unit}".rstrip()


def other_failures(ev: pd.DataFrame, p2p_idx: np.ndarray) -> list[dict]:
    """Failed bounds that the point-to-point graph does not localize."""
    fail = (codes_of(ev["verdict"], "fail") & ~_in(ev["suite"], catalog.suite_names(ports=True))
            & ~codes_of(ev["metric"], FAILED_METRIC))
    fail[p2p_idx] = False
    idx = np.flatnonzero(fail)
    if not len(idx):
        return []
    cols = ["suite", "metric", "value", "unit", "size", "rail", "src", "dst", "op", "scope", "threshold", "detail",
            "bound", "centre", "population", "factor", "peers", "ops", "ops_failed", "ops_missing"]
    f = ev.iloc[idx][[c for c in cols if c in ev.columns]].copy()
    for c in ("detail", "bound", "peers"):
        if c not in f.columns:
            f[c] = None
    for c in ("centre", "population", "factor"):
        f[c] = floats_of(f[c]) if c in f.columns else np.nan
    for c in ("suite", "metric", "unit", "src", "dst", "op", "scope", "detail", "bound", "peers"):
        f[c] = f[c].astype(object).where(f[c].notna(), None)
    f["size"] = floats_of(f["size"])
    f["rail"] = floats_of(f["rail"])
    out = []
    communicators = catalog.suite_names(communicators=True)  # records of a communicator, not a pair

    def make(scope, g, node=None, rail=None, subject=""):
        out.append(_bound_finding(scope, g, communicators, node, rail, subject))

    # GPUDirect use (gdrdma and gdrdma_sends, from NCCL's log) is a property of a node's NIC, not of a
    # communicator (catalog Metric.nic_fact).
    per_comm = f["suite"].isin(communicators) & ~f["metric"].isin(GDR_METRICS)
    coll = f[per_comm]
    for (suite, op, scope, metric), g in coll.groupby(["suite", "op", "scope", "metric"], dropna=False, sort=True):
        what = op or suite  # a record without its op: named by its suite
        label = f"{what} over {scope or 'an unknown communicator'}"
        if scope == "node":
            for node, gg in g.groupby("src", sort=True):
                make("node", gg, node=node, subject=f"{what} inside {node}")
        elif scope == "rail":
            for rail, gg in g.groupby("rail", sort=True):
                make("rail", gg, rail=int(rail), subject=f"{what} over rail {int(rail)} (the rail {int(rail)} plane)")
        else:
            make("cluster", g, subject=label)
    rest = f[~per_comm]
    single = rest[rest["dst"].isna()]
    for (suite, metric), g in single.groupby(["suite", "metric"], sort=True):
        nodes = sorted(set(g["src"].dropna()))
        sel = codes_of(ev["suite"], suite) & codes_of(ev["metric"], metric)
        total = ev.loc[sel, "src"].nunique()
        if len(nodes) >= 2 and len(nodes) >= 0.5 * total:
            make("cluster", g, subject=f"{len(nodes)} of {total} nodes")
        else:
            for node, gg in g.groupby("src", sort=True):
                make("node", gg, node=node, subject=node)
    for (suite, metric), g in rest[rest["dst"].notna()].groupby(["suite", "metric"], sort=True):
        make("cluster", g, subject="the job")
    return out


def _where(row, communicators) -> str:
    parts = [row.src or "?"]
    if row.dst:
        parts[0] += f"..{row.dst}" if row.suite in communicators else f" -> {row.dst}"
    if not math.isnan(row.rail):
        parts.append(f"rail {int(row.rail)}")
    return " ".join(parts) + f", {row.metric}{size_text(row.size)}"


def _why(row) -> str:
    basis = fleet_basis(row.bound, row.factor, row.centre, row.population, row.peers, row.unit)
    notes = [x for x in (basis, row.detail) if isinstance(x, str)]
    return f" ({'; '.join(notes)})" if notes else ""


def _bound_finding(scope, g, communicators, node=None, rail=None, subject="") -> dict:
    """One failing finding for a group of failed records of one part (other_failures' rows)."""
    g = g.sort_values("size", ascending=False, kind="stable")
    h = g.iloc[0]
    total = h["metric"] in catalog.DATA_ERROR_NAMES  # wrong bytes add up; a rate's median speaks for it
    value, bound = (float(g["value"].sum() if total else g["value"].median()) if g["value"].notna().any()
                    else None), \
        float(g["threshold"].median()) if g["threshold"].notna().any() else None
    # A data check's headline counts every checked operation of the group.
    counts = SimpleNamespace(op=h["op"], **{k: (float(pd.to_numeric(g[k], errors="coerce").sum())
                                                if k in g.columns and g[k].notna().any() else None)
                                            for k in ("ops", "ops_failed", "ops_missing")})
    text = _bound_text(h["suite"], h["metric"], value if value is not None else float("nan"),
                       bound if bound is not None else float("nan"), h["unit"], h["bound"], counts)
    sizes = g["size"].dropna().nunique()
    more = f" at {sizes} sizes" if sizes > 1 else size_text(h["size"]).replace(" ", " at ", 1)
    lines = [f"{_where(row, communicators)}: "
             f"{_bound_text(row.suite, row.metric, row.value, row.threshold, row.unit, row.bound, row)}" + _why(row)
             for row in g.head(EVIDENCE_MAX).itertuples()]
    msg = f"{subject}: {h['suite']} {text}{more}"
    if scope == "node":
        msg += f": drain {node}"
    return make_finding(severity="fail", scope=scope, node=node, rail=rail, metric=h["metric"], value=value,
                        expected=bound, evidence=capped(lines, len(g)), message=msg, kind="bound",
                        unit=h["unit"], size=h["size"], bound=h["bound"], suite=h["suite"],
                        basis=fleet_basis(h["bound"], h["factor"], h["centre"], h["population"], h["peers"],
                                          h["unit"]))


def counter_findings(ev: pd.DataFrame) -> list[dict]:
    """One finding per port whose counters fail or warn (suite counters), naming node, device, port, rail."""
    sel = _in(ev["suite"], catalog.suite_names(ports=True)) & (codes_of(ev["verdict"], "fail")
                                                             | codes_of(ev["verdict"], "warn"))
    if not sel.any():
        return []
    cols = ["suite", "metric", "value", "unit", "rail", "src", "threshold", "verdict", "test", "device", "port", "saturated"]
    c = with_fields(ev).loc[sel, [x for x in cols if x in ev.columns or x in FIELD_COLUMNS]].copy()
    for col in ("metric", "unit", "src", "verdict", "test", "device", "saturated"):
        c[col] = c[col].astype(object)
    c["device"] = c["device"].where(c["device"].notna(), "?")
    c["port"] = c["port"].astype(object).where(c["port"].notna(), "?").astype(str)
    c["rail"] = floats_of(c["rail"])
    c["_fail"] = c["verdict"] == "fail"
    out = []
    for (node, device, port_no), g in c.groupby(["src", "device", "port"], sort=True, dropna=False):
        g = g.sort_values(["_fail", "value"], ascending=[False, False], kind="stable", na_position="first")
        h = g.iloc[0]
        severity = "fail" if h["_fail"] else "warn"
        rails = g["rail"].dropna()
        rail = int(rails.iloc[0]) if len(rails) else None
        on = f"{node} {device} port {port_no}" + (f" (rail {rail})" if rail is not None else "")

        def what(row) -> str:
            if isinstance(row.saturated, str):
                return f"{row.metric} saturated {row.saturated} the window"
            if row.unit == "1/s":
                return f"{row.metric} {fmt_value(row.value)}/s > {fmt_value(row.threshold)}/s"
            if row.unit == "ppm":
                if pd.isna(row.value):
                    return f"{row.metric.removesuffix('_ppm')} rose, with no packet count to relate it to"
                return (f"{row.metric.removesuffix('_ppm')} {fmt_value(row.value)} per million packets "
                        f"(bound {fmt_value(row.threshold)})")
            if row.unit == "errors/bit":
                if pd.isna(row.value):
                    return (f"{row.metric.removesuffix('_ber')} rose, with no bits to rate it against (no rx_bits_phy, "
                            f"and no steady ACTIVE port rate over the window)")
                return (f"{row.metric.removesuffix('_ber')}: pre-FEC bit error rate {row.value:.2g} "
                        f"(fails above {fmt_value(row.threshold)})")
            return f"{row.metric} rose by {fmt_value(row.value)} (bound {fmt_value(row.threshold)})"

        evidence = [f"{what(row)} during {row.test}" for row in g.head(EVIDENCE_MAX).itertuples()]
        names = list(dict.fromkeys(g["metric"]))
        headline = what(next(g.itertuples()))
        more = f" and {len(names) - 1} more counter(s)" if len(names) > 1 else ""
        advice = ("congestion or drops on this port" if severity != "fail"
                  else "packets lost or late: check the cable, transceiver and switch port" if h["unit"] == "ppm"
                  else "more bit errors than FEC corrects: check the cable, transceiver and switch port"
                  if h["unit"] == "errors/bit"
                  else "error counters must not rise: check the cable, transceiver and switch port")
        value = None if pd.isna(h["value"]) else float(h["value"])
        bound = None if pd.isna(h["threshold"]) else float(h["threshold"])
        out.append(make_finding(severity=severity, scope="nic", node=node, rail=rail, metric=h["metric"], value=value,
                                expected=bound, evidence=capped(evidence, len(g)), suite=str(h["suite"]),
                                message=f"{on}: {headline}{more}; {advice}", kind="counter", unit=h["unit"]))
    return out


def failed_tests(ev: pd.DataFrame) -> list[dict]:
    """Tests that failed (records test_failed, written by the plugin) with no failing record of their
    own to explain it: an exception, a probe that could not run, ranks whose outcomes differed.
    One finding per failing node, or one cluster finding when the test failed on at least half of
    the run's nodes (and 2 or more), each with the test's message."""
    is_failed = codes_of(ev["metric"], FAILED_METRIC)
    if not is_failed.any():
        return []
    tests = ev["test"].astype(object).to_numpy()
    files = ev["file"].astype(object).to_numpy() if "file" in ev.columns else np.full(len(ev), None, dtype=object)
    # A failing record explains its test; one recorded for a whole suite file (port counters) its tests.
    explained = set(tests[codes_of(ev["verdict"], "fail") & ~is_failed])
    all_nodes = {n for t in ev["nodes"] for n in (t if isinstance(t, tuple) else ())}
    out = []
    for idx in np.flatnonzero(is_failed):
        test = tests[idx]
        if test in explained or files[idx] in explained:
            continue
        nodes = list(ev["nodes"].iat[idx] or ())
        detail = ev["detail"].iat[idx] if "detail" in ev.columns else None
        why = detail if isinstance(detail, str) else "no message"
        rail = floats_of(ev["rail"].iloc[[idx]])[0]
        rail = None if math.isnan(rail) else int(rail)
        evidence = [f"{test}: {why}"]
        if not nodes or (len(nodes) >= 2 and len(nodes) >= 0.5 * len(all_nodes)):
            where = f"{len(nodes)} of {len(all_nodes)} nodes" if nodes else "the job"
            out.append(make_finding(severity="fail", scope="cluster", rail=rail, metric=FAILED_METRIC,
                                    evidence=evidence, message=f"{test} failed on {where}: {why}", kind="test"))
            continue
        for node in nodes:
            out.append(make_finding(severity="fail", scope="node", node=node, rail=rail, metric=FAILED_METRIC,
                                    evidence=evidence, message=f"{node}: {test} failed: {why}: drain {node}",
                                    kind="test"))
    return out
