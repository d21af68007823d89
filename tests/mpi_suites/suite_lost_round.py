"""A node lost in the middle of a pairwise test's schedule: every rank walks its rail's rounds
(drivers.p2p.RailPairs, the schedule the suites use) and records a probe per pair and direction with
the round's index; in round LOSE_ROUND the ranks of node LOSE_NODE kill themselves (SIGKILL), or with
LOSE_MODE=stop stop themselves (SIGSTOP: a hung node, which cannot even say where it is), in the first
launch only. A relaunch (acceptance.cli.attempts) must keep the rounds that ended, measure the rest on
the surviving nodes, and run the tests after it."""
import os
import signal

from acceptance.drivers.p2p import RailPairs
from acceptance.runtime.resume import ENV_RESUME

LOSE_NODE = os.environ.get("LOSE_NODE", "node3")
LOSE_ROUND = int(os.environ.get("LOSE_ROUND", "2"))
SIGNAL = {"die": signal.SIGKILL, "stop": signal.SIGSTOP}[os.environ.get("LOSE_MODE", "die")]


def test_before(record, topology):
    record("probe", 1, "count")


def test_rounds(record, topology, rail, progress):
    rp = RailPairs(topology, rail, progress)
    if not rp.active:
        return
    for comm, low, high in rp.pairs():
        if rp.round == LOSE_ROUND and topology.node == LOSE_NODE and not os.environ.get(ENV_RESUME):
            os.kill(os.getpid(), SIGNAL)  # the node's ranks die, or stop, mid-schedule
        comm.Barrier()
        for origin in (0, 1):
            _, _, nodes, ranks = rp.direction(low, high, origin)
            if comm.Get_rank() == origin:
                record("probe", 1, "count", nodes=nodes, ranks=ranks, rail=rail, round=rp.round)


def test_after(record, topology):
    record("probe", 1, "count")
