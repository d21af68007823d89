"""The point-to-point view of a run and its fleet-relative outliers (one-sided modified z-score)."""

from __future__ import annotations


import numpy as np
import pandas as pd

from ..rules import catalog, judge
from ..measure.stats import samples_needed
from ..records.results import FAILED_METRIC
from ..switchtree.fabric import Fabric
from ..rules.profile import Profile
from . import tree
from .base import MAD_SCALE, MIN_GROUP, codes_of, floats_of
from .evaluate import OUTLIER_METRICS, OUTLIERS_BY_SUITE
from .noise import ROBUST_SIGMA, favourable_median, tail_dof, typical_tail, z_of
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


# Samples a latency percentile needs before it can single out a link (acceptance.measure.stats), by
# the catalog's Metric.percentile.
PERCENTILE_SAMPLES = {name: samples_needed(rank) for name, rank in catalog.percentiles().items()}
PRIMARY = catalog.primary()  # the suite the functions below default to (catalog Suite.primary)


def pairwise_view(ev: pd.DataFrame, suite: str = PRIMARY) -> tuple[pd.DataFrame, list[str], np.ndarray]:
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


def pair_values(p: pd.DataFrame, suite: str = PRIMARY, metrics=None) -> pd.DataFrame:
    """One value per (metric, size, rail, s, d) of the suite's outlier metrics (or of `metrics`): the
    median over burn-in iterations."""
    om = p[p["metric"].isin(list(OUTLIERS_BY_SUITE.get(suite, {})) if metrics is None else list(metrics))]
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
    outlier = (n >= MIN_GROUP) & (med > 0) & judge.Outlier(profile).robust(worse, z, mad == 0)
    return med, n, worse, outlier


def higher_is_better(metrics) -> np.ndarray:
    """Per row, whether higher is better (its metric's direction; one look-up per distinct name)."""
    uniq, inv = np.unique(np.asarray(metrics, dtype=object).astype(str), return_inverse=True)
    way = np.array([OUTLIER_METRICS.get(m, DIRECTIONS_BY_NAME.get(m, True)) for m in uniq], dtype=bool)
    return way[inv.ravel()] if len(uniq) else np.zeros(0, dtype=bool)


# The latency tail every NIC is held to its fleet on, whatever the profile gates: each pairwise suite's
# one-way write latency p99 (catalog: Metric.percentile 99, timing "one-way", a bound key), rdma_write's
# and perftest's (ib_write_lat). A NIC whose p99 is twice its partners' is a fault where no profile
# states a number for it (the hardware profiles leave rdma_write's unset: its loop is Python's).
FLEET_TAILS = {s.name: tuple(n for m in s.metrics if m.percentile == 99.0 and m.timing == "one-way" and m.key
                             for n in m.names) for s in catalog.pairwise()}
DIRECTIONS_BY_NAME = {n: m.higher for s in catalog.pairwise() for m in s.metrics for n in m.names
                      if m.higher is not None}


def fleet_tail(p: pd.DataFrame, pairs: pd.DataFrame, suite: str = PRIMARY) -> pd.DataFrame:
    """The latency tail's pair values (FLEET_TAILS; pair_values' shape) where the gated values `pairs`
    do not hold them already: judged on each NIC's typical partner only (nic_outliers), its links no
    outliers by it (the profile gates no bound of it)."""
    have = set(pairs["metric"].astype(str)) if len(pairs) else set()
    names = [n for n in FLEET_TAILS.get(suite, ()) if n not in have]
    if not names or p.empty:
        return pairs.iloc[0:0]
    return pair_values(p, suite, names)


