"""The one judge: a metric's value, size and context against the profile -> threshold and verdict.

One bound resolution (bounds()) serves both entries: judge_records() over a whole DataFrame
of records (analysis), and one() for a single value (the drivers, while recording; record()
records it too), so a record's verdict is the same when it is written and when it is re-read.
What each metric's bound is comes from acceptance.rules.catalog; with analysis.line_rate set,
point-to-point bandwidth from analysis.line_rate_from_size up must also reach
line_rate_fraction x line_rate (the stricter bound applies).

Verdict codes are the positions in results.VERDICTS: pass, fail, warn, info. "info" means not
judged here (no bound, or no value); the caller keeps what the test wrote then.

pandas is imported only where a frame is judged (_pd()): the ranks judge single values, and a rank
under emulation pays seconds for importing it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import catalog
from .catalog import Metric
from .profile import Profile
from ..records.results import BOUND_KINDS, SCHEMA_VERSION, VERDICTS

if TYPE_CHECKING:
    import pandas as pd

PASS, FAIL, WARN, INFO = (VERDICTS.index(v) for v in ("pass", "fail", "warn", "info"))


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


# ---- bounds ----------------------------------------------------------------------------------

def size_bound(size_map, sizes: np.ndarray) -> np.ndarray:
    """The bound of the last entry at or below each size of a SizeMap (NaN: none)."""
    if not size_map:
        return np.full(len(sizes), np.nan)
    starts = np.array([float(s) for s, _ in size_map])
    values = np.array([np.nan if v is None else float(v) for _, v in size_map])
    idx = np.searchsorted(starts, np.nan_to_num(sizes, nan=-1.0), side="right") - 1
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], np.nan)
    return np.where(np.isnan(sizes), np.nan, out)


ABSOLUTE, LINE_RATE, _RECORDED_BEFORE_SCHEMA_3, FLEET, FLEET_TOO_FEW = BOUND_KINDS


def bounds(metric: Metric, values: np.ndarray, sizes: np.ndarray, profile: Profile,
           iterations: np.ndarray | None = None) -> np.ndarray:
    """The bound of each value in record units (NaN: none) for the plain bound kinds."""
    return absolute_bounds(metric, values, sizes, profile, iterations)[0]


def absolute_bounds(metric: Metric, values: np.ndarray, sizes: np.ndarray, profile: Profile,
                    iterations: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(bound of each value in record units, NaN: none; True where the line-rate floor set it)."""
    n = len(values)
    no_floor = np.zeros(n, dtype=bool)
    if metric.bound == "sizemap":
        b = size_bound(profile.get(metric.key), sizes) * metric.scale
        if metric.per_nic:  # rails 0 (one per rank, unknown here): one NIC's figure, the weaker bound
            b = b * max(1, profile.get("topology.rails"))
        if metric.line_rate and profile.get("analysis.line_rate"):
            floor = profile.get("analysis.line_rate_fraction") * profile.get("analysis.line_rate")
            from_size = sizes >= profile.get("analysis.line_rate_from_size")
            by_floor = from_size & ~(b >= floor)
            return np.where(from_size, np.fmax(b, floor), b), by_floor
        return b, no_floor
    if metric.bound == "scalar":
        bound = profile.get(metric.key)
        return np.full(n, np.nan if bound is None else float(bound) * metric.scale), no_floor
    if metric.bound == "zero":
        return np.zeros(n), no_floor
    if metric.bound == "one":
        return np.ones(n), no_floor
    if metric.bound == "versions":
        return np.full(n, 0.0 if profile.get("preflight.same_versions") else np.nan), no_floor
    if metric.bound == "ranks":
        rails = profile.get(metric.key)
        if rails:
            return np.full(n, float(rails)), no_floor
        # One rail per rank: every node must have as many ranks as most nodes do (per iteration).
        groups = iterations if iterations is not None else np.zeros(n, dtype=np.int64)
        return (_pd().Series(values).groupby(groups).transform(lambda x: x.mode().iloc[0] if x.notna().any() else np.nan)
                .to_numpy(dtype=float)), no_floor
    return np.full(n, np.nan), no_floor


