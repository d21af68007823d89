# Every suite runs collectively: one pytest session per MPI rank, outcomes agreed at rank 0.
import pytest

from acceptance.fabric.engines import select
from acceptance.portwatch import PortWatch
from acceptance.pytest_plugin import recorder_of

pytest_plugins = ["acceptance.pytest_plugin"]


@pytest.fixture(scope="session")
def engine(profile):
    """The measurement engine the profile asks for (run.engine); skips with the reason when unusable."""
    module, why = select(profile.get("run.engine"))
    if module is None:
        pytest.skip(why)
    return module


@pytest.fixture(scope="module", autouse=True)
def port_counters(request, topology, profile):
    """Every RDMA port of each node, snapshotted before and after each suite (by the node's first rank).

    The deltas become records of suite `counters` (their test is the suite file); the
    analysis turns a rising error counter into a finding naming node, device, port and rail.
    Nodes without RDMA ports, and profiles with counters.enabled = false, record nothing.
    """
    watch = PortWatch.for_node(topology, profile)
    before = watch.snapshot() if watch else None
    yield
    if watch:
        watch.record(before, watch.snapshot(), recorder_of(request.config).bind(request.node.nodeid, "counters"))
