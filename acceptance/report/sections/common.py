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


def pairwise(recs: pd.DataFrame, role: str) -> list[tuple[str, pd.DataFrame, bool]]:
    """(label, records, higher is better) of each pairwise metric with `role` (catalog: heatmap,
    curve) that this run recorded between two nodes, in the catalog's order."""
    out = []
    for suite, name in catalog.with_role(role):
        sub = recs[(recs["suite"] == suite) & (recs["metric"] == name) & recs["src"].notna() & recs["dst"].notna()
                   & recs["value"].notna()]
        if len(sub):
            out.append((catalog.label(suite, name), sub, catalog.direction(suite, name) is not False))
    return out
