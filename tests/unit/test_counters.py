"""Port counters on sysfs trees shaped like a real node's (tests/fakesysfs.py) and real `ethtool -S` output."""
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from acceptance.host import counter_kinds
from acceptance.host import counters as c
from acceptance.rules import counter_verdicts as cv
from acceptance.host import ethtool, sysfs
from acceptance.records.results import make_record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs

# `ethtool -S ens1f0np0` on a ConnectX-7 with PFC on priority 3 (mlx5, trimmed: per-ring counters cut
# down to a few, the rest as printed).
MLX5_ETHTOOL = """\
NIC statistics:
     rx_packets: 1234567890
     rx_bytes: 987654321012
     tx_packets: 1234000000
     tx_bytes: 980000000000
     rx_csum_complete: 5
     rx_out_of_buffer: 0
     rx0_packets: 77
     rx0_bytes: 7700
     tx12_bytes: 1200
     ch3_events: 9
     rx_vport_rdma_unicast_packets: 5550000000
     rx_vport_rdma_unicast_bytes: 22200000000000
     rx_pause_ctrl_phy: 0
     tx_pause_ctrl_phy: 0
     rx_discards_phy: 17
     tx_discards_phy: 0
     rx_crc_errors_phy: 0
     rx_symbol_err_phy: 0
     rx_pcs_symbol_err_phy: 3
     rx_corrected_bits_phy: 125000
     rx_err_lane_0_phy: 0
     rx_err_lane_1_phy: 0
     rx_bits_phy: 180000000000000
     link_down_events_phy: 1
     rx_prio3_bytes: 22200000000000
     rx_prio3_packets: 5550000000
     rx_prio3_pause: 4200
     rx_prio3_pause_duration: 880000
     tx_prio3_pause: 12
     tx_prio3_pause_duration: 640
     rx_prio3_pause_transition: 2100
     rx_prio3_discards: 0
     tx_pause_storm_warning_events: 0
     tx_pause_storm_error_events: 0
     module_unplug: 0
"""


def ethtool_script(tmp_path: Path, output: str = MLX5_ETHTOOL, rc: int = 0, name: str = "ethtool") -> Path:
    """A stand-in for ethtool: prints a saved `ethtool -S` output (any netdev)."""
    saved = tmp_path / f"{name}.out"
    saved.write_text(output)
    script = tmp_path / name
    script.write_text(f'#!/bin/sh\n[ "$1" = "-S" ] || exit 64\ncat "{saved}"\n'
                      + (f'echo "netlink error: no such device" >&2\nexit {rc}\n' if rc else ""))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def snap_at(root, epoch: float, **kw) -> dict:
    s = c.snapshot(root, node="node3", **kw)
    s["epoch"] = epoch
    return s


def by_name(deltas, device: str, name: str, port: int = 1) -> c.Delta:
    (d,) = [d for d in deltas if d.device == device and d.port == port and d.name == name]
    return d


@pytest.fixture
def ib_root(tmp_path):
    return fakesysfs.dgx_node(tmp_path / "sys", nics=4, gpus=0)


# ---- ports, widths, kinds ---------------------------------------------------------

def test_ports_in_natural_order_with_netdevs(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=12, gpus=0, link_layer="Ethernet")
    monkeypatch.setenv(sysfs.ENV_SYSFS_ROOT, str(root))
    found = sysfs.ports()
    assert [p.device for p in found] == [f"mlx5_{i}" for i in range(12)]  # mlx5_2 before mlx5_10
    assert found[3] == sysfs.Port("mlx5_3", 1, "Ethernet", "ens3f0np0", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    assert sysfs.sysfs_root() == root


def test_ib_ports_get_their_ipoib_netdev_and_multiport_devices_match_dev_port(tmp_path):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=0)
    assert [(p.device, p.netdev, p.link_layer) for p in sysfs.ports(root)] == [
        ("mlx5_0", "ibp24s0", "InfiniBand"), ("mlx5_1", "ibp40s0", "InfiniBand")]
    two = fakesysfs.ib_device(tmp_path / "two", "mlx5_0", ports=2, link_layer="Ethernet", netdev="ens1f0np0")
    fakesysfs.ib_device(two, "mlx5_0", ports=2, link_layer="Ethernet", netdev="ens1f1np1")
    net = (two / "bus" / "pci" / "devices" / "0000:18:00.0").resolve() / "net"
    (net / "ens1f0np0" / "dev_port").write_text("0\n")
    (net / "ens1f1np1" / "dev_port").write_text("1\n")
    assert [(p.port, p.netdev) for p in sysfs.ports(two)] == [(1, "ens1f0np0"), (2, "ens1f1np1")]


def test_gid_ndev_names_the_netdev_only_without_device_net(tmp_path):
    root = fakesysfs.ib_device(tmp_path / "sys", "mlx5_0", link_layer="Ethernet", netdev="ens1f0np0")
    fakesysfs.set_port(root, "mlx5_0", 1, **{"gid_attrs/ndevs/0": "bond0"})  # RoCE LAG: the bond is upper
    assert sysfs.ports(root)[0].netdev == "ens1f0np0"
    bare = fakesysfs.ib_device(tmp_path / "bare", "mlx5_0", link_layer="Ethernet")
    assert sysfs.ports(bare)[0].netdev is None
    fakesysfs.set_port(bare, "mlx5_0", 1, **{"gid_attrs/ndevs/0": "ens9np0"})
    assert sysfs.ports(bare)[0].netdev == "ens9np0"


