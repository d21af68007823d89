"""Localization accuracy, measured: synthetic runs with known faults through the real analysis.

    .venv/bin/python benchmarks/localization.py [--nodes 16,64,256] [--cases 4] [--rails 4]
                                                [--noise 0.03 | --noise-from RUN_DIR] [--factors 0.5,0.8]
                                                [--seed 0] [--quick] [--json] [--keep DIR]

For every node count and every fault class, --cases synthetic runs (tests/synthetic.py make_run:
rdma_write bandwidth at 8 MiB for every ordered node pair on every rail; no latency, collectives
or memreg records) are written with faults injected at random positions with random factors
(--factors: 0.5-0.8 of healthy), each beside a Slurm topology.conf (sqrt(nodes) leaves of contiguous
nodes, one spine; synthetic.topology_conf), and analysed as `acceptance report RUN --topology
topology.conf` does (acceptance.analysis.analyze). Classes:

  clean    no fault
  link     one pair, both directions, on one rail
  nic      one node's NIC on one rail
  node     one node on every rail
  rail     one rail plane
  leaf     one leaf switch on one rail (every pair with an end on it)
  uplink   one leaf's uplink on one rail (the pairs with exactly one end on the leaf)
  spine    the spine on one rail (every pair across two leaves)
  two      two faults on one rail, by case: an uplink and a NIC on another leaf; a link and a
           NIC; two NICs on two leaves; a leaf and a link away from it

The bandwidth noise is uniform, +-noise of healthy; --noise-from RUN_DIR measures it from a
healthy run of the site's own instead: the 95th percentile of |value / median - 1| of its
rdma_write bandwidths at their largest size, per rail (so +-noise covers 95% of what that
fabric measured; the p95 of a uniform +-a is 0.95a).

Every fail or warn finding is held against the injected faults. It is a hit when its scope and
component are the fault's: link (scope link, the pair, the rail), nic (node, rail), node (node),
rail (rail), leaf (scope switch, that leaf, the rail), uplink (scope uplink, that leaf, the
rail), spine (scope switch, the spine, the rail). Only the finding's own scope and component
count: one that names the fault only among its alternatives (pairs that cannot tell them apart)
is a false positive, and is counted in the `alt` column too. precision = hits / findings (1.0
when there are none), recall = faults hit / faults injected (1.0 when none were), wrong drains
= drain lines (analysis.drains) for nodes that are not an injected NIC or node fault's.

Prints one table per node count (a line per class and a total line), then every case that
missed, misnamed or drained wrongly; --json prints one JSON object instead. Progress goes to
stderr. Exit 0 whatever the accuracy (a measurement, not a test), 1 on an error.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import synthetic  # noqa: E402
from acceptance.analysis import analyze  # noqa: E402

CLASSES = ("clean", "link", "nic", "node", "rail", "leaf", "uplink", "spine", "two")
TWO = ("uplink+nic", "link+nic", "nic+nic", "leaf+link")
FACTORS = (0.5, 0.8)
SIZE = 8388608
DRAIN_NODE = re.compile(r"NodeName=(\S+)")
KWARG = {"link": "slow_link", "nic": "slow_nic", "node": "slow_node", "rail": "slow_rail", "leaf": "slow_leaf",
         "uplink": "slow_uplink", "spine": "slow_spine"}


def leaves_for(nodes: int) -> int:
    return max(2, round(math.sqrt(nodes)))


# ---- the cases ----

class Picker:
    """Random fault positions on one run's nodes, leaves and rails."""

    def __init__(self, rng: np.random.Generator, names: list[str], leaves: int, rails: int,
                 factors: tuple[float, float] = FACTORS):
        self.rng, self.names, self.rails, self.factors = rng, names, rails, factors
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

    def pair(self, besides=(), off_leaves=()) -> tuple[str, str]:
        a = self.node(besides, off_leaves)
        return a, self.node((*besides, a), off_leaves)


def fault(kind: str, p: Picker, rail: int | None = None, **where) -> dict:
    """One injected fault: {"kind", its component's fields, "factor"}."""
    rail = p.rail() if rail is None else rail
    if kind == "link":
        a, b = p.pair(**where)
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
                "spine": lambda: (f["rail"],)}[k]()
        specs.setdefault(KWARG[k], []).append((*spec, f["factor"]))
    return {key: v[0] if len(v) == 1 else v for key, v in specs.items()}


# ---- matching findings to faults ----

def is_component(f: dict, comp: dict) -> bool:
    """Does a finding (or one of its alternatives: {scope, switch, node, rail}) name this fault?"""
    kind, scope = f["kind"], comp.get("scope")
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
            "switch": lambda: f["switch"], "uplink": lambda: f["switch"]}.get(f["scope"], lambda: "")()
    rail = f" rail {f['rail']}" if f.get("rail") is not None else ""
    alts = f" (alternatives: {len(f['alternatives'])})" if f.get("alternatives") else ""
    return f"{f['severity']} {f['scope']} {what}{rail}{alts}".replace("  ", " ")


