"""Readers of the fabric's forwarding tables (topology.routes): each switch's linear forwarding table
(LFT), destination LID -> out port, as the InfiniBand tools dump it.

- ``ibroute <lid>`` / ``ibroute -G <guid>`` (infiniband-diags), and ``dump_lfts.sh`` / ``dump_fts``,
  which print ibroute's block for every switch one after another: "Unicast lids [0x0-0x..] of switch
  Lid N guid 0x... (desc):" (or "... of switch DR path slid 0; dlid 0; 0,1 guid ..."), two column
  header lines, rows "0x0001 018 : (Channel Adapter portguid 0x...: 'host HCA-1')" (an LMC's further
  LIDs as "(path #2 out of 4: portguid ...)", `-n` rows without a destination, `-a` rows "(illegal
  port)"), and "N valid lids dumped".
- OpenSM's own dump, opensm-lfts.dump (osm_dump.c, dump_ucast_lfts): the same header with the
  description quoted, "Unicast lids [0-N] ...", rows "0x0001 001 # Channel Adapter portguid ...",
  and "N lids dumped".
- ibdiagnet's ibdiagnet2.fdbs, in OpenSM's routes-dump form: "osm_ucast_mgr_dump_ucast_routes: Switch
  0x...", "LID    : Port : Hops : Optimal", rows "0x0002 : 003  : 00   : yes" or "0x0001 : UNREACHABLE"
  (a switch with private LFTs: "PLFT_NUM: 0" before its rows).

A switch is known by its node GUID, which the ibnetdiscover cabling names too, so each table goes to
the rail whose cabling has its switch: one file may hold every rail's switches, or a folder one file
per rail (rail<N>..., checked against the cabling). Errors are TopologyFileError "PATH:LINE: why";
what is read past (the tools' own messages, a table cut short) is a note of the same form.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fabric import Fabric
from .routes import NO_PORT, Routes, SwitchTable
from .sources import TOOL_MESSAGE, TopologyFileError, rail_files, read_text, where

_FORMATS = ("ibroute or dump_lfts.sh output (\"Unicast lids [...] of switch ...\" blocks), OpenSM's "
            "opensm-lfts.dump, ibdiagnet's ibdiagnet2.fdbs (\"osm_ucast_mgr_dump_ucast_routes: Switch ...\" "
            "blocks): a file, or a folder of rail<N> files")

_UNICAST = re.compile(r"Unicast lids \[(0x)?[0-9a-fA-F]+-(?:0x)?[0-9a-fA-F]+\] of switch (?:Lid \d+|DR path .*) "
                      r"guid 0x([0-9a-fA-F]+) \((.*)\):$")
_ROUTES = re.compile(r"\w*dump_ucast_routes: Switch 0x([0-9a-fA-F]+)$")
# a row: ibroute's "0x0001 018 : (...)" (or "0x0001 018" under -n), OpenSM's "0x0001 001 # ..."
_LFT_ROW = re.compile(r"0x([0-9a-fA-F]+)\s+(\d+)(?:\s+[:#]\s*(.*))?$")
# ibdiagnet's (and OpenSM's routes dump) "0x0002 : 003  : 00   : yes", "0x0001 : UNREACHABLE"
_FDB_ROW = re.compile(r"0x([0-9a-fA-F]+)\s*:\s*(?:(\d+)(\s*:.*)?|UNREACHABLE)$")
_COLUMNS = re.compile(r"Lid\s+Out\s+Destination|Port\s+Info|LID\s*:\s*Port\s*:\s*Hops\s*:\s*Optimal$")
_PLFT = re.compile(r"PLFT_NUM:\s*(\d+)$")
_FOOTER = re.compile(r"(\d+)\s+(valid\s+)?lids dumped$")
_MULTICAST = re.compile(r"Multicast mlids \[")
_CABLING = re.compile(r'(vendid|devid|sysimgguid|switchguid|caguid)=0x|(Switch|Ca)\s+\d+\s+"[SH]-|#\s*Topology file')


@dataclass
class _Block:
    """One switch's table while it is read."""

    guid: int
    name: str | None
    line: int
    format: str
    entries: dict[int, int] = field(default_factory=dict)  # LID -> out port
    rows: int = 0           # rows read, those forwarding nowhere included (what ibroute's footer counts)
    ended: bool = False     # its footer was read
    private: int = 0        # the private LFT its rows now belong to (rows of any but 0 are read past)


