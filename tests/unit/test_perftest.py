"""perftest cross-check: report parsing, command lines, records, and server + client runs with stand-in tools.

The reports under tests/data/perftest/ are shaped exactly as perftest 6.06 (Debian) and
6.29 write them (see the README there). The stand-in tools (fake_perftest.py behind
shell wrappers named ib_write_bw / ib_write_lat) really listen and connect over TCP,
so the readiness wait, the port choice and the timeouts are exercised for real.
"""
import json
import queue
import re
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from acceptance.tools import perftest
from acceptance.tools.perftest import process as perftest_process
from acceptance.tools.perftest import (
    BwResult,
    LatResult,
    PerftestError,
    PerftestParseError,
    Spec,
    bw_command,
    lat_command,
    parse_bw,
    parse_lat,
    records_for,
)
from acceptance.records.results import Recorder, make_record
from acceptance.rules.profile import load_profile

DATA = Path(__file__).resolve().parents[1] / "data" / "perftest"
FAKE = DATA / "fake_perftest.py"


def text(name: str) -> str:
    return (DATA / name).read_text()


# ---- parsing: the fixtures into their exact numbers ------------------------------------

BW_FIXTURES = {
    "ib_write_bw_ndr.json": BwResult(size=8388608, iterations=17496, peak_gbps=0.0, avg_gbps=391.38,
                                     msg_rate_mpps=0.005832),
    "ib_write_bw_ndr_legacy.json": BwResult(size=8388608, iterations=5000, peak_gbps=392.14, avg_gbps=391.62,
                                            msg_rate_mpps=0.005836),
    "ib_write_bw.txt": BwResult(size=8388608, iterations=17490, peak_gbps=0.0, avg_gbps=391.24,
                                msg_rate_mpps=0.005830),
}
LAT_FIXTURES = {
    "ib_write_lat_ndr.json": LatResult(size=8, iterations=100000, t_min_us=0.99, t_max_us=5.12, t_typical_us=1.04,
                                       t_avg_us=1.05, t_stdev_us=0.02, p99_us=1.12, p999_us=2.31),
    "ib_write_lat_ndr_legacy.json": LatResult(size=8, iterations=10000, t_min_us=1.01, t_max_us=4.86,
                                              t_typical_us=1.05, t_avg_us=1.06, t_stdev_us=0.03, p99_us=1.14,
                                              p999_us=2.71),
    "ib_write_lat.txt": LatResult(size=8, iterations=10000, t_min_us=1.01, t_max_us=4.86, t_typical_us=1.05,
                                  t_avg_us=1.06, t_stdev_us=0.03, p99_us=1.14, p999_us=2.71),
}


@pytest.mark.parametrize("name", sorted(BW_FIXTURES))
def test_bw_fixtures_parse_into_their_numbers(name):
    assert parse_bw(text(name)) == BW_FIXTURES[name]


@pytest.mark.parametrize("name", sorted(LAT_FIXTURES))
def test_lat_fixtures_parse_into_their_numbers(name):
    got = parse_lat(text(name))
    assert got == LAT_FIXTURES[name]
    assert got.samples == got.iterations - 3  # perftest drops 1 (deltas) + the 2 largest


def test_the_legacy_dialect_is_not_json_and_the_new_one_is():
    for name in ("ib_write_bw_ndr_legacy.json", "ib_write_lat_ndr_legacy.json"):
        with pytest.raises(ValueError):
            json.loads(text(name))
    for name in ("ib_write_bw_ndr.json", "ib_write_lat_ndr.json"):
        assert set(json.loads(text(name))) == {"test_info", "results"}


def test_text_report_in_mib_per_s_is_converted_and_the_last_row_of_a_sweep_wins():
    report = ("---------------------------------------------------------------------------------------\n"
              " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
              " 4194304    5000             46678.12            46651.80\t\t   0.011663\n"
              " 8388608    5000             46701.55            46688.31\t\t   0.005836\n"
              "---------------------------------------------------------------------------------------\n")
    got = parse_bw(report)
    assert got.size == 8388608 and got.iterations == 5000
    assert got.avg_gbps == pytest.approx(46688.31 * 2**20 * 8 / 1e9)  # 391.65 Gbit/s
    assert got.peak_gbps == pytest.approx(46701.55 * 2**20 * 8 / 1e9)
    assert got.msg_rate_mpps == 0.005836


