"""The one judge: a metric's value, size and context against the profile -> threshold and verdict.

One bound resolution (bounds()) serves both entries: judge_records() over a whole DataFrame
of records (analysis), and one() for a single value (the drivers, while recording; record()
records it too), so a record's verdict is the same when it is written and when it is re-read.
What each metric's bound is comes from acceptance.catalog; with analysis.line_rate set,
point-to-point bandwidth from analysis.line_rate_from_size up must also reach
line_rate_fraction x line_rate (the stricter bound applies).

Verdict codes are the positions in results.VERDICTS: pass, fail, warn, info. "info" means not
judged here (no bound, or no value); the caller keeps what the test wrote then.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from . import catalog
from .catalog import Metric
from .profile import Profile
from .results import VERDICTS

PASS, FAIL, WARN, INFO = (VERDICTS.index(v) for v in ("pass", "fail", "warn", "info"))


# ---- columns --------------------------------------------------------------------------------

def is_value(series: pd.Series, value) -> np.ndarray:
    """Boolean mask series == value, fast for categoricals."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = series.cat.categories
        if value not in cats:
            return np.zeros(len(series), dtype=bool)
        return series.cat.codes.to_numpy() == cats.get_loc(value)
    return (series == value).to_numpy(dtype=bool, na_value=False)


def floats(series: pd.Series) -> np.ndarray:
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


# ---- bounds ----------------------------------------------------------------------------------

def size_bound(size_map, sizes: np.ndarray) -> np.ndarray:
    """Vectorized profile.bound_at: the bound of the last entry at or below each size (NaN: none)."""
    if not size_map:
        return np.full(len(sizes), np.nan)
    starts = np.array([float(s) for s, _ in size_map])
    values = np.array([np.nan if v is None else float(v) for _, v in size_map])
    idx = np.searchsorted(starts, np.nan_to_num(sizes, nan=-1.0), side="right") - 1
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], np.nan)
    return np.where(np.isnan(sizes), np.nan, out)


def bounds(metric: Metric, values: np.ndarray, sizes: np.ndarray, profile: Profile,
           iterations: np.ndarray | None = None) -> np.ndarray:
    """The bound of each value in record units (NaN: none) for the plain bound kinds."""
    n = len(values)
    if metric.bound == "sizemap":
        b = size_bound(profile.get(metric.key), sizes) * metric.scale
        if metric.line_rate and profile.get("analysis.line_rate"):
            floor = profile.get("analysis.line_rate_fraction") * profile.get("analysis.line_rate")
            b = np.where(sizes >= profile.get("analysis.line_rate_from_size"), np.fmax(b, floor), b)
        return b
    if metric.bound == "scalar":
        bound = profile.get(metric.key)
        return np.full(n, np.nan if bound is None else float(bound) * metric.scale)
    if metric.bound == "zero":
        return np.zeros(n)
    if metric.bound == "versions":
        return np.full(n, 0.0 if profile.get("preflight.same_versions") else np.nan)
    if metric.bound == "ranks":
        rails = profile.get(metric.key)
        if rails:
            return np.full(n, float(rails))
        # One rail per rank: every node must have as many ranks as most nodes do (per iteration).
        groups = iterations if iterations is not None else np.zeros(n, dtype=np.int64)
        return (pd.Series(values).groupby(groups).transform(lambda x: x.mode().iloc[0] if x.notna().any() else np.nan)
                .to_numpy(dtype=float))
    return np.full(n, np.nan)


def compare(values: np.ndarray, bound: np.ndarray, higher: bool | None) -> np.ndarray:
    """Verdict codes: pass / fail where value and bound exist, info elsewhere."""
    out = np.full(len(values), INFO, dtype=np.int8)
    have = ~np.isnan(values) & ~np.isnan(bound)
    with np.errstate(invalid="ignore"):
        ok = values >= bound if higher is True else values <= bound if higher is False else values == bound
    out[have] = np.where(ok[have], PASS, FAIL)
    return out


def memlock(values: np.ndarray, profile: Profile, key: str) -> tuple[np.ndarray, np.ndarray]:
    """The suite records null (detail "unlimited") for no limit."""
    minimum = profile.get(key)
    unlimited = np.isnan(values)
    if minimum == "unlimited":
        return np.full(len(values), np.nan), np.where(unlimited, PASS, FAIL).astype(np.int8)
    return (np.full(len(values), float(minimum)),
            np.where(unlimited | (values >= float(minimum)), PASS, FAIL).astype(np.int8))


COUNTER_SEVERITY = {"error": FAIL, "discard": WARN, "pause": WARN, "cnp": WARN}