def load_routes(path, fabric: Fabric) -> Routes:
    """The forwarding tables in `path` (a file, or a folder of rail<N> files) followed over `fabric`'s
    cabling; TopologyFileError naming file, line and why when they cannot be."""
    p = Path(path).expanduser()
    if not fabric.cabling:
        raise TopologyFileError.at(str(p), None, f"forwarding tables are followed over the fabric's cabling, which "
                                                 f"only ibnetdiscover output gives; the switch tree "
                                                 f"{fabric.source} is a {fabric.format}, which names no port or "
                                                 f"LID: give ibnetdiscover output (a file, or a folder of rail<N> "
                                                 f"files) as topology.switches")
    if p.is_dir():
        files: dict[int | None, Path] = dict(rail_files(p, "the forwarding tables of one rail's switches"))
    elif p.exists():
        files = {None: p}  # one file: each table's switch says its rail
    else:
        raise TopologyFileError.at(str(p), None, "no such file or folder")
    rail_of_switch = {g: rail for rail, c in fabric.cabling.items() for g in c.switches}
    tables: dict[int, dict[int, SwitchTable]] = {}
    strangers: list[SwitchTable] = []
    formats: set[str] = set()
    notes: list[str] = []
    digest = hashlib.sha256()
    for named, f in sorted(files.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0)):
        text = read_text(f, _FORMATS)
        digest.update(text.encode())
        read, kinds, noted = parse_lfts(text, str(f))
        formats |= kinds
        notes += noted
        for guid, table in read.items():
            rail = rail_of_switch.get(guid)
            if rail is None:
                strangers.append(table)
                continue
            if named is not None and rail != named:
                raise TopologyFileError.at(table.source, None, (
                    f"switch {fabric.cabling[rail].switches[guid]} (0x{guid:016x}) is in rail {rail}'s cabling "
                    f"({fabric.cabling[rail].source}), and this file is rail {named}'s: files of two rails swapped?"))
            tables.setdefault(rail, {})[guid] = table
    if not tables:
        raise TopologyFileError.at(str(p), None, f"none of the {len(strangers)} switches whose tables are here is in "
                                                 f"the cabling of {fabric.source}: tables of another subnet, or "
                                                 f"taken before its switches were replaced?")
    for rail, c in sorted(fabric.cabling.items()):  # the cabling too: the same tables over new cables walk otherwise
        digest.update(repr((rail, sorted(c.links.items()), sorted(c.hosts.items()), sorted(c.switches.items())))
                      .encode())
    return Routes.from_tables(fabric.cabling, tables, str(p), ", ".join(sorted(formats)),
                              f"sha256:{digest.hexdigest()}", notes + _coverage(str(p), fabric, tables, strangers))


def _coverage(source: str, fabric: Fabric, tables: dict[int, dict[int, SwitchTable]],
              strangers: list[SwitchTable]) -> list[str]:
    """The notes on what the tables do not cover: switches the cabling lacks, switches and rails without a table."""
    notes = []
    if strangers:
        listed = ", ".join(f"0x{t.guid:016x} ({t.name})" for t in strangers[:3])
        more = f" and {len(strangers) - 3} more" if len(strangers) > 3 else ""
        notes.append(where(source, None, f"{len(strangers)} switch table(s) of switches the cabling "
                                         f"({fabric.source}) does not have, read past: {listed}{more}"))
    for rail, got in sorted(tables.items()):
        missing = [name for g, name in fabric.cabling[rail].switches.items() if g not in got]
        if missing:
            notes.append(where(source, None, f"rail {rail}: {len(missing)} of {len(fabric.cabling[rail].switches)} "
                                             f"switches have no forwarding table here ({', '.join(missing[:3])}"
                                             f"{' ...' if len(missing) > 3 else ''}): paths through them are unknown"))
    for rail in sorted(set(fabric.cabling) - set(tables)):
        notes.append(where(source, None, f"rail {rail}: no forwarding table of any of its switches: the cables its "
                                         f"pairs cross are unknown"))
    return notes


