"""What one run folder gives the store: its verdict, its nodes' identities, one value per link and
metric, and the components its findings name.

A link's value is, per direction, the median over burn-in iterations of the metric at the size that
tells most (bandwidths at the largest size measured, latencies at the smallest), and then its worse
direction. The metrics are the catalog's pairwise trend metrics (write and read bandwidth, latency
p50 and p99).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.load import load_records
from ..analysis.confirmed import confirmed_only
from ..analysis.outliers import pairwise_view
from ..records.naming import natural_key
from ..records.results import InputError
from ..rules import catalog
from .components import finding_subject

# What the store keeps of a finding besides its subject and message: enough to name its component
# (components.finding_name) without reading it back out of the subject.
FINDING_FIELDS = ("severity", "kind", "scope", "metric", "node", "rail", "peer", "switch")


LINKS_FILE = "links.npz"


@dataclass
class Night:
    run_id: str
    started: str                  # UTC ISO, the run's start
    path: str
    verdict: str                  # pass | fail | incomplete
    complete: bool
    exit_code: int | None
    names: list[str]              # node names; the links' u, v code into them
    rails: list[int]
    identity: dict                # run.json "identity": node -> {serial, nics: {rail: {device, guid, port}}}
    links: dict[str, pd.DataFrame] = field(default_factory=dict)  # metric -> rail, u, v (u < v), value, size
    units: dict[str, str] = field(default_factory=dict)
    findings: list[dict] = field(default_factory=list)  # {subject, message, FINDING_FIELDS}
    note: str = ""


def metrics() -> list[tuple[str, str, bool]]:
    """(suite, metric, higher is better) of the pairwise trend metrics the store keeps per link."""
    pairwise = {s.name for s in catalog.pairwise()}
    return [(s, m, catalog.direction(s, m) is not False) for s, m in catalog.with_role("trend") if s in pairwise]


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror or e}") from None
    except ValueError as e:
        raise InputError(f"{path}: not valid JSON ({e}); the run cannot be counted") from None


def _per_link(p: pd.DataFrame, metric: str, higher: bool) -> pd.DataFrame | None:
    rows = p[p["metric"].astype(str).to_numpy() == metric]
    rows = rows[~np.isnan(rows["value"].to_numpy())]
    if rows.empty:
        return None
    sizes = rows["size"].to_numpy()
    if not np.isnan(sizes).all():
        pick = np.nanmax(sizes) if higher else np.nanmin(sizes)
        rows = rows[sizes == pick]
        size = float(pick)
    else:
        size = float("nan")
    n = int(max(rows["s"].max(), rows["d"].max())) + 1
    rail, s, d = rows["rail"].to_numpy(np.int64), rows["s"].to_numpy(np.int64), rows["d"].to_numpy(np.int64)
    directed = pd.Series(rows["value"].to_numpy()).groupby((rail * n + s) * n + d).median()
    key = directed.index.to_numpy()
    r, s, d = key // (n * n), (key // n) % n, key % n
    undirected = (r * n + np.minimum(s, d)) * n + np.maximum(s, d)
    grouped = pd.Series(directed.to_numpy()).groupby(undirected)
    worst = grouped.min() if higher else grouped.max()
    k = worst.index.to_numpy()
    return pd.DataFrame({"rail": k // (n * n), "u": (k // n) % n, "v": k % n, "value": worst.to_numpy(),
                         "size": size})


def _verdict(run: dict, findings: list[dict]) -> tuple[str, bool]:
    complete = run.get("complete") is True and run.get("exit_code") not in (2, 3) and not run.get("missing_ranks")
    if not complete:
        return "incomplete", False
    if run.get("exit_code") == 1 or any(f.get("severity") == "fail" for f in findings):
        return "fail", True
    return "pass", True


def read_night(run_dir) -> Night:
    """A run folder as the store keeps it. InputError (file and why) when it is not a run folder or
    a file does not parse; a run that did not complete is read and marked incomplete."""
    run_dir = Path(run_dir)
    run_json = run_dir / "run.json"
    if not run_json.is_file():
        raise InputError(f"{run_json}: no such file (not a run folder)")
    run = _read_json(run_json, "run.json")
    if not isinstance(run, dict) or not run.get("run_id"):
        raise InputError(f"{run_json}: expected a JSON object with run_id")
    findings_path = run_dir / "findings.json"
    note = ""
    if findings_path.is_file():
        raw = _read_json(findings_path, "findings.json")
        if not isinstance(raw, list):
            raise InputError(f"{findings_path}: expected a list of findings")
        found = raw
    elif run.get("complete") is True:
        from ..analysis import analyze  # no findings.json yet: judge the run as `report` would
        found = analyze(run_dir).findings
        note = "findings computed at ingest (no findings.json)"
    else:
        found = []
    verdict, complete = _verdict(run, found)
    night = Night(run_id=str(run["run_id"]), started=str(run.get("start") or ""), path=str(run_dir.resolve()),
                  verdict=verdict, complete=complete, exit_code=run.get("exit_code"), names=[], rails=[],
                  identity=run.get("identity") or {}, note=note)
    night.findings = [{"subject": finding_subject(f), **{k: f.get(k) for k in FINDING_FIELDS},
                       "message": f.get("message", "")} for f in found if isinstance(f, dict)]
    saved = load_links(run_dir)
    if saved is None:
        records = load_records(run_dir)
        saved = night_links(records), _first_time(records)
    (night.names, night.links, night.units), first_time = saved
    topo = run.get("topology") or {}
    nodes = topo.get("nodes")
    listed = list(nodes) if isinstance(nodes, (list, dict)) else []
    if not night.names:
        night.names = sorted(listed, key=natural_key)
    night.rails = sorted({int(r) for frame in night.links.values() for r in np.unique(frame["rail"])}
                         | {int(r) for r in topo.get("rails") or [] if isinstance(r, int)})
    if not night.started:
        night.started = first_time or ""
    return night


def night_links(records: pd.DataFrame) -> tuple[list[str], dict[str, pd.DataFrame], dict[str, str]]:
    """(node names, metric -> per-link values, metric -> unit) of a run's records (a link measured
    again on confirmation: its confirmed value)."""
    records = confirmed_only(records)
    names, links, units, views = [], {}, {}, {}
    for suite, metric, higher in metrics():
        if not len(records):
            break
        if suite not in views:
            views[suite] = pairwise_view(records, suite)
        p, names, _ = views[suite]
        frame = _per_link(p, metric, higher) if len(p) else None
        if frame is not None:
            links[f"{suite}.{metric}"] = frame
            unit = records.loc[(records["suite"] == suite) & (records["metric"] == metric), "unit"]
            units[f"{suite}.{metric}"] = str(unit.iloc[0]) if len(unit) else ""
    return list(names), links, units


def _results_stamp(run_dir: Path) -> dict | None:
    try:
        st = (run_dir / "results.jsonl").stat()
    except OSError:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def save_links(run_dir, records: pd.DataFrame) -> Path | None:
    """RUN_DIR/links.npz: the night's per-link values, written by the run's own analysis (which has
    just parsed results.jsonl), so that ingesting the night does not parse it again. Stamped with
    results.jsonl's size and mtime: a results.jsonl changed since is parsed anew. None when the
    folder cannot be written (ingest then parses results.jsonl)."""
    run_dir = Path(run_dir)
    stamp = _results_stamp(run_dir)
    if stamp is None:
        return None
    names, links, units = night_links(records)
    arrays, meta = {}, {"stamp": stamp, "names": names, "first_time": _first_time(records), "metrics": []}
    for i, (metric, f) in enumerate(links.items()):
        meta["metrics"].append({"name": metric, "unit": units.get(metric, ""), "size": float(f["size"].iloc[0])})
        for col, dtype in (("rail", np.int32), ("u", np.int32), ("v", np.int32), ("value", np.float64)):
            arrays[f"m{i}_{col}"] = f[col].to_numpy(dtype)
    path = run_dir / LINKS_FILE
    tmp = run_dir / f".{LINKS_FILE}.tmp"
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    return path


def load_links(run_dir: Path):
    """((names, links, units), first_time) from RUN_DIR/links.npz; None when it is absent, unreadable
    or older than results.jsonl (then the caller parses results.jsonl: that is the record)."""
    path = run_dir / LINKS_FILE
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("stamp") != _results_stamp(run_dir):
                return None
            links, units = {}, {}
            for i, m in enumerate(meta["metrics"]):
                links[m["name"]] = pd.DataFrame({"rail": z[f"m{i}_rail"].astype(np.int64),
                                                 "u": z[f"m{i}_u"].astype(np.int64),
                                                 "v": z[f"m{i}_v"].astype(np.int64),
                                                 "value": z[f"m{i}_value"], "size": m["size"]})
                units[m["name"]] = m["unit"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (list(meta["names"]), links, units), meta.get("first_time")


def _first_time(records: pd.DataFrame) -> str | None:
    if "time" not in records.columns or not len(records):
        return None
    t = records["time"].dropna()
    return str(t.min()) if len(t) else None
