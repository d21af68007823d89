"""The noise model of fleet-relative comparisons, and thresholds that allow for their number.

A healthy value's log ratio to its fleet's median, g, is taken as a Student-t variable: a
location-scale family whose tails are as heavy as the data show (degrees of freedom `dof`,
estimated from a quantile ratio of |g|; a normal distribution is dof = inf). Its scale is
robust: sigma = 1.4826 MAD of g. A rule that makes `comparisons` tests at once holds each to
alpha / comparisons (Bonferroni), so the expected false findings of a healthy run stay under
alpha whatever its size. Only the standard library: no SciPy at run time.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

ROBUST_SIGMA = 1.4826       # sigma of a normal distribution = 1.4826 MAD
DOF_MIN, DOF_MAX = 1.0, 200.0
TAIL_LEVELS = (0.5, 0.9)    # quantiles of |g| whose ratio measures the tails (robust to 10% bad values)
FEW = 30                    # fewer standardized values than this: the tails cannot be measured


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(x: float, dof: float) -> float:
    """P(T > x) of Student's t with `dof` degrees of freedom (inf: the normal distribution)."""
    if math.isinf(dof) or dof >= DOF_MAX:
        return 0.5 * math.erfc(x / math.sqrt(2.0))
    tail = 0.5 * _betainc(dof / 2.0, 0.5, dof / (dof + x * x))
    return tail if x >= 0 else 1.0 - tail


@lru_cache(maxsize=4096)
def t_isf(p: float, dof: float) -> float:
    """x with P(T > x) = p (0 < p < 0.5)."""
    lo, hi = 0.0, 1.0
    while t_sf(hi, dof) > p and hi < 1e300:
        lo, hi = hi, hi * 4.0
    for _ in range(200):
        mid = math.sqrt(lo * hi) if lo > 0 else hi / 2.0
        if t_sf(mid, dof) > p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-10 * hi:
            break
    return hi


@lru_cache(maxsize=256)
def _mad(dof: float) -> float:
    """The median absolute deviation of Student's t (its 75th percentile)."""
    return t_isf(0.25, dof)


def z_of(p: float, dof: float) -> float:
    """The one-sided threshold beyond which a healthy value lies with probability p, in robust
    sigmas (1.4826 MAD): what a modified z-score is compared with."""
    p = min(max(p, 1e-300), 0.5)
    return t_isf(p, dof) / (ROBUST_SIGMA * _mad(dof))


@lru_cache(maxsize=64)
def _ratio(dof: float) -> float:
    lo, hi = TAIL_LEVELS
    return t_isf((1 - hi) / 2, dof) / t_isf((1 - lo) / 2, dof)


def tail_dof(z: np.ndarray, default: float = 3.0) -> float:
    """Degrees of freedom whose Student-t has the quantile ratio q90 / q50 of |z| these values have
    (z: standardized deviations from their groups' medians). Too few values to tell: `default`."""
    z = np.abs(z[np.isfinite(z)])
    if len(z) < FEW:
        return default
    q50, q90 = np.quantile(z, TAIL_LEVELS)
    if not q50 > 0:
        return default
    r = q90 / q50
    if r <= _ratio(DOF_MAX):
        return math.inf
    if r >= _ratio(DOF_MIN):
        return DOF_MIN
    lo, hi = DOF_MIN, DOF_MAX
    for _ in range(40):   # the ratio falls as dof grows
        mid = math.sqrt(lo * hi)
        if _ratio(round(mid, 3)) > r:
            lo = mid
        else:
            hi = mid
    return round(lo, 2)


def binom_sf(k: int, n: int, p: float) -> float:
    """P(at least k of n independent events of probability p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq
             for j in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


@lru_cache(maxsize=4096)
def typical_tail(target: float, n: int) -> float:
    """The per-value tail probability p at which the favourable median of n values (more than half
    of them at least this bad) is that bad with probability `target`."""
    k = n // 2 + 1
    if binom_sf(k, n, 0.5) <= target:
        return 0.5
    lo, hi = 1e-300, 0.5
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if binom_sf(k, n, mid) > target:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1 + 1e-6:
            break
    return lo


def favourable_median(values: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group (codes 0..G-1): the value more than half of the group's values are at or below
    (sorted ascending, the one at index n // 2), and the group's size. Higher is better: one bad
    member of a group of two cannot make it bad, and a group is bad only when most of it is."""
    order = np.lexsort((values, groups))
    g = groups[order]
    n = np.bincount(groups, minlength=int(groups.max(initial=-1)) + 1)
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    out = np.full(len(n), np.nan)
    has = n > 0
    out[has] = values[order][start[has] + n[has] // 2]
    del g
    return out, n