def parse_lfts(text: str, source: str) -> tuple[dict[int, SwitchTable], set[str], list[str]]:
    """The tables of one file, by switch GUID; the formats its blocks are in; its notes."""
    tables: dict[int, SwitchTable] = {}
    formats: set[str] = set()
    notes: list[str] = []
    block: _Block | None = None
    row = None  # the current block's row pattern's match, None outside a block or after its footer
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = row(line) if row else None
        if m:  # the bulk of a file: kept in this loop, a function call a row would cost a third of the time
            block.rows += 1
            lid, port, tail = m.groups()
            if port is None or block.private:
                continue  # UNREACHABLE, or a row of another private LFT than 0
            if int(port) >= NO_PORT or (tail and "illegal port" in tail):
                continue  # ibroute -a lists the entries that forward nowhere
            lid = int(lid, 16)
            if lid in block.entries:
                raise TopologyFileError.at(source, number, f"LID 0x{lid:04x} has a second row in switch "
                                                           f"0x{block.guid:016x}'s table (from line {block.line})")
            block.entries[lid] = int(port)
            continue
        if not line or line.startswith("#"):
            continue
        if TOOL_MESSAGE.match(line):
            notes.append(where(source, number, f"the dump reported a problem (read past): {line[:160]!r}; a table "
                                               f"it could not read is missing or cut short"))
            continue
        header = _UNICAST.match(line) or _ROUTES.match(line)
        if header:
            if block is not None:
                _close(block, tables, notes, source)
            block = _open(header, number)
            row = (_FDB_ROW if block.format == "ibdiagnet2.fdbs" else _LFT_ROW).match
            formats.add(block.format)
            continue
        if row and _COLUMNS.match(line):
            continue
        plft = _PLFT.match(line) if row else None
        if plft:
            block.private = int(plft.group(1))
            if block.private == 1:
                notes.append(where(source, number, f"switch 0x{block.guid:016x} has private LFTs (PLFT_NUM): "
                                                   f"only PLFT 0 is followed, so paths through it may not be "
                                                   f"the ones every ingress port uses"))
            continue
        footer = _FOOTER.match(line)
        if footer and row:
            if footer.group(2) and int(footer.group(1)) != block.rows:  # OpenSM's footer gives the top LID instead
                notes.append(where(source, number, f"switch 0x{block.guid:016x}: the dump says {footer.group(1)} "
                                                   f"LIDs and {block.rows} rows are here: a table cut short or "
                                                   f"edited; a destination without its row has no path"))
            block.ended, row = True, None
            continue
        raise TopologyFileError.at(source, number, _why(line, block))
    if block is not None:
        _close(block, tables, notes, source)
    if not tables:
        raise TopologyFileError.at(source, None, f"no switch's forwarding table here; understood: {_FORMATS}")
    return tables, formats, notes


def _why(line: str, block: _Block | None) -> str:
    """Why `line` is refused, with the fix where one is known."""
    if _MULTICAST.match(line):
        return "a multicast table (ibroute -M): routes need the unicast ones: run ibroute without -M"
    if _CABLING.match(line):
        return ("ibnetdiscover output, the cabling (topology.switches): topology.routes takes the forwarding "
                f"tables: {_FORMATS}")
    if block is None and (_LFT_ROW.match(line) or _FDB_ROW.match(line)):
        return "a table row before any switch's header (\"Unicast lids ... of switch ...\" or \"...: Switch 0x...\")"
    if block is not None and block.ended and _LFT_ROW.match(line):
        return "a table row after its switch's \"lids dumped\" line"
    return f"not a forwarding-table line: {line[:80]!r}; understood: {_FORMATS}"


def _open(header: re.Match, number: int) -> _Block:
    if header.re is _ROUTES:
        return _Block(int(header.group(1), 16), None, number, "ibdiagnet2.fdbs")
    # ibroute's range is in hex ("[0x0-0x16f]"), OpenSM's in decimal with its description quoted
    fmt = "ibroute" if header.group(1) else "opensm-lfts.dump"
    name = header.group(3)
    if fmt == "opensm-lfts.dump" and len(name) >= 2 and name[0] == name[-1] == "'":
        name = name[1:-1]
    return _Block(int(header.group(2), 16), name, number, fmt)


def _close(block: _Block, tables: dict[int, SwitchTable], notes: list[str], source: str) -> None:
    if block.guid in tables:
        raise TopologyFileError.at(source, block.line, f"switch 0x{block.guid:016x}'s table a second time (first at "
                                                       f"{tables[block.guid].source})")
    if block.format != "ibdiagnet2.fdbs" and not block.ended:
        notes.append(where(source, block.line, f"switch 0x{block.guid:016x}'s table has no \"lids dumped\" line: "
                                               f"cut short? A destination without its row has no path"))
    ports = np.full(max(block.entries, default=0) + 1, NO_PORT, dtype=np.uint8)
    if block.entries:
        ports[np.fromiter(block.entries.keys(), np.int64, len(block.entries))] = \
            np.fromiter(block.entries.values(), np.uint8, len(block.entries))
    tables[block.guid] = SwitchTable(block.guid, block.name, ports, f"{source}:{block.line}")
