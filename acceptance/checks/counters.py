"""The counters check: the rail ports' counters since the last check, judged as a suite's counter window
by the profile's [counters] bounds. A counter's class says what a rise means (acceptance.host.counter_kinds,
docs/rdma.md): a fault fails, congestion warns past its bound, an application's own error (a receive
buffer too small, a remote access violation) is information only: a user's bug never drains a node."""

from __future__ import annotations

from ..host import counters as port_counters
from ..host import nodefacts
from ..rules.counter_verdicts import Limits, counter_verdict, problem
from .base import Context, Outcome, Problem, judged, skip
from .ports import rail_ports


def check(ctx: Context) -> Outcome:
    try:
        _, rails = rail_ports(ctx)
    except nodefacts.Unavailable as e:
        return skip("counters", e.reason)
    devices = sorted({p.device for p in rails.ports})
    snap = port_counters.snapshot(ctx.root, devices=devices, node=ctx.node)
    if not snap["ports"]:
        return skip("counters", "; ".join(snap["problems"]) or "no RDMA rail ports")
    state = {"snapshot": snap}
    unread = list(snap["problems"])  # a counter file or ethtool we could not read: not judged, never a fault
    before = ctx.previous.get("snapshot")
    if not before or port_counters.check_snapshot(before) or before.get("node") != ctx.node:
        return judged("counters", [], f"first check: {len(snap['ports'])} ports' counters kept for the next",
                      state, unread)
    deltas = port_counters.diff(before, snap)
    limits = Limits.from_profile(ctx.profile)
    problems, apps = [], []
    for d in deltas:
        verdict = counter_verdict(d, limits)
        if verdict in ("fail", "warn"):
            problems.append(Problem(f"{d.device} port {d.port}", problem(d, limits, verdict), verdict))
        elif d.kind == "app" and d.delta:
            apps.append(f"{d.device} port {d.port} {d.name} +{d.delta:,}")
    note = f"{len(snap['ports'])} ports over {deltas.seconds:.0f} s"
    if snap.get("notes"):  # what a device does not count (no PMA): said, not judged
        note += "; " + "; ".join(snap["notes"])
    if apps:
        note += f"; applications' own errors (information, not the node's fault): {', '.join(apps)}"
    return judged("counters", problems, note, state, unread)
