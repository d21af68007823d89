"""What rank 0 does for thousands of ranks, timed and sized at a synthetic rank count, without MPI.

    .venv/bin/python benchmarks/rank0_scale.py                 # 1,024 .. 8,192 ranks, ~1-2 min on 2 cores
    .venv/bin/python benchmarks/rank0_scale.py --ranks 1024,2048 --records 24 --repeats 5
    .venv/bin/python benchmarks/rank0_scale.py --quick         # 64 .. 256 ranks (smoke run, a few s)

Under MPI every rank sends rank 0 (its outcome summary, its records) for each test phase
(acceptance.runtime.sync.Agreement.agree); rank 0 merges the outcomes, appends every record to
results.jsonl, writes a test_failed record when the phase failed, and answers every rank with the
decision. At the start, a census gathers each rank's host and versions, the ranks' places build the
Topology, and rank 0 merges the nodes' identities into run.json. This benchmark calls the same pure
functions (acceptance.runtime.outcomes, acceptance.host.identity, acceptance.runtime.topology,
acceptance.records.results) with inputs shaped like what the ranks send, at each rank count:

  merge passed     outcomes.merge, every rank passed
  merge failed     outcomes.merge, every rank failed with its own text (a per-rank number in it)
  merge mixed      outcomes.merge, most passed, one node in 16 skipped, one rank in 64 xfailed
                   (the inconsistent-outcome path)
  phase passed     rank 0's whole share of one teardown phase: unpickling every rank's payload (its
                   summary and --records rdma_write records, as a receive does) and staging its records
                   as it arrives (RunFolder.stage_lines, in a temporary folder), then appending them to
                   results.jsonl (land_staged), outcomes.merge,
                   and pickling the decision it answers every rank with (sync.py pickles it once)
  phase failed     the same, every rank failed with its own text: plus the test_failed record
  census           the census merge, Topology over every rank's RankInfo (a stand-in world: the
                   Split calls are MPI's, everything else is the class's own code), the labels,
                   Topology.to_json, merge_identities, and run.json's JSON text
  describe         outcomes.describe of every rank, and the failed_ranks property (a label per rank)
  keepalive        rank 0 relaying the job's progress to every rank (acceptance.runtime.pulse.Pulse.pump)
                   on a stand-in communicator where every send stays pending: the previous relay's
                   and this one's

Each step's time is the best of --repeats; the phase and census steps also show their tracemalloc
peak (a separate run: tracing slows Python down) and the size of the decision rank 0 sends. The last
column is the growth per doubling of the rank count, from the smallest count (the baseline, measured
in the same run) to the largest: ~2 is linear, ~4 quadratic; above SUPERLINEAR it is flagged.

Exit 0 whatever the figures (a measurement, not a test), 1 on an error.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import pickle
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import mpi4py

# No MPI here: importing acceptance.runtime.topology must not initialize (or finalize) a world.
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acceptance.host.identity import merge_identities  # noqa: E402
from acceptance.records.naming import natural_key  # noqa: E402
from acceptance.records.results import FAILED_METRIC, RunFolder, make_record  # noqa: E402
from acceptance.runtime import outcomes  # noqa: E402
from acceptance.runtime.pulse import Pulse  # noqa: E402
from acceptance.runtime.topology import RankInfo, Topology  # noqa: E402

FULL_RANKS = (1024, 2048, 4096, 8192)
QUICK_RANKS = (64, 128, 256)
MIN_TIMED_S = 0.05  # a step faster than this is called in a loop and timed as a whole (--quick: 0.005)
SUPERLINEAR = 2.6   # growth per doubling: N log N at these counts stays under ~2.3, N^1.5 is 2.8
TEST = "suites/test_rdma_write.py::test_write_bandwidth[rail3]"
SIZES = (65536, 1048576, 8388608)


def say(text: str = "") -> None:
    print(text, flush=True)


# ---- what the ranks send ----------------------------------------------------------------------

def node_of(rank: int, per_node: int) -> str:
    return f"node{rank // per_node + 1:04d}"


def labels_of(n: int, per_node: int) -> dict[int, str]:
    return {r: f"{r}@{node_of(r, per_node)}" for r in range(n)}


def failure_text(rank: int, n: int, per_node: int) -> str:
    """A pytest report of a failing rdma_write test as a rank sends it: its own numbers in it."""
    me, peer = node_of(rank, per_node), node_of((rank + 7 * per_node) % n, per_node)
    problems = [f"{me} <-> {peer} rail {rank % per_node}: bandwidth at {s} B {180.0 + (rank * 7 + s) % 97 / 10:.1f} "
                f"Gbit/s below the bound 360.0 Gbit/s (profile h100-ndr400)" for s in SIZES]
    return ("engine = <module 'acceptance.engines.verbs'>, topology = <Topology>, rail = 3\n"
            "profile = <Profile h100-ndr400>, record = <function Recorder.bind.<locals>.record>\n\n"
            "    def test_write_bandwidth(engine, topology, rail, profile, record, progress, pairs_exist):\n"
            "        problems = pair_bandwidth(engine, topology, rail, profile, record, progress, \"write\")\n"
            ">       assert not problems, \"\\n\".join(problems)\n"
            f"E       AssertionError: {problems[0]}\n"
            + "".join(f"E         {p}\n" for p in problems[1:])
            + f"E       assert not {problems!r}\n\nsuites/test_rdma_write.py:26: AssertionError")


def summaries_of(case: str, n: int, per_node: int) -> dict[int, dict]:
    out = {}
    for r in range(n):
        if case == "failed":
            out[r] = outcomes.phase_summary("failed", "call", False, failure_text(r, n, per_node))
        elif case == "mixed" and (r // per_node) % 16 == 5:
            out[r] = outcomes.phase_summary("skipped", "setup", False, f"('{TEST}', 12, 'Skipped: no RDMA device')")
        elif case == "mixed" and r % 64 == 33:
            out[r] = outcomes.phase_summary("skipped", "call", True, "reason: known flaky link")
        else:
            out[r] = outcomes.phase_summary("passed", "call", False, "")
    return out


def records_of(rank: int, n: int, per_node: int, count: int) -> list[dict]:
    """`count` records of one rdma_write bandwidth test on this rank: bandwidth and its data check
    per partner and size, partners spread over the fleet as a screening round picks them."""
    rail, nodes_total, me = rank % per_node, max(n // per_node, 1), rank // per_node
    out = []
    for i, template in enumerate(_templates(count)):
        partner = (me + 1 + (i // (2 * len(SIZES))) * 37) % nodes_total
        rec = dict(template, rail=rail, nodes=[node_of(me * per_node, per_node), node_of(partner * per_node, per_node)],
                   ranks=[rank, partner * per_node + rail])
        if rec["metric"] == "bandwidth":
            rec["value"] = 360.0 + (rank * 13 + i) % 50 / 10
        out.append(rec)
    return out


def _templates(count: int, cache: dict = {}) -> list[dict]:  # noqa: B006 - a cache on purpose
    """The records' common fields, made (and checked) once by make_record; copied per rank."""
    if count not in cache:
        fields = dict(rail=0, nodes=["a", "b"], ranks=[0, 1], engine="verbs", memory="host", samples=20, op="write",
                      start="2026-12-04T06:00:00.000Z", phase="screen", bound="absolute", verdict="pass")
        cache[count] = [make_record(test=TEST, suite="rdma_write", metric="bandwidth", value=360.0, unit="Gbit/s",
                                    threshold=360.0, size=SIZES[(i // 2) % len(SIZES)], **fields) if i % 2 == 0 else
                        make_record(test=TEST, suite="rdma_write", metric="errors", value=0, unit="", threshold=0,
                                    size=SIZES[(i // 2) % len(SIZES)], **fields) for i in range(count)]
    return cache[count]


# ---- rank 0's share ------------------------------------------------------------------------------

def failed_record(decision: dict, summaries: dict, infos: list[RankInfo]) -> dict:
    """The plugin's _failed_record (acceptance/runtime/pytest_plugin.py) on the same inputs."""
    ranks = decision["ranks"]
    nodes = sorted({infos[r].node for r in ranks}, key=natural_key)
    rails = {infos[r].rail for r in ranks}
    return make_record(test=TEST, suite="rdma_write", metric=FAILED_METRIC, value=None, unit="", nodes=nodes,
                       ranks=ranks, rail=rails.pop() if len(rails) == 1 else None, iteration=0, samples=0,
                       verdict="fail", detail=f"call: {outcomes.failure_headline(decision, summaries)}")


def phase(wire: dict[int, bytes], labels: dict, infos: list[RankInfo], folder: RunFolder) -> int:
    """Rank 0 in one teardown phase, as the plugin's merge() and sync.agree run it; returns the
    bytes of the decision it answers every rank with."""
    got = {}
    for r, b in wire.items():  # what each receive leaves in rank 0's memory: the summary (sync.agree's keep)
        summary, records = pickle.loads(b)
        got[r] = (summary, folder.stage_lines([records]))
    folder.land_staged(got[rank][1] for rank in sorted(got))
    summaries = {rank: got[rank][0] for rank in got}
    decision = outcomes.merge(summaries, labels)
    if decision["outcome"] == "failed":
        folder.append_records([failed_record(decision, summaries, infos)])
    return len(pickle.dumps(decision, pickle.HIGHEST_PROTOCOL))


class StandInWorld:
    """Enough of a communicator for Topology's constructor: rank 0, and Split's result unused."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's name
        return 0

    def Split(self, color, key):  # noqa: N802 - mpi4py's name
        return None


def census(n: int, per_node: int) -> int:
    """Rank 0 at the start: the census, the Topology, labels, identities and run.json's text."""
    got = {r: {"me": {"host": node_of(r, per_node), "versions": {
        "python": "3.12.3", "mpi4py": "4.1.2", "mpi_library": "Open MPI v4.1.6, package: Debian OpenMPI",
        "pytest": "8.4.2", "acceptance": "0.9.0"}}, "run_dir": "/scratch/reports/r" if r == 0 else None}
        for r in range(n)}
    infos = [RankInfo(r, node_of(r, per_node), r % per_node, r % per_node, node_of(r, per_node), f"mlx5_{r % per_node}")
             for r in range(n)]
    physical = [{"serial": f"SN{r // per_node:06d}", "nics": {str(i.rail): {
        "device": i.nic, "guid": f"0x{r:016x}", "port": 1, "fw": "28.39.1002"}}} for r, i in enumerate(infos)]
    agreed = {"run_dir": got[0]["run_dir"], "ranks": [got[r]["me"] for r in sorted(got)]}
    topology = Topology(StandInWorld(), infos)
    labels = {r.rank: f"{r.rank}@{r.node}" for r in topology.ranks}
    identity = merge_identities([(r.node, p) for r, p in zip(topology.ranks, physical)])
    software: dict[str, dict] = {}
    for info, c in zip(topology.ranks, agreed["ranks"]):
        software.setdefault(info.node, c["versions"])
    text = json.dumps({"topology": topology.to_json(), "software": software, "identity": identity}, indent=2)
    return len(text) + len(labels)


class StandInComm:
    """Rank 0 of n for Pulse: nothing arrives, and every send stays pending (ranks busy in a test
    have not received their last keepalive yet), the case where pruning the pending sends costs most."""

    def __init__(self, n: int):
        self.n = n

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's name
        return 0

    def Get_size(self) -> int:  # noqa: N802 - mpi4py's name
        return self.n

    def improbe(self, source, tag, status=None):
        return None

    def isend(self, obj, dest, tag):
        return PendingSend()


class PendingSend:
    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        return False


def keepalive(n: int) -> int:
    """Rank 0 relays progress to every rank (Pulse.pump), with its previous keepalives still pending."""
    pulse = Pulse(StandInComm(n), lambda: None)
    pulse._seen, pulse._relayed, pulse._sent = 2.0, 1.0, -math.inf
    pulse._reqs = [PendingSend() for _ in range(n - 1)]
    pulse.pump()
    return len(pulse._reqs)


def describe_all(labels: dict) -> int:
    ranks = sorted(labels)
    return len(outcomes.describe(ranks, labels)) + len(" ".join(labels[r] for r in ranks))


# ---- measuring -----------------------------------------------------------------------------------

def best_time(fn, repeats: int, min_s: float) -> float:
    """CPU seconds of one call (process_time: the machine may be shared), the best of `repeats`;
    a fast call is looped for `min_s` so a clock tick does not decide its figure."""
    best = math.inf
    for _ in range(repeats):
        gc.collect()
        calls, t0 = 0, time.process_time()
        while True:
            fn()
            calls += 1
            spent = time.process_time() - t0
            if spent >= min_s:
                break
        best = min(best, spent / calls)
    return best


def peak_bytes(fn) -> tuple[int, object]:
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def measure(n: int, per_node: int, records: int, repeats: int, min_s: float, tmp: Path) -> dict[str, tuple]:
    """step -> (seconds, peak bytes or None, decision bytes or None) at n ranks."""
    labels = labels_of(n, per_node)
    infos = [RankInfo(r, node_of(r, per_node), r % per_node, r % per_node, node_of(r, per_node)) for r in range(n)]
    out: dict[str, tuple] = {}
    for case in ("passed", "failed", "mixed"):
        summaries = summaries_of(case, n, per_node)
        out[f"merge {case}"] = (best_time(lambda: outcomes.merge(summaries, labels), repeats, min_s), None, None)
    for case in ("passed", "failed"):
        summaries = summaries_of(case, n, per_node)
        # Each rank encodes its own records (Recorder.take_lines): rank 0 receives text.
        wire = {r: pickle.dumps((summaries[r], "".join(json.dumps(x) + "\n" for x in records_of(r, n, per_node, records))),
                                pickle.HIGHEST_PROTOCOL)
                for r in range(n)}
        folder = RunFolder.create(tmp, f"n{n}-{case}")

        def one_phase() -> int:
            try:
                return phase(wire, labels, infos, folder)
            finally:
                folder.results.unlink(missing_ok=True)
        seconds = best_time(one_phase, repeats, min_s)
        # The failed phase does all the passed one does and more: its peak is the one traced.
        peak, sent = peak_bytes(one_phase) if case == "failed" else (None, one_phase())
        out[f"phase {case}"] = (seconds, peak, sent)
    out["census"] = (best_time(lambda: census(n, per_node), repeats, min_s), peak_bytes(lambda: census(n, per_node))[0], None)
    out["describe"] = (best_time(lambda: describe_all(labels), repeats, min_s), None, None)
    out["keepalive"] = (best_time(lambda: keepalive(n), repeats, min_s), None, None)
    return out


def growth(values: list[float], counts: list[int]) -> float:
    """Growth per doubling from the first count (baseline) to the last: (v_last/v_first)^(1/doublings)."""
    doublings = math.log2(counts[-1] / counts[0])
    if values[0] <= 0 or doublings <= 0:
        return math.nan
    return (values[-1] / values[0]) ** (1 / doublings)


def table(results: dict[int, dict], counts: list[int]) -> list[str]:
    steps = list(results[counts[0]])
    head = f"{'step':<14} {'':<8}" + "".join(f"{f'N={n:,}':>12}" for n in counts) + f"{'x/doubling':>12}"
    lines = [head, "-" * len(head)]
    flagged = []
    for step in steps:
        rows = [("ms", 0, 1e3, "{:.2f}"), ("MiB", 1, 1 / 2**20, "{:.1f}"), ("KiB out", 2, 1 / 2**10, "{:.1f}")]
        for unit, i, scale, fmt in rows:
            values = [results[n][step][i] for n in counts]
            if any(v is None for v in values):
                continue
            g = growth(values, counts)
            flag = "  SUPERLINEAR" if g > SUPERLINEAR else ""
            if flag:
                flagged.append(f"{step} ({unit})")
            cells = "".join(f"{fmt.format(v * scale):>12}" for v in values)
            lines.append(f"{step if unit == 'ms' else '':<14} {unit:<8}{cells}{g:>12.2f}{flag}")
    lines.append("")
    lines.append(f"superlinear (growth per doubling > {SUPERLINEAR}): " + (", ".join(flagged) if flagged else "none"))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default=",".join(map(str, FULL_RANKS)),
                    help="rank counts, smallest first (the baseline); default %(default)s")
    ap.add_argument("--per-node", type=int, default=8, help="ranks per node (default %(default)s)")
    ap.add_argument("--records", type=int, default=48,
                    help="records each rank sends in the phase with records (default %(default)s)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per step, the best kept (default %(default)s)")
    ap.add_argument("--quick", action="store_true", help="64, 128, 256 ranks, 8 records, 1 run (smoke run)")
    args = ap.parse_args()
    counts = list(QUICK_RANKS) if args.quick else sorted(int(x) for x in args.ranks.split(","))
    records, repeats, min_s = (8, 1, MIN_TIMED_S / 10) if args.quick else (args.records, args.repeats, MIN_TIMED_S)
    if len(counts) < 2 or counts[0] < 1:
        ap.error("--ranks needs at least two positive counts")
    say(f"rank 0 at {', '.join(f'{n:,}' for n in counts)} ranks ({args.per_node} a node), "
        f"{records} records a rank in a phase with records, best of {repeats}")
    results: dict[int, dict] = {}
    # In memory where there is one: the figures are CPU time, and a disk's fsync would only slow the loops.
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="rank0-scale-", dir=shm) as tmp:
        for n in counts:
            t0 = time.perf_counter()
            results[n] = measure(n, args.per_node, records, repeats, min_s, Path(tmp))
            say(f"  N={n:,}: measured in {time.perf_counter() - t0:.1f} s")
    say()
    for line in table(results, counts):
        say(line)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - a benchmark's error is exit 1 with its traceback
        import traceback
        traceback.print_exc()
        sys.exit(1)
