"""`acceptance plan`: how many rounds and pair measurements a cluster needs, and about how long.

Only closed-form counts are used (acceptance.runtime.schedule.round_count/pair_count),
so planning a 2048-node cluster is instant. The duration is a rough estimate
from the profile's sweep and latency settings; its assumptions are printed.
"""
from __future__ import annotations

import argparse
import math

from pathlib import Path

from .common import EXIT_OK, UsageError
from ..analysis.deciding import deciding_pairs, pattern_gaps
from ..records.naming import natural_key
from ..records.results import InputError, read_json
from ..spec.fabric import Fabric
from ..spec.switches import fabric_for
from ..spec import catalog
from ..spec.profile import Profile, format_size, load_profile, parse_rate
from ..runtime.schedule import pair_count, parse_pattern, round_count, schedule

ITER_OVERHEAD_S = 5e-6   # assumed per-iteration cost beyond the wire time (post, poll, flush)
LATENCY_SAMPLE_S = 5e-6  # assumed time of one latency sample
DEFAULT_RATE = 100.0     # Gbit/s, when neither --rate nor the profile's bandwidth_min says


def sweep_sizes(sweep: dict) -> list[int]:
    """min_size, min_size * factor, ... up to max_size (bytes)."""
    sizes, size = [], max(1, sweep["min_size"])  # a 0-byte start would never grow
    while size <= sweep["max_size"]:
        sizes.append(size)
        size *= sweep["factor"]
    return sizes


def sweep_iterations(sweep: dict, size: int) -> tuple[int, int]:
    """(timed, warmup) iterations at one size, as the bandwidth sweep chooses them."""
    iters = sweep["bytes_per_size"] // (size * sweep["window"])
    iters = max(sweep["min_iters"], min(sweep["max_iters"], iters))
    return iters, max(1, math.ceil(iters * sweep["warmup_fraction"]))


def sweep_direction_seconds(sweep: dict, rate_gbits: float) -> float:
    """One pair's bandwidth sweep in one direction (each size capped by sweep.max_time_per_size)."""
    total = 0.0
    for size in sweep_sizes(sweep):
        iters, warmup = sweep_iterations(sweep, size)
        n = iters + warmup
        one = n * sweep["window"] * size * 8 / (rate_gbits * 1e9) + n * ITER_OVERHEAD_S
        total += min(one, sweep["max_time_per_size"]) if sweep.get("max_time_per_size") else one
    return total


def latency_direction_seconds(latency: dict) -> float:
    """One pair's put latency and send/recv ping-pong in one direction."""
    return (latency["iters"] + latency["warmup"]) * 2 * LATENCY_SAMPLE_S


# The rdma_write bandwidths measured over the size sweep (the catalog's curves: write and read).
SWEEPS = sum(1 for suite, _ in catalog.with_role("curve") if suite == "rdma_write")


def pair_direction_seconds(sweep: dict, latency: dict, rate_gbits: float) -> float:
    """One pair in one direction: each bandwidth sweep (SWEEPS) plus put latency and a send/recv ping-pong."""
    return SWEEPS * sweep_direction_seconds(sweep, rate_gbits) + latency_direction_seconds(latency)


def longest_step(sweep: dict, latency: dict, rate_gbits: float) -> tuple[float, str]:
    """(seconds, what): the longest stretch between two progress() calls of the p2p and collective
    suites, which the hang timeout must cover (docs/pytest-under-mpi.md). A p2p test shows progress
    after each round (one pair, both directions); a collective sweep after each size."""
    largest = sweep_sizes(sweep)[-1] if sweep_sizes(sweep) else 0
    iters, warmup = sweep_iterations(sweep, largest) if largest else (0, 0)
    collective = (iters + warmup) * 2 * largest * 8 / (rate_gbits * 1e9)  # all-reduce moves ~2x the buffer
    return max((2 * sweep_direction_seconds(sweep, rate_gbits),
                "a round of test_write_bandwidth: one pair's sweep, both directions"),
               (2 * latency_direction_seconds(latency), "a round of test_write_latency: both directions"),
               (collective, f"one size ({format_size(largest)}) of test_allreduce"))


