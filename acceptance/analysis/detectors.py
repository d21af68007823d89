"""The detectors: each turns the judged records into findings of one kind, through one interface
(a function of the Context), and the pipeline runs them all, in DETECTORS order.

The Context holds the views they share: the pairwise view of every pairwise suite (catalog
`pairwise`), built once; which rows those explained (so the bounds detector does not report them
twice); and the host pairs measured (burn-in and baseline localize on them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..rules import catalog
from ..switchtree.fabric import Fabric
from ..rules.profile import Profile
from .failures import counter_findings, failed_tests, other_failures
from .fleet import too_few_findings
from . import cables
from .localize import localize
from .outliers import (
    against_rails,
    against_switches,
    bad_pairs,
    fleet_outliers,
    fleet_tail,
    gated,
    measured_pairs,
    nic_outliers,
    nic_rows,
    node_names,
    pair_values,
    pairwise_view,
    power,
    rail_planes,
    with_nics,
    with_paths,
)
from .trends import burnin_findings, regression_findings


@dataclass
class PairwiseView:
    """One pairwise suite's records between two nodes on a rail (outliers.pairwise_view)."""

    suite: catalog.Suite
    pairs: pd.DataFrame      # one row per record, node codes s, d
    rows: np.ndarray         # their positions in the records
    measured: pd.DataFrame   # the undirected node pairs measured per rail


@dataclass
class Context:
    records: pd.DataFrame               # judged (analysis.evaluate)
    profile: Profile
    deltas: pd.DataFrame | None         # against a baseline, when one was given
    names: list[str]                    # node names; the views' s, d code into them
    views: list[PairwiseView] = field(default_factory=list)
    fabric: Fabric | None = None        # the switch trees, when known

    @classmethod
    def of(cls, ev: pd.DataFrame, profile: Profile, deltas: pd.DataFrame | None,
           fabric: Fabric | None = None) -> Context:
        names = node_names(ev)[0]
        views = []
        for suite in catalog.pairwise():
            p, _, rows = pairwise_view(ev, suite.name)
            if len(rows):
                views.append(PairwiseView(suite, p, rows, measured_pairs(p)))
        return cls(ev, profile, deltas, names, views, fabric)

    @property
    def pairwise_rows(self) -> np.ndarray:
        return np.concatenate([v.rows for v in self.views]) if self.views else np.zeros(0, dtype=np.int64)

    @property
    def host_pairs(self) -> pd.DataFrame:
        """The pairs burn-in and baseline findings localize on: the primary suite's (catalog Suite.primary,
        rdma_write), else the first view's."""
        for v in sorted(self.views, key=lambda v: not v.suite.primary):
            return v.measured
        return pd.DataFrame({"rail": [], "u": [], "v": []}, dtype=np.int64)


Detector = Callable[[Context], list]


def pairwise(ctx: Context) -> list[dict]:
    """Bounds and fleet outliers of every pairwise suite, localized to link, NIC, node or rail plane
    (and, with the switch tree, leaf, uplink or spine), each suite against its own fleet, on the
    metrics and sizes the profile gates (outliers.gated)."""
    out = []
    for view in ctx.views:
        name = view.suite.name
        pairs = gated(pair_values(view.pairs, name), ctx.profile, name)
        # the latency tail is held to the fleet on each NIC (outliers.fleet_tail), gated or not
        tail = fleet_tail(view.pairs, pairs, name)
        judged = pd.concat([pairs, tail], ignore_index=True) if len(tail) else pairs
        nics = nic_outliers(judged, ctx.profile, name)
        # a slow cable or path beyond a leaf port before a NIC is blamed for it (analysis.cables)
        paths = cables.locate(pairs, nics, ctx.names, ctx.fabric, ctx.profile)
        nics = paths.nics
        on_nics = nic_rows(pairs, nics) | paths.rows
        outliers = fleet_outliers(pairs, ctx.profile, on_nics)
        planes = rail_planes(pairs, ctx.profile) if pairs["rail"].nunique() >= 3 else None
        bad = bad_pairs(view.pairs, outliers, ctx.profile, name)
        bad = with_nics(bad, judged, nics, ctx.profile, name)
        bad = with_paths(bad, pairs, paths.faults, ctx.profile, name)
        if planes is not None and len(planes):
            bad = against_rails(bad, pairs, planes, ctx.profile, name)
        bad = against_switches(bad, pairs, ctx.names, ctx.fabric, ctx.profile, name)
        for f in localize(bad, view.measured, ctx.names, ctx.profile, "fleet", planes, ctx.fabric,
                          nics=nics[["rail", "node", "direction"]].drop_duplicates() if len(nics) else None,
                          paths=paths.faults):
            f["suite"] = name
            f["message"] = view.suite.finding + f["message"]
            out.append(f)
    return out


def bounds(ctx: Context) -> list[dict]:
    """Failed bounds the pairwise views did not explain (collectives, memreg, preflight, ...)."""
    return other_failures(ctx.records, ctx.pairwise_rows)


def tests(ctx: Context) -> list[dict]:
    return failed_tests(ctx.records)


def counters(ctx: Context) -> list[dict]:
    return counter_findings(ctx.records)


def too_few(ctx: Context) -> list[dict]:
    return too_few_findings(ctx.records, ctx.profile.get("fleet.min_population"))


def burnin(ctx: Context) -> list[dict]:
    return burnin_findings(ctx.records, ctx.profile, ctx.host_pairs, ctx.fabric)


def baseline(ctx: Context) -> list[dict]:
    if ctx.deltas is None:
        return []
    return regression_findings(ctx.deltas, ctx.profile, ctx.host_pairs, ctx.names, ctx.fabric)


DETECTORS: tuple[Detector, ...] = (pairwise, bounds, tests, counters, too_few, burnin, baseline)


def pairwise_power(ctx: Context) -> list[dict]:
    """What the pairwise rules detect at this run's size and noise (outliers.power), per suite."""
    return [entry for view in ctx.views
            for entry in power(gated(pair_values(view.pairs, view.suite.name), ctx.profile, view.suite.name),
                               ctx.profile, view.suite.name)]
