"""What `node-check --slurm` does to the node after its checks: drain on a failure with a reason of our
own, resume after passes only what we drained, and leave the node as it is when a check could not run
or nothing was checked. The node's Slurm state itself is acceptance.host.slurmnode's."""

from __future__ import annotations

from ..host import slurmnode
from .base import Outcome


def first_problem(outcomes: list[Outcome]) -> tuple[str, str]:
    failing = [(o.check, p) for o in outcomes if o.status == "fail" for p in o.problems if p.severity == "fail"]
    check, p = failing[0]
    more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
    return check, f"{p.part}: {p.detail}{more}"


def fleet_guard(node: str, check: str, fraction: float) -> str | None:
    """Why this node is not drained although `check` failed: too many nodes are drained for the same
    check already (a shared cause: a profile pushed everywhere, a switch, a driver rollout); None to drain.
    One sinfo call, made only on a failure. Where it cannot be counted, the node is drained as usual."""
    try:
        drained, total = slurmnode.drained_for(check)
    except slurmnode.SlurmError:
        return None
    limit = max(2, fraction * total)
    if drained < limit:
        return None
    return (f"{node} left as it is: {drained} of {total} nodes are drained for {check} already "
            f"(node_check.max_drained_fraction {fraction:g}): a cause they share is more likely than one more "
            f"bad node; look at what they have in common")


def act(node: str, verdict: str, outcomes: list[Outcome], passes: int, resume_after: int,
        fraction: float) -> dict:
    """What --slurm did to the node: {"outcome": drained|resumed|left|failed, "detail": ...}."""
    if verdict == "error":
        why = "; ".join(f"{o.check}: {line}" for o in outcomes for line in o.could_not())
        return {"outcome": "left", "detail": f"{node} left as it is: a check could not run ({why})"}
    if verdict == "fail":
        check, detail = first_problem(outcomes)
        held = fleet_guard(node, check, fraction)
        if held:
            return {"outcome": "left", "detail": held}
        outcome, text = slurmnode.apply_drain(slurmnode.Drain(node, slurmnode.reason(check, detail)))
        return {"outcome": outcome, "detail": text}
    if not any(o.status in ("pass", "warn") for o in outcomes):
        # Every check skipped: nothing here says the node is healthy, so nothing is resumed on it.
        return {"outcome": "left", "detail": f"{node} left as it is: every check skipped, nothing was checked"}
    try:
        now = slurmnode.read_state(node)
    except slurmnode.SlurmError as e:
        return {"outcome": "failed", "detail": f"could not read {node}'s state: {e}"}
    if now.drained and now.ours and passes < resume_after:
        return {"outcome": "left", "detail": f"{node} stays drained ({now.reason}) until {resume_after} passes "
                                             f"in a row: {passes} so far"}
    outcome, text = slurmnode.apply_resume(node, now)
    return {"outcome": outcome, "detail": text}