def step_problem(profile: Profile, rate_gbits: float) -> str | None:
    """Why the profile's hang timeout cannot cover its longest step, or None."""
    seconds, what = longest_step(profile.get("sweep"), profile.get("latency"), rate_gbits)
    timeout = profile.get("run.hang_timeout")
    if seconds < timeout:
        return None
    return (f"the longest step ({what}) takes about {format_seconds(seconds)} at {rate_gbits:g} Gbit/s, not "
            f"within profile {profile.name}'s run.hang_timeout of {format_seconds(timeout)}: every such step "
            f"would end as a HANG; raise run.hang_timeout or shrink the sweep (sweep.bytes_per_size, "
            f"sweep.max_iters, sweep.max_time_per_size, latency.iters)")


def estimate_seconds(rails: int, rounds: int, sweep: dict, latency: dict, rate_gbits: float) -> float:
    """Rails run one after another, rounds one after another, both directions one after the
    other; all pairs of a round at once, so the pair count does not enter."""
    return rails * rounds * 2 * pair_direction_seconds(sweep, latency, rate_gbits)


def choose_rate(profile: Profile, rate: str | None) -> tuple[float, str]:
    """(Gbit/s, where it came from): --rate, else the profile's bound at its largest size, else 100."""
    if rate is not None:
        gbits = parse_rate(rate)
        if gbits <= 0:
            raise ValueError(f"must be above zero, got {rate!r}")
        return gbits, "from --rate"
    bounds = profile.get("rdma_write.bandwidth_min")  # [[bytes, Gbit/s], ...] sorted by size
    if bounds and bounds[-1][1] > 0:
        return bounds[-1][1], f"profile {profile.name}'s rdma_write.bandwidth_min at its largest size"
    return DEFAULT_RATE, f"assumed: profile {profile.name} sets no rdma_write.bandwidth_min; give --rate"


def format_seconds(seconds: float) -> str:
    """Human durations: "0.04 s", "45 s", "12 min 5 s", "3 h 12 min", "2 d 4 h"."""
    if seconds < 0.01:
        return "under 0.01 s"
    if seconds < 10:
        return f"{seconds:.2g} s"
    # Round to the smallest unit shown first, so 3599.7 s reads "1 h 0 min", not "59 min 60 s".
    for unit, sub, name, sub_name in ((86400, 3600, "d", "h"), (3600, 60, "h", "min"), (60, 1, "min", "s")):
        whole = round(seconds / sub) * sub
        if whole >= unit:
            return f"{whole // unit} {name} {whole % unit // sub} {sub_name}"
    return f"{round(seconds)} s"


def plan_text(nodes: int, rails: int, pattern: str | None, profile: Profile | str | None,
              rate: str | None = None) -> str:
    """The `acceptance plan` report; ValueError for bad input. pattern None: the profile's."""
    if not isinstance(profile, Profile):
        profile = load_profile(profile)
    if nodes < 2:
        raise ValueError(f"--nodes must be at least 2 (pairs need two nodes), got {nodes}")
    if rails < 1:
        raise ValueError(f"--rails must be at least 1, got {rails}")
    pattern = pattern or profile.get("rdma_write.pattern")
    kind, k = parse_pattern(pattern)
    try:
        gbits, rate_from = choose_rate(profile, rate)
    except ValueError as e:
        raise ValueError(f"--rate: {e}") from None

    rounds, pairs = round_count(nodes, pattern), pair_count(nodes, pattern)
    sweep, latency = profile.get("sweep"), profile.get("latency")
    per = pair_direction_seconds(sweep, latency, gbits)
    total = estimate_seconds(rails, rounds, sweep, latency, gbits)
    sizes = sweep_sizes(sweep)
    span = f"{format_size(sizes[0])}..{format_size(sizes[-1])}" if sizes else "no sizes"
    if kind == "all-pairs":
        partners = f"every node meets every other node ({nodes - 1} partners)"
    else:
        used = min(k, rounds)
        each = (f"{used} partners per node" if nodes % 2 == 0
                else f"{used - 1} or {used} partners per node (with an odd count each node sits out a round)")
        partners = f"{used} rounds spread over the all-pairs schedule, {each}"
    idle = "one node idle" if nodes % 2 else "no node idle"
    rows = [
        ("nodes", f"{nodes}"),
        ("rails", f"{rails}"),
        ("pattern", f"{pattern}: {partners}"),
        ("rounds per rail", f"{rounds}   (a round: {nodes // 2} disjoint pairs measured at once, {idle})"),
        ("node pairs per rail", f"{pairs}"),
        ("pair-directions per rail", f"{2 * pairs}   (x2: A->B, then B->A)"),
        ("total pair-directions", f"{2 * pairs * rails}   (x{rails} rails, one after another, one test per rail)"),
        ("rate", f"{gbits:g} Gbit/s   ({rate_from})"),
        ("per pair-direction", f"{format_seconds(per)}   (profile {profile.name}: bandwidth sweep "
                               f"{span}, {len(sizes)} sizes, + {ITER_OVERHEAD_S * 1e6:g} us "
                               f"per iteration; latency 2 x {latency['iters'] + latency['warmup']} samples "
                               f"at {LATENCY_SAMPLE_S * 1e6:g} us each)"),
        ("estimated duration", f"{format_seconds(total)}   ({rails} rails x {rounds} rounds x 2 directions "
                               f"x {format_seconds(per)}; all pairs of a round at once)"),
    ]
    step, what = longest_step(sweep, latency, gbits)
    timeout = profile.get("run.hang_timeout")
    fits = "fits" if step < timeout else "DOES NOT FIT"
    rows.append(("longest step", f"{format_seconds(step)}   ({what}); run.hang_timeout "
                                 f"{format_seconds(timeout)}: {fits} (the deadline bounds a step, not a test)"))
    width = max(len(label) for label, _ in rows) + 1
    return "\n".join(f"{label + ':':<{width}} {value}" for label, value in rows)


