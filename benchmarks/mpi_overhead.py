"""How much does the harness's `mpi` engine cost over a bare mpi4py loop?

Run:  .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/mpi_overhead.py [--repeats 5] [--quick]

Three metrics, each measured twice in the same run: once through the harness's
own code path (acceptance.engines.mpi and acceptance.measure, exactly as the
suites call them) and once by an inline mpi4py loop that makes the same MPI
calls, and the harness's value is divided by the bare one:

1. put latency, p50 at 8 B: PairLink.put_latency (one Put + Flush per sample,
   timed by acceptance.measure.timing.timed through a closure) vs an inline
   `t0 = now(); put(spec, 1); flush(1); t[i] = now() - t0` loop.
   Target: harness / bare <= 1.3.
2. put bandwidth at 4 MiB: PairLink.put_bandwidth (window of 64 Puts + one
   Flush per iteration) vs the same 64 Puts + Flush inline, each iteration
   timed as a whole; Gbit/s = size * window * iters * 8 / sum(ns), as the
   engine's driver (acceptance.drivers.p2p) computes it.
   Target: harness / bare >= 0.9.
3. all-reduce busbw at 16 MiB: acceptance.engines.mpi.allreduce vs an inline
   `comm.Allreduce` loop; both time every iteration on every rank, take the
   slowest rank per iteration (MPI.MAX) and the mean of those, then busbw as
   nccl-tests defines it (acceptance.measure.units). Target: harness / bare >= 0.9.

Why the comparison is fair:

- Same MPI calls on the same memory: the bare point-to-point loops use the very
  RMA window (MPI.Win.Allocate on the 2-rank communicator) and send buffer of
  the PairLink the harness just used, under the same MPI.LOCK_SHARED epoch,
  with the same origin (rank 0) and target (rank 1), and put to the same
  slots (each write its own place, measure.verify.Slots). All-reduce cannot share
  buffers (the engine allocates its own), so the bare loop allocates float64
  vectors of the same size built the same way.
- Same timing rules: perf_counter_ns, GC disabled, a preallocated int64 array,
  the same iteration and warmup counts, the same percentile code (nearest rank,
  acceptance.measure.stats) and the same units code on both sides.
- The bare loop is the tightest one can write in Python: buffer specs built once,
  bound methods hoisted into locals, no closure and no extra call per sample.
  So each ratio is an upper bound on what the harness adds.
- Work the harness does outside its timed loop is not counted, because it is not
  in the measured time: put_bandwidth fills the send slots with the
  verification pattern and the target poisons its slots before each verified
  batch and compares them after it (between Barriers, docs/methodology.md
  "Data integrity"); allreduce stamps its input and poisons its output before
  each verified iteration and compares after it. That is the correctness
  checking the bare loop lacks, and it costs wall time, not bandwidth.
- Noise on a small shared box: harness and bare runs alternate within each round
  (the order flips every round, so neither side always runs on a warmer or
  colder machine); the reported ratio is the median of the per-round ratios,
  with their min and max.

Rank 0 prints one line per metric and a final `targets: N/3 met`. The exit
status is 0 whether or not the targets are met (this is a measurement, not a
test), 1 on an error (2 on a command-line usage error, as argparse does).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
from mpi4py import MPI

# Run from a checkout without installing: make `acceptance` importable from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acceptance.engines import mpi as engine  # noqa: E402
from acceptance.engines.collective_data import busbw  # noqa: E402
from acceptance.measure import gbit_per_s, gbyte_per_s, percentiles, us  # noqa: E402
from acceptance.measure.verify import Policy, Slots  # noqa: E402

LAT_SIZE = 8
BW_SIZE = 4 * 1024 * 1024
BW_WINDOW = 64
AR_SIZE = 16 * 1024 * 1024
ORIGIN, TARGET = 0, 1

# (iters, warmup) per metric: full run, and --quick (10x fewer, for the test).
FULL = {"latency": (20000, 1000), "bandwidth": (50, 5), "allreduce": (50, 5)}
QUICK = {"latency": (2000, 100), "bandwidth": (5, 1), "allreduce": (5, 1)}


# ---- bare mpi4py loops --------------------------------------------------------


def bare_put_latency(link: engine.PairLink, size: int, iters: int, warmup: int) -> np.ndarray | None:
    """Put + Flush of `size` B per sample on the link's own window; times on the origin."""
    comm, times = link.comm, None
    if comm.Get_rank() == ORIGIN:
        win = link.win
        put, flush = win.Put, win.Flush
        # The harness's slots: sample i writes its own place (Slots.plan, as PairLink.put_latency).
        slots = Slots.plan(size, 1, iters, min(len(link.send), len(link.window_mem)))
        plan = [([link.send[o:o + size], MPI.BYTE], o) for t in range(slots.iters_per_batch)
                for o in slots.offsets(t)]
        t = np.empty(iters, dtype=np.int64)
        ts = memoryview(t)
        now = time.perf_counter_ns
        was_enabled = gc.isenabled()
        gc.disable()
        win.Lock(TARGET, MPI.LOCK_SHARED)
        try:
            spec, disp = plan[0]
            for _ in range(warmup):
                put(spec, TARGET, disp)
                flush(TARGET)
            n = len(plan)
            for i in range(iters):
                spec, disp = plan[i % n]
                t0 = now()
                put(spec, TARGET, disp)
                flush(TARGET)
                ts[i] = now() - t0
        finally:
            win.Unlock(TARGET)
            if was_enabled:
                gc.enable()
        times = t
    comm.Barrier()
    return times


