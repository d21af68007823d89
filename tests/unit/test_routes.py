"""The forwarding tables (switchtree.lftfiles) and the cables each pair-direction crosses (switchtree.routes):
ibroute / dump_lfts.sh, OpenSM's and ibdiagnet's dumps read into one model, followed over ibnetdiscover's
cabling, and the profile's topology.routes (rules.switches). tests/data/routes/ holds one rail of 2 leaves, 2
spines and 4 hosts (dmodk.topo) with the tables a D-mod-K routing fills: a leaf sends a destination LID up
its port 33 + LID mod 2 (spine01 for even LIDs, spine02 for odd)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from acceptance.cli import doctor
from acceptance.records.results import InputError
from acceptance.rules.profile import load_profile
from acceptance.rules.switches import fabric_for, kept_fabric, routes_known
from acceptance.switchtree.fabric import Fabric
from acceptance.switchtree.lftfiles import load_routes, parse_lfts
from acceptance.switchtree.routes import Cable, PortRef, Routes
from acceptance.switchtree.topofiles import TopologyFileError, load_fabric

DATA = Path(__file__).resolve().parents[1] / "data" / "routes"
TOPO, IBROUTE, FDBS = DATA / "dmodk.topo", DATA / "dmodk.ibroute", DATA / "dmodk.fdbs"
SWITCHES = {"leaf01": (0xfc6a1c0300e6c7c0, 1), "leaf02": (0xfc6a1c0300e6e100, 2),
            "spine01": (0xfc6a1c0300e6d000, 3), "spine02": (0xfc6a1c0300e6d100, 4)}
HOSTS = {"gpu001": ("leaf01", 1, 5), "gpu002": ("leaf01", 2, 6), "gpu003": ("leaf02", 1, 7), "gpu004": ("leaf02", 2, 8)}


def dmodk(switch: str, lid: int) -> int:
    """The port `switch` sends LID `lid` to, as the fixtures' tables say it."""
    if SWITCHES[switch][1] == lid:
        return 0  # the switch itself
    host = next((h for h, (_, _, hl) in HOSTS.items() if hl == lid), None)
    if switch.startswith("leaf"):
        if host and HOSTS[host][0] == switch:
            return HOSTS[host][1]
        return {3: 33, 4: 34}.get(lid, 33 + lid % 2)  # a spine straight up, anything else D-mod-K
    return 1 if (HOSTS[host][0] if host else {2: "leaf02"}.get(lid, "leaf01")) == "leaf01" else 2


def cable(src: str, src_port: int, dst: str, dst_port: int) -> Cable:
    return Cable(PortRef(src, src_port), PortRef(dst, dst_port))


def names(path) -> list[str] | None:
    return None if path is None else [c.name() for c in path]


def _error(call, *args) -> str:
    with pytest.raises(TopologyFileError) as e:
        call(*args)
    assert isinstance(e.value, InputError)  # the CLI's exit code 2
    return str(e.value)


def _assert_at(message: str, source: str, line: int | None, why: str) -> None:
    where = f"{source}:{line}: " if line else f"{source}: "
    assert message.startswith(where), message
    assert re.search(why, message[len(where):]), message


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return load_fabric(TOPO)


# --- the readers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("f, fmt", [(IBROUTE, "ibroute"), (FDBS, "ibdiagnet2.fdbs")])
def test_a_dump_of_every_switch_reads_into_one_table_per_switch_guid(f, fmt):
    tables, formats, notes = parse_lfts(f.read_text(), str(f))
    assert (formats, notes) == ({fmt}, [])
    assert {t.guid: {lid: t.port(lid) for lid in range(1, 10)} for t in tables.values()} == {
        guid: {**{lid: dmodk(sw, lid) for lid in range(1, 9)}, 9: None} for sw, (guid, _) in SWITCHES.items()}
    if fmt == "ibroute":  # ibroute's header names the switch; ibdiagnet's only gives its GUID
        assert tables[SWITCHES["spine02"][0]].name == "MF0;spine02:MQM8700/U1"
        header = "Unicast lids [0x0-0x8] of switch Lid 2 guid 0xfc6a1c0300e6e100 (MF0;leaf02:MQM8700/U1):"
        assert tables[SWITCHES["leaf02"][0]].source == f"{f}:{f.read_text().splitlines().index(header) + 1}"


