"""Putting it together: analyze() a run folder, find() the findings of records."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..records.results import InputError
from ..switchtree.fabric import Fabric
from ..rules.switches import fabric_for, kept_fabric
from ..rules.profile import Profile, load_profile
from ..rules.schema import SCHEMA
from .base import SCOPE_ORDER
from .confirmed import supersede
from . import fullload, lost
from .model import Analysis
from .evaluate import evaluate
from .detectors import DETECTORS, Context
from .load import load_records
from .output import drain_lines
from .outliers import node_names
from .switchports import switch_port_findings
from .trends import compare
from .validate import check_record_nodes, topology_nodes



def _sort(findings: list[dict]) -> list[dict]:
    kinds = {"bound": 0, "full_load": 0, "outlier": 0, "counter": 0, "test": 0, "regression": 1, "drift": 2, "instability": 3,
             "fleet": 4}

    def key(f):
        return (0 if f["severity"] == "fail" else 1, SCOPE_ORDER.get(f["scope"], 9), kinds.get(f.get("kind"), 9),
                -1 if f["rail"] is None else f["rail"], f["node"] or "", f["peer"] or "")
    return sorted(findings, key=key)


def _evaluated(df: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    if df.attrs.get("evaluated") == (profile.name, profile.source) and "verdict" in df.columns:
        return df
    return evaluate(df, profile)


def _find(ev: pd.DataFrame, profile: Profile, deltas: pd.DataFrame | None,
          fabric: Fabric | None = None) -> list[dict]:
    if ev.empty:
        return []
    ev, transient = supersede(ev, profile)  # a confirmation replaces its screening (analysis.confirmed)
    ev, loaded = fullload.split(ev, profile)  # the load check: slow only with every NIC busy
    ctx = Context.of(ev, profile, deltas, fabric)
    found = fullload.explained([f for detect in DETECTORS for f in detect(ctx)], loaded)
    return _sort(found + transient + loaded)


def find(df: pd.DataFrame, profile: Profile, baseline: pd.DataFrame | None = None,
         fabric: Fabric | None = None) -> list[dict]:
    """Findings of a run's records (evaluated here unless evaluate() was run with this profile);
    with `baseline` records, regressions against them too; with `fabric`, switch and uplink findings."""
    ev = _evaluated(df, profile)
    deltas = compare(ev, baseline, profile) if baseline is not None else None
    return _find(ev, profile, deltas, fabric)


def resolve_fabric(run: dict, profile: Profile, topology=None, run_json: Path | None = None,
                   routes=None) -> Fabric | None:
    """The switch trees to localize on: `topology` (a Fabric or a path: --topology), else the one
    run.json keeps, else the profile's topology.switches; with `routes` (--routes), followed over
    that tree's cabling instead of the routes run.json names."""
    if isinstance(topology, Fabric):
        return topology
    kept = run.get("fabric")
    if routes is not None and topology is None and isinstance(kept, dict) and kept.get("source"):
        topology = kept["source"]  # the tree the run kept, read again for the cabling the routes follow
    if topology is not None or routes is not None:
        return fabric_for(profile, topology or "", routes)
    if isinstance(kept, dict):
        try:
            return kept_fabric(kept)  # with the routes it followed, read again where their files are unchanged
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{run_json or 'run.json'}: fabric: not a switch tree ({e})") from None
    named = profile.get("topology.switches")
    return fabric_for(profile, "") if named else None


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


def run_profile(run_dir, profile: Profile | str | None = None) -> Profile:
    """The profile a run folder is judged with, as analyze() resolves it (InputError when none)."""
    run_dir = Path(run_dir)
    return _resolve_profile(_read_run(run_dir, required=profile is None), profile, run_dir)


def _checked(df: pd.DataFrame, known, run_dir: Path) -> pd.DataFrame:
    """The records, once their node names are checked (validate.check_record_nodes: InputError)."""
    check_record_nodes(df, known, known_from=run_dir / "run.json")
    return df


def analyze(run_dir, profile: Profile | str | None = None, baseline_dir=None, topology=None,
            routes=None) -> Analysis:
    """Analyze a run folder: records judged against the profile, findings, drain lines,
    and the comparison with a baseline run folder when one is given. `topology` (a Fabric or a
    path) and `routes` (a path) override the switch trees run.json keeps (resolve_fabric).

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
    fabric = resolve_fabric(run, prof, topology, run_dir / "run.json", routes)
    findings = _find(records, prof, deltas, fabric)
    findings = _sort(findings + switch_port_findings(run_dir, prof, fabric)  # the switches' own counters
                     + lost.findings(run))
    extra = {"seconds": {"load": round(t1 - t0, 3), "analyze": round(time.perf_counter() - t1, 3)},
             "skipped_lines": records.attrs.get("skipped_lines", 0)}
    if fabric is not None:
        extra["fabric_unknown"] = fabric.unknown(node_names(records)[0]) if len(records) else []
    return Analysis(run=run, profile=prof, records=records, findings=findings, drains=drain_lines(findings, known),
                    deltas=deltas, baseline_id=baseline_id, extra=extra, fabric=fabric)
