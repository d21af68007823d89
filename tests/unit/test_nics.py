"""Which RDMA devices are a node's and which rail each serves: the device map of virtual nodes
sharing one host's devices (the Soft-RoCE rig), nic_rails, and the rank's bound NIC."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fakesysfs

from acceptance.host import nics
from acceptance.runtime.topology import TopologyError, local_identity

MAP = {"node1": ["rxe_n1r0", "rxe_n1r1"], "node2": ["rxe_n2r0", "rxe_n2r1"]}


@pytest.fixture
def shared_host(tmp_path, monkeypatch):
    """One host's sysfs with the devices of two virtual nodes, and the rig's device map."""
    root = tmp_path / "sys"
    for node, devices in MAP.items():
        for rail, dev in enumerate(devices):
            fakesysfs.rxe_device(root, dev, netdev=f"n{node[-1]}r{rail}", address=f"198.18.{rail + 1}.{node[-1]}")
    path = tmp_path / "devices.json"
    path.write_text(json.dumps(MAP))
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(root))
    monkeypatch.setenv(nics.ENV_DEVICE_MAP, str(path))
    return root


def topology(rank, node, rail, ranks):
    """ranks: [(node, rail, nic)] of the job."""
    infos = [SimpleNamespace(rank=r, node=n, rail=ra, nic=nic) for r, (n, ra, nic) in enumerate(ranks)]
    return SimpleNamespace(rank=rank, node=node, rail=rail, rails=sorted({ra for _, ra, _ in ranks}),
                           me=infos[rank], ranks_on=lambda n: [r for r in infos if r.node == n])


def test_without_a_map_every_device_is_the_nodes(tmp_path, monkeypatch):
    monkeypatch.delenv(nics.ENV_DEVICE_MAP, raising=False)
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=0)
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(root))
    assert nics.device_map() is None and nics.mapped_devices("node1") is None
    assert nics.node_devices("node1") == ["mlx5_0", "mlx5_1"]
    assert nics.node_devices("node1", ["mlx5_10", "mlx5_2"]) == ["mlx5_2", "mlx5_10"]  # natural order


def test_the_map_gives_each_virtual_node_its_own_devices_by_rail(shared_host):
    assert nics.node_devices("node2") == ["rxe_n2r0", "rxe_n2r1"]
    assert nics.node_devices("node3") == []
    assert nics.device_rails("node2", ["rxe_n2r1", "rxe_n2r0"], {}, None, [0, 1]) == {"rxe_n2r1": 1, "rxe_n2r0": 0}
    # One rank per node on a two-rail map: the rail is still the map's, not "unknown".
    topo = topology(1, "node2", 0, [("node1", 0, "rxe_n1r0"), ("node2", 0, "rxe_n2r0")])
    assert nics.topology_rails(topo, {}) == {"rxe_n2r0": 0, "rxe_n2r1": 1}
    assert nics.rail_device(topo, {}) == ("rxe_n2r0", "")
    # pyverbs lists every device of the host: the map still picks the node's own.
    assert nics.rail_device(topo, {}, ["rxe_n1r0", "rxe_n1r1", "rxe_n2r0", "rxe_n2r1"])[0] == "rxe_n2r0"


def test_rail_device_explains_a_rail_without_a_device(tmp_path, monkeypatch):
    monkeypatch.delenv(nics.ENV_DEVICE_MAP, raising=False)
    topo = topology(1, "node1", 1, [("node1", 0, None), ("node1", 1, None)])
    assert nics.rail_device(topo, {}, []) == (None, "rail 1 (rank 1 on node1) has no RDMA device: "
                                                    "this node lists none")
    device, why = nics.rail_device(topo, {}, ["mlx5_0", "mlx5_1", "mlx5_2"])
    assert device is None and why == ("rail 1 (rank 1 on node1) has no RDMA device: mlx5_0 -> no rail, "
                                      "mlx5_1 -> no rail, mlx5_2 -> no rail (rails [0, 1]); map devices to "
                                      "rails with [topology] nic_rails")
    assert nics.rail_device(topo, {"mlx5_2": 1}, ["mlx5_0", "mlx5_1", "mlx5_2"])[0] == "mlx5_2"


@pytest.mark.parametrize("content, why", [
    (None, "no such file"),
    ("{not json", "not JSON"),
    ('{"node1": "rxe0"}', 'expected {"node1": ["<device of rail 0>", ...], ...}'),
    ('[["rxe0"]]', "expected {"),
])
def test_a_bad_device_map_names_the_file_and_why(tmp_path, content, why):
    path = tmp_path / "map.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(nics.DeviceMapError, match=rf"^ACCEPTANCE_DEVICE_MAP={path}: .*{why[:12]}") as info:
        nics.device_map({nics.ENV_DEVICE_MAP: str(path)})
    assert why in str(info.value)


class OneRankComm:
    """Enough of an mpi4py communicator for local_identity in one process."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Split_type(self, *_a, **_k):
        return SimpleNamespace(Get_rank=lambda: 0, Free=lambda: None)


def test_local_identity_takes_the_nic_from_the_map(tmp_path):
    path = tmp_path / "map.json"
    path.write_text(json.dumps(MAP))
    env = {"ACCEPTANCE_VIRTUAL_NODES": "2", "ACCEPTANCE_RANKS_PER_NODE": "2", nics.ENV_DEVICE_MAP: str(path)}
    me = local_identity(OneRankComm(3, 4), {}, env)
    assert (me.node, me.local_rank, me.rail, me.nic) == ("node2", 1, 1, "rxe_n2r1")
    # A launcher's binding wins over the map.
    me = local_identity(OneRankComm(3, 4), {}, {**env, "ACCEPTANCE_NIC": "mlx5_7"})
    assert me.nic == "mlx5_7"
    (tmp_path / "map.json").write_text("[]")
    with pytest.raises(TopologyError, match="ACCEPTANCE_DEVICE_MAP="):
        local_identity(OneRankComm(3, 4), {}, env)
