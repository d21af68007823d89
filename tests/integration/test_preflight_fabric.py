"""The fabric preflight (suites/test_preflight.py) on real `mpiexec -n 4` runs: 2 emulated nodes of
2 ranks, each node reading its own sysfs tree (tests/fakesysfs.py) through
ACCEPTANCE_SYSFS_ROOT=<tmp>/sys/{node}, with ibv_devinfo and nvidia-smi stood in for by scripts."""
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs

SUITE = Path(__file__).resolve().parents[2] / "suites" / "test_preflight.py"

# What every check asks of a 2-NIC, 2-GPU node (memlock and the rest as the built-in local profile).
PROFILE = """\
extends = "local"
[preflight]
rdma_devices = 2
port_rate = "400Gbit/s"
mtu = 4096
link_layer = "InfiniBand"
hugepages_min = "1GiB"
gpus_per_node = 2
gpu_nic_max_distance = "PXB"
gpudirect = true
"""

IBV_DEVINFO = "".join(
    f"hca_id:\tmlx5_{i}\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n"
    f"\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
    f"\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tactive_mtu:\t\t4096 (5)\n\t\t\tlink_layer:\t\tInfiniBand\n\n"
    for i in range(2))

TOPO = (
    "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tPIX\tSYS\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\tPIX\t32-63\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tPIX\tSYS\t X \n"
    "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect\n"
    "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n\n")


def tool(directory: Path, name: str, output: str) -> Path:
    saved = directory / f"{name}.out"
    saved.write_text(output)
    path = directory / name
    path.write_text(f'#!/bin/sh\ncat "{saved}"\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def cluster(tmp_path):
    """Two healthy nodes' trees; returns (env for the run, profile path, node -> sysfs root)."""
    roots = {}
    for node in ("node1", "node2"):
        root = fakesysfs.dgx_node(tmp_path / "sys" / node, nics=2, gpus=2)
        fakesysfs.hugepages(root, 2048, 1024)
        fakesysfs.module(root, "nvidia_peermem", "550.54.15")
        roots[node] = root
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"ACCEPTANCE_SYSFS_ROOT": str(tmp_path / "sys" / "{node}"),
           "ACCEPTANCE_IBV_DEVINFO": str(tool(bin_dir, "ibv_devinfo", IBV_DEVINFO)),
           "ACCEPTANCE_NVIDIA_SMI": str(tool(bin_dir, "nvidia-smi", TOPO))}
    profile = tmp_path / "fabric.toml"
    profile.write_text(PROFILE)
    return env, profile, roots


def records(run) -> list[dict]:
    return [json.loads(line) for line in (run.folder / "results.jsonl").read_text().splitlines()]


def test_healthy_fabric_passes_every_check(mpi_pytest, cluster):
    env, profile, _ = cluster
    run = mpi_pytest(str(SUITE), "-m", "preflight", "-rs", "--profile", str(profile), env=env)
    assert run.rc == 0, run.out
    assert re.search(r"\b14 passed, 1 skipped\b", run.out), run.out
    assert re.search(r"SKIPPED .*RoCE QoS unavailable on every node: no RoCE port", run.out), run.out  # InfiniBand
    recs = [r for r in records(run) if r["suite"] == "preflight"]
    by = {}
    for r in recs:
        by.setdefault(r["metric"], []).append(r)
    rates = by["port_rate"]
    assert sorted((r["nodes"][0], r["rail"], r["value"], r["detail"]) for r in rates) == [
        (node, rail, 400.0, f"mlx5_{rail} port 1: 400 Gb/sec (4X NDR)") for node in ("node1", "node2") for rail in (0, 1)]
    assert all(r["threshold"] == 400.0 and r["verdict"] == "pass" for r in rates)
    assert {r["value"] for r in by["port_mtu"]} == {4096} and len(by["port_mtu"]) == 4
    for metric, value in (("rdma_devices", 2), ("ports_down", 0), ("link_layer_mismatches", 0),
                          ("hugepages", 2 * 2**30), ("gpus", 2), ("gpu_nic_far", 0), ("gpudirect_missing", 0),
                          ("pcie_trained_down", 0)):  # the GPUs idle at 2.5 GT/s: their speed is not judged
        assert [(r["nodes"], r["ranks"], r["value"], r["verdict"]) for r in by[metric]] == [
            (["node1"], [0, 1], value, "pass"), (["node2"], [2, 3], value, "pass")], metric
    (versions,) = by["fabric_version_mismatches"]
    assert versions["value"] == 0 and versions["nodes"] == ["node1", "node2"]
    assert "firmware 28.39.1002" in versions["detail"]


