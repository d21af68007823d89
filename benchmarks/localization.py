"""Localization accuracy, measured: synthetic runs with known faults through the real analysis.

    .venv/bin/python benchmarks/localization.py [--nodes 16,256,1024] [--rails 8] [--partners 8]
                                                [--cases 4] [--clean 20] [--noise 0.01] [--noise-tail 3]
                                                [--noise-from RUN_DIR] [--factors 0.5,0.8]
                                                [--fabric one-spine|two-level] [--spines S] [--inside K]
                                                [--seed 0] [--quick] [--json] [--keep DIR]

Per node count, one run is written as a screening schedule measures it (tests/synthetic.py
make_run_sampled): per rail, --partners rounds of random disjoint node pairs (seeded; 0, or K
rounds that would meet half a node's partners or more: every pair), each pair both ways, with rdma_write bandwidth at 64 KiB and 8 MiB and write latency p50,
p99, p99.9 and max at 8 B, beside a Slurm topology.conf (sqrt(nodes) leaves of contiguous nodes,
one spine; synthetic.topology_conf). Its records are loaded once as `acceptance report` loads them
(acceptance.analysis.load_records); each case then draws fresh noise and its faults into those
records' values (synthetic.sampled_values) and is analysed with the run's profile and switch tree
(acceptance.analysis.find, then drain_lines), as `acceptance report RUN --topology topology.conf`
does. Faults sit at random positions with random factors (--factors: 0.5-0.8 of healthy; a
latency is divided by the factor). Classes:

  clean    no fault (--clean runs; the false findings of a healthy run)
  link     one pair, both directions, on one rail
  nic      one node's NIC on one rail
  node     one node on every rail
  rail     one rail plane
  leaf     one leaf switch on one rail (every pair with an end on it)
  uplink   one leaf's uplink on one rail (the pairs with exactly one end on the leaf)
  spine    the spine on one rail (every pair across two leaves)
  two      two faults on one rail, by case: an uplink and a NIC on another leaf; a link and a
           NIC; two NICs on two leaves; a leaf and a link away from it

The noise is multiplicative, exp(g) with g Student-t of --noise-tail degrees of freedom (heavy
tails; 0: uniform +-noise instead), scaled to a robust spread (1.4826 MAD) of --noise for
bandwidth and LATENCY_NOISE times that for the latency percentiles (2x p50, 4x p99, 10x p99.9,
20x max). --noise-from RUN_DIR measures the spread from a healthy run of the site's own instead:
the robust spread of log(value / median) of its rdma_write bandwidths at their largest size, per rail.

--fabric two-level (issue 41, "blame the right part") puts the nodes on a two-level tree instead:
sqrt(nodes) leaves, --spines spines (default: as many as the largest leaf has nodes, so each
spine-to-leaf cable carries the inbound traffic of one node), every leaf joined to every spine,
routed by destination (D-mod-K: a flow to node i climbs to spine i mod S, as OpenSM's default
engines route; synthetic.TwoLevel). Its schedule is --partners rounds (default 16), --inside of them
(default 2) pairing every node inside its leaf, as tree-aware screening must; its profile is
h100-ndr400's (rdma_write latency not gated: the hardware profiles' case) with the 8 MiB floor at
100 Gbit/s, under anything the synthetic noise reaches. Each case is analysed twice, with the fabric's routes and
with the tree alone. Classes, 20 cases each by default (--cases, --clean):

  clean    no fault
  cable    one leaf-spine cable on one rail at x0.5: both directions, spine to leaf, leaf to spine in turn
  oneway   one NIC on one rail at x0.7 sending, then receiving, in turn (the other direction healthy)
  tail     one NIC on one rail with its latency p99 (p99.9, max) x2 to every partner, its p50 healthy

A cable is hit by an uplink-scope finding naming it in `uplinks` (with routes), or naming the
leaf at its end (without: the path beyond a node's leaf port is what the tree can say); oneway and
tail by the NIC's own finding.

Every fail or warn finding is held against the injected faults. It is a hit when its scope and
component are the fault's: link (scope link, the pair, the rail), nic (node, rail), node (node),
rail (rail), leaf (scope switch, that leaf, the rail), uplink (scope uplink, that leaf, the
rail), spine (scope switch, the spine, the rail). Only the finding's own scope and component
count: one that names the fault only among its alternatives (pairs that cannot tell them apart)
is a false positive, and is counted in the `alt` column too. precision = hits / findings (1.0
when there are none), recall = faults hit / faults injected (1.0 when none were), wrong drains
= drain lines for nodes that are not an injected NIC or node fault's; false fail / false warn:
findings that hit nothing, by severity (for clean, the false findings of a healthy run).

Prints one table per node count (a line per class and a total line), then every case that
missed, misnamed or drained wrongly; --json prints one JSON object instead. Progress goes to
stderr. Exit 0 whatever the accuracy (a measurement, not a test), 1 on an error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import synthetic  # noqa: E402
from acceptance.analysis import drain_lines, find, load_records  # noqa: E402
from acceptance.analysis.pipeline import resolve_fabric, run_profile  # noqa: E402
from acceptance.analysis.validate import topology_nodes  # noqa: E402

CLASSES = ("clean", "link", "nic", "node", "rail", "leaf", "uplink", "spine", "two")
TWO = ("uplink+nic", "link+nic", "nic+nic", "leaf+link")
# --fabric two-level: its classes and their fixed strengths (a cable at half rate, a NIC at 0.7x one
# way, a latency tail at twice its partners')
ROUTED = ("clean", "cable", "oneway", "tail")
ROUTED_FACTORS = {"cable": 0.5, "oneway": 0.7, "tail": 2.0}
CABLE_WAYS = ("both", "down", "up")
FACTORS = (0.5, 0.8)
SIZES = (65536, 8388608)
KWARG = {"link": "slow_link", "nic": "slow_nic", "node": "slow_node", "rail": "slow_rail", "leaf": "slow_leaf",
         "uplink": "slow_uplink", "spine": "slow_spine", "cable": "slow_cable", "tx": "slow_tx", "rx": "slow_rx",
         "tail": "slow_tail"}
# The hardware profile the two-level runs are judged with: h100-ndr400's rules (rdma_write latency not
# gated), its 8 MiB floors under what the synthetic noise ever reaches (368 Gbit/s, never below half
# of it: synthetic.NOISE_MAX), so that the fleet rules, not a floor, find what there is to find.
HARDWARE = """extends = "h100-ndr400"
[rdma_write]
bandwidth_min = { "8MiB" = "100Gbit/s" }
read_bandwidth_min = { "8MiB" = "100Gbit/s" }
[perftest]
required = false
"""


def leaves_for(nodes: int) -> int:
    return max(2, round(math.sqrt(nodes)))


# ---- the cases ----

class Picker:
    """Random fault positions on one run's nodes, leaves and rails."""

    def __init__(self, rng: np.random.Generator, names: list[str], leaves: int, rails: int,
                 factors: tuple[float, float] = FACTORS, measured: list[list[tuple[str, str]]] | None = None):
        self.rng, self.names, self.rails, self.factors, self.measured = rng, names, rails, factors, measured
        self.tree = synthetic.leaf_nodes(names, leaves)
        self.leaf_of = {n: leaf for leaf, ns in self.tree.items() for n in ns}

    def factor(self) -> float:
        return round(float(self.rng.uniform(*self.factors)), 3)

    def rail(self) -> int:
        return int(self.rng.integers(self.rails))

    def leaf(self, besides=()) -> str:
        return str(self.rng.choice([x for x in self.tree if x not in besides]))

    def node(self, besides=(), off_leaves=()) -> str:
        return str(self.rng.choice([n for n in self.names if n not in besides and self.leaf_of[n] not in off_leaves]))

    def pair(self, rail: int, besides=(), off_leaves=()) -> tuple[str, str]:
        """A pair the schedule measures on the rail (a fault on a pair nobody measures is no case)."""
        if self.measured is None:
            a = self.node(besides, off_leaves)
            return a, self.node((*besides, a), off_leaves)
        ok = [(a, b) for a, b in self.measured[rail] if a not in besides and b not in besides
              and self.leaf_of[a] not in off_leaves and self.leaf_of[b] not in off_leaves]
        return ok[int(self.rng.integers(len(ok)))]