def gated(pairs: pd.DataFrame, profile: Profile, suite: str = PRIMARY) -> pd.DataFrame:
    """The pair values of the gated metrics and sizes: those the profile holds to a bound (absolute,
    line rate or fleet) at that size. Where the profile gates none of the suite's outlier metrics,
    its higher-is-better metric (bandwidth) at the largest size measured, so that a run is still
    localized. A metric no profile gates (latency p99.9, a percentile the profile leaves unset) is
    information: it never makes a finding or condemns a NIC."""
    if pairs.empty:
        return pairs
    names = pairs["metric"].astype(str).to_numpy()
    sizes = pairs["size"].to_numpy(np.float64)
    keep = np.zeros(len(pairs), bool)
    for name in pd.unique(names):
        m = catalog.metric(suite, name)
        if m is None:
            continue
        rows = np.flatnonzero(names == name)
        uniq = np.unique(sizes[rows])
        bound = judge.absolute_bounds(m, np.zeros(len(uniq)), uniq, profile)[0]
        on = np.isfinite(bound) & ((bound > 0) if m.higher else True)
        factor = judge.Fleet.factor(profile, suite, name)
        if factor is not None:
            # A metric held to its fleet is compared with it where that bound applies: a profile starts
            # a fleet bound where relative values mean something (an emulator's small writes are bound
            # by its scheduler), whatever "broken" floor it sets below.
            on = np.isfinite(judge.Fleet.factors(factor, uniq))
        keep[rows] = np.isin(sizes[rows], uniq[on])
    if not keep.any():
        higher = [n for n, h in OUTLIERS_BY_SUITE.get(suite, {}).items() if h]
        first = next((n for n in higher if (names == n).any()), None)
        if first is not None:
            keep = (names == first) & (sizes == np.nanmax(sizes[names == first]))
    return pairs.loc[keep].reset_index(drop=True)


def family_stats(pairs: pd.DataFrame, profile: Profile, exclude: np.ndarray | None = None):
    """Per row: family code (metric, size, rail), the family's median and size, g (the log ratio
    to the median, negative on the bad side), the family's robust sigma of g; per metric the tails'
    degrees of freedom (analysis.noise). Rows in `exclude` (the links of NICs already judged bad)
    are held to the others' median, noise and tails, not counted in them."""
    key = pairs.groupby(["metric", "size", "rail"], observed=True, sort=False).ngroup().to_numpy()
    v = pairs["value"].to_numpy(np.float64)
    keep = np.ones(len(v), bool) if exclude is None else ~exclude
    higher = higher_is_better(pairs["metric"].astype(str))
    med = pd.Series(np.where(keep, v, np.nan)).groupby(key).transform("median").to_numpy()
    med = np.where(np.isnan(med), pd.Series(v).groupby(key).transform("median").to_numpy(), med)
    n = pd.Series(keep).groupby(key).transform("sum").to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.where((v > 0) & (med > 0), np.log(v / med), np.nan) * np.where(higher, 1.0, -1.0)
    sigma = ROBUST_SIGMA * pd.Series(np.where(keep, np.abs(lg), np.nan)).groupby(key).transform("median").to_numpy()
    sigma = np.nan_to_num(sigma, nan=0.0)
    dof = _dofs(pairs["metric"].astype(str).to_numpy(), lg, sigma, n, keep, profile)
    return key, med, n, lg, sigma, higher, dof


def nic_rows(pairs: pd.DataFrame, nics: pd.DataFrame) -> np.ndarray:
    """The pair rows with an end on a flagged NIC (any metric and size of its rail)."""
    if nics is None or nics.empty or pairs.empty:
        return np.zeros(len(pairs), bool)
    rail, s, d = (pairs[c].to_numpy(np.int64) for c in ("rail", "s", "d"))
    n = int(max(s.max(), d.max(), nics["node"].max())) + 1
    flagged = np.unique(nics["rail"].to_numpy(np.int64) * n + nics["node"].to_numpy(np.int64))
    return np.isin(rail * n + s, flagged) | np.isin(rail * n + d, flagged)


def _dofs(names: np.ndarray, lg: np.ndarray, sigma: np.ndarray, n: np.ndarray, keep: np.ndarray,
          profile: Profile) -> np.ndarray:
    """Each row's metric's tail degrees of freedom, from its standardized values over every family."""
    out = np.full(len(names), np.nan)
    default = judge.Outlier(profile).noise_dof
    for name in pd.unique(names):
        rows = names == name
        ok = rows & keep & (sigma > 0) & (n >= MIN_GROUP)
        with np.errstate(divide="ignore", invalid="ignore"):
            # the quantiles measured pin the body, not the far tail a Bonferroni threshold reaches:
            # tails never lighter than noise_dof's
            out[rows] = min(tail_dof(lg[ok] / sigma[ok], default), default)
    return out


def _worse(value, reference, higher) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(higher, 1.0, -1.0) * (reference - value) / reference


