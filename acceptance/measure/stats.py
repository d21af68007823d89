"""Percentiles of latency samples, by nearest rank as nccl-tests defines it.

One definition for the whole harness (docs/methodology.md §5): nccl-tests' -I mode uses
index = min(n-1, ceil(n*p/100) - 1) on the sorted samples, with no interpolation,
so a reported percentile is always a value that was actually measured.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

PERCENTILES = (("p50", 50.0), ("p99", 99.0), ("p999", 99.9))


def _exact(p: float) -> Fraction:
    # The decimal the caller wrote (99.9, not 99.900000000000006); keeps n*p/100 and
    # 100/(1-p/100) free of float error at the integer boundaries that matter.
    p = float(p)
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {p!r}")
    return Fraction(repr(p))


def _rank_index(n: int, p: float) -> int:
    """0-based index of the nearest-rank p-th percentile among n sorted values."""
    if n < 1:
        raise ValueError("no values: a percentile needs at least one sample")
    return min(n - 1, max(0, math.ceil(n * _exact(p) / 100) - 1))


def nearest_rank(values, p: float) -> float:
    """nccl-tests nearest-rank percentile (src/common.cu, -I mode) of values in any order."""
    a = np.asarray(values).ravel()
    k = _rank_index(a.size, p)
    return float(np.partition(a, k)[k])  # O(n); same value as sorting


def samples_needed(p: float) -> int:
    """Rule of thumb n >= 100/(1-p) (docs/methodology.md §5): about 100 samples beyond the quantile."""
    q = _exact(p)
    if q == 100:
        raise ValueError("p100 is the maximum: no sample count makes it a quantile estimate")
    return round(100 / (1 - q / 100))


@dataclass(frozen=True)
class Percentiles:
    samples: int
    min: float
    mean: float
    p50: float
    p99: float
    p999: float
    max: float

    def insufficient(self) -> list[str]:
        """Names of the percentiles that have fewer samples than samples_needed()."""
        return [name for name, p in PERCENTILES if self.samples < samples_needed(p)]

    def note(self, name: str) -> str | None:
        """None when `name` has enough samples; otherwise a warning for the report."""
        p = dict(PERCENTILES)[name]  # KeyError for an unknown name
        need = samples_needed(p)
        if self.samples >= need:
            return None
        # With too few samples the nearest rank lands at or near the maximum of a
        # short run, which tends to sit below the true tail quantile.
        return f"{self.samples} samples, fewer than the {need} a {name} needs: read it as a lower bound"


def percentiles(values) -> Percentiles:
    """Summary of samples in any unit (results in the same unit); sorts once, nearest rank."""
    s = np.sort(np.asarray(values).ravel())
    n = s.size
    if n == 0:
        raise ValueError("no values: percentiles need at least one sample")
    ranks = {name: float(s[_rank_index(n, p)]) for name, p in PERCENTILES}
    return Percentiles(samples=int(n), min=float(s[0]), mean=float(s.mean()),
                       max=float(s[-1]), **ranks)


def iteration_time(times_ns: np.ndarray, statistic: str = "mean") -> float:
    """One iteration's time (ns) from the timed iterations' (profile sweep.statistic): the mean, so
    bytes over the whole loop (perftest's BW average, nccl-tests), or the median, which a few iterations
    stalled by a shared host (an emulator, a busy machine) do not move, while a slow link slows them all."""
    if statistic == "median":
        return float(np.median(times_ns))
    if statistic == "mean":
        return float(np.mean(times_ns))
    raise ValueError(f"sweep.statistic must be mean or median, got {statistic!r}")