def test_slow_port_and_odd_firmware_are_named(mpi_pytest, cluster, tmp_path):
    env, profile, roots = cluster
    fakesysfs.set_port(roots["node2"], "mlx5_1", 1, rate="200 Gb/sec (4X HDR)")
    (roots["node2"] / "class" / "infiniband" / "mlx5_0" / "fw_ver").write_text("28.40.1000\n")
    # node1's rail-1 NIC trained to x8 (a reseated card, a bent pin): half its bandwidth, named by preflight
    fakesysfs.pcie_link((roots["node1"] / "class" / "infiniband" / "mlx5_1" / "device").resolve(), width=8)
    # A storage NIC (100 GbE) beside the rail NICs: mapped out by nic_rails, so no port check holds it.
    for root in roots.values():
        fakesysfs.ib_device(root, "mlx5_2", bdf="0000:c1:00.0", link_layer="Ethernet",
                            rate="100 Gb/sec (4X EDR)", netdev="enp193s0f0np0", netdev_mtu=9000)
    mapped = tmp_path / "mapped.toml"
    mapped.write_text(f'extends = "{profile}"\n[topology]\nnic_rails = {{ mlx5_0 = 0, mlx5_1 = 1 }}\n'
                      '[preflight]\nrdma_devices = 3\n')
    run = mpi_pytest(str(SUITE), "-m", "preflight", "--profile", str(mapped), env=env)
    assert "mlx5_2" not in run.out.split("short test summary")[0].split("FAILURES")[-1], run.out
    assert run.rc == 1, run.out
    assert "node2 mlx5_1 port 1: rate 200 Gb/sec (4X HDR) is below the profile's 400 Gbit/s" in run.out
    assert "node2: firmware '28.39.1002; mlx5_0 at 28.40.1000' differs from '28.39.1002' on 1 of 2 nodes" in run.out
    assert re.search(r"FAILED .*test_port_rate", run.out) and re.search(r"FAILED .*test_fabric_versions_match", run.out)
    assert ("node1: NIC mlx5_1 (0000:28:00.0): PCIe link trained to x8 at 32 GT/s, can train to x16 at 32 GT/s "
            "(x8 of x16)") in run.out, run.out
    assert "3 failed, 11 passed" in run.out, run.out
    down = [r for r in records(run) if r["metric"] == "pcie_trained_down"]
    assert sorted((r["nodes"][0], r["value"], r["verdict"]) for r in down) == [("node1", 1, "fail"), ("node2", 0, "pass")]
    slow = [r for r in records(run) if r["metric"] == "port_rate" and r["verdict"] == "fail"]
    assert [(r["nodes"], r["rail"], r["value"], r["threshold"]) for r in slow] == [(["node2"], 1, 200.0, 400.0)]


def test_no_sysfs_tree_skips_every_fabric_check_under_local(mpi_pytest, tmp_path):
    """The local profile asks for no hardware: without a sysfs tree every fabric check skips, with the
    reason, on every rank."""
    absent = tmp_path / "absent"
    run = mpi_pytest(str(SUITE), "-m", "preflight", "-rs", "--profile", "local",
                     env={"ACCEPTANCE_SYSFS_ROOT": str(absent / "{node}")})
    assert run.rc == 0, run.out
    assert "inconsistent" not in run.out and "failed" not in run.out, run.out
    skipped = "\n".join(line for line in run.out.splitlines() if line.startswith("SKIPPED"))
    no_ib = (f"node1: no {absent}/node1/class/infiniband (no RDMA device, or its driver is not loaded); "
             f"node2: no {absent}/node2/class/infiniband")
    assert f"RDMA devices unavailable on every node: {no_ib}" in skipped
    assert f"RDMA ports unavailable on every node: {no_ib}" in skipped
    assert "GPU count unavailable on every node" in skipped or "no NVIDIA GPU on any node" in skipped
    assert not [r for r in records(run) if r["metric"] in ("rdma_devices", "port_rate", "ports_down")]


def test_a_required_fabric_without_its_data_fails_naming_the_nodes(mpi_pytest, cluster, tmp_path):
    """A profile that sets RDMA devices, port rate, MTU, link layer, GPUs and GPUDirect, on nodes whose
    sysfs shows none of it: each of those checks fails, naming both nodes, with a null failing record
    per node; nothing is skipped for want of hardware."""
    profile = cluster[1]
    absent = tmp_path / "absent"
    run = mpi_pytest(str(SUITE), "-m", "preflight", "-rfs", "--profile", str(profile),
                     env={"ACCEPTANCE_SYSFS_ROOT": str(absent / "{node}")})
    assert run.rc == 1, run.out
    for test in ("test_rdma_devices", "test_ports_up", "test_port_rate", "test_port_mtu", "test_link_layer",
                 "test_hugepages", "test_gpus", "test_gpudirect"):
        assert re.search(rf"FAILED \S*test_preflight.py::{test}\b", run.out), (test, run.out)
    assert "node1: RDMA ports unavailable: no" in run.out and "(the profile requires it: preflight.port_rate" in run.out
    recs = records(run)
    for metric in ("port_rate", "port_mtu"):
        got = [(r["nodes"], r["value"], r["verdict"]) for r in recs if r["metric"] == metric]
        assert got == [(["node1"], None, "fail"), (["node2"], None, "fail")], (metric, got)


