"""Trends: burn-in drift and instability across iterations, and regressions against a baseline run."""

from __future__ import annotations


import numpy as np
import pandas as pd

from ..rules import catalog, judge
from ..switchtree.fabric import Fabric
from ..rules.profile import Profile
from ..rules.units import format_size
from .load import with_fields
from .base import codes_of, floats_of
from .evaluate import TREND_METRICS, COMPARE_KEYS, direction_of
from .localize import localize
from .outliers import node_names
from .finding import make_finding
from .wording import fmt_value, how_phrase, size_text



def _key_view(ev: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows of TREND_METRICS with the comparison key columns, node codes and a direction."""
    names, s, d = node_names(ev)
    mask = np.zeros(len(ev), bool)
    for suite, metric in TREND_METRICS:
        mask |= codes_of(ev["suite"], suite) & codes_of(ev["metric"], metric)
    idx = np.flatnonzero(mask)
    v = pd.DataFrame({"suite": ev["suite"].take(idx).astype(str).to_numpy(),
                      "metric": ev["metric"].take(idx).astype(str).to_numpy(),
                      "size": floats_of(ev["size"])[idx], "rail": floats_of(ev["rail"])[idx],
                      "s": s[idx], "d": d[idx],
                      "op": ev["op"].take(idx).astype(object).fillna("").to_numpy(),
                      "scope": ev["scope"].take(idx).astype(object).fillna("").to_numpy(),
                      "unit": ev["unit"].take(idx).astype(object).to_numpy(),
                      "iteration": ev["iteration"].to_numpy()[idx], "value": floats_of(ev["value"])[idx]})
    return v, names


_GROUP = ["suite", "metric", "size", "rail", "s", "d", "op", "scope"]


def _burnin(ev: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Per series (a key over iterations) with >= 4 iterations: first/last quarter medians, CV, flags."""
    its = ev["iteration"].to_numpy()
    if len(its) == 0 or its.min() == its.max():
        return pd.DataFrame()
    v, _ = _key_view(ev)
    v = v[~np.isnan(v["value"].to_numpy())]
    if v.empty:
        return pd.DataFrame()
    v = v.fillna({"size": -1.0, "rail": -1.0})
    per = (v.groupby([*_GROUP, "iteration"], sort=True).agg(value=("value", "median"), unit=("unit", "first"))
           .reset_index())
    g = per.groupby(_GROUP, sort=False).ngroup().to_numpy()
    per["g"] = g
    per = per.sort_values(["g", "iteration"], kind="stable")
    grp = per.groupby("g", sort=True)
    rank = grp.cumcount().to_numpy()
    n = grp["value"].transform("size").to_numpy()
    q = np.ceil(n / 4).astype(int)
    val = per["value"].to_numpy()
    first = pd.Series(np.where(rank < q, val, np.nan)).groupby(per["g"].to_numpy()).median()
    last = pd.Series(np.where(rank >= n - q, val, np.nan)).groupby(per["g"].to_numpy()).median()
    stats = grp["value"].agg(["mean", "std", "size"])
    keys = grp[[*_GROUP, "unit"]].first()
    t = keys.assign(n=stats["size"], mean=stats["mean"], std=stats["std"], first=first, last=last)
    t = t[t["n"] >= 4]
    if t.empty:
        return pd.DataFrame()
    higher = np.array([direction_of(a, b) is not False for a, b in zip(t["suite"], t["metric"])])
    with np.errstate(divide="ignore", invalid="ignore"):
        worse = np.where(higher, (t["first"] - t["last"]) / t["first"], (t["last"] - t["first"]) / t["first"])
        cv = (t["std"] / t["mean"]).to_numpy()
    t = t.assign(worse=worse, cv=cv)
    t["drift"] = judge.Trend.of(profile, "analysis.drift_tolerance").beyond(t["worse"])
    t["unstable"] = judge.Trend.of(profile, "analysis.cv_max").beyond(t["cv"]) & ~t["drift"]
    t = t[t["drift"] | t["unstable"]].reset_index(drop=True)
    return t.replace({"size": {-1.0: np.nan}, "rail": {-1.0: np.nan}})


def _series_findings(t: pd.DataFrame, kind: str, measured: pd.DataFrame, names: list[str], profile: Profile,
                     severity_of=None, fabric: Fabric | None = None) -> list[dict]:
    """Findings from per-series rows (drift, instability, regression): p2p rows are localized,
    collective rows are placed by their communicator."""
    if t is None or t.empty:
        return []
    p2p = t["suite"].isin([s.name for s in catalog.pairwise()]) & t["rail"].notna() & (t["s"] >= 0) & (t["d"] >= 0)
    out = []
    if p2p.any():
        x = t[p2p]
        bad = pd.DataFrame({"rail": x["rail"].astype(np.int64).to_numpy(), "s": x["s"].to_numpy(),
                            "d": x["d"].to_numpy(), "metric": x["metric"].to_numpy(), "size": x["size"].to_numpy(),
                            "value": x["value"].to_numpy(), "expected": x["expected"].to_numpy(),
                            "median": x["median"].to_numpy(), "bound": np.nan, "worse": x["worse"].to_numpy(),
                            "grade": x["grade"].to_numpy(), "unit": x["unit"].to_numpy(), "how": None,
                            "basis": None})
        out += localize(bad, measured, names, profile, kind, fabric=fabric)
    for row in t[~p2p].itertuples():
        node = names[row.s] if row.s >= 0 else None
        scope_name = row.scope or ""
        if scope_name == "node" and node:
            scope, rail, subject = "node", None, f"{row.op or row.metric} inside {node}"
        elif scope_name == "rail" and row.rail == row.rail and row.rail is not None:
            scope, rail, node, subject = "rail", int(row.rail), None, f"{row.op} over rail {int(row.rail)}"
        else:
            scope, rail, node, subject = "cluster", None, None, f"{row.op or row.suite} over {scope_name or 'the job'}"
        higher = direction_of(row.suite, row.metric)
        phrase, detail = how_phrase(kind, row.metric, row.value, row.expected, row.unit, row.size, higher, True)
        severity = "fail" if row.grade else "warn"
        line = f"{subject}, {row.metric}{size_text(row.size)}: " + (
            f"{fmt_value(row.expected)} -> {fmt_value(row.value)} {row.unit}" if kind == "drift" else
            f"CV {row.value:.0%}" if kind == "instability" else
            f"{fmt_value(row.value)} vs baseline {fmt_value(row.expected)} {row.unit}")
        msg = f"{subject} {phrase} ({detail})" + (f": drain {node}" if severity == "fail" and scope == "node" else "")
        out.append(make_finding(severity=severity, scope=scope, node=node, rail=rail, metric=row.metric, value=row.value,
                                expected=row.expected, evidence=[line], message=msg, kind=kind, unit=row.unit,
                                size=row.size))
    return out


def burnin_findings(ev: pd.DataFrame, profile: Profile, measured: pd.DataFrame,
                    fabric: Fabric | None = None) -> list[dict]:
    t = _burnin(ev, profile)
    if t.empty:
        return []
    names = node_names(ev)[0]
    out = []
    drift = t[t["drift"]]
    out += _series_findings(drift.assign(value=drift["last"], expected=drift["first"], median=drift["mean"],
                                         grade=False), "drift", measured, names, profile, fabric=fabric)
    unstable = t[t["unstable"]]
    out += _series_findings(unstable.assign(value=unstable["cv"], expected=judge.Trend.of(profile, "analysis.cv_max").tolerance,
                                            median=unstable["mean"], grade=False, worse=unstable["cv"]),
                            "instability", measured, names, profile, fabric=fabric)
    return out



def compare(df: pd.DataFrame, baseline_df: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Median now vs median in the baseline, per (suite, metric, size, rail, src, dst, op, scope).

    Only TREND_METRICS (rdma_write bandwidth, latency p50 / p99, collective busbw).
    change is signed so that negative is worse; regression: change < -analysis.regression_tolerance.
    Columns: the key, unit, value (now), baseline, change, regression; size and rail are float (NaN: none).
    """
    cols = [*COMPARE_KEYS, "unit", "value", "baseline", "change", "regression"]
    (now, now_names), (base, base_names) = _key_view(df), _key_view(baseline_df)
    if now.empty or base.empty:
        return pd.DataFrame({c: [] for c in cols})
    # code both runs' nodes into one list of names
    names = sorted(set(now_names) | set(base_names))
    index = {n: i for i, n in enumerate(names)}
    for frame, own in ((now, now_names), (base, base_names)):
        table = np.array([index[n] for n in own] + [-1], dtype=np.int64)
        frame["s"] = table[frame["s"].to_numpy()]
        frame["d"] = table[frame["d"].to_numpy()]
    a = now.fillna({"size": -1.0, "rail": -1.0}).groupby(_GROUP, sort=False).agg(
        value=("value", "median"), unit=("unit", "first"))
    b = base.fillna({"size": -1.0, "rail": -1.0}).groupby(_GROUP, sort=False)["value"].median().rename("baseline")
    j = a.join(b, how="inner").reset_index()
    higher = np.array([direction_of(x, y) is not False for x, y in zip(j["suite"], j["metric"])], dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.where(higher, (j["value"] - j["baseline"]) / j["baseline"],
                          (j["baseline"] - j["value"]) / j["baseline"])
    change = np.where(j["baseline"].to_numpy() != 0, change, np.nan)
    names_arr = np.array(names + [None], dtype=object)
    out = pd.DataFrame({
        "suite": j["suite"], "metric": j["metric"],
        "size": j["size"].replace(-1.0, np.nan), "rail": j["rail"].replace(-1.0, np.nan),
        "src": names_arr[j["s"].to_numpy()], "dst": names_arr[j["d"].to_numpy()],
        "op": j["op"].replace("", None), "scope": j["scope"].replace("", None), "unit": j["unit"],
        "value": j["value"], "baseline": j["baseline"], "change": change})
    out["regression"] = judge.Trend.of(profile, "analysis.regression_tolerance").beyond(-out["change"])
    return out


def regression_findings(deltas: pd.DataFrame, profile: Profile, measured: pd.DataFrame,
                         names: list[str], fabric: Fabric | None = None) -> list[dict]:
    if deltas is None or deltas.empty or not deltas["regression"].any():
        return []
    r = deltas[deltas["regression"]].copy()
    index = {n: i for i, n in enumerate(names)}
    r["s"] = [index.get(n, -1) if isinstance(n, str) else -1 for n in r["src"]]
    r["d"] = [index.get(n, -1) if isinstance(n, str) else -1 for n in r["dst"]]
    # a node that is only in the baseline cannot be localized in this run
    r["op"] = r["op"].fillna("")
    r["scope"] = r["scope"].fillna("")
    rule = judge.Trend.of(profile, "analysis.regression_tolerance")
    r = r.assign(expected=r["baseline"], worse=-r["change"], median=r["baseline"], grade=rule.fails(-r["change"]))
    return _series_findings(r, "regression", measured, names, profile, fabric=fabric)


# ---------------------------------------------------------------------------------------
# The fleet over iterations, for the report
# ---------------------------------------------------------------------------------------

def burnin_series(ev: pd.DataFrame, profile: Profile) -> list[dict]:
    """Each trend metric over burn-in iterations as the report plots it: per iteration the median
    and the worst value (by the catalog's direction), point-to-point bandwidth and collective busbw at
    the largest size measured, one series per collective and communicator kind (world, rail, node);
    with the first and last medians, the change (negative: worse) and whether it is worse than
    analysis.drift_tolerance. Empty with a single iteration."""
    if ev is None or not len(ev) or "iteration" not in ev.columns or ev["iteration"].nunique() <= 1:
        return []
    df = ev
    if "src" not in df.columns or "dst" not in df.columns:
        nodes = df["nodes"]
        df = df.assign(src=nodes.str[0], dst=nodes.str[1].where(nodes.str.len() == 2, None))
    df = with_fields(df)
    drift = judge.Trend.of(profile, "analysis.drift_tolerance")
    out = []
    for suite, name in catalog.with_role("trend"):
        sel = codes_of(df["suite"], suite) & codes_of(df["metric"], name) & ~np.isnan(floats_of(df["value"]))
        sub = df.loc[sel]
        if sub.empty:
            continue
        higher = catalog.direction(suite, name) is not False
        if catalog.suite(suite).communicators:  # one series per collective op and communicator kind
            kind = sub["scope"].astype(object).fillna("world").astype(str)
            groups = [((op, scope), g) for (op, scope), g in sub.assign(kind=kind).groupby(["op", "kind"], sort=True)]
        else:
            groups = [(None, sub)]
        for key, g in groups:
            sizes = floats_of(g["size"])
            if catalog.metrics(suite, name)[0].trend == "largest" and not np.isnan(sizes).all():
                largest = np.nanmax(sizes)
                g, size = g[sizes == largest], largest
            else:
                size = None
            if g["iteration"].nunique() <= 1:
                continue
            title = catalog.label(suite, name) if key is None else f"{key[0]} busbw ({key[1]})"
            if size is not None:
                title += f" at {format_size(int(size))}"
            values = floats_of(g["value"])
            stats = pd.Series(values).groupby(g["iteration"].to_numpy()).agg(["median", "min", "max"]).sort_index()
            at = int(np.nanargmax(values) if not higher else np.nanargmin(values))
            worst = g.iloc[at]
            first, last = float(stats["median"].iloc[0]), float(stats["median"].iloc[-1])
            change = (last - first) / first if first else float("nan")
            change = change if higher else -change
            out.append({"title": title, "suite": suite, "metric": name, "unit": str(g["unit"].iloc[0]),
                        "higher": higher, "iteration": stats.index.to_numpy(), "median": stats["median"].to_numpy(),
                        "worst": stats["min" if higher else "max"].to_numpy(), "first": first, "last": last,
                        "change": change, "worse": bool(change == change and drift.beyond(-change)),
                        "worst_value": float(values[at]), "worst_iteration": int(worst["iteration"]),
                        "worst_src": worst["src"], "worst_dst": worst["dst"], "worst_rail": worst["rail"],
                        "worst_scope": None if key is None else key[1], "per_link": bool(g["dst"].notna().any())})
    return out
