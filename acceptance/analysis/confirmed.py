"""Measured, then confirmed: a pair measured again supersedes its first measurement, and a suspect
that did not reproduce is transient.

With rdma_write.confirm (the default) a pairwise suite's records carry `phase`: "screen" for the
scheduled rounds (all-pairs, or a screening pattern's K rounds), "confirm" for the suspects measured
again after them, alone on their rail, and each suspect end against a partner that measured clean
(drivers.confirm). The later, quieter measurement is the one that counts where either was bad: a
confirm record replaces the screen record of the same suite, metric, size, rail, direction, op and
iteration before the detectors run, so a link, NIC or switch fails only on what was confirmed, and a
clean partner's pairs add evidence for a NIC. A pair normal both times keeps its screen record (the
population a rail's median is taken over stays one of values measured alike).

A link whose first measurement was bad (a failed bound, or outlier_min_deviation worse than its
rail's median) and whose confirmation is normal becomes one transient finding: a warning, never a
drain. Counted per rail they are the fabric's congestion signal.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..rules import catalog
from ..rules.profile import Profile
from .base import codes_of
from .finding import make_finding
from .wording import fmt_value

KEY = ["suite", "metric", "size", "rail", "src", "dst", "op", "iteration"]


def _frame(ev: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    out = pd.DataFrame({c: ev[c].take(rows).astype(object).to_numpy() for c in KEY})
    out["size"] = pd.to_numeric(out["size"], errors="coerce")
    out["rail"] = pd.to_numeric(out["rail"], errors="coerce")
    out["value"] = ev["value"].to_numpy(np.float64)[rows]
    out["fail"] = codes_of(ev["verdict"], "fail")[rows]
    out["unit"] = ev["unit"].take(rows).astype(object).to_numpy()
    out["row"] = rows
    return out.fillna({"op": "", "iteration": 0})


def confirmed_only(records: pd.DataFrame) -> pd.DataFrame:
    """The records without the screen rows a confirmation replaced, and without the load check's
    (phases full and alone: a node measured apart from the schedule; analysis.fullload): history keeps
    what counted."""
    if "phase" not in records.columns:
        return records
    apart = codes_of(records["phase"], "full") | codes_of(records["phase"], "alone")
    if apart.any():
        records = records.iloc[np.flatnonzero(~apart)]
    if not codes_of(records["phase"], "confirm").any():
        return records
    screen = _frame(records, np.flatnonzero(codes_of(records["phase"], "screen")))
    again = _frame(records, np.flatnonzero(codes_of(records["phase"], "confirm")))
    replaced = screen.merge(again[KEY], on=KEY, how="inner")["row"].to_numpy()
    keep = np.ones(len(records), bool)
    keep[replaced] = False
    return records.iloc[np.flatnonzero(keep)]


def supersede(ev: pd.DataFrame, profile: Profile) -> tuple[pd.DataFrame, list[dict]]:
    """(the records without the screen rows a confirm row replaces, the transient findings)."""
    if "phase" not in ev.columns or not len(ev):
        return ev, []
    screen_rows = np.flatnonzero(codes_of(ev["phase"], "screen"))
    confirm_rows = np.flatnonzero(codes_of(ev["phase"], "confirm"))
    if not len(confirm_rows):
        return ev, []
    screen, again = _frame(ev, screen_rows), _frame(ev, confirm_rows)
    # Each screening value against its rail's screening median (per suite, metric, size, op).
    group = ["suite", "metric", "size", "rail", "op", "iteration"]
    screen["median"] = screen.groupby(group, dropna=False)["value"].transform("median")
    higher = np.array([catalog.direction(s, m) is not False for s, m in zip(screen["suite"], screen["metric"])])
    dev = profile.get("analysis.outlier_min_deviation")
    screen["bad"] = screen["fail"] | _worse(screen["value"], screen["median"], higher, dev)
    both = screen.merge(again[[*KEY, "value", "fail", "row"]], on=KEY, how="inner", suffixes=("", "_again"))
    if both.empty:
        return ev, []
    higher = np.array([catalog.direction(s, m) is not False for s, m in zip(both["suite"], both["metric"])])
    both["bad_again"] = both["fail_again"] | _worse(both["value_again"], both["median"], higher, dev)
    # A pair normal both times keeps its screening value: a confirmation runs with less traffic beside
    # it, so on a shared or congested fabric its values are faster, and the rail's median must not move
    # with how many clean partners were measured again.
    moved = (both["bad"] | both["bad_again"]).to_numpy()
    keep = np.ones(len(ev), bool)
    keep[both["row"].to_numpy()[moved]] = False
    keep[both["row_again"].to_numpy()[~moved]] = False
    return ev.iloc[np.flatnonzero(keep)], _transients(both)


def _worse(value, median, higher: np.ndarray, dev: float) -> np.ndarray:
    v, m = np.asarray(value, float), np.asarray(median, float)
    with np.errstate(invalid="ignore"):
        return np.where(higher, v < (1 - dev) * m, v > (1 + dev) * m) & (m > 0)


def _transients(both: pd.DataFrame) -> list[dict]:
    """One warning per link (suite, rail, the two nodes) bad in screening and normal on confirmation."""
    both = both.assign(u=np.where(both["src"].astype(str) < both["dst"].astype(str), both["src"], both["dst"]),
                       v=np.where(both["src"].astype(str) < both["dst"].astype(str), both["dst"], both["src"]))
    out = []
    for (suite, rail, u, v), g in both.groupby(["suite", "rail", "u", "v"], sort=True):
        if not g["bad"].any() or g["bad_again"].any():
            continue  # clean in screening, or reproduced (the detectors judge it on the confirmation)
        h = g[g["bad"]].iloc[0]
        size = None if pd.isna(h["size"]) else int(h["size"])
        where = f" at {size} B" if size is not None else ""
        lines = [f"{r.src} -> {r.dst}, {r.metric}{f' at {int(r.size)} B' if not pd.isna(r.size) else ''}: "
                 f"{fmt_value(r.value)} {r.unit} first (rail median {fmt_value(r.median)}), "
                 f"{fmt_value(r.value_again)} {r.unit} alone" for r in g[g["bad"]].head(4).itertuples()]
        out.append(make_finding(
            severity="warn", scope="link", node=str(u), rail=int(rail), peer=str(v), suite=suite,
            metric=str(h["metric"]), value=float(h["value"]), expected=float(h["median"]), unit=h["unit"], size=size,
            kind="transient", evidence=lines, transient=True,
            message=(f"link {u} <-> {v} on rail {int(rail)}: {catalog.label(suite, str(h['metric']))}{where} "
                     f"{fmt_value(h['value'])} {h['unit']} in the scheduled rounds, {fmt_value(h['value_again'])} "
                     f"{h['unit']} measured again alone: transient (congestion or a passing stall, not "
                     f"reproduced; nothing to drain)")))
    return out