# ---- fleet-relative bounds -------------------------------------------------------------------
# A value is held to its population: the measurements of the same run comparable to it (same suite,
# metric, size, memory, engine, collective op and burn-in iteration, and the same kind of component).
# The centre is the median of the population's other values, so a component's own measurements never
# excuse it: of 4 links, 2 slow ones are judged against the median of the 3 others each, which the
# healthy two dominate. fleet.bounds gives the fraction (higher is better) or multiple (lower is better)
# of that centre where a value fails; the stricter of it and the absolute bound applies.

NODE_COMMS, RAIL_COMMS, PAIRS, NICS, NODES = ("node communicators", "rail communicators", "all pairs", "NICs",
                                              "nodes")


def fleet_factor(profile: Profile, suite: str, name: str) -> float | list | None:
    """The fleet.bounds factor of record metric (suite, name): the first key that matches it; a
    number, or a table by size ([[bytes, factor], ...]: see fleet_factors)."""
    from fnmatch import fnmatchcase
    m = catalog.metrics(suite, name)
    if not m or not m[0].fleet or not catalog.suite(suite).measures:
        return None
    for pattern, factor in profile.get("fleet.bounds") or ():
        if fnmatchcase(f"{suite}.{name}", pattern):
            return factor
    return None


def fleet_factors(factor, sizes: np.ndarray) -> np.ndarray:
    """The factor of each record by its size: NaN below a table's first size (no fleet bound there)."""
    if isinstance(factor, list):
        return size_bound(factor, sizes)
    return np.full(len(sizes), float(factor))


def _text(df: pd.DataFrame, column: str, idx: np.ndarray) -> np.ndarray:
    if column not in df.columns:
        return np.full(len(idx), None, dtype=object)
    col = df[column].iloc[idx]
    return col.astype(object).where(col.notna(), None).to_numpy(dtype=object)


def populations(df: pd.DataFrame, idx: np.ndarray, profile: Profile) -> np.ndarray:
    """The kind of population each record idx belongs to (None: it has no peers, e.g. the world
    communicator): node or rail communicators, point-to-point pairs, per-NIC or per-node values."""
    pd = _pd()
    suite, scope = _text(df, "suite", idx), _text(df, "scope", idx)
    src, dst = _text(df, "src", idx), _text(df, "dst", idx)
    rail = floats(df["rail"].iloc[idx]) if "rail" in df.columns else np.full(len(idx), np.nan)
    out = np.full(len(idx), None, dtype=object)
    coll = suite == "collective"
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


