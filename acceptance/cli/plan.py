"""`acceptance plan`: how long a whole acceptance takes on N nodes x R rails, and what fits a time budget.

Every suite the profile runs is estimated from closed forms (acceptance.runtime.estimate, where the
models and their assumptions live), so planning 16,000 nodes is instant. With rdma_write.pattern
"auto" the plan chooses the pattern the run would (all-pairs if it fits, else screen:K with the
largest K that fits) and says what it gave up; it exits 2 when the estimate exceeds the budget or
the Slurm job's time left, naming what to change. `acceptance run` makes the same check first.
"""
from __future__ import annotations

import argparse
import json
import math
import os

from pathlib import Path

from .common import EXIT_OK, UsageError
from ..records.naming import natural_key
from ..records.results import InputError, read_json
from ..switchtree.fabric import Fabric
from ..rules.switches import fabric_for, kept_fabric
from ..measure.sweep import sweep_from_profile
from ..rules.profile import Profile, load_profile
from ..rules.units import format_size, human_seconds
from ..runtime import estimate as model
from ..runtime.schedule import coverage, pair_count, parse_pattern, schedule

ENV_RAIL_MODE = "ACCEPTANCE_RAIL_MODE"  # as the pytest plugin reads it
ENV_BUDGET = model.ENV_BUDGET           # the limit `acceptance run` hands the ranks, in seconds (auto's K)
RAIL_MODES = ("concurrent", "serial")




def longest_step(profile: Profile, est: model.Estimate) -> tuple[float, str]:
    """(seconds, what): the longest stretch between two progress() calls, which the hang timeout must
    cover (docs/pytest-under-mpi.md): a bandwidth sweep shows progress after each size, a latency test
    after each pair, a collective sweep after each size, its first with NCCL's setup (the estimate's)."""
    return est.longest


def step_problem(profile: Profile, est: model.Estimate) -> str | None:
    """Why the profile's hang timeout cannot cover its longest step, or None."""
    seconds, what = longest_step(profile, est)
    timeout = profile.get("run.hang_timeout")
    if seconds < timeout:
        return None
    shrink = ("leave out the all-to-all over that many ranks (collectives.alltoall_max_ranks)" if "connections" in what
              else "shrink the sweep (sweep.bytes_per_size, sweep.max_iters, sweep.max_time_per_size, latency.iters)")
    return (f"the longest step ({what}) takes about {human_seconds(seconds)} at {est.rate_gbits:g} Gbit/s, not "
            f"within profile {profile.name}'s run.hang_timeout of {human_seconds(timeout)}: every such step "
            f"would end as a HANG; raise run.hang_timeout or {shrink}")