def test_a_node_without_rdma_devices_is_a_finding_and_a_drain_line(mpi_pytest, cluster):
    """node2 lists no RDMA device: its failing preflight records stay failures through analysis,
    naming node2 in findings.json and drain.txt."""
    import shutil

    from acceptance.analysis import analyze, write_outputs
    env, profile, roots = cluster
    shutil.rmtree(roots["node2"] / "class" / "infiniband")
    run = mpi_pytest(str(SUITE), "-m", "preflight", "--profile", str(profile), env=env)
    assert run.rc == 1, run.out
    analysis = analyze(run.folder)
    write_outputs(run.folder, analysis)
    failing = [f for f in analysis.findings if f["severity"] == "fail"]
    assert not [f for f in failing if f["node"] == "node1"], failing
    assert {"rdma_devices", "ports_down", "port_rate"} <= {f["metric"] for f in failing if f["node"] == "node2"}
    assert analysis.verdict == "fail" and analysis.exit_code == 1
    assert (run.folder / "drain.txt").read_text().startswith("scontrol update NodeName=node2 State=DRAIN")


ROCE_PROFILE = """\
extends = "local"
[preflight]
link_layer = "Ethernet"
lossless = true
"""


@pytest.fixture
def roce(tmp_path):
    """Two RoCE nodes whose NICs are named apart (node1 mlx5_0-1, node2 mlx5_2-3, as rxe_n1r0 and
    rxe_n2r0 on the rig: compared rail by rail), netdevs too (ens<k>..), lossless on priority 3 (PFC,
    DSCP trust with DSCP 26 -> 3, ECN), read through a `dcb` stand-in and the ECN sysfs."""
    roots, ports = {}, {}
    for k, node in enumerate(("node1", "node2"), start=1):
        root = tmp_path / "sys" / node
        for i in range(2):
            netdev = f"ens{k}{i}f0np0"
            fakesysfs.ib_device(root, f"mlx5_{2 * (k - 1) + i}", bdf=f"0000:{0x18 + 0x10 * i:02x}:00.0", link_layer="Ethernet",
                                netdev=netdev, netdev_mtu=9000)
            fakesysfs.ecn(root, netdev)
            ports[netdev] = ((3,), {26: 3})
        roots[node] = root
    env = {"ACCEPTANCE_SYSFS_ROOT": str(tmp_path / "sys" / "{node}"), "NCCL_IB_TC": "106",
           "ACCEPTANCE_DCB": str(fakesysfs.dcb_standin(tmp_path / "bin", ports))}
    profile = tmp_path / "roce.toml"
    profile.write_text(ROCE_PROFILE)
    return env, profile, roots, ports, tmp_path


def test_roce_lossless_class_is_the_same_on_every_node_and_carries_the_traffic_class(mpi_pytest, roce):
    env, profile, roots, ports, tmp_path = roce
    run = mpi_pytest(str(SUITE), "-m", "preflight", "-k", "roce", "--profile", str(profile), env=env)
    assert run.rc == 0, run.out
    recs = [r for r in records(run) if r["metric"] == "roce_qos_problems"]
    assert [(r["nodes"], r["value"], r["verdict"]) for r in recs] == [(["node1"], 0, "pass"), (["node2"], 0, "pass")]
    # What was read, named in the record.
    assert "mlx5_0: PFC on 3; trust dscp; ECN notification on 3, reaction on 3 (read: " in recs[0]["detail"]
    assert "mlx5_2: PFC on 3" in recs[1]["detail"]
    assert "-j pfc show dev ens10f0np0" in recs[0]["detail"] and "ecn/roce_np/enable/{0..7}" in recs[0]["detail"]

    # node2's rail-1 port pauses priority 4 instead, and NCCL's class sits on 3: named twice, node2 only.
    ports["ens21f0np0"] = ((4,), {26: 3})
    fakesysfs.dcb_standin(tmp_path / "bin", ports)
    run = mpi_pytest(str(SUITE), "-m", "preflight", "-k", "roce", "--profile", str(profile), env=env)
    assert run.rc == 1, run.out
    assert ("node2: rail 1 'PFC on 4; trust dscp; ECN notification on 3, reaction on 3' differs from "
            "'PFC on 3; trust dscp; ECN notification on 3, reaction on 3' on 1 of 2 nodes") in run.out, run.out
    assert "node2: ens21f0np0: traffic class 106 (DSCP 26) maps to priority 3, which has no PFC (PFC on 4)" in run.out
    recs = [r for r in records(run) if r["metric"] == "roce_qos_problems"][-2:]  # the run folder is reused
    assert [(r["nodes"], r["value"], r["verdict"]) for r in recs] == [(["node1"], 0, "pass"), (["node2"], 2, "fail")]

    # Every node alike but training's class not lossless (NCCL_IB_TC 0: DSCP 0 -> priority 0).
    ports["ens21f0np0"] = ((3,), {26: 3})
    fakesysfs.dcb_standin(tmp_path / "bin", ports)
    run = mpi_pytest(str(SUITE), "-m", "preflight", "-k", "roce", "--profile", str(profile),
                     env={**env, "NCCL_IB_TC": "0"})
    assert run.rc == 1 and "node1: ens10f0np0: traffic class 0 (DSCP 0) maps to priority 0, which has no PFC" in run.out