def test_roce_legacy_report_with_warnings_and_gid_index():
    report = ("{\ntest_info: {\ntest: RDMA_Write_BW_Test,\nTest with events: Using_mlx5_2_comp0,\n"
              "Device: \"mlx5_2\",\nPCIe_relax_order: ON,\n"
              "WARNING1: \"CPU is not PCIe relaxed ordering compliant\",\n"
              "WARNING2: \"You should disable PCIe RO with --disable_pcie_relaxed for both server and client\",\n"
              "TX_depth : 128,\nLink_type: Ethernet,\nGID_index: 3,\nData_ex_method: Ethernet,\n},\n"
              "results: {\nMsgSize: 65536,\nn_iterations: 5000,\nBW_peak: 97.12,\nBW_average: 96.98,\n"
              "MsgRate: 0.184967,\nCPU_util: 12.50,\n},\n}\n")
    assert parse_bw(report) == BwResult(65536, 5000, 97.12, 96.98, 0.184967)


def test_standard_json_written_on_one_line_parses_too():
    doc = json.loads(text("ib_write_lat_ndr.json"))
    assert parse_lat(json.dumps(doc)) == LAT_FIXTURES["ib_write_lat_ndr.json"]


# ---- parsing: text reports shaped as real ones users paste (the README names them) ----------------

MIB = 2**20 * 8 / 1e9
CPU_FREQ = "Conflicting CPU frequency values detected: 2601.000000 != 1199.882000. CPU Frequency is not max.\n"


def test_a_sweep_with_perftests_cpu_frequency_warning_inside_its_table():
    """perftest prints the warning on stderr, so a pasted report has it between two rows. It is not a
    row, and the rows around it keep their numbers (perftest then times with the TSC rate it sampled,
    src/get_clock.c, so they are not wrong)."""
    report = text("ib_read_bw_a_mlx4_cpufreq.txt")
    assert CPU_FREQ in report
    last = BwResult(8388608, 20000, pytest.approx(6044.76 * MIB), pytest.approx(6010.24 * MIB), 0.000751)
    assert parse_bw(report) == last
    before = report[:report.index(CPU_FREQ) + len(CPU_FREQ)]  # the report as far as the warning
    assert parse_bw(before) == BwResult(524288, 20000, pytest.approx(6018.41 * MIB), pytest.approx(5992.78 * MIB),
                                        0.011986)
    # perftest may print it before the first row too, once per size
    header = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
    assert parse_bw(report.replace(header, header + CPU_FREQ * 2)) == last


def test_a_latency_sweep_gives_its_last_row():
    assert parse_lat(text("ib_write_lat_a_mlx4.txt")) == LatResult(
        size=8388608, iterations=20000, t_min_us=1398.90, t_max_us=1404.42, t_typical_us=1398.96, t_avg_us=1399.00,
        t_stdev_us=2.95, p99_us=1413.15, p999_us=1424.45)


def test_a_post_list_duration_report_with_peak_0_is_a_message_rate_not_a_slow_link():
    """-D: perftest measures no peak (0.00). The average of 64-byte writes is message rate x size,
    3.44 Gb/s on a 100G port, not a slow link: the record says the peak was not measured."""
    bw = parse_bw(text("ib_write_bw_postlist_D60_roce.txt"))
    assert bw == BwResult(size=64, iterations=402653184, peak_gbps=0.0, avg_gbps=3.44, msg_rate_mpps=6.716823)
    assert bw.avg_gbps == pytest.approx(bw.size * 8 * bw.msg_rate_mpps / 1e3, abs=0.005)
    (rec,) = records_for(bw, None, {"rail": 0, "nodes": ["a", "b"], "ranks": [0, 1]})
    assert (rec["metric"], rec["value"], rec["size"], rec["samples"]) == ("bandwidth", 3.44, 64, 402653184)
    assert "peak not measured" in rec["detail"] and "6.716823 Mpps" in rec["detail"]


# ---- parsing: what is not a usable report -------------------------------------------

NAN_JSON = ('{\n"results": {\n"MsgSize": 65536,\n"n_iterations": 0,\n"BW_peak": 0.00,\n"BW_average": -nan,\n'
            '"MsgRate": -nan\n}\n}\n')
BW_HEAD = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
NEGATIVE = BW_HEAD + " 65536      5000             0.00               -3.25\t\t   -0.006207\n"
KB_UNIT = (" #bytes     #iterations    BW peak[KB/sec]    BW average[KB/sec]   MsgRate[Mpps]\n"
           " 65536      5000             1.00               1.00\t\t   0.000010\n")
LAT_DURATION = " #bytes        #iterations       t_avg[usec]    tps average\n 2       1923512          1.04        481234.20\n"
HALF_BYTE = ('{"results": {"MsgSize": 2.5, "n_iterations": 1000, "t_min": 1, "t_max": 1, "t_typical": 1, '
             '"t_avg": 1, "t_stdev": 0, "percentile_99": 1, "percentile_99.9": 1}}')