def test_ibroute_all_brief_lmc_and_direct_route_rows_and_opensms_own_dump():
    # ibroute -a over a direct route with LMC 1 on gpu003 (its second LID as "path #2 out of 2", as in the
    # dump_lfts.sh excerpt of github.com/weiny2/pragmatic-infiniband-utilities scripts/ibgraphfabric.pl);
    # then ibroute -n (no destinations: "0x0005 001 "); then OpenSM's opensm-lfts.dump, as osm_dump.c's
    # dump_ucast_lfts writes it (github.com/linux-rdma/opensm): quoted description, "#", "N lids dumped"
    text = ("Unicast lids [0x0-0xa] of switch DR path slid 0; dlid 0; 0,1 guid 0xfc6a1c0300e6c7c0 "
            "(MF0;leaf01:MQM8700/U1):\n  Lid  Out   Destination\n       Port     Info \n"
            "0x0000 255 : (path #0 - illegal port)\n"
            "0x0005 001 : (Channel Adapter portguid 0xb8cef60300d8a4e3: 'gpu001 mlx5_0')\n"
            "0x0007 034 : (Channel Adapter portguid 0xb8cef60300d8b001: 'gpu003 mlx5_0')\n"
            "0x0008 033 : (path #2 out of 2: portguid 0xb8cef60300d8b001)\n"
            "0x0009 255 : (illegal port)\n"
            "5 lids dumped \n"
            "Unicast lids [0x0-0x8] of switch Lid 2 guid 0xfc6a1c0300e6e100 (MF0;leaf02:MQM8700/U1):\n"
            "  Lid  Out   Destination\n       Port     Info \n0x0005 034 \n0x0007 001 \n2 valid lids dumped \n"
            "Unicast lids [0-8] of switch Lid 4 guid 0xfc6a1c0300e6d100 ('MF0;spine02:MQM8700/U1'):\n"
            "0x0004 000 # Switch portguid 0xfc6a1c0300e6d100: 'MF0;spine02:MQM8700/U1'\n"
            "0x0005 001 # Channel Adapter portguid 0xb8cef60300d8a4e3: 'gpu001 mlx5_0'\n"
            "0x0006 001 # unknown node and type\n"
            "8 lids dumped\n")
    tables, formats, notes = parse_lfts(text, "lfts.txt")
    assert (formats, notes) == ({"ibroute", "opensm-lfts.dump"}, [])
    ports = {t.name: {lid: t.port(lid) for lid in range(11) if t.port(lid) is not None} for t in tables.values()}
    assert ports == {"MF0;leaf01:MQM8700/U1": {5: 1, 7: 34, 8: 33}, "MF0;leaf02:MQM8700/U1": {5: 34, 7: 1},
                     "MF0;spine02:MQM8700/U1": {4: 0, 5: 1, 6: 1}}


def test_private_lfts_beyond_the_first_are_read_past_with_a_note():
    # ibdiagnet2.fdbs of a switch with private LFTs (the "PLFT_NUM: 0" line that the reader of
    # github.com/ananta111/libibautils ib_parser.cpp skips): PLFT 1's rows repeat LIDs and are not followed
    text = ("osm_ucast_mgr_dump_ucast_routes: Switch 0xfc6a1c0300e6c7c0\nPLFT_NUM: 0\nLID    : Port : Hops : Optimal\n"
            "0x0007 : 034  : 00   : yes\nPLFT_NUM: 1\nLID    : Port : Hops : Optimal\n0x0007 : 033  : 00   : yes\n")
    tables, _, notes = parse_lfts(text, "ibdiagnet2.fdbs")
    assert tables[SWITCHES["leaf01"][0]].port(7) == 34
    assert notes == ["ibdiagnet2.fdbs:5: switch 0xfc6a1c0300e6c7c0 has private LFTs (PLFT_NUM): only PLFT 0 is "
                     "followed, so paths through it may not be the ones every ingress port uses"]


