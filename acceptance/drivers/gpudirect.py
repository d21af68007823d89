"""GPUDirect RDMA (suites/test_gpudirect.py): whether every rank has a GPU, this rank's GPU, and the
registration time of GPU memory. The pairwise writes are the pairwise driver's (acceptance.drivers.p2p,
memory="cuda"); the support check (nvidia_peermem or dma-buf) is the preflight's
(acceptance.drivers.preflight.gpudirect)."""

from __future__ import annotations

from typing import Callable

from ..engines import nccl
from ..measure.stats import percentiles
from ..measure.sweep import sizes
from ..measure.units import us
from ..rules import judge
from ..rules.profile import Profile
from ..runtime.topology import Topology

SUITE = "gpudirect"


def unusable(topology: Topology) -> str | None:
    """Why the GPUDirect writes cannot run on every rank, or None; gathered over the world, so
    every rank gives the same answer (collective)."""
    if len(topology.nodes) < 2:
        return f"GPUDirect RDMA writes need at least 2 nodes; this run has {len(topology.nodes)}"
    usable, why = nccl.available()
    every = topology.world.allgather((topology.node, usable, why))
    missing = {node: reason for node, ok, reason in every if not ok}
    if missing:
        reasons = sorted(set(missing.values()))
        return f"no usable GPU on {', '.join(sorted(set(missing)))}: {reasons[0]}"
    return None


def use_gpu(topology: Topology):
    """This rank's GPU (local rank modulo the node's GPUs), made current; its cupy Device."""
    import cupy
    device = cupy.cuda.Device(topology.me.local_rank % cupy.cuda.runtime.getDeviceCount())
    device.use()
    return device


def registration(engine, profile: Profile, record: Callable) -> list[str]:
    """p50 registration / deregistration time of GPU memory per size on this rank (dma-buf export
    included), against the profile's bounds."""
    problems = []
    for size in sizes(profile.get("memreg.min_size"), profile.get("memreg.max_size"), profile.get("memreg.factor")):
        reg, dereg, path = engine.gpu_register_times(size, profile.get("memreg.repeats"))
        for metric, times in (("reg_time", reg), ("dereg_time", dereg)):
            stats = percentiles(us(times))
            bound, verdict = judge.record(record, profile, SUITE, metric, stats.p50, size=size, engine=engine.NAME,
                                          memory="cuda", samples=stats.samples,
                                          detail=f"p50 via {path}; max {stats.max:.1f} us")
            if verdict == "fail":
                problems.append(f"size {size} B: GPU {metric} p50 {stats.p50:.1f} us > bound {bound:g} us")
    return problems
