"""The one judge: a metric's value, size and context against the profile -> threshold and verdict.

One bound resolution serves both entries: judge_records() over a whole DataFrame of records
(analysis), and one() for a single value (the drivers, while recording; record() records it too),
so a record's verdict is the same when it is written and when it is re-read. What each metric's
bound is comes from acceptance.rules.catalog (Metric.bound). How each kind of bound decides is its
strategy class in acceptance.rules.bounds: the absolute kinds (bounds.KINDS), LineRate, Fleet, and
the detectors' Outlier, Trend and Drift.

Verdict codes are the positions in results.VERDICTS: pass, fail, warn, info. "info" means not
judged here (no bound, or no value); the caller keeps what the test wrote then.

pandas is imported only where a frame is judged: the ranks judge single values, and a rank under
emulation pays seconds for importing it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import bounds as kinds
from . import catalog
from .bounds import (ABSOLUTE, FAIL, FLEET, INFO, PASS, WARN, Drift, Fleet, Headroom, Level, Outlier, Shares, Trend,
                     floats, is_value, size_bound, texts)
from .catalog import Metric
from .profile import Profile
from ..records.results import SCHEMA_VERSION, VERDICTS

if TYPE_CHECKING:
    import pandas as pd

# What callers use of the judge; the bound kinds' classes are acceptance.rules.bounds's.
__all__ = ["PASS", "FAIL", "WARN", "INFO", "VERDICTS", "Drift", "Fleet", "Headroom", "Level", "Outlier", "Shares", "Trend",
           "Judged",
           "is_value", "floats", "size_bound", "absolute_bounds", "counter", "judge_records", "bound", "one",
           "judge_one", "record", "record_all"]


def _pd():
    import pandas
    return pandas


# ---- bounds (acceptance.rules.bounds: one strategy per kind) -----------------------------------

def absolute_bounds(metric: Metric, values: np.ndarray, sizes: np.ndarray, profile: Profile,
                    iterations: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(bound of each value in record units, NaN: none; True where the line-rate floor set it)."""
    return kinds.of(metric).bounds(metric, values, sizes, profile, iterations)


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
    return kinds.Counter().ports(names, units, values, saturated, profile, retransmit_counts)


# ---- many records (analysis) ------------------------------------------------------------------

@dataclass
class Judged:
    """The judge's answer for every record of a frame (positions as in the frame)."""

    threshold: np.ndarray      # the bound applied, in record units (NaN: none)
    verdict: np.ndarray        # verdict codes (positions in results.VERDICTS); INFO: not judged here
    bound: np.ndarray          # how the bound was derived (results.BOUND_ORIGINS), None: no bound
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
        if suite.ports:  # port counters: judged by the counter each record names (bounds.Counter)
            idx = np.flatnonzero(in_suite)
            out.threshold[idx], out.verdict[idx] = counter(df["metric"].to_numpy()[idx].astype(object),
                                                           df["unit"].to_numpy()[idx].astype(object), value[idx],
                                                           texts(df, "saturated", idx), profile,
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
    """The records idx of catalog metric m: its absolute kind (bounds.KINDS[m.bound]), then, where
    fleet.bounds names it, the stricter of that and its fleet bound (bounds.Fleet)."""
    v, s = value[idx], size[idx]
    its = df["iteration"].to_numpy()[idx] if "iteration" in df.columns else None
    b, code, kind = kinds.of(m).judge(m, v, s, profile, its)
    factor = Fleet.factor(profile, suite, name)
    if factor is not None:
        b, code, kind, out.population[idx], out.centre[idx], out.factor[idx], out.peers[idx] = \
            Fleet().judge(df, idx, m, v, s, factor, profile, b, kind)
    out.threshold[idx], out.verdict[idx], out.bound[idx] = b, code, kind


# ---- one value (drivers, while recording) ----------------------------------------------------

def bound(suite: str, name: str, profile: Profile, size: int | None = None, **when) -> float | None:
    """The bound the profile holds catalog metric (suite, name) to, in record units, before any value is
    seen: what a message names ("the profile needs 400 Gbit/s") and whether it is bounded at all (None:
    the profile sets none, so nothing fails it). A minimum only "unlimited" meets is math.inf (memlock)."""
    m = catalog.metric(suite, name, **when)
    if m is None:
        raise KeyError(f"{suite} {name}: not in the catalog (acceptance.rules.catalog)")
    return kinds.of(m).stated(m, profile, size)


def one(suite: str, name: str, value: float | None, profile: Profile, size: int | None = None,
        peers: bool = True, **when) -> tuple[float | None, str]:
    """(threshold or None, verdict) of one value of catalog metric (suite, name); for a collective's
    busbw give op= and comm= (world, rail or node). "info" when the metric has no bound here or the value is missing."""
    return judge_one(suite, name, value, profile, size, peers, **when)[:2]


def judge_one(suite: str, name: str, value: float | None, profile: Profile, size: int | None = None,
              peers: bool = True, **when) -> tuple[float | None, str, str | None]:
    """one() and the bound kind (results.BOUND_ORIGINS). A metric held to a fleet-relative bound (and a
    value with peers: not the world communicator) is judged once the whole run is in (judge_records):
    here only its absolute floor can fail it; otherwise its verdict is "info" and its kind "fleet"."""
    m = catalog.metric(suite, name, **when)
    if m is None:
        raise KeyError(f"{suite} {name}: not in the catalog (acceptance.rules.catalog)")
    v = np.array([np.nan if value is None else float(value)])
    s = np.array([np.nan if size is None else float(size)])
    b, code, how = kinds.of(m).one(m, v, s, profile)
    bound = None if np.isnan(b[0]) else float(b[0])
    kind = None if bound is None else how[0]
    verdict = VERDICTS[int(code[0])]
    if peers and value is not None and Fleet().deferred(profile, suite, name, s):
        kind, verdict = FLEET, "fail" if verdict == "fail" else "info"
    return bound, verdict, kind


def record(record_fn: Callable, profile: Profile, suite: str, name: str, value: float | None,
           size: int | None = None, peers: bool = True, missing: str = "info", **fields) -> tuple[float | None, str]:
    """Record `value` with its catalog unit, the judged threshold, verdict and bound kind; returns
    (threshold, verdict). A collective's `op` and `scope` fields pick its bound, as they do in
    judge_records. `peers` False: the value has nothing in this run to compare it with (the world
    communicator), so no fleet-relative bound applies to it. `missing`: the verdict of a null value
    (a probe that could not read what the profile requires fails; one nothing requires is info)."""
    communicator = suite in catalog.suite_names(communicators=True)
    when = {"op": fields.get("op"), "comm": fields.get("scope") or "world"} if communicator else {}
    m = catalog.metric(suite, name, **when)
    threshold, verdict, kind = judge_one(suite, name, value, profile, size, peers, **when)
    if value is None and not m.unlimited:  # memlock records "unlimited" as null
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