def test_widths():
    assert c.width_of("symbol_error", "counters") == 16
    assert c.width_of("port_xmit_discards", "counters") == 16
    assert c.width_of("link_downed", "counters") == 8
    assert c.width_of("port_rcv_constraint_errors", "counters") == 8
    assert c.width_of("local_link_integrity_errors", "counters") == 4
    assert c.width_of("excessive_buffer_overrun_errors", "counters") == 4
    assert c.width_of("port_xmit_wait", "counters") == 32
    assert c.width_of("port_xmit_data", "counters") == 64  # mlx5: extended width
    assert c.width_of("unicast_rcv_packets", "counters") == 64
    assert c.width_of("mystery_counter", "counters") is None
    assert c.width_of("out_of_sequence", "hw_counters") == 32
    assert c.width_of("req_remote_access_errors", "hw_counters") == 32
    assert c.width_of("resp_local_length_error", "hw_counters") == 32
    assert c.width_of("np_cnp_sent", "hw_counters") == 64
    assert c.width_of("rx_icrc_encapsulated", "hw_counters") == 64
    assert c.width_of("rx_prio3_pause", "ethtool") == 64
    with pytest.raises(ValueError, match="unknown counter source"):
        c.width_of("x", "perfquery")


@pytest.mark.parametrize("name, kind, meaning", [
    ("symbol_error", "error", "fault"), ("link_downed", "error", "fault"),
    ("port_rcv_remote_physical_errors", "error", "fault"), ("local_link_integrity_errors", "error", "fault"),
    ("rx_crc_errors_phy", "error", "fault"), ("link_down_events_phy", "error", "fault"),
    ("tx_pause_storm_error_events", "error", "fault"), ("module_high_temp", "error", "fault"),
    ("rx_pci_signal_integrity", "error", "fault"), ("tx_recover", "error", "fault"),
    # RoCE packets that failed their ICRC: corrupted on the way (was "other", and a rise passed)
    ("rx_icrc_encapsulated", "error", "fault"), ("req_transport_retries_exceeded", "error", "fault"),
    ("retry_exceeded_err", "error", "fault"),
    ("out_of_sequence", "retransmit", "fault"), ("local_ack_timeout_err", "retransmit", "fault"),
    ("duplicate_request", "retransmit", "fault"), ("completer_retry_err", "retransmit", "fault"),
    ("rcvd_seq_err", "retransmit", "fault"), ("roce_adp_retrans", "retransmit", "fault"),
    ("rx_err_lane_2_phy", "pre_fec", "fault"), ("rx_corrected_bits_phy", "pre_fec", "fault"),
    # an application's own errors (were "error": a user's bug drained the node)
    ("resp_local_length_error", "app", "application"), ("req_remote_access_errors", "app", "application"),
    ("resp_remote_access_errors", "app", "application"), ("req_remote_invalid_request", "app", "application"),
    ("req_cqe_error", "app", "application"), ("req_cqe_flush_error", "app", "application"),
    ("rnr_nak_retry_err", "app", "application"), ("req_rnr_retries_exceeded", "app", "application"),
    ("rcvd_rnr_err", "app", "application"), ("retry_rnr_exceeded_err", "app", "application"),
    ("vport_resp_local_length_error", "app", "application"),  # a switchdev representor's Q-counter
    ("port_xmit_discards", "discard", "congestion"), ("rx_discards_phy", "discard", "congestion"),
    ("rx_prio3_discards", "discard", "congestion"), ("rx_prio2_cong_discard", "discard", "congestion"),
    ("out_of_buffer", "discard", "congestion"), ("rx_out_of_buffer", "discard", "congestion"),
    ("rx_prio3_pause", "pause", "congestion"), ("tx_prio0_pause", "pause", "congestion"),
    ("rx_pause_ctrl_phy", "pause", "congestion"), ("tx_global_pause", "pause", "congestion"),
    ("rx_prio3_pause_transition", "pause", "congestion"),
    ("tx_prio3_pause_duration", "pause_duration", "congestion"),
    ("rx_global_pause_duration", "pause_duration", "congestion"),
    ("np_cnp_sent", "cnp", "congestion"), ("rp_cnp_handled", "cnp", "congestion"),
    ("np_ecn_marked_roce_packets", "cnp", "congestion"), ("rx_prio3_marked", "cnp", "congestion"),
    ("port_xmit_wait", "wait", "congestion"), ("tx_pause_storm_warning_events", "wait", "congestion"),
    ("roce_slow_restart", "wait", "congestion"),
    ("port_xmit_data", "data", "traffic"), ("port_rcv_packets", "data", "traffic"), ("rx_bits_phy", "data", "traffic"),
    ("rx_prio3_bytes", "data", "traffic"), ("rx_vport_rdma_unicast_packets", "data", "traffic"),
    ("sent_pkts", "data", "traffic"), ("rx_dct_connect", "data", "traffic"),
    ("module_unplug", "other", "other"), ("ack_deferred", "other", "other"), ("rx_xdp_tx_err", "other", "other"),
    ("req_bogus_unheard_of_error", "other", "other"),  # a name no source lists never fails a port
])
def test_kind_and_class_of(name, kind, meaning):
    assert counter_kinds.kind_of(name) == kind
    assert counter_kinds.CLASS_OF[kind] == meaning


def test_every_kind_has_a_class():
    assert set(counter_kinds.CLASS_OF) == set(counter_kinds.KINDS)
    assert set(counter_kinds.CLASS_OF.values()) == {"fault", "congestion", "application", "traffic", "other"}
    assert set(cv.RECORDED_KINDS) == set(counter_kinds.KINDS) - {"data", "other"}


# ---- snapshot -----------------------------------------------------------------------

