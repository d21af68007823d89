"""Two ranks: every verified point-to-point operation of the mpi engine under every fault of
tests/faults.py, and once faithful. Rank 0 prints one JSON line per case: what the checks counted.
Run: mpiexec -n 2 python tests/data/mutate_pair.py"""

import json
import sys
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faults import MODES, FaultyWin  # noqa: E402

from acceptance.engines import mpi  # noqa: E402
from acceptance.measure.verify import Policy, Tally  # noqa: E402

world = MPI.COMM_WORLD
me = world.Get_rank()
POLICY = Policy(every_max=1 << 30, samples=8, slot_region=1 << 20)


def case(name, mode, size, run):
    """run(link or group) -> Transfer/IncastRound; the checking side's Tally goes to rank 0."""
    tally = run()
    both = world.gather(None if tally is None else (tally.ops, tally.failed, tally.missing, tally.wrong), root=0)
    if me == 0:
        got = [t for t in both if t is not None]
        ops, failed, missing, wrong = (sum(x[i] for x in got) for i in range(4))
        print(json.dumps({"op": name, "mode": mode, "size": size, "ops": ops, "failed": failed,
                          "missing": missing, "wrong": wrong}), flush=True)


def faulty(win, method, mode):
    return win if mode == "none" else FaultyWin(win, method, mode, every=2, onset=3)


for mode in ("none", *MODES):
    for size in (8, 1024, 65536):
        link = mpi.PairLink(world, size, 1 << 20)
        real = link.win
        link.win = faulty(real, "Put", mode)
        case("write", mode, size, lambda: link.put_bandwidth(size, 12, 2, 4, 0, (0, 1, 7), policy=POLICY).tally)
        link.win = faulty(real, "Put", mode)
        case("write_latency", mode, size, lambda: link.put_latency(size, 40, 3, 0, (0, 1, 8)).tally)
        link.win = faulty(real, "Get", mode)
        case("read", mode, size, lambda: link.read_latency(size, 40, 3, 0, (0, 1, 9)).tally)
        link.win = faulty(real, "Get", mode)
        case("read_bandwidth", mode, size, lambda: link.read_bandwidth(size, 12, 2, 4, 0, (0, 1, 10),
                                                                      policy=POLICY).tally)
        link.win = real
        link.free()
    link = mpi.PairLink(world, 8, 1 << 20)
    real = link.win
    link.win = faulty(real, "Fetch_and_op", mode)

    def atomic():
        got = link.atomic_latency(40, 3, 0)
        return got.tally
    case("atomic", mode, 8, atomic)
    link.win = real
    link.free()
    group = mpi.IncastGroup(world, 4096, 8, 1 << 20)
    real = group.win
    group.win = faulty(real, "Put", mode)

    def incast():
        got = group.round(0, 4096, 8, 0.05, 8, 20, seed=lambda s: (s, 0, 5))
        if got.mismatches is None:
            return None
        t = Tally()
        for _, one in got.mismatches:
            t.merge(one)
        return t
    case("incast", mode, 4096, incast)
    group.win = real
    group.free()
