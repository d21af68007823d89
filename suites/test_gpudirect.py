"""GPUDirect RDMA on every rail: the NIC writes GPU memory straight into the peer's GPU memory.

Registration of GPU memory (dma-buf export + ibv_reg_dmabuf_mr, or ibv_reg_mr through
nvidia_peermem) timed by size on every rank. Per rail, every scheduled node pair in both directions, through the verbs engine on
cupy device memory registered with dma-buf (or by address through nvidia_peermem):
write bandwidth for every sweep size with the data verified on the GPU, and write
latency (post to completion: the host cannot spin on device memory). The support
checks (nvidia_peermem loaded or dma-buf supported) are the preflight's
test_gpudirect, which carries this marker too.
"""

import pytest

from acceptance.rules import judge
from acceptance.engines import nccl
from acceptance.drivers.p2p import op_latency, pair_bandwidth
from acceptance.measure.stats import percentiles
from acceptance.measure.sweep import sizes
from acceptance.measure.units import us

pytestmark = [pytest.mark.gpudirect, pytest.mark.rail]
SUITE = "gpudirect"


@pytest.fixture(scope="module")
def gpu(topology):
    """This rank's GPU (local rank modulo the node's GPUs); skips on every rank unless all can run.

    Asked for before `engine`, so a run without GPUs skips before an engine is chosen for it.
    """
    if len(topology.nodes) < 2:
        pytest.skip(f"GPUDirect RDMA writes need at least 2 nodes; this run has {len(topology.nodes)}")
    usable, why = nccl.available()
    every = topology.world.allgather((topology.node, usable, why))
    missing = {node: reason for node, ok, reason in every if not ok}
    if missing:
        reasons = sorted(set(missing.values()))
        pytest.skip(f"no usable GPU on {', '.join(sorted(set(missing)))}: {reasons[0]}")
    import cupy
    device = cupy.cuda.Device(topology.me.local_rank % cupy.cuda.runtime.getDeviceCount())
    device.use()
    return device


def test_gpu_write_bandwidth(gpu, engine, topology, rail, profile, record, progress):
    problems = pair_bandwidth(engine, topology, rail, profile, record, progress, "write", memory="cuda", suite="gpudirect")
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)


def test_gpu_write_latency(gpu, engine, topology, rail, profile, record, progress):
    problems = op_latency(engine, topology, rail, profile, record, progress, "write", memory="cuda",
                          suite="gpudirect")
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)


def test_gpu_registration_time(gpu, engine, profile, record):
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
    assert not problems, "GPU memory registration slower than the profile allows:\n" + "\n".join(problems)