def make_plan(nodes: int, rails: int, profile: Profile | str | None = None, pattern: str | None = None,
              rail_mode: str | None = None, budget: str | None = None, rate: str | None = None,
              env=None, slurm_left: float | None | bool = False, fabric: Fabric | None = None,
              names: list[str] | None = None) -> dict:
    """The whole plan as one JSON-able dict; ValueError (naming the flag) for bad input.

    pattern None: the profile's rdma_write.pattern; rail_mode None: $ACCEPTANCE_RAIL_MODE, else
    run.rail_mode; budget None: run.budget. The limit is the smaller of the budget and the Slurm job's
    time left (slurm_left; False: ask Slurm, as `acceptance run` would). fabric and names (the nodes in
    rail order, at least `nodes` of them): the switch tree, for the leaf pairs the pattern covers."""
    if not isinstance(profile, Profile):
        profile = load_profile(profile)
    env = os.environ if env is None else env
    if nodes < 2:
        raise ValueError(f"--nodes must be at least 2 (pairs need two nodes), got {nodes}")
    if rails < 1:
        raise ValueError(f"--rails must be at least 1, got {rails}")
    rail_mode = rail_mode or env.get(ENV_RAIL_MODE) or profile.get("run.rail_mode")
    if rail_mode not in RAIL_MODES:
        raise ValueError(f"--rail-mode: must be one of {', '.join(RAIL_MODES)}, got {rail_mode!r}")
    asked = (pattern or profile.get("rdma_write.pattern")).strip()
    try:
        parse_pattern(asked)
    except ValueError as e:
        raise ValueError(f"--pattern: {e}" if pattern else f"profile {profile.name}: rdma_write.pattern: {e}") \
            from None
    try:
        model.choose_rate(profile, rate)
    except ValueError as e:
        raise ValueError(f"--rate: {e}") from None
    budget_s, budget_from = model.budget_of(profile, budget)
    if slurm_left is False:
        slurm_left = model.slurm_time_left(env)
    limits = [(s, w) for s, w in ((budget_s, budget_from), (slurm_left, "the Slurm job's time left")) if s is not None]
    limit, limit_from = min(limits) if limits else (None, None)
    chosen, profile, gave_up = model.resolve(profile, nodes, rails, rail_mode, limit, rate, asked)
    est = model.estimate(profile, nodes, rails, chosen, rail_mode, rate)
    other = "serial" if rail_mode == "concurrent" else "concurrent"
    other_total = model.estimate(profile, nodes, rails, chosen, other, rate).total
    total = est.total
    fits = limit is None or total <= limit
    step, step_what = longest_step(profile, est)
    engine = "mpi" if profile.get("run.engine") == "mpi" else None
    plan = {
        "nodes": nodes, "rails": rails, "profile": profile.name,
        "estimated_seconds": round(total, 1),
        "suites": {k: round(v, 1) for k, v in est.suites.items()},
        "overheads": {k: round(v, 1) for k, v in est.overheads.items()},
        "tests": {s: {t: round(v, 2) for t, v in tests.items()} for s, tests in est.tests.items()},
        "pattern": chosen, "pattern_asked": asked, "rounds": est.rounds,
        "pairs_per_rail": pair_count(nodes, chosen),
        "coverage": plan_coverage(nodes, rails, chosen, fabric, names),
        "screening": parse_pattern(chosen)[0] == "screen",
        "sizes": est.sizes, "latency_iters": est.latency_iters,
        "sample": sample_json(est, nodes),
        "screening_transfer": transfer_json(profile, est.transfer) if est.transfer else None,
        "records": est.records,
        "durations": {key: profile.get(key) for key in model.SHORTEST},
        "rail_mode": rail_mode, f"estimated_seconds_{other}": round(other_total, 1),
        "rate_gbits": est.rate_gbits, "rate_from": est.rate_from,
        "budget_seconds": budget_s, "budget_from": budget_from, "slurm_seconds_left": slurm_left,
        "limit_seconds": limit, "limit_from": limit_from, "fits": fits, "gave_up": gave_up,
        "longest_step": {"seconds": round(step, 2), "what": step_what,
                         "hang_timeout": profile.get("run.hang_timeout")},
        "relaunch_reserve": ({"seconds": round(sum(est.reserve.values()), 1), "attempts": model.attempts(profile),
                              **{k: round(v, 1) for k, v in est.reserve.items()}} if est.reserve else None),
        "setup": {scope: {"ranks": part["ranks"], "init": round(part["init"], 1),
                          "connections": None if part["connections"] is None else round(part["connections"], 1)}
                  for scope, part in est.setup.items()},
        "collectives_shortened": {key: profile.get(key) for key in ("sweep.max_iters", "collectives.alltoall_max_ranks")},
        "costs": model.cost_sources(engine, profile),
        "profile_costs": {f"plan.{key}": profile.get(f"plan.{key}") for key in (*model.PLAN_KEYS, "rate")
                          if profile.get(f"plan.{key}") is not None},
    }
    plan["change"] = [] if fits else what_to_change(plan, profile, rate)
    plan["step_problem"] = step_problem(profile, est)  # with the profile "auto" resolved, as the ranks run it
    return plan


