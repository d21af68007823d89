"""Judging records: each record's threshold and verdict against the profile."""

from __future__ import annotations


import numpy as np
import pandas as pd

from ..rules import catalog
from ..rules.judge import judge_records
from ..rules.profile import Profile
from ..records.results import BOUND_ORIGINS
from .base import INFO, VERDICTS, floats_of
from .load import with_fields



# The roles of metrics, from the catalog: fleet-relative outliers (point-to-point, by direction)
# and what burn-in and baseline comparison look at.
DIRECTION: dict[tuple[str, str], bool | None] = {
    (s.name, n): m.higher for s in catalog.SUITES.values() for m in s.metrics for n in m.names}
# Pairwise metrics compared with the fleet, by suite, and by name (one direction per name across
# suites: a bandwidth is higher-is-better wherever it is measured).
OUTLIERS_BY_SUITE: dict[str, dict[str, bool | None]] = {
    s.name: {n: m.higher for m in s.metrics if m.outlier for n in m.names} for s in catalog.pairwise()}
OUTLIER_METRICS = {n: h for by_name in OUTLIERS_BY_SUITE.values() for n, h in by_name.items()}
TREND_METRICS = set(catalog.with_role("trend"))
# Which way a followed (trend) metric is better, by name: what burn-in and baseline findings say of
# one that is not compared with the fleet (a collective's busbw).
TREND_DIRECTIONS = {n: DIRECTION[(s, n)] for s, n in sorted(TREND_METRICS)}
COMPARE_KEYS = ["suite", "metric", "size", "rail", "src", "dst", "op", "scope"]


def evaluate(df: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Every record judged against `profile`: columns threshold (record units), verdict, bound (how
    the threshold was derived: results.BOUND_ORIGINS), and for fleet-relative bounds population (how many
    comparable measurements, this one included), centre (the others' median), factor and peers (what
    the population is: "all pairs", "rail communicators", ...).

    A record with a value and a bound is judged here; one without (no bound for its metric
    or size, or a null value from a probe that failed) keeps the threshold and verdict its
    test wrote.
    """
    out = df.copy(deep=False)
    out = with_fields(out)
    n = len(out)
    judged = judge_records(out, profile)
    threshold, verdict = judged.threshold, judged.verdict
    # Fail closed: where nothing was judged here (no bound for the metric, or no value: a probe that
    # failed), the verdict and threshold the test wrote stand; analysis never turns a failure into info.
    written, written_threshold = _written(out, n)
    unjudged = verdict == INFO
    verdict = np.where(unjudged, written, verdict).astype(np.int8)
    threshold = np.where(unjudged & np.isnan(threshold), written_threshold, threshold)
    out["threshold"] = threshold
    out["verdict"] = pd.Categorical.from_codes(verdict, categories=VERDICTS)
    written_bound = out["bound"].astype(object).to_numpy() if "bound" in out.columns else np.full(n, None)
    bound = np.where(unjudged & (judged.bound == None), written_bound, judged.bound)  # noqa: E711
    out["bound"] = pd.Categorical(bound, categories=list(BOUND_ORIGINS))
    out["population"] = judged.population
    out["centre"] = judged.centre
    out["factor"] = judged.factor
    out["peers"] = pd.Categorical(judged.peers)
    out.attrs["evaluated"] = (profile.name, profile.source)
    return out


def _written(df: pd.DataFrame, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(verdict codes, thresholds) as the records were written; info and NaN where absent."""
    threshold = floats_of(df["threshold"]) if "threshold" in df.columns and n else np.full(n, np.nan)
    if "verdict" not in df.columns or not n:
        return np.full(n, INFO, dtype=np.int8), threshold
    given = df["verdict"]
    if not isinstance(given.dtype, pd.CategoricalDtype):
        given = given.astype("category")
    table = np.array([VERDICTS.index(c) if c in VERDICTS else INFO for c in given.cat.categories] or [INFO],
                     dtype=np.int8)
    codes = given.cat.codes.to_numpy()
    return np.where(codes >= 0, table[np.maximum(codes, 0)], INFO).astype(np.int8), threshold


def direction_of(suite: str, metric: str) -> bool | None:
    return DIRECTION.get((suite, metric))
