"""Switch ports whose own counters rose during a run: one finding per port, scope "switch", naming the
switch, the port and, where known, the part at the other end of its cable (docs/rdma.md §5, "Switch
ports").

The run keeps a snapshot of the switch ports before its first suite and after its last
(acceptance.host.switchports, WINDOW_FILES); their diff is the host's Deltas, judged by the one counter
judge with the profile's [counters] bounds, as a host port's are: a fault fails, congestion warns. A
switch port is a ticket for the network team: its finding has no node, so it never becomes a drain line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..host import switchports
from ..host.counter_kinds import CLASS_OF
from ..host.counters import Delta
from ..records.results import InputError
from ..rules import counter_verdicts as cv
from ..rules.profile import Profile
from ..switchtree.fabric import Fabric, Uplink
from .base import EVIDENCE_MAX
from .finding import make_finding
from .wording import capped, fmt_value

# What to check, by the class of the worst counter (acceptance.host.counter_kinds.CLASS_OF): of a switch
# port's PMA counters only faults (error) fail or warn, and congestion (discard) warns.
ADVICE = {"fault": "check the cable, its transceivers and this switch port (a ticket for the network team)",
          "congestion": "congestion or drops on this switch port"}


def switch_port_findings(run_dir: str | Path, profile: Profile, fabric: Fabric | None = None) -> list[dict]:
    """The findings of a run folder's switch port snapshots; none when it does not have both.
    InputError (exit 2) for a snapshot that cannot be read, naming the file."""
    window = switchports.load_window(run_dir)
    if window is None:
        return []
    try:
        deltas, facts = switchports.diff(*window), switchports.port_facts(*window)
    except (KeyError, TypeError, ValueError) as e:
        files = ", ".join(str(Path(run_dir) / f) for f in switchports.WINDOW_FILES.values())
        raise InputError(f"{files}: malformed switch ports snapshot ({type(e).__name__}: {e})") from None
    limits = cv.Limits.from_profile(profile)
    return findings(judge(deltas, limits), facts, limits, fabric)


def judge(deltas, limits: cv.Limits) -> list[tuple[str, Delta]]:
    """Every counter change with its verdict, by the one judge (rules.counter_verdicts.counter_verdict),
    asked once per change: at tens of thousands of switch ports it is what a diff costs."""
    return [(cv.counter_verdict(d, limits), d) for d in deltas]


def problem(d: Delta, limits: cv.Limits, verdict: str) -> str:
    """What is wrong with one failing or warning counter of a switch port (its port aside): the host's
    wording (rules.counter_verdicts.problem), with how to clear a saturated counter on a switch."""
    if not d.saturated:
        return cv.problem(d, limits, verdict)
    cap = f"{2 ** d.width - 1} ({d.width}-bit)"
    what = ("during the window: it rose, by an unknown amount" if d.saturated == "during"
            else "before the window: its rises cannot be seen")
    return f"{d.name} saturated at {cap} {what}; clear it ({switchports.clear_command(d.device, d.port)})"


def by_port(judged: list[tuple[str, Delta]]) -> dict[tuple[str, int], list[tuple[str, Delta]]]:
    """(switch, port) -> its failing and warning counters [(verdict, Delta)], failing first."""
    out: dict[tuple[str, int], list[tuple[str, Delta]]] = {}
    for verdict, d in judged:
        if verdict in ("fail", "warn"):
            out.setdefault((d.device, d.port), []).append((verdict, d))
    for items in out.values():
        items.sort(key=lambda vd: vd[0] != "fail")
    return out


def findings(judged: list[tuple[str, Delta]], facts: Mapping[tuple[str, int], Mapping[str, Any]],
             limits: cv.Limits, fabric: Fabric | None = None) -> list[dict]:
    """One finding per switch port with a failing or warning counter (judged: judge()'s answer): the worst
    counter's record as its value and bound, every such counter as evidence. facts: switchports.port_facts
    (name, peer)."""
    out = []
    for (switch, port), items in sorted(by_port(judged).items()):
        verdict, head = items[0]
        record = next(r for r in cv.to_records([head], limits, {}) if r["verdict"] == verdict)
        fact = facts.get((switch, port)) or {}
        tree_name, rail, cable = place(fabric, switch, fact.get("name"), port)
        peer = _peer(tree_name, cable, fact.get("peer"))
        label = switchports.switch_label(fact.get("name"))
        who = f"switch {label} ({switch})" if label else f"switch {switch}"
        headline = (f"{head.name} saturated {head.saturated} the window" if head.saturated
                    else f"{head.name} rose by {head.delta:,} (bound {fmt_value(record['threshold'])})")
        more = f" and {len(items) - 1} more counter(s)" if len(items) > 1 else ""
        cabled = f" (cabled to {peer[1]})" if peer else ""
        out.append(make_finding(
            severity=verdict, scope="switch", switch=tree_name or label or switch, rail=rail,
            peer=peer[0] if peer else None, metric=record["metric"], value=record["value"],
            expected=record["threshold"], unit=record["unit"], kind="counter",
            uplinks=[cable.to_json()] if cable else (),
            evidence=capped([problem(d, limits, v) for v, d in items[:EVIDENCE_MAX]], len(items)),
            message=f"{who} port {port}{cabled}: {headline}{more}; {ADVICE[CLASS_OF[head.kind]]}"))
    return out


def place(fabric: Fabric | None, switch: str, name: str | None, port: int
          ) -> tuple[str | None, int | None, Uplink | None]:
    """(the switch as the tree names it, its rail, the uplink cable on this port) where the switch tree
    has the switch (by GUID, NodeDescription or its short name); (None, None, None) elsewhere."""
    if fabric is None:
        return None, None, None
    names = {switch, name, switchports.switch_label(name)} - {None}
    for rail, tree in fabric.trees.items():
        found = sorted(names & (set(tree.leaves) | set(tree.spines)))
        if not found:
            continue
        cable = next((u for u in tree.uplinks if (u.leaf == found[0] and u.leaf_port == str(port))
                      or (u.spine == found[0] and u.spine_port == str(port))), None)
        return found[0], rail, cable
    return None, None, None


def _peer(switch: str | None, cable: Uplink | None, seen: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(the part at the other end of the port's cable, and it in words with its port): the uplink's other
    switch where the tree has the cable, else the peer a snapshot names (UFM's ports resource)."""
    if cable is not None:
        other, port = (cable.spine, cable.spine_port) if cable.leaf == switch else (cable.leaf, cable.leaf_port)
        return other, f"{other} port {port}" if port else other
    if seen:
        port = str(seen.get("port") or "")
        return str(seen["name"]), f"{seen['name']} port {port}" if port.isdigit() else f"{seen['name']} {port}".rstrip()
    return None


def format_diff(deltas, judged: list[tuple[str, Delta]], limits: cv.Limits,
                facts: Mapping[tuple[str, int], Mapping[str, Any]]) -> str:
    """`acceptance counters switches diff`'s table: every switch port counter that moved, was saturated, or
    fails or warns (traffic left out), with its kind and class; then the problems and the diff's notes.
    deltas: switchports.diff's answer; judged: judge()'s of it."""
    rows = []
    for verdict, d in judged:
        if CLASS_OF[d.kind] == "traffic" or not (d.delta or d.saturated or d.note or verdict in ("fail", "warn")):
            continue
        change = f"saturated {d.saturated}" if d.saturated else d.note if d.delta is None else f"{d.delta:+,}"
        label = switchports.switch_label((facts.get((d.device, d.port)) or {}).get("name")) or ""
        rows.append((d.device, label, str(d.port), d.name, d.kind, CLASS_OF[d.kind], change or "", verdict))
    lines = [f"switch ports: counters over {deltas.seconds:,.1f} s"]
    if rows:
        head = ("switch", "name", "port", "counter", "kind", "class", "delta", "verdict")
        widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
        for r in (head, *rows):
            lines.append("  ".join(c.rjust(w) if i in (2, 6) else c.ljust(w)
                                   for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    else:
        lines.append("no error counter moved")
    found = [f"{switchports.switch_label((facts.get(key) or {}).get('name')) or key[0]} port {key[1]}: "
             f"{problem(d, limits, v)}" for key, items in sorted(by_port(judged).items()) for v, d in items]
    if found:
        lines += ["", "problems:"] + [f"  {p}" for p in found]
    if deltas.notes:
        lines += ["", "notes:"] + [f"  {n}" for n in deltas.notes]
    return "\n".join(lines)
