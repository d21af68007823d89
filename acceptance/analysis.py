"""Verdicts and findings: from records to "node07's NIC on rail 3 is 40% slow, drain it".

(Contract skeleton: the implementation fills in the functions below.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from .profile import Profile


@dataclass
class Analysis:
    run: dict                         # run.json as read (at least run_id and profile)
    profile: Profile                  # the profile the records were re-evaluated against
    records: pd.DataFrame             # one row per record; see load_records() for the columns
    findings: list[dict]              # DESIGN.md schema, most severe and most specific first
    drains: list[str]                 # scontrol lines, one per node to drain
    deltas: pd.DataFrame | None = None  # baseline comparison, when a baseline was given
    baseline_id: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """'fail' if any finding fails, else 'warn' if any warns, else 'pass'."""
        severities = {f["severity"] for f in self.findings}
        return "fail" if "fail" in severities else "warn" if "warn" in severities else "pass"
