"""The bound kinds: one class for each way a verdict is reached, and each decides its verdicts.

The judge (acceptance.rules.judge) judges records with them. The detectors of analysis and history
and the drivers ask them about what they found. Detectors find populations and evidence: medians,
noise, ratios, how many comparisons. The rule that turns evidence into warn or fail lives here,
including the "twice the tolerance fails" rule. Nothing outside rules compares a value with a profile
tolerance (tests/unit/test_judge_kinds.py holds analysis, history and drivers to that).

- Absolute kinds: the profile gives the number. KINDS has one per catalog Metric.bound. SizeMap is a
  table by message size, and LineRate adds its floor for point-to-point bandwidth. The others are
  Scalar, Zero, One, Versions, Ranks and Memlock. Counter covers port counters, by the counter's kind
  (judge.counter). Absolute itself is "none": no bound.
- LineRate: analysis.line_rate_fraction x analysis.line_rate, from analysis.line_rate_from_size up.
- Fleet: a fraction or multiple (fleet.bounds) of the median of the comparable others of the same
  run; also a value against its node's median (intranode.outlier_fraction).
- Outlier: a value far off its population's centre and beyond its noise, allowing for the number of
  comparisons. At analysis.false_findings (Bonferroni: that over the comparisons) and
  outlier_min_deviation it is a finding; at analysis.false_failures and twice the deviation it fails.
- Trend: a series moved beyond a tolerance: burn-in drift and instability, baseline regression,
  history's fleet trend. Beyond twice the tolerance it fails.
- Drift: history. A link's loss against its references beyond the tolerance, widened in quadrature by
  the noise of the comparison; beyond twice the tolerance it fails once it has held history.drift_nights.
- Headroom: a value against a limit the part reports itself (a GPU's slowdown temperature): at it
  fails, within a margin warns (the node check).

Verdict codes are the positions in results.VERDICTS: pass, fail, warn, info.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from . import catalog
from .catalog import Metric
from .profile import Profile
from ..records.results import BOUND_ORIGINS, VERDICTS

if TYPE_CHECKING:
    import pandas as pd

PASS, FAIL, WARN, INFO = (VERDICTS.index(v) for v in ("pass", "fail", "warn", "info"))
# How a record's bound was derived (its `bound` field). RECORDED is a bound the test set itself (schema < 3).
ABSOLUTE, LINE_RATE, RECORDED, FLEET, FLEET_TOO_FEW = BOUND_ORIGINS


def _pd():
    import pandas
    return pandas


# ---- columns --------------------------------------------------------------------------------

def is_value(series: pd.Series, value) -> np.ndarray:
    """Boolean mask series == value, fast for categoricals."""
    pd = _pd()
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = series.cat.categories
        if value not in cats:
            return np.zeros(len(series), dtype=bool)
        return series.cat.codes.to_numpy() == cats.get_loc(value)
    return (series == value).to_numpy(dtype=bool, na_value=False)


def floats(series: pd.Series) -> np.ndarray:
    pd = _pd()
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def texts(df: pd.DataFrame, column: str, idx: np.ndarray) -> np.ndarray:
    """Column values of the rows idx as objects, None where missing (or no such column)."""
    if column not in df.columns:
        return np.full(len(idx), None, dtype=object)
    col = df[column].iloc[idx]
    return col.astype(object).where(col.notna(), None).to_numpy(dtype=object)


# ---- verdicts ----------------------------------------------------------------------------------

def size_bound(size_map, sizes: np.ndarray) -> np.ndarray:
    """The bound of the last entry at or below each size of a SizeMap (NaN: none)."""
    if not size_map:
        return np.full(len(sizes), np.nan)
    starts = np.array([float(s) for s, _ in size_map])
    values = np.array([np.nan if v is None else float(v) for _, v in size_map])
    idx = np.searchsorted(starts, np.nan_to_num(sizes, nan=-1.0), side="right") - 1
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], np.nan)
    return np.where(np.isnan(sizes), np.nan, out)


def compare(values: np.ndarray, bound: np.ndarray, higher: bool | None) -> np.ndarray:
    """Verdict codes: pass / fail where value and bound exist, info elsewhere."""
    out = np.full(len(values), INFO, dtype=np.int8)
    have = ~np.isnan(values) & ~np.isnan(bound)
    with np.errstate(invalid="ignore"):
        ok = values >= bound if higher is True else values <= bound if higher is False else values == bound
    out[have] = np.where(ok[have], PASS, FAIL)
    return out


def advised(metric: Metric, codes: np.ndarray) -> np.ndarray:
    """An advisory metric's failures are warnings (catalog: Metric.advisory)."""
    return np.where(codes == FAIL, WARN, codes).astype(np.int8) if metric.advisory else codes


