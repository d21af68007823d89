"""Synthetic run folders: healthy numbers with small noise, plus injected faults.

Used by the analysis tests, the report tests and the analysis benchmark. The
records are shaped exactly like the ones the suites write (every key of
acceptance.records.results.REQUIRED_KEYS, same units and test ids), so what analysis
sees here is what it sees on a cluster.

make_run(dir, ...)       a small, complete run: rdma_write bandwidth (all ordered pairs,
                         every rail, each size), errors, put latency and ping-pong
                         percentiles, collectives (world / rail / node), memreg, preflight.
make_run_fast(dir, ...)  a very large run for the benchmark: one rdma_write bandwidth
                         record per unordered node pair per rail at one size (direction
                         alternating), 1024 nodes x 8 rails = 4,190,208 records (~1.4 GB),
                         built with numpy and written in a few big writes.

Noise is uniform (value x (1 + U(-a, a))), so a healthy value is never more than a
(1% bandwidth, 3% latency) from its nominal figure, and a test that expects "no
findings" on clean data can never fail by chance. make_run's bw_noise widens (or
narrows) the point-to-point bandwidth's a; the random draws stay the same ones.

Faults multiply bandwidth by a factor (and divide latencies by it):
  slow_link=("node03", "node09", 2[, 0.5])  that pair, both directions, on rail 2
  slow_nic=("node05", 4[, 0.6])             every link of node05 on rail 4
  slow_node="node11" or ("node11", 0.6)     every link of node11 on every rail
  slow_rail=6 or (6, 0.6)                   every link on rail 6
A switch tree (make_run's leaves=K: the nodes in contiguous blocks on leaf1..leafK, the
first ones a node longer when K does not divide them, like np.array_split; every leaf
uplinked to one spine; topology_conf writes it as Slurm's topology.conf) adds:
  slow_leaf=("leaf2", 1[, 0.6])             every pair with an end on leaf2 on rail 1 (inside pairs too)
  slow_uplink=("leaf3", 2[, 0.6])           the pairs with exactly one end on leaf3, on rail 2
  slow_spine=3 or (3, 0.6)                  every pair across two leaves on rail 3
A two-level tree (make_run_sampled's spines=S beside leaves=K: every leaf joined to each of S
spines by one cable each way; two_level builds it, with its Fabric and its Routes) routes by
destination, D-mod-K as OpenSM's default engines do: a packet to node i (its index in node_names)
climbs to spine (i mod S) and comes down the cable from that spine to the destination's leaf. So the
cable spine_k -> leaf carries every cross-leaf flow into the leaf's nodes i = k (mod S), and the
cable leaf -> spine_k the leaf's flows out to every remote node i = k (mod S). Faults of it, on
bandwidth only (a lane or a direction lost limits throughput; an 8-byte write's latency is the path's):
  slow_cable=("leaf3", "spine2", 1, "down"[, 0.5])  that cable direction on rail 1 ("up": leaf -> spine,
                                            "down": spine -> leaf, "both")
  slow_tx=("node05", 4[, 0.7])              node05's NIC on rail 4 sending (every pair-direction from it)
  slow_rx=("node05", 4[, 0.7])              ... receiving (every pair-direction into it)
and on latency (need no tree):
  slow_tail=("node05", 4[, 2.0])            latency p99, p99.9 and max of every pair of node05 on rail 4,
                                            both directions, x 2.0 (its p50 healthy)
Any fault may be given several times as a list of specs, e.g.
slow_nic=[("node05", 4), ("node12", 1, 0.7)] (a list whose items are all tuples or lists;
one spec is a tuple, or a bare value). Faults that meet on a pair multiply.
Burn-in (iterations > 1):
  drift=("node03", "node09", 2[, 0.7])      that link degrades linearly to 0.7 by the last iteration
  noisy=("node02", "node07", 1[, 0.4])      that link's values jump by up to +-40% between iterations
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import hostlist
import numpy as np

from acceptance.rules.profile import load_profile
from acceptance.records.results import SCHEMA_VERSION
from acceptance.switchtree.routes import Cable, PortRef, Routes

# Local's bounds with the real-cluster outlier settings (tests/profiles/synthetic.toml).
SYNTHETIC_PROFILE = str(Path(__file__).resolve().parent / "profiles" / "synthetic.toml")

BASE_TIME = datetime(2026, 1, 1, 2, 0, 0, tzinfo=timezone.utc)
DEFAULT_SIZES = (65536, 8388608)
LATENCY_SIZE = 8
BW_PEAK = 370.0          # Gbit/s at large sizes
BW_HALF = 32768          # bytes at which the bandwidth curve reaches half of the peak
# One-way latencies (half a round trip, the catalog's definition), in us.
LATENCY = {"latency_p50": 1.5, "latency_p99": 2.25, "latency_p999": 4.0, "latency_max": 12.5}
PINGPONG = {"pingpong_latency_p50": 1.75, "pingpong_latency_p99": 2.5,
            "pingpong_latency_p999": 4.5, "pingpong_latency_max": 15.0}
BW_NOISE, LAT_NOISE, MAX_NOISE = 0.01, 0.03, 0.20
BUSBW = {"world": 150.0, "rail": 45.0, "node": 350.0}   # GB/s
COLLECTIVE_SIZES = (1048576, 67108864)
MEMREG_SIZES = (4096, 65536, 1048576, 16777216)

BW_TEST = "suites/test_rdma_write.py::test_write_bandwidth[rail{}]"
LAT_TEST = "suites/test_rdma_write.py::test_write_latency[rail{}]"
READ_TEST = "suites/test_rdma_write.py::test_read_bandwidth[rail{}]"
GPU_TEST = "suites/test_gpudirect.py::test_gpu_write_bandwidth[rail{}]"


def node_names(n: int) -> list[str]:
    width = max(2, len(str(n)))
    return [f"node{i + 1:0{width}d}" for i in range(n)]


def _fault(spec, arity: int, default: float):
    """(fields..., factor) from a tuple with or without its factor, or a bare value."""
    if spec is None:
        return None
    if not isinstance(spec, (tuple, list)):
        spec = (spec,)
    spec = tuple(spec)
    return spec if len(spec) > arity else (*spec, default)


def _faults(spec, arity: int, default: float) -> list[tuple]:
    """Every fault of a kind: a list of specs (its items all tuples or lists), else the one spec."""
    if spec is None:
        return []
    if isinstance(spec, list) and spec and all(isinstance(x, (tuple, list)) for x in spec):
        return [_fault(x, arity, default) for x in spec]
    return [_fault(spec, arity, default)]


def leaf_nodes(names: list[str], leaves: int) -> dict[str, list[str]]:
    """leaf1..leafK -> their nodes: contiguous blocks, the first ones a node longer (np.array_split)."""
    return {f"leaf{i + 1}": [str(n) for n in block] for i, block in enumerate(np.array_split(np.array(names), leaves))}


def topology_conf(names: list[str], leaves: int) -> str:
    """Slurm's tree-plugin topology.conf for make_run's leaves=K: one line per leaf, then the spine."""
    lines = [f"SwitchName={leaf} Nodes={hostlist.collect_hostlist(nodes)}"
             for leaf, nodes in leaf_nodes(names, leaves).items()]
    lines.append(f"SwitchName=spine Switches={hostlist.collect_hostlist(list(leaf_nodes(names, leaves)))}")
    return "\n".join(lines) + "\n"


def spine_names(spines: int) -> list[str]:
    return [f"spine{k + 1}" for k in range(spines)]


class TwoLevel:
    """A two-level tree on every rail: leaves (leaf_nodes' blocks), `spines` spines, every leaf joined to
    each spine by one cable each way, routed by destination (D-mod-K: a flow to node i climbs to spine
    i mod S). Ports: a leaf's nodes on ports 1..m in leaf order, its cable to spine k on port
    largest leaf + k + 1; a spine's cable to leaf j on port j + 1.

    path(src, dst, rail) and cables(rail) are acceptance.switchtree.routes.Routes' (the same routes on
    every rail): () inside a leaf, the up and the down cable across leaves, None for a node it does not
    place. fabric() is the Fabric (one tree for every rail) with these routes; routes() the real Routes
    of chosen pairs (Routes.from_paths), where that class exists."""

    def __init__(self, names: list[str], leaves: int, spines: int):
        self.names, self.spines = list(names), spine_names(spines)
        self.tree = leaf_nodes(self.names, leaves)
        self.leaf_names = list(self.tree)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.leaf = np.zeros(len(self.names), dtype=np.int64)
        self.slot = np.zeros(len(self.names), dtype=np.int64)
        for j, nodes in enumerate(self.tree.values()):
            for k, n in enumerate(nodes):
                self.leaf[self.index[n]], self.slot[self.index[n]] = j, k
        width = max(len(v) for v in self.tree.values())
        s = len(self.spines)
        self.up = [[Cable(PortRef(leaf, width + k + 1), PortRef(self.spines[k], j + 1)) for k in range(s)]
                   for j, leaf in enumerate(self.leaf_names)]
        self.down = [[Cable(PortRef(self.spines[k], j + 1), PortRef(leaf, width + k + 1)) for k in range(s)]
                     for j, leaf in enumerate(self.leaf_names)]

    def spine_of(self, dst: int) -> int:
        return dst % len(self.spines)

    def path(self, src: str, dst: str, rail: int):
        a, b = self.index.get(src), self.index.get(dst)
        if a is None or b is None:
            return None
        la, lb = int(self.leaf[a]), int(self.leaf[b])
        if la == lb:
            return ()
        k = self.spine_of(b)
        return (self.up[la][k], self.down[lb][k])

    def cables(self, rail: int) -> list:
        return [c for row in self.up for c in row] + [c for row in self.down for c in row]

    def cable(self, leaf: str, spine: str, direction: str):
        """The cable between a leaf and a spine, "up" (leaf -> spine) or "down"."""
        j, k = self.leaf_names.index(leaf), self.spines.index(spine)
        return (self.up if direction == "up" else self.down)[j][k]

    def crossing(self, leaf: str, spine: str, direction: str) -> np.ndarray:
        """[src, dst] True where a flow src -> dst crosses that cable."""
        j, k = self.leaf_names.index(leaf), self.spines.index(spine)
        to_k = np.arange(len(self.names)) % len(self.spines) == k
        on = self.leaf == j
        if direction == "up":
            return on[:, None] & (~on & to_k)[None, :]
        return (~on)[:, None] & (on & to_k)[None, :]

    # Routes' own reporting (Fabric.to_json keeps routes.summary() in run.json)
    rails = [None]
    notes: list = []

    def summary(self) -> dict:
        return {"source": "synthetic two-level tree, D-mod-K", "format": "synthetic", "digest": "",
                "rails": [{"rail": None, "pairs": len(self.names) * (len(self.names) - 1)}], "notes": []}

    def routes(self, keys=None):
        """acceptance.switchtree.routes.Routes of these (src, dst, rail) keys (Routes.from_paths; None:
        every ordered pair of nodes, rail None for every rail: for a small tree)."""
        if keys is None:
            keys = [(a, b, None) for a in self.names for b in self.names if a != b]
        return Routes.from_paths({(a, b, r): self.path(a, b, r) for a, b, r in keys})

    def fabric(self, routes=True):
        """The Fabric of this tree (every rail alike), with `routes` (True: this TwoLevel, which answers
        Routes' path and cables itself at any size; or a Routes; None: the tree alone)."""
        from acceptance.switchtree.fabric import Fabric, Tree, Uplink
        up = [Uplink(c.src.switch, c.dst.switch, str(c.src.port), str(c.dst.port)) for row in self.up for c in row]
        f = Fabric(source="synthetic two-level tree", format="synthetic",
                   trees={None: Tree({k: list(v) for k, v in self.tree.items()}, up)})
        f.routes = self if routes is True else routes
        return f


def _time(iteration: int, seconds: float = 0.0) -> str:
    t = BASE_TIME + timedelta(hours=iteration, seconds=seconds)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _record(test, suite, metric, value, unit, *, nodes, ranks, size=None, rail=None, engine="verbs",
            iteration=0, samples=1, time=None, detail=None, op=None, scope=None, device=None, port=None,
            saturated=None, memory="host"):
    rec = {"test": test, "suite": suite, "metric": metric, "value": value, "unit": unit,
           "size": size, "rail": rail, "nodes": list(nodes), "ranks": [int(r) for r in ranks],
           "engine": engine, "memory": memory, "iteration": iteration, "time": time or _time(iteration),
           "samples": samples, "threshold": None, "verdict": "info"}
    for key, v in (("detail", detail), ("op", op), ("scope", scope), ("device", device), ("port", port),
                   ("saturated", saturated)):
        if v is not None:
            rec[key] = v
    return rec


def _factors(names, rails, iterations, slow_link, slow_nic, slow_node, slow_rail, drift, noisy, rng,
             leaves=None, slow_leaf=None, slow_uplink=None, slow_spine=None):
    """factor[iteration, rail, src, dst]: 1.0 healthy, < 1 slower."""
    n = len(names)
    index = {name: i for i, name in enumerate(names)}
    f = np.ones((iterations, rails, n, n))
    for a, b, rail, k in _faults(slow_link, 3, 0.5):
        f[:, rail, index[a], index[b]] *= k
        f[:, rail, index[b], index[a]] *= k
    for node, rail, k in _faults(slow_nic, 2, 0.6):
        f[:, rail, index[node], :] *= k
        f[:, rail, :, index[node]] *= k
        f[:, rail, index[node], index[node]] /= k  # the diagonal is unused; keep it 1
    for node, k in _faults(slow_node, 1, 0.6):
        f[:, :, index[node], :] *= k
        f[:, :, :, index[node]] *= k
    for rail, k in _faults(slow_rail, 1, 0.6):
        f[:, rail] *= k
    tree_faults = (_faults(slow_leaf, 2, 0.6), _faults(slow_uplink, 2, 0.6), _faults(slow_spine, 1, 0.6))
    if any(tree_faults):
        if not leaves:
            raise ValueError("slow_leaf, slow_uplink and slow_spine need leaves=K")
        placed = leaf_nodes(names, leaves)
        code = np.zeros(n, dtype=np.int64)
        for i, nodes in enumerate(placed.values()):
            code[[index[x] for x in nodes]] = i
        leaf_index = {leaf: i for i, leaf in enumerate(placed)}
        cross = code[:, None] != code[None, :]
        for kind, faults in zip(("leaf", "uplink"), tree_faults[:2]):
            for leaf, rail, k in faults:
                on = code == leaf_index[leaf]
                hit = (on[:, None] | on[None, :]) if kind == "leaf" else (on[:, None] != on[None, :])
                f[:, rail][:, hit] *= k
        for rail, k in tree_faults[2]:
            f[:, rail][:, cross] *= k
    for a, b, rail, k in _faults(drift, 3, 0.7):
        ramp = np.linspace(1.0, k, iterations) if iterations > 1 else np.array([k])
        f[:, rail, index[a], index[b]] *= ramp
        f[:, rail, index[b], index[a]] *= ramp
    for a, b, rail, amp in _faults(noisy, 3, 0.4):
        jumps = 1 + rng.uniform(-amp, amp, size=iterations)
        f[:, rail, index[a], index[b]] *= jumps
        f[:, rail, index[b], index[a]] *= jumps
    return f


PATH_FAULTS = ("slow_cable", "slow_tx", "slow_rx")   # bandwidth only
TAIL_FAULTS = ("slow_tail",)                         # latency p99, p99.9, max
TAIL_METRICS = ("latency_p99", "latency_p999", "latency_max")


def _path_factors(names, rails, tree: TwoLevel | None, slow_cable=None, slow_tx=None, slow_rx=None) -> np.ndarray:
    """factor[rail, src, dst] of the bandwidth-only faults: a cable direction, a NIC sending or receiving."""
    n = len(names)
    index = {name: i for i, name in enumerate(names)}
    f = np.ones((rails, n, n))
    for leaf, spine, rail, direction, k in _faults(slow_cable, 4, 0.5):
        if tree is None:
            raise ValueError("slow_cable needs the two-level tree (spines=S and leaves=K)")
        for way in (("up", "down") if direction == "both" else (direction,)):
            f[rail][tree.crossing(leaf, spine, way)] *= k
    for node, rail, k in _faults(slow_tx, 2, 0.7):
        f[rail, index[node], :] *= k
    for node, rail, k in _faults(slow_rx, 2, 0.7):
        f[rail, :, index[node]] *= k
    return f


def _tail_factors(names, rails, slow_tail=None) -> np.ndarray:
    """factor[rail, src, dst] multiplying latency p99, p99.9 and max (both directions of every pair of the node)."""
    n = len(names)
    index = {name: i for i, name in enumerate(names)}
    f = np.ones((rails, n, n))
    for node, rail, k in _faults(slow_tail, 2, 2.0):
        on = np.zeros(n, bool)
        on[index[node]] = True
        f[rail][on[:, None] | on[None, :]] *= k
    return f


def healthy_bandwidth(size: int) -> float:
    return BW_PEAK * size / (size + BW_HALF)


def make_run(directory, nodes: int = 16, rails: int = 8, sizes=DEFAULT_SIZES, slow_link=None, slow_nic=None,
             slow_node=None, slow_rail=None, iterations: int = 1, drift=None, noisy=None, seed: int = 0,
             profile: str = SYNTHETIC_PROFILE, collectives: bool = True, memreg: bool = True, preflight: bool = True,
             latency: bool = True, run_id: str | None = None, read: bool = False, gpudirect: bool = False,
             slow_gpu_nic=None, leaves: int | None = None, slow_leaf=None, slow_uplink=None, slow_spine=None,
             bw_noise: float = BW_NOISE) -> Path:
    """Write run.json and results.jsonl into `directory` (created if needed); return it.

    leaves=K places the nodes on a switch tree (leaf_nodes; the tree faults need it; write its
    topology.conf with topology_conf: the run folder does not name it). bw_noise: the pairwise
    bandwidths' uniform noise (default 1%).

    read: RDMA READ bandwidth beside the writes (the same links' factors); gpudirect: GPU-to-GPU write
    bandwidth (suite gpudirect, memory cuda), slow_gpu_nic = (node, rail, factor) slows one node's GPU
    path on a rail there only. Their noise comes from a generator of its own, so the other values do
    not change with them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = node_names(nodes)
    prof = load_profile(profile)
    run_id = run_id or f"synthetic-{seed}"
    factors = _factors(names, rails, iterations, slow_link, slow_nic, slow_node, slow_rail, drift, noisy, rng,
                       leaves, slow_leaf, slow_uplink, slow_spine)

    def rank(node_i, rail):
        return node_i * rails + rail

    records = []
    pairs = [(i, j) for i in range(nodes) for j in range(nodes) if i != j]
    extra_rng = np.random.default_rng(seed + 7919)
    gpu_factor = {}
    if slow_gpu_nic:
        node, r, k = _fault(slow_gpu_nic, 2, 0.6)
        gpu_factor = {(r, names.index(node)): k}
    for it in range(iterations):
        # Noise is drawn before faults are applied, for every value, so the same seed gives the
        # same healthy numbers whatever is injected (a baseline and a faulty run differ only there).
        noise_bw = 1 + rng.uniform(-bw_noise, bw_noise, size=(rails, len(pairs), len(sizes)))
        lat_noise = 1 + rng.uniform(-LAT_NOISE, LAT_NOISE, size=(rails, len(pairs), 6))
        max_noise = 1 + rng.uniform(-MAX_NOISE, MAX_NOISE, size=(rails, len(pairs), 2))
        for rail in range(rails):
            for p, (i, j) in enumerate(pairs):
                f = float(factors[it, rail, i, j])
                common = {"nodes": [names[i], names[j]], "ranks": [rank(i, rail), rank(j, rail)], "rail": rail,
                              "iteration": it, "time": _time(it, rail * 10 + p * 0.01)}
                for s, size in enumerate(sizes):
                    bw = healthy_bandwidth(size) * noise_bw[rail, p, s] * f
                    records.append(_record(BW_TEST.format(rail), "rdma_write", "bandwidth", round(bw, 6), "Gbit/s",
                                           size=size, samples=1000, **common))
                    records.append(_record(BW_TEST.format(rail), "rdma_write", "errors", 0, "count",
                                           size=size, **common))
                    if read:
                        rbw = 0.95 * healthy_bandwidth(size) * (1 + extra_rng.uniform(-bw_noise, bw_noise)) * f
                        records.append(_record(READ_TEST.format(rail), "rdma_write", "read_bandwidth", round(rbw, 6),
                                               "Gbit/s", size=size, samples=1000, **common))
                    if gpudirect:
                        g = f * gpu_factor.get((rail, i), 1.0) * gpu_factor.get((rail, j), 1.0)
                        gbw = 0.9 * healthy_bandwidth(size) * (1 + extra_rng.uniform(-bw_noise, bw_noise)) * g
                        records.append(_record(GPU_TEST.format(rail), "gpudirect", "bandwidth", round(gbw, 6),
                                               "Gbit/s", size=size, samples=1000, memory="cuda", **common))
                if not latency:
                    continue
                for k, (metric, nominal) in enumerate(LATENCY.items()):
                    noise = lat_noise[rail, p, k] if k < 3 else max_noise[rail, p, 0]
                    records.append(_record(LAT_TEST.format(rail), "rdma_write", metric,
                                           round(nominal * noise / f, 4), "us", size=LATENCY_SIZE,
                                           samples=10000, **common))
                for k, (metric, nominal) in enumerate(PINGPONG.items()):
                    noise = lat_noise[rail, p, 3 + k] if k < 3 else max_noise[rail, p, 1]
                    records.append(_record(LAT_TEST.format(rail), "rdma_write", metric,
                                           round(nominal * noise / f, 4), "us", size=LATENCY_SIZE,
                                           samples=10000, **common))
        if collectives:
            records += _collectives(names, rails, it, rng)
        if memreg:
            records += _memreg(names, rails, it, rng)
        if preflight and it == 0:
            records += _preflight(names, rails, prof)

    with open(directory / "results.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    run = {"run_id": run_id, "schema": SCHEMA_VERSION, "start": _time(0), "end": _time(iterations),
           "command": "synthetic", "launcher": "synthetic",
           "profile": prof.to_json(),
           "topology": {"nodes": names, "rails": list(range(rails)), "ranks": nodes * rails,
                        "ranks_per_node": rails},
           "complete": True, "exit_code": 0, "missing_ranks": [], "iterations": iterations}
    (directory / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    return directory


def _collectives(names, rails, it, rng):
    from acceptance.engines.collective_data import SPECS
    out = []
    n = len(names)
    scopes = [("world", None, names, list(range(n * rails)))]
    scopes += [(f"rail{r}", r, names, [i * rails + r for i in range(n)]) for r in range(rails)]
    scopes += [("node", None, [name], [i * rails + r for r in range(rails)]) for i, name in enumerate(names)]
    for op in ("allreduce", "alltoall"):
        for scope, rail, nodes, ranks in scopes:
            kind = "rail" if scope.startswith("rail") else scope
            for size in COLLECTIVE_SIZES:
                bus = BUSBW[kind] * size / (size + 262144) * (1 + rng.uniform(-BW_NOISE, BW_NOISE))
                alg = bus / SPECS[op].busbw_factor(len(ranks))
                test = f"suites/test_collectives.py::test_{op}[{scope}]"
                common = {"nodes": nodes, "ranks": ranks, "size": size, "rail": rail, "iteration": it, "samples": 50,
                          "engine": "nccl", "time": _time(it, 100), "op": op, "scope": kind}
                out.append(_record(test, "collective", "algbw", round(alg, 6), "GB/s", **common))
                out.append(_record(test, "collective", "busbw", round(bus, 6), "GB/s", **common))
                out.append(_record(test, "collective", "errors", 0, "count", **common))
    return out


def _memreg(names, rails, it, rng):
    out = []
    test = "suites/test_memreg.py::test_registration_time"
    for i, name in enumerate(names):
        for r in range(rails):
            common = {"nodes": [name], "ranks": [i * rails + r], "rail": r, "iteration": it, "time": _time(it, 200)}
            for size in MEMREG_SIZES:
                base = 5.0 + size / 2e5
                for metric, scale in (("reg_time", 1.0), ("dereg_time", 0.3), ("reg_time_user", 0.8),
                                      ("dereg_time_user", 0.25)):
                    v = round(base * scale * (1 + rng.uniform(-0.05, 0.05)), 3)
                    out.append(_record(test, "memreg", metric, v, "us", size=size, samples=5,
                                       detail=f"p50; max {v * 3:.1f} us", **common))
            out.append(_record("suites/test_memreg.py::test_registration_does_not_leak", "memreg", "rss_growth",
                               0, "bytes", size=4194304, samples=100,
                               detail="100 register/deregister cycles of 4194304 B", **common))
    return out


def _preflight(names, rails, prof):
    out = []
    for i, name in enumerate(names):
        for r in range(rails):
            out.append(_record("suites/test_preflight.py::test_memlock_limit", "preflight", "memlock", None,
                               "bytes", nodes=[name], ranks=[i * rails + r], rail=r, engine=None,
                               detail="unlimited"))
    for i, name in enumerate(names):
        out.append(_record("suites/test_preflight.py::test_rank_layout", "preflight", "ranks", rails, "count",
                           nodes=[name], ranks=[i * rails + r for r in range(rails)], engine=None))
    out.append(_record("suites/test_preflight.py::test_software_versions_match", "preflight",
                       "version_mismatches", 0, "count", nodes=names, ranks=[], engine=None))
    return out


def make_run_fast(directory, nodes: int = 1024, rails: int = 8, size: int = 8388608, slow_link=None,
                  slow_nic=None, slow_node=None, slow_rail=None, seed: int = 0, profile: str = SYNTHETIC_PROFILE,
                  chunk: int = 1 << 19) -> Path:
    """A huge single-size run for the benchmark: one bandwidth record per unordered pair per rail.

    nodes * (nodes - 1) / 2 * rails records (4,190,208 for 1024 x 8). The direction of each
    pair alternates with (i + j) parity, so every node is the source of about half its links.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = np.array(node_names(nodes))
    index = {name: i for i, name in enumerate(names.tolist())}
    iu, ju = np.triu_indices(nodes, k=1)
    flip = (iu + ju) % 2 == 1
    src = np.where(flip, ju, iu)
    dst = np.where(flip, iu, ju)
    prof = load_profile(profile)
    base = healthy_bandwidth(size)

    template = ('{"test": "suites/test_rdma_write.py::test_write_bandwidth[rail%d]", "suite": "rdma_write", '
                '"metric": "bandwidth", "value": %.4f, "unit": "Gbit/s", "size": ' + str(size) + ', '
                '"rail": %d, "nodes": ["%s", "%s"], "ranks": [%d, %d], "engine": "verbs", "memory": "host", '
                '"iteration": 0, "time": "%s", "samples": 5000, "threshold": null, "verdict": "info"}\n')
    with open(directory / "results.jsonl", "w") as fh:
        for rail in range(rails):
            values = base * (1 + rng.uniform(-BW_NOISE, BW_NOISE, size=src.size))
            factor = np.ones(src.size)
            if slow_link:
                a, b, r, k = _fault(slow_link, 3, 0.5)
                if r == rail:
                    ia, ib = index[a], index[b]
                    factor[((src == ia) & (dst == ib)) | ((src == ib) & (dst == ia))] *= k
            if slow_nic:
                node, r, k = _fault(slow_nic, 2, 0.6)
                if r == rail:
                    factor[(src == index[node]) | (dst == index[node])] *= k
            if slow_node:
                node, k = _fault(slow_node, 1, 0.6)
                factor[(src == index[node]) | (dst == index[node])] *= k
            if slow_rail is not None:
                r, k = _fault(slow_rail, 1, 0.6)
                if r == rail:
                    factor *= k
            values *= factor
            time = _time(0, rail * 60)
            s_names, d_names = names[src].tolist(), names[dst].tolist()
            s_ranks, d_ranks = (src * rails + rail).tolist(), (dst * rails + rail).tolist()
            vals = values.tolist()
            for lo in range(0, src.size, chunk):
                hi = min(src.size, lo + chunk)
                fh.write("".join([template % (rail, vals[k], rail, s_names[k], d_names[k], s_ranks[k],
                                              d_ranks[k], time) for k in range(lo, hi)]))
    run = {"run_id": f"synthetic-fast-{nodes}x{rails}", "schema": SCHEMA_VERSION, "start": _time(0), "end": _time(1),
           "command": "synthetic fast", "launcher": "synthetic", "profile": prof.to_json(),
           "topology": {"nodes": names.tolist(), "rails": list(range(rails)), "ranks": nodes * rails,
                        "ranks_per_node": rails},
           "complete": True, "exit_code": 0, "missing_ranks": [], "iterations": 1}
    (directory / "run.json").write_text(json.dumps(run) + "\n")
    return directory


def sampled_pairs(nodes: int, rails: int, partners: int, rng: np.random.Generator, leaf: np.ndarray | None = None,
                  inside: int = 0) -> list[np.ndarray]:
    """Per rail, the undirected node pairs (an (m, 2) array, i < j) of `partners` rounds of random
    disjoint pairs (each round a random perfect matching; an odd node out sits a round out), a pair
    met twice measured once; partners 0: every pair. With `leaf` (each node's leaf code) and `inside`
    = k, k of the rounds pair every node with another on its own leaf (a random matching inside each
    leaf; a leaf's odd node out sits the round out), as tree-aware screening must for a node's own-leaf
    paths to tell its NIC from the path beyond its leaf port."""
    if partners <= 0:
        iu, ju = np.triu_indices(nodes, k=1)
        return [np.stack([iu, ju], axis=1)] * rails
    inside = min(inside, partners) if leaf is not None else 0
    out = []
    for _ in range(rails):
        rounds = []
        for _ in range(partners - inside):
            perm = rng.permutation(nodes)[: nodes - nodes % 2]
            rounds.append(np.stack([perm[0::2], perm[1::2]], axis=1))
        for _ in range(inside):
            for code in np.unique(leaf):
                members = rng.permutation(np.flatnonzero(leaf == code))
                members = members[: len(members) - len(members) % 2]
                rounds.append(np.stack([members[0::2], members[1::2]], axis=1))
        p = np.sort(np.concatenate(rounds), axis=1)
        out.append(np.unique(p, axis=0))
    return out


# A healthy measurement is never off by more than this factor (log): a Student-t has no such limit, but
# a link measured at a tenth of its rate, or a p99 of 30 ms, is broken, whatever healthy noise does.
NOISE_MAX = float(np.log(2.0))


def heavy_noise(rng: np.random.Generator, scale: float, dof: float, size) -> np.ndarray:
    """Multiplicative noise exp(g): g Student-t with `dof` degrees of freedom, scaled so that its robust
    spread (1.4826 MAD) is `scale`, within a factor of 2 (NOISE_MAX); dof 0: the uniform
    1 + U(-scale, scale) of make_run."""
    if not dof:
        return 1 + rng.uniform(-1.0, 1.0, size=size) * scale
    from acceptance.analysis.noise import ROBUST_SIGMA, t_isf
    g = rng.standard_t(dof, size=size) * scale / (ROBUST_SIGMA * t_isf(0.25, float(dof)))
    return np.exp(np.clip(g, -NOISE_MAX, NOISE_MAX))


# Latency noise against bandwidth noise, by percentile: the tail of a latency distribution is
# noisier than its median (p99.9 and max are a few samples of 10,000).
LATENCY_NOISE = {"latency_p50": 2.0, "latency_p99": 4.0, "latency_p999": 10.0, "latency_max": 20.0}


def make_run_sampled(directory, nodes: int = 1024, rails: int = 8, partners: int = 8, sizes=DEFAULT_SIZES,
                     noise: float = BW_NOISE, tail: float = 0.0, latency: bool = True, seed: int = 0,
                     leaves: int | None = None, profile: str = SYNTHETIC_PROFILE, spines: int | None = None,
                     inside: int = 0, **faults) -> Path:
    """A large run as a screening schedule measures it, built with numpy: per rail, `partners` rounds
    of random disjoint pairs (sampled_pairs), each pair both ways, with rdma_write bandwidth at
    `sizes` and (latency) write latency p50, p99, p99.9 and max at 8 B.

    noise: the bandwidth's robust relative spread; tail: Student-t degrees of freedom of the noise
    (heavy_noise; 0: uniform +-noise); latency percentiles are LATENCY_NOISE times noisier. The
    faults are make_run's (slow_link, slow_nic, slow_node, slow_rail; with leaves=K slow_leaf,
    slow_uplink, slow_spine), slow_tx, slow_rx and slow_tail, and with spines=S beside leaves=K (the
    two-level tree, TwoLevel) slow_cable. inside=k: k of the `partners` rounds pair every node inside
    its leaf (needs leaves=K; sampled_pairs). 1024 x 8 with 8 partners: 65,536 pair-directions,
    393,216 records.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = np.array(node_names(nodes))
    prof = load_profile(profile)
    known = {"slow_link", "slow_nic", "slow_node", "slow_rail", "slow_leaf", "slow_uplink", "slow_spine",
             *PATH_FAULTS, *TAIL_FAULTS}
    if set(faults) - known:
        raise TypeError(f"unknown faults {sorted(set(faults) - known)}")
    f = _factors(list(names), rails, 1, faults.get("slow_link"), faults.get("slow_nic"), faults.get("slow_node"),
                 faults.get("slow_rail"), None, None, rng, leaves, faults.get("slow_leaf"), faults.get("slow_uplink"),
                 faults.get("slow_spine"))[0]
    two = TwoLevel(list(names), leaves, spines) if spines and leaves else None
    bw_only = _path_factors(list(names), rails, two, *(faults.get(k) for k in PATH_FAULTS)) \
        if any(faults.get(k) for k in PATH_FAULTS) else None
    tails = _tail_factors(list(names), rails, faults.get("slow_tail")) if faults.get("slow_tail") else None
    leaf = np.repeat(np.arange(leaves), [len(b) for b in np.array_split(np.arange(nodes), leaves)]) \
        if leaves and inside else None
    schedule = sampled_pairs(nodes, rails, partners, rng, leaf, inside)
    head = ('{"test": "%s", "suite": "rdma_write", "metric": "%s", "value": %.6g, "unit": "%s", "size": %d, '
            '"rail": %d, "nodes": ["%s", "%s"], "ranks": [%d, %d], "engine": "verbs", "memory": "host", '
            '"iteration": 0, "time": "%s", "samples": %d, "threshold": null, "verdict": "info"}\n')
    with open(directory / "results.jsonl", "w") as fh:
        for rail, pairs in enumerate(schedule):
            src = np.concatenate([pairs[:, 0], pairs[:, 1]])
            dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
            factor = f[rail, src, dst]
            bw_factor = factor * (bw_only[rail, src, dst] if bw_only is not None else 1.0)
            tail_factor = tails[rail, src, dst] if tails is not None else 1.0
            s_names, d_names = names[src].tolist(), names[dst].tolist()
            s_ranks, d_ranks = (src * rails + rail).tolist(), (dst * rails + rail).tolist()
            time = _time(0, rail * 60)
            series = [(BW_TEST.format(rail), "bandwidth", "Gbit/s", size, 1000,
                       healthy_bandwidth(size) * heavy_noise(rng, noise, tail, src.size) * bw_factor)
                      for size in sizes]
            if latency:
                series += [(LAT_TEST.format(rail), metric, "us", LATENCY_SIZE, 10000,
                            nominal * heavy_noise(rng, noise * LATENCY_NOISE[metric], tail, src.size) / factor
                            * (tail_factor if metric in TAIL_METRICS else 1.0))
                           for metric, nominal in LATENCY.items()]
            for test, metric, unit, size, samples, values in series:
                vals = values.tolist()
                fh.write("".join([head % (test, metric, vals[k], unit, size, rail, s_names[k], d_names[k],
                                          s_ranks[k], d_ranks[k], time, samples) for k in range(src.size)]))
    run = {"run_id": f"synthetic-sampled-{nodes}x{rails}-{seed}", "schema": SCHEMA_VERSION, "start": _time(0),
           "end": _time(1), "command": "synthetic sampled", "launcher": "synthetic", "profile": prof.to_json(),
           "topology": {"nodes": names.tolist(), "rails": list(range(rails)), "ranks": nodes * rails,
                        "ranks_per_node": rails},
           "schedule": {"pattern": f"screen:{partners}" if partners > 0 else "all-pairs",
                        "rounds": partners, "seed": seed, "tree_aware": bool(leaf is not None and partners > 0)},
           "complete": True, "exit_code": 0, "missing_ranks": [], "iterations": 1}
    (directory / "run.json").write_text(json.dumps(run) + "\n")
    return directory


def sampled_values(records, nodes: int, rails: int, rng: np.random.Generator, noise: float = BW_NOISE,
                   tail: float = 0.0, leaves: int | None = None, spines: int | None = None, **faults) -> np.ndarray:
    """New values for the records of a make_run_sampled run (as load_records reads them): the same
    healthy figures, fresh noise from `rng` and these faults (make_run_sampled's; slow_cable needs
    spines=S), so that one schedule, written and loaded once, serves many cases
    (benchmarks/localization.py)."""
    import pandas as pd
    names = node_names(nodes)
    src = pd.Categorical(records["src"].astype(str), categories=names).codes
    dst = pd.Categorical(records["dst"].astype(str), categories=names).codes
    rail = records["rail"].to_numpy(np.int64)
    metric = records["metric"].astype(str).to_numpy()
    size = records["size"].to_numpy(np.float64)
    f = _factors(names, rails, 1, faults.get("slow_link"), faults.get("slow_nic"), faults.get("slow_node"),
                 faults.get("slow_rail"), None, None, rng, leaves, faults.get("slow_leaf"), faults.get("slow_uplink"),
                 faults.get("slow_spine"))[0]
    factor = f[rail, src, dst]
    is_bw = metric == "bandwidth"
    nominal = np.where(is_bw, BW_PEAK * size / (size + BW_HALF), pd.Series(metric).map(LATENCY).to_numpy(np.float64))
    scale = noise * pd.Series(metric).map(LATENCY_NOISE).fillna(1.0).to_numpy(np.float64)
    values = nominal * heavy_noise(rng, scale, tail, len(metric))
    if any(faults.get(k) for k in PATH_FAULTS):
        two = TwoLevel(names, leaves, spines) if spines and leaves else None
        factor = np.where(is_bw, factor * _path_factors(names, rails, two, *(faults.get(k) for k in PATH_FAULTS))[
            rail, src, dst], factor)
    if faults.get("slow_tail"):
        values = np.where(np.isin(metric, TAIL_METRICS),
                          values * _tail_factors(names, rails, faults.get("slow_tail"))[rail, src, dst], values)
    return np.where(is_bw, values * factor, values / factor)