def test_snapshot_of_an_ib_node(ib_root, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "node7")
    fakesysfs.set_counter(ib_root, "mlx5_2", 1, "symbol_error", 5)
    s = c.snapshot(ib_root)
    assert s["format"] == "acceptance-counters/1" and s["node"] == "node7" and s["time"].endswith("Z")
    assert s["problems"] == [] and s["sysfs_root"] == str(ib_root)
    assert json.loads(json.dumps(s)) == s
    assert [(p["device"], p["port"], p["link_layer"]) for p in s["ports"]] == [
        (f"mlx5_{i}", 1, "InfiniBand") for i in range(4)]
    counters = s["ports"][2]["counters"]
    assert counters["symbol_error"] == {"value": 5, "source": "counters", "width": 16}
    assert counters["out_of_sequence"] == {"value": 0, "source": "hw_counters", "width": 32}
    assert "lifespan" not in counters
    assert "np_cnp_sent" not in counters  # RoCE only
    assert not any(v["source"] == "ethtool" for v in counters.values())  # InfiniBand: no ethtool


def test_snapshot_without_infiniband(tmp_path):
    s = c.snapshot(tmp_path, node="node1")
    assert s["ports"] == []
    assert len(s["problems"]) == 1 and "no RDMA devices" in s["problems"][0]
    assert str(tmp_path / "class" / "infiniband") in s["problems"][0]


def test_snapshot_device_filter(ib_root):
    assert [p["device"] for p in c.snapshot(ib_root, devices=["mlx5_1", "mlx5_3"], node="n")["ports"]] == [
        "mlx5_1", "mlx5_3"]


def test_unreadable_counter_is_a_problem_not_an_exception(ib_root):
    if os.geteuid() == 0:
        # root reads a mode-000 file anyway; a directory in place of the file fails the same way
        bad = ib_root / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error"
        bad.unlink()
        bad.mkdir()
    else:
        bad = ib_root / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error"
        bad.chmod(0)
    fakesysfs.set_counter(ib_root, "mlx5_1", 1, "link_downed", "N/A")
    s = c.snapshot(ib_root, node="n")
    assert "symbol_error" not in s["ports"][0]["counters"]
    assert any(p.startswith("mlx5_0 port 1: cannot read counters/symbol_error") for p in s["problems"]), s["problems"]
    assert "mlx5_1 port 1: counters/link_downed holds 'N/A', not a number" in s["problems"]


def test_ethtool_parsing_of_real_mlx5_output():
    stats = ethtool.parse_ethtool_stats(MLX5_ETHTOOL + "     some driver note: n/a\n")
    assert "NIC statistics" not in stats and "some driver note" not in stats
    assert stats["rx_prio3_pause"] == 4200
    assert stats["tx_prio3_pause_duration"] == 640
    assert stats["rx_discards_phy"] == 17
    assert stats["rx_corrected_bits_phy"] == 125000
    assert stats["rx_bits_phy"] == 180000000000000
    assert stats["link_down_events_phy"] == 1
    assert stats["rx_err_lane_1_phy"] == 0
    assert len(stats) == MLX5_ETHTOOL.count("\n") - 1


def test_snapshot_reads_ethtool_on_roce_ports(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=0, link_layer="Ethernet")
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(ethtool_script(tmp_path)))
    s = c.snapshot(root, node="n")
    assert s["problems"] == []
    counters = s["ports"][1]["counters"]
    assert s["ports"][1]["netdev"] == "ens1f0np0"
    assert counters["rx_prio3_pause"] == {"value": 4200, "source": "ethtool", "width": 64}
    assert counters["np_cnp_sent"]["source"] == "hw_counters"
    assert counters["symbol_error"]["source"] == "counters"
    assert not any(n.startswith(("rx0_", "tx12_", "ch3_")) for n in counters)  # per-ring counters left out
    assert "rx_packets" in counters
    assert not any(v["source"] == "ethtool" for v in c.snapshot(root, node="n", ethtool=False)["ports"][0]["counters"].values())


def test_missing_or_failing_ethtool_is_one_problem(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=3, gpus=0, link_layer="Ethernet")
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(tmp_path / "no-such-ethtool"))
    s = c.snapshot(root, node="n")
    assert len(s["problems"]) == 1 and "not found" in s["problems"][0] and ethtool.ENV_ETHTOOL in s["problems"][0]
    assert len(s["ports"]) == 3 and "symbol_error" in s["ports"][0]["counters"]
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(ethtool_script(tmp_path, rc=76)))
    s = c.snapshot(root, node="n")
    assert len(s["problems"]) == 3
    assert s["problems"][0].startswith("mlx5_0 port 1 (ens0f0np0): `")
    assert "exited 76: netlink error: no such device" in s["problems"][0]
    with pytest.raises(ethtool.EthtoolError, match="printed no statistics"):
        ethtool.ethtool_stats("ens0f0np0", command=str(ethtool_script(tmp_path, output="NIC statistics:\n", name="empty")))


# ---- diff and verdicts ------------------------------------------------------------------

def test_rising_symbol_error_fails_and_names_node_device_port(ib_root):
    before = snap_at(ib_root, 1000.0)
    fakesysfs.set_counter(ib_root, "mlx5_3", 1, "symbol_error", 12)
    fakesysfs.set_counter(ib_root, "mlx5_0", 1, "port_xmit_data", 5_000_000)
    after = snap_at(ib_root, 1010.0)
    deltas = c.diff(before, after)
    d = by_name(deltas, "mlx5_3", "symbol_error")
    assert (d.delta, d.kind, d.width, d.saturated, d.seconds, d.rate) == (12, "error", 16, None, 10.0, 1.2)
    assert cv.counter_verdict(d, cv.Limits()) == "fail"
    assert cv.counter_verdict(d, cv.Limits(errors_max=12)) == "pass"
    assert cv.problems(deltas, cv.Limits(), "node3") == [
        "node3 mlx5_3 port 1: symbol_error rose by 12 during the window (error counters must not rise)"]
    assert cv.verdict_of(deltas, cv.Limits()) == "fail"
    assert cv.counter_verdict(by_name(deltas, "mlx5_0", "port_xmit_data"), cv.Limits()) == "info"
    text = cv.format_diff(deltas, cv.Limits(), "node3")
    assert "node3: port counters over 10.0 s" in text
    assert "symbol_error" in text and "port_xmit_data" in text and "+5,000,000" in text
    assert "link_downed" not in text  # did not move
    assert text.splitlines()[-1].startswith("  node3 mlx5_3 port 1: symbol_error rose by 12")