def fleet_bounds(df: pd.DataFrame, idx: np.ndarray, values: np.ndarray, factor: np.ndarray,
                 profile: Profile) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(fleet bound, population size, centre, population kind) of the records idx of one metric:
    factor x the median of the comparable others; NaN where the record has no population (or no
    factor at its size) or the population is smaller than fleet.min_population."""
    pd = _pd()
    kind = populations(df, idx, profile)
    kind = np.where(np.isnan(factor), None, kind)
    cols = {"kind": kind}
    for c in ("suite", "metric", "memory", "engine", "op", "unit"):
        cols[c] = _text(df, c, idx)
    cols["size"] = floats(df["size"].iloc[idx]) if "size" in df.columns else np.full(len(idx), np.nan)
    cols["iteration"] = df["iteration"].to_numpy()[idx] if "iteration" in df.columns else np.zeros(len(idx))
    key = pd.DataFrame(cols).groupby(list(cols), dropna=False, sort=False).ngroup().to_numpy()
    vals = np.where(kind == None, np.nan, values)  # noqa: E711 - elementwise
    centre, n = loo_median(vals, key)
    bound = centre * factor
    bound[(n < profile.get("fleet.min_population")) | ~(centre > 0)] = np.nan
    return bound, n, centre, kind


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


def memlock(values: np.ndarray, profile: Profile, key: str) -> tuple[np.ndarray, np.ndarray]:
    """The suite records null (detail "unlimited") for no limit."""
    minimum = profile.get(key)
    unlimited = np.isnan(values)
    if minimum == "unlimited":
        return np.full(len(values), np.nan), np.where(unlimited, PASS, FAIL).astype(np.int8)
    return (np.full(len(values), float(minimum)),
            np.where(unlimited | (values >= float(minimum)), PASS, FAIL).astype(np.int8))


COUNTER_SEVERITY = {"error": FAIL, "retransmit": FAIL, "pre_fec": FAIL, "discard": WARN, "pause": WARN, "cnp": WARN}
# A derived counter record: its metric is the counter's name plus this suffix (acceptance.rules.counter_verdicts.DERIVED).
COUNTER_SUFFIX = {"1/s": "_rate", "ppm": "_ppm", "errors/bit": "_ber"}
# Derived values that are unknown (NaN) when the counter rose with nothing to relate it to: a warning.
RELATED_UNITS = ("ppm", "errors/bit")


def counter(names: np.ndarray, units: np.ndarray, values: np.ndarray, saturated: np.ndarray,
            profile: Profile | dict, retransmit_counts: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Port counter deltas: an error counter fails when it rises more than errors_max, a retransmit
    counter per million packets of its port (unit ppm) above retransmit_ppm_max (and warns when the
    rate is unknown: no packet count, or the counter reset or wrapped), a pre-FEC error counter's bit
    error rate (unit errors/bit) fails above pre_fec_ber_max and warns above pre_fec_ber_warn (or when
    unknown), a discard counter warns above discards_max; pause and CNP rates (unit 1/s) warn
    above their bounds. Each is judged in the unit its catalog entry names; a count beside a derived
    value is information. A saturated counter has no delta (value null) and a `saturated` field: one
    that saturated during the window ("during") rose; one saturated before it ("before") only warns.
    `retransmit_counts`: a run folder of schema 2 or before, which has no per-packet records: a
    retransmission counter's count is judged as an error's was then (errors_max)."""
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


# ---- many records (analysis) ------------------------------------------------------------------

@dataclass
class Judged:
    """The judge's answer for every record of a frame (positions as in the frame)."""

    threshold: np.ndarray      # the bound applied, in record units (NaN: none)
    verdict: np.ndarray        # verdict codes (positions in results.VERDICTS); INFO: not judged here
    bound: np.ndarray          # how the bound was derived (results.BOUND_KINDS), None: no bound
    population: np.ndarray     # fleet bounds: how many comparable measurements (with this one); 0: none
    centre: np.ndarray         # fleet bounds: the median of the others (NaN: none)
    factor: np.ndarray         # fleet bounds: the fleet.bounds factor (NaN: none)
    peers: np.ndarray          # fleet bounds: the population kind ("all pairs", "rail communicators", ...)

    @classmethod
    def empty(cls, n: int) -> Judged:
        return cls(np.full(n, np.nan), np.full(n, INFO, dtype=np.int8), np.full(n, None, dtype=object),
                   np.zeros(n, dtype=np.int64), np.full(n, np.nan), np.full(n, np.nan), np.full(n, None, dtype=object))


