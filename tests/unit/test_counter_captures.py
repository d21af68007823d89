"""Port counters read from fixtures shaped after real captures (tests/data/counters/, each citing the public
output it follows): `ethtool -S` of mlx5 ports, hw_counters as `grep ""` prints them, a device without
PMA counters. A healthy port neither fails nor warns; a faulty one fails naming its device and port."""
import re
import stat
import sys
from pathlib import Path

import pytest

from acceptance.host import counters as c
from acceptance.host import ethtool
from acceptance.rules import counter_verdicts as cv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs

DATA = Path(__file__).resolve().parents[1] / "data" / "counters"


def capture(name: str) -> str:
    """A fixture's lines without its comments (the citation, a command line)."""
    return "".join(line for line in (DATA / name).read_text().splitlines(keepends=True)
                   if not line.lstrip().startswith("#"))


def grown(text: str, by) -> str:
    """`ethtool -S` text with each counter's value v replaced by by(name, v): the same port later on."""
    return re.sub(r"^(\s*)(\w+): (\d+)$", lambda m: f"{m[1]}{m[2]}: {by(m[2], int(m[3]))}", text, flags=re.M)


def roce_node(tmp_path, rate: str, nics: int = 2):
    """RoCE ports mlx5_0.. (netdevs ens<i>f0np0) at `rate`, and an ethtool that prints <netdev>.out."""
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=nics, gpus=0, link_layer="Ethernet", rate=rate)
    script = tmp_path / "ethtool"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-S" ] || exit 64\ncat "{tmp_path}/$2.out"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return root, script


def window(tmp_path, monkeypatch, rate: str, before: dict[str, str], after: dict[str, str],
           seconds: float = 60.0) -> c.DiffResult:
    """Counter changes over `seconds` of a node whose netdevs printed `before`, then `after` ({netdev: text})."""
    root, script = roce_node(tmp_path, rate, nics=len(before))
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(script))
    snaps = []
    for epoch, outputs in ((0.0, before), (seconds, after)):
        for netdev, text in outputs.items():
            (tmp_path / f"{netdev}.out").write_text(text)
        snap = c.snapshot(root, node="node3")
        assert snap["problems"] == []
        snap["epoch"] = epoch
        snaps.append(snap)
    return c.diff(*snaps)


PAM4_200G = "NIC statistics:\n" + capture("ethtool-cx7-200g-pam4-lanes.txt")