def test_counter_reaching_its_cap_is_saturated_during(ib_root):
    fakesysfs.set_counter(ib_root, "mlx5_1", 1, "symbol_error", 65000)
    before = snap_at(ib_root, 0.0)
    fakesysfs.set_counter(ib_root, "mlx5_1", 1, "symbol_error", 65535)
    d = by_name(c.diff(before, snap_at(ib_root, 5.0)), "mlx5_1", "symbol_error")
    assert (d.saturated, d.delta, d.rate) == ("during", None, None)
    assert cv.counter_verdict(d, cv.Limits(errors_max=10**6)) == "fail"
    (line,) = cv.problems([d], cv.Limits(), "node3")
    assert line.startswith("node3 mlx5_1 port 1: symbol_error saturated at 65535 (16-bit) during the window")
    assert "perfquery -R -C mlx5_1 -P 1" in line


def test_counter_at_its_cap_both_times_is_saturated_before(ib_root):
    fakesysfs.set_counter(ib_root, "mlx5_1", 1, "link_downed", 255)
    fakesysfs.set_counter(ib_root, "mlx5_2", 1, "local_link_integrity_errors", 15)
    before = snap_at(ib_root, 0.0)
    deltas = c.diff(before, snap_at(ib_root, 5.0))
    d = by_name(deltas, "mlx5_1", "link_downed")
    assert (d.saturated, d.delta) == ("before", None)
    assert cv.counter_verdict(d, cv.Limits()) == "warn"
    assert by_name(deltas, "mlx5_2", "local_link_integrity_errors").saturated == "before"
    assert cv.problems(deltas, cv.Limits(), "node3")[0] == (
        "node3 mlx5_1 port 1: link_downed saturated at 255 (8-bit) before the window: the rise is unknown; "
        "clear it (perfquery -R -C mlx5_1 -P 1)")
    assert cv.verdict_of(deltas, cv.Limits()) == "warn"


def test_64bit_and_hw_counters_do_not_saturate(ib_root):
    fakesysfs.set_counter(ib_root, "mlx5_0", 1, "out_of_sequence", 2**32 - 1, hw=True)
    before = snap_at(ib_root, 0.0)
    deltas = c.diff(before, snap_at(ib_root, 1.0))
    assert by_name(deltas, "mlx5_0", "out_of_sequence").saturated is None


def test_reset_gives_no_delta(ib_root):
    fakesysfs.set_counter(ib_root, "mlx5_0", 1, "symbol_error", 40)
    fakesysfs.set_counter(ib_root, "mlx5_0", 1, "out_of_sequence", 4_000_000_000, hw=True)
    before = snap_at(ib_root, 0.0)
    fakesysfs.set_counter(ib_root, "mlx5_0", 1, "symbol_error", 0)  # perfquery -R
    fakesysfs.set_counter(ib_root, "mlx5_0", 1, "out_of_sequence", 3, hw=True)  # 32-bit Q-counter wrapped
    deltas = c.diff(before, snap_at(ib_root, 1.0))
    for name, verdict in (("symbol_error", "info"), ("out_of_sequence", "warn")):
        d = by_name(deltas, "mlx5_0", name)
        assert (d.delta, d.rate, d.note, d.saturated) == (None, None, "reset or wrapped", None)
        # a retransmit counter is judged per packet: wrapped, its rate is unknown, and it may have risen
        assert cv.counter_verdict(d, cv.Limits()) == verdict
    assert cv.problems(deltas, cv.Limits(), "node3") == [
        "node3 mlx5_0 port 1: out_of_sequence was reset or wrapped during the window: how far it rose is unknown"]
    assert "reset or wrapped" in cv.format_diff(deltas, cv.Limits(), "node3")


def test_pause_rate_over_the_bound_warns(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=1, gpus=0, link_layer="Ethernet")
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(ethtool_script(tmp_path)))
    before = snap_at(root, 100.0)
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(ethtool_script(
        tmp_path, MLX5_ETHTOOL.replace("rx_prio3_pause: 4200", "rx_prio3_pause: 46200"), name="ethtool2")))
    deltas = c.diff(before, snap_at(root, 110.0))
    d = by_name(deltas, "mlx5_0", "rx_prio3_pause")
    assert (d.delta, d.rate, d.netdev, d.source) == (42000, 4200.0, "ens0f0np0", "ethtool")
    assert cv.counter_verdict(d, cv.Limits()) == "info"  # no bound: recorded only
    assert cv.counter_verdict(d, cv.Limits(pause_rate_max=5000)) == "pass"
    limits = cv.Limits(pause_rate_max=1000)
    assert cv.counter_verdict(d, limits) == "warn"
    (line,) = cv.problems(deltas, limits, "node3")
    assert line.startswith("node3 mlx5_0 port 1: rx_prio3_pause 4,200/s > 1,000/s")
    assert cv.verdict_of(deltas, limits) == "warn"


def test_cnp_and_discard_judgement():
    def delta(name, value, rate=None):
        return c.Delta("mlx5_0", 1, None, name, "hw_counters", counter_kinds.kind_of(name), 64, 0, value or 0, value,
                       None, 1.0, rate)
    assert cv.counter_verdict(delta("np_cnp_sent", 500, 500.0), cv.Limits(cnp_rate_max=100)) == "warn"
    assert cv.counter_verdict(delta("np_cnp_sent", 50, 50.0), cv.Limits(cnp_rate_max=100)) == "pass"
    assert cv.counter_verdict(delta("out_of_buffer", 3), cv.Limits()) == "warn"
    assert cv.counter_verdict(delta("out_of_buffer", 3), cv.Limits(discards_max=3)) == "pass"
    assert cv.counter_verdict(delta("port_xmit_wait", 10**6), cv.Limits()) == "info"