def judge_records(df: pd.DataFrame, profile: Profile) -> Judged:
    """Threshold, verdict and bound kind of every record of `df` (columns suite, metric, value, size,
    unit, iteration, threshold, op, scope, saturated; src, dst, rail, memory, engine for fleet bounds),
    INFO where nothing could be judged."""
    n = len(df)
    out = Judged.empty(n)
    if not n:
        return out
    value = floats(df["value"])
    size = floats(df["size"])
    for suite in catalog.SUITES.values():
        in_suite = is_value(df["suite"], suite.name)
        if not in_suite.any():
            continue
        if suite.name == "counters":
            idx = np.flatnonzero(in_suite)
            out.threshold[idx], out.verdict[idx] = counter(df["metric"].to_numpy()[idx].astype(object),
                                                           df["unit"].to_numpy()[idx].astype(object), value[idx],
                                                           _text(df, "saturated", idx), profile,
                                                           retransmit_counts=df.attrs.get("schema", SCHEMA_VERSION) < 3)
            out.bound[idx] = np.where(np.isnan(out.threshold[idx]), None, ABSOLUTE)
            continue
        for m in suite.metrics:
            for name in m.names:
                mask = in_suite & is_value(df["metric"], name)
                when = dict(m.when)
                if when:
                    mask &= is_value(df["op"], when["op"]) & _comm_is(df["scope"], when["comm"])
                if mask.any():
                    _judge_metric(df, np.flatnonzero(mask), m, suite.name, name, value, size, profile, out)
    return out


def _comm_is(scope, comms: tuple[str, ...]) -> np.ndarray:
    """Records over those kinds of communicator; a collective without a scope is the world's."""
    world = ~is_value(scope, "rail") & ~is_value(scope, "node")
    return np.logical_or.reduce([world if c == "world" else is_value(scope, c) for c in comms])


def _judge_metric(df, idx, m: Metric, suite: str, name: str, value, size, profile: Profile, out: Judged) -> None:
    v, s = value[idx], size[idx]
    if m.bound == "memlock":
        out.threshold[idx], out.verdict[idx] = memlock(v, profile, m.key)
        out.bound[idx] = ABSOLUTE
        return
    its = df["iteration"].to_numpy()[idx] if "iteration" in df.columns else None
    b, by_floor = absolute_bounds(m, v, s, profile, its)
    kind = np.where(np.isnan(b), None, np.where(by_floor, LINE_RATE, ABSOLUTE)).astype(object)
    code = advised(m, compare(v, b, m.higher))
    factor = fleet_factor(profile, suite, name)
    if factor is not None:
        factor = fleet_factors(factor, s)
        fb, pop, centre, peers = fleet_bounds(df, idx, v, factor, profile)
        applies = (peers != None) & ~np.isnan(v)  # noqa: E711 - elementwise
        judged = applies & ~np.isnan(fb)
        stricter = judged & (np.isnan(b) | ((fb > b) if m.higher else (fb < b)))
        b = np.where(stricter, fb, b)
        kind = np.where(stricter, FLEET, kind)
        code = advised(m, compare(v, b, m.higher))
        # Too few to compare with: the record says so and warns (a failing absolute bound still fails).
        too_few = applies & np.isnan(fb)
        kind = np.where(too_few, FLEET_TOO_FEW, kind)
        code = np.where(too_few & (code != FAIL), WARN, code).astype(np.int8)
        out.population[idx] = np.where(applies, pop, 0)
        out.centre[idx] = np.where(applies, centre, np.nan)
        out.factor[idx] = np.where(applies, factor, np.nan)
        out.peers[idx] = np.where(applies, peers, None)
    out.threshold[idx], out.verdict[idx], out.bound[idx] = b, code, kind


# ---- one value (drivers, while recording) ----------------------------------------------------

def one(suite: str, name: str, value: float | None, profile: Profile, size: int | None = None,
        peers: bool = True, **when) -> tuple[float | None, str]:
    """(threshold or None, verdict) of one value of catalog metric (suite, name); for a collective's
    busbw give op= and comm= (world, rail or node). "info" when the metric has no bound here or the value is missing."""
    return judge_one(suite, name, value, profile, size, peers, **when)[:2]


