"""RoCE's traffic class and lossless class (acceptance.host.roce), on outputs shaped as iproute2's dcb
prints them and MLNX_OFED's ECN sysfs (tests/fakesysfs.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs

from acceptance.host import roce


def test_the_traffic_class_is_the_profiles_else_nccls_else_0():
    assert roce.traffic_class(96, {"NCCL_IB_TC": "106"}) == (96, "verbs.traffic_class")
    assert roce.traffic_class(None, {"NCCL_IB_TC": "106"}) == (106, "NCCL_IB_TC")
    assert roce.traffic_class(None, {"NCCL_IB_TC": "0x6a"}) == (106, "NCCL_IB_TC")
    assert roce.traffic_class(None, {}) == (0, "default")
    with pytest.raises(ValueError, match="NCCL_IB_TC='high': expected an integer traffic class 0..255"):
        roce.traffic_class(None, {"NCCL_IB_TC": "high"})


def test_a_dscp_maps_to_its_priority_through_the_table_or_by_default():
    assert roce.priority_of(106, {}) == 3             # DSCP 26, mlx5's default table: 26 // 8
    assert roce.priority_of(106, {26: 5}) == 5
    assert roce.priority_of(107, {26: 5}) == 5        # DSCP 26 too: the low two bits are ECN, not DSCP
    assert roce.priority_of(0, {}) == 0


@pytest.fixture
def port(tmp_path, monkeypatch):
    root = fakesysfs.ecn(tmp_path / "sys", "ens1f0np0", np=(3,), rp=(3,))
    script = fakesysfs.dcb_standin(tmp_path / "bin", {"ens1f0np0": ((3,), {26: 3, 48: 6})})
    monkeypatch.setenv("ACCEPTANCE_DCB", str(script))
    return root


def test_a_lossless_port_reads_whole(port):
    q = roce.read_qos(port, "ens1f0np0")
    assert (q.pfc, q.trust, q.dscp_prio, q.ecn_np, q.ecn_rp, q.problems) == (
        (3,), "dscp", ((26, 3), (48, 6)), (3,), (3,), ())
    assert q.summary() == "PFC on 3; trust dscp; ECN notification on 3, reaction on 3"
    assert any(r.endswith("-j pfc show dev ens1f0np0") for r in q.read)
    assert str(port / "class/net/ens1f0np0/ecn/roce_np/enable") + "/{0..7}" in q.read
    assert q.lossless_problems(106) == []
    assert q.lossless_problems(0) == [  # DSCP 0 -> priority 0: neither paused nor marked
        "ens1f0np0: traffic class 0 (DSCP 0) maps to priority 0, which has no PFC (PFC on 3)",
        "ens1f0np0: ECN notification point (roce_np) off on priority 0",
        "ens1f0np0: ECN reaction point (roce_rp) off on priority 0"]


def test_what_cannot_be_read_is_named_and_never_lossless(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEPTANCE_DCB", str(tmp_path / "no-dcb"))
    q = roce.read_qos(tmp_path / "sys", "eth0")
    assert (q.pfc, q.trust, q.ecn_np) == (None, None, None)
    assert q.summary() == "PFC on unreadable; trust unreadable; ECN notification on unreadable, reaction on unreadable"
    assert any("not found on PATH" in p for p in q.problems) and any("MLNX_OFED" in p for p in q.problems)
    assert q.lossless_problems(106)[0].startswith("eth0: PFC or trust unreadable: ")
