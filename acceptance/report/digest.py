"""What an operator reads first, at any fleet size: findings split into confirmed fails, warnings and
transients, worst first; their counts by scope and rail; what the run measured (rail mode, schedule) and
what a PASS rules out (the rules' power).

Plain Python on the findings list and run.json (no pandas, no matplotlib), so the terminal summary
(acceptance.cli.postrun) and the HTML report say the same things in the same order.
"""
from __future__ import annotations

import math
from collections import Counter
from numbers import Integral

from ..runtime.schedule import SCREEN, parse_pattern
from ..rules.units import format_size

# Scopes widest first: a rail plane or switch before the one NIC or link.
SCOPE_ORDER = ("cluster", "rail", "switch", "uplink", "node", "nic", "link")
# How a power rule (Analysis.power "rule") or a finding's scope reads in a sentence.
SCOPE_WORDS = {"nic": "NIC", "link": "link", "node": "node", "rail": "rail plane", "switch": "switch",
               "uplink": "uplink", "cluster": "cluster", "nic-direction": "NIC in one direction"}
NO_RAIL = None


def is_transient(finding: dict) -> bool:
    """A suspect that did not reproduce on confirmation: never a fail, never drained (counted apart)."""
    return finding.get("transient") is True


def _deviation(finding: dict) -> float:
    """How far the value is from what it should have been, as |log(value / expected)|; infinite when the
    finding has no such pair (a failed test, an error count against 0): those are not mild."""
    v, e = finding.get("value"), finding.get("expected")
    try:
        v, e = float(v), float(e)
    except (TypeError, ValueError):
        return math.inf
    if not (math.isfinite(v) and math.isfinite(e)) or v <= 0 or e <= 0:
        return math.inf
    return abs(math.log(v / e))


def worst_first(findings: list[dict]) -> list[dict]:
    """Widest scope first (a rail plane or a switch touches many nodes; a node or NIC is a drain), then the
    largest deviation; ties keep the analysis' order."""
    keyed = sorted(((scope_rank(f.get("scope")), -_deviation(f), i) for i, f in enumerate(findings)))
    return [findings[i] for _, _, i in keyed]


def split(findings: list[dict]) -> dict[str, list[dict]]:
    """confirmed (severity fail, not transient; worst first), warnings (the rest that stand; worst first),
    transient (analysis order)."""
    transient = [f for f in findings if is_transient(f)]
    standing = [f for f in findings if not is_transient(f)]
    return {"confirmed": worst_first([f for f in standing if f.get("severity") == "fail"]),
            "warnings": worst_first([f for f in standing if f.get("severity") != "fail"]),
            "transient": transient}


def _rail(finding: dict):
    r = finding.get("rail")
    try:
        return NO_RAIL if r is None or (isinstance(r, float) and math.isnan(r)) else int(r)
    except (TypeError, ValueError):
        return NO_RAIL


def scope_rank(scope) -> tuple:
    return (SCOPE_ORDER.index(scope), "") if scope in SCOPE_ORDER else (len(SCOPE_ORDER), str(scope))


def counts(findings: list[dict], rails=()) -> dict:
    """Findings by scope (rows, widest first) and rail (columns: `rails` and every rail a finding names,
    then None for findings without a rail): {"rails": [...], "scopes": [...], "cells": {(scope, rail):
    {"fail": n, "warn": n}}, "scope_totals": {scope: {...}}, "rail_totals": {rail: {...}}, "total":
    {...}, "transient": {rail: n}, "transient_total": n}. Transients are counted apart, never as a
    warning or a fail."""
    cells: Counter = Counter()
    transient: Counter = Counter()
    for f in findings:
        rail = _rail(f)
        if is_transient(f):
            transient[rail] += 1
            continue
        sev = "fail" if f.get("severity") == "fail" else "warn"
        cells[(str(f.get("scope") or "?"), rail, sev)] += 1
    known = {int(r) for r in rails if isinstance(r, Integral) and not isinstance(r, bool)}
    known |= {r for (_, r, _) in cells if r is not NO_RAIL} | {r for r in transient if r is not NO_RAIL}
    columns = sorted(known)
    if any(r is NO_RAIL for (_, r, _) in cells) or NO_RAIL in transient:
        columns.append(NO_RAIL)
    scopes = sorted({s for (s, _, _) in cells}, key=scope_rank)

    def pair(keys) -> dict:
        return {"fail": sum(cells[(s, r, "fail")] for s, r in keys), "warn": sum(cells[(s, r, "warn")] for s, r in keys)}

    return {"rails": columns, "scopes": scopes,
            "cells": {(s, r): pair([(s, r)]) for s in scopes for r in columns},
            "scope_totals": {s: pair([(s, r) for r in columns]) for s in scopes},
            "rail_totals": {r: pair([(s, r) for s in scopes]) for r in columns},
            "total": pair([(s, r) for s in scopes for r in columns]),
            "transient": {r: transient[r] for r in columns}, "transient_total": sum(transient.values())}


def rail_label(rail) -> str:
    return "no rail" if rail is NO_RAIL else f"rail {rail}"


# --- what the run measured, and what a PASS rules out ---------------------------------

def _screening(pattern) -> bool:
    try:
        return parse_pattern(str(pattern))[0] == SCREEN
    except ValueError:
        return False


