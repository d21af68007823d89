"""Nodes the run lost, from run.json: a rank that died or whose node went (lost_nodes, named by the
launcher or by this machine's watch of the ranks, with `lost` saying who said what), or a hang whose
missing ranks are all on one node of several, or whose silent ranks are (the watchdog's report, `hang`,
and `silent_ranks`: those that did not even say where they were; their stacks are in logs/rank-<r>.log),
in any launch of the run (a relaunch leaves the lost node behind: `attempts`). Each is a failing node finding of kind "lost" and a drain line "acceptance: lost:
<why>": the node is left out of the next run. A hang spread over several nodes, or a run of one node,
names no node: it stays the run's (INCOMPLETE) and drains nobody."""

from __future__ import annotations

from ..records.naming import compress_ints
from .finding import Finding, make_finding

SUITE = "lost"  # the drain reason's namespace: "acceptance: lost: <why>"
KIND = "lost"


def lost_nodes(run: dict) -> list[tuple[str, str]]:
    """(node, why) of each node the run lost, in the order run.json names them: in the launches a relaunch
    left behind (`attempts`, acceptance.cli.attempts), then in the last."""
    earlier = [(e["node"], e["why"]) for a in run.get("attempts") or [] for e in a.get("left_behind") or []
               if isinstance(e, dict) and "node" in e]
    return list(dict.fromkeys(earlier + launch_lost(run)))


def launch_lost(run: dict) -> list[tuple[str, str]]:
    """(node, why) of each node the last launch lost, from its own fields of run.json."""
    node_of = _node_of(run.get("topology") or {})
    named = run.get("lost_nodes") or []
    if named:
        why = run.get("lost") or "a rank on it ended first"
        return [(node, why) for node in named]
    if not run.get("hang") or len(set(node_of.values())) < 2:
        return []
    missing = [r for r in run.get("missing_ranks") or [] if isinstance(r, int)]
    hung = {node_of.get(r) for r in missing}
    if missing and len(hung) == 1 and None not in hung:
        return [(hung.pop(), f"hung: rank {compress_ints(missing)} on it did not reach the next step within the "
                             f"hang timeout while every other node's did (each rank's stacks in its log under logs/)")]
    # Ranks waiting inside a test for a stuck partner miss the sync point too; but a stopped process (or
    # one stuck holding the interpreter) alone cannot say where it is.
    silent = [r for r in run.get("silent_ranks") or [] if isinstance(r, int)]
    hung = {node_of.get(r) for r in silent}
    if silent and len(hung) == 1 and None not in hung:
        return [(hung.pop(), f"hung: rank {compress_ints(silent)} on it stopped answering: it neither reached the "
                             f"next step within the hang timeout nor said where it was, while every other "
                             f"node's ranks did (each rank's stacks in its log under logs/)")]
    return []


def _node_of(topology: dict) -> dict[int, str]:
    """rank -> node from run.json's topology: its `nodes` (node -> ranks), else its `ranks` entries."""
    nodes = topology.get("nodes")
    if isinstance(nodes, dict):
        return {r: node for node, ranks in nodes.items() if isinstance(ranks, list) for r in ranks}
    ranks = topology.get("ranks")
    return {r["rank"]: r["node"] for r in ranks if isinstance(r, dict) and "rank" in r and "node" in r} \
        if isinstance(ranks, list) else {}


def findings(run: dict) -> list[Finding]:
    """One failing node finding per lost node."""
    hang = (run.get("hang") or "").splitlines()
    return [make_finding(severity="fail", scope="node", node=node, metric=None, suite=SUITE, kind=KIND,
                         message=f"{node} was lost during the run: {why}: drain {node}",
                         evidence=[why] + (hang[:5] if why.startswith("hung") else []))
            for node, why in lost_nodes(run)]
