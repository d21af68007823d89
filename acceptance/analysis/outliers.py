"""The point-to-point view of a run and its fleet-relative outliers (one-sided modified z-score)."""

from __future__ import annotations


import numpy as np
import pandas as pd

from ..spec import judge
from ..measure.stats import samples_needed
from ..records.results import FAILED_METRIC
from ..spec.fabric import Fabric
from ..spec.profile import Profile
from . import tree
from .base import MAD_SCALE, MIN_GROUP, codes_of, floats_of
from .evaluate import OUTLIER_METRICS, OUTLIERS_BY_SUITE
from .wording import fleet_basis



def node_names(df: pd.DataFrame) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(node names, src codes, dst codes) with src and dst coded into the same names (-1: none)."""
    src, dst = df["src"], df["dst"]
    if not isinstance(src.dtype, pd.CategoricalDtype):
        src = src.astype("category")
    if not isinstance(dst.dtype, pd.CategoricalDtype):
        dst = dst.astype("category")
    if not src.cat.categories.equals(dst.cat.categories):
        names = sorted(set(src.cat.categories) | set(dst.cat.categories))
        src, dst = src.cat.set_categories(names), dst.cat.set_categories(names)
    return list(src.cat.categories), src.cat.codes.to_numpy(np.int64), dst.cat.codes.to_numpy(np.int64)


# Samples a latency percentile needs before it can single out a link (acceptance.measure.stats).
PERCENTILE_SAMPLES = {"latency_p50": samples_needed(50.0), "latency_p99": samples_needed(99.0),
                      "latency_p999": samples_needed(99.9)}


def pairwise_view(ev: pd.DataFrame, suite: str = "rdma_write") -> tuple[pd.DataFrame, list[str], np.ndarray]:
    """One pairwise suite's records between two nodes on a rail, with integer node codes s, d."""
    names, s, d = node_names(ev)
    rail = floats_of(ev["rail"])
    # A failed test's own record (test_failed) names its ranks' nodes, not a pair: analysis.failures has it.
    mask = (codes_of(ev["suite"], suite) & ~codes_of(ev["metric"], FAILED_METRIC) & ~np.isnan(rail)
            & (s >= 0) & (d >= 0) & (s != d))
    idx = np.flatnonzero(mask)
    p = pd.DataFrame({
        "metric": ev["metric"].to_numpy()[idx] if not isinstance(ev["metric"].dtype, pd.CategoricalDtype)
        else ev["metric"].take(idx).to_numpy(),
        "size": floats_of(ev["size"])[idx], "rail": rail[idx].astype(np.int64), "s": s[idx], "d": d[idx],
        "value": floats_of(ev["value"])[idx], "iteration": ev["iteration"].to_numpy()[idx],
        "samples": floats_of(ev["samples"])[idx],
        "fail": codes_of(ev["verdict"], "fail")[idx], "threshold": ev["threshold"].to_numpy(np.float64)[idx],
        "unit": ev["unit"].take(idx).to_numpy(), **_fleet_columns(ev, idx),
        **{c: (floats_of(ev[c])[idx] if c in ev.columns else np.full(len(idx), np.nan))
           for c in ("ops", "ops_failed", "ops_missing")}})
    if isinstance(ev["metric"].dtype, pd.CategoricalDtype):
        p["metric"] = pd.Categorical(p["metric"], categories=ev["metric"].cat.categories)
    return p, names, idx


def _fleet_columns(ev: pd.DataFrame, idx: np.ndarray) -> dict:
    """How each record's bound was derived, and a fleet bound's population (analysis.evaluate)."""
    n = len(idx)
    if "bound" not in ev.columns:
        return {"how": np.full(n, None, dtype=object), "centre": np.full(n, np.nan), "population": np.zeros(n),
                "factor": np.full(n, np.nan), "peers": np.full(n, None, dtype=object)}
    cols = {"how": ev["bound"].take(idx).astype(object).to_numpy()}
    for c in ("centre", "population", "factor"):
        cols[c] = floats_of(ev[c])[idx] if c in ev.columns else np.full(n, np.nan)
    cols["peers"] = ev["peers"].take(idx).astype(object).to_numpy() if "peers" in ev.columns \
        else np.full(n, None, dtype=object)
    return cols


