"""Putting it together: analyze() a run folder, find() the findings of records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .. import catalog
from ..results import InputError
from ..profile import SCHEMA, Profile, load_profile
from .base import SCOPE_ORDER
from .model import Analysis
from .evaluate import evaluate
from .failures import counter_findings, failed_tests, other_failures
from .fleet import too_few_findings
from .load import load_records
from .localize import localize
from .outliers import against_rails, bad_pairs, fleet_outliers, measured_pairs, node_names, pairwise_view, pair_values, rail_planes
from .output import drain_lines
from .trends import burnin_findings, regression_findings, compare
from .validate import check_record_nodes, topology_nodes



def _sort(findings: list[dict]) -> list[dict]:
    kinds = {"bound": 0, "outlier": 0, "counter": 0, "test": 0, "regression": 1, "drift": 2, "instability": 3,
             "fleet": 4}

    def key(f):
        return (0 if f["severity"] == "fail" else 1, SCOPE_ORDER.get(f["scope"], 9), kinds.get(f.get("kind"), 9),
                -1 if f["rail"] is None else f["rail"], f["node"] or "", f["peer"] or "")
    return sorted(findings, key=key)


def _evaluated(df: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    if df.attrs.get("evaluated") == (profile.name, profile.source) and "verdict" in df.columns:
        return df
    return evaluate(df, profile)


def _find(ev: pd.DataFrame, profile: Profile, deltas: pd.DataFrame | None) -> list[dict]:
    if ev.empty:
        return []
    findings, p2p_idx, measured, names = [], [], None, []
    # Every pairwise suite the catalog marks, each compared with its own fleet and localized alone.
    for suite in catalog.pairwise():
        p, names, idx = pairwise_view(ev, suite.name)
        if not len(idx):
            continue
        p2p_idx.append(idx)
        here = measured_pairs(p)
        if measured is None or suite.name == "rdma_write":  # burn-in and baseline localize host pairs
            measured = here
        pairs = pair_values(p, suite.name)
        outliers = fleet_outliers(pairs, profile)
        planes = rail_planes(pairs, profile) if pairs["rail"].nunique() >= 3 else None
        bad = bad_pairs(p, outliers, profile, suite.name)
        if planes is not None and len(planes):
            bad = against_rails(bad, pairs, planes, profile, suite.name)
        found = localize(bad, here, names, profile, "fleet", planes)
        for f in found:
            f["suite"] = suite.name
            f["message"] = suite.finding + f["message"]
        findings += found
    if measured is None:
        measured = pd.DataFrame({"rail": [], "u": [], "v": []}, dtype=np.int64)
        names = node_names(ev)[0]
    p2p_idx = np.concatenate(p2p_idx) if p2p_idx else np.zeros(0, dtype=np.int64)
    findings += other_failures(ev, p2p_idx)
    findings += failed_tests(ev)
    findings += counter_findings(ev)
    findings += too_few_findings(ev, profile.get("fleet.min_population"))
    findings += burnin_findings(ev, profile, measured)
    if deltas is not None:
        findings += regression_findings(deltas, profile, measured, names)
    return _sort(findings)


def find(df: pd.DataFrame, profile: Profile, baseline: pd.DataFrame | None = None) -> list[dict]:
    """Findings of a run's records (evaluated here unless evaluate() was run with this profile);
    with `baseline` records, regressions against them too."""
    ev = _evaluated(df, profile)
    deltas = compare(ev, baseline, profile) if baseline is not None else None
    return _find(ev, profile, deltas)


def _read_run(run_dir: Path, required: bool) -> dict:
    path = run_dir / "run.json"
    if not path.is_file():
        if required:
            raise InputError(f"{path}: no such file (a run folder needs run.json with run_id and profile)")
        return {"run_id": run_dir.name}
    try:
        run = json.loads(path.read_text())
    except ValueError as e:
        raise InputError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(run, dict):
        raise InputError(f"{path}: expected a JSON object")
    run.setdefault("run_id", run_dir.name)
    return run


def _snapshot_profile(p: dict) -> Profile:
    """The resolved profile run.json keeps (name, source, values), with keys it lacks at their defaults."""
    values = {}
    stored = p.get("values") or {}
    for section, fields in SCHEMA.items():
        got = stored.get(section) or {}
        values[section] = {}
        for key, fld in fields.items():
            if key in got:
                values[section][key] = got[key]
            else:
                values[section][key] = None if fld.default is None else fld.parse(fld.default)
    return Profile(name=str(p.get("name") or "run.json"), source=str(p.get("source") or ""),
                   description=str(p.get("description") or ""), values=values)


def _resolve_profile(run: dict, profile, run_dir: Path) -> Profile:
    if isinstance(profile, Profile):
        return profile
    if profile is not None:
        return load_profile(profile)
    p = run.get("profile")
    if p is None:
        raise InputError(f"{run_dir / 'run.json'}: no profile (give one: a built-in name or a .toml path)")
    if isinstance(p, str):
        return load_profile(p)
    if isinstance(p, dict):
        if isinstance(p.get("values"), dict):
            return _snapshot_profile(p)
        source, name = p.get("source"), p.get("name")
        if source and Path(source).is_file():
            return load_profile(source)
        if name:
            return load_profile(name)
    raise InputError(f"{run_dir / 'run.json'}: profile must be a name, a path or an object with "
                     f"values, source or name; got {p!r}")


def _checked(df: pd.DataFrame, known, run_dir: Path) -> pd.DataFrame:
    """The records, once their node names are checked (validate.check_record_nodes: InputError)."""
    check_record_nodes(df, known, known_from=run_dir / "run.json")
    return df


def analyze(run_dir, profile: Profile | str | None = None, baseline_dir=None) -> Analysis:
    """Analyze a run folder: records judged against the profile, findings, drain lines,
    and the comparison with a baseline run folder when one is given.

    The profile is, in order: the argument; the resolved profile run.json keeps (what the run
    was judged with, missing keys at their defaults); the file or name run.json names.
    """
    import time
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    run = _read_run(run_dir, required=profile is None)
    prof = _resolve_profile(run, profile, run_dir)
    known = topology_nodes(run, run_dir / "run.json")
    records = _checked(load_records(run_dir), known, run_dir)
    records = evaluate(records, prof)
    t1 = time.perf_counter()
    deltas = baseline_id = None
    if baseline_dir is not None:
        baseline_dir = Path(baseline_dir)
        base_run = _read_run(baseline_dir, required=False)
        baseline_id = base_run.get("run_id")
        base_known = topology_nodes(base_run, baseline_dir / "run.json")
        deltas = compare(records, _checked(load_records(baseline_dir), base_known, baseline_dir), prof)
    findings = _find(records, prof, deltas)
    extra = {"seconds": {"load": round(t1 - t0, 3), "analyze": round(time.perf_counter() - t1, 3)},
             "skipped_lines": records.attrs.get("skipped_lines", 0)}
    return Analysis(run=run, profile=prof, records=records, findings=findings, drains=drain_lines(findings, known),
                    deltas=deltas, baseline_id=baseline_id, extra=extra)