def test_the_tools_own_messages_are_read_past_and_a_cut_table_is_noted():
    text = IBROUTE.read_text()
    text = text.replace("Unicast lids [0x0-0x8] of switch Lid 2 ",
                        "ibwarn: [4711] mad_rpc: _do_madrpc failed; dport (Lid 2)\n"
                        "Unicast lids [0x0-0x8] of switch Lid 2 ", 1)
    text = text.replace("0x0008 002 : (Channel Adapter portguid 0xb8cef60300d8b011: 'gpu004 mlx5_0')\n",
                        "SubnGet() failed; MAD status 0x1c AM 0x0\n", 1)  # leaf02's last row
    lines = text.splitlines()
    tables, _, notes = parse_lfts(text, "dump.txt")
    assert len(tables) == 4 and tables[SWITCHES["leaf02"][0]].port(8) is None
    _assert_at(notes[0], "dump.txt", lines.index("ibwarn: [4711] mad_rpc: _do_madrpc failed; dport (Lid 2)") + 1,
               r"the dump reported a problem \(read past\): 'ibwarn: \[4711\].*'; a table it could not read")
    _assert_at(notes[1], "dump.txt", lines.index("SubnGet() failed; MAD status 0x1c AM 0x0") + 1, "SubnGet")
    footer = next(i for i, ln in enumerate(lines) if i > lines.index("SubnGet() failed; MAD status 0x1c AM 0x0")
                  and ln.startswith("8 valid")) + 1
    _assert_at(notes[2], "dump.txt", footer, r"switch 0xfc6a1c0300e6e100: the dump says 8 LIDs and 7 rows are "
                                             r"here: a table cut short")
    cut = IBROUTE.read_text().rsplit("8 valid lids dumped", 1)[0]
    _assert_at(parse_lfts(cut, "cut.txt")[2][0], "cut.txt",
               cut.splitlines().index("Unicast lids [0x0-0x8] of switch Lid 4 guid 0xfc6a1c0300e6d100 "
                                      "(MF0;spine02:MQM8700/U1):") + 1, r"has no \"lids dumped\" line: cut short\?")


HEAD = "Unicast lids [0x0-0x8] of switch Lid 1 guid 0xfc6a1c0300e6c7c0 (MF0;leaf01:MQM8700/U1):\n"
ROW = "0x0005 001 : (Channel Adapter portguid 0xb8cef60300d8a4e3: 'gpu001 mlx5_0')\n"


@pytest.mark.parametrize("text, line, why", [
    ("", None, r"no switch's forwarding table here; understood: ibroute or dump_lfts.sh output"),
    ("hello\n", 1, r"not a forwarding-table line: 'hello'; understood: ibroute"),
    (ROW, 1, r"a table row before any switch's header"),
    (HEAD + ROW + ROW, 3, r"LID 0x0005 has a second row in switch 0xfc6a1c0300e6c7c0's table \(from line 1\)"),
    (HEAD + ROW + HEAD, 3, r"switch 0xfc6a1c0300e6c7c0's table a second time \(first at t.txt:1\)"),
    (HEAD + ROW + "1 valid lids dumped\n" + ROW, 4, r"a table row after its switch's \"lids dumped\" line"),
    (HEAD + "0x0006 0x21 : (Switch)\n", 2, r"not a forwarding-table line: '0x0006 0x21"),
    ("Multicast mlids [0xc000-0xc001] of switch Lid 1 guid 0xfc6a1c0300e6c7c0 (leaf01):\n", 1,
     r"a multicast table \(ibroute -M\): routes need the unicast ones"),
    (TOPO.read_text(), 10, r"ibnetdiscover output, the cabling \(topology.switches\): topology.routes takes"),
])
def test_a_file_that_is_no_forwarding_table_is_refused_naming_file_and_line(text, line, why):
    _assert_at(_error(parse_lfts, text, "t.txt"), "t.txt", line, why)


