"""Validation on load: the node names records carry.

A drain line names its node to scontrol, which reads a hostlist expression: a record
whose node is `gpu[001-512]` would drain 512 nodes. So, when a run folder is analyzed,
every node a record names must be a plain Slurm node name (node_name_problem) and,
where run.json has a topology, one of the run's own nodes. Either failure is an
InputError naming results.jsonl and the first line that names the node (exit 2).

Names are checked once per distinct name (the frame's src/dst categories and its
distinct `nodes` tuples), never per record; the file is read again only to find the
line of a bad name, on the error path.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Collection, Iterable
from pathlib import Path

import pandas as pd

from ..records.results import InputError

MAX_NODE_NAME = 255
SHOWN = 5

# What a Slurm node name cannot hold, and why (first match wins).
_RULES = (
    (re.compile(r"[\[\],]"), "hostlist syntax"),
    (re.compile(r"[\x00-\x1f\x7f]"), "a control character"),
    (re.compile(r"\s"), "whitespace"),
    (re.compile(r"="), "key=value syntax"),
    (re.compile(r"[\"'\\$`]"), "a quote, backslash, $ or backtick"),
)
_INVALID = re.compile("|".join(rule.pattern for rule, _ in _RULES))
_CHUNK = 16 << 20


def node_name_problem(name) -> str | None:
    """Why `name` is not a valid Slurm node name (a short phrase), or None when it is one.

    Invalid: not a string, empty, longer than 255 characters, hostlist syntax ([, ], a
    comma), whitespace, =, quotes, backslash, $, backtick or a control character.
    """
    if not isinstance(name, str):
        return f"not a string ({type(name).__name__})"
    if not name:
        return "empty"
    if len(name) > MAX_NODE_NAME:
        return f"longer than {MAX_NODE_NAME} characters ({len(name)})"
    for rule, why in _RULES:
        m = rule.search(name)
        if m:
            return f"{why} {m.group()!r}"
    return None


def is_node_name(name) -> bool:
    """Whether `name` is a valid Slurm node name (node_name_problem says why not)."""
    return (isinstance(name, str) and 0 < len(name) <= MAX_NODE_NAME
            and _INVALID.search(name) is None)


def topology_nodes(run: dict | None, source: str | Path = "run.json") -> frozenset[str] | None:
    """The node names of run.json's topology (`topology.nodes`: node -> ranks, or a list of
    names) and of the launches before a relaunch (`attempts`: their `nodes`), or None when it has none
    (a hand-made run folder, no run.json)."""
    topo = (run or {}).get("topology")
    if topo is None:
        return None
    if not isinstance(topo, dict):
        raise InputError(f"{source}: topology must be an object, got {type(topo).__name__}")
    nodes = topo.get("nodes")
    if nodes is None:
        return None
    if not isinstance(nodes, (dict, list)):
        raise InputError(f"{source}: topology.nodes must be an object (node -> ranks) or a list of "
                         f"node names, got {type(nodes).__name__}")
    earlier = [n for a in (run or {}).get("attempts") or [] if isinstance(a, dict) for n in a.get("nodes") or []]
    return frozenset(str(n) for n in [*nodes, *earlier])


def record_node_names(df: pd.DataFrame) -> set[str]:
    """Every distinct node name the records name (src, dst and every entry of `nodes`),
    from the distinct values only (no loop over records)."""
    names: set[str] = set()
    for col in ("src", "dst"):
        if col in df.columns and isinstance(df[col].dtype, pd.CategoricalDtype):
            names.update(map(str, df[col].cat.categories))
    if "nodes" in df.columns and len(df):
        lists = pd.unique(df["nodes"].to_numpy())
        names.update(str(n) for n in itertools.chain.from_iterable(t for t in lists if isinstance(t, tuple)))
    return names


def check_record_nodes(df: pd.DataFrame, known: Collection[str] | None = None,
                       known_from: str | Path = "run.json", source: str | Path | None = None) -> None:
    """InputError when a record names a node that is not a valid Slurm node name, or (with
    `known`, the run's topology nodes) one the run does not know; the message names the
    file (`source`, else df.attrs["source"]) and the first line that names it."""
    source = Path(source or df.attrs.get("source") or "results.jsonl")
    names = record_node_names(df)
    bad = {n: why for n in names if (why := node_name_problem(n)) is not None}
    if bad:
        line, name = first_line_naming(source, bad)
        others = sorted(set(bad) - {name})
        more = (f"; {len(others)} other invalid node name{'s' * (len(others) > 1)}: "
                f"{_listed(repr(n) for n in others)}" if others else "")
        raise InputError(f"{_where(source, line)}node name {name!r} is not a valid Slurm node name "
                         f"({bad[name]}){more}")
    if known is None:
        return
    unknown = names - set(known)
    if unknown:
        line, name = first_line_naming(source, unknown)
        others = sorted(unknown - {name})
        more = (f"; {len(others)} other unknown node{'s' * (len(others) > 1)}: {_listed(others)}"
                if others else "")
        raise InputError(f"{_where(source, line)}node {name!r} is not in the run's topology "
                         f"({known_from} topology.nodes: {len(known)} nodes, {_listed(sorted(known))}){more}")


def record_nodes(obj) -> list[str]:
    """A parsed record's node names, as analysis reads them (a lone value is a list of one)."""
    nodes = obj.get("nodes") if isinstance(obj, dict) else None
    if nodes is None:
        return []
    return [str(n) for n in (nodes if isinstance(nodes, list) else [nodes])]


def first_line_naming(path: str | Path, names: Collection[str]) -> tuple[int | None, str]:
    """(1-based line, name) of the first line of a results.jsonl whose record names one of
    `names`; (None, the least name) when no line does. For the error path: it reads the file."""
    names = set(names)
    needles = sorted({json.dumps(n).encode() for n in names} | {json.dumps(n, ensure_ascii=False).encode()
                                                                for n in names})
    try:
        found = _scan(Path(path), names, needles) or _scan(Path(path), names, None)
    except OSError:
        found = None
    return found or (None, min(names))


def _naming(raw: bytes, names: set[str]) -> str | None:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return next((n for n in record_nodes(obj) if n in names), None)


def _scan(path: Path, names: set[str], needles: list[bytes] | None) -> tuple[int, str] | None:
    """Search block by block: lines holding a needle (JSON-quoted name) are parsed; without
    needles (names written with other escapes) every line is."""
    line0 = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(_CHUNK)
            if not block:
                return None
            if not block.endswith(b"\n"):
                block += fh.readline()
            hits = []
            if needles is None:
                start = 0
                while start < len(block):
                    end = block.find(b"\n", start)
                    end = len(block) if end < 0 else end
                    name = _naming(block[start:end], names)
                    if name is not None:
                        hits.append((start, name))
                        break
                    start = end + 1
            else:
                for needle in needles:
                    start = 0
                    while (pos := block.find(needle, start)) >= 0:
                        begin = block.rfind(b"\n", 0, pos) + 1
                        end = block.find(b"\n", pos)
                        end = len(block) if end < 0 else end
                        name = _naming(block[begin:end], names)
                        if name is not None:
                            hits.append((begin, name))
                            break
                        start = end + 1
            if hits:
                begin, name = min(hits)
                return line0 + block.count(b"\n", 0, begin) + 1, name
            line0 += block.count(b"\n")


def _where(source: Path, line: int | None) -> str:
    return f"{source}: line {line}: " if line is not None else f"{source}: "


def _listed(items: Iterable[str]) -> str:
    items = list(items)
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more
