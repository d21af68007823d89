"""A night judged against its history: drift, intermittent, recovered and fleet-trend findings.

- drift: a link's value tonight against the pinned reference run and against the median of the last
  K accepted nights (history.window), each divided by the fleet's median ratio first (its rail's
  where the rail moved as a plane beyond history.trend_tolerance), and worse than it by itself by the
  tolerance too (a steady link in a plane that got better has not drifted), so that a rail
  or the fleet moving together (machine speed, firmware) is the fleet trend's business and not every
  link's; beyond history.drift_tolerance it drifts (and beyond the link's own noise, noise_z robust
  standard deviations, once 3 nights are in the window), beyond twice it fails once it has held
  history.drift_nights in a row (warns before: one night's stall is routine at scale). The drifted links are
  localized like any other (link, NIC, node, rail).
- intermittent: findings on N of the last M nights (history.intermittent_nights / _window), with a
  clean night between, tonight included; it fails even on a night the part passes. A node lost during
  the run (analysis.lost) tonight and on another of the last M nights, complete or not, is intermittent
  too.
- recovered: a node, NIC or link that failed the night before and passes tonight (a warning: resume it).
- trend: a rail plane's or the fleet's median against the pinned reference and the rolling median,
  beyond history.trend_tolerance (a warning: a change, not a part).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ..analysis.finding import make_finding
from ..analysis.lost import KIND as LOST_KIND
from ..analysis.localize import localize
from ..records.naming import natural_key
from ..rules import catalog, judge
from ..rules.profile import Profile
from .components import Name, finding_name, finding_subject
from .store import HISTORY_KINDS, Store

SERIES_SHOWN = 10  # nights of a series in a finding's evidence line


@dataclass
class Reference:
    pinned: dict | None        # the pinned night (None: none pinned, or tonight is it)
    rolling: list[dict]        # the last K accepted nights before tonight, oldest first
    window: list[dict]         # the last M - 1 complete nights before tonight (intermittent)
    previous: dict | None      # the last complete night before tonight (recovered)
    held: list[dict]           # the last drift_nights - 1 complete nights before tonight (a drift that fails)


def references(store: Store, tonight: dict, profile: Profile) -> Reference:
    nights = store.nights()
    before = nights[(nights["started"] < tonight["started"]) |
                    ((nights["started"] == tonight["started"]) & (nights["id"] < tonight["id"]))]
    rows = before.to_dict("records")
    pinned = store.pinned()
    if pinned and pinned["id"] == tonight["id"]:
        pinned = None
    with_values = [r for r in rows if r["accepted"] and r["keys"]]
    complete = [r for r in rows if r["complete"]]
    k, m = profile.get("history.window"), profile.get("history.intermittent_window")
    held = profile.get("history.drift_nights") - 1
    return Reference(pinned, with_values[-k:], complete[-(m - 1):], complete[-1] if complete else None,
                     complete[-held:] if held else [])


def check_night(store: Store, tonight: dict, profile: Profile) -> tuple[list[dict], Reference]:
    """The night's findings against history, most severe first, each with its series."""
    ref = references(store, tonight, profile)
    out = _drift(store, tonight, ref, profile)
    out += _trend(store, tonight, ref, profile)
    flapping = _intermittent(store, tonight, ref, profile) + _lost_again(store, tonight, profile)
    out += flapping
    out += _recovered(store, tonight, ref, {f["subject"] for f in flapping})
    for f in out:
        f.setdefault("subject", finding_subject(f))
    return sorted(out, key=lambda f: (f["severity"] != "fail", f["kind"], f["subject"])), ref


def accepted(tonight: dict, findings: list[dict], uneven: Sequence[dict] = ()) -> bool:
    """Whether tonight becomes a reference (the rolling median's): it passed, its check failed no
    part, and no rail plane was uneven (uneven_planes). A drift that only warned does not keep it out:
    one link's stall must not keep a night of thousands of links out of every link's rolling median,
    which shrugs one stalled night off; a plane stalled for the night moves every link on it."""
    return tonight["verdict"] == "pass" and not uneven and not any(
        f["kind"] in ("drift", "intermittent") and f["severity"] == "fail" for f in findings)


