"""Port counter windows end to end: real snapshots of sysfs-shaped trees -> records -> findings."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fakesysfs
import synthetic

from acceptance.host import counters
from acceptance.rules import counter_verdicts
from acceptance.host import ethtool, sysfs
from acceptance.analysis import analyze, drain_lines
from acceptance.rules.profile import load_profile
from acceptance.records.results import Recorder

TEST = "suites/test_rdma_write.py"


@pytest.fixture
def node_tree(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=4, gpus=0)
    monkeypatch.setenv(sysfs.ENV_SYSFS_ROOT, str(root))
    monkeypatch.setenv(ethtool.ENV_ETHTOOL, str(tmp_path / "no-ethtool"))
    monkeypatch.setenv("SLURMD_NODENAME", "node03")
    return root


def window(change, profile_name="local"):
    """Records of one counter window on node03 (4 NICs = rails 0..3) around change()."""
    prof = load_profile(profile_name)
    limits = counter_verdicts.Limits.from_profile(prof)
    before = counters.snapshot()
    change()
    after = counters.snapshot()
    rails = counters.rails_of([p.device for p in sysfs.ports()], {}, None, [0, 1, 2, 3])
    rec = Recorder(0, "node03", None)
    record = rec.bind(TEST, "counters")
    for kw in counter_verdicts.to_records(counters.diff(before, after), limits, rails):
        record(kw.pop("metric"), kw.pop("value"), kw.pop("unit"), **kw)
    return rec.take()


def analyzed(tmp_path, extra):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=4, latency=False, collectives=False, memreg=False)
    with open(run / "results.jsonl", "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in extra)
    return analyze(run)


def test_rising_symbol_error_is_a_nic_finding_naming_node_device_port(tmp_path, node_tree):
    recs = window(lambda: fakesysfs.set_counter(node_tree, "mlx5_2", 1, "symbol_error", 12))
    sym = [r for r in recs if r["metric"] == "symbol_error"]
    assert len(sym) == 4 and {r["verdict"] for r in sym} == {"pass", "fail"}
    a = analyzed(tmp_path, recs)
    found = [f for f in a.findings if f["kind"] == "counter"]
    assert len(found) == 1
    f = found[0]
    assert (f["severity"], f["scope"], f["node"], f["rail"], f["metric"], f["value"]) == \
        ("fail", "nic", "node03", 2, "symbol_error", 12.0)
    assert f["message"].startswith("node03 mlx5_2 port 1 (rail 2): symbol_error rose by 12")
    assert any(d.line.startswith("scontrol update NodeName=node03 ") for d in drain_lines(a.findings))


def test_saturated_counter_is_reported_as_saturated_not_a_delta(tmp_path, node_tree):
    recs = window(lambda: fakesysfs.set_counter(node_tree, "mlx5_0", 1, "link_downed", 255))
    ld = next(r for r in recs if r["metric"] == "link_downed" and r["detail"].startswith("mlx5_0 "))
    assert ld["value"] is None and "saturated at 255 (8-bit) during the window" in ld["detail"]
    f = next(f for f in analyzed(tmp_path, recs).findings if f["kind"] == "counter")
    assert f["severity"] == "fail" and "saturated" in f["message"] and f["value"] is None


def test_counter_already_saturated_warns(tmp_path, node_tree):
    fakesysfs.set_counter(node_tree, "mlx5_1", 1, "symbol_error", 65535)
    recs = window(lambda: None)
    f = next(f for f in analyzed(tmp_path, recs).findings if f["kind"] == "counter")
    assert (f["severity"], f["node"], f["rail"]) == ("warn", "node03", 1)
    assert "saturated before the window" in f["message"]


def test_quiet_counters_make_no_finding(tmp_path, node_tree):
    recs = window(lambda: None)
    assert recs and {r["verdict"] for r in recs} <= {"pass", "info"}
    assert not [f for f in analyzed(tmp_path, recs).findings if f["kind"] == "counter"]


def test_pause_rate_above_the_profile_bound_warns(tmp_path, node_tree):
    prof = tmp_path / "p.toml"
    prof.write_text('extends = "local"\n[counters]\npause_rate_max = 10.0\n')
    recs = window(lambda: fakesysfs.set_counter(node_tree, "mlx5_3", 1, "np_cnp_sent", 0, hw=True))
    rec = dict(recs[0], metric="rx_prio3_pause_rate", unit="1/s", value=5000.0, detail="mlx5_3 port 1", rail=3)
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=4, latency=False, collectives=False, memreg=False)
    with open(run / "results.jsonl", "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    f = next(f for f in analyze(run, profile=str(prof)).findings if f["kind"] == "counter")
    assert (f["severity"], f["node"], f["rail"]) == ("warn", "node03", 3)
    assert "rx_prio3_pause_rate 5,000/s > 10/s" in f["message"] or "5000" in f["message"]


def test_retransmissions_are_judged_per_million_packets_of_their_port(tmp_path, node_tree):
    """30 out_of_sequence in 30,000 packets (sent + received) of mlx5_1 is 1,000 per million: a NIC finding
    under a profile that allows none, nothing under one that allows 2,000."""
    def change():
        fakesysfs.set_counter(node_tree, "mlx5_1", 1, "out_of_sequence", 30, hw=True)
        fakesysfs.set_counter(node_tree, "mlx5_1", 1, "port_xmit_packets", 10_000)
        fakesysfs.set_counter(node_tree, "mlx5_1", 1, "port_rcv_packets", 20_000)
    recs = window(change)
    (ppm,) = [r for r in recs if r["metric"] == "out_of_sequence_ppm" and r["device"] == "mlx5_1"]
    assert (ppm["value"], ppm["unit"], ppm["verdict"]) == (pytest.approx(1000.0), "ppm", "fail")
    assert ppm["detail"] == "mlx5_1 port 1; 30,000 packets"
    assert {r["verdict"] for r in recs if r["metric"] == "out_of_sequence"} == {"info"}
    (f,) = [f for f in analyzed(tmp_path, recs).findings if f["kind"] == "counter"]
    assert (f["node"], f["rail"], f["metric"], f["severity"]) == ("node03", 1, "out_of_sequence_ppm", "fail")
    assert "node03 mlx5_1 port 1 (rail 1): out_of_sequence 1000.0 per million packets (bound 0)" in f["message"]
    assert "packets lost or late" in f["message"]

    toml = tmp_path / "allows.toml"
    toml.write_text('extends = "local"\n[counters]\nretransmit_ppm_max = 2000\n')
    relaxed = [r for r in window(change, str(toml)) if r["metric"] == "out_of_sequence_ppm"]
    assert relaxed and {r["verdict"] for r in relaxed} == {"pass"}


def test_a_schema_2_folder_judges_retransmission_counts_as_errors_as_it_did(tmp_path, node_tree):
    """Schema 2 recorded retransmission counters' counts only, judged by errors_max: re-analysis keeps
    that rule for such folders (its per-packet records are not there to judge) and only for them."""
    recs = [r for r in window(lambda: fakesysfs.set_counter(node_tree, "mlx5_1", 1, "out_of_sequence", 30, hw=True))
            if not r["metric"].endswith("_ppm")]  # what a schema 2 window left
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=4, latency=False, collectives=False, memreg=False)
    with open(run / "results.jsonl", "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in recs)
    assert not [f for f in analyze(run).findings if f["kind"] == "counter"]  # schema 3: the count is information
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "schema": 2}))
    (f,) = [f for f in analyze(run).findings if f["kind"] == "counter"]
    assert (f["node"], f["rail"], f["metric"], f["severity"], f["value"]) == ("node03", 1, "out_of_sequence", "fail", 30.0)


def test_an_applications_own_error_is_recorded_and_drains_nothing(tmp_path, node_tree):
    """A program posted a receive buffer too small (resp_local_length_error) and a wrong rkey
    (req_remote_access_errors): recorded as information, no finding, no drain line."""
    def change():
        fakesysfs.set_counter(node_tree, "mlx5_2", 1, "resp_local_length_error", 1, hw=True)
        fakesysfs.set_counter(node_tree, "mlx5_2", 1, "req_remote_access_errors", 3, hw=True)
    recs = window(change)
    mine = {r["metric"]: r for r in recs if r["device"] == "mlx5_2" and r["metric"].startswith(("resp_", "req_"))}
    assert (mine["resp_local_length_error"]["value"], mine["resp_local_length_error"]["verdict"]) == (1, "info")
    assert (mine["req_remote_access_errors"]["value"], mine["req_remote_access_errors"]["verdict"]) == (3, "info")
    a = analyzed(tmp_path, recs)
    assert not [f for f in a.findings if f["kind"] == "counter"]
    assert not [d for d in drain_lines(a.findings) if "node03" in d.line]
