"""Which ports are rails, and a check that cannot run: `acceptance node-check` on sysfs trees shaped after
real nodes' ibstat / ibstatus output (our own values, fewer devices where it changes nothing):

- an Azure A100 node, `ibstatus`: eight 200 Gb/sec (4X HDR) InfiniBand ports and mlx5_8, the VM's
  40 GbE accelerated-networking function (leptonai/gpud @ 8763bf2090748091dd99ded02027938e5104b274,
  pkg/nvidia-query/infiniband/testdata/ibstatus.39.0.a100.all.active.0);
- an H100 RoCE node, `ibstat`: eight ConnectX-7 (CA type MT4129) at 400 and four ConnectX-6 Dx (MT4125) at
  100, all Ethernet (gpud @ 8602ad1efc74e9ef147e82eaafb5b12e21362329, .../ibstat.47.0.h100.all.active.0);
- an H100 InfiniBand node, `ibstat`: eight ConnectX-7 InfiniBand ports at 400 and ConnectX-6 Dx Ethernet
  ports, three of them Down / Disabled (same commit, .../ibstat.47.0.h100.some.down.0);
- `ibv_devinfo`'s block per device as it prints it (deepseek-ai/DeepEP issue 38).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs  # noqa: E402

from acceptance.checks import rails  # noqa: E402
from acceptance.cli import main  # noqa: E402
from acceptance.host.nodefacts import Unavailable, read_ports  # noqa: E402
from acceptance.rules.profile import load_profile  # noqa: E402
from test_nodecheck import node  # noqa: E402,F401 - the fixture

HDR, NDR, QDR = "200 Gb/sec (4X HDR)", "400 Gb/sec (4X NDR)", "40 Gb/sec (4X QDR)"
ACTIVE, DOWN = ("4: ACTIVE", "5: LinkUp"), ("1: DOWN", "3: Disabled")


def build(root: Path, devices: list[tuple]) -> Path:
    """(name, hca_type, link layer, rate, (state, phys_state)[, virtual]) per device, one port each."""
    for i, (name, hca, layer, rate, (state, phys), *virtual) in enumerate(devices):
        fakesysfs.ib_device(root, name, bdf=f"0000:{0x18 + 8 * i:02x}:00.0", hca_type=hca, link_layer=layer, rate=rate,
                            state=state, phys_state=phys, virtual=bool(virtual and virtual[0]),
                            netdev=f"eth{i}" if layer == "Ethernet" else f"ibp{i}s0", netdev_mtu=4200)
    return root


def azure_a100(root, virtual=True):
    return build(root, [(f"mlx5_{i}", "MT4123", "InfiniBand", HDR, ACTIVE) for i in range(8)]
                 + [("mlx5_8", "MT4126", "Ethernet", QDR, ACTIVE, virtual)])


def devinfo(tmp: Path, names: list[str], mtu: str = "4096 (5)") -> Path:
    blocks = "".join(f"hca_id:\t{n}\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t20.31.1014\n"
                     f"\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n"
                     f"\t\t\tactive_mtu:\t\t{mtu}\n\t\t\tlink_layer:\t\tInfiniBand\n\n" for n in names)
    (tmp / "devinfo.txt").write_text(blocks)
    tool = tmp / "ibv_devinfo"
    tool.write_text(f"#!/bin/sh\ncat {tmp / 'devinfo.txt'}\n")
    tool.chmod(0o755)
    return tool


@pytest.fixture
def env(node, tmp_path, monkeypatch):
    """test_nodecheck's node (state folder, scontrol's stand-in, SLURMD_NODENAME) on a sysfs tree of our own."""
    root = tmp_path / "rig"
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(root))
    return root


def node_check(capsys, *args) -> tuple[int, dict]:
    code = main(["node-check", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_an_azure_a100_nodes_vm_network_function_is_not_a_rail(env, tmp_path, capsys, monkeypatch):
    azure_a100(env)
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(devinfo(tmp_path, [f"mlx5_{i}" for i in range(8)])))
    code, out = node_check(capsys, "--profile", "a100-hdr200", "--checks", "ports,counters,pcie")
    assert code == 0 and out["verdict"] == "pass", out
    ports = out["checks"][0]
    assert ports["note"] == ("8 of 8 rail ports ACTIVE; not rails: mlx5_8 port 1 (an SR-IOV virtual function: "
                             "a VM's network, not a rail)"), ports
    # Where sysfs does not say it is a function of a VM, its link layer still keeps it out of the rails.
    plain = read_ports(azure_a100(tmp_path / "plain", virtual=False), Unavailable("-"))
    picked = rails.select(plain, load_profile("a100-hdr200"))
    assert picked.ports == plain[:8] and picked.others == [(plain[8], "Ethernet, not the profile's InfiniBand")]


def test_an_h100_roce_nodes_storage_nics_are_not_rails_but_a_slow_rail_still_fails(env, capsys):
    build(env, [(f"mlx5_{i}", "MT4129", "Ethernet", NDR, ACTIVE) for i in (0, 3, 4, 5, 6, 9, 10, 11)]
          + [(f"mlx5_{i}", "MT4125", "Ethernet", "100 Gb/sec (4X EDR)", ACTIVE) for i in (1, 2, 7, 8)])
    code, out = node_check(capsys, "--profile", "h100-roce400", "--checks", "ports")
    assert code == 0, out
    assert out["checks"][0]["note"].startswith("8 of 8 rail ports ACTIVE; not rails: mlx5_1 port 1 (MT4125 at 100 "
                                               "Gb/sec (4X EDR), not the rail NICs' MT4129); mlx5_2 port 1 (MT4125"), out
    fakesysfs.set_port(env, "mlx5_5", 1, rate="200 Gb/sec (2X NDR)")  # a rail trained down is still a rail
    code, out = node_check(capsys, "--profile", "h100-roce400", "--checks", "ports")
    assert code == 1 and [(p["part"], p["detail"]) for p in out["checks"][0]["problems"]] == [
        ("mlx5_5 port 1", "rate 200 Gb/sec (2X NDR) is below the profile's 400 Gbit/s")], out


def test_down_ethernet_ports_beside_infiniband_rails_pass_and_a_missing_rail_fails(env, tmp_path, capsys, monkeypatch):
    build(env, [(f"mlx5_{i}", "MT4129", "InfiniBand", NDR, ACTIVE) for i in (0, 3, 4, 5, 6, 9, 10, 11)]
          + [("mlx5_1", "MT4125", "Ethernet", "100 Gb/sec (4X EDR)", ACTIVE)]
          + [(f"mlx5_{i}", "MT4125", "Ethernet", QDR, DOWN) for i in (2, 7, 8)])
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(devinfo(tmp_path, [f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)])))
    code, out = node_check(capsys, "--profile", "h100-ndr400", "--checks", "ports", "--slurm")
    assert code == 0 and out["checks"][0]["problems"] == [], out
    assert "mlx5_7 port 1 (Ethernet, not the profile's InfiniBand)" in out["checks"][0]["note"]
    # A VPI rail switched to Ethernet is no rail: the node is short of one, and that fails, naming why.
    fakesysfs.set_port(env, "mlx5_9", 1, link_layer="Ethernet")
    code, out = node_check(capsys, "--profile", "h100-ndr400", "--checks", "ports", "--slurm")
    assert code == 1 and out["slurm"]["outcome"] == "drained", out
    (p,) = out["checks"][0]["problems"]
    assert p["part"] == "rails" and p["detail"].startswith("7 rail ports, the profile expects 8 (topology.rails); "
                                                           "not rails: mlx5_1 port 1 (Ethernet"), p
    assert "mlx5_9 port 1 (Ethernet, not the profile's InfiniBand)" in p["detail"]


def test_an_explicit_map_names_the_rails_and_a_mapped_nic_that_is_gone_fails(env, tmp_path, capsys, monkeypatch):
    azure_a100(env)
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(devinfo(tmp_path, ["mlx5_0", "mlx5_1"])))
    site = tmp_path / "site.toml"
    site.write_text('extends = "a100-hdr200"\n[topology]\nnic_rails = { mlx5_0 = 0, mlx5_1 = 1, mlx5_9 = 2 }\n')
    code, out = node_check(capsys, "--profile", str(site), "--checks", "ports")
    assert code == 1, out
    problems = [(p["part"], p["detail"]) for p in out["checks"][0]["problems"]]
    assert problems == [("rails", "mlx5_9 (rail 2): no such RDMA device (topology.nic_rails)")], out
    assert "mlx5_2 port 1 (not in topology.nic_rails)" in out["checks"][0]["note"]


def test_a_missing_tool_or_an_unreadable_file_could_not_run_and_never_drains(env, tmp_path, capsys, monkeypatch):
    """Without ibv_devinfo an InfiniBand port's MTU is unknown: the harness's blind spot, not the port's
    fault. Before, every InfiniBand port failed ("MTU unknown") and the node was drained."""
    azure_a100(env)
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(tmp_path / "nowhere" / "ibv_devinfo"))
    code, out = node_check(capsys, "--profile", "a100-hdr200", "--checks", "ports", "--slurm")
    assert code == 3 and out["verdict"] == "error" and out["checks"][0]["problems"] == [], out
    assert out["checks"][0]["unchecked"][0] == (f"mlx5_0 port 1: InfiniBand MTU unknown: {tmp_path / 'nowhere' / 'ibv_devinfo'}"
                                                f" ($ACCEPTANCE_IBV_DEVINFO) not found on PATH")
    assert out["slurm"]["outcome"] == "left" and "could not run" in out["slurm"]["detail"], out
    assert not (tmp_path / "scontrol.log").exists() or "update" not in (tmp_path / "scontrol.log").read_text()
    main(["node-check", "--profile", "a100-hdr200", "--checks", "ports"])
    text = capsys.readouterr().out
    assert "ERROR ports: could not run: mlx5_3 port 1: InfiniBand MTU unknown" in text and "FAIL" not in text
    # A state file the kernel did not give us: unknown, not down.
    monkeypatch.setenv("ACCEPTANCE_IBV_DEVINFO", str(devinfo(tmp_path, [f"mlx5_{i}" for i in range(8)])))
    (env / "class" / "infiniband" / "mlx5_4" / "ports" / "1" / "phys_state").unlink()
    code, out = node_check(capsys, "--profile", "a100-hdr200", "--checks", "ports", "--slurm")
    assert code == 3 and out["slurm"]["outcome"] == "left", out
    assert out["checks"][0]["unchecked"] == [f"mlx5_4 port 1: state unknown: cannot read phys_state in "
                                             f"{env / 'class' / 'infiniband' / 'mlx5_4' / 'ports' / '1'}"]
    # ... while a real fault found beside a blind spot still fails.
    fakesysfs.set_port(env, "mlx5_6", 1, state="1: DOWN", phys_state="3: Disabled")
    code, out = node_check(capsys, "--profile", "a100-hdr200", "--checks", "ports")
    assert code == 1 and [p["part"] for p in out["checks"][0]["problems"]] == ["mlx5_6 port 1"], out