def fault(kind: str, p: Picker, rail: int | None = None, **where) -> dict:
    """One injected fault: {"kind", its component's fields, "factor"}."""
    rail = p.rail() if rail is None else rail
    if kind == "link":
        a, b = p.pair(rail, **where)
        return {"kind": "link", "nodes": [a, b], "rail": rail, "factor": p.factor()}
    if kind == "nic":
        return {"kind": "nic", "node": p.node(**where), "rail": rail, "factor": p.factor()}
    if kind == "node":
        return {"kind": "node", "node": p.node(**where), "factor": p.factor()}
    if kind == "rail":
        return {"kind": "rail", "rail": rail, "factor": p.factor()}
    if kind in ("leaf", "uplink"):
        return {"kind": kind, "leaf": p.leaf(**where), "rail": rail, "factor": p.factor()}
    if kind == "spine":
        return {"kind": "spine", "rail": rail, "factor": p.factor()}
    raise ValueError(kind)


def routed_faults(cls: str, i: int, p: Picker, spines: list[str]) -> tuple[list[dict], str]:
    """The faults of case i of a --fabric two-level class, and the case's label."""
    if cls == "clean":
        return [], "clean"
    rail, k = p.rail(), ROUTED_FACTORS[cls]
    if cls == "cable":
        way = CABLE_WAYS[i % len(CABLE_WAYS)]
        return [{"kind": "cable", "leaf": p.leaf(), "spine": str(p.rng.choice(spines)), "rail": rail,
                 "direction": way, "factor": k}], f"cable {way}"
    if cls == "oneway":
        way = ("tx", "rx")[i % 2]
        return [{"kind": way, "node": p.node(), "rail": rail, "factor": k}], f"oneway {way}"
    return [{"kind": "tail", "node": p.node(), "rail": rail, "factor": k}], "tail"