def describe(f: dict) -> str:
    where = {"link": lambda: "<->".join(f["nodes"]), "nic": lambda: f["node"], "node": lambda: f["node"],
             "leaf": lambda: f["leaf"], "uplink": lambda: f["leaf"]}.get(f["kind"], lambda: "")()
    rail = f" rail {f['rail']}" if "rail" in f else ""
    return f"{f['kind']} {where}{rail} x{f['factor']}".replace("  ", " ")


def score(faults: list[dict], findings: list[dict], drains: list[str]) -> dict:
    found = [f for f in findings if f["severity"] in ("fail", "warn")]
    hits = [any(is_component(t, f) for t in faults) for f in found]
    alt = [not h and any(is_component(t, a) for t in faults for a in f.get("alternatives") or [])
           for f, h in zip(found, hits)]
    recalled = [any(is_component(t, f) for f in found) for t in faults]
    drainable = {t["node"] for t in faults if t["kind"] in ("nic", "node")}
    drained = [m.group(1) for m in map(DRAIN_NODE.search, drains) if m]
    return {"findings": len(found), "hits": sum(hits), "false_positives": [short(f) for f, h in zip(found, hits) if not h],
            "alt": sum(alt), "injected": len(faults), "recalled": sum(recalled),
            "missed": [describe(t) for t, r in zip(faults, recalled) if not r],
            "wrong_drains": [n for n in drained if n not in drainable]}


# ---- running ----

def run_case(tmp: Path, nodes: int, rails: int, noise: float, seed: int, cls: str, i: int,
             factors: tuple[float, float] = FACTORS) -> dict:
    names = synthetic.node_names(nodes)
    leaves = leaves_for(nodes)
    case_seed = seed * 1_000_003 + nodes * 1009 + CLASSES.index(cls) * 101 + i
    picker = Picker(np.random.default_rng(case_seed), names, leaves, rails, factors)
    faults, label = case_faults(cls, i, picker)
    run_dir = tmp / f"n{nodes}-{cls}-{i}"
    t0 = time.perf_counter()
    synthetic.make_run(run_dir, nodes=nodes, rails=rails, sizes=(SIZE,), collectives=False, memreg=False,
                       latency=False, seed=case_seed, leaves=leaves, bw_noise=noise, **make_kwargs(faults))
    conf = run_dir / "topology.conf"
    conf.write_text(synthetic.topology_conf(names, leaves))
    t1 = time.perf_counter()
    a = analyze(run_dir, topology=conf)
    t2 = time.perf_counter()
    return {"nodes": nodes, "leaves": leaves, "class": cls, "case": i, "label": label, "seed": case_seed,
            "faults": faults, "found": [short(f) for f in a.findings], **score(faults, a.findings, a.drains),
            "seconds": {"generate": round(t1 - t0, 2), "analyze": round(t2 - t1, 2)}}


def measured_noise(run_dir: Path) -> tuple[float, int]:
    """(+-noise, values): the healthy spread of a real run's rdma_write bandwidths (see the top)."""
    from acceptance.analysis.load import load_records
    df = load_records(run_dir)
    bw = df[(df["suite"].astype(str) == "rdma_write") & (df["metric"].astype(str) == "bandwidth")
            & df["rail"].notna() & df["size"].notna()]
    bw = bw[bw["size"] == bw["size"].max()]
    if len(bw) < 4:
        raise ValueError(f"{run_dir}: {len(bw)} rdma_write bandwidth records; a healthy all-pairs run has more")
    value = bw["value"].astype(float)
    dev = (value / value.groupby(bw["rail"]).transform("median") - 1).abs()
    return float(np.percentile(dev, 95)) / 0.95, len(bw)


def summarize(cases: list[dict]) -> dict:
    findings = sum(c["findings"] for c in cases)
    hits = sum(c["hits"] for c in cases)
    injected = sum(c["injected"] for c in cases)
    recalled = sum(c["recalled"] for c in cases)
    return {"cases": len(cases), "injected": injected, "recalled": recalled, "findings": findings, "hits": hits,
            "false_positives": findings - hits, "alt": sum(c["alt"] for c in cases),
            "precision": hits / findings if findings else 1.0, "recall": recalled / injected if injected else 1.0,
            "wrong_drains": sum(len(c["wrong_drains"]) for c in cases)}


HEADER = f"{'class':<8} {'cases':>5} {'faults':>6} {'found':>5} {'findings':>8} {'false+':>6} {'alt':>3} " \
         f"{'precision':>9} {'recall':>6} {'wrong drains':>12}"