def pair_values(p: pd.DataFrame, suite: str = "rdma_write") -> pd.DataFrame:
    """One value per (metric, size, rail, s, d) of the suite's outlier metrics: the median over
    burn-in iterations."""
    om = p[p["metric"].isin(list(OUTLIERS_BY_SUITE.get(suite, {})))]
    # A percentile from fewer samples than it needs (100/(1-p)) is close to the maximum: one
    # scheduler hiccup. It is still held to its bound, but it is no basis for calling a link an outlier.
    need = om["metric"].astype(str).map(PERCENTILE_SAMPLES).fillna(0).to_numpy(np.float64)
    om = om[~(om["samples"].to_numpy(np.float64) < need)]
    if len(om) and om["iteration"].min() != om["iteration"].max():
        om = (om.groupby(["metric", "size", "rail", "s", "d"], observed=True, sort=False)
              .agg(value=("value", "median"), unit=("unit", "first")).reset_index())
    return om[["metric", "size", "rail", "s", "d", "value", "unit"]].reset_index(drop=True)


def _robust(values: np.ndarray, groups: np.ndarray, higher: np.ndarray, profile: Profile):
    """One-sided modified z-score outliers within groups: (median, n, worse, outlier).

    worse is the signed relative deviation, positive on the bad side.
    """
    ser = pd.Series(values)
    g = ser.groupby(groups)
    med = g.transform("median").to_numpy()
    mad = pd.Series(np.abs(values - med)).groupby(groups).transform("median").to_numpy()
    n = g.transform("size").to_numpy()
    sign = np.where(higher, 1.0, -1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        worse = sign * (med - values) / med
        z = MAD_SCALE * sign * (med - values) / mad
    outlier = ((n >= MIN_GROUP) & (med > 0) & (worse >= profile.get("analysis.outlier_min_deviation"))
               & ((mad == 0) | (z >= profile.get("analysis.outlier_z"))))
    return med, n, worse, outlier


def _higher(metrics) -> np.ndarray:
    return np.array([OUTLIER_METRICS.get(m, True) for m in metrics], dtype=bool)


def fleet_outliers(pairs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Outlier pairs per (metric, size, rail), with the group median."""
    if pairs.empty:
        return pairs.assign(median=[], worse=[])
    key = pairs.groupby(["metric", "size", "rail"], observed=True, sort=False).ngroup().to_numpy()
    metric_codes = pairs["metric"].cat.codes.to_numpy() if isinstance(pairs["metric"].dtype, pd.CategoricalDtype) \
        else pd.factorize(pairs["metric"])[0]
    cats = (pairs["metric"].cat.categories if isinstance(pairs["metric"].dtype, pd.CategoricalDtype)
            else pd.factorize(pairs["metric"])[1])
    higher = _higher(cats)[metric_codes]
    med, _n, worse, outlier = _robust(pairs["value"].to_numpy(), key, higher, profile)
    out = pairs.loc[outlier].copy()
    out["median"] = med[outlier]
    out["worse"] = worse[outlier]
    return out.reset_index(drop=True)


def rail_planes(pairs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Rails whose median (per metric and size) is an outlier against the other rails' medians."""
    cols = ["rail", "metric", "size", "value", "median", "worse", "n", "unit"]
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    med = (pairs.groupby(["metric", "size", "rail"], observed=True, sort=False)
           .agg(value=("value", "median"), unit=("unit", "first")).reset_index())
    key = med.groupby(["metric", "size"], observed=True, sort=False).ngroup().to_numpy()
    center, n, worse, outlier = _robust(med["value"].to_numpy(), key, _higher(med["metric"].astype(str)), profile)
    med["median"], med["worse"], med["n"] = center, worse, n
    return med.loc[outlier, cols].reset_index(drop=True)


def bad_pairs(p: pd.DataFrame, outliers: pd.DataFrame, profile: Profile, suite: str = "rdma_write") -> pd.DataFrame:
    """Evidence rows (one per pair, metric and size): outliers and failed bounds."""
    key = ["rail", "s", "d", "metric", "size"]
    failed = p[p["fail"]]
    if len(failed):
        failed = (failed.groupby(key, observed=True, sort=False)
                  .agg(fvalue=("value", "median"), bound=("threshold", "median"), unit=("unit", "first"),
                       how=("how", "first"), centre=("centre", "median"), population=("population", "max"),
                       factor=("factor", "first"), peers=("peers", "first"), ops=("ops", "sum"),
                       ops_failed=("ops_failed", "sum"), ops_missing=("ops_missing", "sum"))
                  .reset_index())
        failed["basis"] = [fleet_basis(r.how, r.factor, r.centre, r.population, r.peers, r.unit)
                           for r in failed.itertuples()]
    else:
        failed = pd.DataFrame(columns=[*key, "fvalue", "bound", "unit", "how", "basis", "ops", "ops_failed",
                                       "ops_missing"])
    o = outliers[[*key, "value", "median", "worse", "unit"]] if len(outliers) else \
        pd.DataFrame(columns=[*key, "value", "median", "worse", "unit"])
    for frame in (o, failed):  # one dtype per key, also when a side is empty
        frame["metric"] = frame["metric"].astype(str)
        frame["size"] = frame["size"].astype(float)
        for c in ("rail", "s", "d"):
            frame[c] = frame[c].astype(np.int64)
    bad = o.merge(failed, on=key, how="outer", suffixes=("", "_f"))
    if bad.empty:
        return _empty_bad()
    bad["unit"] = bad["unit"].fillna(bad.get("unit_f"))
    bad["value"] = bad["value"].astype(float).fillna(bad["fvalue"].astype(float))
    bad["median"] = bad["median"].astype(float)
    bad["bound"] = bad["bound"].astype(float)
    is_fail = bad["fvalue"].notna().to_numpy()
    higher = _higher(bad["metric"])
    with np.errstate(divide="ignore", invalid="ignore"):
        vs_bound = np.where(higher, 1.0, -1.0) * (bad["bound"] - bad["value"]) / bad["bound"]
    worse = bad["worse"].astype(float).to_numpy()
    worse = np.where(np.isnan(worse), np.where(np.isfinite(vs_bound), vs_bound, 1.0), worse)
    min_dev = profile.get("analysis.outlier_min_deviation")
    bad["worse"] = worse
    # A metric the profile holds to the fleet fails by its fleet bound (the judge); the statistical
    # detector then only warns, or it would be a second, stricter judge of the same question.
    bad["grade"] = is_fail | (_statistical(bad["metric"], profile, suite) & bad["median"].notna().to_numpy()
                              & (worse >= 2 * min_dev))
    bad["expected"] = bad["median"].fillna(bad["bound"])
    return bad[["rail", "s", "d", "metric", "size", "value", "expected", "median", "bound", "worse", "grade",
                "unit", "how", "basis", "ops", "ops_failed", "ops_missing"]].reset_index(drop=True)


def _statistical(metrics: pd.Series, profile: Profile, suite: str = "rdma_write") -> np.ndarray:
    """Where the statistical detector may fail a pair: metrics the profile does not hold to the fleet."""
    names = metrics.astype(str)
    fleet = {m for m in names.unique() if judge.fleet_factor(profile, suite, m) is not None}
    return ~names.isin(fleet).to_numpy()


def against_rails(bad: pd.DataFrame, pairs: pd.DataFrame, planes: pd.DataFrame, profile: Profile,
                   suite: str = "rdma_write") -> pd.DataFrame:
    """On a rail slow against the others, its pairs that are slow against the other rails' median
    become evidence too (localization then decides: the plane, or a few NICs or links on it)."""
    ref = planes[["rail", "metric", "size", "median"]].astype({"metric": str})
    x = pairs.astype({"metric": str}).merge(ref, on=["rail", "metric", "size"], how="inner")
    higher = _higher(x["metric"])
    with np.errstate(divide="ignore", invalid="ignore"):
        worse = np.where(higher, 1.0, -1.0) * (x["median"] - x["value"]) / x["median"]
    min_dev = profile.get("analysis.outlier_min_deviation")
    return _with_evidence(bad, x[worse >= min_dev].assign(worse=worse[worse >= min_dev]), profile, suite)


def against_switches(bad: pd.DataFrame, pairs: pd.DataFrame, names: list[str], fabric: Fabric | None,
                     profile: Profile, suite: str = "rdma_write") -> pd.DataFrame:
    """With the switch tree known: a leaf's, its uplink's or the spine's pairs slow as a group.

    A part of the tree that carries many of a rail's pairs (a leaf of 8 nodes on 64: 23% of them)
    moves the rail's median and spread, so its pairs, each a little slow, are no outliers one by
    one. As a group they are: per (metric, size, rail), each component's pairs (a leaf's: every pair
    with an end on it; its uplink's: those with one end on it; the spine's: every cross-leaf pair)
    against the rail's other pairs, medians compared. Where the group's median is
    outlier_min_deviation worse, and more than chance (a rank test: the Mann-Whitney U of the
    group's pairs against the others', as a z-score, at least outlier_z; a small group's pairs,
    slow or not, are left to the outlier test), its pairs nearer the group's median than the
    others' become evidence; the tree localization then decides which component it is
    (analysis.tree).
    """
    if fabric is None or pairs.empty:
        return bad
    min_dev, z = profile.get("analysis.outlier_min_deviation"), profile.get("analysis.outlier_z")
    keys = pairs.groupby(["metric", "size", "rail"], observed=True, sort=False).ngroup().to_numpy()
    sign = np.where(_higher(pairs["metric"].astype(str)), 1.0, -1.0)
    good = pairs["value"].to_numpy(np.float64) * sign          # higher is better, whatever the metric
    s, d, rails = pairs["s"].to_numpy(), pairs["d"].to_numpy(), pairs["rail"].to_numpy()
    take = np.zeros(len(pairs), bool)
    ref = np.full(len(pairs), np.nan)
    for k in np.unique(keys):
        rows = np.flatnonzero(keys == k)
        t = fabric.tree(int(rails[rows[0]]))
        if t is None or not t.leaves:
            continue
        leaf, leaf_names = tree.leaf_codes(t, names)
        # One value per undirected pair: a link's two directions are one sample of it, not two.
        u, v = np.minimum(s[rows], d[rows]), np.maximum(s[rows], d[rows])
        pair_id, uniq = pd.factorize(u * len(names) + v)
        pv = pd.Series(good[rows]).groupby(pair_id).median().to_numpy()
        lu, lv = leaf[uniq // len(names)], leaf[uniq % len(names)]
        placed = (lu >= 0) & (lv >= 0)
        groups = [(lu == i) | (lv == i) for i in range(len(leaf_names))]
        groups += [(lu == i) != (lv == i) for i in range(len(leaf_names))]
        if tree.single_spine(t, leaf_names) is not None:
            groups.append(lu != lv)
        rank = pd.Series(pv[placed]).rank().to_numpy()
        for g in groups:
            g, rest = g & placed, ~g & placed
            n1, n2 = int(g.sum()), int(rest.sum())
            if n1 < MIN_GROUP or n2 < MIN_GROUP:
                continue
            mg, mr = np.median(pv[g]), np.median(pv[rest])
            # Slow enough to matter (outlier_min_deviation of the others' median), and no chance
            # split of a noisy fleet: the Mann-Whitney U of the group's ranks, as a z-score, at
            # least outlier_z.
            u1 = rank[g[placed]].sum() - n1 * (n1 + 1) / 2
            zu = (n1 * n2 / 2 - u1) / np.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
            if not abs(mr) > 0 or (mr - mg) < min_dev * abs(mr) or zu < z:
                continue
            near = g[pair_id] & (good[rows] < (mg + mr) / 2) & ~take[rows]
            take[rows[near]] = True
            ref[rows[near]] = abs(mr)
    if not take.any():
        return bad
    x = pairs.loc[take].assign(median=ref[take]).astype({"metric": str})
    with np.errstate(divide="ignore", invalid="ignore"):
        x["worse"] = sign[take] * (x["median"] - x["value"]) / x["median"]
    return _with_evidence(bad, x, profile, suite)


def _with_evidence(bad: pd.DataFrame, x: pd.DataFrame, profile: Profile, suite: str) -> pd.DataFrame:
    """bad, plus the pairs of x (their value against x's median) as evidence rows not there yet."""
    if x.empty:
        return bad
    min_dev = profile.get("analysis.outlier_min_deviation")
    extra = pd.DataFrame({"rail": x["rail"].to_numpy(np.int64), "s": x["s"].to_numpy(np.int64),
                          "d": x["d"].to_numpy(np.int64), "metric": x["metric"].to_numpy(object),
                          "size": x["size"].to_numpy(float), "value": x["value"].to_numpy(float),
                          "expected": x["median"].to_numpy(float), "median": x["median"].to_numpy(float),
                          "bound": np.nan, "worse": x["worse"].to_numpy(float),
                          "grade": (x["worse"].to_numpy() >= 2 * min_dev) & _statistical(x["metric"], profile, suite),
                          "unit": x["unit"].to_numpy(object),
                          "how": None, "basis": None})
    both = pd.concat([bad, extra], ignore_index=True) if len(bad) else extra
    return both.drop_duplicates(["rail", "s", "d", "metric", "size"], keep="first").reset_index(drop=True)


def _empty_bad() -> pd.DataFrame:
    return pd.DataFrame({"rail": np.zeros(0, np.int64), "s": np.zeros(0, np.int64), "d": np.zeros(0, np.int64),
                         "metric": np.zeros(0, object), "size": np.zeros(0), "value": np.zeros(0),
                         "expected": np.zeros(0), "median": np.zeros(0), "bound": np.zeros(0),
                         "worse": np.zeros(0), "grade": np.zeros(0, bool), "unit": np.zeros(0, object),
                         "how": np.zeros(0, object), "basis": np.zeros(0, object), "ops": np.zeros(0),
                         "ops_failed": np.zeros(0), "ops_missing": np.zeros(0)})


def measured_pairs(p: pd.DataFrame) -> pd.DataFrame:
    """Distinct undirected node pairs per rail that have any point-to-point record."""
    rail, s, d = p["rail"].to_numpy(), p["s"].to_numpy(), p["d"].to_numpy()
    u, v = np.minimum(s, d), np.maximum(s, d)
    n = int(max(s.max(initial=0), d.max(initial=0))) + 1
    key = np.sort(pd.unique((rail * n + u) * n + v))
    return pd.DataFrame({"rail": key // (n * n), "u": (key // n) % n, "v": key % n})