def case_faults(cls: str, i: int, p: Picker) -> tuple[list[dict], str]:
    """The faults of case i of a class, and the case's label."""
    if cls == "clean":
        return [], "clean"
    if cls != "two":
        return [fault(cls, p)], cls
    combo = TWO[i % len(TWO)]
    rail = p.rail()
    if combo == "uplink+nic":
        up = fault("uplink", p, rail)
        return [up, fault("nic", p, rail, off_leaves=(up["leaf"],))], combo
    if combo == "link+nic":
        link = fault("link", p, rail)
        return [link, fault("nic", p, rail, besides=tuple(link["nodes"]))], combo
    if combo == "nic+nic":
        a = fault("nic", p, rail)
        return [a, fault("nic", p, rail, off_leaves=(p.leaf_of[a["node"]],))], combo
    leaf = fault("leaf", p, rail)
    return [leaf, fault("link", p, rail, off_leaves=(leaf["leaf"],))], combo


def make_kwargs(faults: list[dict]) -> dict:
    """make_run's fault arguments (a list of specs where a kind repeats)."""
    specs: dict[str, list[tuple]] = {}
    for f in faults:
        k = f["kind"]
        spec = {"link": lambda: (*f["nodes"], f["rail"]), "nic": lambda: (f["node"], f["rail"]),
                "node": lambda: (f["node"],), "rail": lambda: (f["rail"],),
                "leaf": lambda: (f["leaf"], f["rail"]), "uplink": lambda: (f["leaf"], f["rail"]),
                "spine": lambda: (f["rail"],), "cable": lambda: (f["leaf"], f["spine"], f["rail"], f["direction"]),
                "tx": lambda: (f["node"], f["rail"]), "rx": lambda: (f["node"], f["rail"]),
                "tail": lambda: (f["node"], f["rail"])}[k]()
        specs.setdefault(KWARG[k], []).append((*spec, f["factor"]))
    return {key: v[0] if len(v) == 1 else v for key, v in specs.items()}


# ---- matching findings to faults ----