def fleet_outliers(pairs: pd.DataFrame, profile: Profile, exclude: np.ndarray | None = None) -> pd.DataFrame:
    """Outlier pair-directions per (metric, size, rail), with the group median, allowing for the
    number of comparisons (the run's expected false outliers stay under analysis.false_findings):

    - a pair-direction alone: beyond the Bonferroni threshold of every pair-direction compared;
    - a link: both its directions beyond the threshold at which both are, by chance, as rarely
      (each direction's tail probability the square root of the link's share).

    Either also outlier_min_deviation off the median. The noise is the family's robust sigma with
    its metric's tails (analysis.noise), without the rows in `exclude` (nic_rows). `failing`: the
    same rules at analysis.false_failures and twice the deviation (bad_pairs grades by it)."""
    if pairs.empty:
        return pairs.assign(median=[], worse=[], failing=[])
    key, med, n, lg, sigma, higher, dof = family_stats(pairs, profile, exclude)
    outlier, failing, worse = _outliers(pairs, key, med, n >= MIN_GROUP, sigma, dof, higher, profile)
    out = pairs.loc[outlier].copy()
    out["median"] = med[outlier]
    out["worse"] = worse[outlier]
    out["failing"] = failing[outlier]
    return out.reset_index(drop=True)


def _outliers(pairs: pd.DataFrame, key: np.ndarray, med: np.ndarray, enough: np.ndarray, sigma: np.ndarray,
              dof: np.ndarray, higher: np.ndarray, profile: Profile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(outlier, failing, worse) of each pair-direction against `med` (fleet_outliers' two rules):
    an outlier at analysis.false_findings and outlier_min_deviation, failing at
    analysis.false_failures and twice the deviation."""
    v = pairs["value"].to_numpy(np.float64)
    worse = _worse(v, med, higher)
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.where((v > 0) & (med > 0), np.log(v / med), np.nan) * np.where(higher, 1.0, -1.0)
    tested = enough & (med > 0) & np.isfinite(lg)
    m1 = max(int(tested.sum()), 1)
    # links measured both ways: the better direction must be bad too
    s, d = pairs["s"].to_numpy(np.int64), pairs["d"].to_numpy(np.int64)
    n = int(max(s.max(), d.max())) + 1
    lid = pd.factorize((key.astype(np.int64) * n + np.minimum(s, d)) * n + np.maximum(s, d))[0]
    both = np.bincount(lid, weights=tested, minlength=lid.max() + 1)[lid] == 2
    best = pd.Series(np.where(tested, lg, -np.inf)).groupby(lid).transform("max").to_numpy()
    least = pd.Series(np.where(tested, worse, -np.inf)).groupby(lid).transform("min").to_numpy()
    m2 = max(int(len(np.unique(lid[both]))), 1)
    out = []
    rule = judge.Outlier(profile)
    for level in rule.levels:  # a finding, then a failure
        row = tested & rule.beyond(worse, lg, _z_by_dof(level.each(m1), dof), sigma, level)
        link = tested & both & rule.beyond(least, best, _z_by_dof(level.both_ways(m2), dof), sigma, level)
        out.append(row | link)
    return out[0], out[1], worse


def _z_by_dof(p: float, dof: np.ndarray) -> np.ndarray:
    """z_of(p, dof) for every row (a few distinct dof)."""
    if not len(dof):
        return np.zeros(0)
    uniq, inv = np.unique(np.nan_to_num(dof, nan=3.0), return_inverse=True)
    return np.array([z_of(p, float(x)) for x in uniq])[inv]


def nic_outliers(pairs: pd.DataFrame, profile: Profile, suite: str = PRIMARY) -> pd.DataFrame:
    """NICs judged on the typical value over their partners, per gated (metric, size).

    Each link's value is its better direction's ratio to the reference (the median of the fleet
    population of fleet.pairs: every rail's pairs, or the rail's, leaving out the NICs that look
    bad at first sight); a NIC's typical ratio is the favourable median over its partners (more
    than half of them at least that bad), so one bad partner, or one bad link of two, cannot move
    it. A NIC warns when its typical ratio is outlier_min_deviation worse and beyond the threshold
    at which the NICs compared stay under analysis.false_findings false ones; it fails at twice the
    deviation and analysis.false_failures (a fleet-bound metric: the judge's business, so it warns),
    and always where the typical ratio is analysis.nic_fail_ratio or worse with at least 2 partners
    (most partners see it at half the rate).

    A bandwidth is one direction's, so each NIC's sending (its pair-directions as the source) and
    its receiving (as the destination) are judged apart too, each on its typical partner, by the
    same rule with its own allowance for the (NIC, direction) comparisons made: a NIC slow one way
    only has a healthy better direction on every link, which the link rule cannot see. A latency here
    is half a round trip, the same both ways: it is judged on its links only.

    Returns one row per flagged (metric, size, rail, node, direction): direction "both" (the link
    rule: slow both ways), "tx" (sending) or "rx" (receiving), the last two only where the link rule
    did not flag the NIC; typical (ratio), partners, reference, value (the typical value), worse, fail."""
    cols = ["metric", "size", "rail", "node", "direction", "typical", "partners", "reference", "value", "worse",
            "fail", "unit"]
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    t = _typical(pairs, profile)
    flag = (t["warn"] | t["half"]).to_numpy()
    x = t.loc[flag].copy()
    # a NIC the link rule flagged is slow both ways: its directions say nothing more
    key = ["metric", "size", "rail", "node"]
    both = x.loc[x["direction"] == "both", key].assign(_both=True)
    x = x.merge(both, on=key, how="left")
    x = x[(x["direction"] == "both") | x["_both"].isna()]
    statistical = _statistical(x["metric"], profile, suite)
    x["fail"] = x["half"].to_numpy() | (x["strong"].to_numpy() & statistical)
    return x[cols].reset_index(drop=True)


DIRECTIONS = ("tx", "rx")   # a NIC sending (its pair-directions as the source), receiving (as the destination)


# Long: every NIC's typical ratio for its links and each direction, vectorized over all NICs at
# once on shared group codes (pop, fam); pieces would pass the codes about.
def _typical(pairs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Every NIC's typical ratio per (metric, size, rail) with its threshold (nic_outliers): on its
    links (direction "both"), and for a bandwidth on its sending and its receiving ("tx", "rx")."""
    population = ["metric", "size"] + (["rail"] if profile.get("fleet.pairs") == "rail" else [])
    pop = pairs.groupby(population, observed=True, sort=False).ngroup().to_numpy()
    fam = pairs.groupby(["metric", "size", "rail"], observed=True, sort=False).ngroup().to_numpy()
    v = pairs["value"].to_numpy(np.float64)
    names = pairs["metric"].astype(str).to_numpy()
    higher = higher_is_better(names)
    sign = np.where(higher, 1.0, -1.0)
    s, d = pairs["s"].to_numpy(np.int64), pairs["d"].to_numpy(np.int64)
    n_nodes = int(max(s.max(), d.max())) + 1
    lid, luniq = pd.factorize((fam.astype(np.int64) * n_nodes + np.minimum(s, d)) * n_nodes + np.maximum(s, d))
    l_fam = luniq // (n_nodes * n_nodes)
    # each link counts once at each of its two ends: NIC (family, node) groups
    nic_id, nic_uniq = pd.factorize(np.concatenate([l_fam * n_nodes + (luniq // n_nodes) % n_nodes,
                                                    l_fam * n_nodes + luniq % n_nodes]))
    nf = nic_uniq // n_nodes                      # each NIC's family
    # each pair-direction of a bandwidth counts once at its source (tx) and once at its destination (rx):
    # (family, node, direction) groups, direction 0 tx, 1 rx
    one_way = np.flatnonzero(higher)
    f1 = fam[one_way].astype(np.int64) * n_nodes
    dir_id, dir_uniq = pd.factorize(np.concatenate([(f1 + s[one_way]) * 2, (f1 + d[one_way]) * 2 + 1]))
    df_ = dir_uniq // 2 // n_nodes                # each (NIC, direction)'s family
    first = pd.Series(np.arange(len(fam))).groupby(fam).first().to_numpy()
    n_higher = higher[first][nf]
    rule = judge.Outlier(profile)
    exclude = np.zeros(len(v), bool)
    whole = pd.Series(np.where(v > 0, v, np.nan)).groupby(pop).transform("median").to_numpy()
    for _ in range(2):   # the reference without the NICs that look bad at first sight
        ref = pd.Series(np.where(exclude | ~(v > 0), np.nan, v)).groupby(pop).transform("median").to_numpy()
        ref = np.where(np.isnan(ref), whole, ref)
        with np.errstate(divide="ignore", invalid="ignore"):
            lg = np.where((v > 0) & (ref > 0), sign * np.log(v / ref), np.nan)
        link_g = pd.Series(lg).groupby(lid).max().to_numpy()          # the better direction
        typ, partners = favourable_median(np.nan_to_num(np.concatenate([link_g, link_g]), nan=0.0), nic_id)
        worse = np.where(n_higher, 1 - np.exp(typ), np.exp(-typ) - 1)
        suspect = (partners >= 2) & rule.suspect(worse, np.exp(typ))
        if not suspect.any():
            break
        # (only the NICs slow both ways are left out: in a small noisy fleet most NICs look slow one way
        # at first sight, and a reference without them all is the fastest links')
        exclude = np.isin(fam * n_nodes + s, nic_uniq[suspect]) | np.isin(fam * n_nodes + d, nic_uniq[suspect])
    # each way: the favourable median of its pair-directions' ratios to the same reference
    g1 = np.nan_to_num(lg[one_way], nan=0.0)
    dtyp, dpartners = favourable_median(np.concatenate([g1, g1]), dir_id)
    dworse = 1 - np.exp(dtyp)
    ok = ~exclude & np.isfinite(lg)
    sigma_pop = ROBUST_SIGMA * pd.Series(np.where(ok, np.abs(lg), np.nan)).groupby(pop).median().to_numpy()
    default = judge.Outlier(profile).noise_dof
    with np.errstate(divide="ignore", invalid="ignore"):
        z_all = lg / sigma_pop[pop]
    dof_of = {nm: min(tail_dof(z_all[ok & (names == nm)], default), default) for nm in pd.unique(names)}

    def judged(groups_fam: np.ndarray, typical: np.ndarray, count: np.ndarray, bad: np.ndarray, is_higher) -> dict:
        """One rule's NICs: thresholds allowing for the comparisons it made (one per distinct
        (partners, dof): a few, whatever the number of NICs)."""
        sigma = np.nan_to_num(sigma_pop[pop[first]][groups_fam], nan=0.0)
        fam_name = names[first][groups_fam]
        dof = np.array([dof_of[x] for x in fam_name], dtype=np.float64)
        tested = count >= 2
        m = max(int(tested.sum()), 1)
        if not len(count):
            combos, inv = np.zeros((2, 0)), np.zeros(0, dtype=np.int64)
        else:
            combos, inv = np.unique(np.stack([count.astype(np.float64), dof]), axis=1, return_inverse=True)
        inv = inv.ravel()

        def thresholds(level: judge.Level) -> np.ndarray:
            return np.array([z_of(typical_tail(level.each(m), int(k)), float(df)) if k >= 2 else np.inf
                             for k, df in combos.T])[inv]
        z3, zf = thresholds(rule.warn), thresholds(rule.fail)
        fref = ref[first][groups_fam]
        return {"metric": fam_name, "size": pairs["size"].to_numpy()[first][groups_fam],
                "rail": pairs["rail"].to_numpy()[first][groups_fam], "typical": np.exp(typical), "partners": count,
                "reference": fref, "value": np.where(is_higher, fref * np.exp(typical), fref / np.exp(typical)),
                "worse": bad, "warn": tested & rule.beyond(bad, typical, z3, sigma, rule.warn),
                "strong": tested & rule.beyond(bad, typical, zf, sigma, rule.fail),
                "half": tested & rule.halved(np.exp(typical)), "sigma": sigma, "dof": dof, "z": z3, "z_fail": zf,
                "unit": pairs["unit"].to_numpy()[first][groups_fam]}
    links = pd.DataFrame({**judged(nf, typ, partners, worse, n_higher), "node": nic_uniq % n_nodes,
                          "direction": "both"})
    ways = pd.DataFrame({**judged(df_, dtyp, dpartners, dworse, True), "node": (dir_uniq // 2) % n_nodes,
                         "direction": np.array(DIRECTIONS)[dir_uniq % 2]})
    return pd.concat([links, ways], ignore_index=True) if len(ways) else links


def with_nics(bad: pd.DataFrame, pairs: pd.DataFrame, nics: pd.DataFrame, profile: Profile,
              suite: str = PRIMARY) -> pd.DataFrame:
    """bad, plus the rows of each flagged NIC's slow links (against the reference its typical ratio
    was taken against; a NIC slow one way: its pair-directions that way), graded as the NIC is;
    evidence of the NIC (or a switch) only, never a link finding by itself (`group`)."""
    if nics.empty or pairs.empty:
        return bad
    key = ["metric", "size", "rail"]
    x = pairs.astype({"metric": str})
    direction = nics["direction"] if "direction" in nics.columns else pd.Series("both", index=nics.index)
    flagged = nics.astype({"metric": str}).assign(direction=direction.to_numpy())[
        [*key, "node", "reference", "fail", "worse", "direction"]].rename(columns={"worse": "typical_worse"})
    parts = []
    for end, way in (("s", "tx"), ("d", "rx")):
        mine = flagged[flagged["direction"].isin(("both", way))].drop(columns="direction")
        parts.append(x.merge(mine.rename(columns={"node": end}), on=[*key, end], how="inner"))
    x = pd.concat(parts, ignore_index=True)
    x = x.sort_values("fail", ascending=False, kind="stable").drop_duplicates(["rail", "s", "d", "metric", "size"])
    higher = higher_is_better(x["metric"])
    worse = _worse(x["value"].to_numpy(np.float64), x["reference"].to_numpy(np.float64), higher)
    # a link is evidence when it is itself as slow as a NIC must typically be to be flagged
    # (outlier_min_deviation, or the half rate that fails a NIC), and at least half as slow as this
    # NIC typically is: its healthy links are no evidence, for the switch tree neither
    enough = np.maximum(judge.Outlier(profile).enough(higher), x["typical_worse"].to_numpy(np.float64) / 2)
    x = x.assign(median=x["reference"], worse=worse)[worse >= enough]
    return _with_evidence(bad, x, profile, suite, grade=x["fail"].to_numpy(bool), group=True, promote=True)


def with_paths(bad: pd.DataFrame, pairs: pd.DataFrame, faults: list, profile: Profile,
               suite: str = PRIMARY) -> pd.DataFrame:
    """bad, plus the slow pair-directions of each slow cable or path beyond a leaf port
    (analysis.cables: PathFault.rows, against their family's median), graded as the fault is;
    evidence of that fault only (`group`): localize gives them to it."""
    if not faults or pairs.empty:
        return bad
    rows = np.concatenate([f.rows for f in faults])
    grade = np.concatenate([np.full(len(f.rows), bool(f.fail)) for f in faults])
    exclude = np.zeros(len(pairs), bool)
    exclude[rows] = True
    _key, med, _n, _lg, _sigma, higher, _dof = family_stats(pairs, profile, exclude)
    x = pairs.iloc[rows].astype({"metric": str}).assign(median=med[rows])
    x["worse"] = _worse(x["value"].to_numpy(np.float64), med[rows], higher[rows])
    return _with_evidence(bad, x, profile, suite, grade=grade, group=True, promote=True)


def power(pairs: pd.DataFrame, profile: Profile, suite: str = PRIMARY) -> list[dict]:
    """What each rule detects at this run's size and noise: per gated (metric, size), the smallest
    slowdown (a fraction: 0.12 = 12% slower) a link and a NIC of typical partners are found at
    (a warning; a failure from twice outlier_min_deviation, and for a NIC at analysis.nic_fail_ratio)."""
    if pairs.empty:
        return []
    out = []
    t = _typical(pairs, profile)
    flagged = t[(t["warn"] | t["half"]).to_numpy()]
    key, med, n, lg, sigma, higher, dof = family_stats(pairs, profile, nic_rows(pairs, flagged))
    outlier = judge.Outlier(profile)
    min_dev, alpha, alpha_f = outlier.min_deviation, outlier.alpha(), outlier.alpha(fail=True)
    tested = (n >= MIN_GROUP) & (med > 0) & np.isfinite(lg)
    m1 = max(int(tested.sum()), 1)
    s, d = pairs["s"].to_numpy(), pairs["d"].to_numpy()
    nn = int(max(s.max(), d.max())) + 1
    links = (key.astype(np.int64) * nn + np.minimum(s, d)) * nn + np.maximum(s, d)
    m2 = max(int(len(np.unique(links[tested]))), 1)
    frame = pd.DataFrame({"metric": pairs["metric"].astype(str).to_numpy(), "size": pairs["size"].to_numpy(),
                          "sigma": sigma, "dof": dof, "higher": higher, "tested": tested})
    tt = t[(t["partners"] >= 2) & (t["direction"] == "both")]
    tw = t[(t["partners"] >= 2) & (t["direction"] != "both")]
    for (metric, size), g in frame[frame["tested"]].groupby(["metric", "size"], sort=True):
        noise, df, hi = float(np.median(g["sigma"])), float(g["dof"].iloc[0]), bool(g["higher"].iloc[0])

        def slowdown(z_sigma: float, floor: float) -> float:
            drop = 1 - np.exp(-z_sigma) if hi else np.exp(z_sigma) - 1
            return round(float(max(drop, floor)), 4)
        common = {"metric": metric, "size": None if np.isnan(size) else int(size), "rail": None,
                  "noise": round(noise, 5), "suite": suite}
        out.append({"rule": "link", **common, "population": int(len(g)), "comparisons": m2,
                    "detectable": slowdown(z_of(np.sqrt(alpha / m2), df) * noise, min_dev),
                    "fails": slowdown(z_of(np.sqrt(alpha_f / m2), df) * noise, 2 * min_dev)})
        out.append({"rule": "pair-direction", **common, "population": int(len(g)), "comparisons": m1,
                    "detectable": slowdown(z_of(alpha / m1, df) * noise, min_dev),
                    "fails": slowdown(z_of(alpha_f / m1, df) * noise, 2 * min_dev)})
        half = float(1 - outlier.fail_ratio if hi else 1 / outlier.fail_ratio - 1)
        for rule, of in (("nic", tt), ("nic-direction", tw)):
            mine = of[(of["metric"].astype(str) == metric) & (of["size"] == size)]
            if len(mine):
                z = float(np.median(mine["z"]) * np.median(mine["sigma"]))
                zf = float(np.median(mine["z_fail"]) * np.median(mine["sigma"]))
                out.append({"rule": rule, **common, "noise": round(float(np.median(mine["sigma"])), 5),
                            "population": int(len(mine)), "comparisons": int(len(of)),
                            "partners": int(np.median(mine["partners"])),
                            "detectable": min(slowdown(z, min_dev), round(half, 4)),
                            "fails": min(slowdown(zf, 2 * min_dev), round(half, 4))})
    return out


def rail_planes(pairs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Rails whose median (per metric and size) is an outlier against the other rails' medians."""
    cols = ["rail", "metric", "size", "value", "median", "worse", "n", "unit"]
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    med = (pairs.groupby(["metric", "size", "rail"], observed=True, sort=False)
           .agg(value=("value", "median"), unit=("unit", "first")).reset_index())
    key = med.groupby(["metric", "size"], observed=True, sort=False).ngroup().to_numpy()
    center, n, worse, outlier = _robust(med["value"].to_numpy(), key, higher_is_better(med["metric"].astype(str)), profile)
    med["median"], med["worse"], med["n"] = center, worse, n
    return med.loc[outlier, cols].reset_index(drop=True)


def bad_pairs(p: pd.DataFrame, outliers: pd.DataFrame, profile: Profile, suite: str = PRIMARY) -> pd.DataFrame:
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
    o = outliers[[*key, "value", "median", "worse", "failing", "unit"]] if len(outliers) else \
        pd.DataFrame(columns=[*key, "value", "median", "worse", "failing", "unit"])
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
    higher = higher_is_better(bad["metric"])
    with np.errstate(divide="ignore", invalid="ignore"):
        vs_bound = np.where(higher, 1.0, -1.0) * (bad["bound"] - bad["value"]) / bad["bound"]
    worse = bad["worse"].astype(float).to_numpy()
    worse = np.where(np.isnan(worse), np.where(np.isfinite(vs_bound), vs_bound, 1.0), worse)
    bad["worse"] = worse
    # A metric the profile holds to the fleet fails by its fleet bound (the judge); the statistical
    # detector then only warns, or it would be a second, stricter judge of the same question.
    failing = bad["failing"].fillna(False).to_numpy(bool) if "failing" in bad.columns else np.zeros(len(bad), bool)
    bad["grade"] = is_fail | (_statistical(bad["metric"], profile, suite) & bad["median"].notna().to_numpy()
                              & judge.Outlier(profile).fails(worse) & failing)
    bad["expected"] = bad["median"].fillna(bad["bound"])
    return bad[["rail", "s", "d", "metric", "size", "value", "expected", "median", "bound", "worse", "grade",
                "unit", "how", "basis", "ops", "ops_failed", "ops_missing"]].reset_index(drop=True)


def _statistical(metrics: pd.Series, profile: Profile, suite: str = PRIMARY) -> np.ndarray:
    """Where the statistical detector may fail a pair: metrics the profile does not hold to the fleet."""
    names = metrics.astype(str)
    fleet = {m for m in names.unique() if judge.Fleet.factor(profile, suite, m) is not None}
    return ~names.isin(fleet).to_numpy()


def against_rails(bad: pd.DataFrame, pairs: pd.DataFrame, planes: pd.DataFrame, profile: Profile,
                   suite: str = PRIMARY) -> pd.DataFrame:
    """On a rail slow against the others, its pairs that are slow against the other rails' median
    become evidence too, by fleet_outliers' rules against that median (with the noise of their own
    rail's pairs); localization then decides: the plane, or a few NICs or links on it."""
    ref = planes[["rail", "metric", "size", "median"]].astype({"metric": str}).rename(columns={"median": "ref"})
    # the rail's own spread, every pair of it counted: on a slow plane every NIC may look slow
    key, _med, n, _lg, sigma, higher, dof = family_stats(pairs, profile)
    x = pairs.astype({"metric": str}).assign(_k=key, _sigma=sigma, _dof=dof, _n=n, _higher=higher)
    x = x.merge(ref, on=["rail", "metric", "size"], how="inner")
    if x.empty:
        return bad
    # a rail of 2 nodes has no spread of its own: its one link is held to outlier_min_deviation alone
    sigma = np.where(x["_n"].to_numpy() >= MIN_GROUP, x["_sigma"].to_numpy(), 0.0)
    outlier, failing, worse = _outliers(x, x["_k"].to_numpy(), x["ref"].to_numpy(np.float64), np.ones(len(x), bool),
                                        sigma, x["_dof"].to_numpy(), x["_higher"].to_numpy(bool), profile)
    x = x.assign(median=x["ref"], worse=worse)
    grade = failing[outlier] & _statistical(x["metric"][outlier], profile, suite)
    return _with_evidence(bad, x[outlier], profile, suite, grade=grade)


def against_switches(bad: pd.DataFrame, pairs: pd.DataFrame, names: list[str], fabric: Fabric | None,
                     profile: Profile, suite: str = PRIMARY) -> pd.DataFrame:
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
    rule = judge.Outlier(profile)
    keys = pairs.groupby(["metric", "size", "rail"], observed=True, sort=False).ngroup().to_numpy()
    sign = np.where(higher_is_better(pairs["metric"].astype(str)), 1.0, -1.0)
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
            if not abs(mr) > 0 or not rule.slow_group(mr - mg, abs(mr), zu):
                continue
            near = g[pair_id] & (good[rows] < (mg + mr) / 2) & ~take[rows]
            take[rows[near]] = True
            ref[rows[near]] = abs(mr)
    if not take.any():
        return bad
    x = pairs.loc[take].assign(median=ref[take]).astype({"metric": str})
    with np.errstate(divide="ignore", invalid="ignore"):
        x["worse"] = sign[take] * (x["median"] - x["value"]) / x["median"]
    return _with_evidence(bad, x, profile, suite, group=True)


def _with_evidence(bad: pd.DataFrame, x: pd.DataFrame, profile: Profile, suite: str,
                   grade: np.ndarray | None = None, group: bool = False, promote: bool = False) -> pd.DataFrame:
    """bad, plus the pairs of x (their value against x's median) as evidence rows not there yet
    (graded by `grade`, else failing at twice outlier_min_deviation)."""
    if x.empty:
        return bad
    if grade is None:
        grade = judge.Outlier(profile).fails(x["worse"].to_numpy()) & _statistical(x["metric"], profile, suite)
    extra = pd.DataFrame({"rail": x["rail"].to_numpy(np.int64), "s": x["s"].to_numpy(np.int64),
                          "d": x["d"].to_numpy(np.int64), "metric": x["metric"].to_numpy(object),
                          "size": x["size"].to_numpy(float), "value": x["value"].to_numpy(float),
                          "expected": x["median"].to_numpy(float), "median": x["median"].to_numpy(float),
                          "bound": np.nan, "worse": x["worse"].to_numpy(float),
                          "grade": grade,
                          "unit": x["unit"].to_numpy(object),
                          "how": None, "basis": None, "group": group})
    both = pd.concat([bad, extra], ignore_index=True) if len(bad) else extra
    key = ["rail", "s", "d", "metric", "size"]
    if promote:
        # A row kept from `bad` fails where a failing NIC's evidence covers it: a NIC at half the fleet's
        # rate fails through its links, though each was only a warning as a link.
        both = both.assign(grade=both.groupby(key, sort=False, dropna=False)["grade"].transform("max").astype(bool))
    return both.drop_duplicates(key, keep="first").reset_index(drop=True)


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
