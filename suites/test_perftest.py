"""The perftest cross-check: ib_write_bw and ib_write_lat on the pairs and rails the harness measures.

Every scheduled node pair of the rail (the same schedule as rdma_write), in both
directions: ib_write_bw at the sweep's largest size (at most perftest.max_size) for
perftest.duration, and ib_write_lat at latency.size for latency.iters round
trips. The destination runs the perftest server, the source (the writer) runs the
client and records perftest's numbers beside the harness's own: suite perftest,
engine perftest, metrics bandwidth (the average, Gbit/s), latency_p50 (t_typical),
latency_p99, latency_p999 and latency_avg (us); latency_p50 and p99 held to
perftest.latency_p50_max / p99_max where the profile sets them, else information.

It skips, with the same reason on every rank, when a node lacks perftest or an RDMA
device, or the run has a single node; where the profile gates write latency here
(perftest.required: the hardware profiles), it fails instead, naming the nodes. A failed tool run fails the test, naming the
pair, the rail and the tool's error. A run that only failed to calibrate perftest's
clock, CLOCK_TRIES times, says so in an unmeasured record (verdict info): perftest
cannot time on that CPU, which says nothing about the fabric. The runs and their records are
acceptance.drivers.perftest's.
"""

import pytest

from acceptance.drivers.perftest import crosscheck, rank_facts, skip_reason
from acceptance.runtime.pytest_plugin import rail_mode_of

pytestmark = [pytest.mark.rail, pytest.mark.p2p]
SUITE = "perftest"


def test_perftest_crosscheck(request, topology, rail, profile, record, progress):
    every = topology.world.allgather(rank_facts(topology, profile))
    # Every rail at once: all ranks must agree to skip, whichever rail is short of a device.
    rails = set(topology.rails) if rail_mode_of(request.config) == "concurrent" else {rail}
    why = skip_reason(every, topology.nodes, rails)
    if why and profile.get("perftest.required") and len(topology.nodes) > 1:
        pytest.fail(f"profile {profile.name} gates write latency on ib_write_lat (perftest.required), which "
                    f"cannot run here: {why}", pytrace=False)
    if why:
        pytest.skip(why)
    problems = crosscheck(topology, rail, profile, record, progress, every[topology.world.Get_rank()])
    assert not problems, f"rail {rail}: perftest failed:\n" + "\n".join(problems)