def uneven_planes(store: Store, night: dict, profile: Profile, pinned: dict | None = None) -> list[dict]:
    """The rail planes of `night` worse than its other planes' median (the headline metric's plane
    medians) beyond history.trend_tolerance, as fields: rail, metric, value, others, worse. With a
    pinned night, against the gap that night had (planes that differ by design are not uneven); a
    plane stalled for a night (a host, a switch, the other jobs) is, and such a night is a reference
    for nothing: every link on the plane would be held to its own low."""
    suite, name = catalog.headline()
    metric = f"{suite}.{name}"
    trend = judge.Trend.of(profile, "history.trend_tolerance")
    higher = catalog.direction(suite, name) is not False
    f = store.fleet_series(metric)

    def ratios(night_id: int) -> dict[int, tuple[float, float, float]]:
        planes = f[(f["night"] == night_id) & (f["rail"] >= 0)].set_index("rail")["value"]
        out = {}
        for rail, value in planes.items():
            others = float(planes.drop(rail).median()) if len(planes) > 1 else float("nan")
            if others > 0 and value > 0:
                out[int(rail)] = (float(value), others, value / others if higher else others / value)
        return out

    base = ratios(pinned["id"]) if pinned and pinned["id"] != night["id"] else {}
    out = []
    for rail, (value, others, ratio) in ratios(night["id"]).items():
        worse = 1.0 - ratio / (base[rail][2] if rail in base else 1.0)
        if trend.beyond(worse):
            out.append({"rail": rail, "metric": metric, "value": value, "others": others, "worse": worse,
                        "pinned": rail in base})
    return out


def uneven_text(plane: dict) -> str:
    return (f"rail {plane['rail']}'s median {plane['metric']} was {plane['worse']:.0%} worse than the other rails' "
            f"({plane['value']:.4g} against {plane['others']:.4g}"
            + (", beyond the gap on the pinned night" if plane["pinned"] else "") + ")")


# ---- series as evidence ---------------------------------------------------------------------

def _day(started: str) -> str:
    return str(started)[:10]


def series_of(store: Store, name: Name | None, metric: str | None, tonight: dict, ref: Reference) -> list[dict]:
    """The component's series up to tonight (the pinned night first when it is older), as fields;
    none for a switch or uplink (name None)."""
    if name is None:
        return []
    s = store.series(name, metric)
    if s.empty:
        return []
    s = s[(s["started"] < tonight["started"]) | (s["night"] == tonight["id"])]
    shown = s.tail(SERIES_SHOWN)
    if ref.pinned is not None and ref.pinned["id"] not in set(shown["night"]):
        shown = pd.concat([s[s["night"] == ref.pinned["id"]], shown])
    return [{"date": _day(r.started), "run_id": r.run_id, "value": None if r.value != r.value else float(r.value),
             "pinned": bool(r.pinned), "tonight": r.night == tonight["id"], "verdict": r.verdict}
            for r in shown.itertuples()]


def series_text(series: list[dict], unit: str = "") -> str:
    parts = []
    for p in series:
        mark = " (pinned)" if p["pinned"] else " (tonight)" if p["tonight"] else ""
        parts.append(f"{p['date']} {'-' if p['value'] is None else format(p['value'], '.4g')}{mark}")
    return "series: " + ", ".join(parts) + (f" {unit}" if unit else "")


# ---- drift ------------------------------------------------------------------------------------

def nic_table(store: Store) -> tuple[dict[int, str], dict[int, int]]:
    rows = store.db.execute("SELECT id, node, rail FROM components WHERE kind='nic'").fetchall()
    return {i: n for i, n, _ in rows}, {i: r for i, _, r in rows}


def _nic_medians(ratio: np.ndarray, ends: tuple[np.ndarray, np.ndarray]) -> pd.Series:
    """Each NIC's median ratio over its links (index: the NIC's component id)."""
    both = pd.Series(np.concatenate([ratio, ratio]), index=np.concatenate(ends))
    return both[np.isfinite(both.to_numpy())].groupby(level=0).median()