def sample_json(est, nodes: int) -> dict | None:
    """plan["sample"]: what screening measures on every pair, and what on its sample of the rounds
    (rdma_write.sample_rounds; runtime.screening.EVERY_PAIR); None when not screening."""
    if est.transfer is None:
        return None
    total = nodes * (nodes - 1) // 2
    return {"rounds": est.sample_rounds, "every_pair": {"test": "test_write_bandwidth", "sizes": est.every_sizes},
            "sampled": "read bandwidth, latency (write, read, atomic), GPUDirect, and write bandwidth's other sizes",
            "pairs": round(min(1.0, est.sample_rounds * (nodes // 2) / total), 6) if total else 0.0}


def sample_text(sample: dict, rounds: int) -> str:
    """"write bandwidth at 8MiB on every pair; read bandwidth, latency ... in 32 of the 1023 rounds (3.1% ...)"."""
    every = ", ".join(format_size(s) for s in sample["every_pair"]["sizes"])
    if sample["rounds"] >= rounds:
        return f"every test in every round ({rounds} <= rdma_write.sample_rounds)"
    return (f"write bandwidth at {every} on every scheduled pair; {sample['sampled']} in {sample['rounds']} of the "
            f"{rounds} rounds, spread evenly (rdma_write.sample_rounds): {100 * sample['pairs']:.3g}% of node pairs "
            f"per rail")


def plan_coverage(nodes: int, rails: int, pattern: str, fabric: Fabric | None, names: list[str] | None) -> dict:
    """plan["coverage"]: per rail the fraction of node pairs measured and, where the switch tree is known,
    of leaf pairs (two leaves with a measured node pair between them) and, where its routes are known
    too, of the switch-to-switch cable directions that a measured pair-direction crosses."""
    routes = fabric.routes if fabric is not None else None
    out: dict = {"pairs": {}, "notes": {} if routes is not None else {"cables": "routes unknown (--routes)"}}
    if fabric is None:
        out["notes"]["leaf_pairs"] = "no switch tree (--topology)"
    elif names is None or len(names) < nodes:
        out["notes"]["leaf_pairs"] = f"the switch tree names {len(names or [])} nodes, fewer than {nodes}"
        out["notes"]["cables"] = out["notes"]["leaf_pairs"]
        fabric = routes = None
    else:
        out["leaf_pairs"] = {}
        if routes is not None:
            out["cables"] = {}
    seen: dict[int, dict] = {}  # a tree shared by rails is scheduled once (seed 0: the shape a run draws)
    for rail in range(rails):
        tree = fabric.tree(rail) if fabric is not None else None
        if tree is not None and id(tree) not in seen:
            leaf_of = {node: leaf for leaf, members in tree.leaves.items() for node in members}
            leaves = [leaf_of.get(n, "(not in the tree)") for n in names[:nodes]]
            seen[id(tree)] = {**coverage(nodes, pattern, leaves=leaves), "leaves": leaves}
        got = seen[id(tree)] if tree is not None else coverage(nodes, pattern)
        out["pairs"][str(rail)] = round(got["pairs"], 6)
        if fabric is not None:
            out["leaf_pairs"][str(rail)] = None if got["leaf_pairs"] is None else round(got["leaf_pairs"], 6)
        if routes is not None:
            share = cables_crossed(routes, rail, names[:nodes], pattern, got.get("leaves"))
            out["cables"][str(rail)] = None if share is None else round(share, 6)
    return out


def cables_crossed(routes, rail: int, names: list[str], pattern: str, leaves: list | None) -> float | None:
    """The fraction of the rail's switch-to-switch cable directions that at least one pair-direction of the
    pattern's schedule crosses (None: the rail's routes name no cable). The rounds are walked until every
    cable direction is seen, so a fabric whose cables the first rounds all cross costs little."""
    every = set(routes.cables(rail))
    if not every:
        return None
    crossed: set = set()
    for pairs in schedule(len(names), pattern, 0, leaves):
        for a, b in pairs:
            for s, d in ((a, b), (b, a)):
                crossed.update(routes.path(names[s], names[d], rail) or ())
        if len(crossed & every) == len(every):
            return 1.0
    return len(crossed & every) / len(every)


def transfer_json(profile: Profile, t) -> dict:
    """plan["screening_transfer"]: per bounded size the iterations and bytes per pair-direction, and the
    precision that asked for them (acceptance.runtime.screening.screening_transfer)."""
    sweep = sweep_from_profile(profile)
    return {"sizes": {str(size): {"iterations": n, "warmup": sweep.warmup(n), "bytes": t.bytes(size)}
                      for size, n in t.iterations.items()},
            "window": t.window, "needed": t.needed, "drop": t.drop, "drop_from": t.drop_from,
            "noise": t.noise, "noise_from": t.noise_from, "z": round(t.z, 3), "compared": t.compared}


def what_to_change(plan: dict, profile: Profile, rate: str | None) -> list[str]:
    """What would make an estimate over its limit fit: more time, a cheaper pattern, concurrent rails,
    and the largest suite."""
    total, limit = plan["estimated_seconds"], plan["limit_seconds"]
    need = math.ceil(total / 60)
    out = []
    if plan["limit_from"] == "the Slurm job's time left":
        out.append(f"a longer Slurm allocation (--time={need + 5}) or a smaller part of the fleet")
    else:
        out.append(f"a larger budget: --budget {need}m (or run.budget = \"{need}min\")")
    if not plan["screening"]:
        cheaper = model.resolve_pattern(profile, plan["nodes"], plan["rails"], plan["rail_mode"], limit, rate, "auto")[0]
        cheap = model.estimate(profile, plan["nodes"], plan["rails"], cheaper, plan["rail_mode"], rate).total
        if cheap <= limit:
            out.append(f"--pattern {cheaper} (or rdma_write.pattern = \"auto\"): {human_seconds(cheap)}")
    if plan["rail_mode"] == "serial" and plan["estimated_seconds_concurrent"] <= limit:
        out.append(f"every rail at once: run.rail_mode = \"concurrent\" "
                   f"({human_seconds(plan['estimated_seconds_concurrent'])})")
    name, seconds = max(plan["suites"].items(), key=lambda kv: kv[1])
    pairwise = "fewer rounds (--pattern screen:K, or auto) or a smaller sweep (sweep.max_size, sweep.bytes_per_size)"
    hint = {"collective": "a smaller sweep (sweep.max_size, sweep.bytes_per_size, sweep.max_iters), the all-to-all "
                          "over fewer ranks (collectives.alltoall_max_ranks: its connections), or leave it out: "
                          "-- -m 'not collective'",
            "perftest": "a shorter perftest.duration, or fewer rounds (--pattern screen:K)",
            "incast": "a shorter incast.duration", "rdma_write": pairwise, "gpudirect": pairwise,
            "intranode": "a smaller intranode.size or intranode.iters"}.get(name)
    out.append(f"the largest part is {name} ({human_seconds(seconds)})" + (f": {hint}" if hint else ""))
    return out


def plan_text(plan: dict) -> str:
    """The plan for people: one line per item, then the suites."""
    nodes, rails, chosen = plan["nodes"], plan["rails"], plan["pattern"]
    kind, k = parse_pattern(chosen)
    if kind == "all-pairs":
        partners = f"every node meets every other node ({nodes - 1} partners)"
    elif kind == "screen" and plan["coverage"]["pairs"]["0"] == 1.0:
        partners = (f"every node meets every other node ({nodes - 1} partners) at screening's sizes; then "
                    f"confirmation of the suspects")
    elif kind == "screen":
        partners = (f"{plan['rounds']} rounds of disjoint pairs, every node in each"
                    f"{' but one' if nodes % 2 else ''}; then confirmation of the suspects")
    else:
        partners = f"{plan['rounds']} rounds spread over the all-pairs schedule"
    asked = "" if plan["pattern_asked"] == chosen else f"   (from {plan['pattern_asked']})"
    mode = ("every rail at once: each rank drives its own NIC" if plan["rail_mode"] == "concurrent"
            else "one rail after another")
    other = "serial" if plan["rail_mode"] == "concurrent" else "concurrent"
    sizes = ", ".join(format_size(s) for s in plan["sizes"])
    rows = [
        ("nodes x rails", f"{nodes} x {rails}   (rails {plan['rail_mode']}: {mode})"),
        ("pattern", f"{chosen}{asked}: {partners}"),
        ("rounds per rail", f"{plan['rounds']}   (a round: {nodes // 2} disjoint pairs measured at once, "
                            f"{'one node idle' if nodes % 2 else 'no node idle'})"),
        ("node pairs per rail", f"{plan['pairs_per_rail']}"),
        ("coverage", coverage_text(plan["coverage"])),
        ("sizes", f"{sizes}" + ("   (screening: the smallest and those with bounds)" if plan["screening"] else "")),
    ]
    if plan["sample"]:
        rows.append(("sample", sample_text(plan["sample"], plan["rounds"])))
    if plan["screening_transfer"]:
        rows.append(("screening", transfer_text(plan["screening_transfer"], plan["sizes"][0])))
    rows += [
        ("latency samples", f"{plan['latency_iters']} per pair-direction"),
        ("records", f"{plan['records']:,} (each through rank 0, then the analysis)"),
        ("rate", f"{plan['rate_gbits']:g} Gbit/s   ({plan['rate_from']})"),
    ]
    for name, seconds in plan["suites"].items():
        rows.append((f"  {name}", human_seconds(seconds)))
    for name, seconds in plan["overheads"].items():
        rows.append((f"  {name}", human_seconds(seconds)))
    reserve = plan["relaunch_reserve"]
    if reserve:
        rows.append(("  relaunch reserve", f"{human_seconds(reserve['seconds'])}   (run.attempts {reserve['attempts']}: "
                                           f"room for one relaunch after a lost node: launch "
                                           f"{human_seconds(reserve['launch'])} + world setup "
                                           f"{human_seconds(reserve['world setup'])} + the longest step "
                                           f"{human_seconds(reserve['longest step'])})"))
    if any(part["init"] or part["connections"] for part in plan["setup"].values()):
        rows.append(("setup", setup_text(plan["setup"])))
    rows.append(("estimated duration", f"{human_seconds(plan['estimated_seconds'])}   (rails {other}: "
                                       f"{human_seconds(plan[f'estimated_seconds_{other}'])})"))
    if plan["limit_seconds"] is not None:
        verdict = "fits" if plan["fits"] else "DOES NOT FIT"
        rows.append(("limit", f"{human_seconds(plan['limit_seconds'])}   ({plan['limit_from']}): {verdict}"))
    else:
        rows.append(("limit", "none (no run.budget, --budget or Slurm job)"))
    for item in plan["gave_up"]:
        rows.append(("gave up", item))
    step = plan["longest_step"]
    fits = "fits" if step["seconds"] < step["hang_timeout"] else "DOES NOT FIT"
    rows.append(("longest step", f"{human_seconds(step['seconds'])}   ({step['what']}); run.hang_timeout "
                                 f"{human_seconds(step['hang_timeout'])}: {fits} (the deadline bounds a step, "
                                 f"not a test)"))
    rows += costs_rows(plan["costs"])
    width = max(len(label) for label, _ in rows) + 1
    return "\n".join(f"{label + ':':<{width}} {value}" for label, value in rows)


def setup_text(setup: dict) -> str:
    """NCCL's setup: each communicator's init, the all-to-all's connections, and what was left out."""
    names = {"world": "the world's", "rails": "each rail's", "node": "each node's"}
    world = [f"the world's {human_seconds(p['init'])} (world setup)" for s, p in setup.items()
             if s == "world" and p["init"]]
    inits = [f"{names[s]} {human_seconds(p['init'])}" for s, p in setup.items() if p["init"] and s != "world"]
    conns = [f"{s} {human_seconds(p['connections'])}" for s, p in setup.items() if p["connections"]]
    left = [f"{s} ({p['ranks']:,} ranks)" for s, p in setup.items() if p["connections"] is None]
    parts = []
    if world or inits:
        parts.append("communicators' init: " + ", ".join(world + ([", ".join(inits) + " (in collective)"] if inits
                                                                   else [])))
    if conns:
        parts.append(f"all-to-all connections {', '.join(conns)} (in collective)")
    if left:
        parts.append(f"all-to-all left out over {', '.join(left)} (gave up)")
    return "; ".join(parts)


def coverage_text(cov: dict) -> str:
    """"8.0% of node pairs per rail; leaf pairs 100% (rails 0-7); cables: routes unknown"."""
    def per_rail(values: dict) -> str:
        shown = {v for v in values.values()}
        if len(shown) == 1:
            v = shown.pop()
            return "n/a (one leaf)" if v is None else f"{100 * v:.3g}% on every rail"
        return ", ".join(f"rail {r}: " + ("n/a" if v is None else f"{100 * v:.3g}%") for r, v in values.items())
    parts = [f"node pairs {per_rail(cov['pairs'])}"]
    parts.append(f"leaf pairs {per_rail(cov['leaf_pairs'])}" if "leaf_pairs" in cov
                 else f"leaf pairs: {cov['notes']['leaf_pairs']}")
    parts.append(f"cables {per_rail(cov['cables'])}" if "cables" in cov else f"cables: {cov['notes']['cables']}")
    return "; ".join(parts)


def transfer_text(t: dict, smallest: int) -> str:
    """"1 x 512MiB (64 writes of 8MiB) per pair-direction (+1 warmup): enough to see a 10% drop at 1% noise ..."."""
    sizes = ", ".join(f"{v['iterations']} x {format_size(v['bytes'] // v['iterations'])} ({t['window']} writes of "
                      f"{format_size(int(size))}) per pair-direction (+{v['warmup']} warmup)"
                      for size, v in t["sizes"].items())
    unbounded = "" if str(smallest) in t["sizes"] else f"; {format_size(smallest)} as the sweep has it (no bound)"
    return (f"{sizes or 'no bounded size'}: enough to see a {100 * t['drop']:.3g}% drop ({t['drop_from']}) at "
            f"{100 * t['noise']:.3g}% noise per iteration ({t['noise_from']}), {t['z']:.3g} sigma clear for "
            f"{t['compared']:,} pair-directions compared{unbounded}")


def costs_rows(costs: dict) -> list[tuple[str, str]]:
    """One row for the assumed costs (no source), one naming the rest (--json has each source)."""
    assumed = [f"{name}={v['value']:g}" for name, v in costs.items() if v["from"] == "assumed"]
    sourced = [name for name, v in costs.items() if v["from"] != "assumed"]
    rows = [("costs assumed", ", ".join(assumed) + "   (no source: acceptance/runtime/estimate.py, setup_costs.py)")] if assumed else []
    if sourced:
        rows.append(("costs sourced", ", ".join(sourced) + "   (measured or the profile's: --json says where)"))
    return rows


def over_limit_message(plan: dict) -> str:
    """The exit-2 message: the estimate, the limit, and what to change."""
    lines = [f"the estimate ({human_seconds(plan['estimated_seconds'])} with {plan['pattern']}, rails "
             f"{plan['rail_mode']}) exceeds {plan['limit_from']} ({human_seconds(plan['limit_seconds'])}); change:"]
    return "\n".join(lines + [f"  - {c}" for c in plan["change"]])


# ---- the command ----

def budget_arg(text: str) -> str:
    """--budget's check at parse time, so a bad value names the flag (argparse: "argument --budget: ...")."""
    try:
        model.parse_budget(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_parser(sub) -> None:
    plan = sub.add_parser(
        "plan", help="estimated duration of a whole acceptance, and the pattern that fits a time budget",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Estimate how long every suite of the profile takes on N nodes x R rails (data checks, "
                    "launch and analysis included), choose the node-pair pattern that fits the time budget, "
                    "and check that the longest step fits the hang timeout. Runs nothing.",
        epilog="A round is a set of disjoint node pairs (no node twice), all measured at the same time;\n"
               "each pair is measured in both directions. With run.rail_mode \"concurrent\" (the default)\n"
               "every rail walks its rounds at once, each rank on its own NIC; \"serial\" is one rail after\n"
               "another, R times as long. The models and their assumptions: acceptance/runtime/estimate.py\n"
               "and docs/plan.md; --json lists them.\n\n"
               "patterns:\n"
               "  all-pairs  every node pair: N-1 rounds for even N, N for odd N (one node idle per round)\n"
               "  sample:K   K rounds of the all-pairs schedule, spread across it\n"
               "  screen:K   K rounds of disjoint pairs, every node in each, seeded random or from the switch\n"
               "             tree; only the sizes with bounds and the latency samples the gated percentile\n"
               "             needs; write bandwidth in every round, the other pairwise tests in\n"
               "             rdma_write.sample_rounds (32) of them; then the suspects are measured again\n"
               "             (confirmation)\n"
               "  auto       all-pairs when it fits the budget, else screen:K with the largest K that fits\n"
               "             (2 <= K <= N-1, where screening meets every pair), with perftest and incast\n"
               "             shortened to 1 s and 0.5 s when that buys rounds; where even screen:2 does not\n"
               "             fit, fewer iterations at the sizes without a bound (sweep.max_iters) and the\n"
               "             all-to-all left out over the largest communicators, whose first call connects\n"
               "             every peer (collectives.alltoall_max_ranks); the hardware profiles use it\n\n"
               "The estimate counts NCCL's setup (each communicator's init, the all-to-all's connections) and,\n"
               "with run.attempts > 1, room for one relaunch (launch + world setup + the longest step).\n\n"
               "The limit is the budget (--budget, else run.budget) or, inside a Slurm job, its time left,\n"
               "whichever is smaller. Exit 2 when the estimate exceeds it, saying what to change, or when\n"
               "the longest step cannot fit run.hang_timeout; `acceptance run` checks the same first.\n\n"
               "examples:\n"
               "  acceptance plan --nodes 1024 --rails 8 --profile h100-ndr400\n"
               "  acceptance plan --nodes 1024 --rails 8 --profile h100-ndr400 --json\n"
               "  acceptance plan --nodes 128 --rails 8 --profile h100-ndr400 --budget 15m\n"
               "  acceptance plan --nodes 2048 --rails 8 --pattern screen:8 --rail-mode serial\n"
               "  acceptance plan --rails 8 --pattern sample:16 --topology /etc/slurm/topology.conf\n"
               "  acceptance plan --run reports/RUN_ID   (pairs that would decide its ambiguous findings)\n")
    plan.add_argument("--nodes", type=int, metavar="N",
                      help="nodes in the cluster (>= 2; default with --topology: the tree's nodes)")
    plan.add_argument("--rails", type=int, metavar="R", help="rails (NICs) per node (>= 1; required)")
    plan.add_argument("--pattern", metavar="all-pairs|sample:K|screen:K|auto",
                      help="node pairs per rail (default: the profile's rdma_write.pattern)")
    plan.add_argument("--profile", metavar="NAME|PATH",
                      help="profile whose suites and settings are estimated (default: local)")
    plan.add_argument("--budget", type=budget_arg, metavar="DURATION",
                      help="time the whole acceptance may take, e.g. 30m, 45min, 1h (default: the profile's "
                           "run.budget; the hardware profiles set 30min)")
    plan.add_argument("--rail-mode", choices=RAIL_MODES,
                      help="rails at once or one after another (default: $ACCEPTANCE_RAIL_MODE, else the "
                           "profile's run.rail_mode, concurrent)")
    plan.add_argument("--json", action="store_true",
                      help="print the whole plan as one JSON object (estimated_seconds, suites, pattern, rounds, "
                           "coverage, screening_transfer, rail_mode, durations, budget_seconds, fits, gave_up, "
                           "change, costs with where each comes from, ...)")
    plan.add_argument("--rate", metavar="RATE",
                      help='link rate for the estimate, e.g. "400Gbit/s" (default: the profile\'s '
                           "rdma_write.bandwidth_min at its largest size, else 100Gbit/s)")
    plan.add_argument("--topology", metavar="PATH",
                      help="the cluster's switch tree (Slurm topology.conf or topology.yaml, ibnetdiscover "
                           "output, or a folder of rail<N>* ibnetdiscover outputs): also say which switch and "
                           "uplink faults the pattern cannot tell apart, and the extra pairs that would decide")
    plan.add_argument("--routes", metavar="PATH",
                      help="with --topology (ibnetdiscover output): the fabric's forwarding tables (ibroute or "
                           "dump_lfts.sh output, ibdiagnet2.fdbs, or a folder of them): the plan then says which "
                           "share of the switch-to-switch cables its pairs cross (default: $ACCEPTANCE_ROUTES, "
                           "else the profile's topology.routes)")
    plan.add_argument("--run", metavar="RUN_DIR",
                      help="with --topology (or the tree run.json keeps): for each finding of RUN_DIR whose "
                           "measured pairs cannot tell two explanations apart, the pairs that would decide")
    plan.set_defaults(func=cmd_plan)


def cmd_plan(args) -> int:
    profile = load_profile(args.profile)
    fabric = None
    if args.topology or args.run or args.routes:
        fabric = _fabric(profile, args.topology, args.run, args.routes)
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
        plan = make_plan(nodes, args.rails, profile, args.pattern, args.rail_mode, args.budget, args.rate,
                         fabric=fabric, names=tree_nodes)
    except ValueError as e:
        raise UsageError(str(e)) from None
    problem = plan["step_problem"]
    if args.json:
        print(json.dumps(plan, indent=1))
    else:
        print(plan_text(plan))
        if fabric is not None:
            print(tree_text(fabric, tree_nodes[:nodes], args.rails, plan["pattern"]))
    if not plan["fits"]:
        raise UsageError(over_limit_message(plan))
    if problem:
        raise UsageError(problem)
    return EXIT_OK


def check_before_run(profile: Profile, nodes: int, rails: int, budget: str | None, env=None) -> dict:
    """`acceptance run`'s check before it launches anything: the plan, or UsageError (exit 2) naming what to
    change when the estimate exceeds the budget or the Slurm job's time left."""
    try:
        plan = make_plan(max(2, nodes), max(1, rails), profile, budget=budget, env=env)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not plan["fits"]:
        raise UsageError(over_limit_message(plan) + f"\n  (`acceptance plan --nodes {nodes} --rails {rails} "
                                                   f"--profile {profile.name}` shows the whole estimate)")
    return plan


def _fabric(profile: Profile, topology: str | None, run_dir: str | None, routes: str | None = None):
    try:
        if topology or (routes and not run_dir):
            return fabric_for(profile, topology or "", routes)
        kept = read_json(Path(run_dir) / "run.json").get("fabric")
        if not isinstance(kept, dict):
            raise UsageError(f"{run_dir}/run.json keeps no switch tree: give --topology PATH")
        if routes:  # the kept tree's cabling, read again, with these routes
            return fabric_for(profile, kept.get("source") or "", routes)
        return kept_fabric(kept)
    except (InputError, ValueError) as e:
        raise UsageError(f"--topology: {e}" if topology else str(e)) from None


def tree_text(fabric: Fabric, nodes: list[str], rails: int, pattern: str) -> str:
    """Per rail's tree: what the pattern's pairs cannot tell apart, and the pairs that would."""
    from ..analysis.deciding import pattern_gaps  # pandas: imported here to keep it out of node-check's start
    lines = [f"switch tree: {fabric.format} {fabric.source}"] + [f"  note: {n}" for n in fabric.notes]
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
        # screen:K follows the tree (seed 0 here: the plan shows the shape, a run draws its own seed)
        leaf_of = {node: leaf for leaf, members in tree.leaves.items() for node in members}
        leaves = [leaf_of.get(node, f"(no leaf) {node}") for node in nodes]
        pairs = {(nodes[a], nodes[b]) for rnd in schedule(len(nodes), pattern, leaves=leaves) for a, b in rnd}
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
    from ..analysis.deciding import deciding_pairs  # pandas: imported here to keep it out of node-check's start
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