@pytest.mark.parametrize("parse, report, reason", [
    (parse_bw, "", "empty report"),
    (parse_bw, "   \n", "empty report"),
    (parse_bw, " Couldn't connect to node2:18515\n Unable to init the socket connection\n",
     "not an ib_*_bw report"),
    (parse_lat, "Segmentation fault\n", "not an ib_*_lat report"),
    (parse_bw, text("ib_write_lat_ndr.json"), "this is a latency report"),
    (parse_bw, text("ib_write_lat.txt"), "this is a latency report"),
    (parse_lat, text("ib_write_bw_ndr_legacy.json"), "this is a bandwidth report"),
    (parse_lat, text("ib_write_bw.txt"), "this is a bandwidth report"),
    (parse_bw, text("ib_write_bw_ndr.json").rsplit("}", 2)[0], "ends before its closing brace"),
    (parse_bw, "{\nresults: {\nMsgSize 65536\n},\n}\n", "line 3 is neither 'key: value' nor a brace"),
    (parse_bw, "[1, 2]", "a JSON list, not perftest's report object"),
    (parse_bw, '{"test_info": {}}', 'no "results" object'),
    (parse_bw, '{"results": {"MsgSize": 8, "n_iterations": 5}}', "missing BW_peak, BW_average, MsgRate"),
    (parse_bw, "{\nresults: {\nbw_avg: 391.500000,\n},\n}\n", "reduced report (--output=...)"),
    (parse_bw, '{"results": {"MsgSize": 8, "n_iterations": 5, "BW_peak": 1, "BW_average": "fast", "MsgRate": 1}}',
     "BW_average is 'fast', not a number"),
    (parse_bw, NAN_JSON, "BW_average is nan: perftest produced no valid measurement"),
    (parse_bw, NEGATIVE, "BW_average is negative (-3.25)"),
    (parse_bw, BW_HEAD + "---\n", "a bandwidth header but no result row"),
    (parse_bw, KB_UNIT, "unknown bandwidth unit [KB/sec]"),
    (parse_lat, LAT_DURATION, "duration-mode (-D) latency report"),
    (parse_lat, '{"results": {"MsgSize": 2, "n_iterations": 1923512, "t_avg": 1.04, "tps_average": 481234.2}}',
     "duration-mode (-D) latency report"),
    (parse_lat, HALF_BYTE, "MsgSize is 2.5, not a whole"),
])
def test_unusable_reports_raise_naming_the_problem_and_the_text(parse, report, reason):
    with pytest.raises(PerftestParseError) as e:
        parse(report)
    assert reason in e.value.reason, e.value.reason
    assert e.value.text == report
    assert str(e.value).startswith(e.value.reason + "; got: ")
    assert isinstance(e.value, PerftestError)


def test_not_text_at_all_is_refused():
    with pytest.raises(PerftestParseError, match="expected the report as text, got bytes"):
        parse_bw(b"{}")


def test_long_offending_text_is_shortened_in_the_message():
    junk = "x" * 5000
    with pytest.raises(PerftestParseError) as e:
        parse_bw(junk)
    assert len(str(e.value)) < 700 and " ... " in str(e.value) and e.value.text == junk


# ---- commands -----------------------------------------------------------------------

def test_bw_server_on_infiniband():
    assert bw_command("server", "mlx5_0", 1, 8388608, duration_s=5, tx_depth=128, tcp_port=18515,
                      json_path="/tmp/s.json") == [
        "ib_write_bw", "-d", "mlx5_0", "-i", "1", "-s", "8388608", "-p", "18515", "-F", "--report_gbits",
        "--out_json", "--out_json_file=/tmp/s.json", "-D", "5", "-t", "128"]


def test_bw_client_on_roce_names_the_gid_and_ends_with_the_server_host():
    argv = bw_command("client", "mlx5_3", 1, 65536, gid_index=3, server_host="node2", iters=5000,
                      tcp_port=18600, json_path=None, extra=("-q", "2"))
    assert argv == ["ib_write_bw", "-d", "mlx5_3", "-i", "1", "-s", "65536", "-x", "3", "-p", "18600", "-F",
                    "--report_gbits", "-n", "5000", "-q", "2", "node2"]
    assert "--out_json" not in argv  # a tool without --out_json: the text report is parsed instead