# --- following the tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("f", [IBROUTE, FDBS])
def test_a_pair_crossing_the_spines_takes_the_cables_dmodk_picks_in_each_direction(fabric, f):
    routes = load_routes(f, fabric)
    # gpu001 (LID 5) <-> gpu003 (LID 7): both odd, both by spine02
    assert routes.path("gpu001", "gpu003", 0) == (cable("leaf01", 34, "spine02", 1), cable("spine02", 2, "leaf02", 34))
    assert routes.path("gpu003", "gpu001", 0) == (cable("leaf02", 34, "spine02", 2), cable("spine02", 1, "leaf01", 34))
    # gpu001 -> gpu004 (LID 8) goes up to spine01, its answer (LID 5) comes back by spine02
    assert names(routes.path("gpu001", "gpu004", 0)) == ["leaf01 port 33 -> spine01 port 1",
                                                         "spine01 port 2 -> leaf02 port 33"]
    assert names(routes.path("gpu004", "gpu001", 0)) == ["leaf02 port 34 -> spine02 port 2",
                                                         "spine02 port 1 -> leaf01 port 34"]
    assert routes.path("gpu001", "gpu002", 0) == () and routes.path("gpu004", "gpu003", 0) == ()  # one leaf
    assert routes.path("gpu001", "gpu999", 0) is None and routes.path("gpu999", "gpu001", 0) is None
    assert routes.path("gpu001", "gpu003", 1) is None  # no tables for rail 1
    assert routes.notes == []


def test_the_traced_path_is_the_computed_one(fabric):
    # ibtracert -G from gpu003's port to gpu001's, in the shape of github.com/meier/opensm-smt RT_Path.java:
    # each "[out] -> switch port {guid}[in]" after a switch is the cable from that switch's port out
    trace = (DATA / "dmodk-gpu003-gpu001.ibtracert").read_text()
    hops = [(int(port), kind, int(guid, 16), int(into)) for port, kind, guid, into in re.findall(
        r"\[(\d+)\] -> (switch|ca) port \{0x([0-9a-f]+)\}\[(\d+)\]", trace)]
    name = fabric.cabling[0].switches
    traced = [f"{name[a[2]]} port {b[0]} -> {name[b[2]]} port {b[3]}"
              for a, b in zip(hops, hops[1:]) if a[1] == b[1] == "switch"]
    assert traced == names(load_routes(IBROUTE, fabric).path("gpu003", "gpu001", 0)) == [
        "leaf02 port 34 -> spine02 port 2", "spine02 port 1 -> leaf01 port 34"]


def test_every_switch_to_switch_cable_in_both_directions(fabric):
    cables = load_routes(IBROUTE, fabric).cables(0)
    assert len(cables) == 8 and len({c.undirected() for c in cables}) == 4
    assert cables[:2] == [cable("leaf01", 33, "spine01", 1), cable("leaf01", 34, "spine02", 1)]
    up, down = cable("leaf01", 34, "spine02", 1), cable("spine02", 1, "leaf01", 34)
    assert up.undirected() == down.undirected() and up != down
    assert down.name() == "spine02 port 1 -> leaf01 port 34"


def _table(text: str, switch: str, lid: int, port: int) -> str:
    """The ibroute dump with `switch`'s entry for `lid` sent to `port`."""
    head = f"of switch Lid {SWITCHES[switch][1]} guid "
    start = text.index(head)
    row = re.compile(rf"^0x{lid:04x} \d{{3}} ", re.M)
    m = row.search(text, start)
    return text[:m.start()] + f"0x{lid:04x} {port:03d} " + text[m.end():]


