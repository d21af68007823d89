"""Measured, then confirmed: a pair measured again supersedes its first measurement where that tells
more, and a suspect that did not reproduce is transient.

With rdma_write.confirm (the default) a pairwise suite's records carry `phase`: "screen" for the
scheduled rounds (all-pairs, or a screening pattern's K rounds), "confirm" for the suspects measured
again after them, and each suspect end against a partner that measured clean, and "reference" for
pairs that screened clean, measured in the same confirmation rounds (drivers.confirm).

Like is compared with like. A screening value is judged against its rail's screening median; a
confirmation value against the median of the references measured beside it (at least
MIN_REFERENCES values of its suite, metric, size, rail and op; else, from a run without references,
against the screening median, as before). The confirmation rounds carry less traffic than the
screening's, so a fault smaller than the screening's congestion dip would pass against the screening
median and is seen against the references.

What the detectors see afterwards:
- A pair bad in screening and bad again is confirmed. Where references judged it, its screening value
  stays (the detectors compare it with the screening values it was measured beside); without
  references, or where the confirmation failed a bound, the confirmation replaces it.
- A pair bad in screening and normal again is transient: the confirmation replaces it, and one
  warning per link says so (never a drain). Counted per rail they are the fabric's congestion signal.
- A pair normal in screening keeps its screening value (the population a rail's median is taken over
  stays one of values measured alike), unless its confirmation failed a bound.
- Reference values are never judged themselves: they are the yardstick.
A confirm row of a pair that was not screened (a suspect's clean partner) is kept: measured with less
traffic beside it, it can only look better than the screening values it is judged among.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..rules import catalog, judge
from ..rules.profile import Profile
from .base import codes_of
from .finding import make_finding
from .wording import fmt_value

KEY = ["suite", "metric", "size", "rail", "src", "dst", "op", "iteration"]
GROUP = ["suite", "metric", "size", "rail", "op", "iteration"]  # the values one median is taken over
MIN_REFERENCES = 3  # reference values a group needs before confirmations are judged against them


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
    apart = (codes_of(records["phase"], "full") | codes_of(records["phase"], "alone")
             | codes_of(records["phase"], "reference"))
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
    """(the records the detectors judge: screen rows a confirmation replaces dropped, and reference rows;
    the transient findings)."""
    if "phase" not in ev.columns or not len(ev):
        return ev, []
    ref_rows = np.flatnonzero(codes_of(ev["phase"], "reference"))
    keep = np.ones(len(ev), bool)
    keep[ref_rows] = False
    screen_rows = np.flatnonzero(codes_of(ev["phase"], "screen"))
    confirm_rows = np.flatnonzero(codes_of(ev["phase"], "confirm"))
    if not len(confirm_rows):
        return (ev.iloc[np.flatnonzero(keep)] if len(ref_rows) else ev), []
    screen, again = _frame(ev, screen_rows), _frame(ev, confirm_rows)
    # Each screening value against its rail's screening median (per suite, metric, size, op).
    screen["median"] = screen.groupby(GROUP, dropna=False)["value"].transform("median")
    higher = np.array([catalog.direction(s, m) is not False for s, m in zip(screen["suite"], screen["metric"])])
    rule = judge.Outlier(profile)
    screen["bad"] = screen["fail"] | rule.suspect_of(screen["value"], screen["median"], higher)
    both = screen.merge(again[[*KEY, "value", "fail", "row"]], on=KEY, how="inner", suffixes=("", "_again"))
    if both.empty:
        return ev.iloc[np.flatnonzero(keep)], []
    # Each confirmation against the references measured beside it, where there are enough of them.
    refs = _frame(ev, ref_rows)
    yardstick = (refs.groupby(GROUP, dropna=False)["value"].agg(["median", "count"])
                 .rename(columns={"median": "reference", "count": "references"}).reset_index())
    both = both.merge(yardstick, on=GROUP, how="left")
    both["like"] = both["references"].fillna(0).to_numpy() >= MIN_REFERENCES
    both["against"] = np.where(both["like"], both["reference"], both["median"])
    higher = np.array([catalog.direction(s, m) is not False for s, m in zip(both["suite"], both["metric"])])
    both["bad_again"] = both["fail_again"] | rule.suspect_of(both["value_again"], both["against"], higher)
    bad, again_bad = both["bad"].to_numpy(), both["bad_again"].to_numpy()
    failed_again, like = both["fail_again"].to_numpy(bool), both["like"].to_numpy(bool)
    # Which of the two the detectors judge (the module's docstring): the confirmation where it failed a
    # bound, where the pair did not reproduce (transient), or, without references, where either was bad.
    use_again = failed_again | (bad & ~again_bad) | (~like & (bad | again_bad))
    keep[both["row"].to_numpy()[use_again]] = False
    keep[both["row_again"].to_numpy()[~use_again]] = False
    return ev.iloc[np.flatnonzero(keep)], _transients(both)


def _transients(both: pd.DataFrame) -> list[dict]:
    """One warning per link (suite, rail, the two nodes) bad in screening and normal on confirmation."""
    both = both.assign(u=np.where(both["src"].astype(str) < both["dst"].astype(str), both["src"], both["dst"]),
                       v=np.where(both["src"].astype(str) < both["dst"].astype(str), both["dst"], both["src"]))
    out = []
    for (suite, rail, u, v), g in both.groupby(["suite", "rail", "u", "v"], sort=True):
        if not g["bad"].any() or g["bad_again"].any():
            continue  # clean in screening, or reproduced (the detectors judge it)
        h = g[g["bad"]].iloc[0]
        size = None if pd.isna(h["size"]) else int(h["size"])
        where = f" at {size} B" if size is not None else ""
        lines = [f"{r.src} -> {r.dst}, {r.metric}{f' at {int(r.size)} B' if not pd.isna(r.size) else ''}: "
                 f"{fmt_value(r.value)} {r.unit} first (rail median {fmt_value(r.median)}), "
                 f"{fmt_value(r.value_again)} {r.unit} again "
                 + (f"(references beside it {fmt_value(r.reference)}, {int(r.references)} values)" if r.like
                    else "(no references beside it: against the rail median)")
                 for r in g[g["bad"]].head(4).itertuples()]
        again = (f"{fmt_value(h['value_again'])} {h['unit']} measured again, as the pairs that screened clean "
                 f"measured beside it ({fmt_value(h['reference'])} {h['unit']})" if h["like"] else
                 f"{fmt_value(h['value_again'])} {h['unit']} measured again")
        out.append(make_finding(
            severity="warn", scope="link", node=str(u), rail=int(rail), peer=str(v), suite=suite,
            metric=str(h["metric"]), value=float(h["value"]), expected=float(h["median"]), unit=h["unit"], size=size,
            kind="transient", evidence=lines, transient=True,
            message=(f"link {u} <-> {v} on rail {int(rail)}: {catalog.label(suite, str(h['metric']))}{where} "
                     f"{fmt_value(h['value'])} {h['unit']} in the scheduled rounds, {again}: transient "
                     f"(congestion or a passing stall, not reproduced; nothing to drain)")))
    return out