def test_lat_commands_server_and_client():
    server = lat_command("server", "mlx5_0", 1, 8, iters=10000, gid_index=-1, tcp_port=18517, json_path="/j")
    client = lat_command("client", "mlx5_0", 1, 8, iters=10000, server_host="node1", tcp_port=18517,
                         json_path="/k")
    assert server == ["ib_write_lat", "-d", "mlx5_0", "-i", "1", "-s", "8", "-p", "18517", "-F", "--report_gbits",
                      "--out_json", "--out_json_file=/j", "-n", "10000"]
    assert client[-1] == "node1" and client[:-1] == server[:-3] + ["--out_json_file=/k", "-n", "10000"]
    assert "-x" not in server  # -1: no GID (InfiniBand)


@pytest.mark.parametrize("call, message", [
    (lambda: bw_command("client", "mlx5_0", 1, 8, iters=5), "needs the server's host"),
    (lambda: bw_command("server", "mlx5_0", 1, 8, iters=5, server_host="n"), "the server takes no host"),
    (lambda: bw_command("writer", "mlx5_0", 1, 8, iters=5), "role must be"),
    (lambda: bw_command("server", "mlx5_0", 1, 8), "exactly one of"),
    (lambda: bw_command("server", "mlx5_0", 1, 8, iters=5, duration_s=5), "exactly one of"),
    (lambda: bw_command("server", "mlx5_0", 1, 8, duration_s=2.5), "whole seconds"),
    (lambda: bw_command("server", "mlx5_0", 1, 8, iters=4), "at least 5 iterations"),
    (lambda: lat_command("server", "mlx5_0", 1, 0, iters=1000), "at least 1 byte"),
    (lambda: Spec("atomic", "mlx5_0", 8), "kind must be"),
])
def test_bad_commands_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_spec_builds_the_same_commands_and_a_timeout():
    bw = Spec("bw", "mlx5_0", 8388608, duration_s=5, tx_depth=128)
    assert bw.command("client", "/bin/ib_write_bw", 18515, None, "node2") == bw_command(
        "client", "mlx5_0", 1, 8388608, duration_s=5, tx_depth=128, server_host="node2", tool="/bin/ib_write_bw")
    assert bw.timeout_s() == 35.0
    lat = Spec("lat", "mlx5_0", 8, iters=100000)
    assert lat.tool_name == "ib_write_lat" and lat.timeout_s() == pytest.approx(40.0)


# ---- sysfs and ports --------------------------------------------------------------------