@pytest.mark.parametrize("fixture, rate", [
    ("ethtool-cx4lx-head.txt", "25 Gb/sec (1X EDR)"),
    ("ethtool-prio-roce.txt", "100 Gb/sec (4X EDR)"),
    ("ethtool-cx7-200g-pam4-lanes.txt", "200 Gb/sec (4X HDR)"),
])
def test_a_healthy_port_neither_fails_nor_warns(tmp_path, monkeypatch, fixture, rate):
    """A minute of a healthy port: its traffic grows, and a PAM4 port's lanes count a few more bit errors
    before FEC (each nonzero counter grows by a thousandth)."""
    text = "NIC statistics:\n" + capture(fixture)
    deltas = window(tmp_path, monkeypatch, rate, {"ens0f0np0": text},
                    {"ens0f0np0": grown(text, lambda name, v: v + v // 1000 + 1 if v else 0)})
    assert any(d.delta for d in deltas)
    assert cv.problems(deltas, cv.Limits(), "node3") == []
    assert cv.verdict_of(deltas, cv.Limits()) == "pass"


def test_pam4_lanes_without_rx_bits_phy_are_rated_against_the_port_rate(tmp_path, monkeypatch):
    """The ConnectX-7 200G port prints lane counters and no rx_bits_phy: each lane received 50 Gbit/s
    for the minute, the port 200 Gbit/s, which rates the errors as a healthy link's."""
    after = grown(PAM4_200G, lambda name, v: v + {"rx_err_lane_2_phy": 300, "rx_corrected_bits_phy": 312}.get(name, 3))
    deltas = window(tmp_path, monkeypatch, "200 Gb/sec (4X HDR)", {"ens0f0np0": PAM4_200G}, {"ens0f0np0": after})
    lanes = {d.name: d for d in deltas if d.kind == "pre_fec"}
    assert {(d.bits, d.bits_from) for n, d in lanes.items() if n.startswith("rx_err_lane")} == {(3 * 10**12, "rate")}
    assert lanes["rx_err_lane_2_phy"].ber == pytest.approx(300 / 3e12)
    assert lanes["rx_corrected_bits_phy"].bits == 12 * 10**12
    assert lanes["rx_corrected_bits_phy"].ber == pytest.approx(312 / 12e12)
    assert cv.verdict_of(deltas, cv.Limits()) == "pass"


def test_a_lossy_100g_link_fails_naming_its_device_and_port(tmp_path, monkeypatch):
    """The ConnectX-6 Dx link counted CRC and symbol errors after FEC: lost frames. Its counters were
    cleared (0) before the window; the other port stayed clean."""
    lossy = "NIC statistics:\n" + capture("ethtool-cx6dx-100g-lossy.txt")
    clean = grown(lossy, lambda name, v: 0)
    deltas = window(tmp_path, monkeypatch, "100 Gb/sec (4X EDR)", {"ens0f0np0": clean, "ens1f0np0": clean},
                    {"ens0f0np0": clean, "ens1f0np0": lossy}, seconds=600.0)
    assert cv.verdict_of(deltas, cv.Limits()) == "fail"
    assert cv.problems(deltas, cv.Limits(), "node3") == [
        "node3 mlx5_1 port 1: rx_crc_errors_phy rose by 2,210,417 during the window (error counters must not rise)",
        "node3 mlx5_1 port 1: rx_symbol_err_phy rose by 2,209,733 during the window (error counters must not rise)"]
    # its lanes' errors before FEC are rated too (100G: 4 lanes of 25 Gbit/s for 600 s), under the warning bound
    lane = next(d for d in deltas if d.device == "mlx5_1" and d.name == "rx_err_lane_0_phy")
    assert (lane.bits, lane.ber) == (15 * 10**12, pytest.approx(2209733 / 15e12))


def test_hw_counters_as_grep_prints_them(tmp_path):
    """An mlx5 RoCE port's hw_counters read back one file each (lifespan is no counter); a window with
    more CNPs sent and nothing else is congestion recorded without a bound: it passes."""
    root = fakesysfs.ib_device(tmp_path / "sys", "mlx5_0", link_layer="Ethernet", netdev="enp178s0f0",
                               rate="100 Gb/sec (4X EDR)")
    found = {}
    for line in capture("hw_counters-roce-grep.txt").splitlines():
        path, _, value = line.partition(":")
        found[path.rsplit("/", 1)[1]] = int(value)
        fakesysfs.set_counter(root, "mlx5_0", 1, path.rsplit("/", 1)[1], int(value), hw=True)
    before = c.snapshot(root, ethtool=False, node="node3")
    counters = before["ports"][0]["counters"]
    assert {n: counters[n]["value"] for n in found if n != "lifespan"} == {
        n: v for n, v in found.items() if n != "lifespan"}
    assert "lifespan" not in counters
    fakesysfs.set_counter(root, "mlx5_0", 1, "np_cnp_sent", found["np_cnp_sent"] + 50, hw=True)
    after = c.snapshot(root, ethtool=False, node="node3")
    after["epoch"] = before["epoch"] + 10
    deltas = c.diff(before, after)
    (cnp,) = [d for d in deltas if d.delta]
    assert (cnp.name, cnp.kind, cnp.rate) == ("np_cnp_sent", "cnp", 5.0)
    assert cv.verdict_of(deltas, cv.Limits()) == "pass"
    assert cv.counter_verdict(cnp, cv.Limits(cnp_rate_max=1.0)) == "warn"


def no_pma_device(tmp_path) -> Path:
    """An i40iw iWARP port whose PMA counter files hold what the fixture shows ("N/A (no PMA)")."""
    root = fakesysfs.ib_device(tmp_path / "sys", "i40iw0", link_layer="Ethernet", netdev="enp5s0",
                               rate="10 Gb/sec (4X SDR)")
    folder = root / "class" / "infiniband" / "i40iw0" / "ports" / "1" / "counters"
    for f in folder.iterdir():
        f.unlink()
    for line in capture("i40iw-counters-no-pma.txt").splitlines():
        path, _, text = line.rpartition(":")  # the path holds colons (PCI addresses), the value none
        (folder / path.rsplit("/", 1)[1]).write_text(text + "\n")
    return root


def test_a_device_without_pma_is_a_note_not_a_problem(tmp_path):
    root = no_pma_device(tmp_path)
    before = c.snapshot(root, ethtool=False, node="node3")
    assert before["problems"] == []
    assert before["notes"] == [
        "i40iw0 port 1: no PMA counters (5 files in counters/ read 'N/A (no PMA)': the device has no InfiniBand "
        "performance management agent, as iWARP devices do)"]
    assert not any(v["source"] == "counters" for v in before["ports"][0]["counters"].values())
    deltas = c.diff(before, c.snapshot(root, ethtool=False, node="node3"))
    assert deltas.notes == [f"both snapshots: {before['notes'][0]}"]
    assert cv.verdict_of(deltas, cv.Limits()) == "pass"
