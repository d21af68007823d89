"""Switch ports' own counters (acceptance.host.switchports, acceptance.analysis.switchports), read from
fixtures shaped after real outputs (tests/data/switchports/, each citing the public output it follows):
ibqueryerrors of an FDR switch, perfquery -x of switch ports, UFM telemetry and UFM's ports resource. A rise
is named with the switch and its port; a saturated counter warns, never a rise; a tool that is missing or
fails is a problem of the snapshot, never a failure and never a zero."""
import json
import stat
from pathlib import Path

import pytest

from acceptance.analysis import switchports as judged
from acceptance.analysis.output import drain_lines
from acceptance.analysis.pipeline import analyze
from acceptance.cli import main
from acceptance.host import switchports as sp
from acceptance.rules import counter_verdicts as cv
from acceptance.switchtree.fabric import Fabric, Tree, Uplink

DATA = Path(__file__).resolve().parents[1] / "data" / "switchports"
LEAF = "0x0002c90300a1c3d0"        # the SwitchX of ibqueryerrors-fdr-switch.txt, "MF0;leaf02:SX6036/U1"
EDR = "0x0002c903005c27a0"         # the switch perfquery-x-edr-switch-port.txt is asked for


def fixture(name: str) -> str:
    """A fixture's tool output, without its citation (the leading // lines)."""
    return "".join(ln for ln in (DATA / name).read_text().splitlines(keepends=True) if not ln.startswith("//"))


