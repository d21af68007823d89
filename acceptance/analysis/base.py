"""Constants and column helpers shared by the analysis modules."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..profile import Profile
from ..judge import floats, is_value
from ..results import VERDICTS as RECORD_VERDICTS


@dataclass
class Analysis:
    run: dict                         # run.json as read (at least run_id and profile)
    profile: Profile                  # the profile the records were re-evaluated against
    records: pd.DataFrame             # one row per record; see load_records() for the columns
    findings: list[dict]              # docs/records.md schema, most severe and most specific first
    drains: list[str]                 # scontrol lines, one per node to drain
    deltas: pd.DataFrame | None = None  # baseline comparison, when a baseline was given
    baseline_id: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def burnin(self) -> list[dict]:
        """The fleet over burn-in iterations, per trend metric (analysis.trends.burnin_series)."""
        if "burnin" not in self.extra:
            from .trends import burnin_series
            self.extra["burnin"] = burnin_series(self.records, self.profile)
        return self.extra["burnin"]

    @property
    def fleet(self) -> dict:
        """The run's fleet-relative bounds: populations, values outside, values too few to judge."""
        if "fleet" not in self.extra:
            from .fleet import summary
            self.extra["fleet"] = summary(self.records)
        return self.extra["fleet"]

    @property
    def verdict(self) -> str:
        """The run's verdict: "pass", "fail" or "incomplete" (analysis.verdict)."""
        from .verdict import run_verdict
        return run_verdict(self.run or {}, self.records, self.findings)[0]

    @property
    def verdict_why(self) -> str:
        from .verdict import run_verdict
        return run_verdict(self.run or {}, self.records, self.findings)[1]

    @property
    def exit_code(self) -> int:
        """0 for pass, 1 for fail, 3 for incomplete."""
        from .verdict import EXIT_CODES
        return EXIT_CODES[self.verdict]



VERDICTS = list(RECORD_VERDICTS)  # category order of the verdict column
_PASS, _FAIL, _WARN, _INFO = (VERDICTS.index(v) for v in ("pass", "fail", "warn", "info"))
SCOPE_ORDER = {"rail": 0, "node": 1, "nic": 2, "link": 3, "cluster": 4}
EVIDENCE_MAX = 10
MIN_GROUP = 3          # fewest values a fleet-relative (outlier) comparison is made on
MAD_SCALE = 0.6745     # modified z-score: 0.6745 (x - median) / MAD

# Column helpers: the judge's (one implementation).
_codes_of, _floats_of = is_value, floats
