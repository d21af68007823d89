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

from acceptance.drivers import gpudirect
from acceptance.drivers.p2p import op_latency, pair_bandwidth

pytestmark = [pytest.mark.gpudirect, pytest.mark.rail]
SUITE = gpudirect.SUITE


@pytest.fixture(scope="module")
def gpu(topology):
    """This rank's GPU (local rank modulo the node's GPUs); skips on every rank unless all can run.

    Asked for before `engine`, so a run without GPUs skips before an engine is chosen for it.
    """
    why = gpudirect.unusable(topology)
    if why:
        pytest.skip(why)
    return gpudirect.use_gpu(topology)


def test_gpu_write_bandwidth(gpu, engine, topology, rail, profile, record, progress):
    problems = pair_bandwidth(engine, topology, rail, profile, record, progress, "write", memory="cuda", suite=SUITE)
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)


def test_gpu_write_latency(gpu, engine, topology, rail, profile, record, progress):
    problems = op_latency(engine, topology, rail, profile, record, progress, "write", memory="cuda",
                          suite=SUITE)
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)


def test_gpu_registration_time(gpu, engine, profile, record):
    problems = gpudirect.registration(engine, profile, record)
    assert not problems, "GPU memory registration slower than the profile allows:\n" + "\n".join(problems)