def test_a_loop_in_the_tables_ends_with_none_and_a_note(fabric, tmp_path):
    looped = tmp_path / "lfts.txt"
    looped.write_text(_table(IBROUTE.read_text(), "spine02", 7, 1))  # spine02 sends gpu003's LID back to leaf01
    routes = load_routes(looped, fabric)
    assert routes.path("gpu001", "gpu003", 0) is None and routes.path("gpu002", "gpu003", 0) is None
    assert routes.path("gpu003", "gpu001", 0) is not None  # the other direction never meets the loop
    assert routes.notes == ["rail 0: 1 walk(s) toward a destination go round a loop in the forwarding tables, e.g. "
                            "LID 7 (gpu003): leaf01 port 34 -> spine02 port 1, spine02 port 1 -> leaf01 port 34: the "
                            "cables of the pairs they carry are unknown"]


@pytest.mark.parametrize("change, note", [
    (lambda t: t.split("Unicast lids [0x0-0x8] of switch Lid 2 ")[0] + "Unicast lids [0x0-0x8] of switch Lid 3 "
     + t.split("Unicast lids [0x0-0x8] of switch Lid 3 ")[1],
     r"reach a switch whose forwarding table was not given, e.g. leaf02 \(0xfc6a1c0300e6e100\) on the way to LID 7"),
    (lambda t: _table(t, "spine02", 7, 9),
     r"leave a switch by a port the cabling shows no cable on, e.g. spine02 port 9 .*\(tables and cabling of two"),
    (lambda t: _table(t, "leaf02", 7, 2), r"reach a host that does not have the destination LID, e.g. leaf02 port 2 "
                                          r"for LID 7 \(gpu003\) leads to CA 0xb8cef60300d8b010 port 1"),
    (lambda t: _table(t, "leaf01", 7, 0), r"reach a switch with no entry for the destination LID, e.g. leaf01 for "
                                          r"LID 7 \(gpu003\) \(.*lfts.txt:5\)"),
])
def test_a_walk_that_leads_nowhere_is_none_with_a_note(fabric, tmp_path, change, note):
    f = tmp_path / "lfts.txt"
    f.write_text(change(IBROUTE.read_text()))
    routes = load_routes(f, fabric)
    assert routes.path("gpu001", "gpu003", 0) is None
    assert routes.path("gpu001", "gpu002", 0) == ()
    assert len(routes.notes) == 1 + ("not given" in note) and re.search(note, routes.notes[-1]), routes.notes


def test_a_host_with_two_ports_on_the_rail_has_a_path_only_where_both_agree(tmp_path):
    topo = TOPO.read_text().replace(
        '[2]\t"H-b8cef60300d8b010"', '[3]\t"H-b8cef60300d8b000"[2](b8cef60300d8b002) \t\t# "gpu003 mlx5_0" lid 9 '
                                     '4xNDR\n[2]\t"H-b8cef60300d8b010"')
    (tmp_path / "rail0.topo").write_text(topo)
    fabric = load_fabric(tmp_path / "rail0.topo")
    assert fabric.cabling[0].hosts["gpu003"] == [(0xb8cef60300d8b000, 1, 7), (0xb8cef60300d8b000, 2, 9)]
    fdbs = FDBS.read_text().split("0x0009 : UNREACHABLE")
    for port_to_9, same in ((34, True), (33, False)):  # LID 9 by spine02 as LID 7, or by spine01
        ports = [port_to_9, 3, 2, 2]  # leaf01, leaf02, spine01, spine02
        (tmp_path / "lfts.fdbs").write_text("".join(part + (f"0x0009 : {ports[i]:03d}  : 00   : yes" if i < 4 else "")
                                                    for i, part in enumerate(fdbs)))
        routes = load_routes(tmp_path / "lfts.fdbs", fabric)
        assert (routes.path("gpu001", "gpu003", 0) is not None) == same
        assert routes.path("gpu003", "gpu004", 0) == ()


