"""What a screening round measures: the sizes that have bounds, and as many latency samples as the gated
percentile needs. The pairwise drivers and `acceptance plan` both read these, so the plan times what runs.

Screening (pattern screen:K, acceptance.runtime.schedule) measures every node K times to find suspects,
which confirmation then measures again; a full size sweep and 1e5 latency samples per pair would spend
the time budget on values no bound judges. So a screening sweep keeps:
- the smallest size of the sweep (where a fault in posting or the first packet shows), and
- each size a bound by size of a pairwise suite starts at (its table's keys, e.g. "8MiB"; fleet.bounds
  tables included), taken at the first sweep size at or above it: the strictest point of that bound;
and a screening latency test takes samples_needed(p) samples for the highest percentile a profile
gates (p50: 200, p99: 1e4, p99.9: 1e5; the engine's bounds or ib_write_lat's), never more than
latency.iters.
"""
from __future__ import annotations

import re

from ..measure.stats import samples_needed
from ..measure.sweep import sweep_from_profile
from ..rules import catalog

PAIRWISE_SUITES = ("rdma_write", "gpudirect")
_PERCENTILE = re.compile(r"latency_p(\d+)$")


def _bounds(profile, kind: str, suites=PAIRWISE_SUITES):
    """(metric name, profile value) of each bound of `suites` of `kind` that the profile sets."""
    for suite in suites:
        for m in catalog.suite(suite).metrics:
            if m.bound == kind and m.key:
                value = profile.get(m.key)
                if value:
                    yield m.name, value


def screening_sizes(profile) -> list[int]:
    """The sweep sizes a screening round measures, ascending: the smallest, and the first sweep size at or
    above each size a bandwidth bound (rdma_write, gpudirect) starts at."""
    sizes = list(sweep_from_profile(profile).sizes)
    keep = {sizes[0]}
    tables = [table for _, table in _bounds(profile, "sizemap")]
    # Fleet-relative bounds by size (fleet.bounds = { "rdma_write.bandwidth" = { "4KiB" = 0.5 } }) too.
    tables += [factor for pattern, factor in profile.get("fleet.bounds") or [] if isinstance(factor, list)
               and any(suite in PAIRWISE_SUITES for suite, _, _ in catalog.fleet_metrics(pattern))]
    for table in tables:
        for start, _value in table:
            at = next((s for s in sizes if s >= start), None)
            if at is not None:
                keep.add(at)
    return sorted(keep)


def gated_percentile(profile) -> float:
    """The highest latency percentile a pairwise bound gates (50 when none is set): the engine's own, or
    ib_write_lat's (perftest.latency_*), whose suspects the engine's screening must find."""
    gated = [50.0]
    for name, _ in _bounds(profile, "scalar", (*PAIRWISE_SUITES, "perftest")):
        match = _PERCENTILE.search(name)
        if match:
            digits = match[1]  # p50 -> 50, p99 -> 99, p999 -> 99.9
            gated.append(float(digits) if len(digits) <= 2 else float(f"{digits[:2]}.{digits[2:]}"))
    return max(gated)


def screening_latency_iters(profile) -> int:
    """Latency samples per pair-direction in screening: what the gated percentile needs, at most latency.iters."""
    return min(profile.get("latency.iters"), samples_needed(gated_percentile(profile)))
