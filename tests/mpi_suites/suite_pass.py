import pytest


@pytest.mark.preflight
def test_barrier(topology, record):
    topology.world.Barrier()
    record("world_size", topology.world.Get_size(), "count", verdict="pass")


def test_node_and_rail_communicators(topology):
    assert topology.node_comm.Get_size() == len(topology.ranks_on(topology.node))
    assert topology.rail_comm.Get_size() == len(topology.nodes)
    assert topology.node_comm.allreduce(1) == topology.node_comm.Get_size()
