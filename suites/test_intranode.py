"""Inside each node: pinned host <-> GPU copy bandwidth per GPU, GPU -> GPU copy bandwidth per pair.

Every value is held to the profile's floor (intranode.h2d_min, d2h_min, p2p_min) and to
its node's median: a GPU or pair below intranode.outlier_fraction x the median of its kind
fails, named with both numbers. On each node its first rank measures every GPU, one at a
time (acceptance.drivers.intranode); whether to run at all is decided from what every
node's first rank sees, gathered over the job, so every rank skips or fails alike.
"""

import pytest

from acceptance.drivers import intranode

pytestmark = pytest.mark.intranode
SUITE = intranode.SUITE


@pytest.fixture(scope="module")
def gpus(topology):
    """node -> the CUDA devices its first rank sees (and why none). Collective over the job."""
    return intranode.census(topology.world, topology.node_comm, topology.node)


def _measure(part, topology, profile, gpus, record, progress):
    decision = intranode.decide(gpus, pairs=part == "peer", gpus_per_node=profile.get("preflight.gpus_per_node"))
    if decision.skip:
        pytest.skip(decision.skip)
    assert not decision.problems, "\n".join(decision.problems)
    settings = intranode.settings_from_profile(profile)
    return intranode.run(part, topology, gpus, settings, record, progress)


def test_host_device_bandwidth(topology, profile, gpus, record, progress):
    problems = _measure("host", topology, profile, gpus, record, progress)
    assert not problems, "pinned host <-> GPU copy bandwidth (GB/s = 1e9 B/s):\n" + "\n".join(problems)


def test_gpu_peer_bandwidth(topology, profile, gpus, record, progress):
    problems = _measure("peer", topology, profile, gpus, record, progress)
    assert not problems, "GPU -> GPU copy bandwidth (GB/s = 1e9 B/s):\n" + "\n".join(problems)