# ---- the command ----

def add_parser(sub) -> None:
    plan = sub.add_parser(
        "plan", help="rounds, pair measurements and estimated duration for a cluster size",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Count what the pairwise RDMA-write suite would measure on N nodes x R rails, "
                    "estimate how long it takes, and check that its longest step fits the hang timeout. "
                    "Runs nothing.",
        epilog="A round is a set of disjoint node pairs (no node twice), all measured at the same time;\n"
               "each pair is measured in both directions, one after the other. Rounds run one after\n"
               "another, and rails one after another (one pytest test per rail, same schedule on each).\n\n"
               "The hang timeout bounds a step, not a test: a round of pairs, a size of a collective sweep.\n"
               "When the longest step cannot fit the profile's run.hang_timeout, plan exits 2 saying which.\n\n"
               "patterns:\n"
               "  all-pairs  every node pair: N-1 rounds for even N, N for odd N (one node idle per round)\n"
               "  sample:K   K rounds of the all-pairs schedule, spread across it, so each node gets K\n"
               "             partners at varied distances; for very large clusters\n\n"
               "examples:\n"
               "  acceptance plan --nodes 2048 --rails 8\n"
               "  acceptance plan --nodes 2048 --rails 8 --pattern sample:16 --rate 400Gbit/s\n"
               "  acceptance plan --rails 8 --pattern sample:16 --topology /etc/slurm/topology.conf\n"
               "  acceptance plan --run reports/RUN_ID   (pairs that would decide its ambiguous findings)\n")
    plan.add_argument("--nodes", type=int, metavar="N",
                      help="nodes in the cluster (>= 2; default with --topology: the tree's nodes)")
    plan.add_argument("--rails", type=int, metavar="R", help="rails (NICs) per node (>= 1; required)")
    plan.add_argument("--pattern", metavar="all-pairs|sample:K",
                      help="node pairs per rail (default: the profile's rdma_write.pattern, all-pairs)")
    plan.add_argument("--profile", metavar="NAME|PATH",
                      help="profile whose sweep and latency settings time the estimate (default: local)")
    plan.add_argument("--rate", metavar="RATE",
                      help='link rate for the estimate, e.g. "400Gbit/s" (default: the profile\'s '
                           "rdma_write.bandwidth_min at its largest size, else 100Gbit/s)")
    plan.add_argument("--topology", metavar="PATH",
                      help="the cluster's switch tree (Slurm topology.conf or topology.yaml, ibnetdiscover "
                           "output, or a folder of rail<N>* ibnetdiscover outputs): also say which switch and "
                           "uplink faults the pattern cannot tell apart, and the extra pairs that would decide")
    plan.add_argument("--run", metavar="RUN_DIR",
                      help="with --topology (or the tree run.json keeps): for each finding of RUN_DIR whose "
                           "measured pairs cannot tell two explanations apart, the pairs that would decide")
    plan.set_defaults(func=cmd_plan)


