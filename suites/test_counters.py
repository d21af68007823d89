"""Port counters before anything is measured: no error counter already stuck at its maximum.

PMA error counters (symbol_error 16-bit, link_downed 8-bit, ...) stop at all-ones
instead of wrapping: a saturated one cannot show the errors this run causes, and
reaching the cap at all means that port has been erring for a long time. The deltas
of every suite are recorded around each suite file (see suites/conftest.py).
"""

import pytest

from acceptance.host import counters
from acceptance.host import sysfs
from acceptance.rules import judge

pytestmark = pytest.mark.counters
SUITE = "preflight"


def test_no_error_counter_is_saturated(topology, profile, record):
    first = topology.rank == min(r.rank for r in topology.ranks_on(topology.node))
    mine = None
    if first:
        snap = counters.snapshot(sysfs.sysfs_root(topology.node), ethtool=False, node=topology.node)
        mine = {"ports": len(snap["ports"]), "saturated": counters.saturated(snap), "problems": snap["problems"]}
    every = {n: s for n, s in topology.world.allgather((topology.node, mine)) if s is not None}
    if not any(s["ports"] for s in every.values()):
        reasons = sorted({p for s in every.values() for p in s["problems"]})
        pytest.skip("no RDMA port on any node" + (f": {reasons[0]}" if reasons else ""))
    problems = [f"{node} {line}" for node in topology.nodes for line in every[node]["saturated"]]
    if topology.rank == 0:
        for node in topology.nodes:
            lines = every[node]["saturated"]
            judge.record(record, profile, SUITE, "saturated_counters", len(lines), nodes=[node],
                         ranks=[r.rank for r in topology.ranks_on(node)], rail=None, detail="; ".join(lines) or None)
    assert not problems, ("error counters at their maximum: they cannot show new errors; clear them "
                          "(perfquery -R -C <device> -P <port>) and find why they rose:\n" + "\n".join(problems))