def bare_put_bandwidth(link: engine.PairLink, size: int, iters: int, warmup: int,
                       window: int) -> np.ndarray | None:
    """`window` Puts + one Flush per iteration, each iteration timed as a whole; times on the origin."""
    comm, times = link.comm, None
    if comm.Get_rank() == ORIGIN:
        win = link.win
        put, flush = win.Put, win.Flush
        # The harness's slots: each Put of an iteration to its own place (Slots.plan, as put_bandwidth).
        slots = Slots.plan(size, window, iters, min(len(link.send), len(link.window_mem)))
        plans = [[([link.send[o:o + size], MPI.BYTE], o) for o in slots.offsets(t)]
                 for t in range(slots.iters_per_batch)]
        t = np.empty(iters, dtype=np.int64)
        ts = memoryview(t)
        now = time.perf_counter_ns
        was_enabled = gc.isenabled()
        gc.disable()
        win.Lock(TARGET, MPI.LOCK_SHARED)
        try:
            for _ in range(warmup):
                for spec, disp in plans[0]:
                    put(spec, TARGET, disp)
                flush(TARGET)
            n = len(plans)
            for i in range(iters):
                plan = plans[i % n]
                t0 = now()
                for spec, disp in plan:
                    put(spec, TARGET, disp)
                flush(TARGET)
                ts[i] = now() - t0
        finally:
            win.Unlock(TARGET)
            if was_enabled:
                gc.enable()
        times = t
    comm.Barrier()
    return times


def bare_allreduce(comm: MPI.Comm, send: np.ndarray, recv: np.ndarray, iters: int,
                   warmup: int) -> np.ndarray | None:
    """Per-iteration Allreduce times, slowest rank per iteration (valid on rank 0)."""
    allreduce = comm.Allreduce
    spec_s, spec_r = [send, MPI.DOUBLE], [recv, MPI.DOUBLE]
    t = np.empty(iters, dtype=np.int64)
    ts = memoryview(t)
    now = time.perf_counter_ns
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(warmup):
            allreduce(spec_s, spec_r, op=MPI.SUM)
        for i in range(iters):
            t0 = now()
            allreduce(spec_s, spec_r, op=MPI.SUM)
            ts[i] = now() - t0
    finally:
        if was_enabled:
            gc.enable()
    out = np.empty_like(t) if comm.Get_rank() == 0 else None
    comm.Reduce(t, out, op=MPI.MAX, root=0)
    return out


# ---- one round of each metric: (harness value, bare value), valid on rank 0 -------


def latency_round(lat_link, iters, warmup, harness_first):
    def harness():
        t = lat_link.put_latency(LAT_SIZE, iters, warmup, origin=ORIGIN).times_ns
        return None if t is None else percentiles(us(t)).p50

    def bare():
        t = bare_put_latency(lat_link, LAT_SIZE, iters, warmup)
        return None if t is None else percentiles(us(t)).p50

    return _pair(harness, bare, harness_first)


def bandwidth_round(bw_link, iters, warmup, harness_first):
    def rate(t):
        return None if t is None else gbit_per_s(BW_SIZE * BW_WINDOW * iters, int(t.sum()))

    def harness():
        tr = bw_link.put_bandwidth(BW_SIZE, iters, warmup, window=BW_WINDOW, origin=ORIGIN, seed=(0, 1, 0))
        if tr.tally is not None and tr.tally.failed:  # on the target: the harness's own check failed
            raise RuntimeError(f"put_bandwidth data verification failed: {tr.tally.summary('writes')}")
        return rate(tr.times_ns)

    def bare():
        return rate(bare_put_bandwidth(bw_link, BW_SIZE, iters, warmup, BW_WINDOW))

    return _pair(harness, bare, harness_first)