def test_routes_from_paths_for_tests_and_the_synthetic_generator():
    up = (cable("leaf1", 17, "spine1", 4), cable("spine1", 5, "leaf2", 17))
    routes = Routes.from_paths({("a", "b", 0): up, ("a", "c", None): (), ("b", "a", 1): up[::-1]})
    assert routes.path("a", "b", 0) == up and routes.path("a", "b", 1) is None
    assert routes.path("a", "c", 3) == ()  # rail None holds for every rail without its own
    assert routes.cables(0) == list(up) and routes.cables(None) == []
    assert up[0].name() == "leaf1 port 17 -> spine1 port 4"
    assert routes.rails == [None, 0, 1] and routes.notes == []


# --- where routes come from: the profile's topology.routes --------------------------------------------------


def _profile(folder: Path, **topology: str):
    keys = "".join(f'{k} = "{v}"\n' for k, v in topology.items())
    (folder / "site.toml").write_text(f"[topology]\n{keys}")
    return load_profile(folder / "site.toml")


def _other_rail(text: str) -> str:
    """The same fabric with other GUIDs: another rail's subnet."""
    return text.replace("fc6a1c0300e6", "fc6a1c0300e7").replace("b8cef60300d8", "b8cef60300d9")


def test_routes_next_to_the_profile_are_attached_to_its_fabric(tmp_path, monkeypatch):
    shutil.copy(TOPO, tmp_path / "dmodk.topo")
    shutil.copy(IBROUTE, tmp_path / "lfts.txt")
    monkeypatch.chdir(DATA.parent)  # relative to the profile's folder, not the working one
    monkeypatch.delenv("ACCEPTANCE_TOPOLOGY", raising=False)
    fabric = fabric_for(_profile(tmp_path, switches="dmodk.topo", routes="lfts.txt"))
    assert fabric.routes.source == str(tmp_path / "lfts.txt")
    assert names(fabric.routes.path("gpu002", "gpu003", 0)) == ["leaf01 port 34 -> spine02 port 1",
                                                                "spine02 port 2 -> leaf02 port 34"]
    assert fabric_for(_profile(tmp_path, switches="dmodk.topo")).routes is None