def counter(names: np.ndarray, units: np.ndarray, values: np.ndarray, details: np.ndarray,
            profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """Port counter deltas: an error counter fails when it rises more than errors_max, a discard
    counter warns above discards_max; pause and CNP rates (unit 1/s) warn above their bounds. A
    saturated counter has no delta (value null) and says so in its detail: one that saturated
    during the window rose; one saturated before the window only warns."""
    from .counters import kind_of
    threshold = np.full(len(values), np.nan)
    verdict = np.full(len(values), INFO, dtype=np.int8)
    text = pd.Series(details, dtype=object).fillna("").astype(str)
    during = (text.str.contains("saturated at", regex=False) & text.str.contains("during the window", regex=False)
              ).to_numpy()
    before = text.str.contains("saturated before", regex=False).to_numpy()
    for name, unit in set(zip(names, units)):
        sel = (names == name) & (units == unit)
        is_rate = unit == "1/s"
        kind = kind_of(name[:-len("_rate")] if is_rate and name.endswith("_rate") else name)
        entry = catalog.metric("counters", kind)
        if entry is None or (entry.unit == "1/s") != is_rate:
            continue  # information: data, wait, corrected, other, and a pause/CNP count
        bound = profile.get(entry.key)
        b = np.full(int(sel.sum()), np.nan if bound is None else float(bound))
        v = compare(values[sel], b, False)
        v[v == FAIL] = COUNTER_SEVERITY[kind]
        if not is_rate:
            v[during[sel]] = COUNTER_SEVERITY[kind]
            v[before[sel]] = WARN
        threshold[sel], verdict[sel] = b, v
    return threshold, verdict


# ---- many records (analysis) ------------------------------------------------------------------

def judge_records(df: pd.DataFrame, profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """(threshold, verdict code) of every record of `df` (columns suite, metric, value, size, unit,
    detail, iteration, threshold, op, scope), INFO where nothing could be judged."""
    n = len(df)
    value = floats(df["value"]) if n else np.zeros(0)
    size = floats(df["size"]) if n else np.zeros(0)
    threshold = np.full(n, np.nan)
    verdict = np.full(n, INFO, dtype=np.int8)
    if not n:
        return threshold, verdict
    for suite in catalog.SUITES.values():
        in_suite = is_value(df["suite"], suite.name)
        if not in_suite.any():
            continue
        if suite.name == "counters":
            idx = np.flatnonzero(in_suite)
            detail = df["detail"].to_numpy()[idx].astype(object) if "detail" in df.columns else np.full(len(idx), None)
            threshold[idx], verdict[idx] = counter(df["metric"].to_numpy()[idx].astype(object),
                                                   df["unit"].to_numpy()[idx].astype(object), value[idx], detail,
                                                   profile)
            continue
        for m in suite.metrics:
            mask = in_suite & np.logical_or.reduce([is_value(df["metric"], name) for name in m.names])
            when = dict(m.when)
            if when:
                mask &= is_value(df["op"], when["op"]) & (is_value(df["scope"], "node") == when["node"])
            if not mask.any():
                continue
            idx = np.flatnonzero(mask)
            v, s = value[idx], size[idx]
            if m.bound == "memlock":
                threshold[idx], verdict[idx] = memlock(v, profile, m.key)
                continue
            if m.bound == "recorded":  # the bound the suite wrote (null: nothing required)
                b = floats(df["threshold"])[idx] if "threshold" in df.columns else np.full(len(idx), np.nan)
            else:
                its = df["iteration"].to_numpy()[idx] if "iteration" in df.columns else None
                b = bounds(m, v, s, profile, its)
            threshold[idx] = b
            verdict[idx] = compare(v, b, m.higher)
    return threshold, verdict


# ---- one value (drivers, while recording) ----------------------------------------------------

def one(suite: str, name: str, value: float | None, profile: Profile, size: int | None = None,
        **when) -> tuple[float | None, str]:
    """(threshold or None, verdict) of one value of catalog metric (suite, name); for a collective's
    busbw give op= and node=. "info" when the metric has no bound here or the value is missing."""
    m = catalog.metric(suite, name, **when)
    if m is None:
        raise KeyError(f"{suite} {name}: not in the catalog (acceptance.catalog)")
    v = np.array([np.nan if value is None else float(value)])
    s = np.array([np.nan if size is None else float(size)])
    if m.bound == "memlock":
        b, code = memlock(v, profile, m.key)
    else:
        b = bounds(m, v, s, profile)
        code = compare(v, b, m.higher)
    bound = None if np.isnan(b[0]) else float(b[0])
    return bound, VERDICTS[int(code[0])]


def against(value: float | None, bound: float | None, higher: bool | None) -> str:
    """The verdict of one value against a bound a driver already holds (the same comparison)."""
    code = compare(np.array([np.nan if value is None else float(value)]),
                   np.array([np.nan if bound is None else float(bound)]), higher)
    return VERDICTS[int(code[0])]


def record(record_fn: Callable, profile: Profile, suite: str, name: str, value: float | None,
           size: int | None = None, when: dict | None = None, **fields) -> tuple[float | None, str]:
    """Record `value` with its catalog unit and the judged threshold and verdict; returns both."""
    m = catalog.metric(suite, name, **(when or {}))
    threshold, verdict = one(suite, name, value, profile, size, **(when or {}))
    record_fn(name, value, m.unit, size=size, threshold=threshold, verdict=verdict, **fields)
    return threshold, verdict