def test_diff_of_two_nodes_raises_naming_both(ib_root):
    a = c.snapshot(ib_root, node="node1")
    b = c.snapshot(ib_root, node="node2")
    with pytest.raises(ValueError, match="node1.*node2"):
        c.diff(a, b)
    with pytest.raises(ValueError, match="not a counters snapshot"):
        c.diff({"ports": []}, b)


def test_ports_and_counters_on_one_side_only_are_notes(ib_root, tmp_path, monkeypatch):
    before = snap_at(ib_root, 0.0)
    fakesysfs.ib_device(ib_root, "mlx5_9", bdf="0000:99:00.0")
    fakesysfs.set_counter(ib_root, "mlx5_0", 1, "new_counter", 1)
    after = snap_at(ib_root, 1.0)
    after["ports"] = [p for p in after["ports"] if p["device"] != "mlx5_1"]
    result = c.diff(before, after)
    assert isinstance(result, c.DiffResult) and isinstance(result, list)
    assert result.node == "node3" and result.seconds == 1.0
    assert {d.device for d in result} == {"mlx5_0", "mlx5_2", "mlx5_3"}
    assert any(n.startswith("mlx5_1 port 1: only in the before snapshot") for n in result.notes)
    assert any(n.startswith("mlx5_9 port 1: only in the after snapshot") for n in result.notes)
    assert "mlx5_0 port 1: 1 counter(s) only in the after snapshot, not compared: new_counter" in result.notes
    text = cv.format_diff(result, cv.Limits(), "node3")
    assert "no counter moved" in text and "notes:" in text


def test_limits_from_profile(tmp_path):
    from acceptance.rules.profile import load_profile
    assert cv.Limits.from_profile(load_profile("local")) == cv.Limits(0, 0, None, None)
    toml = tmp_path / "p.toml"
    toml.write_text('extends = "local"\n[counters]\nerrors_max = 2\ndiscards_max = 5\n'
                    'pause_rate_max = 1000.0\ncnp_rate_max = 50.0\n')
    assert cv.Limits.from_profile(load_profile(toml)) == cv.Limits(2, 5, 1000.0, 50.0)


# ---- records and rails ----------------------------------------------------------------

def test_to_records_details_and_values(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=0, link_layer="Ethernet")
    fakesysfs.set_counter(root, "mlx5_1", 1, "symbol_error", 100)
    fakesysfs.set_counter(root, "mlx5_1", 1, "link_downed", 255)
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(ethtool_script(tmp_path)))
    before = snap_at(root, 0.0)
    fakesysfs.set_counter(root, "mlx5_1", 1, "symbol_error", 65535)
    fakesysfs.set_counter(root, "mlx5_0", 1, "port_rcv_errors", 7)
    fakesysfs.set_counter(root, "mlx5_0", 1, "rp_cnp_handled", 300, hw=True)
    fakesysfs.set_counter(root, "mlx5_0", 1, "out_of_sequence", 0, hw=True)
    deltas = c.diff(before, snap_at(root, 10.0))
    limits = cv.Limits(pause_rate_max=1000.0)
    recs = cv.to_records(deltas, limits, {"mlx5_0": 0, "mlx5_1": 1})
    assert not {counter_kinds.kind_of(r["metric"].removesuffix("_rate").removesuffix("_ppm").removesuffix("_ber")) for r in recs} & {"data", "other"}
    get = {(r["detail"].split(";")[0], r["metric"]): r for r in recs}
    assert get[("mlx5_0 port 1", "port_rcv_errors")] == {
        "metric": "port_rcv_errors", "value": 7, "unit": "count", "rail": 0, "threshold": 0, "verdict": "fail",
        "samples": 1, "detail": "mlx5_0 port 1", "device": "mlx5_0", "port": 1, "saturated": None}
    sat = get[("mlx5_1 port 1", "symbol_error")]
    assert (sat["value"], sat["verdict"], sat["rail"]) == (None, "fail", 1)
    assert sat["detail"] == "mlx5_1 port 1; saturated at 65535 (16-bit) during the window"
    assert get[("mlx5_1 port 1", "link_downed")]["detail"] == "mlx5_1 port 1; saturated before the window"
    cnp, cnp_rate = get[("mlx5_0 port 1", "rp_cnp_handled")], get[("mlx5_0 port 1", "rp_cnp_handled_rate")]
    assert (cnp["value"], cnp["unit"], cnp["verdict"]) == (300, "count", "info")
    assert (cnp_rate["value"], cnp_rate["unit"], cnp_rate["threshold"], cnp_rate["verdict"]) == (30.0, "1/s", None, "info")
    pause_rate = get[("mlx5_0 port 1", "rx_prio3_pause_rate")]
    assert (pause_rate["value"], pause_rate["threshold"], pause_rate["verdict"]) == (0.0, 1000.0, "pass")
    assert get[("mlx5_0 port 1", "tx_prio3_pause_duration")]["unit"] == "us"
    assert get[("mlx5_0 port 1", "port_xmit_wait")]["verdict"] == "info"
    assert get[("mlx5_0 port 1", "rx_corrected_bits_phy")]["value"] == 0
    assert all(r["detail"].startswith(("mlx5_0 port 1", "mlx5_1 port 1")) for r in recs)
    for r in recs:  # every dict is a valid record for the suites' record(metric, value, unit, **fields)
        make_record(test="t", suite="counters", nodes=["node3"], ranks=[0], **r)
    assert cv.to_records(deltas, limits, {})[0]["rail"] is None