def test_a_folder_per_rail_and_one_file_for_every_rail(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEPTANCE_TOPOLOGY", raising=False)
    for sub in ("ib", "lfts", "one"):
        (tmp_path / sub).mkdir()
    (tmp_path / "ib" / "rail0.topo").write_text(TOPO.read_text())
    (tmp_path / "ib" / "rail1.topo").write_text(_other_rail(TOPO.read_text()))
    (tmp_path / "lfts" / "rail0.ibroute").write_text(IBROUTE.read_text())
    (tmp_path / "lfts" / "rail1.fdbs").write_text(_other_rail(FDBS.read_text()))
    (tmp_path / "one" / "all.txt").write_text(IBROUTE.read_text() + _other_rail(IBROUTE.read_text()))
    for routes in ("lfts", "one/all.txt"):
        fabric = fabric_for(_profile(tmp_path, switches="ib", routes=routes))
        assert [r["rail"] for r in fabric.routes.summary()["rails"]] == [0, 1]
        assert fabric.routes.path("gpu001", "gpu004", 1) == fabric.routes.path("gpu001", "gpu004", 0) == (
            cable("leaf01", 33, "spine01", 1), cable("spine01", 2, "leaf02", 33))
    assert fabric_for(_profile(tmp_path, switches="ib", routes="lfts")).routes.format == "ibdiagnet2.fdbs, ibroute"
    stranger = IBROUTE.read_text().split("Unicast lids")[4].replace("fc6a1c0300e6d100", "fc6a1c0300e8d100")
    (tmp_path / "rail0-and-more.txt").write_text(IBROUTE.read_text() + "Unicast lids" + stranger)
    notes = fabric_for(_profile(tmp_path, switches="ib", routes="rail0-and-more.txt")).routes.notes
    assert notes == [f"{tmp_path / 'rail0-and-more.txt'}: 1 switch table(s) of switches the cabling "
                     f"({tmp_path / 'ib'}) does not have, read past: 0xfc6a1c0300e8d100 (MF0;spine02:MQM8700/U1)",
                     f"{tmp_path / 'rail0-and-more.txt'}: rail 1: no forwarding table of any of its switches: the "
                     f"cables its pairs cross are unknown"]
    (tmp_path / "lfts" / "rail0.ibroute").rename(tmp_path / "lfts" / "rail1.ibroute")
    (tmp_path / "lfts" / "rail1.fdbs").rename(tmp_path / "lfts" / "rail0.fdbs")
    _assert_at(_error(fabric_for, _profile(tmp_path, switches="ib", routes="lfts")),
               str(tmp_path / "lfts" / "rail0.fdbs"), 3, r"switch leaf01 \(0xfc6a1c0300e7c7c0\) is in rail 1's cabling "
                                                         r"\(.*rail1.topo\), and this file is rail 0's: files of two "
                                                         r"rails swapped\?")


def test_routes_need_the_ibnetdiscover_cabling_of_the_same_fabric(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEPTANCE_TOPOLOGY", raising=False)
    (tmp_path / "topology.conf").write_text("SwitchName=s1 Nodes=gpu[001-002]\nSwitchName=s2 Nodes=gpu[003-004]\n")
    shutil.copy(IBROUTE, tmp_path / "lfts.txt")
    (tmp_path / "other.txt").write_text(_other_rail(IBROUTE.read_text()))
    shutil.copy(TOPO, tmp_path / "dmodk.topo")
    _assert_at(_error(fabric_for, _profile(tmp_path, switches="topology.conf", routes="lfts.txt")),
               str(tmp_path / "lfts.txt"), None, r"forwarding tables are followed over the fabric's cabling, which "
                                                 r"only ibnetdiscover output gives; the switch tree .*topology.conf is "
                                                 r"a topology.conf, which names no port or LID")
    with pytest.raises(InputError, match=r"the routes \(.*lfts.txt\) need the switch tree's cabling: give "
                                         r"--topology or set topology.switches to ibnetdiscover output"):
        fabric_for(_profile(tmp_path, routes="lfts.txt"))
    _assert_at(_error(fabric_for, _profile(tmp_path, switches="dmodk.topo", routes="other.txt")),
               str(tmp_path / "other.txt"), None, r"none of the 4 switches whose tables are here is in the cabling of "
                                                   r".*dmodk.topo: tables of another subnet")
    _assert_at(_error(fabric_for, _profile(tmp_path, switches="dmodk.topo", routes="nope")), str(tmp_path / "nope"),
               None, "no such file or folder")


def test_run_json_keeps_a_summary_and_the_report_reads_the_same_tables_again(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEPTANCE_TOPOLOGY", raising=False)
    shutil.copy(TOPO, tmp_path / "dmodk.topo")
    shutil.copy(IBROUTE, tmp_path / "lfts.txt")
    fabric = fabric_for(_profile(tmp_path, switches="dmodk.topo", routes="lfts.txt"))
    kept = fabric.to_json()
    assert kept["routes"] == {"source": str(tmp_path / "lfts.txt"), "format": "ibroute",
                              "digest": fabric.routes.digest, "rails": [{"rail": 0, "switches": 4, "tables": 4}],
                              "notes": []}
    again = kept_fabric(kept)
    assert again == fabric and again.routes.path("gpu001", "gpu003", 0) == fabric.routes.path("gpu001", "gpu003", 0)
    assert kept_fabric({k: v for k, v in kept.items() if k != "routes"}).routes is None
    (tmp_path / "lfts.txt").write_text(_table(IBROUTE.read_text(), "leaf01", 7, 33))  # rerouted since the run
    changed = kept_fabric(kept)
    assert changed.routes is None and changed.notes == [
        f"{tmp_path / 'lfts.txt'}: routes not followed: the forwarding tables or the cabling "
        f"({tmp_path / 'dmodk.topo'}) changed since the run, so which cables its pairs crossed is not known from them"]
    (tmp_path / "lfts.txt").unlink()
    gone = kept_fabric(kept)
    assert gone.routes is None
    assert gone.notes == [f"routes not followed: {tmp_path / 'lfts.txt'}: no such file or folder"]


def test_doctor_says_whether_the_profile_s_routes_are_known(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEPTANCE_TOPOLOGY", raising=False)
    shutil.copy(TOPO, tmp_path / "dmodk.topo")
    shutil.copy(IBROUTE, tmp_path / "lfts.txt")
    _profile(tmp_path, switches="dmodk.topo", routes="lfts.txt")
    monkeypatch.setenv("ACCEPTANCE_PROFILE", str(tmp_path / "site.toml"))
    line = doctor.probe_routes().line()
    assert line == (f"routes: usable \u2014 {tmp_path / 'lfts.txt'} (ibroute) over {tmp_path / 'dmodk.topo'}: "
                    f"switches with a table: rail 0 4/4")
    _profile(tmp_path, switches="dmodk.topo")
    assert routes_known(str(tmp_path / "site.toml")) == (False, (
        "profile site names no topology.routes: findings stop at a leaf's uplinks, not the cable (give ibroute / "
        "dump_lfts.sh output or ibdiagnet2.fdbs, docs/report.md)"))
    _profile(tmp_path, switches="dmodk.topo", routes="nope")
    usable, why = routes_known(str(tmp_path / "site.toml"))
    assert not usable and why.startswith(f"profile {tmp_path / 'site.toml'}: {tmp_path / 'nope'}: no such file")


def test_routes_given_on_the_command_line_and_the_plan_s_cable_coverage(tmp_path, monkeypatch, capsys):
    """--routes (or $ACCEPTANCE_ROUTES) instead of the profile's key: the plan then says which share of
    the switch-to-switch cable directions its pairs cross; a run refuses routes without the cabling."""
    from acceptance.cli import main
    monkeypatch.delenv("ACCEPTANCE_TOPOLOGY", raising=False)
    monkeypatch.delenv("ACCEPTANCE_ROUTES", raising=False)
    shutil.copy(TOPO, tmp_path / "dmodk.topo")
    shutil.copy(IBROUTE, tmp_path / "lfts.txt")
    profile = _profile(tmp_path)
    monkeypatch.setenv("ACCEPTANCE_ROUTES", str(tmp_path / "lfts.txt"))
    fabric = fabric_for(profile, str(tmp_path / "dmodk.topo"))
    assert fabric.routes is not None and fabric.routes.source == str(tmp_path / "lfts.txt")
    monkeypatch.delenv("ACCEPTANCE_ROUTES")
    assert fabric_for(profile, str(tmp_path / "dmodk.topo")).routes is None

    def plan(*args):
        assert main(["plan", "--rails", "1", "--profile", "local", "--json", *args]) == 0
        return json.loads(capsys.readouterr().out)["coverage"]
    tree = ["--topology", str(tmp_path / "dmodk.topo")]
    # All pairs of the 4 hosts cross each of the 8 cable directions (2 leaves x 2 spines, both ways).
    every = plan(*tree, "--routes", str(tmp_path / "lfts.txt"), "--pattern", "all-pairs")
    assert every["cables"] == {"0": 1.0} and "cables" not in every["notes"]
    # One round of the circle: gpu001-gpu004 and gpu002-gpu003, LIDs 5<->8 and 6<->7: each leaf sends a
    # destination up port 33 + LID mod 2, so the two pairs take different spines: still every cable.
    one = plan(*tree, "--routes", str(tmp_path / "lfts.txt"), "--pattern", "sample:1")
    assert 0 < one["cables"]["0"] <= 1.0
    assert plan(*tree)["notes"]["cables"] == "routes unknown (--routes)"
    # `acceptance run` reads them before launching anything: routes with no cabling stop it (exit 2).
    code = main(["run", "--profile", str(tmp_path / "site.toml"), "--nodes", "2", "--ranks-per-node", "1",
                 "--routes", str(tmp_path / "lfts.txt")])
    assert code == 2 and "need the switch tree's cabling" in capsys.readouterr().err
