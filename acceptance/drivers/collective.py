"""All-reduce / all-to-all sweeps over a communicator: algbw, busbw and an exact correctness check.

Each iteration is timed on every rank; an iteration's time is the slowest
rank's (as nccl-tests -I); algbw = bytes / mean time, busbw = algbw x the
nccl-tests factor for the operation and communicator size.
"""

from __future__ import annotations

from typing import Callable

from mpi4py import MPI

from ..rules import catalog, judge
from ..rules.profile import Profile
from ..measure.stats import iteration_time
from ..measure.sweep import sweep_from_profile
from ..engines.collective_data import busbw
from ..measure.units import gbyte_per_s
from ..measure.verify import Policy, Tally

OPS = tuple(catalog.COLLECTIVES)  # each an engine method of that name (engines.contract)


def sweep_collective(engine, op: str, comm: MPI.Comm, scope: str, rail: int | None, nodes: list[str],
                     profile: Profile, record: Callable, progress: Callable[[], None] | None = None) -> list[str]:
    """Run `op` over `comm` for every sweep size; comm rank 0 records. Collective over comm.

    scope: "world", "rail" (`rail` says which) or "node" (results.SCOPES); records carry op and scope."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")
    run = getattr(engine, op)
    sweep = sweep_from_profile(profile)
    policy = Policy.from_profile(profile)
    statistic = profile.get("sweep.statistic")
    n, root = comm.Get_size(), comm.Get_rank() == 0
    ranks = comm.allgather(MPI.COMM_WORLD.Get_rank())
    problems = []
    where = f"{op} over {f'rail {rail}' if scope == 'rail' else scope} ({n} ranks on {', '.join(nodes)})"
    for size in sweep.sizes:
        iters = sweep.iters(size)
        res = run(comm, size, iters, sweep.warmup(iters), verified=policy.iterations(iters, size, seed=size))
        if progress:
            progress()
        if not root:
            continue
        # The world communicator is one of a kind: nothing in the run to hold it against (fleet bounds).
        common = dict(size=res.nbytes, rail=rail, nodes=nodes, ranks=ranks, engine=engine.NAME,
                      samples=iters, peers=scope != "world", op=op, scope=scope)
        alg = gbyte_per_s(res.nbytes, iteration_time(res.times_ns, statistic))
        bus = busbw(op, alg, n)
        judge.record(record, profile, "collective", "algbw", alg, **common)
        bound, verdict = judge.record(record, profile, "collective", "busbw", bus, **common)
        tally = Tally(ops=res.ops, failed=res.ops_failed, missing=res.missing, wrong=res.wrong, first=res.first_wrong)
        judge.record(record, profile, "collective", "errors", res.wrong, detail=tally.summary(f"{op} operations", "elements"),
                     **tally.fields(), **common)
        if verdict == "fail":
            problems.append(f"{where}, size {res.nbytes} B: busbw {bus:.3f} GB/s < bound {bound:g} GB/s")
        if res.wrong:
            problems.append(f"{where}, size {res.nbytes} B: {tally.summary(f'{op} operations', 'elements')}")
    return problems