def row(name: str, s: dict) -> str:
    return (f"{name:<8} {s['cases']:>5} {s['injected']:>6} {s['recalled']:>5} {s['findings']:>8} "
            f"{s['false_positives']:>6} {s['alt']:>3} {s['precision']:>9.2f} {s['recall']:>6.2f} "
            f"{s['wrong_drains']:>12}")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="16,64,256", help="node counts, comma-separated (default 16,64,256)")
    ap.add_argument("--cases", type=int, default=4, help="cases per class and node count (default 4: each pair of faults of `two` once)")
    ap.add_argument("--rails", type=int, default=4)
    ap.add_argument("--noise", type=float, default=0.03,
                    help="uniform bandwidth noise, +-fraction of healthy (default 0.03; synthetic's own is 0.01)")
    ap.add_argument("--noise-from", metavar="RUN_DIR", type=Path,
                    help="measure the noise from a healthy run folder of your own (see the top) instead")
    ap.add_argument("--factors", default="0.5,0.8", metavar="LO,HI",
                    help="a fault multiplies healthy bandwidth by U(LO, HI) (default 0.5,0.8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="16 nodes, one case per class (a smoke run)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    ap.add_argument("--keep", metavar="DIR", help="write the runs here and keep them")
    args = ap.parse_args(argv)
    args.sizes = [16] if args.quick else [int(x) for x in args.nodes.split(",") if x.strip()]
    args.cases = 1 if args.quick else args.cases
    if args.cases < 1 or args.rails < 1 or any(n < 4 for n in args.sizes):
        ap.error("--cases and --rails must be >= 1 and every --nodes >= 4")
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
            base = Path(args.keep) if args.keep else Path(tmp)
            total = len(args.sizes) * len(CLASSES) * args.cases
            for nodes in args.sizes:
                for cls in CLASSES:
                    for i in range(args.cases):
                        c = run_case(base, nodes, args.rails, args.noise, args.seed, cls, i, args.factors)
                        results.append(c)
                        bad = " MISLOCALIZED" if c["false_positives"] or c["missed"] or c["wrong_drains"] else ""
                        print(f"localization: {len(results)}/{total} {nodes} nodes {c['label']} case {i}: "
                              f"{c['hits']}/{c['findings']} findings hit, {c['recalled']}/{c['injected']} faults "
                              f"found ({c['seconds']['generate'] + c['seconds']['analyze']:.1f} s){bad}",
                              file=sys.stderr, flush=True)
                        if not args.keep:
                            for f in (base / f"n{nodes}-{cls}-{i}").iterdir():
                                f.unlink()
    except Exception:  # noqa: BLE001 - a benchmark reports and exits 1
        traceback.print_exc()
        print("localization: error", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - start
    by_size = {}
    for nodes in args.sizes:
        mine = [c for c in results if c["nodes"] == nodes]
        by_size[str(nodes)] = {"leaves": leaves_for(nodes),
                               "classes": {cls: summarize([c for c in mine if c["class"] == cls]) for cls in CLASSES},
                               "total": summarize(mine)}
    config = {"nodes": args.sizes, "cases": args.cases, "rails": args.rails, "noise": args.noise, "seed": args.seed,
              "noise_from": str(args.noise_from) if args.noise_from else None, "noise_values": args.noise_values,
              "factors": list(args.factors), "size": SIZE}
    if args.json:
        print(json.dumps({"config": config, "sizes": by_size, "total": summarize(results),
                          "cases": results, "seconds": round(seconds, 1)}))
        return 0
    for nodes in args.sizes:
        s = by_size[str(nodes)]
        source = f" (measured: {args.noise_values} values of {args.noise_from})" if args.noise_from else ""
        print(f"{nodes} nodes, {s['leaves']} leaves, {args.rails} rails, noise +-{args.noise:.1%}{source}, "
              f"faults x{args.factors[0]}-{args.factors[1]}, {args.cases} case(s) per class")
        print(HEADER)
        for cls in CLASSES:
            print(row(cls, s["classes"][cls]))
        print(row("total", s["total"]))
        print()
    wrong = [c for c in results if c["false_positives"] or c["missed"] or c["wrong_drains"]]
    for c in wrong:
        print(f"{c['nodes']} nodes {c['label']} case {c['case']} (seed {c['seed']}): injected "
              f"{'; '.join(describe(t) for t in c['faults']) or 'nothing'}; found {'; '.join(c['found']) or 'nothing'}"
              + (f"; missed {'; '.join(c['missed'])}" if c["missed"] else "")
              + (f"; wrong drains {', '.join(c['wrong_drains'])}" if c["wrong_drains"] else ""))
    t = summarize(results)
    print(f"localization: {len(results)} cases, precision {t['precision']:.2f}, recall {t['recall']:.2f}, "
          f"{t['wrong_drains']} wrong drains, {len(wrong)} case(s) wrong, {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