def judge_one(suite: str, name: str, value: float | None, profile: Profile, size: int | None = None,
              peers: bool = True, **when) -> tuple[float | None, str, str | None]:
    """one() and the bound kind (results.BOUND_KINDS). A metric held to a fleet-relative bound (and a
    value with peers: not the world communicator) is judged once the whole run is in (judge_records):
    here only its absolute floor can fail it; otherwise its verdict is "info" and its kind "fleet"."""
    m = catalog.metric(suite, name, **when)
    if m is None:
        raise KeyError(f"{suite} {name}: not in the catalog (acceptance.rules.catalog)")
    v = np.array([np.nan if value is None else float(value)])
    s = np.array([np.nan if size is None else float(size)])
    by_floor = np.zeros(1, dtype=bool)
    if m.bound == "memlock":
        b, code = memlock(v, profile, m.key)
    elif m.bound == "ranks" and not profile.get(m.key):  # most nodes' count: judged together (record_all)
        b, code = np.full(1, np.nan), np.full(1, INFO, dtype=np.int8)
    else:
        b, by_floor = absolute_bounds(m, v, s, profile)
        code = advised(m, compare(v, b, m.higher))
    bound = None if np.isnan(b[0]) else float(b[0])
    kind = None if bound is None else LINE_RATE if by_floor[0] else ABSOLUTE
    verdict = VERDICTS[int(code[0])]
    factor = fleet_factor(profile, suite, name)
    if peers and value is not None and factor is not None and not np.isnan(fleet_factors(factor, s)[0]):
        kind, verdict = FLEET, "fail" if verdict == "fail" else "info"
    return bound, verdict, kind


def record(record_fn: Callable, profile: Profile, suite: str, name: str, value: float | None,
           size: int | None = None, peers: bool = True, missing: str = "info", **fields) -> tuple[float | None, str]:
    """Record `value` with its catalog unit, the judged threshold, verdict and bound kind; returns
    (threshold, verdict). A collective's `op` and `scope` fields pick its bound, as they do in
    judge_records. `peers` False: the value has nothing in this run to compare it with (the world
    communicator), so no fleet-relative bound applies to it. `missing`: the verdict of a null value
    (a probe that could not read what the profile requires fails; one nothing requires is info)."""
    when = {"op": fields.get("op"), "comm": fields.get("scope") or "world"} if suite == "collective" else {}
    m = catalog.metric(suite, name, **when)
    threshold, verdict, kind = judge_one(suite, name, value, profile, size, peers, **when)
    if value is None and m.bound != "memlock":  # memlock records "unlimited" as null
        verdict = missing
    record_fn(name, value, m.unit, size=size, threshold=threshold, verdict=verdict, bound=kind, **fields)
    return threshold, verdict


def record_all(record_fn: Callable, profile: Profile, suite: str, name: str,
               items: list[tuple[float | None, dict]]) -> list[tuple[float | None, str]]:
    """Record several values of one metric judged together, as analysis judges them (judge_records):
    for a bound that depends on its population (ranks per node: most nodes' count). items are
    (value, record fields); returns (threshold, verdict) of each."""
    pd = _pd()
    m = catalog.metric(suite, name)
    if m is None:
        raise KeyError(f"{suite} {name}: not in the catalog (acceptance.rules.catalog)")
    n = len(items)
    df = pd.DataFrame({"suite": [suite] * n, "metric": [name] * n, "unit": [m.unit] * n,
                       "value": [np.nan if v is None else float(v) for v, _ in items],
                       "size": [np.nan if f.get("size") is None else float(f["size"]) for _, f in items],
                       "iteration": np.zeros(n, dtype=np.int64), "op": [None] * n, "scope": [None] * n})
    judged = judge_records(df, profile)
    out = []
    for i, (value, fields) in enumerate(items):
        threshold = None if np.isnan(judged.threshold[i]) else float(judged.threshold[i])
        verdict = VERDICTS[int(judged.verdict[i])]
        record_fn(name, value, m.unit, threshold=threshold, verdict=verdict, bound=judged.bound[i], **fields)
        out.append((threshold, verdict))
    return out