def test_to_records_reset_detail():
    d = c.Delta("mlx5_4", 1, None, "symbol_error", "counters", "error", 16, 9, 0, None, None, 1.0, None,
                "reset or wrapped")
    (r,) = cv.to_records([d], cv.Limits(), {})
    assert (r["detail"], r["value"], r["verdict"]) == ("mlx5_4 port 1; reset or wrapped", None, "info")


def test_rails_of():
    devs = [f"mlx5_{i}" for i in (10, 2, 0, 1)]
    # profile map first
    assert c.rails_of(["mlx5_0", "mlx5_1"], {"mlx5_0": 1, "mlx5_1": 0}, {0: "mlx5_0"}, [0, 1]) == {
        "mlx5_0": 1, "mlx5_1": 0}
    # then the device each rail's rank was bound to
    assert c.rails_of(["mlx5_0", "mlx5_4", "mlx5_5"], {}, {0: "mlx5_4", 1: "mlx5_5"}, [0, 1]) == {
        "mlx5_0": None, "mlx5_4": 0, "mlx5_5": 1}
    # as many devices as rails: natural order (mlx5_2 before mlx5_10)
    assert c.rails_of(devs, {}, None, [0, 1, 2, 3]) == {"mlx5_0": 0, "mlx5_1": 1, "mlx5_2": 2, "mlx5_10": 3}
    # a storage NIC beyond the rails: nothing to go by
    assert c.rails_of(devs, {}, None, [0, 1]) == dict.fromkeys(devs)
    assert c.rails_of(devs, {"mlx5_10": 7}, {}, [0, 1]) == {"mlx5_0": None, "mlx5_1": None, "mlx5_2": None,
                                                           "mlx5_10": 7}


def test_rxe_ports_and_counters_read_as_the_kernel_lays_them_out(tmp_path):
    """Soft-RoCE: no PMA counters folder, rxe's own hw_counters, the netdev from the GID's ndev."""
    root = fakesysfs.rxe_device(tmp_path, "rxe_n1r0", netdev="n1r0", address="198.18.1.1")
    (port,) = sysfs.ports(root)
    assert (port.device, port.netdev, port.link_layer, port.state, port.rate) == (
        "rxe_n1r0", "n1r0", "Ethernet", "4: ACTIVE", "10 Gb/sec (1X FDR10)")
    before = c.snapshot(root, ethtool=False, node="node1")
    assert before["problems"] == []
    kinds = {name: counter_kinds.kind_of(name) for name in before["ports"][0]["counters"]}
    assert {n for n, k in kinds.items() if k == "error"} == {"link_downed", "retry_exceeded_err", "send_err"}
    assert {n for n, k in kinds.items() if k == "retransmit"} == {
        "completer_retry_err", "duplicate_request", "out_of_seq_request", "rcvd_seq_err"}
    # Receiver Not Ready: the peer application had no receive posted
    assert {n for n, k in kinds.items() if k == "app"} == {"rcvd_rnr_err", "send_rnr_err", "retry_rnr_exceeded_err"}
    assert {n for n, k in kinds.items() if k == "data"} == {"rcvd_pkts", "sent_pkts", "rdma_recvs", "rdma_sends"}
    assert {n for n, k in kinds.items() if k == "other"} == {"ack_deferred"}
    fakesysfs.set_counter(root, "rxe_n1r0", 1, "out_of_seq_request", 12, hw=True)
    fakesysfs.set_counter(root, "rxe_n1r0", 1, "sent_pkts", 5000, hw=True)
    deltas = c.diff(before, c.snapshot(root, ethtool=False, node="node1"))
    # judged per packet: 12 of the port's 5,000 (sent_pkts + rcvd_pkts) is 2,400 per million
    assert cv.problems(deltas, cv.Limits(), "node1") == [
        "node1 rxe_n1r0 port 1: out_of_seq_request rose by 12 during the window, 2,400 per million of the "
        "port's 5,000 packets (more than the 0 allowed: lost or late packets)"]
    recs = cv.to_records(deltas, cv.Limits(), {"rxe_n1r0": 0})
    assert {(r["metric"], r["value"], r["verdict"], r["rail"]) for r in recs if r["value"]} == {
        ("out_of_seq_request", 12, "info", 0), ("out_of_seq_request_ppm", 2400.0, "fail", 0)}
    assert cv.problems(deltas, cv.Limits(retransmit_ppm_max=2400.0), "node1") == []


# `ethtool -S` of a ConnectX-7 400G RoCE port (400GAUI-4: four 100G PAM4 lanes; mlx5 lists lane
# counters the port does not use, at 0 for ever), the PHY part as mlx5 prints it.
CX7_400G = """\
NIC statistics:
     rx_packets_phy: {packets}
     tx_packets_phy: {packets}
     rx_crc_errors_phy: {crc}
     rx_symbol_err_phy: 0
     rx_pcs_symbol_err_phy: 0
     rx_corrected_bits_phy: {corrected}
     rx_err_lane_0_phy: {lane}
     rx_err_lane_1_phy: {lane}
     rx_err_lane_2_phy: {lane}
     rx_err_lane_3_phy: {lane}
     rx_err_lane_4_phy: 0
     rx_err_lane_5_phy: 0
     rx_err_lane_6_phy: 0
     rx_err_lane_7_phy: 0
     rx_bits_phy: {bits}
     link_down_events_phy: 0
"""


def cx7_window(tmp_path, monkeypatch, ber: float, crc: int = 0, seconds: float = 10.0):
    """Counter changes of one 400G port over `seconds` at line rate, its lanes at pre-FEC `ber`."""
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=1, gpus=0, link_layer="Ethernet")
    start = dict(packets=10**9, crc=0, corrected=7 * 10**9, lane=2 * 10**9, bits=10**17)
    script = ethtool_script(tmp_path, CX7_400G.format(**start))
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(script))
    before = snap_at(root, 0.0)
    bits = int(400e9 * seconds)
    lane = int(ber * bits / 4)
    (tmp_path / "ethtool.out").write_text(CX7_400G.format(
        packets=start["packets"] + 10**8, crc=crc, corrected=start["corrected"] + 4 * lane,
        lane=start["lane"] + lane, bits=start["bits"] + bits))
    return c.diff(before, snap_at(root, seconds))