def is_component(f: dict, comp: dict, routed: bool = True) -> bool:
    """Does a finding (or one of its alternatives: {scope, switch, node, rail}) name this fault? A
    cable: with routes, by the cable in its `uplinks`; without, by the leaf at its end."""
    kind, scope = f["kind"], comp.get("scope")
    if kind == "cable":
        if scope != "uplink" or comp.get("rail") != f["rail"]:
            return False
        if not routed:
            return comp.get("switch") == f["leaf"]
        return any(u.get("leaf") == f["leaf"] and u.get("spine") == f["spine"] for u in comp.get("uplinks") or [])
    if kind in ("tx", "rx", "tail"):
        return scope == "nic" and comp.get("node") == f["node"] and comp.get("rail") == f["rail"]
    if kind == "link":
        return scope == "link" and comp.get("rail") == f["rail"] and {comp.get("node"), comp.get("peer")} == set(f["nodes"])
    if kind == "nic":
        return scope == "nic" and comp.get("node") == f["node"] and comp.get("rail") == f["rail"]
    if kind == "node":
        return scope == "node" and comp.get("node") == f["node"]
    if kind == "rail":
        return scope == "rail" and comp.get("rail") == f["rail"]
    if kind in ("leaf", "spine"):
        name = f["leaf"] if kind == "leaf" else "spine"
        return scope == "switch" and comp.get("switch") == name and comp.get("rail") == f["rail"]
    if kind == "uplink":
        return scope == "uplink" and comp.get("switch") == f["leaf"] and comp.get("rail") == f["rail"]
    raise ValueError(kind)


def short(f: dict) -> str:
    """A finding in a few words: severity scope component rail."""
    what = {"link": lambda: f"{f['node']}<->{f['peer']}", "nic": lambda: f["node"], "node": lambda: f["node"],
            "switch": lambda: f["switch"],
            "uplink": lambda: "/".join(u["cable"] for u in f["uplinks"] if u.get("cable")) or (
                f"{f['switch']} beyond {f['node']}" if f.get("node") else f["switch"])}.get(f["scope"], lambda: "")()
    if f.get("direction"):
        what += f" {f['direction']}"
    rail = f" rail {f['rail']}" if f.get("rail") is not None else ""
    alts = f" (alternatives: {len(f['alternatives'])})" if f.get("alternatives") else ""
    return f"{f['severity']} {f['scope']} {what}{rail}{alts}".replace("  ", " ")


def describe(f: dict) -> str:
    where = {"link": lambda: "<->".join(f["nodes"]), "nic": lambda: f["node"], "node": lambda: f["node"],
             "leaf": lambda: f["leaf"], "uplink": lambda: f["leaf"],
             "cable": lambda: f"{f['leaf']}-{f['spine']} {f['direction']}", "tx": lambda: f["node"],
             "rx": lambda: f["node"], "tail": lambda: f"{f['node']} p99"}.get(f["kind"], lambda: "")()
    rail = f" rail {f['rail']}" if "rail" in f else ""
    return f"{f['kind']} {where}{rail} x{f['factor']}".replace("  ", " ")


def score(faults: list[dict], findings: list[dict], drains: list, routed: bool = True) -> dict:
    found = [f for f in findings if f["severity"] in ("fail", "warn")]
    hits = [any(is_component(t, f, routed) for t in faults) for f in found]
    alt = [not h and any(is_component(t, a, routed) for t in faults for a in f.get("alternatives") or [])
           for f, h in zip(found, hits)]
    recalled = [any(is_component(t, f, routed) for f in found) for t in faults]
    drainable = {t["node"] for t in faults if t["kind"] in ("nic", "node", "tx", "rx", "tail")}
    drained = [d.node for d in drains]
    return {"findings": len(found), "hits": sum(hits), "false_positives": [short(f) for f, h in zip(found, hits) if not h],
            "false_fail": sum(1 for f, h in zip(found, hits) if not h and f["severity"] == "fail"),
            "false_warn": sum(1 for f, h in zip(found, hits) if not h and f["severity"] == "warn"),
            "alt": sum(alt), "injected": len(faults), "recalled": sum(recalled),
            "missed": [describe(t) for t, r in zip(faults, recalled) if not r],
            "wrong_drains": [n for n in drained if n not in drainable]}


# ---- running ----

