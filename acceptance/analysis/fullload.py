"""Under full load, then one rail at a time: a node whose NICs are slow only when they all run together.

With every rail at once (run.rail_mode "concurrent") the scheduled rounds load every NIC of a node, as a
training step does. A node whose shared path (PCIe switch or root port, NUMA placement, power, cooling)
gives way only then is slow on most of its rails, and the bandwidth driver measures it once more
(drivers.p2p PairwiseDriver.load_check): against nodes that were clean on every rail, first with all
its rails at once (records of phase "full"), then one rail at a time while the other rails wait
(phase "alone"). Its partners differ on every rail, so the subject is the node that appears on more
than one rail of those records (drivers.confirm.load_partners).

Those records are not fleet evidence (they are a handful of pairs measured apart from the schedule):
they leave the detectors and are judged here, at the largest size measured, against their rail's
median of the same suite, metric, size and op. A subject is named, a failing node finding with its
drain line, when on at least half of its rails (and two) its typical value at full load is at
analysis.nic_fail_ratio of the rail's median or worse (or failed a bound) and its value alone is not.
A node slow alone too is left to the ordinary findings (the confirmation shows it); one fast at full
load here was a false suspect and needs nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..rules import catalog, judge
from ..rules.profile import Profile
from .base import codes_of
from .finding import make_finding
from .wording import fmt_value

FULL, ALONE = "full", "alone"
GROUP = ["suite", "metric", "size", "rail", "op"]


def split(ev: pd.DataFrame, profile: Profile) -> tuple[pd.DataFrame, list[dict]]:
    """(the records without the load check's measurements, the nodes named slow only under full load)."""
    if "phase" not in ev.columns or not len(ev):
        return ev, []
    full, alone = codes_of(ev["phase"], FULL), codes_of(ev["phase"], ALONE)
    if not (full.any() or alone.any()):
        return ev, []
    rows = np.flatnonzero(full | alone)
    judged = pd.MultiIndex.from_arrays([ev["suite"].take(rows).astype(object).to_numpy(),
                                        ev["metric"].take(rows).astype(object).to_numpy()]).isin(
        catalog.with_role("outlier"))
    load = rows[judged]  # the data checks of the load check stay with the detectors
    keep = np.ones(len(ev), bool)
    keep[load] = False
    rest = ev.iloc[np.flatnonzero(keep)]
    checked = _frame(ev, load, full)
    # The reference rows: only the suites, metrics and sizes the load check measured (a run's records
    # are millions at scale; these are what the medians need).
    near = (rest["suite"].isin(checked["suite"].unique()) & rest["metric"].isin(checked["metric"].unique())
            & pd.to_numeric(rest["size"], errors="coerce").isin(checked["size"].unique())).to_numpy()
    return rest, _named(checked, _frame(rest, np.flatnonzero(near)), profile)


def explained(findings: list[dict], named: list[dict]) -> list[dict]:
    """`findings` without the NIC and node findings of a named node's suite and metric (the full-load
    finding says why those NICs are slow)."""
    if not named:
        return findings
    said = {(f["node"], f["suite"], f["metric"]) for f in named}
    return [f for f in findings if not (f["scope"] in ("nic", "node") and (f["node"], f["suite"], f["metric"]) in said)]


def _frame(ev: pd.DataFrame, rows: np.ndarray, full: np.ndarray | None = None) -> pd.DataFrame:
    out = pd.DataFrame({c: ev[c].take(rows).astype(object).to_numpy() for c in ["suite", "metric", "src", "dst", "op"]})
    for c in ("size", "rail"):
        out[c] = pd.to_numeric(pd.Series(ev[c].take(rows).to_numpy()), errors="coerce")
    out["value"] = ev["value"].to_numpy(np.float64)[rows]
    out["fail"] = codes_of(ev["verdict"], "fail")[rows]
    out["unit"] = ev["unit"].take(rows).astype(object).to_numpy()
    if full is not None:
        out["full"] = full[rows]
    return out.fillna({"op": ""})


def _named(load: pd.DataFrame, rest: pd.DataFrame, profile: Profile) -> list[dict]:
    rule = judge.Outlier(profile)
    medians = rest.groupby(GROUP, dropna=False)["value"].median().rename("median").reset_index()
    out = []
    for (suite, metric, op), g in load.groupby(["suite", "metric", "op"], sort=True):
        higher = catalog.direction(suite, metric) is not False
        g = g[g["size"] == g["size"].max()].merge(medians, on=GROUP, how="left")
        with np.errstate(divide="ignore", invalid="ignore"):
            g["ratio"] = g["value"] / g["median"] if higher else g["median"] / g["value"]
        ends = pd.concat([g.assign(node=g["src"]), g.assign(node=g["dst"])])
        rails = ends.groupby("node")["rail"].nunique()
        for node in sorted(rails[rails > 1].index, key=str):
            finding = _judged(suite, metric, str(node), ends[ends["node"] == node], rule)
            if finding is not None:
                out.append(finding)
    return out


def _judged(suite: str, metric: str, node: str, rows: pd.DataFrame, rule: judge.Outlier) -> dict | None:
    """The failing finding for one subject, or None when it is not slow only under full load."""
    per_rail = []
    for rail, r in rows.groupby("rail", sort=True):
        full, alone = r[r["full"]], r[~r["full"]]
        if full.empty or alone.empty:
            continue
        f_ratio, a_ratio = float(np.nanmedian(full["ratio"])), float(np.nanmedian(alone["ratio"]))
        slow = bool(full["fail"].any()) or bool(rule.halved(np.array([f_ratio]))[0])
        passes = not alone["fail"].any() and not rule.halved(np.array([a_ratio]))[0]
        per_rail.append((int(rail), slow and passes, f_ratio, a_ratio, float(np.nanmedian(full["value"])),
                         float(np.nanmedian(alone["value"])), float(full["median"].iloc[0])))
    hits = [p for p in per_rail if p[1]]
    if len(hits) < max(2, -(-len(per_rail) // 2)):
        return None
    r0 = rows.iloc[0]
    unit, size = r0["unit"], int(r0["size"]) if r0["size"] == r0["size"] else None
    at = f" at {size} B" if size is not None else ""
    f_typ = float(np.median([p[2] for p in hits]))
    a_typ = float(np.median([p[3] for p in hits]))
    evidence = [f"rail {rail}: {fmt_value(fv)} {unit} with every rail busy, {fmt_value(av)} {unit} alone "
                f"(rail median {fmt_value(med)} {unit}{at})" for rail, _, _, _, fv, av, med in hits]
    rail_list = ", ".join(str(p[0]) for p in hits)
    return make_finding(
        severity="fail", scope="node", node=node, suite=suite, metric=metric, kind="full_load",
        value=float(np.median([p[4] for p in hits])), expected=float(np.median([p[6] for p in hits])),
        unit=unit, size=size, evidence=evidence,
        message=(f"{node}: {catalog.label(suite, metric)}{at} falls under full load: {f_typ:.2g}x of its "
                 f"rails' median with all {len(per_rail)} NICs busy, {a_typ:.2g}x one rail at a time (rails "
                 f"{rail_list}): the node's shared path (PCIe, NUMA placement, power or cooling) gives way when "
                 f"every NIC runs: drain {node}"))
