"""The verbs engine against perftest on the same pair of RDMA devices, in one run.

Run (two ranks, one per device; in the Soft-RoCE rig the devices come from its device map):

    python tests/cluster/softroce.py run -- .venv/bin/mpiexec -n 2 .venv/bin/python \\
        benchmarks/verbs_vs_perftest.py [--devices rxe_n1r0,rxe_n2r0] [--rounds 3] [--quick]

Rank 0 writes, rank 1 is the target, on the devices named (default: node1's and node2's
rail-0 devices of $ACCEPTANCE_DEVICE_MAP). Each round measures, in alternating order:

1. write bandwidth at --size: the engine's PairLink.put_bandwidth (windows of `window`
   RDMA WRITEs, at most tx_depth in flight, one completion every cq_mod), Gbit/s over
   every window, against `ib_write_bw -n <same number of writes> -t tx_depth -Q cq_mod`,
   its BW average. Target: engine / perftest >= 0.9.
2. write latency p50 at 8 B: PairLink.put_latency (ib_write_lat's method: both sides
   spin on the last byte, half a round trip per sample) against `ib_write_lat -n`'s
   t_typical (its median). Information: a Python loop costs about a microsecond per
   sample, so the hardware profiles gate ib_write_lat's number itself (perftest suite).

Both use the profile's [verbs] settings (tx_depth, cq_mod, QP timeout, GID: the RoCE v2
one, IPv4-mapped first) and the same device, port and pair. Each line reports the median
of the per-round ratios with their min and max. Exit 0 whether or not the target is met
(a measurement, not a test), 1 on an error, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import traceback
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acceptance.host import nics  # noqa: E402
from acceptance.host import sysfs  # noqa: E402
from acceptance.tools import perftest  # noqa: E402
from acceptance.engines import verbs  # noqa: E402
from acceptance.measure import gbit_per_s, percentiles, us  # noqa: E402
from acceptance.rules.profile import load_profile  # noqa: E402
from acceptance.rules.units import format_size, parse_size  # noqa: E402

WRITER, TARGET = 0, 1
LAT_SIZE = 8
FULL = {"bw_iters": 200, "lat_iters": 5000, "warmup": 50}
QUICK = {"bw_iters": 30, "lat_iters": 500, "warmup": 10}


def default_devices() -> list[str]:
    mapped = nics.device_map()
    if not mapped or not mapped.get("node1") or not mapped.get("node2"):
        raise SystemExit("benchmark: give --devices DEV0,DEV1 (no device map with node1 and node2 in "
                         f"${nics.ENV_DEVICE_MAP})")
    return [mapped["node1"][0], mapped["node2"][0]]


def engine_bandwidth(link, size, window, iters, warmup) -> float:
    t = link.put_bandwidth(size, iters, warmup, window, WRITER, seed=(WRITER, TARGET, 0))
    if link.me != WRITER:
        if t.tally is not None and t.tally.failed:
            raise RuntimeError(f"data corrupted: {t.tally.summary('writes')}")
        return float("nan")
    return gbit_per_s(size * window * len(t.times_ns), int(t.times_ns.sum()))


def engine_latency(link, iters, warmup) -> float:
    times = link.put_latency(LAT_SIZE, iters, warmup, WRITER).times_ns
    return percentiles(us(times)).p50 if times is not None else float("nan")


def perftest_run(comm, spec, server_host, port) -> float:
    result = perftest.run_pair(comm, comm.Get_rank() == TARGET, spec, server_host, tcp_port=port)
    if result is None:
        return float("nan")
    return result.avg_gbps if spec.kind == "bw" else result.t_typical_us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", help="writer's and target's RDMA devices, e.g. rxe_n1r0,rxe_n2r0")
    ap.add_argument("--size", default="64KiB", help="write size of the bandwidth comparison (default 64KiB)")
    ap.add_argument("--profile", default="softroce", help="profile whose [verbs] settings both use")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        print("benchmark: run it with exactly 2 ranks (mpiexec -n 2)", file=sys.stderr)
        return 2
    rank = comm.Get_rank()
    counts = QUICK if args.quick else FULL
    try:
        profile = load_profile(args.profile)
        settings = verbs.Settings.from_profile(profile)
        devices = args.devices.split(",") if args.devices else default_devices()
        device = devices[rank]
        size, window = parse_size(args.size), settings.tx_depth
        engine = verbs.VerbsEngine()
        engine.use(device, settings)
        root = sysfs.sysfs_root()
        gid = settings.gid_index if settings.gid_index >= 0 else perftest.roce_gid_index(root, device, settings.port)
        netdev = next((p.netdev for p in sysfs.ports(root, [device]) if p.port == settings.port), None)
        server = comm.bcast(perftest.rail_address(root, device, settings.port, gid, netdev) or MPI.Get_processor_name()
                            if rank == TARGET else None, root=TARGET)
        extra = ("-u", str(settings.timeout))
        common = {"device": device, "ib_port": settings.port, "gid_index": gid}
        bw_spec = perftest.Spec("bw", size=size, iters=counts["bw_iters"] * window, tx_depth=settings.tx_depth,
                                extra=(*extra, "-Q", str(settings.cq_mod)), **common)
        lat_spec = perftest.Spec("lat", size=LAT_SIZE, iters=counts["lat_iters"], extra=extra, **common)
        ratios = {"bw": [], "lat": []}
        values = {k: ([], []) for k in ratios}
        for r in range(args.rounds):
            link = engine.PairLink(comm, size)
            try:
                runs = {
                    "engine": {"bw": lambda: engine_bandwidth(link, size, window, counts["bw_iters"], counts["warmup"]),
                               "lat": lambda: engine_latency(link, counts["lat_iters"], counts["warmup"])},
                    "perftest": {"bw": lambda: perftest_run(comm, bw_spec, server, perftest.DEFAULT_TCP_PORT + 2 * r),
                                 "lat": lambda: perftest_run(comm, lat_spec, server,
                                                             perftest.DEFAULT_TCP_PORT + 2 * r + 1)}}
                for kind in ("bw", "lat"):
                    # The order flips every round, so neither side always runs on a warmer machine.
                    order = ("engine", "perftest") if r % 2 == 0 else ("perftest", "engine")
                    got = {who: runs[who][kind]() for who in order}
                    if rank == WRITER:
                        values[kind][0].append(got["engine"])
                        values[kind][1].append(got["perftest"])
                        ratios[kind].append(got["engine"] / got["perftest"])
            finally:
                link.free()
        if rank == WRITER:
            for kind, label, unit, sign, target in (
                    ("bw", f"write bandwidth {format_size(size)}", "Gbit/s", ">=", 0.9),
                    ("lat", f"write latency p50 {LAT_SIZE} B", "us", "<=", None)):
                ratio = statistics.median(ratios[kind])
                said = ("information: the hardware profiles gate ib_write_lat's latency itself "
                        "(perftest.latency_*, docs/methodology.md §4)" if target is None else
                        f"target {sign} {target}: {'met' if ratio >= target else 'MISSED'}")
                print(f"{label}: verbs engine {statistics.median(values[kind][0]):.4g} {unit}, perftest "
                      f"{statistics.median(values[kind][1]):.4g} {unit}, ratio {ratio:.2f} ({said}) [rounds "
                      f"{len(ratios[kind])}, min {min(ratios[kind]):.2f}, max {max(ratios[kind]):.2f}] on "
                      f"{devices[0]} -> {devices[1]}", flush=True)
    except Exception:  # noqa: BLE001 - a measurement tool: say what broke, exit 1
        traceback.print_exc()
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
