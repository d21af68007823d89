"""Shaping the records for the report: one slim, typed frame; node order; number formatting.

Everything here works on whole columns (pandas / numpy), never on one record at a
time, so a 1,024-node x 8-rail run (millions of records) is summarized in seconds.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import hostlist
import numpy as np
import pandas as pd

from ..analysis import DIRECTION
from ..records.naming import natural_key  # noqa: F401  (re-exported for sections)
from ..rules.units import format_size

# Columns the report reads, with what a missing column becomes.
COLUMNS = ("test", "suite", "metric", "value", "unit", "size", "rail", "iteration",
           "src", "dst", "op", "scope", "threshold", "verdict", "detail", "engine", "bound")

def lower_is_better(suite: str, metric: str) -> bool:
    """From the analysis' bound registry, the one place that knows each metric's direction.

    Metrics without a direction there (counts such as errors, or unknown ones) read as lower-is-better.
    """
    return DIRECTION.get((str(suite), str(metric))) is not True


def prepare(records: pd.DataFrame | None) -> pd.DataFrame:
    """The columns the report needs, typed; src/dst derived from `nodes` when analysis left them out.

    Text columns keep their dtype (no per-value conversion of millions of strings).
    """
    numeric = ("value", "size", "rail", "iteration", "threshold")
    if records is None or not isinstance(records, pd.DataFrame) or records.empty:
        return pd.DataFrame({c: pd.Series(dtype=float if c in numeric else object) for c in COLUMNS})
    df = records
    index = df.index

    def col(name):
        if name in df.columns:
            return df[name]
        return pd.Series([None] * len(df), index=index, dtype=object)

    out: dict[str, pd.Series] = {}
    for name in numeric:
        out[name] = pd.to_numeric(col(name), errors="coerce").astype(float)
    out["iteration"] = out["iteration"].fillna(0)
    for name in ("test", "suite", "metric", "unit", "detail", "op", "scope", "engine", "bound"):
        out[name] = col(name)
    verdict = col("verdict")
    out["verdict"] = verdict.astype(object).where(verdict.notna(), "info") if verdict.isna().any() else verdict
    src, dst = col("src"), col("dst")
    if ("src" not in df.columns or "dst" not in df.columns) and "nodes" in df.columns:
        nodes = df["nodes"]
        derived_src = nodes.str[0]
        derived_dst = nodes.str[1].where(nodes.str.len() == 2, None)
        src = src.where(src.notna(), derived_src)
        dst = dst.where(dst.notna(), derived_dst)
    out["src"], out["dst"] = src, dst
    return pd.DataFrame(out, index=index)


def collective_labels(sub: pd.DataFrame) -> pd.DataFrame:
    """op, scope ("world", "rail", "node") and the communicator of collective records, from their
    fields (acceptance.analysis.load)."""
    sub = sub.copy()
    sub["op"] = sub["op"].astype(object).fillna(sub["suite"].astype(object)).astype(str)  # no op: its suite
    scope = sub["scope"].astype(object).fillna("world").astype(str)
    sub["scope"] = scope
    rail = sub["rail"]
    src = sub["src"].astype(object).fillna("?").astype(str)
    comm = np.where(scope == "rail", "rail " + rail.fillna(-1).astype(int).astype(str),
                    np.where(scope == "node", src, scope))
    sub["comm"] = comm
    return sub


def natural_sorted(names: Iterable) -> list[str]:
    return sorted({str(n) for n in names if n is not None and not (isinstance(n, float) and math.isnan(n))},
                  key=natural_key)


def compress_hosts(names: Iterable[str], limit: int = 160) -> str:
    """node1, node2, node3, node7 -> "node[1-3,7]" (Slurm hostlist style: python-hostlist, the
    library the topology readers expand with), cut at `limit` characters."""
    text = hostlist.collect_hostlist(natural_sorted(names))
    if len(text) > limit:
        count = len(set(map(str, names)))
        text = text[:limit].rsplit(",", 1)[0] + f",… ({count} in all)"
    return text


# --- formatting -----------------------------------------------------------------

def is_missing(value) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def fmt_num(value, unit: str | None = None) -> str:
    """4 significant digits; integers in full; '–' for missing."""
    if is_missing(value):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        if v.is_integer() and abs(v) < 1e15:
            text = f"{int(v):,}" if abs(v) >= 1e5 else str(int(v))
        elif abs(v) >= 1e5 or abs(v) < 1e-3:
            text = f"{v:.3e}"
        else:
            text = f"{v:.4g}"
    else:
        text = str(value)
    return f"{text} {unit}" if unit else text


def fmt_size(size) -> str:
    if is_missing(size):
        return "–"
    try:
        return format_size(int(size))
    except (TypeError, ValueError):
        return str(size)


def fmt_int(value) -> str:
    if is_missing(value):
        return "–"
    try:
        return str(int(value))
    except (TypeError, ValueError):
        return str(value)


def fmt_text(value) -> str:
    return "–" if is_missing(value) or value == "" else str(value)


def unit_of(records: pd.DataFrame) -> dict[str, str]:
    """metric -> its most common unit in the records."""
    if records.empty:
        return {}
    units = records[["metric", "unit"]].dropna()
    if units.empty:
        return {}
    return units.groupby("metric", sort=False)["unit"].agg(lambda s: s.mode().iat[0]).to_dict()
