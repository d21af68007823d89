"""The run's verdict: PASS, FAIL or INCOMPLETE, and the exit code that goes with it.

INCOMPLETE when the run did not finish (a hang, a lost rank, a crash: run.json says
complete false) or when nothing was judged (every check skipped, or recorded only
informational values); FAIL when a test failed or a finding fails; PASS only when
something was measured and held to its bounds, and nothing failed. Warnings do not
change the verdict. The same word and code appear on the terminal, in the report's
headline, in run.json and in Prometheus.
"""

from __future__ import annotations

import pandas as pd

from ..records.results import FAILED_METRIC
from .base import codes_of

PASS, FAIL, INCOMPLETE = "pass", "fail", "incomplete"
EXIT_CODES = {PASS: 0, FAIL: 1, INCOMPLETE: 3}


def _first_line(text) -> str:
    return str(text).strip().splitlines()[0] if text and str(text).strip() else ""


def suites_exit_code(run: dict):
    """The suites' own exit code: run.json keeps it as suites_exit_code once an analysis has written its
    verdict's code over exit_code, so that a re-analysis never reads its predecessor's verdict."""
    return run.get("suites_exit_code", run.get("exit_code"))


def run_verdict(run: dict, records: pd.DataFrame, findings: list[dict]) -> tuple[str, str]:
    """(verdict, why in a few words)."""
    if run.get("complete") is not True:
        why = (_first_line(run.get("hang")) or _first_line(run.get("lost"))
               or (f"ranks {run['missing_ranks']} missing" if run.get("missing_ranks") else "")
               or "the run did not finish (run.json: complete is not true)")
        return INCOMPLETE, why
    failed = records[codes_of(records["metric"], FAILED_METRIC)] if len(records) else records
    failed_tests = failed["test"].nunique() if len(failed) else 0
    failing = sum(1 for f in findings if f.get("severity") == "fail")
    if failed_tests or failing or suites_exit_code(run) == EXIT_CODES[FAIL]:
        parts = [f"{failing} failing finding{'s' if failing != 1 else ''}"] if failing else []
        if failed_tests:
            parts.append(f"{failed_tests} failed test{'s' if failed_tests != 1 else ''}")
        return FAIL, ", ".join(parts) or "a check failed (run.json: exit_code 1)"
    judged = 0
    if len(records):
        held = codes_of(records["verdict"], "pass") | codes_of(records["verdict"], "fail") \
            | codes_of(records["verdict"], "warn")
        if "bound" in records.columns:  # too few peers for its fleet bound: a warning, not a measurement judged
            held &= ~codes_of(records["bound"], "fleet_too_few")
        judged = int(held.sum())
    if not judged:
        return INCOMPLETE, "nothing was measured against a bound (every check skipped or recorded only information)"
    warnings = sum(1 for f in findings if f.get("severity") == "warn")
    return PASS, f"{judged:,} measurements within bounds" + (f", {warnings} warning{'s' if warnings != 1 else ''}"
                                                               if warnings else "")