def saved(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def stand_in(tmp_path: Path, name: str, body: str) -> Path:
    """An executable shell script standing in for a tool; it logs its arguments to <name>.args."""
    script = tmp_path / name
    script.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/{name}.args"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def window(before: dict, after: dict, seconds: float = 600.0):
    before["epoch"], after["epoch"] = 0.0, seconds
    return sp.diff(before, after)


def by_name(deltas, switch: str, port: int) -> dict:
    return {d.name: d for d in deltas if (d.device, d.port) == (switch, port)}


def test_a_rising_symbol_error_on_a_switch_port_is_named_with_the_switch_and_port(tmp_path, monkeypatch):
    """perfquery -x of one EDR switch port (a stand-in printing the fixture) before and after the run, its
    SymbolErrorCounter 0 -> 1,204: one failing finding of scope switch naming the switch, the port and, from
    the switch tree, the spine at the other end of the cable and the rail; no node, so no drain line."""
    out = saved(tmp_path, "perfquery.out", fixture("perfquery-x-edr-switch-port.txt"))
    monkeypatch.setenv(sp.ENV_PERFQUERY, str(stand_in(tmp_path, "perfquery", f'cat "{out}"')))
    before = sp.snapshot(sp.query_ports([(EDR, 14)], ca=("mlx5_2", 1)))
    out.write_text(out.read_text().replace("SymbolErrorCounter:..............0\n",
                                           "SymbolErrorCounter:..............1204\n"))
    after = sp.snapshot(sp.query_ports([(EDR, 14)], ca=("mlx5_2", 1)))
    assert (tmp_path / "perfquery.args").read_text().splitlines()[0] == f"-C mlx5_2 -P 1 -x -G {EDR} 14"
    assert before["problems"] == [] and before["ports"][0]["counters"]["symbol_error"] == {"value": 0, "width": 64}

    deltas = window(before, after)
    rise = by_name(deltas, EDR, 14)["symbol_error"]
    assert (rise.delta, rise.saturated, rise.kind) == (1204, None, "error")
    tree = Tree(leaves={EDR: ["gpu01", "gpu02"]}, uplinks=[Uplink(EDR, "spine02", "14", "3")])
    found = judged.findings(judged.judge(deltas, cv.Limits()), sp.port_facts(before, after), cv.Limits(),
                            Fabric("rail2.txt", "ibnetdiscover", {2: tree}))
    assert len(found) == 1
    f = found[0]
    assert (f["severity"], f["scope"], f["switch"], f["rail"], f["node"], f["peer"]) == \
        ("fail", "switch", EDR, 2, None, "spine02")
    assert (f["metric"], f["value"], f["expected"], f["kind"]) == ("symbol_error", 1204, 0, "counter")
    assert f["uplinks"] == [{"leaf": EDR, "spine": "spine02", "leaf_port": "14", "spine_port": "3"}]
    assert f["message"].startswith(f"switch {EDR} port 14 (cabled to spine02 port 3): symbol_error rose by 1,204 "
                                   f"(bound 0); check the cable, its transceivers and this switch port")
    assert "symbol_error rose by 1,204 during the window (error counters must not rise)" in f["evidence"]
    assert drain_lines(found) == []


def test_a_saturated_counter_warns_never_a_rise():
    """The SwitchX's port 9 reads SymbolErrorCounter 65535 (16-bit) before and after: saturated before the
    window, no delta, a warning that says how to clear it; PortXmitWait at 4294967295 (32-bit) is saturated
    too, and information (congestion recorded). One that reaches its cap during the window rose: it fails."""
    text = fixture("ibqueryerrors-fdr-switch.txt")
    before, after = (sp.snapshot([sp.parse_ibqueryerrors(text, "ibqueryerrors")]) for _ in range(2))
    port9 = by_name(window(before, after), LEAF, 9)
    symbol = port9["symbol_error"]
    assert (symbol.delta, symbol.saturated, symbol.width, cv.counter_verdict(symbol, cv.Limits())) == \
        (None, "before", 16, "warn")
    f, = judged.findings(judged.judge(window(before, after), cv.Limits()), sp.port_facts(after), cv.Limits())
    assert (f["severity"], f["switch"], f["value"]) == ("warn", "leaf02", None)
    assert f["message"].startswith(f"switch leaf02 ({LEAF}) port 9: symbol_error saturated before the window")
    assert f["evidence"] == [f"symbol_error saturated at 65535 (16-bit) before the window: its rises cannot be seen; "
                             f"clear it (perfquery -R -G {LEAF} 9)"]
    wait = by_name(window(before, after), LEAF, 3)["port_xmit_wait"]
    assert (wait.saturated, wait.width, cv.counter_verdict(wait, cv.Limits())) == ("before", 32, "info")

    rising = text.replace("port 9: [SymbolErrorCounter == 65535]", "port 9: [SymbolErrorCounter == 65000]")
    deltas = window(sp.snapshot([sp.parse_ibqueryerrors(rising, "ibqueryerrors")]), after)
    d = by_name(deltas, LEAF, 9)["symbol_error"]
    assert (d.delta, d.saturated, cv.counter_verdict(d, cv.Limits())) == (None, "during", "fail")


def test_ibqueryerrors_reads_the_switch_ports_and_what_it_left_unlisted(tmp_path):
    """The switch's port rows at their PortCounters widths (an extended row's, 64-bit); the hosts' CA rows and
    the AllPortSelect row read past. A port the walk did not list read zero: one that appears with errors rose
    from zero, one that disappears was cleared. The mail's "> " quoting is not ibqueryerrors' output: read
    as it is, it is refused naming the line; stripped, it reads."""
    text = fixture("ibqueryerrors-fdr-switch.txt")
    r = sp.parse_ibqueryerrors(text, "walk")
    assert sorted(r.counters) == [(LEAF, 0), (LEAF, 3), (LEAF, 9), (LEAF, 14)]
    assert r.counters[(LEAF, 9)] == {"symbol_error": {"value": 65535, "width": 16},
                                     "link_error_recovery": {"value": 3, "width": 8},
                                     "link_downed": {"value": 2, "width": 8},
                                     "port_xmit_discards": {"value": 411, "width": 16}}
    assert r.names == {LEAF: "MF0;leaf02:SX6036/U1"} and sp.switch_label(r.names[LEAF]) == "leaf02"
    assert r.source["complete"] and len(r.source["unlisted_zero"]) == len(sp.PMA_NAMES)
    assert r.notes == ["walk: 2 CA port row(s) read past (host ports are read on the hosts themselves: "
                       "acceptance counters snapshot)"]
    extended = sp.parse_ibqueryerrors(text.replace("[PortXmitDiscards == 4709]",
                                                   "[PortXmitDiscards == 4709 (4.709K)]"), "walk")
    assert extended.counters[(LEAF, 14)]["port_xmit_discards"] == {"value": 4709, "width": 64}

    quoted = saved(tmp_path, "mail.txt", "".join(f"> {ln}" for ln in text.splitlines(keepends=True)))
    with pytest.raises(sp.SwitchPortsError, match=rf"^{quoted}:1: not an ibqueryerrors line: '> Errors for"):
        sp.read_files([quoted])
    unquoted = saved(tmp_path, "walk.txt", "".join(ln[2:] for ln in quoted.read_text().splitlines(keepends=True)))
    assert sp.read_files([unquoted])[0].counters == r.counters

    row14 = "   GUID 0x2c90300a1c3d0 port 14: [PortRcvSwitchRelayErrors == 298] [PortXmitDiscards == 4709]\n"
    later = text.replace(row14, "   GUID 0x2c90300a1c3d0 port 17: [SymbolErrorCounter == 38] "
                                "[LinkDownedCounter == 1]\n")
    assert later != text
    deltas = window(sp.snapshot([r]), sp.snapshot([sp.parse_ibqueryerrors(later, "walk")]))
    new = by_name(deltas, LEAF, 17)
    risen = new["symbol_error"]
    assert (risen.before, risen.delta, cv.counter_verdict(risen, cv.Limits())) == (0, 38, "fail")
    cleared = by_name(deltas, LEAF, 14)["port_xmit_discards"]
    assert (cleared.after, cleared.delta, cleared.note) == (0, None, "reset or wrapped")
    assert deltas.notes == ["both snapshots: walk: 2 CA port row(s) read past (host ports are read on the hosts "
                            "themselves: acceptance counters snapshot)"]


def test_perfquery_of_a_switch_without_64_bit_error_counters_asks_for_its_port_counters(tmp_path, monkeypatch):
    """A SwitchX answers perfquery -x without the 64-bit error counters (CapMask2 0): the fields it prints
    anyway are not taken, and plain perfquery's PortCounters are, at their widths (65535: saturated)."""
    x_out = saved(tmp_path, "x.out", fixture("perfquery-x-switchx-port.txt"))
    base = saved(tmp_path, "base.out", fixture("perfquery-switchx-port.txt"))
    monkeypatch.setenv(sp.ENV_PERFQUERY, str(stand_in(
        tmp_path, "perfquery", f'case " $* " in *" -x "*) cat "{x_out}" ;; *) cat "{base}" ;; esac')))
    reading, = sp.query_ports([("31", 9)])
    assert (tmp_path / "perfquery.args").read_text().splitlines() == ["-x 31 9", "31 9"]
    assert reading.problems == []
    got = reading.counters[("lid 31", 9)]
    assert got["symbol_error"] == {"value": 65535, "width": 16}
    assert got["port_xmit_wait"] == {"value": 4294967295, "width": 32}
    assert sp.parse_perfquery(x_out.read_text(), "x.out").counters == {("lid 31", 9): {}}


def test_ufm_telemetry_and_ports_read_into_switch_ports_with_names_and_peers(tmp_path):
    """UFM telemetry lists counters per node and port, switches and hosts alike; UFM's ports resource says
    which nodes are switches, their names, and the peer at the other end of each cable, seen from the
    switch's port or from a host's. Read together, the host's port is left out and a LinkDowned rise on
    SW-L03 port 23 names the switch and the host cabled to it."""
    telemetry = saved(tmp_path, "telemetry.json", fixture("ufm-telemetry.json.txt"))
    ports = saved(tmp_path, "ports.json", fixture("ufm-ports.json.txt"))
    sw = "0x98039b0300a1c100"
    before = sp.snapshot(sp.read_files([telemetry, ports]))
    assert [(p["switch"], p["port"], p["name"]) for p in before["ports"]] == [(sw, 1, "SW-L03"), (sw, 23, "SW-L03"),
                                                                             (sw, 36, "SW-L03")]
    assert before["ports"][1]["peer"] == {"name": "gpu-0042", "port": "HCA-1/1", "guid": "0xb8cef60300d2e3f4"}
    assert before["ports"][2]["peer"] == {"name": "gpu-0043", "port": "HCA-1/1", "guid": "0xb8cef60300d2e500"}
    assert before["ports"][1]["counters"]["link_downed"] == {"value": 2, "width": None}
    assert before["notes"] == ["1 port(s) of nodes no source names a switch were left out (host ports are read on the "
                               "hosts themselves)"]
    alone = sp.snapshot(sp.read_files([telemetry]))
    assert len(alone["ports"]) == 4 and "UFM telemetry does not say which nodes are switches" in alone["notes"][0]

    data = json.loads(telemetry.read_text())
    data["values"][2]["Infiniband_LinkDowned_u_Errors"] = 5
    telemetry.write_text(json.dumps(data))
    deltas = window(before, sp.snapshot(sp.read_files([telemetry, ports])))
    f, = judged.findings(judged.judge(deltas, cv.Limits()), sp.port_facts(before), cv.Limits())
    assert (f["severity"], f["switch"], f["peer"], f["metric"], f["value"]) == \
        ("fail", "SW-L03", "gpu-0042", "link_downed", 3)
    assert f["message"].startswith(f"switch SW-L03 ({sw}) port 23 (cabled to gpu-0042 HCA-1/1): link_downed rose by 3")


def test_a_missing_or_failing_tool_is_a_problem_never_a_failure_nor_a_zero(tmp_path, monkeypatch):
    """No ibqueryerrors: the snapshot says so and holds no port. A walk that cannot open the fabric (exit 255)
    says why and how to get access. A walk that failed before the run is no zero to rise from: the ports the
    later walk lists are not compared, and a note says so. No InfiniBand port here: nothing to walk from."""
    monkeypatch.setenv(sp.ENV_IBQUERYERRORS, str(tmp_path / "no-ibqueryerrors"))
    missing = sp.snapshot(sp.walk([("mlx5_0", 1)]))
    assert missing["ports"] == [] and missing["problems"] == [
        f"{tmp_path / 'no-ibqueryerrors'} not found: install infiniband-diags (rdma-core), or set "
        f"ACCEPTANCE_IBQUERYERRORS; switch ports behind mlx5_0 port 1 were not read"]
    monkeypatch.setenv(sp.ENV_PERFQUERY, str(tmp_path / "no-perfquery"))
    assert "no-perfquery not found" in sp.snapshot(sp.query_ports([("1187", 14)]))["problems"][0]
    assert "no ACTIVE InfiniBand port on this host" in sp.snapshot(sp.walk(root=tmp_path))["problems"][0]

    out = saved(tmp_path, "walk.out", fixture("ibqueryerrors-fdr-switch.txt"))
    tool = stand_in(tmp_path, "ibqueryerrors",
                    'echo "ibpanic: [4242] main: Failed to open port; (null):0" >&2; exit 255')
    monkeypatch.setenv(sp.ENV_IBQUERYERRORS, str(tool))
    run = tmp_path / "run"  # the run's snapshots, as the run takes them (take) and its analysis reads them
    run.mkdir()
    before = sp.take(run, "before", [("mlx5_0", 1)])
    assert before["problems"][0].endswith(f"exited 255: ibpanic: [4242] main: Failed to open port; (null):0 "
                                          f"({sp.ACCESS_HINT}); switch ports behind mlx5_0 port 1 were not read")
    assert sp.load_window(run) is None
    tool.write_text(tool.read_text().replace("echo", f'cat "{out}"; exit 1\necho'))
    after = sp.take(run, "after", [("mlx5_0", 1)])
    assert (tmp_path / "ibqueryerrors.args").read_text().splitlines()[-1] == \
        "-C mlx5_0 -P 1 --switch --threshold-file /dev/null"
    assert after["problems"] == [] and after["sources"][0]["seconds"] is not None
    assert sp.load_window(run) == (before, after)
    deltas = window(before, after)
    assert list(deltas) == [] and cv.verdict_of(deltas, cv.Limits()) == "pass"
    assert f"{LEAF} port 9: not in the before snapshot, whose 'ibqueryerrors -C mlx5_0 -P 1' did not read it " \
           f"(a walk that failed or was cut short, or another source): not compared" in deltas.notes
    assert any(n.startswith("before snapshot: ") and "exited 255" in n for n in deltas.notes)


def test_the_cli_and_the_run_folder(tmp_path, capsys):
    """`acceptance counters switches snapshot --from` then `diff`: exit 1 on a rise, with the switch and port
    named; a run folder holding both snapshots gets the same finding from analyze(), beside its records."""
    text = fixture("ibqueryerrors-fdr-switch.txt")
    first = saved(tmp_path, "first.txt", text)
    second = saved(tmp_path, "second.txt", text.replace("[PortXmitDiscards == 4709]", "[PortXmitDiscards == 4709]\n"
                                                        f"   GUID {LEAF} port 17: [SymbolErrorCounter == 38]"))
    run = tmp_path / "run"
    run.mkdir()
    before, after = (str(run / sp.WINDOW_FILES[w]) for w in ("before", "after"))
    assert main(["counters", "switches", "snapshot", "--from", str(first), "-o", before]) == 0
    assert main(["counters", "switches", "snapshot", "--from", str(second), "-o", after]) == 0
    err = capsys.readouterr().err
    assert "switch ports: 4 port(s) of 1 switch(es) read from 1 source(s), 0 problem(s)" in err
    assert main(["counters", "switches", "diff", before, after]) == 1
    out = capsys.readouterr().out
    assert "leaf02 port 17: symbol_error rose by 38 during the window (error counters must not rise)" in out
    assert "verdict: FAIL" in out
    assert main(["counters", "switches", "diff", str(first), str(first)]) == 2

    (run / "run.json").write_text(json.dumps({"run_id": "r1", "profile": "local"}))
    (run / "results.jsonl").write_text("")
    found = [f for f in analyze(run).findings if f["scope"] == "switch"]
    assert [(f["severity"], f["switch"], f["metric"], f["value"]) for f in found] == [
        ("fail", "leaf02", "symbol_error", 38), ("warn", "leaf02", "symbol_error", None)]  # port 17, port 9
