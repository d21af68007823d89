"""What the fleet-relative bounds of a run were: their populations, and the values they could not judge.

The bounds themselves are the judge's (acceptance.rules.judge, bound kind "fleet"); evaluate() puts
them on the records. Here they are summed up for run.json, the terminal and the report, and a
population too small to judge becomes a warning finding (never a silent pass).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..rules import catalog
from .base import codes_of, floats_of
from .finding import clean_value, make_finding

FLEET, TOO_FEW = "fleet", "fleet_too_few"
SHOWN = 10


def _fleet_rows(ev: pd.DataFrame) -> pd.DataFrame:
    """The records a fleet bound applied to (or was meant to), with their population's key."""
    if "bound" not in ev.columns or not len(ev):
        return pd.DataFrame()
    sel = codes_of(ev["bound"], FLEET) | codes_of(ev["bound"], TOO_FEW)
    sel |= ~np.isnan(floats_of(ev["factor"])) if "factor" in ev.columns else False
    if not sel.any():
        return pd.DataFrame()
    cols = ["suite", "metric", "size", "memory", "engine", "op", "peers", "unit", "bound", "verdict"]
    rows = ev.loc[sel, [c for c in cols if c in ev.columns]].copy()
    for c in rows.columns:
        rows[c] = rows[c].astype(object).where(rows[c].notna(), None)
    rows["size"] = floats_of(ev.loc[sel, "size"])
    for c in ("value", "threshold", "population", "centre", "factor"):
        rows[c] = floats_of(ev.loc[sel, c])
    return rows


def summary(ev: pd.DataFrame) -> dict:
    """run.json "fleet": how many values were held to a fleet bound, how many fell outside, how many
    could not be judged, and each population (metric, size, what it is, its size and centre)."""
    rows = _fleet_rows(ev)
    if rows.empty:
        return {"judged": 0, "outside": 0, "too_few": 0, "populations": []}
    too_few = rows["bound"] == TOO_FEW
    outside = (rows["verdict"] == "fail") & ~too_few & (rows["bound"] == FLEET)
    key = ["suite", "metric", "op", "size", "memory", "engine", "peers"]
    pops = []
    for k, g in rows.groupby(key, dropna=False, sort=True):
        entry = dict(zip(key, k))
        entry = {c: (None if isinstance(v, float) and np.isnan(v) else v) for c, v in entry.items()}
        if entry["size"] is not None:
            entry["size"] = int(entry["size"])
        few = g["bound"] == TOO_FEW
        entry.update(values=int(len(g)), population=int(g["population"].max()) if len(g) else 0,
                     median=clean_value(g["value"].median()), factor=clean_value(g["factor"].dropna().iloc[0])
                     if g["factor"].notna().any() else None,
                     outside=int(((g["verdict"] == "fail") & (g["bound"] == FLEET)).sum()), too_few=int(few.sum()),
                     unit=g["unit"].iloc[0])
        pops.append(entry)
    return {"judged": int((~too_few).sum()), "outside": int(outside.sum()), "too_few": int(too_few.sum()),
            "populations": pops}


def line(s: dict) -> str | None:
    """One line for the terminal, or None when no fleet bound applied."""
    if not s["judged"] and not s["too_few"]:
        return None
    metrics = list(dict.fromkeys(f"{p['suite']} {catalog.label(p['suite'], p['metric'])}" for p in s["populations"]))
    shown = ", ".join(metrics[:4]) + (f" and {len(metrics) - 4} more" if len(metrics) > 4 else "")
    return (f"fleet-relative bounds: {s['judged']:,} values judged against the median of their peers "
            f"({shown}): {s['outside']:,} outside, {s['too_few']:,} with too few peers to judge "
            f"(run.json \"fleet\")")


def too_few_findings(ev: pd.DataFrame, min_population: int) -> list[dict]:
    """One warning per metric whose values had too few comparable measurements for a fleet bound."""
    rows = _fleet_rows(ev)
    if rows.empty:
        return []
    few = rows[rows["bound"] == TOO_FEW]
    out = []
    for (suite, metric), g in few.groupby(["suite", "metric"], sort=True):
        pops = g.groupby(["peers", "size"], dropna=False).agg(n=("population", "max")).reset_index()
        evidence = [f"{suite} {metric}{'' if np.isnan(r.size) else f' {int(r.size)} B'}: {int(r.n)} comparable "
                    f"measurement(s) of {r.peers} (fewer than {min_population})" for r in pops.head(SHOWN).itertuples()]
        if len(pops) > SHOWN:
            evidence.append(f"and {len(pops) - SHOWN} more")
        label = catalog.label(suite, metric)
        out.append(make_finding(severity="warn", scope="cluster", metric=metric, evidence=evidence, suite=suite,
                                message=f"{len(g):,} {suite} {label} value(s) not judged against the fleet: too few "
                                        f"comparable measurements (fewer than {min_population}; "
                                        f"fleet.min_population); only their absolute bounds held them",
                                kind="fleet", unit=g["unit"].iloc[0], bound=TOO_FEW))
    return out