def _gid(root: Path, index: int, gid: str, kind: str | None) -> None:
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "gids").mkdir(parents=True, exist_ok=True)
    (port / "gids" / str(index)).write_text(gid + "\n")
    if kind:
        (port / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
        (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")


def test_roce_gid_index_prefers_the_ipv4_mapped_roce_v2_gid(tmp_path):
    link_local = "fe80:0000:0000:0000:0a5c:2bff:fe3c:8d01"
    mapped = "0000:0000:0000:0000:0000:ffff:0a0a:0107"
    _gid(tmp_path, 0, link_local, "IB/RoCE v1")
    _gid(tmp_path, 1, link_local, "RoCE v2")
    _gid(tmp_path, 2, mapped, "IB/RoCE v1")
    _gid(tmp_path, 3, mapped, "RoCE v2")
    _gid(tmp_path, 4, "0000:0000:0000:0000:0000:0000:0000:0000", None)  # empty slot: no type file
    assert perftest.roce_gid_index(tmp_path, "mlx5_0", 1) == 3
    (tmp_path / "class/infiniband/mlx5_0/ports/1/gid_attrs/types/3").write_text("IB/RoCE v1\n")
    assert perftest.roce_gid_index(tmp_path, "mlx5_0", 1) == 1  # no mapped RoCEv2: the first RoCEv2
    assert perftest.roce_gid_index(tmp_path, "mlx5_9", 1) is None


def test_port_listening_reads_proc_net_tcp(tmp_path):
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
        assert perftest.port_listening(port) is False  # bound, not listening
        s.listen(1)
        assert perftest.port_listening(port) is True
        assert not perftest.port_free(port)
        assert perftest.choose_port(port) != port
    assert perftest.port_listening(port, proc_net=tmp_path) is None  # no /proc/net/tcp: cannot tell


def test_find_tools_searches_only_the_override_folder(tmp_path, monkeypatch):
    (tmp_path / "ib_write_bw").write_text("#!/bin/sh\n")
    (tmp_path / "ib_write_bw").chmod(0o755)
    monkeypatch.setenv(perftest.ENV_DIR, str(tmp_path))
    assert perftest.find_tools() == {"ib_write_bw": str(tmp_path / "ib_write_bw"), "ib_write_lat": None}
    assert perftest.where_searched() == f"{perftest.ENV_DIR}={tmp_path}"
    monkeypatch.delenv(perftest.ENV_DIR)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert perftest.find_tools()["ib_write_bw"] == str(tmp_path / "ib_write_bw")
    assert perftest.where_searched() == "PATH"


# ---- records ------------------------------------------------------------------------------

def test_records_pass_make_record_with_perftest_suite_and_engine():
    common = {"rail": 0, "nodes": ["node1", "node2"], "ranks": [0, 8]}
    rec = Recorder(0, "node1", 0)
    record = rec.bind("suites/test_perftest.py::test_perftest_crosscheck[rail0]", "perftest")
    perftest.record_results(record, load_profile("local"), BW_FIXTURES["ib_write_bw_ndr_legacy.json"],
                            LAT_FIXTURES["ib_write_lat_ndr.json"], common)
    made = rec.take()
    assert all(make_record(**{k: v for k, v in r.items() if k != "time"}) for r in made)
    assert [(r["metric"], r["value"], r["unit"], r["size"], r["samples"]) for r in made] == [
        ("bandwidth", 391.62, "Gbit/s", 8388608, 5000),
        ("latency_p50", 1.04, "us", 8, 99997),
        ("latency_p99", 1.12, "us", 8, 99997),
        ("latency_p999", 2.31, "us", 8, 99997),
        ("latency_avg", 1.05, "us", 8, 99997)]
    assert all(r["suite"] == "perftest" and r["engine"] == "perftest" and r["verdict"] == "info"
               and r["threshold"] is None and r["rail"] == 0 and r["nodes"] == ["node1", "node2"]
               and r["ranks"] == [0, 8] for r in made)
    assert made[0]["detail"] == "ib_write_bw average; peak 392.14 Gbit/s, 5000 iterations, 0.005836 Mpps"
    assert made[1]["detail"].endswith("t_min 0.99 us, t_max 5.12 us, t_stdev 0.02 us")
    assert made[2]["detail"] == "ib_write_lat 99% percentile of 99997 samples"
    assert "fewer than the 100000 it needs" in made[3]["detail"]


def test_records_say_when_peak_or_tail_are_not_measured():
    d = records_for(BW_FIXTURES["ib_write_bw_ndr.json"], None, {"rail": 1, "nodes": ["a", "b"], "ranks": [1, 2]})
    assert len(d) == 1 and "peak not measured" in d[0]["detail"] and d[0]["value"] == 391.38
    lat = records_for(None, LatResult(8, 1000, 1, 5, 1, 1, 0, 1.2, 5), {"rail": 0, "nodes": ["a", "b"], "ranks": [0, 1]})
    assert [r["metric"] for r in lat] == ["latency_p50", "latency_p99", "latency_p999", "latency_avg"]
    assert "too few for it, so it is perftest's t_max (needs -n 100003)" in lat[2]["detail"]  # 997 samples
    assert "fewer than the 10000 it needs" in lat[1]["detail"]
    assert records_for(None, None, {}) == []


# ---- server + client with stand-in tools -----------------------------------------------------

def install_fakes(folder: Path, *, bw: str = "ib_write_bw_ndr_legacy.json", lat: str = "ib_write_lat_ndr.json",
                  options: str = "") -> Path:
    """Shell wrappers named after the tools, running fake_perftest.py with a report and options."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "calls.log"
    for tool, report, txt in (("ib_write_bw", bw, "ib_write_bw.txt"), ("ib_write_lat", lat, "ib_write_lat.txt")):
        script = folder / tool
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" --fake-report "{DATA / report}" '
                          f'--fake-text "{DATA / txt}" --fake-log "{log}" {options} -- "$@"\n')
        script.chmod(0o755)
    return log


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    def install(**kw) -> Path:
        log = install_fakes(tmp_path / "bin", **kw)
        monkeypatch.setenv(perftest.ENV_DIR, str(tmp_path / "bin"))
        monkeypatch.setattr(perftest_process, "SERVER_GRACE_FAILED_S", 0.3)  # after a failed client: quick
        return log
    return install


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def calls(log: Path) -> list[tuple[str, int, list[str]]]:
    out = []
    if not log.exists():  # killed (as it should be) before it wrote its line: a loaded machine
        return out
    for line in log.read_text().splitlines():
        role, pid, *args = line.split()
        out.append((role, int(pid), args))
    return out


BW = Spec("bw", "mlx5_0", 4 * 2**20, duration_s=5, tx_depth=128)
LAT = Spec("lat", "mlx5_0", 8, iters=10000)


def test_bw_pair_reads_the_json_of_both_sides(fakes, tmp_path):
    log = fakes(options="--fake-listen-delay 0.3")  # the client would fail if it did not wait
    port = free_port()
    out = perftest.run_local_pair(BW, BW, tcp_port=port, workdir=tmp_path / "work")
    assert out.result == BwResult(4 * 2**20, 5000, 392.14, 391.62, 0.005836)  # the legacy file, size as asked
    assert out.server_result == out.result  # ib_write_bw's server reports the client's numbers
    assert out.client.ok and out.server.ok and out.client.json_text.startswith("{\ntest_info: {")
    (_, _, sargs), (_, _, cargs) = sorted(calls(log), key=lambda c: c[0] != "server")
    shared = [a for a in cargs[:-1] if not a.startswith("--out_json_file=")]
    assert [a for a in sargs if not a.startswith("--out_json_file=")] == shared  # no host: it listens
    assert f"--out_json_file={tmp_path / 'work' / 'server' / 'server.json'}" in sargs
    assert cargs[-1] == "localhost" and cargs[cargs.index("-p") + 1] == str(port)
    assert f"--out_json_file={tmp_path / 'work' / 'client' / 'client.json'}" in cargs
    assert "-D" in cargs and "--report_gbits" in cargs and "-F" in cargs


def test_lat_pair_with_standard_json(fakes):
    fakes()
    out = perftest.run_local_pair(LAT, LAT, tcp_port=free_port())
    assert out.result == LatResult(8, 100000, 0.99, 5.12, 1.04, 1.05, 0.02, 1.12, 2.31)


def test_tools_without_out_json_are_read_from_their_text_report(fakes):
    log = fakes(options="--fake-no-json")
    out = perftest.run_local_pair(BW, BW, tcp_port=free_port())
    assert out.result == BwResult(4 * 2**20, 17490, 0.0, 391.24, 0.005830)  # ib_write_bw.txt, size as asked
    assert out.client.json_text is None
    assert not any(a.startswith("--out_json") for _, _, args in calls(log) for a in args)
    assert perftest.run_local_pair(LAT, LAT, tcp_port=free_port()).result == LAT_FIXTURES["ib_write_lat.txt"]


def test_a_busy_port_moves_the_pair_to_another(fakes):
    log = fakes()
    with socket.socket() as squatter:
        squatter.bind(("", 0))
        squatter.listen(1)
        busy = squatter.getsockname()[1]
        out = perftest.run_local_pair(LAT, LAT, tcp_port=busy)
    assert out.result is not None
    ports = {args[args.index("-p") + 1] for _, _, args in calls(log)}
    assert len(ports) == 1 and ports != {str(busy)}


def test_client_failure_raises_with_its_stderr_and_stops_the_server(fakes):
    log = fakes(options="--fake-fail client")
    start = time.monotonic()
    with pytest.raises(PerftestError) as e:
        perftest.run_local_pair(BW, BW, tcp_port=free_port())
    assert time.monotonic() - start < 60  # bounded: not waiting on a process that never ends
    assert str(e.value).startswith("ib_write_bw client exited 1: ")
    assert "Couldn't get context for the device" in str(e.value)
    assert_all_gone(log)


def test_server_failure_is_named(fakes):
    fakes(options="--fake-fail server")
    with pytest.raises(PerftestError, match=r"ib_write_lat server: exited 1 before listening on TCP port \d+: "
                                            r"Couldn't get context for the device"):
        perftest.run_local_pair(LAT, LAT, tcp_port=free_port())


def test_a_server_that_never_listens_is_killed(fakes):
    log = fakes(options="--fake-listen-delay 60")
    with pytest.raises(PerftestError, match=r"ib_write_bw server: not listening on TCP port \d+ after 0.3 s \(killed\)"):
        perftest.run_local_pair(BW, BW, tcp_port=free_port(), listen_timeout=0.3)
    assert_all_gone(log)


def test_a_hanging_client_is_killed_at_its_timeout(fakes, monkeypatch):
    log = fakes(options="--fake-hang client")
    monkeypatch.setattr(Spec, "timeout_s", lambda self: 0.5)
    start = time.monotonic()
    with pytest.raises(PerftestError, match=r"ib_write_lat client timed out after [\d.]+ s \(killed\)"):
        perftest.run_local_pair(LAT, LAT, tcp_port=free_port())
    assert time.monotonic() - start < 60  # bounded: not waiting on a process that never ends
    assert_all_gone(log)


def test_a_server_that_does_not_exit_after_its_client_is_killed(fakes, monkeypatch):
    log = fakes(options="--fake-hang server")
    monkeypatch.setattr(perftest_process, "SERVER_GRACE_S", 0.3)
    monkeypatch.setattr(Spec, "timeout_s", lambda self: 1.0)
    with pytest.raises(PerftestError) as e:
        perftest.run_local_pair(BW, BW, tcp_port=free_port())
    assert re.fullmatch(r"ib_write_bw server timed out after [\d.]+ s \(killed\): .*Waiting for client to connect.*",
                        str(e.value), re.DOTALL), str(e.value)
    assert_all_gone(log)


def test_a_report_of_another_size_is_refused(fakes, tmp_path):
    # A stand-in that ignores -s: the file keeps MsgSize 8, the test asked for 64 bytes.
    fakes()
    wrapper = tmp_path / "bin" / "ib_write_lat"
    wrapper.write_text(wrapper.read_text().replace('"$@"', '"$@" -s 8'))
    with pytest.raises(PerftestError, match="ib_write_lat client: reported size 8 B, asked for 64 B"):
        perftest.run_local_pair(Spec("lat", "mlx5_0", 64, iters=1000), Spec("lat", "mlx5_0", 64, iters=1000),
                                tcp_port=free_port())


def test_missing_tool_is_an_error_naming_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv(perftest.ENV_DIR, str(tmp_path))
    with pytest.raises(PerftestError, match=f"ib_write_bw not found on {perftest.ENV_DIR}=.*: install perftest"):
        perftest.run_local_pair(BW, BW, tcp_port=free_port())


def assert_all_gone(log: Path) -> None:
    for _, pid, _ in calls(log):
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), pid
    # Also any fake that was killed before it logged itself: none still runs from this test's bin/.
    left = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(log.parent).encode() in (proc / "cmdline").read_bytes() and "zombie" not in (proc / "status").read_text():
                left.append(proc.name)
        except OSError:
            pass
    assert left == [], left


# ---- run_pair's messages, with two threads standing in for two ranks ---------------------------

class ThreadComm:
    """Just what run_pair uses of a 2-rank mpi4py communicator: send, recv, Iprobe, allgather, Get_rank."""

    def __init__(self, rank: int, boxes: list[queue.Queue]):
        self.rank, self.boxes = rank, boxes

    def Get_rank(self) -> int:
        return self.rank

    def send(self, obj, dest: int, tag: int = 0) -> None:
        self.boxes[dest].put(obj)

    def recv(self, source: int, tag: int = 0):
        return self.boxes[self.rank].get(timeout=30)

    def Iprobe(self, source: int, tag: int = 0) -> bool:
        return not self.boxes[self.rank].empty()

    def allgather(self, obj) -> list:
        self.send(obj, 1 - self.rank)
        other = self.recv(1 - self.rank)
        return [obj, other] if self.rank == 0 else [other, obj]


def run_both(spec: Spec, server_rank: int = 1) -> list:
    boxes = [queue.Queue(), queue.Queue()]
    out: list = [None, None]
    port = free_port()

    def rank(r: int) -> None:
        try:
            out[r] = perftest.run_pair(ThreadComm(r, boxes), r == server_rank, spec, socket.gethostname(),
                                       tcp_port=port)
        except Exception as e:  # noqa: BLE001 - either error is compared below
            out[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_run_pair_returns_the_result_at_the_client_only(fakes):
    fakes()
    client, server = run_both(LAT, server_rank=1)
    assert client == LatResult(8, 100000, 0.99, 5.12, 1.04, 1.05, 0.02, 1.12, 2.31) and server is None


def test_run_pair_raises_the_same_error_on_both_ranks(fakes):
    fakes(options="--fake-fail client")
    a, b = run_both(BW, server_rank=0)
    assert isinstance(a, PerftestError) and isinstance(b, PerftestError) and str(a) == str(b)
    assert "ib_write_bw client exited 1" in str(a)


def test_run_pair_server_that_cannot_start_tells_the_client(fakes, tmp_path):
    fakes()
    (tmp_path / "bin" / "ib_write_bw").unlink()
    a, b = run_both(BW)
    assert str(a) == str(b) and "ib_write_bw not found" in str(a)


REAL = perftest.find_tools({})  # PATH only


@pytest.mark.skipif(REAL["ib_write_bw"] is None, reason="perftest not installed")
def test_the_installed_perftest_offers_out_json():
    # Debian's perftest 4.5+0.17 (6.06) has --out_json (its file is the legacy dialect).
    assert perftest.supports_json(REAL["ib_write_bw"])


@pytest.mark.skipif(None in REAL.values() or any(Path("/sys/class/infiniband").glob("*")),
                    reason="needs perftest installed and no RDMA device")
@pytest.mark.parametrize("spec", [BW, LAT], ids=["bw", "lat"])
def test_the_installed_perftest_without_a_device_fails_with_its_own_words(spec, monkeypatch):
    monkeypatch.delenv(perftest.ENV_DIR, raising=False)
    with pytest.raises(PerftestError, match=rf"{spec.tool_name} server: exited 1 before listening on TCP port \d+: "
                                            r".*Unable to find the Infiniband/RoCE device"):
        perftest.run_local_pair(spec, spec, tcp_port=free_port())


# ---- the suite's skip decision (identical on every rank: it only reads the gathered facts) ---------

def fact(node: str, rail: int = 0, missing=(), devices=("mlx5_0",), device="mlx5_0") -> dict:
    return {"node": node, "rail": rail, "root": "/sys", "missing": list(missing), "devices": list(devices),
            "device": device, "port": 1, "link_layer": "InfiniBand", "gid": None}


def test_suite_skip_reasons(monkeypatch):
    from acceptance.drivers.perftest import skip_reason as why
    monkeypatch.delenv(perftest.ENV_DIR, raising=False)
    two = ["node1", "node2"]
    assert why([fact("node1")], ["node1"], {0}) == "the perftest cross-check needs at least 2 nodes; this run has 1"
    assert why([fact("node1"), fact("node2", missing=["ib_write_lat"])], two, {0}) == (
        "perftest not on PATH on node2: install perftest (no ib_write_lat)")
    assert why([fact("node1", devices=(), device=None), fact("node2", devices=(), device=None)], two, {0}) == (
        "no RDMA device on node1, node2 (nothing under /sys/class/infiniband): perftest needs one on every node")
    # 2 ranks per node, 1 NIC per node: rail 1 has no device (rail 0 runs).
    facts = [fact("node1"), fact("node1", rail=1, device=None), fact("node2"), fact("node2", rail=1, device=None)]
    assert why(facts, two, {0}) is None
    assert why(facts, two, {1}) == ("no RDMA device for rail 1 on node1, node2: map devices to rails with "
                                  "topology.nic_rails")
    # Every rail at once: rail 1's missing device skips the test for every rank.
    assert why(facts, two, {0, 1}) == why(facts, two, {1})


# ---- where the client dials: the server's rail address ---------------------------------------

def test_the_server_is_reached_on_its_rail_address(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import fakesysfs
    root = fakesysfs.rxe_device(tmp_path, "rxe_n2r1", netdev="n2r1", address="198.18.2.2")
    gid = perftest.roce_gid_index(root, "rxe_n2r1", 1)
    assert gid == 1  # the IPv4-mapped RoCE v2 GID, as the verbs engine picks it
    assert perftest.rail_address(root, "rxe_n2r1", 1, gid, "n2r1") == "198.18.2.2"
    # No IPv4 GID (InfiniBand, or RoCE on IPv6 only): the netdev's address; none: the caller's host name.
    assert perftest.rail_address(root, "rxe_n2r1", 1, 0, "no-such-netdev0") is None
    assert perftest.rail_address(root, "rxe_n2r1", 1, 0, "lo") == "127.0.0.1"
    assert perftest.ipv4_of_gid("0000:0000:0000:0000:0000:ffff:c612:0202") == "198.18.2.2"
    assert perftest.ipv4_of_gid("fe80:0000:0000:0000:7c0f:11ff:fe01:3332") is None


def test_a_clock_that_would_not_calibrate_is_said_and_retried():
    """perftest prints 'Correlation coefficient r^2: 0.74 < 0.9' and reports inf latencies when its TSC
    sampling fails on a busy CPU: named as such, and marked worth retrying when both sides hit it."""
    inf_report = text("ib_write_lat_ndr.json").replace('"t_min": 0.99', '"t_min": Infinity')
    run = perftest.ToolRun("client", ["ib_write_lat"], 0, "Correlation coefficient r^2: 0.740051 < 0.9\n", "",
                           1.0, json_text=inf_report)
    spec = Spec("lat", "rxe0", 8, iters=100000)
    problem, result = perftest_process.assess(run, spec, required=True)
    assert result is None and problem == f"ib_write_lat client: {perftest.CLOCK_PROBLEM}"
    assert PerftestError(problem).clock_only
    assert PerftestError(f"{problem}; ib_write_lat server: {perftest.CLOCK_PROBLEM}").clock_only
    assert not PerftestError(f"{problem}; ib_write_lat server: exited 1: Couldn't connect").clock_only
