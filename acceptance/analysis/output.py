"""What analysis writes: findings.json, drain.txt (scontrol lines)."""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from pathlib import Path

import numpy as np

from ..host.slurmnode import Drain, reason as slurm_reason
from ..rules import catalog
from .model import Analysis
from .validate import is_node_name
from .finding import clean_value
from .wording import fmt_value



def _reason(f: dict) -> str:
    """A short drain reason from a finding: what is bad, by how much."""
    metric = f.get("metric") or "check"
    where = f"NIC rail {f['rail']} " if f.get("scope") == "nic" else ""
    value, expected, unit = f.get("value"), f.get("expected"), f.get("unit") or ""
    kind = f.get("kind")
    entry = catalog.metric(str(f.get("suite") or ""), metric)
    if kind == "lost":
        text = f["evidence"][0] if f.get("evidence") else "lost during the run"
    elif kind == "instability":
        text = f"{metric} unstable"
    elif entry is not None and entry.unlimited:  # its value may be "unlimited": no number to quote
        text = f"{entry.label} too low"
    elif value is not None and expected is not None:
        text = f"{metric} {fmt_value(value)} vs {fmt_value(expected)} {unit}".rstrip()
        if kind == "regression":
            text += " baseline"
    else:
        text = f"{metric} failed"
    return f"{where}{text}"


def drain_lines(findings: list[dict], nodes: Collection[str] | None = None) -> list[Drain]:
    """One drain per node named by a failing node- or NIC-scope finding (first finding wins), with the
    reason "acceptance: <suite>: <what>" (host.slurmnode: the namespace node-check resumes from).

    Only exact Slurm node names are drained (validate.is_node_name: never a hostlist such as
    gpu[001-512], which scontrol would expand), and with `nodes` (the run's topology) only
    those nodes; a finding naming any other is left out (analysis refuses such records when it
    loads them, so that is a caller's mistake, not something to drain). The node name is
    shell-quoted in the line when it needs it; the reason holds no quote, backslash, $, backtick or
    control character (slurmnode.clean_reason), so the line is safe to paste into a shell, and
    --drain passes the argv, never through a shell.
    """
    known = None if nodes is None else frozenset(nodes)
    reasons: dict[str, str] = {}
    for f in findings:
        node = f.get("node")
        if f.get("severity") == "fail" and f.get("scope") in ("node", "nic") and node:
            node = str(node)
            if is_node_name(node) and (known is None or node in known):
                reasons.setdefault(node, slurm_reason(str(f.get("suite") or "run"), _reason(f)))
    return [Drain(node, reason) for node, reason in reasons.items()]


def _json_default(x):
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.bool_):
        return bool(x)
    return str(x)


def write_outputs(run_dir, analysis: Analysis) -> None:
    """findings.json (a list, indent 2) and drain.txt (the scontrol lines, or an empty file)."""
    run_dir = Path(run_dir)
    findings = [{k: clean_value(v) for k, v in f.items()} for f in analysis.findings]
    (run_dir / "findings.json").write_text(json.dumps(findings, indent=2, default=_json_default,
                                                      allow_nan=False) + "\n")
    (run_dir / "drain.txt").write_text("".join(d.line + "\n" for d in analysis.drains))
