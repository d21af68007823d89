"""`acceptance counters snapshot` and `diff` as real processes on a sysfs-shaped tree."""
import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fakesysfs


@pytest.fixture
def node(tmp_path):
    """A 4-NIC RoCE node (tests/fakesysfs.py) with an ethtool that prints a saved mlx5 output."""
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=4, gpus=0, link_layer="Ethernet")
    saved = tmp_path / "ethtool.out"
    saved.write_text("NIC statistics:\n     rx_prio3_pause: 100\n     rx_discards_phy: 0\n"
                     "     rx_crc_errors_phy: 0\n     rx_bits_phy: 1000000\n")
    script = tmp_path / "ethtool"
    script.write_text(f'#!/bin/sh\ncat "{saved}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return root, saved, script


def cli(*args, root, tmp_path, ethtool=None, node="node1"):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "ACCEPTANCE_", "PMI"))}
    env.update(ACCEPTANCE_SYSFS_ROOT=str(root), SLURMD_NODENAME=node,
               ACCEPTANCE_ETHTOOL=str(ethtool or tmp_path / "no-ethtool"))
    return subprocess.run([sys.executable, "-m", "acceptance", "counters", *args], check=False, cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)


def test_snapshot_then_diff_fails_on_a_rising_error_counter(node, tmp_path):
    root, saved, script = node
    p = cli("snapshot", "-o", "before-%N.json", root=root, tmp_path=tmp_path, ethtool=script)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    assert "counters snapshot of node1: 4 ports," in p.stderr and "0 problems -> before-node1.json" in p.stderr
    before = json.loads((tmp_path / "before-node1.json").read_text())
    assert before["format"] == "acceptance-counters/1" and before["node"] == "node1"
    assert before["ports"][2]["counters"]["rx_prio3_pause"]["value"] == 100
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left nothing behind

    fakesysfs.set_counter(root, "mlx5_2", 1, "symbol_error", 12)
    fakesysfs.set_counter(root, "mlx5_0", 1, "port_xmit_data", 10**9)
    saved.write_text(saved.read_text().replace("rx_prio3_pause: 100", "rx_prio3_pause: 900"))
    p = cli("snapshot", "-o", "after-%N.json", root=root, tmp_path=tmp_path, ethtool=script)
    assert p.returncode == 0, p.stderr

    p = cli("diff", "before-node1.json", "after-node1.json", root=root, tmp_path=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "node1 mlx5_2 port 1: symbol_error rose by 12 during the window (error counters must not rise)" in p.stdout
    assert "port_xmit_data" in p.stdout and "rx_prio3_pause" in p.stdout
    assert "verdict: FAIL" in p.stdout

    p = cli("diff", "before-node1.json", "after-node1.json", "--json", root=root, tmp_path=tmp_path)
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert out["node"] == "node1" and out["verdict"] == "fail" and out["seconds"] > 0
    assert out["problems"] == [
        "node1 mlx5_2 port 1: symbol_error rose by 12 during the window (error counters must not rise)"]
    sym = [d for d in out["deltas"] if d["name"] == "symbol_error" and d["device"] == "mlx5_2"]
    assert sym[0]["delta"] == 12 and sym[0]["kind"] == "error" and sym[0]["width"] == 16
    pause = next(d for d in out["deltas"] if d["name"] == "rx_prio3_pause" and d["device"] == "mlx5_0")
    assert (pause["delta"], pause["source"], pause["netdev"]) == (800, "ethtool", "ens0f0np0")

    # a profile that allows the rise, and bounds pause frames: exit 0 with a warning
    lenient = tmp_path / "lenient.toml"
    lenient.write_text('extends = "local"\n[counters]\nerrors_max = 100\npause_rate_max = 0.001\n')
    p = cli("diff", "before-node1.json", "after-node1.json", "--profile", str(lenient), root=root, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rx_prio3_pause" in p.stdout and "> 0.001/s" in p.stdout and "verdict: WARN" in p.stdout


def test_quiet_window_exits_0(node, tmp_path):
    root, _, script = node
    for name in ("a.json", "b.json"):
        assert cli("snapshot", "-o", name, root=root, tmp_path=tmp_path, ethtool=script).returncode == 0
    p = cli("diff", "a.json", "b.json", root=root, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no counter moved" in p.stdout and "verdict: PASS" in p.stdout


def test_snapshot_to_stdout_and_problems_on_stderr(node, tmp_path):
    root, _, _ = node
    p = cli("snapshot", root=root, tmp_path=tmp_path)  # ethtool missing: a problem, not a failure
    assert p.returncode == 0
    snap = json.loads(p.stdout)
    assert len(snap["ports"]) == 4 and len(snap["problems"]) == 1
    assert "1 problems -> stdout" in p.stderr and "problem: " in p.stderr and "not found" in p.stderr
    p = cli("snapshot", "--no-ethtool", root=tmp_path / "empty", tmp_path=tmp_path)
    assert p.returncode == 0 and json.loads(p.stdout)["ports"] == []
    assert "no RDMA devices" in p.stderr


def test_bad_input_exits_2_naming_the_file(node, tmp_path):
    root, _, _ = node
    assert cli("snapshot", "-o", "n1.json", root=root, tmp_path=tmp_path).returncode == 0
    assert cli("snapshot", "-o", "n2.json", root=root, tmp_path=tmp_path, node="node2").returncode == 0
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"run_id": "x"}')
    cases = {
        ("missing.json", "n1.json"): "missing.json: no such file",
        ("n1.json", "garbage.json"): "garbage.json: not JSON",
        ("other.json", "n1.json"): 'other.json: not a counters snapshot (no "format" key',
        ("n1.json", "n2.json"): "n1.json is from node node1 but n2.json from node node2",
    }
    runs = [("diff", a, b) for a, b in cases] + [("snapshot", "-o", "no/such/dir/s.json"), ("diff", "n1.json")]
    with ThreadPoolExecutor(len(runs)) as pool:  # independent processes: run them side by side
        done = list(pool.map(lambda args: cli(*args, root=root, tmp_path=tmp_path), runs))
    for ((a, b), message), p in zip(cases.items(), done):
        assert p.returncode == 2, (a, b, p.stdout, p.stderr)
        assert message in p.stderr, p.stderr
    assert done[-2].returncode == 2 and "no/such/dir/s.json: cannot write the snapshot" in done[-2].stderr
    assert done[-1].returncode == 2 and "AFTER" in done[-1].stderr  # argparse: AFTER missing


def test_help_teaches_the_workflow(tmp_path):
    p = cli("--help", root=tmp_path, tmp_path=tmp_path)
    assert p.returncode == 0
    assert "srun --ntasks-per-node=1 acceptance counters snapshot -o before-%N.json" in p.stdout
    assert "acceptance counters diff before-node1.json after-node1.json" in p.stdout


CX7_400G = ("NIC statistics:\n     rx_crc_errors_phy: {crc}\n     rx_symbol_err_phy: 0\n"
            "     rx_pcs_symbol_err_phy: 0\n     rx_corrected_bits_phy: {corrected}\n"
            + "".join(f"     rx_err_lane_{i}_phy: {{lane}}\n" for i in range(4))
            + "".join(f"     rx_err_lane_{i}_phy: 0\n" for i in range(4, 8))
            + "     rx_bits_phy: {bits}\n     link_down_events_phy: 0\n")


def test_pre_fec_errors_of_a_healthy_400g_port_pass_and_a_crc_or_link_down_fails(node, tmp_path):
    """Every 400G PAM4 port counts lane errors before FEC: at a pre-FEC BER of 1e-7 the window passes;
    the same window with a CRC error or a link that went down fails."""
    root, saved, script = node
    saved.write_text(CX7_400G.format(crc=0, corrected=10**9, lane=10**9, bits=10**16))
    assert cli("snapshot", "-o", "before-%N.json", root=root, tmp_path=tmp_path, ethtool=script).returncode == 0
    bits = 400 * 10**9 * 60  # a minute at 400 Gbit/s
    lane = bits // 4 // 10**7  # each of the 4 active lanes at 1e-7
    saved.write_text(CX7_400G.format(crc=0, corrected=10**9 + 4 * lane, lane=10**9 + lane, bits=10**16 + bits))
    assert cli("snapshot", "-o", "after-%N.json", root=root, tmp_path=tmp_path, ethtool=script).returncode == 0
    p = cli("diff", "before-node1.json", "after-node1.json", "--json", root=root, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["verdict"] == "pass" and out["problems"] == []
    lane0 = next(d for d in out["deltas"] if d["name"] == "rx_err_lane_0_phy" and d["device"] == "mlx5_0")
    assert lane0["kind"] == "pre_fec" and lane0["ber"] == pytest.approx(1e-7)

    saved.write_text(CX7_400G.format(crc=2, corrected=10**9 + 4 * lane, lane=10**9 + lane, bits=10**16 + bits))
    assert cli("snapshot", "-o", "crc-%N.json", root=root, tmp_path=tmp_path, ethtool=script).returncode == 0
    p = cli("diff", "before-node1.json", "crc-node1.json", root=root, tmp_path=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "rx_crc_errors_phy rose by 2 during the window (error counters must not rise)" in p.stdout

    saved.write_text(CX7_400G.format(crc=0, corrected=10**9 + 4 * lane, lane=10**9 + lane, bits=10**16 + bits))
    fakesysfs.set_counter(root, "mlx5_1", 1, "link_downed", 1)
    assert cli("snapshot", "-o", "down-%N.json", root=root, tmp_path=tmp_path, ethtool=script).returncode == 0
    p = cli("diff", "before-node1.json", "down-node1.json", root=root, tmp_path=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "node1 mlx5_1 port 1: link_downed rose by 1 during the window" in p.stdout


DATA = Path(__file__).resolve().parents[1] / "data" / "counters"


def tsv_tree(root: Path, name: str) -> Path:
    """A sysfs tree from a path<TAB>content listing of /sys/class/infiniband (comments left out)."""
    for line in (DATA / name).read_text().splitlines():
        if line.startswith("#"):
            continue
        path, _, content = line.partition("\t")
        f = root / "class" / "infiniband" / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(content + "\n")
    return root


def test_an_h100_nodes_sysfs_tree_is_judged_by_what_each_counter_means(tmp_path):
    """The H100 node's tree (a 400G InfiniBand port, a 200G 2-lane RoCE bond): traffic and back-pressure
    pass, an application's receive buffer too small is information shown in the diff, a RoCE packet
    that failed its ICRC or a symbol error fails naming the device and port."""
    root = tsv_tree(tmp_path / "sys", "sys-class-infiniband-h100.tsv")
    assert cli("snapshot", "-o", "before.json", root=root, tmp_path=tmp_path).returncode == 0
    before = json.loads((tmp_path / "before.json").read_text())
    assert before["problems"] == [] and before["notes"] == []
    ports = [(p["device"], p["link_layer"], p["rate_gbps"], p["lanes"], len(p["counters"])) for p in before["ports"]]
    assert ports == [("mlx5_0", "InfiniBand", 400.0, 4, 46), ("mlx5_bond_0", "Ethernet", 200.0, 2, 46)]

    def add(device, name, by, sub="counters"):
        f = root / "class" / "infiniband" / device / "ports" / "1" / sub / name
        f.write_text(f"{int(f.read_text()) + by}\n")
    for device in ("mlx5_0", "mlx5_bond_0"):
        for name in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                     "unicast_xmit_packets", "unicast_rcv_packets", "port_xmit_wait"):
            add(device, name, 10**9)
        add(device, "rx_write_requests", 10**6, "hw_counters")
    add("mlx5_0", "resp_local_length_error", 1, "hw_counters")
    assert cli("snapshot", "-o", "healthy.json", root=root, tmp_path=tmp_path).returncode == 0
    p = cli("diff", "before.json", "healthy.json", root=root, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "problems:" not in p.stdout and "verdict: PASS" in p.stdout
    (row,) = [line.split() for line in p.stdout.splitlines() if "resp_local_length_error" in line]
    assert row == ["mlx5_0", "1", "resp_local_length_error", "app", "application", "+1"] + row[6:7] + ["info"]

    add("mlx5_bond_0", "rx_icrc_encapsulated", 7, "hw_counters")
    add("mlx5_bond_0", "symbol_error", 2)
    assert cli("snapshot", "-o", "faulty.json", root=root, tmp_path=tmp_path).returncode == 0
    p = cli("diff", "before.json", "faulty.json", root=root, tmp_path=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.split("problems:\n")[1].splitlines() == [
        "  node1 mlx5_bond_0 port 1: symbol_error rose by 2 during the window (error counters must not rise)",
        "  node1 mlx5_bond_0 port 1: rx_icrc_encapsulated rose by 7 during the window (error counters must not rise)",
        "verdict: FAIL"]


def test_a_healthy_200g_pam4_port_without_rx_bits_phy_passes(tmp_path):
    """Its lanes count bit errors before FEC and its driver prints no rx_bits_phy: the bits are the port's
    rate (200 Gb/sec over 4 lanes) times the window, and a few errors are a healthy link's."""
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=1, gpus=0, link_layer="Ethernet", rate="200 Gb/sec (4X HDR)")
    text = "".join(line + "\n" for line in (DATA / "ethtool-cx7-200g-pam4-lanes.txt").read_text().splitlines()
                   if not line.startswith("#"))
    saved = tmp_path / "ethtool.out"
    saved.write_text("NIC statistics:\n" + text)
    script = tmp_path / "ethtool"
    script.write_text(f'#!/bin/sh\ncat "{saved}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert cli("snapshot", "-o", "a.json", root=root, tmp_path=tmp_path, ethtool=script).returncode == 0
    saved.write_text("NIC statistics:\n" + text.replace("rx_err_lane_2_phy: 151", "rx_err_lane_2_phy: 154")
                     .replace("rx_corrected_bits_phy: 164", "rx_corrected_bits_phy: 167"))
    assert cli("snapshot", "-o", "b.json", root=root, tmp_path=tmp_path, ethtool=script).returncode == 0
    p = cli("diff", "a.json", "b.json", "--json", root=root, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["verdict"] == "pass" and out["problems"] == []
    lane = next(d for d in out["deltas"] if d["name"] == "rx_err_lane_2_phy")
    assert (lane["delta"], lane["bits_from"]) == (3, "rate")
    assert lane["bits"] == round(50e9 * out["seconds"]) and lane["ber"] == pytest.approx(3 / lane["bits"])
    assert lane["note"].startswith("bits from the port's rate, 200 Gb/sec over 4 lanes for ")


def test_a_device_without_pma_counters_is_a_note(tmp_path):
    """An iWARP device's PMA counter files read "N/A (no PMA)": the snapshot says so once, as a note; the
    diff passes."""
    root = fakesysfs.ib_device(tmp_path / "sys", "i40iw0", link_layer="Ethernet", rate="10 Gb/sec (4X SDR)")
    for f in (root / "class" / "infiniband" / "i40iw0" / "ports" / "1" / "counters").iterdir():
        f.write_text("N/A (no PMA)\n")
    p = cli("snapshot", "-o", "a.json", root=root, tmp_path=tmp_path)
    assert p.returncode == 0 and "0 problems -> a.json" in p.stderr
    assert "  note: i40iw0 port 1: no PMA counters (21 files in counters/ read 'N/A (no PMA)'" in p.stderr
    assert cli("snapshot", "-o", "b.json", root=root, tmp_path=tmp_path).returncode == 0
    p = cli("diff", "a.json", "b.json", root=root, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "both snapshots: i40iw0 port 1: no PMA counters" in p.stdout and "verdict: PASS" in p.stdout