def _rail_relative(ratio: np.ndarray, rails: np.ndarray, ends: tuple[np.ndarray, np.ndarray],
                   rail_of: np.ndarray, plane_tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Each link's ratio over the fleet's median ratio, or over its rail's where that rail moved as a
    plane (beyond plane_tol from the fleet: the trend finding's business, not every link's); and the
    robust spread of those (1.4826 MAD, pooled over the fleet): how much a healthy link moves between
    these two nights. The medians are of the NICs' medians, not of the links: on a small cluster one
    NIC is in half its rail's links and would move their median (and MAD) with it."""
    out = np.full(len(ratio), np.nan)
    nics = _nic_medians(ratio, ends)
    if nics.empty:
        return out, np.zeros(len(ratio))
    fleet = float(nics.median())
    planes = nics.groupby(rail_of[nics.index.to_numpy()]).median()
    for r in np.unique(rails):
        on = rails == r
        plane = float(planes.get(r, np.nan))
        moved = np.isfinite(plane) and judge.Trend(plane_tol).beyond(abs(plane / fleet - 1.0))
        out[on] = ratio[on] / (plane if moved else fleet)
    finite = np.isfinite(out)
    spread = 1.4826 * np.median(np.abs(out[finite] - 1.0)) if finite.any() else 0.0
    return out, np.full(len(ratio), spread)


def _median0(matrix: np.ndarray) -> np.ndarray:
    """np.nanmedian(matrix, axis=0), the same values ~3x faster when nothing is missing (every link
    measured every night, the usual case: 4.2 M columns at 1,024 x 8)."""
    return np.nanmedian(matrix, axis=0) if np.isnan(matrix).any() else np.median(matrix, axis=0)


def drift_scan(store: Store, tonight: dict, ref: Reference, metric: str, higher: bool, tol: float,
               noise_z: float, rails_of: dict[int, int], plane_tol: float | None = None) -> pd.DataFrame:
    """Per link of tonight: value, pinned, rolling (median), loss against each (fraction, + is worse,
    the fleet's movement, or a rail plane's beyond plane_tol (default: tol), divided out), the gate
    it was held to, and whether it drifted."""
    col = store.column(tonight, metric)
    if col is None:
        return pd.DataFrame()
    keys, now = np.asarray(col[0]), np.asarray(col[1], dtype=np.float64)
    lo, hi = (keys >> 32).astype(np.int64), (keys & 0xFFFFFFFF).astype(np.int64)
    lookup = np.zeros(max(rails_of) + 1 if rails_of else 1, dtype=np.int64)
    for i, r in rails_of.items():
        lookup[i] = r
    rails = lookup[lo]
    sign = 1.0 if higher else -1.0

    def loss_against(reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(divide="ignore", invalid="ignore"):
            rel, spread = _rail_relative(now / reference, rails, (lo, hi), lookup,
                                         tol if plane_tol is None else plane_tol)
        return sign * (1.0 - rel), spread

    nothing = np.full(len(keys), np.nan)
    pinned = store.aligned(keys, ref.pinned, metric).astype(np.float64) if ref.pinned else nothing
    loss_p, fleet_p = loss_against(pinned) if ref.pinned else (nothing, np.zeros(len(keys)))
    if ref.rolling:
        matrix = np.vstack([store.aligned(keys, night, metric) for night in ref.rolling]).astype(np.float64)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a link no accepted night measured: NaN
            rolling = _median0(matrix)
            # the link's own noise from night-to-night steps (a steady drift has steady steps: no noise)
            if len(ref.rolling) >= 3:
                steps = np.diff(matrix, axis=0)
                mad = _median0(np.abs(steps - _median0(steps)))
                spread = 1.4826 * mad / np.sqrt(2) / rolling
            else:
                spread = np.zeros(len(keys))
        loss_r, fleet_r = loss_against(rolling)
    else:
        rolling, loss_r, spread, fleet_r = nothing, nothing, np.zeros(len(keys)), np.zeros(len(keys))
    # The tolerance widened, in quadrature, by noise_z times the noise of the comparison: the rail's
    # healthy links' spread between the two nights, and the link's own history's (judge.Drift).
    rule = judge.Drift(tol, noise_z)
    gate_p, gate_r = rule.gate(fleet_p, spread), rule.gate(fleet_r, spread)
    worst = np.fmax(loss_p, loss_r)
    gate = np.where(np.nan_to_num(loss_p, nan=-np.inf) >= np.nan_to_num(loss_r, nan=-np.inf), gate_p, gate_r)
    # A drift is also a link worse than the reference by itself, beyond tol: dividing out a plane that
    # moved *better* (or a reference night stalled on most of a rail) must not fail a link that held steady.
    with np.errstate(divide="ignore", invalid="ignore"):
        own_p, own_r = sign * (1.0 - now / pinned), sign * (1.0 - now / rolling)
    drifted = (rule.drifted(loss_p, gate_p, own_p) | rule.drifted(loss_r, gate_r, own_r)) & np.isfinite(now)
    return pd.DataFrame({"key": keys, "rail": rails, "value": now, "pinned": pinned, "rolling": rolling,
                         "loss_pinned": loss_p, "loss_rolling": loss_r, "gate": gate, "loss": worst,
                         "drifted": drifted})


def _drift(store: Store, tonight: dict, ref: Reference, profile: Profile) -> list[dict]:
    if ref.pinned is None and not ref.rolling:
        return []
    from .night import metrics
    tol, noise_z = profile.get("history.drift_tolerance"), profile.get("history.noise_z")
    stored = json.loads(tonight.get("metrics") or "{}")
    node_of, rails_of = nic_table(store)
    own = _part_findings(store, [tonight["id"]])
    named = set(own.loc[own["severity"] == "fail", "subject"])  # failing tonight already: a drift adds nothing
    # A drift fails once it has held history.drift_nights in a row: each earlier night drifted on a part
    # that shares a NIC with it (a link one night, its NIC the next); before that it warns.
    rule = judge.Drift.of(profile)
    before = [_drifted_on(store, night) for night in ref.held]
    by_subject: dict[str, dict] = {}
    for suite, metric, higher in metrics():
        key = f"{suite}.{metric}"
        if key not in stored:
            continue
        scan = drift_scan(store, tonight, ref, key, higher, tol, noise_z, rails_of,
                          plane_tol=profile.get("history.trend_tolerance"))
        if scan.empty or not scan["drifted"].any():
            continue
        keys = scan["key"].to_numpy()
        lo, hi = keys >> 32, keys & 0xFFFFFFFF
        names = sorted({node_of[int(i)] for i in np.unique(np.concatenate([lo, hi]))}, key=natural_key)
        code = {n: i for i, n in enumerate(names)}
        s = np.array([code[node_of[int(i)]] for i in lo], dtype=np.int64)
        d = np.array([code[node_of[int(i)]] for i in hi], dtype=np.int64)
        measured = pd.DataFrame({"rail": scan["rail"].to_numpy(), "u": np.minimum(s, d), "v": np.maximum(s, d)})
        x = scan[scan["drifted"].to_numpy()]
        on = scan["drifted"].to_numpy()
        expected = np.where(np.isfinite(x["loss_pinned"]) & (x["loss_pinned"] >= np.nan_to_num(x["loss_rolling"],
                            nan=-np.inf)), x["pinned"], x["rolling"])
        bad = pd.DataFrame({"rail": x["rail"].to_numpy(), "s": s[on], "d": d[on], "metric": metric,
                            "size": stored[key].get("size"), "value": x["value"].to_numpy(), "expected": expected,
                            "median": expected, "bound": np.nan, "worse": x["loss"].to_numpy(),
                            "grade": rule.fails(x["loss"].to_numpy()),
                            "unit": stored[key].get("unit") or "",
                            "how": None, "basis": "history"})
        bad["size"] = bad["size"].astype(float)
        for f in localize(bad, measured, names, profile, "drift"):
            f["suite"] = suite
            f["subject"] = subject = finding_subject(f)
            if subject in named:
                continue
            held = _held_nights(f, before)
            if f["severity"] == "fail" and not rule.persisted(held):
                f["severity"] = "warn"
                f["message"] += (f" (night {held + 1} of {rule.nights} in a row beyond the tolerance: it fails "
                                 "if it holds; one night can be a passing stall)")
            if subject in by_subject:  # one finding per part: its most telling metric, the others as evidence
                by_subject[subject]["evidence"].append(f["message"])
                if f["severity"] == "fail":
                    by_subject[subject]["severity"] = "fail"
                continue
            f["series"] = series_of(store, finding_name(f), key, tonight, ref)
            f["evidence"] = [series_text(f["series"], f.get("unit") or ""), *_references(ref), *f["evidence"]]
            by_subject[subject] = f
    return list(by_subject.values())


def _drifted_on(store: Store, night: dict) -> pd.DataFrame:
    f = store.findings([night["id"]])
    return f[(f["kind"] == "drift") & f["scope"].isin(PART_SCOPES)]


def _held_nights(f: dict, before: list[pd.DataFrame]) -> int:
    """How many of the nights before tonight (`before`, oldest first), the last ones in a row, drifted
    on a part sharing a NIC with f's (a node: any of its NICs; a rail plane: any part on its rail)."""
    rail, ends = f.get("rail"), {f.get("node"), f.get("peer")} - {None}
    held = 0
    for night in reversed(before):
        rails = pd.to_numeric(night["rail"], errors="coerce").to_numpy(float)
        on_rail = np.ones(len(night), bool) if rail is None else np.isnan(rails) | (rails == rail)
        shared = (night["node"].isin(ends) | night["peer"].isin(ends) | (night["scope"] == "rail")).to_numpy()
        if f.get("scope") == "rail":
            shared[:] = True
        if not (on_rail & shared).any():
            break
        held += 1
    return held


def _references(ref: Reference) -> list[str]:
    lines = []
    if ref.pinned:
        lines.append(f"pinned reference: {ref.pinned['run_id']} ({_day(ref.pinned['started'])})")
    if ref.rolling:
        lines.append(f"rolling median of {len(ref.rolling)} accepted night(s): "
                     f"{_day(ref.rolling[0]['started'])} .. {_day(ref.rolling[-1]['started'])}")
    return lines


# ---- fleet trend -----------------------------------------------------------------------------

def _trend(store: Store, tonight: dict, ref: Reference, profile: Profile) -> list[dict]:
    from .night import metrics
    tol = profile.get("history.trend_tolerance")
    if ref.pinned is None and not ref.rolling:
        return []
    fleet = pd.read_sql_query("SELECT * FROM fleet", store.db)
    ids = [tonight["id"]] + ([ref.pinned["id"]] if ref.pinned else []) + [n["id"] for n in ref.rolling]
    fleet = fleet[fleet["night"].isin(ids)]
    stored = json.loads(tonight.get("metrics") or "{}")
    out = []
    for suite, metric, higher in metrics():
        key = f"{suite}.{metric}"
        f = fleet[fleet["metric"] == key]
        moved = []
        for rail, g in f.groupby("rail"):
            by = dict(zip(g["night"], g["value"]))
            now = by.get(tonight["id"])
            if now is None:
                continue
            refs = []
            if ref.pinned and ref.pinned["id"] in by:
                refs.append(("the pinned reference", by[ref.pinned["id"]]))
            rolling = [by[n["id"]] for n in ref.rolling if n["id"] in by]
            if rolling:
                refs.append((f"the median of {len(rolling)} accepted night(s)", float(np.median(rolling))))
            changes = [(what, v, (now - v) / v * (1 if higher else -1)) for what, v in refs if v]
            beyond = [c for c in changes if judge.Trend(tol).beyond(abs(c[2]))]
            if beyond:
                moved.append((int(rail), now, max(beyond, key=lambda c: abs(c[2]))))
        rails = [m for m in moved if m[0] >= 0]
        whole = [m for m in moved if m[0] < 0]
        all_rails = sorted(f.loc[f["rail"] >= 0, "rail"].unique())
        if whole and len(rails) == len(all_rails):
            rails = []  # every rail moved with the fleet: one finding says it
        for rail, now, (what, was, change) in whole + rails:
            scope = "cluster" if rail < 0 else "rail"
            where = "the fleet" if rail < 0 else f"rail {rail}'s plane"
            word = "better" if change > 0 else "worse"
            unit = stored.get(key, {}).get("unit") or ""
            subject = "fleet" if rail < 0 else f"rail{rail}"
            msg = (f"{where} median {metric} moved {abs(change):.0%} {word} against {what} "
                   f"({was:.4g} -> {now:.4g} {unit}): a change to the whole {('fleet' if rail < 0 else 'plane')} "
                   "(firmware, driver, configuration, switch), not one part")
            fnd = make_finding(severity="warn", scope=scope, rail=None if rail < 0 else rail, metric=metric,
                               value=now, expected=was, message=msg, kind="trend", unit=unit, suite=suite,
                               size=stored.get(key, {}).get("size"))
            fnd["subject"] = subject
            fnd["series"] = series_of(store, Name("fleet") if rail < 0 else Name("rail", rail=int(rail)), key,
                                      tonight, ref)
            fnd["evidence"] = [series_text(fnd["series"], unit), *_references(ref)]
            out.append(fnd)
    return out


# ---- intermittent, recovered -------------------------------------------------------------------

def _part_findings(store: Store, nights: list[int]) -> pd.DataFrame:
    f = store.findings(nights)
    return f[~f["kind"].isin(HISTORY_KINDS) & f["severity"].isin(["fail", "warn"]) & (f["subject"] != "fleet")]


PART_SCOPES = ("node", "nic", "link", "rail")  # what has a series of its own (a switch is the network's ticket)


def _scope_fields(row) -> dict | None:
    """A stored finding's component as a finding's fields (None: a switch, an uplink or the fleet)."""
    if row["scope"] not in PART_SCOPES:
        return None
    rail = row["rail"]
    return {"scope": row["scope"], "node": row["node"] or None, "peer": row["peer"] or None,
            "rail": None if rail is None or pd.isna(rail) else int(rail)}


def _intermittent(store: Store, tonight: dict, ref: Reference, profile: Profile) -> list[dict]:
    if not tonight["complete"]:
        return []
    n_min = profile.get("history.intermittent_nights")  # the window of M nights is ref.window
    window = ref.window + [tonight]
    ids = [w["id"] for w in window]
    found = _part_findings(store, ids)
    out = []
    for subject, g in found.groupby("subject"):
        fields = _scope_fields(g.iloc[0])
        if fields is None:
            continue  # a switch or uplink: a ticket for the network, its own finding says so
        bad_nights = set(g["night"])
        flags = [w["id"] in bad_nights for w in window]
        first = flags.index(True)
        clean_between = any(not x for x in flags[first:]) and sum(flags) >= n_min
        if not clean_between:
            continue
        days = [f"{_day(w['started'])} {'FAIL' if x else 'pass'}" + (" (tonight)" if w["id"] == tonight["id"] else "")
                for w, x in zip(window, flags)]
        tonight_bad = flags[-1]
        what = {"link": f"link {fields['node']} <-> {fields['peer']} on rail {fields['rail']}",
                "nic": f"{fields['node']}'s NIC on rail {fields['rail']}", "node": str(fields["node"]),
                "rail": f"rail {fields['rail']}'s plane"}.get(fields["scope"], subject)
        action = {"nic": f": drain {fields['node']} and replace the NIC or cable rather than resume it",
                  "node": f": drain {fields['node']} and repair it rather than resume it",
                  "link": ": replace the cable or the ports rather than reseat them"}.get(fields["scope"], "")
        msg = (f"{what} is intermittent: findings on {sum(flags)} of the last {len(window)} nights"
               f"{', passing tonight' if not tonight_bad else ''}{action}")
        kinds = sorted(set(g["kind"].dropna()))
        fnd = make_finding(severity="fail", message=msg, kind="intermittent", metric=None,
                           evidence=["nights: " + ", ".join(days),
                                     f"finding kinds: {', '.join(kinds)}",
                                     *list(dict.fromkeys(g.sort_values("night")["message"]))[-2:]], **fields)
        out.append(_flagged(fnd, subject, window, flags, tonight))
    return out


def _flagged(fnd: dict, subject: str, window: list[dict], flags: list[bool], tonight: dict) -> dict:
    """An intermittent finding with its subject and its series: 1 on each night of the window it was flagged."""
    fnd["subject"] = subject
    fnd["series"] = [{"date": _day(w["started"]), "run_id": w["run_id"], "value": float(x),
                      "pinned": bool(w.get("pinned")), "tonight": w["id"] == tonight["id"],
                      "verdict": w["verdict"]} for w, x in zip(window, flags)]
    return fnd


def _lost_again(store: Store, tonight: dict, profile: Profile) -> list[dict]:
    """A node lost tonight (analysis.lost: a finding of kind "lost") and on another of the last M nights,
    complete or not (one that lost a node is incomplete unless a relaunch on the others finished it): it
    fails as intermittent, to be repaired rather than resumed."""
    lost = store.findings([tonight["id"]])
    lost = lost[lost["kind"] == LOST_KIND]
    if lost.empty:
        return []
    nights = store.nights()
    before = nights[(nights["started"] < tonight["started"]) |
                    ((nights["started"] == tonight["started"]) & (nights["id"] < tonight["id"]))]
    window = before.to_dict("records")[-(profile.get("history.intermittent_window") - 1):] + [tonight]
    found = store.findings([w["id"] for w in window])
    found = found[found["kind"] == LOST_KIND]
    out = []
    for subject, g in found.groupby("subject"):
        fields = _scope_fields(g.iloc[0])
        if subject not in set(lost["subject"]) or g["night"].nunique() < 2 or fields is None:
            continue
        flags = [w["id"] in set(g["night"]) for w in window]
        node = fields["node"]
        fnd = make_finding(severity="fail", kind="intermittent", metric=None, evidence=[
            "nights: " + ", ".join(f"{_day(w['started'])} {'LOST' if x else 'kept'}" for w, x in zip(window, flags)),
            *list(dict.fromkeys(g.sort_values("night")["message"]))[-2:]],
            message=f"{node} was lost on {sum(flags)} of the last {len(window)} nights: drain {node} and repair it "
                    f"rather than resume it", **fields)
        out.append(_flagged(fnd, subject, window, flags, tonight))
    return out


def _recovered(store: Store, tonight: dict, ref: Reference, flapping: set[str]) -> list[dict]:
    prev = ref.previous
    if prev is None or not tonight["complete"]:
        return []
    before = _part_findings(store, [prev["id"]])
    before = before[(before["severity"] == "fail") & before["scope"].isin(["node", "nic", "link"])]
    now = set(_part_findings(store, [tonight["id"]])["subject"])
    measured = _measured_nodes(store, tonight)
    out = []
    for subject, g in before.groupby("subject"):
        if subject in now or subject in flapping:
            continue
        fields = _scope_fields(g.iloc[0])
        ends = [x for x in (fields["node"], fields["peer"]) if x]
        if not all(e in measured for e in ends):
            continue  # not measured tonight: it has not passed
        resume = (f"; if {fields['node']} was drained: scontrol update NodeName={fields['node']} State=RESUME"
                  if fields["scope"] in ("node", "nic") else "")
        msg = f"{subject} failed on {_day(prev['started'])} and passes tonight: recovered{resume}"
        fnd = make_finding(severity="warn", message=msg, kind="recovered", metric=None,
                           evidence=[f"{_day(prev['started'])}: {m}" for m in g["message"].head(3)], **fields)
        fnd["subject"] = subject
        out.append(fnd)
    return out


def _measured_nodes(store: Store, tonight: dict) -> set[str]:
    rows = store.db.execute("SELECT DISTINCT c.node FROM summary s JOIN components c ON c.id = s.component "
                            "WHERE s.night=? AND c.kind='node'", (tonight["id"],)).fetchall()
    return {r[0] for r in rows}
