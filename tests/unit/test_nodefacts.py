"""nodefacts: sysfs facts on trees shaped like a real node's (tests/fakesysfs.py), and parsers
for real `nvidia-smi topo -m` and `ibv_devinfo` output."""
import pickle
import platform
import sys
import types
from pathlib import Path

import pytest

from acceptance.host import nodefacts as nf
from acceptance.checks import ports as port_checks  # noqa: E402
from acceptance.host.nodefacts import (
    Affinity,
    Unavailable,
    collect,
    common_link_layer,
    driver_of,
    fabric_versions,
    far_pairs,
    gpu_count,
    gpudirect_path,
    hugepages_bytes,
    parse_ibv_devinfo,
    parse_mtu,
    parse_rate,
    parse_topo,
    peermem,
    port_is_up,
    rdma_core_version,
    rdma_devices,
    read_ports,
)
from acceptance.host.sysfs import sysfs_root
from acceptance.host.preflight import odd_ones_out

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs

# `nvidia-smi topo -m` of an 8-GPU HGX H100 node with 12 mlx5 ports (8 compute NICs, one per
# GPU pair switch, and two dual-port storage cards), as a newer driver prints it: tab-separated,
# NICs named NIC<k> and resolved in the "NIC Legend", a "GPU NUMA ID" column, and the empty
# field drivers print between NUMA Affinity and GPU NUMA ID (shape: NVIDIA/nccl#1453,
# sgl-project/sglang#14092). The tabs are real tab characters.
TOPO_NEW = """\
	GPU0	GPU1	GPU2	GPU3	GPU4	GPU5	GPU6	GPU7	NIC0	NIC1	NIC2	NIC3	NIC4	NIC5	NIC6	NIC7	NIC8	NIC9	NIC10	NIC11	CPU Affinity	NUMA Affinity	GPU NUMA ID
GPU0	 X 	NV18	NV18	NV18	NV18	NV18	NV18	NV18	PIX	PXB	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS	0-55,112-167	0		N/A
GPU1	NV18	 X 	NV18	NV18	NV18	NV18	NV18	NV18	PXB	PIX	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS	0-55,112-167	0		N/A
GPU2	NV18	NV18	 X 	NV18	NV18	NV18	NV18	NV18	NODE	NODE	PIX	PXB	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS	0-55,112-167	0		N/A
GPU3	NV18	NV18	NV18	 X 	NV18	NV18	NV18	NV18	NODE	NODE	PXB	PIX	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS	0-55,112-167	0		N/A
GPU4	NV18	NV18	NV18	NV18	 X 	NV18	NV18	NV18	SYS	SYS	SYS	SYS	SYS	SYS	PIX	PXB	NODE	NODE	NODE	NODE	56-111,168-223	1		N/A
GPU5	NV18	NV18	NV18	NV18	NV18	 X 	NV18	NV18	SYS	SYS	SYS	SYS	SYS	SYS	PXB	PIX	NODE	NODE	NODE	NODE	56-111,168-223	1		N/A
GPU6	NV18	NV18	NV18	NV18	NV18	NV18	 X 	NV18	SYS	SYS	SYS	SYS	SYS	SYS	NODE	NODE	PIX	PXB	NODE	NODE	56-111,168-223	1		N/A
GPU7	NV18	NV18	NV18	NV18	NV18	NV18	NV18	 X 	SYS	SYS	SYS	SYS	SYS	SYS	NODE	NODE	PXB	PIX	NODE	NODE	56-111,168-223	1		N/A
NIC0	PIX	PXB	NODE	NODE	SYS	SYS	SYS	SYS	 X 	PXB	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS
NIC1	PXB	PIX	NODE	NODE	SYS	SYS	SYS	SYS	PXB	 X 	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS
NIC2	NODE	NODE	PIX	PXB	SYS	SYS	SYS	SYS	NODE	NODE	 X 	PXB	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS
NIC3	NODE	NODE	PXB	PIX	SYS	SYS	SYS	SYS	NODE	NODE	PXB	 X 	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS
NIC4	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	 X 	PIX	SYS	SYS	SYS	SYS	SYS	SYS
NIC5	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	PIX	 X 	SYS	SYS	SYS	SYS	SYS	SYS
NIC6	SYS	SYS	SYS	SYS	PIX	PXB	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS	 X 	PXB	NODE	NODE	NODE	NODE
NIC7	SYS	SYS	SYS	SYS	PXB	PIX	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS	PXB	 X 	NODE	NODE	NODE	NODE
NIC8	SYS	SYS	SYS	SYS	NODE	NODE	PIX	PXB	SYS	SYS	SYS	SYS	SYS	SYS	NODE	NODE	 X 	PXB	NODE	NODE
NIC9	SYS	SYS	SYS	SYS	NODE	NODE	PXB	PIX	SYS	SYS	SYS	SYS	SYS	SYS	NODE	NODE	PXB	 X 	NODE	NODE
NIC10	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	 X 	PIX
NIC11	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	SYS	SYS	SYS	SYS	SYS	SYS	NODE	NODE	NODE	NODE	PIX	 X 

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
  NIC2: mlx5_2
  NIC3: mlx5_3
  NIC4: mlx5_4
  NIC5: mlx5_5
  NIC6: mlx5_6
  NIC7: mlx5_7
  NIC8: mlx5_8
  NIC9: mlx5_9
  NIC10: mlx5_10
  NIC11: mlx5_11
"""