@pytest.mark.parametrize("ber, verdict", [(1e-7, "pass"), (1e-4, "warn"), (5e-4, "fail")])
def test_pre_fec_errors_are_judged_as_a_bit_error_rate_not_a_count(tmp_path, monkeypatch, ber, verdict):
    deltas = cx7_window(tmp_path, monkeypatch, ber)
    lane = by_name(deltas, "mlx5_0", "rx_err_lane_0_phy")
    assert lane.kind == "pre_fec" and lane.delta > 0
    assert lane.bits == int(400e9 * 10) // 4  # the port's bits over its 4 active lanes (of 8 listed)
    assert lane.ber == pytest.approx(ber, rel=1e-6)
    assert by_name(deltas, "mlx5_0", "rx_corrected_bits_phy").ber == pytest.approx(ber, rel=1e-6)
    assert by_name(deltas, "mlx5_0", "rx_err_lane_5_phy").ber == 0.0
    limits = cv.Limits()
    assert cv.verdict_of(deltas, limits) == verdict
    recs = {r["metric"]: r for r in cv.to_records(deltas, limits, {"mlx5_0": 0})}
    assert recs["rx_err_lane_0_phy"]["verdict"] == "info"  # the count is information; its rate is judged
    rated = recs["rx_err_lane_0_phy_ber"]
    assert (rated["unit"], rated["threshold"], rated["verdict"]) == ("errors/bit", 2.4e-4, verdict)
    assert rated["value"] == pytest.approx(ber, rel=1e-6)
    said = cv.problems(deltas, limits, "node3")
    if verdict == "pass":
        assert said == []
    else:
        assert any(line.startswith("node3 mlx5_0 port 1: rx_err_lane_0_phy: pre-FEC bit error rate ")
                   for line in said), said


def test_a_crc_error_after_fec_fails_whatever_the_pre_fec_rate(tmp_path, monkeypatch):
    deltas = cx7_window(tmp_path, monkeypatch, 1e-7, crc=3)
    assert by_name(deltas, "mlx5_0", "rx_crc_errors_phy").kind == "error"
    assert cv.verdict_of(deltas, cv.Limits()) == "fail"
    assert cv.problems(deltas, cv.Limits(), "node3") == [
        "node3 mlx5_0 port 1: rx_crc_errors_phy rose by 3 during the window (error counters must not rise)"]


LANES_ONLY = "NIC statistics:\n     rx_err_lane_0_phy: {}\n     rx_corrected_bits_phy: {}\n"  # no rx_bits_phy


def lanes_window(tmp_path, monkeypatch, rate="200 Gb/sec (4X HDR)", change=None):
    """Counter changes of one RoCE port whose `ethtool -S` has lane counters but no rx_bits_phy (as the
    upstream mlx5 driver prints it): 495 more errors on lane 0 and in rx_corrected_bits_phy over 10 s."""
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=1, gpus=0, link_layer="Ethernet", rate=rate)
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(ethtool_script(tmp_path, LANES_ONLY.format(5, 5))))
    before = snap_at(root, 0.0)
    (tmp_path / "ethtool.out").write_text(LANES_ONLY.format(500, 500))
    if change:
        change(root)
    return before, snap_at(root, 10.0)


def test_pre_fec_errors_without_rx_bits_phy_are_rated_against_the_port_rate(tmp_path, monkeypatch):
    """A 200G port (4 lanes of 50G) up for 10 s received 2e12 bits, 5e11 a lane: 495 errors are a BER of
    about 1e-9 on the lane and 2.5e-10 on the port, a healthy PAM4 link, not "bits unknown"."""
    before, after = lanes_window(tmp_path, monkeypatch)
    assert (after["ports"][0]["rate_gbps"], after["ports"][0]["lanes"]) == (200.0, 4)
    deltas = c.diff(before, after)
    lane, port = by_name(deltas, "mlx5_0", "rx_err_lane_0_phy"), by_name(deltas, "mlx5_0", "rx_corrected_bits_phy")
    assert (lane.bits, lane.bits_from, lane.ber) == (5 * 10**11, "rate", pytest.approx(495 / 5e11))
    assert (port.bits, port.bits_from, port.ber) == (2 * 10**12, "rate", pytest.approx(495 / 2e12))
    assert lane.note == "bits from the port's rate, 200 Gb/sec over 4 lanes for 10.0 s (no rx_bits_phy)"
    assert cv.verdict_of(deltas, cv.Limits()) == "pass" and cv.problems(deltas, cv.Limits(), "node3") == []
    recs = {r["metric"]: r for r in cv.to_records(deltas, cv.Limits(), {})}
    assert recs["rx_err_lane_0_phy_ber"]["detail"] == (
        "mlx5_0 port 1; bits from the port's rate, 200 Gb/sec over 4 lanes for 10.0 s (no rx_bits_phy); "
        "500,000,000,000 bits")
    # a lane past what FEC corrects fails, and says where its bits came from
    (tmp_path / "ethtool.out").write_text(LANES_ONLY.format(5 + 2 * 10**8, 5))
    failing = c.diff(before, snap_at(Path(before["sysfs_root"]), 10.0))
    (line,) = cv.problems(failing, cv.Limits(), "node3")
    assert line.startswith("node3 mlx5_0 port 1: rx_err_lane_0_phy: pre-FEC bit error rate 0.0004 (200,000,000 "
                           "errors in 500,000,000,000 bits, bits from the port's rate, 200 Gb/sec over 4 lanes")


