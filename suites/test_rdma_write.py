"""One-sided writes on every rail, between every scheduled pair of nodes, in both directions.

Bandwidth: a size sweep of windowed writes, and one of windowed RDMA READs, the data verified
after each size.
Latency: p50 / p99 / p99.9 of single small writes (and a send/recv ping-pong for reference),
of single reads, and of 8-byte atomic fetch-and-adds (the target checks its counter is exact).
"""

import pytest

from acceptance.drivers.p2p import op_latency, pair_bandwidth, write_latency

pytestmark = [pytest.mark.rail, pytest.mark.p2p]
SUITE = "rdma_write"


@pytest.fixture
def pairs_exist(topology):
    if len(topology.nodes) < 2:
        pytest.skip(f"point-to-point writes need at least 2 nodes; this run has {len(topology.nodes)}")


def test_write_bandwidth(engine, topology, rail, profile, record, progress, pairs_exist):
    problems = pair_bandwidth(engine, topology, rail, profile, record, progress, "write")
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)


def test_read_bandwidth(engine, topology, rail, profile, record, progress, pairs_exist):
    problems = pair_bandwidth(engine, topology, rail, profile, record, progress, "read")
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)


def test_write_latency(engine, topology, rail, profile, record, progress, pairs_exist):
    problems = write_latency(engine, topology, rail, profile, record, progress)
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)


def test_read_latency(engine, topology, rail, profile, record, progress, pairs_exist):
    problems = op_latency(engine, topology, rail, profile, record, progress, "read")
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)


def test_atomic_latency(engine, topology, rail, profile, record, progress, pairs_exist):
    problems = op_latency(engine, topology, rail, profile, record, progress, "atomic")
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)