# The same node as an older driver prints it (shape: NVIDIA/nccl#707, NVIDIA/nccl-tests#78): NICs
# named mlx5_<k> in the header, no "GPU NUMA ID", no NIC Legend; pasted from a terminal, so the
# tabs are expanded to spaces (one space only between "mlx5_10 mlx5_11").
TOPO_OLD = """\
        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    mlx5_0  mlx5_1  mlx5_2  mlx5_3  mlx5_4  mlx5_5  mlx5_6  mlx5_7  mlx5_8  mlx5_9  mlx5_10 mlx5_11 CPU Affinity    NUMA Affinity
GPU0     X      NV18    NV18    NV18    NV18    NV18    NV18    NV18    PIX     PXB     NODE    NODE    NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS     0-55,112-167    0
GPU1    NV18     X      NV18    NV18    NV18    NV18    NV18    NV18    PXB     PIX     NODE    NODE    NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS     0-55,112-167    0
GPU2    NV18    NV18     X      NV18    NV18    NV18    NV18    NV18    NODE    NODE    PIX     PXB     NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS     0-55,112-167    0
GPU3    NV18    NV18    NV18     X      NV18    NV18    NV18    NV18    NODE    NODE    PXB     PIX     NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS     0-55,112-167    0
GPU4    NV18    NV18    NV18    NV18     X      NV18    NV18    NV18    SYS     SYS     SYS     SYS     SYS     SYS     PIX     PXB     NODE    NODE    NODE    NODE    56-111,168-223  1
GPU5    NV18    NV18    NV18    NV18    NV18     X      NV18    NV18    SYS     SYS     SYS     SYS     SYS     SYS     PXB     PIX     NODE    NODE    NODE    NODE    56-111,168-223  1
GPU6    NV18    NV18    NV18    NV18    NV18    NV18     X      NV18    SYS     SYS     SYS     SYS     SYS     SYS     NODE    NODE    PIX     PXB     NODE    NODE    56-111,168-223  1
GPU7    NV18    NV18    NV18    NV18    NV18    NV18    NV18     X      SYS     SYS     SYS     SYS     SYS     SYS     NODE    NODE    PXB     PIX     NODE    NODE    56-111,168-223  1
mlx5_0  PIX     PXB     NODE    NODE    SYS     SYS     SYS     SYS      X      PXB     NODE    NODE    NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS
mlx5_1  PXB     PIX     NODE    NODE    SYS     SYS     SYS     SYS     PXB      X      NODE    NODE    NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS
mlx5_2  NODE    NODE    PIX     PXB     SYS     SYS     SYS     SYS     NODE    NODE     X      PXB     NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS
mlx5_3  NODE    NODE    PXB     PIX     SYS     SYS     SYS     SYS     NODE    NODE    PXB      X      NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS
mlx5_4  NODE    NODE    NODE    NODE    SYS     SYS     SYS     SYS     NODE    NODE    NODE    NODE     X      PIX     SYS     SYS     SYS     SYS     SYS     SYS
mlx5_5  NODE    NODE    NODE    NODE    SYS     SYS     SYS     SYS     NODE    NODE    NODE    NODE    PIX      X      SYS     SYS     SYS     SYS     SYS     SYS
mlx5_6  SYS     SYS     SYS     SYS     PIX     PXB     NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS      X      PXB     NODE    NODE    NODE    NODE
mlx5_7  SYS     SYS     SYS     SYS     PXB     PIX     NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS     PXB      X      NODE    NODE    NODE    NODE
mlx5_8  SYS     SYS     SYS     SYS     NODE    NODE    PIX     PXB     SYS     SYS     SYS     SYS     SYS     SYS     NODE    NODE     X      PXB     NODE    NODE
mlx5_9  SYS     SYS     SYS     SYS     NODE    NODE    PXB     PIX     SYS     SYS     SYS     SYS     SYS     SYS     NODE    NODE    PXB      X      NODE    NODE
mlx5_10 SYS     SYS     SYS     SYS     NODE    NODE    NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS     NODE    NODE    NODE    NODE     X      PIX
mlx5_11 SYS     SYS     SYS     SYS     NODE    NODE    NODE    NODE    SYS     SYS     SYS     SYS     SYS     SYS     NODE    NODE    NODE    NODE    PIX      X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

# `ibv_devinfo` on a node with one NDR InfiniBand HCA and one RoCE port whose netdev has a
# 1500-byte MTU (rdma-core's ibv_devinfo: tab-indented "key:<tabs>value", ports nested).
IBV_DEVINFO = """\
hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tnode_guid:\t\t\ta088:c203:0045:6e2c
\tsys_image_guid:\t\t\ta088:c203:0045:6e2c
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4129
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000838
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t4096 (5)
\t\t\tsm_lid:\t\t\t1
\t\t\tport_lid:\t\t27
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_1
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tnode_guid:\t\t\ta088:c203:0045:6e2d
\tsys_image_guid:\t\t\ta088:c203:0045:6e2d
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4129
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000838
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t2048 (4)
\t\t\tsm_lid:\t\t\t1
\t\t\tport_lid:\t\t28
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_2
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tnode_guid:\t\t\t5c25:7303:00f2:41a8
\tsys_image_guid:\t\t\t5c25:7303:00f2:41a8
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4129
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000838
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t1024 (3)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t0
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tEthernet

