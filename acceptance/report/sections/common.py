"""What several sections share: the caps on the page's tables, the "N more in FILE" note, where a
measurement was (nodes and rail) in words, the run's nodes, and the pairwise metrics a section draws."""
from __future__ import annotations

import pandas as pd

from ...rules import catalog
from ..data import is_missing

MAX_ROWS = 50          # rows of a capped table
SHOWN_FINDINGS = 20    # confirmed failing findings shown, worst first; the next ones folded
MAX_FINDINGS = 100     # confirmed failing findings in the page at most (shown and folded)
MAX_FOLDED = 50        # warnings, and transients, listed in their folded tables
SHOWN_DRAINS = 20      # drain lines shown; the rest folded (all of them are in drain.txt)
MAX_EVIDENCE = 25      # evidence lines per finding
SEVERITY_ORDER = {"fail": 0, "warn": 1}


def more(total: int, shown: int, where: str) -> str:
    return f"{total - shown:,} more in {where}" if total > shown else ""


def where_words(src, dst, rail=None) -> str:
    parts = []
    if not is_missing(src):
        parts.append(f"{src} → {dst}" if not is_missing(dst) else str(src))
    if not is_missing(rail):
        parts.append(f"rail {int(rail)}")
    return ", ".join(parts) or "–"


def topology_nodes(run: dict) -> list[str]:
    nodes = (run.get("topology") or {}).get("nodes") or {}
    return [str(n) for n in nodes]


def pairwise(recs: pd.DataFrame, role: str) -> tuple[list[tuple[str, pd.DataFrame, bool]], list[str]]:
    """(label, records, higher is better) of each pairwise metric with `role` (catalog: heatmap,
    curve) that this run recorded between two nodes, in the catalog's order; and which loop timed them.
    A metric that a checking suite (catalog Suite.checks: perftest's ib_write_lat for rdma_write) also
    has in that role is drawn from the checking suite's records where it has them (a C loop's timing),
    else from its own, with a note that the harness's loop timed it."""
    found = {}
    for suite, name in catalog.with_role(role):
        sub = recs[(recs["suite"] == suite) & (recs["metric"] == name) & recs["src"].notna() & recs["dst"].notna()
                   & recs["value"].notna()]
        if len(sub):
            found[suite, name] = sub
    out, notes = [], []
    for (suite, name), sub in found.items():
        label = catalog.label(suite, name)
        checkers = [s.name for s in catalog.SUITES.values()
                    if s.checks == suite and (s.name, name) in catalog.with_role(role)]
        if any((c, name) in found for c in checkers):
            notes.append(f"{label}: drawn from {catalog.label(next(c for c in checkers if (c, name) in found), name)} "
                         f"(a C loop timed each sample), not from the harness's own loop.")
            continue
        if checkers:
            notes.append(f"{label}: the harness's own timing loop, which adds its own time to each sample "
                         f"(no {', '.join(checkers)} records of these pairs).")
        out.append((label, sub, catalog.direction(suite, name) is not False))
    return out, notes
