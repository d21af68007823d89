"""What analyzing a run gives: the records judged, the findings, the drain lines, and the run's
verdict, burn-in series and fleet summary computed from them on demand."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..switchtree.fabric import Fabric
from ..rules.profile import Profile
from .finding import Finding
from .fleet import summary
from .trends import burnin_series
from .verdict import EXIT_CODES, run_verdict


@dataclass
class Analysis:
    run: dict                         # run.json as read (at least run_id and profile)
    profile: Profile                  # the profile the records were re-evaluated against
    records: pd.DataFrame             # one row per record; see load_records() for the columns
    findings: list[Finding]           # docs/records.md, "A finding"; most severe and most specific first
    drains: list                      # host.slurmnode.Drain, one per node to drain
    deltas: pd.DataFrame | None = None  # baseline comparison, when a baseline was given
    baseline_id: str | None = None
    extra: dict = field(default_factory=dict)
    fabric: Fabric | None = None      # the switch trees findings were localized on, when known

    @property
    def burnin(self) -> list[dict]:
        """The fleet over burn-in iterations, per trend metric (analysis.trends.burnin_series)."""
        if "burnin" not in self.extra:
            self.extra["burnin"] = burnin_series(self.records, self.profile)
        return self.extra["burnin"]

    @property
    def fleet(self) -> dict:
        """The run's fleet-relative bounds: populations, values outside, values too few to judge."""
        if "fleet" not in self.extra:
            self.extra["fleet"] = summary(self.records)
        return self.extra["fleet"]

    @property
    def power(self) -> list[dict]:
        """What a PASS rules out: per rule, gated metric and size, the smallest slowdown it detects at
        this run's size and noise ({rule, metric, size, rail, population, comparisons, noise,
        detectable, ...}; analysis.outliers.power)."""
        if "power" not in self.extra:
            from .detectors import Context, pairwise_power
            self.extra["power"] = pairwise_power(Context.of(self.records, self.profile, None, self.fabric)) \
                if len(self.records) else []
        return self.extra["power"]

    @property
    def verdict(self) -> str:
        """The run's verdict: "pass", "fail" or "incomplete" (analysis.verdict)."""
        return run_verdict(self.run or {}, self.records, self.findings)[0]

    @property
    def verdict_why(self) -> str:
        return run_verdict(self.run or {}, self.records, self.findings)[1]

    @property
    def exit_code(self) -> int:
        """0 for pass, 1 for fail, 3 for incomplete."""
        return EXIT_CODES[self.verdict]
