"""A finding: plain data, the shape of one entry of findings.json (docs/records.md, "A finding")."""

from __future__ import annotations

import math
from typing import TypedDict

import numpy as np


class Finding(TypedDict):
    severity: str            # fail | warn
    scope: str               # link | nic | node | rail | switch | uplink | cluster
    node: str | None
    rail: int | None
    peer: str | None         # a link's other end
    suite: str | None        # the records' suite
    metric: str | None
    value: float | None
    expected: float | None   # the bound, the fleet median or the baseline the value is held to
    evidence: list[str]      # readable lines, most telling first
    message: str
    kind: str                # bound | outlier | counter | test | fleet | drift | instability | transient | full_load ...
    unit: str | None
    size: int | None
    bound: str | None        # how `expected` was derived when it is a bound (absolute, line_rate, fleet, ...)
    basis: str | None        # a fleet bound's population, in words
    switch: str | None       # scope switch: the leaf or spine; scope uplink: the leaf whose uplink it is
    uplinks: list[dict]      # scope uplink: the cables named (leaf, spine, leaf_port, spine_port; ports where known;
                             # a slow cable named by the routes: its direction "up" or "down" and its name "cable")
    alternatives: list[dict]  # explanations the measured pairs cannot tell from this one: {scope, switch, node, rail}
    transient: bool          # a screening suspect that did not reproduce when measured again: a warning, never drained
    direction: str | None    # scope nic: "tx" (slow sending only) or "rx" (receiving only); scope uplink naming a
                             # node: its traffic "rx" (into it) or "tx" (from it) with other leaves; else null


def clean_value(x):
    """numpy scalars as Python numbers, NaN and infinities as None (JSON has neither)."""
    if x is None:
        return None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, (np.bool_,)):
        return bool(x)
    return x


def _text(x) -> str | None:
    return x if isinstance(x, str) else None  # a pandas NA or NaN where a column had no value


def make_finding(*, severity: str, scope: str, metric: str | None, message: str, kind: str,
                 evidence=(), node: str | None = None, rail=None, peer: str | None = None, value=None,
                 expected=None, unit=None, size=None, bound=None, basis=None, suite=None, switch=None,
                 uplinks=(), alternatives=(), transient: bool = False, direction: str | None = None) -> Finding:
    """One finding, every field named."""
    size = clean_value(size)
    return Finding(severity=severity, scope=scope, node=node, rail=None if rail is None else int(rail), peer=peer,
                   suite=_text(suite), metric=metric, value=clean_value(value), expected=clean_value(expected),
                   evidence=list(evidence), message=message, kind=kind, unit=_text(unit),
                   size=None if size is None else int(size), bound=_text(bound), basis=_text(basis),
                   switch=switch, uplinks=[dict(u) for u in uplinks], alternatives=[dict(a) for a in alternatives],
                   transient=bool(transient), direction=direction)