def cmd_plan(args) -> int:
    profile = load_profile(args.profile)
    fabric = None
    if args.topology or args.run:
        fabric = _fabric(profile, args.topology, args.run)
    if args.run:
        print(run_deciding_text(args.run, fabric))
        return EXIT_OK
    nodes = args.nodes
    tree_nodes = sorted(fabric.nodes, key=natural_key) if fabric is not None else None
    if nodes is None:
        if tree_nodes is None:
            raise UsageError("--nodes is required (or --topology, whose nodes are then planned)")
        nodes = len(tree_nodes)
    if args.rails is None:
        raise UsageError("--rails is required")
    try:
        print(plan_text(nodes, args.rails, args.pattern, profile, args.rate))
        problem = step_problem(profile, choose_rate(profile, args.rate)[0])
    except ValueError as e:
        raise UsageError(str(e)) from None
    if fabric is not None:
        print(tree_text(fabric, tree_nodes[:nodes], args.rails, args.pattern or profile.get("rdma_write.pattern")))
    if problem:
        raise UsageError(problem)
    return EXIT_OK


def _fabric(profile: Profile, topology: str | None, run_dir: str | None):
    try:
        if topology:
            return fabric_for(profile, topology)
        kept = read_json(Path(run_dir) / "run.json").get("fabric")
        if not isinstance(kept, dict):
            raise UsageError(f"{run_dir}/run.json keeps no switch tree: give --topology PATH")
        return Fabric.from_json(kept)
    except (InputError, ValueError) as e:
        raise UsageError(f"--topology: {e}" if topology else str(e)) from None


def tree_text(fabric: Fabric, nodes: list[str], rails: int, pattern: str) -> str:
    """Per rail's tree: what the pattern's pairs cannot tell apart, and the pairs that would."""
    pairs = {(nodes[a], nodes[b]) for rnd in schedule(len(nodes), pattern) for a, b in rnd}
    lines = [f"switch tree: {fabric.format} {fabric.source}"]
    shown = set()
    for rail in range(rails):
        tree = fabric.tree(rail)
        if tree is None:
            lines.append(f"  rail {rail}: not in the tree")
            continue
        key = id(tree)
        if key in shown:
            continue
        shown.add(key)
        which = f"rail {rail}" if None not in fabric.trees else "every rail"
        sizes = ", ".join(f"{leaf} ({len(ns)})" for leaf, ns in list(tree.leaves.items())[:12])
        more = f", +{len(tree.leaves) - 12} more" if len(tree.leaves) > 12 else ""
        lines.append(f"  {which}: {len(tree.leaves)} leaves: {sizes}{more}; spines {', '.join(tree.spines) or 'none'}")
        gaps = pattern_gaps(tree, nodes, pairs)
        if not gaps:
            lines.append(f"    {pattern} tells every leaf, uplink and spine apart from each other and from the NICs")
        for g in gaps:
            decide = (f"measuring {', '.join(f'{a}-{b}' for a, b in g['pairs'])} decides" if g["pairs"]
                      else "no pair can decide: read the switch's port counters")
            lines.append(f"    {pattern} cannot tell {g['what']}: {decide}")
    return "\n".join(lines)


def run_deciding_text(run_dir: str, fabric: Fabric) -> str:
    """For each finding of a run whose alternatives the measured pairs could not tell apart: the
    pairs that would decide (findings.json, the run's nodes)."""
    try:
        findings = read_json(Path(run_dir) / "findings.json")
        run = read_json(Path(run_dir) / "run.json")
    except (InputError, ValueError) as e:
        raise UsageError(str(e)) from None
    nodes = sorted(((run.get("topology") or {}).get("nodes") or {}), key=natural_key) or sorted(fabric.nodes,
                                                                                               key=natural_key)
    lines = []
    for f in findings if isinstance(findings, list) else []:
        alts = f.get("alternatives") or []
        if not alts:
            continue
        me = {"scope": f["scope"], "switch": f.get("switch"), "node": f.get("node"), "rail": f.get("rail")}
        tree = fabric.tree(f.get("rail") or 0)
        lines.append(f"{f['message']}")
        for alt in alts:
            pairs = deciding_pairs(me, alt, tree, nodes) if tree is not None else []
            what = _name(alt)
            lines.append(f"  vs {what}: " + (f"measure {', '.join(f'{a}-{b}' for a, b in pairs)} on rail {f['rail']}"
                                            if pairs else "no pair can decide: read the switches' port counters"))
    return "\n".join(lines) or f"{run_dir}: no finding is ambiguous; nothing to add"


def _name(c: dict) -> str:
    if c.get("scope") == "uplink":
        return f"{c['switch']}'s uplink"
    if c.get("scope") == "nic":
        return f"{c['node']}'s NIC"
    if c.get("scope") == "switch":
        return f"switch {c['switch']}"
    return f"rail {c.get('rail')} plane"