class Kind:
    """A way a verdict is reached. `name` is what the catalog (Metric.bound) or a record's `bound`
    field (results.BOUND_ORIGINS) calls it, or what a finding's `kind` says (trend, drift, outlier)."""

    name: ClassVar[str] = ""


# ---- absolute: the profile gives the number (catalog Metric.bound) ----------------------------

class Absolute(Kind):
    """A bound the profile states for a metric; one subclass per catalog Metric.bound. This class
    itself is "none": an informational metric with no bound, whose records keep their test's verdict."""

    name = "none"

    def threshold(self, metric: Metric, values: np.ndarray, sizes: np.ndarray, profile: Profile,
                  iterations: np.ndarray | None = None) -> np.ndarray:
        """The bound of each value in record units (NaN: none)."""
        return np.full(len(values), np.nan)

    def bounds(self, metric: Metric, values: np.ndarray, sizes: np.ndarray, profile: Profile,
               iterations: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(bound of each value in record units, NaN: none; True where the line-rate floor set it)."""
        return self.threshold(metric, values, sizes, profile, iterations), np.zeros(len(values), dtype=bool)

    def judge(self, metric: Metric, values: np.ndarray, sizes: np.ndarray, profile: Profile,
              iterations: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(threshold, verdict codes, how each bound was derived: absolute, line_rate, None for none).
        `iterations` groups the values a population-dependent bound (Ranks) is taken over."""
        b, by_floor = self.bounds(metric, values, sizes, profile, iterations)
        kind = np.where(np.isnan(b), None, np.where(by_floor, LINE_RATE, ABSOLUTE)).astype(object)
        return b, advised(metric, compare(values, b, metric.higher)), kind

    def one(self, metric: Metric, values: np.ndarray, sizes: np.ndarray,
            profile: Profile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """judge() of a value alone, as a driver records it (one element arrays)."""
        return self.judge(metric, values, sizes, profile)

    def stated(self, metric: Metric, profile: Profile, size: float | None = None) -> float | None:
        """The bound the profile states, before any value is seen, in record units: what a message names
        and what says whether the metric is bounded at all; None where the profile sets none."""
        b = self.threshold(metric, np.array([np.nan]), np.array([np.nan if size is None else float(size)]), profile)
        return None if np.isnan(b[0]) else float(b[0])


class SizeMap(Absolute):
    """The profile key is a table by message size (rdma_write.bandwidth_min). A per_nic bound is one
    NIC's figure times topology.rails. Point-to-point bandwidth (Metric.line_rate) must also reach
    the line-rate floor, and the stricter bound applies."""

    name = "sizemap"

    def bounds(self, metric, values, sizes, profile, iterations=None):
        b = size_bound(profile.get(metric.key), sizes) * metric.scale
        if metric.per_nic:  # rails 0 (one per rank, unknown here): one NIC's figure, the weaker bound
            b = b * max(1, profile.get("topology.rails"))
        if metric.line_rate:
            return LineRate(profile).floor(b, sizes)
        return b, np.zeros(len(values), dtype=bool)


class Scalar(Absolute):
    """One number (rdma_write.latency_p50_max), converted to record units (Metric.scale)."""

    name = "scalar"

    def threshold(self, metric, values, sizes, profile, iterations=None):
        bound = profile.get(metric.key)
        return np.full(len(values), np.nan if bound is None else float(bound) * metric.scale)


class Zero(Absolute):
    """Must be 0 (errors, mismatches)."""

    name = "zero"

    def threshold(self, metric, values, sizes, profile, iterations=None):
        return np.zeros(len(values))


class One(Absolute):
    """Must be 1 (a flag that must hold: GPUDirect RDMA in use)."""

    name = "one"

    def threshold(self, metric, values, sizes, profile, iterations=None):
        return np.ones(len(values))


class Versions(Absolute):
    """Zero mismatches when preflight.same_versions is on; no bound when it is off."""

    name = "versions"

    def threshold(self, metric, values, sizes, profile, iterations=None):
        return np.full(len(values), 0.0 if profile.get("preflight.same_versions") else np.nan)


class Ranks(Absolute):
    """Equal to the key (topology.rails), or, where it is 0 (one rail per rank), to the count most
    nodes have in the same iteration: a value alone cannot be judged then."""

    name = "ranks"

    def threshold(self, metric, values, sizes, profile, iterations=None):
        rails = profile.get(metric.key)
        n = len(values)
        if rails:
            return np.full(n, float(rails))
        groups = iterations if iterations is not None else np.zeros(n, dtype=np.int64)
        return (_pd().Series(values).groupby(groups)
                .transform(lambda x: x.mode().iloc[0] if x.notna().any() else np.nan).to_numpy(dtype=float))

    def one(self, metric, values, sizes, profile):
        if profile.get(metric.key):
            return self.judge(metric, values, sizes, profile)
        # most nodes' count: judged together (judge.record_all)
        return np.full(1, np.nan), np.full(1, INFO, dtype=np.int8), np.full(1, None, dtype=object)


class Memlock(Absolute):
    """At least the key's size, or "unlimited". The suite records null (detail "unlimited") for no limit."""

    name = "memlock"

    def threshold(self, metric, values, sizes, profile, iterations=None):
        minimum = profile.get(metric.key)
        return np.full(len(values), np.nan if minimum in ("unlimited", None) else float(minimum))

    def stated(self, metric, profile, size=None):
        """The minimum in bytes; infinite where only "unlimited" meets it; None where the profile sets none."""
        minimum = profile.get(metric.key)
        return None if not minimum else np.inf if minimum == "unlimited" else float(minimum)

    def judge(self, metric, values, sizes, profile, iterations=None):
        minimum = profile.get(metric.key)
        unlimited = np.isnan(values)
        b = self.threshold(metric, values, sizes, profile)
        if minimum == "unlimited":
            code = np.where(unlimited, PASS, FAIL).astype(np.int8)
        else:
            code = np.where(unlimited | (values >= float(minimum)), PASS, FAIL).astype(np.int8)
        return b, code, np.full(len(values), ABSOLUTE, dtype=object)


COUNTER_SEVERITY = {"error": FAIL, "retransmit": FAIL, "pre_fec": FAIL, "discard": WARN, "pause": WARN, "cnp": WARN}
# A derived counter record: its metric is the counter's name plus this suffix (acceptance.rules.counter_verdicts.DERIVED).
# Counter kinds judged by a derived value, recorded beside the count: kind -> (the record's metric suffix,
# its unit, the Delta field it comes from: acceptance.host.counters).
DERIVED = {"pause": ("_rate", "1/s", "rate"), "cnp": ("_rate", "1/s", "rate"), "retransmit": ("_ppm", "ppm", "ppm"),
           "pre_fec": ("_ber", "errors/bit", "ber")}
COUNTER_SUFFIX = {unit: suffix for suffix, unit, _ in DERIVED.values()}  # a derived record's unit -> its suffix
# Derived values that are unknown (NaN) when the counter rose with nothing to relate it to: a warning.
RELATED_UNITS = ("ppm", "errors/bit")


class Counter(Absolute):
    """Port counter deltas, by the counter's kind (acceptance.host.counter_kinds.kind_of). A record
    names its counter, not a catalog metric, so records are judged per port by ports()
    (judge.counter); through a Metric this kind has no bound."""

    name = "counter"

    def ports(self, names: np.ndarray, units: np.ndarray, values: np.ndarray, saturated: np.ndarray,
              profile: Profile | dict, retransmit_counts: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(threshold, verdict code) of each port counter record: see judge.counter."""
        from ..host.counter_kinds import kind_of
        threshold = np.full(len(values), np.nan)
        verdict = np.full(len(values), INFO, dtype=np.int8)
        during, before = saturated == "during", saturated == "before"
        for name, unit in set(zip(names, units)):
            sel = (names == name) & (units == unit)
            suffix = COUNTER_SUFFIX.get(unit)
            kind = kind_of(name[:-len(suffix)] if suffix and name.endswith(suffix) else name)
            entry = catalog.metric("counters", kind)
            if retransmit_counts and kind == "retransmit" and unit == "count":
                entry = catalog.metric("counters", "error")
            if entry is None or entry.unit != unit:
                continue  # information: data, wait, corrected, other, and the count beside a derived value
            bound = profile.get(entry.key)  # a Profile, or the counters' keys alone (acceptance.rules.counter_verdicts.Limits)
            b = np.full(int(sel.sum()), np.nan if bound is None else float(bound))
            v = compare(values[sel], b, False)
            v[v == FAIL] = COUNTER_SEVERITY[kind]
            if kind == "pre_fec":  # a second, lower bound: FEC still corrects it, with less margin
                warn = profile.get("counters.pre_fec_ber_warn")
                if warn is not None:
                    v[(v == PASS) & (values[sel] > float(warn))] = WARN
            if unit in RELATED_UNITS:
                v[np.isnan(values[sel])] = WARN  # it rose with no packet or bit count, or was reset or wrapped
            if unit != "1/s":
                v[during[sel]] = COUNTER_SEVERITY[kind]
                v[before[sel]] = WARN
            threshold[sel], verdict[sel] = b, v
        return threshold, verdict


# One strategy per catalog Metric.bound (tests/unit/test_judge_kinds.py: every kind the catalog names has one).
KINDS: dict[str, Absolute] = {k.name: k for k in (Absolute(), SizeMap(), Scalar(), Zero(), One(), Versions(),
                                                  Ranks(), Memlock(), Counter())}


def of(metric: Metric) -> Absolute:
    """The strategy of a catalog metric's bound."""
    return KINDS[metric.bound]


def register(kind: Absolute) -> Absolute:
    """A new absolute kind, added here alone: the catalog may then name it (Metric.bound), and every
    judgement reaches it through of() (judge_records for analysis, judge.one and record for the drivers,
    judge.bound and the node checks)."""
    KINDS[kind.name] = kind
    catalog.BOUND_KINDS = (*catalog.BOUND_KINDS, kind.name)
    return kind


# ---- line rate ----------------------------------------------------------------------------------

class LineRate(Kind):
    """With analysis.line_rate set, point-to-point bandwidth from analysis.line_rate_from_size up must
    also reach line_rate_fraction x line_rate (the stricter of it and the profile's bound applies)."""

    name = LINE_RATE

    def __init__(self, profile: Profile):
        rate = profile.get("analysis.line_rate")
        self.minimum = profile.get("analysis.line_rate_fraction") * rate if rate else None
        self.from_size = profile.get("analysis.line_rate_from_size") if rate else None

    def floor(self, bound: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the stricter of `bound` and the floor at each size, True where the floor set it)."""
        if self.minimum is None:
            return bound, np.zeros(len(bound), dtype=bool)
        from_size = sizes >= self.from_size
        by_floor = from_size & ~(bound >= self.minimum)
        return np.where(from_size, np.fmax(bound, self.minimum), bound), by_floor


# ---- fleet-relative -----------------------------------------------------------------------------
# A value is held to its population: the measurements of the same run comparable to it (same suite,
# metric, size, memory, engine, collective op and burn-in iteration, and the same kind of component).
# The centre is the median of the population's other values, so a component's own measurements never
# excuse it: of 4 links, 2 slow ones are judged against the median of the 3 others each, which the
# healthy two dominate. fleet.bounds gives the fraction (higher is better) or multiple (lower is better)
# of that centre where a value fails; the stricter of it and the absolute bound applies.

NODE_COMMS, RAIL_COMMS, PAIRS, NICS, NODES = ("node communicators", "rail communicators", "all pairs", "NICs",
                                              "nodes")


class Fleet(Kind):
    """A value against a fraction or multiple of its population's centre (fleet.bounds)."""

    name = FLEET

    @staticmethod
    def factor(profile: Profile, suite: str, name: str) -> float | list | None:
        """The fleet.bounds factor of record metric (suite, name): the first key that matches it; a
        number, or a table by size ([[bytes, factor], ...]: see factors)."""
        from fnmatch import fnmatchcase
        m = catalog.metrics(suite, name)
        if not m or not m[0].fleet or not catalog.suite(suite).measures:
            return None
        for pattern, factor in profile.get("fleet.bounds") or ():
            if fnmatchcase(f"{suite}.{name}", pattern):
                return factor
        return None

    @staticmethod
    def factors(factor, sizes: np.ndarray) -> np.ndarray:
        """The factor of each record by its size: NaN below a table's first size (no fleet bound there)."""
        if isinstance(factor, list):
            return size_bound(factor, sizes)
        return np.full(len(sizes), float(factor))

    def deferred(self, profile: Profile, suite: str, name: str, sizes: np.ndarray) -> bool:
        """Whether a value of (suite, name) at this size is held to its fleet: it is judged once the
        whole run is in (judge.judge_records); while recording, only its absolute floor can fail it."""
        factor = self.factor(profile, suite, name)
        return factor is not None and not np.isnan(self.factors(factor, sizes)[0])

    @staticmethod
    def populations(df: pd.DataFrame, idx: np.ndarray, profile: Profile) -> np.ndarray:
        """The kind of population each record idx belongs to (None: it has no peers, e.g. the world
        communicator): node or rail communicators, point-to-point pairs, per-NIC or per-node values."""
        pd = _pd()
        suite, scope = texts(df, "suite", idx), texts(df, "scope", idx)
        src, dst = texts(df, "src", idx), texts(df, "dst", idx)
        rail = floats(df["rail"].iloc[idx]) if "rail" in df.columns else np.full(len(idx), np.nan)
        out = np.full(len(idx), None, dtype=object)
        coll = np.zeros(len(idx), dtype=bool)
        for name in catalog.suite_names(communicators=True):  # collectives: records of a communicator
            coll |= suite == name
        out[coll & (scope == "node")] = NODE_COMMS
        out[coll & pd.Series(scope, dtype=object).str.startswith("rail").fillna(False).to_numpy(dtype=bool)] = RAIL_COMMS
        has_src, has_dst, on_rail = src != None, dst != None, ~np.isnan(rail)  # noqa: E711 - elementwise
        pair = ~coll & has_src & has_dst & (src != dst) & on_rail
        if profile.get("fleet.pairs") == "rail":
            out[pair] = [f"rail {int(r)} pairs" for r in rail[pair]]
        else:
            out[pair] = PAIRS
        out[~coll & has_src & ~has_dst & on_rail] = NICS
        out[~coll & has_src & ~has_dst & ~on_rail] = NODES
        return out

    @staticmethod
    def loo_median(values: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(median of the other values of each value's group, size of its group); NaN values are in no
        group (their centre is NaN, their size 0), and a group of one has no centre."""
        centre, size = np.full(len(values), np.nan), np.zeros(len(values), dtype=np.int64)
        have = np.flatnonzero(~np.isnan(values))
        if not len(have):
            return centre, size
        order = have[np.lexsort((values[have], groups[have]))]
        g, v = groups[order], values[order]
        starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
        counts = np.diff(np.r_[starts, len(g)])
        first, n = np.repeat(starts, counts), np.repeat(counts, counts)
        pos = np.arange(len(g)) - first
        others = n - 1

        def kth_other(k):  # the k-th smallest value of the group without this one
            k = np.maximum(k, 0)
            return v[first + np.minimum(np.where(k < pos, k, k + 1), n - 1)]

        c = (kth_other((others - 1) // 2) + kth_other(others // 2)) / 2
        centre[order] = np.where(others >= 1, c, np.nan)
        size[order] = n
        return centre, size

    def bounds(self, df: pd.DataFrame, idx: np.ndarray, values: np.ndarray, factor: np.ndarray,
               profile: Profile) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(fleet bound, population size, centre, population kind) of the records idx of one metric:
        factor x the median of the comparable others; NaN where the record has no population (or no
        factor at its size) or the population is smaller than fleet.min_population."""
        pd = _pd()
        kind = self.populations(df, idx, profile)
        kind = np.where(np.isnan(factor), None, kind)
        cols = {"kind": kind}
        for c in ("suite", "metric", "memory", "engine", "op", "unit"):
            cols[c] = texts(df, c, idx)
        cols["size"] = floats(df["size"].iloc[idx]) if "size" in df.columns else np.full(len(idx), np.nan)
        cols["iteration"] = df["iteration"].to_numpy()[idx] if "iteration" in df.columns else np.zeros(len(idx))
        key = pd.DataFrame(cols).groupby(list(cols), dropna=False, sort=False).ngroup().to_numpy()
        vals = np.where(kind == None, np.nan, values)  # noqa: E711 - elementwise
        centre, n = self.loo_median(vals, key)
        bound = centre * factor
        bound[(n < profile.get("fleet.min_population")) | ~(centre > 0)] = np.nan
        return bound, n, centre, kind

    def judge(self, df: pd.DataFrame, idx: np.ndarray, metric: Metric, values: np.ndarray, sizes: np.ndarray,
              factor, profile: Profile, threshold: np.ndarray, kind: np.ndarray) -> tuple[np.ndarray, ...]:
        """The records idx of one metric held to their fleet as well as to `threshold` (the absolute
        bound, whose kinds are `kind`): (threshold, verdict codes, kind, population, centre, factor,
        peers). The stricter bound applies. A value with peers but too few of them to compare with is
        marked fleet_too_few and warns (a failing absolute bound still fails)."""
        factor = self.factors(factor, sizes)
        fb, pop, centre, peers = self.bounds(df, idx, values, factor, profile)
        applies = (peers != None) & ~np.isnan(values)  # noqa: E711 - elementwise
        judged = applies & ~np.isnan(fb)
        stricter = judged & (np.isnan(threshold) | ((fb > threshold) if metric.higher else (fb < threshold)))
        b = np.where(stricter, fb, threshold)
        kind = np.where(stricter, FLEET, kind)
        code = advised(metric, compare(values, b, metric.higher))
        too_few = applies & np.isnan(fb)
        kind = np.where(too_few, FLEET_TOO_FEW, kind)
        code = np.where(too_few & (code != FAIL), WARN, code).astype(np.int8)
        return (b, code, kind, np.where(applies, pop, 0), np.where(applies, centre, np.nan),
                np.where(applies, factor, np.nan), np.where(applies, peers, None))

    @staticmethod
    def outside(values: np.ndarray, centre, factor: float, higher: bool | None = True) -> np.ndarray:
        """Where values fail factor x centre (below it, higher being better; above it, lower being
        better): a GPU against its node's median (acceptance.drivers.intranode)."""
        return compare(np.asarray(values, dtype=np.float64), np.full(len(values), centre * factor), higher) == FAIL



# ---- outliers: far off the population and beyond its noise --------------------------------------

@dataclass(frozen=True)
class Level:
    """One level of the outlier rule: the run's expected false calls at it (alpha), how far off the
    centre a value must be (a fraction, on the bad side), and whether it fails or is a finding."""

    alpha: float
    deviation: float
    fails: bool

    def each(self, comparisons: int) -> float:
        """Each comparison's tail probability: alpha over the comparisons made (Bonferroni)."""
        return self.alpha / comparisons

    def both_ways(self, comparisons: int) -> float:
        """Each direction's tail probability where a link is called only when both its directions are
        beyond: both are, by chance, as rarely as one comparison may be (the square root)."""
        return np.sqrt(self.alpha / comparisons)


class Outlier(Kind):
    """A value off its population's centre: at least analysis.outlier_min_deviation worse, and beyond
    the noise at the threshold that keeps the run's expected false findings under
    analysis.false_findings (warn); twice the deviation at analysis.false_failures fails. The detector
    measures the noise (a robust sigma and its tails) and turns a level's tail probability into robust
    sigmas (acceptance.analysis.noise); the levels, the allowance for many comparisons and the
    comparisons themselves are here. A NIC whose typical ratio to the fleet is analysis.nic_fail_ratio
    or worse fails whatever the noise."""

    name = "outlier"

    def __init__(self, profile: Profile):
        dev = profile.get("analysis.outlier_min_deviation")
        self.min_deviation = dev
        self.z = profile.get("analysis.outlier_z")
        self.fail_ratio = profile.get("analysis.nic_fail_ratio")
        alpha, alpha_fail = profile.get("analysis.false_findings"), profile.get("analysis.false_failures")
        self.warn = Level(np.nan if alpha is None else float(alpha), dev, False)
        self.fail = Level(np.nan if alpha_fail is None else float(alpha_fail), 2 * dev, True)
        self.levels = (self.warn, self.fail)
        self._dof = profile.get("analysis.noise_dof")

    @property
    def noise_dof(self) -> float:
        """The noise's tail degrees of freedom where they cannot be measured (analysis.noise_dof)."""
        return float(self._dof)

    def alpha(self, fail: bool = False) -> float:
        """The expected false findings the run may raise (analysis.false_findings), or false failures."""
        return float((self.fail if fail else self.warn).alpha)

    def enough(self, higher):
        """How much worse than its reference a link must be to be evidence of its NIC: outlier_min_deviation,
        or what a NIC at analysis.nic_fail_ratio is (1 - ratio, higher being better; 1 / ratio - 1, lower)."""
        return np.minimum(self.min_deviation, np.where(higher, 1 - self.fail_ratio, 1 / self.fail_ratio - 1))

    def robust(self, worse: np.ndarray, z: np.ndarray, exact: np.ndarray) -> np.ndarray:
        """The modified z-score rule (a rail plane against the others): outlier_min_deviation worse and
        z at least outlier_z, unless the population has no spread at all (`exact`: its MAD is 0)."""
        return (worse >= self.min_deviation) & (exact | (z >= self.z))

    def beyond(self, worse: np.ndarray, g: np.ndarray, z, sigma: np.ndarray, level: Level) -> np.ndarray:
        """`worse` (the relative deviation, positive on the bad side) at least the level's deviation,
        and g (the log ratio to the centre, negative on the bad side) beyond z robust sigmas."""
        with np.errstate(invalid="ignore"):
            return (worse >= level.deviation) & (g <= -z * sigma)

    def fails(self, worse) -> np.ndarray:
        """Far enough off to fail: twice outlier_min_deviation."""
        return worse >= self.fail.deviation

    def halved(self, ratio: np.ndarray) -> np.ndarray:
        """A NIC's typical ratio to the fleet at analysis.nic_fail_ratio or worse: it fails."""
        return ratio <= self.fail_ratio

    def suspect(self, worse: np.ndarray, ratio: np.ndarray) -> np.ndarray:
        """Bad at first sight, noise aside (left out of the reference the others are held to)."""
        return (worse >= self.min_deviation) | self.halved(ratio)

    def suspect_of(self, values, centre, higher) -> np.ndarray:
        """suspect() of values against their centre (a median), higher being better or not (per value
        or for all): their relative deviation and their ratio, both on the bad side; never where the
        centre is not positive."""
        v, m = np.asarray(values, dtype=np.float64), np.asarray(centre, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(higher, v / m, m / v)  # under 1 on the bad side
            worse = np.where(higher, 1 - v / m, v / m - 1)
            return self.suspect(np.nan_to_num(worse, nan=-np.inf), np.nan_to_num(ratio, nan=np.inf)) & (m > 0)

    def slow_group(self, gap: float, scale: float, z: float) -> bool:
        """A group of pairs (a switch's) slow as a group: its median `gap` below the others' at least
        outlier_min_deviation x their median (`scale`), and its rank-test z-score at least outlier_z."""
        return not (gap < self.min_deviation * scale or z < self.z)


class Shares:
    """Localization, not a verdict: the share of a part's measured pairs that must be bad to name that
    part rather than its pairs one by one (analysis.switch_fraction, nic_fraction, rail_fraction,
    node_fraction). It decides where, never pass or fail."""

    def __init__(self, profile: Profile):
        self.switch = profile.get("analysis.switch_fraction")
        self.nic = profile.get("analysis.nic_fraction")
        self.rail = profile.get("analysis.rail_fraction")
        self.node = profile.get("analysis.node_fraction")


# ---- trends: a series that moved ---------------------------------------------------------------

class Trend(Kind):
    """A change beyond a tolerance (a fraction, positive on the bad side): burn-in drift
    (analysis.drift_tolerance) and instability (analysis.cv_max, of the CV), baseline regression
    (analysis.regression_tolerance), history's fleet and rail-plane trend (history.trend_tolerance,
    either way). Beyond twice the tolerance it fails."""

    name = "trend"

    def __init__(self, tolerance: float):
        self.tolerance = tolerance

    @classmethod
    def of(cls, profile: Profile, key: str) -> Trend:
        return cls(profile.get(key))

    def beyond(self, change):
        return change > self.tolerance

    def fails(self, change):
        return change > 2 * self.tolerance


class Drift(Kind):
    """History (history.drift_tolerance, history.noise_z): a link's loss against a reference night (a
    fraction, positive on the bad side, the fleet's movement divided out) beyond its gate, the
    tolerance widened in quadrature by noise_z times the noise of the comparison (the fleet's spread
    between the two nights, the link's own night-to-night noise); and worse than the reference by
    itself by the tolerance too. Beyond twice the tolerance it fails, once it has held
    history.drift_nights in a row (acceptance.history.findings)."""

    name = "drift"

    def __init__(self, tolerance: float, noise_z: float, nights: int = 1):
        self.tolerance, self.noise_z, self.nights = tolerance, noise_z, nights

    @classmethod
    def of(cls, profile: Profile) -> Drift:
        return cls(profile.get("history.drift_tolerance"), profile.get("history.noise_z"),
                   profile.get("history.drift_nights"))

    def persisted(self, held: int) -> bool:
        """A drift that fails by its loss fails only once it has held `nights` in a row: `held` nights
        before tonight drifted on the part (history.drift_nights; the earlier ones warn)."""
        return held + 1 >= self.nights

    def gate(self, fleet_spread: np.ndarray, own_spread: np.ndarray) -> np.ndarray:
        own = self.noise_z * np.nan_to_num(own_spread)
        return np.sqrt(self.tolerance ** 2 + (self.noise_z * fleet_spread) ** 2 + own ** 2)

    def drifted(self, loss: np.ndarray, gate: np.ndarray, own_loss: np.ndarray) -> np.ndarray:
        return (loss > gate) & (own_loss > self.tolerance)

    def fails(self, loss):
        return loss > 2 * self.tolerance


class Headroom(Kind):
    """A value against a limit the part itself reports (a GPU's slowdown temperature, read through
    NVML): at or past the limit fails; within `margin` of it warns (node_check.gpu_temperature_margin)."""

    name = "headroom"

    def __init__(self, margin: float):
        self.margin = margin

    def verdict(self, value: float, limit: float) -> int:
        """FAIL, WARN or PASS, the verdict codes every kind returns (lower is better: the value must stay
        under its limit)."""
        if value >= limit:
            return FAIL
        return WARN if value >= limit - self.margin else PASS