class Base:
    """One node count's schedule: its run written and loaded once, its profile, tree and node names."""

    def __init__(self, tmp: Path, nodes: int, args: argparse.Namespace):
        self.nodes, self.leaves = nodes, leaves_for(nodes)
        self.names = synthetic.node_names(nodes)
        self.dir = tmp / f"n{nodes}"
        self.partners = args.schedule[nodes]
        self.two_level = args.fabric == "two-level"
        extra = {}
        if self.two_level:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "hardware.toml").write_text(HARDWARE)
            self.spines = args.spines or max(len(v) for v in synthetic.leaf_nodes(self.names, self.leaves).values())
            extra = {"profile": str(self.dir / "hardware.toml"), "spines": self.spines, "inside": args.inside}
        synthetic.make_run_sampled(self.dir, nodes=nodes, rails=args.rails, partners=self.partners, sizes=SIZES,
                                   noise=args.noise, tail=args.noise_tail, seed=args.seed * 1_000_003 + nodes,
                                   leaves=self.leaves, **extra)
        run = json.loads((self.dir / "run.json").read_text())
        self.records = load_records(self.dir)
        self.profile = run_profile(self.dir)
        if self.two_level:
            self.tree = synthetic.TwoLevel(self.names, self.leaves, self.spines)
            self.fabric, self.fabric_tree = self.tree.fabric(), self.tree.fabric(routes=None)
        else:
            conf = self.dir / "topology.conf"
            conf.write_text(synthetic.topology_conf(self.names, self.leaves))
            self.fabric = resolve_fabric(run, self.profile, conf)
        self.known = topology_nodes(run, self.dir / "run.json")
        bw = self.records[self.records["metric"].astype(str) == "bandwidth"]
        links = bw[bw["src"].astype(str) < bw["dst"].astype(str)].drop_duplicates(["rail", "src", "dst"])
        self.measured = [list(zip(g["src"].astype(str), g["dst"].astype(str)))
                         for _, g in links.groupby("rail", sort=True)]


def run_routed(base: Base, args: argparse.Namespace, cls: str, i: int) -> list[dict]:
    """A --fabric two-level case, analysed with the routes and with the tree alone: two results."""
    nodes = base.nodes
    case_seed = args.seed * 1_000_003 + nodes * 1009 + (len(CLASSES) + ROUTED.index(cls)) * 101 + i
    rng = np.random.default_rng(case_seed)
    picker = Picker(rng, base.names, base.leaves, args.rails, args.factors, base.measured)
    faults, label = routed_faults(cls, i, picker, base.tree.spines)
    t0 = time.perf_counter()
    values = synthetic.sampled_values(base.records, nodes, args.rails, rng, args.noise, args.noise_tail,
                                      base.leaves, base.spines, **make_kwargs(faults))
    t1 = time.perf_counter()
    out = []
    for routed, fabric in ((True, base.fabric), (False, base.fabric_tree)):
        t2 = time.perf_counter()
        findings = find(base.records.assign(value=values), base.profile, fabric=fabric)
        drains = drain_lines(findings, base.known)
        out.append({"nodes": nodes, "leaves": base.leaves, "spines": base.spines, "class": cls, "routes": routed,
                    "case": i, "label": label, "seed": case_seed, "faults": faults,
                    "found": [short(f) for f in findings], **score(faults, findings, drains, routed),
                    "seconds": {"generate": round(t1 - t0, 2), "analyze": round(time.perf_counter() - t2, 2)}})
    return out


def run_case(base: Base, args: argparse.Namespace, cls: str, i: int) -> dict:
    nodes = base.nodes
    case_seed = args.seed * 1_000_003 + nodes * 1009 + CLASSES.index(cls) * 101 + i
    rng = np.random.default_rng(case_seed)
    picker = Picker(rng, base.names, base.leaves, args.rails, args.factors, base.measured)
    faults, label = case_faults(cls, i, picker)
    t0 = time.perf_counter()
    values = synthetic.sampled_values(base.records, nodes, args.rails, rng, args.noise, args.noise_tail,
                                      base.leaves, **make_kwargs(faults))
    t1 = time.perf_counter()
    findings = find(base.records.assign(value=values), base.profile, fabric=base.fabric)
    drains = drain_lines(findings, base.known)
    t2 = time.perf_counter()
    return {"nodes": nodes, "leaves": base.leaves, "class": cls, "case": i, "label": label, "seed": case_seed,
            "faults": faults, "found": [short(f) for f in findings], **score(faults, findings, drains),
            "seconds": {"generate": round(t1 - t0, 2), "analyze": round(t2 - t1, 2)}}