"""

DGX_NICS = [f"mlx5_{i}" for i in range(12)]
COMPUTE = {0: "mlx5_0", 1: "mlx5_1", 2: "mlx5_2", 3: "mlx5_3", 4: "mlx5_6", 5: "mlx5_7", 6: "mlx5_8", 7: "mlx5_9"}


def script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


# --- sysfs root -----------------------------------------------------------------------------

def test_sysfs_root_default_and_node_placeholder(monkeypatch):
    monkeypatch.delenv("ACCEPTANCE_SYSFS_ROOT", raising=False)
    assert sysfs_root() == Path("/sys") and sysfs_root("node1") == Path("/sys")
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", "/tmp/fake/{node}")
    assert sysfs_root("node2") == Path("/tmp/fake/node2")
    assert sysfs_root() == Path("/tmp/fake/{node}")  # no node: nothing to substitute


# --- ports ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, gbps", [
    ("400 Gb/sec (4X NDR)", 400.0), ("200 Gb/sec (4X HDR)", 200.0), ("100 Gb/sec (2X EDR)", 100.0),
    ("25 Gb/sec (1X EDR)", 25.0), ("2.5 Gb/sec (1X SDR)", 2.5), ("800 Gb/sec (4X XDR)\n", 800.0),
    ("", None), ("Invalid argument", None), (None, None),
])
def test_parse_rate(text, gbps):
    assert parse_rate(text) == gbps


@pytest.mark.parametrize("state, phys, up", [
    ("4: ACTIVE", "5: LinkUp", True), ("1: DOWN", "3: Disabled", False), ("2: INIT", "5: LinkUp", False),
    ("4: ACTIVE", "6: LinkErrorRecovery", False), ("ACTIVE", "LinkUp", True), ("", "", False),
])
def test_port_is_up(state, phys, up):
    assert port_is_up(state, phys) is up


def test_devices_in_natural_order_and_ports_read_like_the_kernel_prints_them(tmp_path):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=12, gpus=0)
    assert rdma_devices(root) == DGX_NICS
    ports = read_ports(root, devinfo=parse_ibv_devinfo(IBV_DEVINFO))
    assert [p.label for p in ports] == [f"{d} port 1" for d in DGX_NICS]
    p0 = ports[0]
    assert (p0.state, p0.phys_state, p0.rate, p0.gbps, p0.link_layer, p0.netdev, p0.up) == (
        "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", 400.0, "InfiniBand", "ibp24s0", True)
    # InfiniBand MTU: ibv_devinfo's active_mtu; a device it does not list is unknown, with the reason.
    assert (ports[0].mtu, ports[1].mtu) == (4096, 2048)
    assert ports[5].mtu is None
    assert ports[5].mtu_reason == "InfiniBand MTU unknown: no active_mtu for mlx5_5 port 1 in ibv_devinfo's output"


def test_ports_down_names_state_and_physical_state(tmp_path):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=4, gpus=0)
    fakesysfs.set_port(root, "mlx5_3", 1, state="1: DOWN", phys_state="3: Disabled")
    fakesysfs.set_port(root, "mlx5_1", 1, phys_state="6: LinkErrorRecovery")
    ports = read_ports(root, devinfo=Unavailable("not needed here"))
    assert [(p.label, j.detail) for p in ports for j in [port_checks.down(p)] if j] == [
        ("mlx5_1 port 1", "4: ACTIVE / 6: LinkErrorRecovery"), ("mlx5_3 port 1", "1: DOWN / 3: Disabled")]


def test_roce_mtu_is_the_netdev_mtu(tmp_path):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=0, link_layer="Ethernet", netdev_mtu=9000)
    ports = read_ports(root)  # no ibv_devinfo needed, none run
    assert [(p.netdev, p.mtu, p.link_layer) for p in ports] == [
        ("ens0f0np0", 9000, "Ethernet"), ("ens1f0np0", 9000, "Ethernet")]
    ((root / "bus" / "pci" / "devices" / "0000:28:00.0").resolve() / "net" / "ens1f0np0" / "mtu").unlink()
    p1 = read_ports(root)[1]
    assert p1.mtu is None and p1.mtu_reason.startswith("Ethernet MTU unknown: no ")


def test_infiniband_mtu_runs_ibv_devinfo_or_says_why_not(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=0)
    (tmp_path / "devinfo.txt").write_text(IBV_DEVINFO)
    tool = script(tmp_path, "ibv_devinfo", f"cat {tmp_path / 'devinfo.txt'}")
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(tool))
    assert [p.mtu for p in read_ports(root)] == [4096, 2048]
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(tmp_path / "missing" / "ibv_devinfo"))
    p = read_ports(root)[0]
    assert p.mtu is None
    assert p.mtu_reason == (f"InfiniBand MTU unknown: {tmp_path / 'missing' / 'ibv_devinfo'} "
                            f"($ACCEPTANCE_IBV_DEVINFO) not found on PATH")
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(script(tmp_path, "broken", "echo 'Failed to get IB devices list' >&2; exit 1")))
    assert "exited 1: Failed to get IB devices list" in read_ports(root)[0].mtu_reason


def test_parse_ibv_devinfo():
    info = parse_ibv_devinfo(IBV_DEVINFO)
    assert list(info) == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert info["mlx5_0"]["fw_ver"] == "28.39.1002" and info["mlx5_0"]["transport"] == "InfiniBand (0)"
    assert info["mlx5_0"]["node_guid"] == "a088:c203:0045:6e2c"
    port = info["mlx5_0"]["ports"][1]
    assert port == {"state": "PORT_ACTIVE (4)", "max_mtu": "4096 (5)", "active_mtu": "4096 (5)", "sm_lid": "1",
                    "port_lid": "27", "port_lmc": "0x00", "link_layer": "InfiniBand"}
    assert [parse_mtu(info[d]["ports"][1]["active_mtu"]) for d in info] == [4096, 2048, 1024]
    assert info["mlx5_2"]["ports"][1]["link_layer"] == "Ethernet"
    assert parse_ibv_devinfo("No IB devices found\n") == {}
    assert parse_mtu("") is None


def test_no_infiniband_class_is_unavailable_with_the_path(tmp_path):
    with pytest.raises(Unavailable) as e:
        rdma_devices(tmp_path)
    assert str(e.value) == f"unavailable: no {tmp_path / 'class' / 'infiniband'} (no RDMA device, or its driver is not loaded)"
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    assert rdma_devices(tmp_path) == []
    with pytest.raises(Unavailable, match="no RDMA device in"):
        read_ports(tmp_path)


def test_link_layers(tmp_path):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=3, gpus=0)
    fakesysfs.set_port(root, "mlx5_2", 1, link_layer="Ethernet")
    ports = read_ports(root, devinfo=Unavailable("not needed here"))
    assert common_link_layer(ports) == "InfiniBand"
    assert [(p.label, j.detail) for p in ports for j in [port_checks.wrong_layer(p, "InfiniBand")] if j] == [
        ("mlx5_2 port 1", "link layer Ethernet, the profile expects InfiniBand")]
    assert common_link_layer([]) is None


# --- versions ------------------------------------------------------------------------------

def test_rdma_core_version_from_the_libibverbs_file_name(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    assert rdma_core_version([lib, tmp_path / "absent"]) == "not installed"
    (lib / "libibverbs.so.1.14.50.0").touch()
    (lib / "libibverbs.so.1").symlink_to("libibverbs.so.1.14.50.0")
    (lib / "libibverbs.so").symlink_to("libibverbs.so.1")
    assert rdma_core_version([lib]) == "50.0"
    other = tmp_path / "lib64"
    other.mkdir()
    (other / "libibverbs.so.1.11.32.0").touch()
    assert rdma_core_version([other, lib]) == "50.0"  # the newest found


def test_driver_version_or_in_tree(tmp_path):
    mofed = fakesysfs.ib_device(tmp_path / "a", "mlx5_0", driver_version="24.04-0.6.6")
    assert driver_of(mofed, "mlx5_0") == "mlx5_core 24.04-0.6.6"
    inbox = fakesysfs.ib_device(tmp_path / "b", "mlx5_0")
    assert driver_of(inbox, "mlx5_0") == f"mlx5_core in-tree (kernel {platform.release()})"


def test_versions_name_the_odd_node_out(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libibverbs.so.1.14.50.0").touch()
    versions = {}
    for node in ("node1", "node2", "node3"):
        root = fakesysfs.dgx_node(tmp_path / node, nics=2, gpus=0, driver_version="24.04-0.6.6")
        if node == "node2":
            fakesysfs.ib_device(root, "mlx5_1", bdf="0000:28:00.0", fw_ver="28.40.1000", driver_version="24.04-0.6.6")
        versions[node] = fabric_versions(root, lib_dirs=[lib])
    assert versions["node1"] == {"kernel": platform.release(), "rdma-core": "50.0", "firmware": "28.39.1002",
                                 "driver": "mlx5_core 24.04-0.6.6"}
    assert odd_ones_out(versions) == [
        "node2: firmware '28.39.1002; mlx5_1 at 28.40.1000' differs from '28.39.1002' on 2 of 3 nodes"]


# --- memory and GPUs -------------------------------------------------------------------------

def test_hugepages_sum_every_size(tmp_path):
    fakesysfs.hugepages(tmp_path, 2048, 512)
    fakesysfs.hugepages(tmp_path, 1048576, 2)
    assert hugepages_bytes(tmp_path) == 512 * 2 * 2**20 + 2 * 2**30
    with pytest.raises(Unavailable, match="kernel without huge page support"):
        hugepages_bytes(tmp_path / "nothing")


def test_gpu_count_counts_nvidia_display_and_3d_controllers_only(tmp_path):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=8)
    assert gpu_count(root) == 8
    # An NVSwitch (NVIDIA bridge, class 0x068000) and a VGA-class NVIDIA GPU.
    bridge = root / "bus" / "pci" / "devices" / "0000:e0:00.0"
    bridge.mkdir(parents=True)
    (bridge / "vendor").write_text("0x10de\n")
    (bridge / "class").write_text("0x068000\n")
    vga = root / "bus" / "pci" / "devices" / "0000:e1:00.0"
    vga.mkdir()
    (vga / "vendor").write_text("0x10de\n")
    (vga / "class").write_text("0x030000\n")
    assert gpu_count(root) == 9
    with pytest.raises(Unavailable, match="bus/pci/devices"):
        gpu_count(tmp_path / "nothing")


# --- nvidia-smi topo -m ----------------------------------------------------------------------

def test_both_driver_generations_parse_to_the_same_table():
    assert "\t" in TOPO_NEW and "\t" not in TOPO_OLD  # one sample per splitting rule
    new, old = parse_topo(TOPO_NEW), parse_topo(TOPO_OLD)
    assert new == old
    assert sorted(new.nics) == list(range(8))
    assert all(list(row) == DGX_NICS for row in new.nics.values())
    assert new.nics[0]["mlx5_0"] == "PIX" and new.nics[0]["mlx5_1"] == "PXB" and new.nics[0]["mlx5_4"] == "NODE"
    assert new.nics[0]["mlx5_6"] == "SYS" and new.nics[7]["mlx5_9"] == "PIX" and new.nics[7]["mlx5_11"] == "NODE"
    assert new.cpus == {g: "0-55,112-167" if g < 4 else "56-111,168-223" for g in range(8)}
    assert new.numa == {g: "0" if g < 4 else "1" for g in range(8)}
    assert new.nearest(5) == ("mlx5_7", "PIX")


def test_topo_without_nics_and_unparsable_output():
    two = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tPHB\t0-63\t0\t\tN/A\nGPU1\tPHB\t X \t0-63\t0\t\tN/A\n"
    assert parse_topo(two) == Affinity(nics={0: {}, 1: {}}, cpus={0: "0-63", 1: "0-63"}, numa={0: "0", 1: "0"})
    with pytest.raises(ValueError, match="no matrix header"):
        parse_topo("No devices were found\n")


def test_far_pairs_readable_per_rail():
    aff = parse_topo(TOPO_NEW)
    assert far_pairs(aff, COMPUTE) == []
    assert far_pairs(aff, COMPUTE, "PIX") == []
    # Rails mapped by natural order over the 12 ports put the storage NICs on rails 4 and 5.
    naive = {i: f"mlx5_{i}" for i in range(8)}
    assert far_pairs(aff, naive) == [
        "rail 4: GPU4 <-> mlx5_4 is SYS, expected PXB or closer; the nearest NIC of GPU4 is mlx5_6 (PIX)",
        "rail 5: GPU5 <-> mlx5_5 is SYS, expected PXB or closer; the nearest NIC of GPU5 is mlx5_7 (PIX)",
        "rail 6: GPU6 <-> mlx5_6 is NODE, expected PXB or closer; the nearest NIC of GPU6 is mlx5_8 (PIX)",
        "rail 7: GPU7 <-> mlx5_7 is NODE, expected PXB or closer; the nearest NIC of GPU7 is mlx5_9 (PIX)",
    ]
    assert far_pairs(aff, naive, "SYS") == []
    assert far_pairs(aff, {0: "mlx5_1"}, "PIX") == [
        "rail 0: GPU0 <-> mlx5_1 is PXB, expected PIX or closer; the nearest NIC of GPU0 is mlx5_0 (PIX)"]
    assert far_pairs(aff, {8: "mlx5_0", 1: "mlx5_12"}) == [
        "rail 1: mlx5_12 is not in nvidia-smi topo -m (NICs: " + ", ".join(DGX_NICS) + ")",
        "rail 8: no GPU8 in nvidia-smi topo -m (GPUs: GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7)"]
    with pytest.raises(ValueError, match="one of PIX, PXB, PHB, NODE, SYS"):
        far_pairs(aff, COMPUTE, "NEAR")


def test_topo_text_runs_nvidia_smi_or_says_why_not(tmp_path, monkeypatch):
    (tmp_path / "topo.txt").write_text(TOPO_NEW)
    smi = script(tmp_path, "nvidia-smi", f'[ "$1 $2" = "topo -m" ] || exit 9\ncat {tmp_path / "topo.txt"}')
    monkeypatch.setenv("ACCEPTANCE_NVIDIA_SMI", str(smi))
    assert nf.topo_text() == TOPO_NEW
    assert nf.topology_affinity() == parse_topo(TOPO_OLD)
    monkeypatch.setenv("ACCEPTANCE_NVIDIA_SMI", str(script(tmp_path, "smi2", "echo 'NVIDIA-SMI has failed' ; exit 9")))
    with pytest.raises(Unavailable, match="exited 9"):
        nf.topo_text()
    monkeypatch.setenv("ACCEPTANCE_NVIDIA_SMI", "no-such-nvidia-smi")
    with pytest.raises(Unavailable, match="no-such-nvidia-smi .*not found on PATH"):
        nf.topo_text()


# --- GPUDirect RDMA ---------------------------------------------------------------------------

def test_peermem_detection(tmp_path):
    assert peermem(tmp_path) is None
    fakesysfs.module(tmp_path / "a", "nvidia_peermem", "550.54.15")
    assert peermem(tmp_path / "a") == "nvidia_peermem 550.54.15"
    fakesysfs.module(tmp_path / "b", "nvidia_peermem", None)
    assert peermem(tmp_path / "b") == "nvidia_peermem (no version)"
    old = tmp_path / "c" / "kernel" / "mm" / "memory_peers" / "nv_mem" / "version"
    old.parent.mkdir(parents=True)
    old.write_text("1.3\n")
    assert peermem(tmp_path / "c") == "nv_peer_mem 1.3"


def test_dmabuf_through_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(Unavailable, match="cupy not importable .*acceptance\\[gpu\\]"):
        nf.dmabuf_supported()
    asked = []

    def attribute(attr, device):
        asked.append((attr, device))
        return 1

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 8),
        driver=types.SimpleNamespace(deviceGetAttribute=attribute)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert nf.dmabuf_supported() is True
    assert asked == [(124, 0)]  # CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, cuda.h
    fake.cuda.runtime.getDeviceCount = lambda: 0
    with pytest.raises(Unavailable, match="no CUDA device 0 visible"):
        nf.dmabuf_supported()


def test_gpudirect_path():
    assert gpudirect_path("nvidia_peermem 550.54.15", Unavailable("x")) == (True, "nvidia_peermem 550.54.15 loaded")
    assert gpudirect_path(None, True)[0] is True
    ok, how = gpudirect_path(None, False)
    assert not ok and "dma-buf is unsupported" in how
    ok, how = gpudirect_path(None, Unavailable("cupy not importable"))
    assert not ok and how == "nvidia_peermem not loaded, and dma-buf support is unknown: cupy not importable"


# --- everything at once -------------------------------------------------------------------------

def test_collect_a_dgx_node(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=8, gpus=8)
    fakesysfs.hugepages(root, 2048, 1024)
    fakesysfs.module(root, "nvidia_peermem", "550.54.15")
    (tmp_path / "topo.txt").write_text(TOPO_OLD)
    monkeypatch.setenv("ACCEPTANCE_NVIDIA_SMI", str(script(tmp_path, "nvidia-smi", f"cat {tmp_path / 'topo.txt'}")))
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(tmp_path / "absent"))
    facts = collect(root)
    assert facts.devices == [f"mlx5_{i}" for i in range(8)]
    assert len(facts.ports) == 8 and all(p.up and p.gbps == 400.0 for p in facts.ports)
    assert all(p.mtu is None and "$ACCEPTANCE_IBV_DEVINFO) not found" in p.mtu_reason for p in facts.ports)
    assert facts.hugepages == 2 * 2**30 and facts.gpus == 8
    assert facts.topo == parse_topo(TOPO_NEW)
    assert facts.peermem == "nvidia_peermem 550.54.15"
    assert isinstance(facts.dmabuf, Unavailable) and "peer-memory module is loaded" in facts.dmabuf.reason


def test_collect_never_raises_on_an_empty_root(tmp_path):
    facts = collect(tmp_path / "nothing")
    for name in ("devices", "ports", "hugepages", "gpus", "topo", "dmabuf"):
        assert isinstance(getattr(facts, name), Unavailable), name
    assert facts.peermem is None
    assert set(facts.versions) == {"kernel", "rdma-core"}  # no devices: no firmware, no driver
    # Gathered over MPI: it must survive pickling, reasons and all.
    again = pickle.loads(pickle.dumps(facts))
    assert str(again.devices) == str(facts.devices) and again.devices.reason == facts.devices.reason


def test_rxe_facts_as_the_preflight_reads_them(tmp_path):
    """A Soft-RoCE node: Ethernet ports at 10 Gb/sec with the netdev's MTU, an empty firmware
    version, no PCI driver; virtual nodes sharing the host keep to their own devices (only=)."""
    for node in (1, 2):
        fakesysfs.rxe_device(tmp_path, f"rxe_n{node}r0", netdev=f"n{node}r0", address=f"198.18.1.{node}")
    facts = nf.collect(tmp_path, only=["rxe_n2r0"])
    assert facts.devices == ["rxe_n2r0"]
    (port,) = facts.ports
    assert (port.label, port.link_layer, port.gbps, port.mtu, port.netdev, port.up) == (
        "rxe_n2r0 port 1", "Ethernet", 10.0, 1500, "n2r0", True)
    assert facts.versions["firmware"] == "unknown" and facts.versions["driver"] == "unknown driver"
    assert len(nf.collect(tmp_path).devices) == 2


def test_ibv_devinfo_of_an_rxe_device():
    """`ibv_devinfo -d rxe_n1r0` as Debian's rdma-core 44 prints it in the Soft-RoCE guest."""
    text = (Path(__file__).resolve().parents[1] / "data" / "rxe" / "ibv_devinfo.txt").read_text()
    info = nf.parse_ibv_devinfo(text)["rxe_n1r0"]
    assert info["fw_ver"] == "0.0.0" and info["vendor_id"] == "0xffffff"
    port = info["ports"][1]
    assert (port["state"], port["link_layer"], nf.parse_mtu(port["active_mtu"]), nf.parse_mtu(port["max_mtu"])) == (
        "PORT_ACTIVE (4)", "Ethernet", 1024, 4096)
