"""A rail whose links to node2 cannot be set up (its engine raises on both ranks of those pairs, as
PairLink does for a dead peer): the other pairs of later rounds are still measured, nothing hangs."""

from types import SimpleNamespace

from acceptance.engines import mpi
from acceptance.drivers.p2p import pair_bandwidth


def test_write_bandwidth_around_a_dead_node(topology, profile, record, progress):
    nodes = [topology.ranks[r].node for r in range(topology.world.Get_size())]

    def pair_link(comm, size, *args, **kw):
        if "node2" in {nodes[r] for r in comm.allgather(topology.rank)}:
            raise RuntimeError("8 work requests got no completion in 30 s")  # as the verbs engine says
        return mpi.PairLink(comm, size, *args, **kw)

    engine = SimpleNamespace(NAME="mpi", CAN=frozenset(), PairLink=pair_link)
    problems = pair_bandwidth(engine, topology, topology.rail, profile, record, progress, "write")
    assert not problems, "\n".join(problems)
