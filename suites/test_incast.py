"""Incast on every rail: K senders write to one receiver at once.

Per-sender bandwidth, fairness (slowest / fastest sender), the aggregate into the
receiver, the receiver's put latency while it is flooded, and the pause, CNP and
discard counters of each port during the round, against the profile's [incast]
and [counters] bounds.
"""

import pytest

from acceptance.drivers.incast import incast

pytestmark = [pytest.mark.rail, pytest.mark.p2p, pytest.mark.congestion]
SUITE = "incast"


def test_incast(engine, topology, rail, profile, record, progress):
    if len(topology.nodes) < 2:
        pytest.skip(f"incast needs at least 2 nodes; this run has {len(topology.nodes)}")
    problems = incast(engine, topology, rail, profile, record, progress)
    assert not problems, f"rail {rail}:\n" + "\n".join(problems)