def measured_noise(run_dir: Path) -> tuple[float, int]:
    """(robust spread, values): the healthy spread of a real run's rdma_write bandwidths (see the top)."""
    df = load_records(run_dir)
    bw = df[(df["suite"].astype(str) == "rdma_write") & (df["metric"].astype(str) == "bandwidth")
            & df["rail"].notna() & df["size"].notna()]
    bw = bw[bw["size"] == bw["size"].max()]
    if len(bw) < 4:
        raise ValueError(f"{run_dir}: {len(bw)} rdma_write bandwidth records; a healthy run has more")
    value = bw["value"].astype(float)
    g = np.log(value / value.groupby(bw["rail"]).transform("median"))
    return float(1.4826 * np.median(np.abs(g))), len(bw)


def summarize(cases: list[dict]) -> dict:
    findings = sum(c["findings"] for c in cases)
    hits = sum(c["hits"] for c in cases)
    injected = sum(c["injected"] for c in cases)
    recalled = sum(c["recalled"] for c in cases)
    return {"cases": len(cases), "injected": injected, "recalled": recalled, "findings": findings, "hits": hits,
            "false_positives": findings - hits, "alt": sum(c["alt"] for c in cases),
            "false_fail": sum(c["false_fail"] for c in cases), "false_warn": sum(c["false_warn"] for c in cases),
            "precision": hits / findings if findings else 1.0, "recall": recalled / injected if injected else 1.0,
            "wrong_drains": sum(len(c["wrong_drains"]) for c in cases)}


def rows_of(args: argparse.Namespace) -> list[str]:
    """The table's rows: the classes; two-level: each with the routes, then with the tree alone."""
    if args.fabric != "two-level":
        return list(args.classes)
    return [f"{cls}{way}" for cls in args.classes for way in ("", "-tree")]


def row_of(c: dict) -> str:
    return c["class"] + ("-tree" if c.get("routes") is False else "")


HEADER = f"{'class':<11} {'cases':>5} {'faults':>6} {'found':>5} {'findings':>8} {'false+':>6} {'fail':>4} " \
         f"{'warn':>4} {'alt':>3} {'precision':>9} {'recall':>6} {'wrong drains':>12}"