def allreduce_round(comm, send, recv, iters, warmup, harness_first):
    n = comm.Get_size()

    def rate(nbytes, t):
        return None if t is None else busbw("allreduce", gbyte_per_s(nbytes, float(t.mean())), n)

    def harness():
        res = engine.allreduce(comm, AR_SIZE, iters, warmup)
        if res.wrong:
            raise RuntimeError(f"allreduce returned {res.wrong} wrong elements: {res.first_wrong}")
        return rate(res.nbytes, res.times_ns)

    def bare():
        return rate(send.nbytes, bare_allreduce(comm, send, recv, iters, warmup))

    return _pair(harness, bare, harness_first)


def _pair(harness, bare, harness_first):
    if harness_first:
        h = harness()
        b = bare()
    else:
        b = bare()
        h = harness()
    return h, b


# ---- report -------------------------------------------------------------------


def summary(label, unit, pairs, target, higher_is_better, digits):
    """One output line and whether the target is met, from the per-round (harness, bare) pairs."""
    ratios = [h / b for h, b in pairs]
    ratio = statistics.median(ratios)
    h = statistics.median(p[0] for p in pairs)
    b = statistics.median(p[1] for p in pairs)
    met = ratio >= target if higher_is_better else ratio <= target
    sign = ">=" if higher_is_better else "<="
    line = (f"{label}: harness {h:.{digits}f} {unit}, bare {b:.{digits}f} {unit}, ratio {ratio:.2f} "
            f"(target {sign} {target:g}: {'met' if met else 'MISSED'}) "
            f"[rounds {len(ratios)}, min {min(ratios):.2f}, max {max(ratios):.2f}]")
    return line, met


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=None,
                   help="rounds of harness/bare pairs per metric (default 5, or 2 with --quick)")
    p.add_argument("--quick", action="store_true", help="10x fewer iterations, 2 rounds: a smoke run")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    return args


def run(comm: MPI.Comm, args) -> list[str]:
    counts = QUICK if args.quick else FULL
    rank = comm.Get_rank()
    library = " ".join(engine.available()[1].split())
    lines = [f"mpi_overhead: {comm.Get_size()} ranks, {library}; "
             f"{args.repeats} rounds; iters+warmup: latency {'+'.join(map(str, counts['latency']))}, "
             f"bandwidth {'+'.join(map(str, counts['bandwidth']))} x window {BW_WINDOW}, "
             f"allreduce {'+'.join(map(str, counts['allreduce']))}"]

    # Link memory as the suites size it (acceptance.drivers.p2p): room for each write's own slot.
    region = Policy().slot_region
    lat_link = engine.PairLink(comm, LAT_SIZE, min(LAT_SIZE * counts["latency"][0], region))
    bw_link = engine.PairLink(comm, BW_SIZE, min(BW_SIZE * BW_WINDOW, region))
    count = AR_SIZE // 8
    ramp = (np.arange(count, dtype=np.float64) % 13) + 1.0  # as the engine builds its inputs
    send, recv = ramp * (rank + 1), np.empty(count, dtype=np.float64)
    lat, bw, ar = [], [], []
    for r in range(args.repeats):
        first = r % 2 == 0
        lat.append(latency_round(lat_link, *counts["latency"], first))
        bw.append(bandwidth_round(bw_link, *counts["bandwidth"], first))
        ar.append(allreduce_round(comm, send, recv, *counts["allreduce"], first))
    # Not in a `finally`: Win.Free is collective, and after an error on one rank it
    # would wait forever for the other; main() aborts the job instead.
    lat_link.free()
    bw_link.free()
    if rank != 0:
        return []
    results = [
        summary(f"latency p50 {LAT_SIZE} B", "us", lat, 1.3, higher_is_better=False, digits=2),
        summary(f"bandwidth {BW_SIZE >> 20} MiB x {BW_WINDOW}", "Gbit/s", bw, 0.9, higher_is_better=True,
                digits=1),
        summary(f"allreduce busbw {AR_SIZE >> 20} MiB", "GB/s", ar, 0.9, higher_is_better=True, digits=2),
    ]
    lines += [line for line, _ in results]
    lines.append(f"targets: {sum(met for _, met in results)}/{len(results)} met")
    return lines


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        if comm.Get_rank() == 0:
            print(f"mpi_overhead: needs exactly 2 ranks (mpiexec -n 2), got {comm.Get_size()}",
                  file=sys.stderr)
        return 1
    try:
        lines = run(comm, args)
    except Exception:
        # The other rank may be waiting in a collective: abort the job rather than hang.
        # One write, then a moment for the launcher to forward it: Abort kills at once.
        sys.stderr.write(f"mpi_overhead: error on rank {comm.Get_rank()}:\n{traceback.format_exc()}")
        sys.stderr.flush()
        time.sleep(0.5)
        comm.Abort(1)
        return 1
    for line in lines:
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
