"""topology: emulation settings, rails, natural order, and a real one-process MPI world."""
import socket

import pytest
from mpi4py import MPI

from acceptance.records.naming import natural_key
from acceptance.runtime.topology import (
    ENV_NIC,
    ENV_NODES,
    ENV_RANKS_PER_NODE,
    RankInfo,
    Topology,
    TopologyError,
    emulation,
    local_identity,
    rail_of,
)


def test_emulation_unset():
    assert emulation({}) is None
    assert emulation({"OTHER": "1"}) is None


def test_emulation_parses():
    assert emulation({ENV_NODES: "2", ENV_RANKS_PER_NODE: "4"}) == (2, 4)


@pytest.mark.parametrize("env", [{ENV_NODES: "2"}, {ENV_RANKS_PER_NODE: "4"}])
def test_emulation_only_one_var(env):
    with pytest.raises(TopologyError) as e:
        emulation(env)
    assert ENV_NODES in str(e.value) and ENV_RANKS_PER_NODE in str(e.value)
    assert "must both be set to positive integers" in str(e.value)


def test_emulation_non_integer():
    with pytest.raises(TopologyError) as e:
        emulation({ENV_NODES: "two", ENV_RANKS_PER_NODE: "4"})
    assert "'two'" in str(e.value) and "'4'" in str(e.value)


@pytest.mark.parametrize("nodes, per", [("0", "4"), ("2", "0"), ("-1", "2")])
def test_emulation_not_positive(nodes, per):
    with pytest.raises(TopologyError) as e:
        emulation({ENV_NODES: nodes, ENV_RANKS_PER_NODE: per})
    assert str(e.value) == (f"local emulation needs at least 1 node and 1 rank per node, "
                            f"got {int(nodes)} x {int(per)}")


def test_rail_of():
    assert rail_of(3, None, {}) == 3
    assert rail_of(3, "mlx5_0", {}) == 3
    assert rail_of(3, "mlx5_0", {"mlx5_0": 7}) == 7
    assert rail_of(3, "mlx5_9", {"mlx5_0": 7}) == 3
    assert rail_of(2, "", {"": 5}) == 2


def test_natural_order():
    names = ["node10", "node2", "node1", "gpu-a3", "gpu-a10"]
    assert sorted(names, key=natural_key) == ["gpu-a3", "gpu-a10", "node1", "node2", "node10"]
    assert natural_key("node2") < natural_key("node10")


# ---- a real one-rank MPI world (singleton init, no mpiexec) -------------

def test_local_identity_slurm_env():
    info = local_identity(MPI.COMM_WORLD, {}, env={"SLURMD_NODENAME": "gpu-07", "SLURM_LOCALID": "3"})
    assert info == RankInfo(rank=0, node="gpu-07", local_rank=3, rail=3,
                            host=socket.gethostname(), nic=None)


def test_local_identity_nic_mapping():
    env = {"SLURMD_NODENAME": "gpu-07", "SLURM_LOCALID": "3", ENV_NIC: "mlx5_5"}
    info = local_identity(MPI.COMM_WORLD, {"mlx5_5": 1}, env=env)
    assert (info.local_rank, info.rail, info.nic) == (3, 1, "mlx5_5")


def test_local_identity_fallbacks():
    info = local_identity(MPI.COMM_WORLD, {}, env={})
    assert info.node == socket.gethostname()
    assert info.local_rank == 0 and info.rail == 0 and info.rank == 0


def test_local_identity_emulation():
    info = local_identity(MPI.COMM_WORLD, {}, env={ENV_NODES: "1", ENV_RANKS_PER_NODE: "1",
                                                     "SLURMD_NODENAME": "ignored"})
    assert (info.rank, info.node, info.local_rank, info.rail) == (0, "node1", 0, 0)


def test_local_identity_emulation_mismatch():
    with pytest.raises(TopologyError) as e:
        local_identity(MPI.COMM_WORLD, {}, env={ENV_NODES: "2", ENV_RANKS_PER_NODE: "2"})
    assert str(e.value) == ("local emulation of 2 nodes x 2 ranks needs 4 ranks, but the job has 1")


def test_topology_single_rank():
    info = local_identity(MPI.COMM_WORLD, {}, env={ENV_NODES: "1", ENV_RANKS_PER_NODE: "1"})
    topo = Topology(MPI.COMM_WORLD, [info])
    try:
        assert topo.to_json() == {
            "world_size": 1,
            "nodes": {"node1": [0]},
            "rails": [0],
            "ranks": [{"rank": 0, "node": "node1", "local_rank": 0, "rail": 0,
                       "host": socket.gethostname(), "nic": None}],
        }
        assert topo.node_comm.Get_size() == 1
        assert topo.rail_comm.Get_size() == 1
        assert (topo.rank, topo.node, topo.rail) == (0, "node1", 0)
        assert topo.label(0) == "0@node1"
        assert topo.ranks_on("node1") == [info]
        assert topo.ranks_on("node2") == []
    finally:
        topo.node_comm.Free()
        topo.rail_comm.Free()