def row(name: str, s: dict) -> str:
    return (f"{name:<11} {s['cases']:>5} {s['injected']:>6} {s['recalled']:>5} {s['findings']:>8} "
            f"{s['false_positives']:>6} {s['false_fail']:>4} {s['false_warn']:>4} {s['alt']:>3} "
            f"{s['precision']:>9.2f} {s['recall']:>6.2f} "
            f"{s['wrong_drains']:>12}")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default=None,
                    help="node counts, comma-separated (default 16,256,1024; --fabric two-level: 1024)")
    ap.add_argument("--rails", type=int, default=8, help="rails (default 8)")
    ap.add_argument("--partners", type=int, default=None,
                    help="K: rounds of random disjoint pairs per rail, each node meeting K partners (default 8, "
                         "two-level 16; 0: every pair; where K rounds would meet half a node's partners or more, "
                         "every pair)")
    ap.add_argument("--cases", type=int, default=None,
                    help="cases per fault class and node count (default 4: each pair of faults of `two` once; "
                         "two-level 20)")
    ap.add_argument("--fabric", choices=("one-spine", "two-level"), default="one-spine",
                    help="one-spine: leaves under one spine, the classes above (default); two-level: leaves "
                         "joined to every spine, routed by destination, the classes clean, cable, oneway, tail")
    ap.add_argument("--spines", type=int, default=None,
                    help="two-level: spines (default: the largest leaf's nodes, a cable per node's inbound)")
    ap.add_argument("--classes", default=None,
                    help="only these classes, comma-separated (default: every class of the --fabric)")
    ap.add_argument("--inside", type=int, default=None,
                    help="of the K rounds, those that pair every node inside its leaf (tree-aware screening; "
                         "default 0, two-level 2)")
    ap.add_argument("--clean", type=int, default=20, help="clean (healthy) runs per node count (default 20)")
    ap.add_argument("--noise", type=float, default=0.01,
                    help="robust relative spread (1.4826 MAD) of the bandwidth noise (default 0.01)")
    ap.add_argument("--noise-tail", type=float, default=3.0, metavar="DOF",
                    help="Student-t degrees of freedom of the noise: heavy tails (default 3; 0: uniform +-noise)")
    ap.add_argument("--noise-from", metavar="RUN_DIR", type=Path,
                    help="measure the spread from a healthy run folder of your own (see the top) instead")
    ap.add_argument("--factors", default="0.5,0.8", metavar="LO,HI",
                    help="a fault multiplies healthy bandwidth by U(LO, HI) (default 0.5,0.8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="16 nodes, all pairs (what a screening plan measures at 16 nodes), one case per class "
                         "and one clean run (a smoke run)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    ap.add_argument("--keep", metavar="DIR", help="write the runs here and keep them")
    args = ap.parse_args(argv)
    two = args.fabric == "two-level"
    args.nodes = args.nodes or ("1024" if two else "16,256,1024")
    args.partners = args.partners if args.partners is not None else (16 if two else 8)
    args.cases = args.cases if args.cases is not None else (20 if two else 4)
    args.inside = args.inside if args.inside is not None else (2 if two else 0)
    every = ROUTED if two else CLASSES
    args.classes = tuple(c for c in every if c in args.classes.split(",")) if args.classes else every
    if not args.classes:
        ap.error(f"--classes: none of {', '.join(every)}")
    args.sizes = [16] if args.quick else [int(x) for x in args.nodes.split(",") if x.strip()]
    args.cases = 1 if args.quick else args.cases
    args.clean = 1 if args.quick else args.clean
    args.partners = 0 if args.quick else args.partners
    # K rounds meeting half or more of a node's possible partners cost as much as all pairs: measure all
    args.schedule = {n: 0 if args.partners * 2 >= n - 1 else args.partners for n in args.sizes}
    if args.cases < 1 or args.clean < 1 or args.rails < 1 or args.partners < 0 or any(n < 4 for n in args.sizes):
        ap.error("--cases, --clean and --rails must be >= 1, --partners >= 0 and every --nodes >= 4")
    try:
        lo, hi = (float(x) for x in args.factors.split(","))
    except ValueError:
        ap.error(f"--factors {args.factors!r}: want LO,HI, e.g. 0.5,0.8")
    if not 0 < lo <= hi < 1:
        ap.error(f"--factors {args.factors!r}: want 0 < LO <= HI < 1 (a fault slows)")
    args.factors = (lo, hi)
    args.noise_values = None
    if args.noise_from:
        try:
            args.noise, args.noise_values = measured_noise(args.noise_from)
        except (OSError, ValueError) as e:
            ap.error(f"--noise-from: {e}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    results: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="localization-") as tmp:
            root = Path(args.keep) if args.keep else Path(tmp)
            per = 2 if args.fabric == "two-level" else 1   # two-level: with the routes and with the tree alone
            total = per * len(args.sizes) * sum(args.clean if c == "clean" else args.cases for c in args.classes)
            for nodes in args.sizes:
                t0 = time.perf_counter()
                base = Base(root, nodes, args)
                print(f"localization: {nodes} nodes: {len(base.records):,} records written and loaded "
                      f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
                for cls in args.classes:
                    for i in range(args.clean if cls == "clean" else args.cases):
                        got = run_routed(base, args, cls, i) if per == 2 else [run_case(base, args, cls, i)]
                        for c in got:
                            results.append(c)
                            bad = " MISLOCALIZED" if c["false_positives"] or c["missed"] or c["wrong_drains"] else ""
                            how = ("" if "routes" not in c else " (routes)" if c["routes"] else " (tree alone)")
                            print(f"localization: {len(results)}/{total} {nodes} nodes {c['label']}{how} case {i}: "
                                  f"{c['hits']}/{c['findings']} findings hit, {c['recalled']}/{c['injected']} "
                                  f"faults found ({c['seconds']['generate'] + c['seconds']['analyze']:.1f} s){bad}",
                                  file=sys.stderr, flush=True)
                if not args.keep:
                    for f in base.dir.iterdir():
                        f.unlink()
    except Exception:  # noqa: BLE001 - a benchmark reports and exits 1
        traceback.print_exc()
        print("localization: error", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - start
    by_size = {}
    for nodes in args.sizes:
        mine = [c for c in results if c["nodes"] == nodes]
        clean = [c for c in mine if c["class"] == "clean"]
        by_size[str(nodes)] = {"leaves": leaves_for(nodes), "partners": args.schedule[nodes],
                               "classes": {label: summarize([c for c in mine if row_of(c) == label])
                                           for label in rows_of(args)},
                               "total": summarize(mine),
                               "faulty": summarize([c for c in mine if c["class"] != "clean"]),
                               "clean_false_fail_per_run": sum(c["false_fail"] for c in clean) / max(len(clean), 1),
                               "clean_false_warn_per_run": sum(c["false_warn"] for c in clean) / max(len(clean), 1)}
        if args.fabric == "two-level":
            by_size[str(nodes)]["spines"] = mine[0]["spines"] if mine else None
    config = {"nodes": args.sizes, "rails": args.rails, "partners": args.partners, "cases": args.cases,
              "clean": args.clean, "noise": args.noise, "noise_tail": args.noise_tail, "seed": args.seed,
              "noise_from": str(args.noise_from) if args.noise_from else None, "noise_values": args.noise_values,
              "factors": list(args.factors), "sizes": list(SIZES), "fabric": args.fabric, "inside": args.inside}
    if args.json:
        print(json.dumps({"config": config, "sizes": by_size, "total": summarize(results),
                          "cases": results, "seconds": round(seconds, 1)}))
        return 0
    tail = f"Student-t {args.noise_tail:g} dof" if args.noise_tail else "uniform"
    for nodes in args.sizes:
        s = by_size[str(nodes)]
        k = args.schedule[nodes]
        schedule = f"{k} random partners per node and rail" if k else "all pairs"
        source = f" (measured: {args.noise_values} values of {args.noise_from})" if args.noise_from else ""
        if args.fabric == "two-level":
            schedule = (f"{k} partners per node and rail ({args.inside} of them on its own leaf)" if k
                        else "all pairs")
            print(f"{nodes} nodes, {s['leaves']} leaves, {s['spines']} spines (every leaf to every spine, routed by "
                  f"destination), {args.rails} rails, {schedule}, noise {args.noise:.1%} ({tail}){source}, "
                  f"cable x{ROUTED_FACTORS['cable']}, one-way NIC x{ROUTED_FACTORS['oneway']}, latency p99 "
                  f"x{ROUTED_FACTORS['tail']}, {args.clean} clean run(s), {args.cases} case(s) per class, each "
                  f"analysed with the routes and with the tree alone")
        else:
            print(f"{nodes} nodes, {s['leaves']} leaves, {args.rails} rails, {schedule}, noise {args.noise:.1%} "
                  f"({tail}){source}, faults x{args.factors[0]}-{args.factors[1]}, {args.clean} clean run(s), "
                  f"{args.cases} case(s) per fault class")
        print(HEADER)
        for label in rows_of(args):
            print(row(label, s["classes"][label]))
        print(row("faults", s["faulty"]))
        print(f"false findings per clean run: {s['clean_false_fail_per_run']:.2f} fail, "
              f"{s['clean_false_warn_per_run']:.2f} warn")
        print()
    wrong = [c for c in results if c["false_positives"] or c["missed"] or c["wrong_drains"]]
    for c in wrong:
        how = "" if "routes" not in c else " with routes" if c["routes"] else " without routes"
        print(f"{c['nodes']} nodes {c['label']} case {c['case']}{how} (seed {c['seed']}): injected "
              f"{'; '.join(describe(t) for t in c['faults']) or 'nothing'}; found {'; '.join(c['found']) or 'nothing'}"
              + (f"; missed {'; '.join(c['missed'])}" if c["missed"] else "")
              + (f"; wrong drains {', '.join(c['wrong_drains'])}" if c["wrong_drains"] else ""))
    t = summarize(results)
    print(f"localization: {len(results)} cases, precision {t['precision']:.2f}, recall {t['recall']:.2f}, "
          f"{t['wrong_drains']} wrong drains, {t['false_fail']} false fail, {len(wrong)} case(s) wrong, "
          f"{seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
