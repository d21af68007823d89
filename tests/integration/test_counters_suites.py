"""Port counters around real suite runs: each emulated node reads its own sysfs-shaped tree.

ACCEPTANCE_SYSFS_ROOT=<tmp>/{node} gives node1 and node2 their own RoCE NICs, and a stand-in
for `ethtool -S` prints mlx5-shaped statistics in which one port's CRC error counter grows
on every read, as a port with a bad cable does while traffic flows.
"""
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fakesysfs

ETHTOOL = """#!/bin/sh
# ethtool -S <netdev>: rx_crc_errors_phy grows by 7 on every read of the port named ensbad.
n=0
if [ "$2" = ensbad ]; then
    n=$(( $(cat "{state}/ensbad" 2>/dev/null || echo 0) + 7 ))
    echo "$n" > "{state}/ensbad"
fi
printf 'NIC statistics:\\n     rx_packets: 1000\\n     rx_bytes: 64000\\n     rx_crc_errors_phy: %s\\n' "$n"
printf '     rx_prio3_pause: 0\\n     tx_prio3_pause: 0\\n     rx_discards_phy: 0\\n'
"""


def folder_of(p) -> Path:
    return Path(re.search(r"^run folder: (\S+)$", p.stdout, re.MULTILINE).group(1))


def _bad_cable_nodes(tmp_path) -> dict:
    """node1 and node2 with two RoCE NICs each; node2's second port's CRC errors grow on every read."""
    trees = tmp_path / "sys"
    for node, bad in (("node1", "ens1"), ("node2", "ensbad")):
        for i, netdev in enumerate(("ens0", bad)):
            fakesysfs.ib_device(trees / node, f"mlx5_{i}", bdf=f"0000:{0x18 + i:02x}:00.0", link_layer="Ethernet",
                                rate="400 Gb/sec (4X)", netdev=netdev)
    (tmp_path / "state").mkdir()
    script = tmp_path / "ethtool"
    script.write_text(ETHTOOL.replace("{state}", str(tmp_path / "state")))
    script.chmod(0o755)
    return {"ACCEPTANCE_SYSFS_ROOT": f"{trees}/{{node}}", "ACCEPTANCE_ETHTOOL": str(script)}


def test_error_counters_rising_during_any_suite_fail_it(acceptance_cli, tmp_path):
    """The suite's own window (no counter check of its own): the suite fails, once, and the counter
    finding names the port; the failed test adds no second finding."""
    p = acceptance_cli("run", "--", "-m", "preflight", "-k", "memlock", env=_bad_cable_nodes(tmp_path))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "port error counters rose during suites/test_preflight.py" in p.stdout, p.stdout
    assert re.search(r"node2 mlx5_1 port 1: rx_crc_errors_phy rose by \d+ during the window", p.stdout), p.stdout
    findings = json.loads((folder_of(p) / "findings.json").read_text())
    assert [(f["kind"], f["scope"], f["node"], f["rail"]) for f in findings] == [("counter", "nic", "node2", 1)]


def test_rising_error_counter_during_incast_fails_and_is_localized(acceptance_cli, tmp_path):
    p = acceptance_cli("run", "--", "-m", "congestion", env=_bad_cable_nodes(tmp_path))
    assert p.returncode == 1, p.stdout + p.stderr
    # The incast round's own window fails the test, naming the node, device and port.
    assert re.search(r"node2 mlx5_1 port 1: rx_crc_errors_phy rose by \d+ during the window", p.stdout), p.stdout
    folder = folder_of(p)
    recs = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    crc = [r for r in recs if r["suite"] == "counters" and r["metric"] == "rx_crc_errors_phy"]
    # Both windows: the suite's (one per node and port, by the node's first rank) and each incast round's.
    assert {r["test"] for r in crc} == {"suites/test_incast.py", "suites/test_incast.py::test_incast[rails]"}
    bad = [r for r in crc if r["verdict"] == "fail"]
    assert bad and all(r["nodes"] == ["node2"] and r["rail"] == 1 and r["detail"].startswith("mlx5_1 port 1")
                       for r in bad)
    assert all(r["value"] == 0 and r["verdict"] == "pass" for r in crc if r not in bad)
    findings = json.loads((folder / "findings.json").read_text())
    counter = [f for f in findings if f["kind"] == "counter"]
    assert [(f["severity"], f["scope"], f["node"], f["rail"]) for f in counter] == [("fail", "nic", "node2", 1)]
    assert counter[0]["message"].startswith("node2 mlx5_1 port 1 (rail 1): rx_crc_errors_phy rose by")
    assert "scontrol update NodeName=node2 " in (folder / "drain.txt").read_text()
    assert "mlx5_1 port 1" in (folder / "report.html").read_text()


def test_saturated_error_counter_fails_before_anything_is_measured(acceptance_cli, tmp_path):
    trees = tmp_path / "sys"
    for node in ("node1", "node2"):
        for i in range(2):
            fakesysfs.ib_device(trees / node, f"mlx5_{i}", bdf=f"0000:{0x18 + i:02x}:00.0")
    fakesysfs.set_counter(trees / "node2", "mlx5_0", 1, "symbol_error", 65535)
    env = {"ACCEPTANCE_SYSFS_ROOT": f"{trees}/{{node}}"}
    p = acceptance_cli("run", "--", "-m", "counters", env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "node2 mlx5_0 port 1: symbol_error at 65535 (16-bit)" in p.stdout, p.stdout
    findings = json.loads((folder_of(p) / "findings.json").read_text())
    assert [(f["scope"], f["node"], f["metric"]) for f in findings if f["severity"] == "fail"] == [
        ("node", "node2", "saturated_counters")]
    # Without any port the check skips with the reason, on every rank.
    p = acceptance_cli("run", "--", "-m", "counters", "-rs",
                       env={"ACCEPTANCE_SYSFS_ROOT": f"{tmp_path}/none/{{node}}"})
    assert p.returncode == 3 and "no RDMA port on any node" in p.stdout, p.stdout  # nothing measured
    assert "verdict: INCOMPLETE (nothing was measured against a bound" in p.stdout
