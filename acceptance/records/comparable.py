"""Whether two runs can be compared: the same profile, the same engine per suite, the same layout.

A regression is a change of the same measurement. Runs judged by different profiles, measured
by different engines (an MPI put and an RDMA WRITE are not the same latency), or over different
nodes and rails are not that, so `acceptance compare` and `acceptance report --baseline` refuse
them (exit 2, naming each difference) unless told to compare anyway (--force).
"""

from __future__ import annotations

from .naming import natural_key

SHOWN = 8


def _profile(run: dict) -> tuple[str, dict]:
    p = run.get("profile")
    if isinstance(p, dict):
        return str(p.get("name") or p.get("source") or "?"), p.get("values") or {}
    return (str(p) if p else "?"), {}


def _engines(run: dict) -> dict[str, str]:
    engines = run.get("engines") or {}
    return {suite: str(e.get("engine")) for suite, e in engines.items() if isinstance(e, dict)}


def _layout(run: dict) -> tuple[list[str], list]:
    topo = run.get("topology") or {}
    nodes = topo.get("nodes") or {}
    names = sorted(nodes if isinstance(nodes, dict) else map(str, nodes), key=natural_key)
    return names, list(topo.get("rails") or [])


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def differences(run: dict, baseline: dict) -> list[str]:
    """What makes `run` and `baseline` not comparable, one line each (none: comparable)."""
    out = []
    (name, values), (base_name, base_values) = _profile(run), _profile(baseline)
    if name != base_name:
        out.append(f"profile: {name} here, {base_name} in the baseline")
    elif values and base_values and values != base_values:
        keys = sorted(f"{section}.{key}" for section in set(values) | set(base_values)
                      for key in set(values.get(section) or {}) | set(base_values.get(section) or {})
                      if (values.get(section) or {}).get(key) != (base_values.get(section) or {}).get(key))
        if keys:
            out.append(f"profile {name}: values differ: {_listed(keys)}")
    engines, base_engines = _engines(run), _engines(baseline)
    for suite in sorted(set(engines) & set(base_engines)):
        if engines[suite] != base_engines[suite]:
            out.append(f"engine of {suite}: {engines[suite]} here, {base_engines[suite]} in the baseline")
    (nodes, rails), (base_nodes, base_rails) = _layout(run), _layout(baseline)
    if nodes and base_nodes and nodes != base_nodes:
        only_here = [n for n in nodes if n not in set(base_nodes)]
        only_there = [n for n in base_nodes if n not in set(nodes)]
        parts = [f"{len(nodes)} nodes here, {len(base_nodes)} in the baseline"]
        if only_here:
            parts.append(f"only here: {_listed(only_here)}")
        if only_there:
            parts.append(f"only in the baseline: {_listed(only_there)}")
        out.append("nodes: " + "; ".join(parts))
    if rails and base_rails and rails != base_rails:
        out.append(f"rails: {rails} here, {base_rails} in the baseline")
    return out
