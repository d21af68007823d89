"""What a screening round measures: the sizes that have bounds, moved as long as the bound's precision needs,
and as many latency samples as the gated percentile needs. The pairwise drivers and `acceptance plan` both
read these, so the plan times what runs.

Screening (pattern screen:K, acceptance.runtime.schedule) measures every node K times to find suspects,
which confirmation then measures again; a full size sweep, the full sweep's bytes per size and 1e5 latency
samples per pair would spend the time budget on values no bound judges. So a screening sweep keeps:
- the smallest size of the sweep (where a fault in posting or the first packet shows), and
- each size a bound by size of a pairwise suite starts at (its table's keys, e.g. "8MiB"; fleet.bounds
  tables included), taken at the first sweep size at or above it: the strictest point of that bound;
at each such size it times as many iterations as seeing the suspects' drop through the noise needs
(screening_transfer), and a screening latency test takes samples_needed(p) samples for the highest
percentile a profile gates (p50: 200, p99: 1e4, p99.9: 1e5; the engine's bounds or ib_write_lat's), never
more than latency.iters.

The transfer's precision. A screening pair-direction is a suspect when its value is `drop` worse than its
rail's median (acceptance.drivers.confirm: analysis.outlier_min_deviation, or a nearer fleet.bounds
factor). Its value is the mean of n timed iterations (window writes of the size each); with a relative
noise `noise` per iteration the mean's is noise / sqrt(n) (the iterations' noise averages; a stall, the
heavy tail, does not, and is what confirmation's second measurement tells from a fault). Allowing for
every pair-direction compared (Bonferroni, as the analysis does), a healthy one is a false suspect with
probability at most analysis.false_findings / compared when drop >= z noise / sqrt(n) in log terms:
n = ceil((z noise / ln(1 / (1 - drop)))^2), at least 1, at most what the full sweep times at that size.
The noise is rdma_write.screening_noise where a profile states its fabric's, else SCREENING_NOISE, an
assumption (no measured figure for real hardware here).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from statistics import NormalDist

from ..measure.stats import samples_needed
from ..measure.sweep import sweep_from_profile
from ..rules import catalog, judge
from . import schedule as sched

PAIRWISE_SUITES = ("rdma_write", "gpudirect")
_PERCENTILE = re.compile(r"latency_p(\d+)$")
# Assumed: the relative noise (sigma) of one timed bandwidth iteration at a bound's size on a healthy
# fabric. No source measures it on real hardware; a site states its own in rdma_write.screening_noise
# (a healthy run's run.json "power" noise at that size times sqrt of its records' samples).
SCREENING_NOISE = 0.01


def bounds_of(profile, kind: str, suites=PAIRWISE_SUITES):
    """(metric name, profile value) of each bound of kind `kind` (catalog.BOUND_KINDS: "sizemap", a table
    by size; "scalar", one value; ...) on a metric of `suites` (catalog suite names; default the pairwise
    ones) that the profile sets, in the catalog's order. Screening's sizes and gated percentile read them,
    and so does "auto"'s fewer_iterations (acceptance.runtime.setup_costs: the collectives' bounded sizes)."""
    for suite in suites:
        for m in catalog.suite(suite).metrics:
            if m.bound == kind and m.key:
                value = profile.get(m.key)
                if value:
                    yield m.name, value


def _fleet_tables(profile, higher: bool | None = None):
    """(pattern, factor or [[size, factor], ...]) of each fleet bound on a pairwise suite's metric
    (of that direction when `higher` is given)."""
    for pattern, factor in profile.get("fleet.bounds") or []:
        found = [h for suite, _, h in catalog.fleet_metrics(pattern) if suite in PAIRWISE_SUITES]
        if found and (higher is None or higher in found):
            yield pattern, factor


def bounded_sizes(profile) -> list[int]:
    """The first sweep size at or above each size a bandwidth bound (rdma_write, gpudirect; fleet.bounds
    tables of theirs too) starts at, ascending."""
    sizes = list(sweep_from_profile(profile).sizes)
    tables = [table for _, table in bounds_of(profile, "sizemap")]
    tables += [factor for _, factor in _fleet_tables(profile) if isinstance(factor, list)]
    keep = set()
    for table in tables:
        for start, _value in table:
            at = next((s for s in sizes if s >= start), None)
            if at is not None:
                keep.add(at)
    return sorted(keep)


def screening_sizes(profile) -> list[int]:
    """The sweep sizes a screening round measures, ascending: the smallest, and bounded_sizes."""
    return sorted({sweep_from_profile(profile).sizes[0], *bounded_sizes(profile)})


def gated_percentile(profile) -> float:
    """The highest latency percentile a pairwise bound gates (50 when none is set): the engine's own, or
    ib_write_lat's (perftest.latency_*), whose suspects the engine's screening must find."""
    gated = [50.0]
    for name, _ in bounds_of(profile, "scalar", (*PAIRWISE_SUITES, "perftest")):
        match = _PERCENTILE.search(name)
        if match:
            digits = match[1]  # p50 -> 50, p99 -> 99, p999 -> 99.9
            gated.append(float(digits) if len(digits) <= 2 else float(f"{digits[:2]}.{digits[2:]}"))
    return max(gated)


def screening_latency_iters(profile) -> int:
    """Latency samples per pair-direction in screening: what the gated percentile needs, at most latency.iters."""
    return min(profile.get("latency.iters"), samples_needed(gated_percentile(profile)))


def screening_drop(profile) -> tuple[float, str]:
    """(the slowdown a bandwidth suspect is called at, where it comes from): the nearer of
    analysis.outlier_min_deviation and a fleet.bounds factor on a pairwise bandwidth (as
    acceptance.drivers.confirm.suspects)."""
    drop, source = judge.Outlier(profile).min_deviation, "analysis.outlier_min_deviation"
    for pattern, factor in _fleet_tables(profile, higher=True):
        for f in [v for _, v in factor] if isinstance(factor, list) else [factor]:
            if 1 - f < drop:
                drop, source = 1 - f, f"fleet.bounds {pattern}"
    return drop, source


def screening_noise(profile) -> tuple[float, str]:
    """(relative noise of one timed bandwidth iteration, where it comes from)."""
    stated = profile.get("rdma_write.screening_noise")
    if stated is not None:
        return stated, f"profile {profile.name}'s rdma_write.screening_noise"
    return SCREENING_NOISE, "assumed: SCREENING_NOISE; state the fabric's in rdma_write.screening_noise"


@dataclass(frozen=True)
class Transfer:
    """What a screening bandwidth test moves per pair-direction at each bounded size, and why."""
    iterations: dict[int, int]  # bounded size -> timed iterations (window writes of the size each)
    window: int
    needed: int                 # iterations the precision asks for (before the full sweep's cap)
    drop: float
    drop_from: str
    noise: float
    noise_from: str
    z: float                    # the healthy mean stays this many of its sigmas above the drop
    compared: int               # pair-directions compared (the Bonferroni count)

    def bytes(self, size: int) -> int:
        return self.iterations[size] * self.window * size


def screening_transfer(profile, nodes: int, rails: int, pattern: str) -> Transfer:
    """The screening transfer of `pattern` over `nodes` x `rails` (the module's docstring: the precision)."""
    drop, drop_from = screening_drop(profile)
    noise, noise_from = screening_noise(profile)
    compared = max(1, 2 * sched.pair_count(nodes, pattern) * max(1, rails))
    z = -NormalDist().inv_cdf(min(0.5, max(1e-300, judge.Outlier(profile).alpha() / compared)))
    sweep, window = sweep_from_profile(profile), profile.get("sweep.window")
    # No drop to see through (0: every slowdown is a suspect; 1: none is): the full sweep's count.
    needed = (max(1, math.ceil((z * noise / math.log(1 / (1 - drop))) ** 2)) if 0 < drop < 1
              else sweep.max_iters)
    return Transfer({size: min(needed, sweep.iters(size, size * window)) for size in bounded_sizes(profile)},
                    window, needed, drop, drop_from, noise, noise_from, z, compared)


# What screening measures on every scheduled pair: write bandwidth at the bounded sizes (the suite and
# the metric; every pair's bandwidth is what localizes a cable, a port or one direction of a link). Every
# other pairwise test (read bandwidth, latency, atomics, GPUDirect) and the sweep's smallest size walk a
# sample of the rounds, rdma_write.sample_rounds of them spread evenly (sampled_rounds): what they find
# is a NIC's or a node's, which a sample of partners shows, and 1e4 latency samples per pair on every
# pair of 1,024 nodes would take most of an hour.
EVERY_PAIR = ("rdma_write", "bandwidth")  # write bandwidth (catalog.PAIR_OPS["write"])


def every_pair(suite: str, metric: str) -> bool:
    """Whether screening measures (suite, metric) on every scheduled pair (EVERY_PAIR) or on the sample."""
    return (suite, metric) == EVERY_PAIR


def sampled_rounds(profile, rounds: list) -> list:
    """The rounds of `rounds` (a rail's scheduled rounds, in order) that the sampled tests walk: at most
    rdma_write.sample_rounds, spread evenly (0: every one); the same on every rank."""
    return sched.spread(rounds, profile.get("rdma_write.sample_rounds"))


def every_round_sizes(profile) -> list[int]:
    """The sizes write bandwidth measures in a round outside the sample: the bounded sizes (the smallest,
    which no bound judges at every pair, only in the sample); the screening sizes where no bound is set."""
    return bounded_sizes(profile) or screening_sizes(profile)


def screening_iters(profile, nodes: int, rails: int, pattern: str) -> dict[int, int]:
    """Timed iterations of each screening size: the transfer's at bounded sizes, the sweep's at the smallest."""
    sweep, window = sweep_from_profile(profile), profile.get("sweep.window")
    smallest = sweep.sizes[0]
    return {smallest: sweep.iters(smallest, smallest * window),
            **screening_transfer(profile, nodes, rails, pattern).iterations}