def run_shape(run: dict) -> list[str]:
    """run.json's "rail_mode" and "schedule" in words; [] when the run records neither."""
    out = []
    mode = run.get("rail_mode")
    if mode == "concurrent":
        out.append("rails measured concurrently (every rank drove its own rail's NIC at once)")
    elif mode == "serial":
        out.append("rails measured one at a time (serial: a diagnosis mode; the NICs were not all loaded at once)")
    elif mode:
        out.append(f"rail mode {mode}")
    sched = run.get("schedule")
    if isinstance(sched, dict) and sched.get("pattern"):
        words = f"pair schedule {sched['pattern']}"
        parts = []
        if sched.get("rounds") is not None:
            parts.append(f"{sched['rounds']} round{'' if sched['rounds'] == 1 else 's'}")
        drawn = _screening(sched["pattern"])  # only screening draws its pairs
        if drawn and sched.get("tree_aware") is True:
            parts.append("pairs chosen from the switch tree")
        elif drawn and sched.get("tree_aware") is False:
            parts.append("random pairs")
        if drawn and sched.get("seed") is not None:
            parts.append(f"seed {sched['seed']}")
        if sched.get("requested") and sched["requested"] != sched["pattern"]:
            parts.append(f"{sched['requested']} chose it")
        out.append(words + (f" ({', '.join(parts)})" if parts else ""))
    return out


NEVER = 10.0  # a detectable change above 1000% is no guarantee at all: said so, not as a number


def pct(x) -> str:
    """0.12 -> "12%"; a detectable change beyond NEVER -> "over 1000%" (practically nothing ruled out)."""
    if x > NEVER:
        return f"over {100 * NEVER:.0f}%"
    return f"{100 * x:.0f}%" if x >= 0.01 else f"{100 * x:.1f}%"


def detectable(entry: dict) -> float | None:
    """An entry's smallest detectable slowdown (0.12 = 12%); None when the rule detects nothing."""
    try:
        d = float(entry.get("detectable"))
    except (TypeError, ValueError):
        return None
    return d if math.isfinite(d) and d > 0 else None


def _size_words(sizes: list) -> str:
    named = [format_size(int(s)) for s in sorted({s for s in sizes if isinstance(s, (int, float)) and s == s})]
    return " at " + (", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]) if named else ""


def _whats(keys: list[tuple]) -> str:
    """[(metric, size), ...] -> "bandwidth at 64KiB and 8MiB; latency_p50 at 8B" (metrics in first-seen order)."""
    by_metric: dict[str, list] = {}
    for metric, size in keys:
        by_metric.setdefault(metric, []).append(size)
    return "; ".join(m + _size_words(sizes) for m, sizes in by_metric.items())


def power_rules(power: list[dict]) -> list[dict]:
    """Per rule, widest scope first: {rule, who, levels: [(pct text, [(metric, size), ...])], blind:
    [(metric, size), ...], per_rail: bool}. A metric and size's guarantee is its weakest rail's (the
    largest detectable slowdown over its entries); metrics with the same guarantee share a level, the
    strongest level first; blind: where the rule detects nothing."""
    rules: dict[str, dict] = {}
    for e in power or []:
        if not isinstance(e, dict):
            continue
        rule = str(e.get("rule") or "?")
        size = e.get("size")
        key = (str(e.get("metric") or "?"), size if isinstance(size, (int, float)) and size == size else None)
        r = rules.setdefault(rule, {"worst": {}, "blind": [], "per_rail": False})
        r["per_rail"] |= _rail(e) is not NO_RAIL
        d = detectable(e)
        if d is None:
            r["blind"].append(key)
        else:
            r["worst"][key] = max(d, r["worst"].get(key, 0.0))
    out = []
    for rule, r in rules.items():
        levels: dict[str, list] = {}
        for key, d in sorted(r["worst"].items(), key=lambda t: t[1]):
            levels.setdefault(pct(d), []).append(key)
        blind = [k for k in dict.fromkeys(r["blind"]) if k not in r["worst"]]
        out.append({"rule": rule, "who": SCOPE_WORDS.get(rule, rule), "levels": list(levels.items()),
                    "blind": blind, "per_rail": r["per_rail"]})
    out.sort(key=lambda r: scope_rank(r["rule"]))
    return out


def power_sentence(power: list[dict], limit: int = 3) -> str:
    """"What a PASS rules out: a NIC 10% slow (bandwidth at 64KiB and 8MiB; latency_p50 at 8B); a link 14%
    slow (...) or 171% (...)"; '' without power entries. Each rule's guarantee holds on every rail (the
    weakest rail's); the folded table has every rule, metric, size and rail."""
    rules = power_rules(power)
    parts = []
    for r in rules[:limit]:
        levels = [f"{text} ({_whats(keys)})" for text, keys in r["levels"]]
        if levels:
            text = f"a {r['who']} " + " or ".join(levels).replace(" (", " slow (", 1)
            text += ", on every rail" if r["per_rail"] else ""
        else:
            text = f"nothing by the {r['who']} rule"
        if r["blind"]:
            text += f" (blind, too few comparisons: {_whats(r['blind'])})"
        parts.append(text)
    if not parts:
        return ""
    more = len(rules) - limit
    return ("What a PASS rules out: " + "; ".join(parts)
            + (f"; {more} more rule{'s' if more != 1 else ''} in the table" if more > 0 else "") + ".")