@pytest.mark.parametrize("rate, change, why", [
    ("", None, "the port's rate is unknown"),
    ("400 Gb/sec (4X NDR)", lambda root: fakesysfs.set_port(root, "mlx5_0", 1, rate="200 Gb/sec (4X HDR)"),
     "the port's rate changed during the window (400 -> 200 Gb/sec)"),
    ("200 Gb/sec (4X HDR)", lambda root: fakesysfs.set_port(root, "mlx5_0", 1, state="1: DOWN"),
     "the port was not ACTIVE throughout the window (1: DOWN -> 4: ACTIVE)"),
])
def test_pre_fec_errors_warn_only_when_neither_rx_bits_phy_nor_the_rate_tells_the_bits(tmp_path, monkeypatch,
                                                                                        rate, change, why):
    before, after = lanes_window(tmp_path, monkeypatch, rate, change)
    deltas = c.diff(before, after)
    lane = by_name(deltas, "mlx5_0", "rx_err_lane_0_phy")
    assert (lane.bits, lane.ber, lane.bits_from) == (None, None, None)
    assert cv.verdict_of(deltas, cv.Limits()) == "warn"
    assert cv.problems(deltas, cv.Limits(), "node3")[0] == (
        f"node3 mlx5_0 port 1: rx_err_lane_0_phy rose by 495 during the window, and the bits received are "
        f"unknown (no rx_bits_phy, and {why}): its pre-FEC bit error rate cannot be judged")


def test_snapshots_without_the_rate_fields_still_diff(tmp_path, monkeypatch):
    """Snapshots written before ports carried rate_gbps and lanes (and notes): the rate text is parsed;
    with no rate at all the lane's bits are unknown, never an exception."""
    before, after = lanes_window(tmp_path, monkeypatch)
    for snap in (before, after):
        del snap["notes"]
        for port in snap["ports"]:
            del port["rate_gbps"], port["lanes"]
    assert c.check_snapshot(before) is None
    lane = by_name(c.diff(before, after), "mlx5_0", "rx_err_lane_0_phy")
    assert (lane.bits, lane.bits_from) == (5 * 10**11, "rate")
    for snap in (before, after):
        del snap["ports"][0]["rate"]
    lane = by_name(c.diff(before, after), "mlx5_0", "rx_err_lane_0_phy")
    assert (lane.bits, lane.note) == (None, "bits received unknown: no rx_bits_phy, and the port's rate is unknown")


def test_rx_bits_phy_is_used_where_the_driver_has_it(tmp_path, monkeypatch):
    deltas = cx7_window(tmp_path, monkeypatch, 1e-7)
    lane = by_name(deltas, "mlx5_0", "rx_err_lane_0_phy")
    assert (lane.bits_from, lane.note) == ("rx_bits_phy", "bits from rx_bits_phy over 4 lanes")
    assert by_name(deltas, "mlx5_0", "rx_corrected_bits_phy").note == "bits from rx_bits_phy"


# ---- what a counter means -------------------------------------------------------------------------

def roce_window(tmp_path, **hw):
    """Counter changes of a 2-NIC RoCE node (no ethtool) over 10 s in which hw_counters rose by `hw`."""
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=0, link_layer="Ethernet")
    before = snap_at(root, 0.0, ethtool=False)
    for name, value in hw.items():
        fakesysfs.set_counter(root, "mlx5_1", 1, name, value, hw=True)
    return c.diff(before, snap_at(root, 10.0, ethtool=False))


def test_roce_packets_that_failed_their_icrc_fail_the_port(tmp_path):
    deltas = roce_window(tmp_path, rx_icrc_encapsulated=3)
    d = by_name(deltas, "mlx5_1", "rx_icrc_encapsulated")
    assert (d.kind, d.width, d.delta) == ("error", 64, 3)
    assert cv.verdict_of(deltas, cv.Limits()) == "fail"
    assert cv.problems(deltas, cv.Limits(), "node3") == [
        "node3 mlx5_1 port 1: rx_icrc_encapsulated rose by 3 during the window (error counters must not rise)"]


def test_an_applications_own_errors_are_information_shown_and_recorded(tmp_path):
    """A receive buffer too small (resp_local_length_error), a wrong rkey (req_remote_access_errors), the
    work requests that completed in error for them (the CQE error totals), a peer with no receive posted
    (rnr_nak_retry_err): the application's, not the node's."""
    deltas = roce_window(tmp_path, resp_local_length_error=1, req_remote_access_errors=4, resp_cqe_error=1,
                         req_cqe_error=4, rnr_nak_retry_err=30)
    limits = cv.Limits()
    for name in ("resp_local_length_error", "req_remote_access_errors", "resp_cqe_error", "req_cqe_error",
                 "rnr_nak_retry_err"):
        d = by_name(deltas, "mlx5_1", name)
        assert d.kind == "app" and d.delta > 0 and cv.counter_verdict(d, limits) == "info"
    assert cv.verdict_of(deltas, limits) == "pass" and cv.problems(deltas, limits, "node3") == []
    recs = {r["metric"]: r for r in cv.to_records(deltas, limits, {"mlx5_1": 1}) if r["device"] == "mlx5_1"}
    assert recs["resp_local_length_error"] == {
        "metric": "resp_local_length_error", "value": 1, "unit": "count", "threshold": None, "verdict": "info",
        "rail": 1, "samples": 1, "detail": "mlx5_1 port 1", "device": "mlx5_1", "port": 1, "saturated": None}
    rows = [line.split() for line in cv.format_diff(deltas, limits, "node3").splitlines()]
    assert rows[1] == ["device", "port", "counter", "kind", "class", "delta", "rate", "verdict"]
    assert ["mlx5_1", "1", "resp_local_length_error", "app", "application", "+1", "0.1/s", "info"] in rows
