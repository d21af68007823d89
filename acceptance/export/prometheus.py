"""A run's key metrics and findings for Prometheus, in node_exporter's textfile-collector format.

    acceptance report RUN --prometheus /var/lib/node_exporter/textfile/acceptance.prom

node_exporter (--collector.textfile.directory=/var/lib/node_exporter/textfile) reads every
*.prom file of that folder at each scrape, so the site sees the acceptance verdict next to its
node metrics. The file is replaced atomically (a temporary file in the same folder, renamed
over it), as node_exporter asks: a scrape never sees half a file.

Conventions (https://prometheus.io/docs/practices/naming/): every family is a gauge with
# HELP and # TYPE, names start with `acceptance_` and end in their base unit (`_seconds`,
`_bytes_per_second`; bandwidth in bytes, not bits, which promtool's linter requires), values
are in that unit. Every series carries `run_id` and `profile`; labels that do not apply to a
series are left out (an empty label and a missing one are the same to Prometheus).

Cardinality is bounded by nodes x rails, never by links: a 1,024-node x 8-rail run gives
about 16,400 NIC series, and findings are capped at FINDINGS_MAX.

Families:
  acceptance_run_info{verdict}                      1
  acceptance_run_complete                           0 / 1 (run.json `complete`, when present)
  acceptance_run_exit_code                          run.json `exit_code`, when present
  acceptance_run_start_timestamp_seconds            run.json `start` / `end` (UTC), when present
  acceptance_run_end_timestamp_seconds
  acceptance_run_records                            records analyzed
  acceptance_run_iterations                         burn-in iterations seen in the records
  acceptance_findings{severity,scope}               count; every fail/warn x scope, zeros included
  acceptance_finding{severity,scope,kind,node,rail,peer,metric,size_bytes}   findings with those labels (1)
  acceptance_transient_findings{rail}               count of suspects that did not reproduce (neither of the
        above: never a fail or warning); every rail of the run, zeros included
  acceptance_nic_<metric>_bytes_per_second{node,rail,size_bytes}   (or _seconds for a latency)
        median of the NIC (both directions, every partner) at the largest size (the latency size), for
        every pairwise metric the catalog exports (acceptance.rules.catalog Metric.export): write_bandwidth,
        read_bandwidth, write_latency_p99, gpu_write_bandwidth
  acceptance_rail_<metric>_bytes_per_second{rail,size_bytes}        the same over a rail plane
  acceptance_collective_busbw_bytes_per_second{op,scope,rail,size_bytes}
        median bus bandwidth at the largest size; scope world, rail (with rail) or node (median over nodes)
  acceptance_port_error_increase{node,rail,device,port,counter,kind}
        largest rise of an error, retransmit or discard counter (acceptance.host.counter_kinds.kind_of) in one
        measurement window; non-zero ones only
  acceptance_node_drain_suggested{node}             1 for each node of the drain lines
With the run's history check (RUN_DIR/history.json, `acceptance history check`; render's `history`):
  acceptance_history_findings{kind,severity}        count; every drift/intermittent/recovered/trend x fail/warn,
                                                    zeros included (absent: the night was not checked)
  acceptance_history_finding{kind,severity,subject,scope,node,rail,peer,metric}   1 for each drift or
        intermittent finding: subject as the store names it (node07, node07:rail3, node07:rail3:node12,
        rail3); alert on it, e.g. acceptance_history_finding{severity="fail"} == 1

Medians over burn-in iterations first (per link and direction), then over links.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ..history.checked import SHOWN_KINDS
from ..history.store import HISTORY_KINDS
from ..report import digest
from ..rules import catalog

PREFIX = "acceptance_"
FINDINGS_MAX = 1000     # findings are few; a run with more is broken everywhere, and the counts say so
SEVERITIES = ("fail", "warn")
SCOPES = ("link", "nic", "node", "rail", "switch", "uplink", "cluster")

# Record units -> the family's base unit.
BANDWIDTH_BYTES = catalog.base_factors("bytes_per_second")
# Counter kinds (acceptance.host.counter_kinds.kind_of) that count something going wrong, not traffic, pause
# frames, waits or congestion notifications: the port-counter suites' metrics marked `wrong` in the catalog.
ERROR_KINDS = tuple(dict.fromkeys(n for _, n in catalog.with_role("wrong")))


# ---------------------------------------------------------------------------------------
# Exposition format
# ---------------------------------------------------------------------------------------

def escape_label(value) -> str:
    """A label value as the text format wants it: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA or x is pd.NaT


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(x: float) -> str:
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


class _Family:
    def __init__(self, name: str, help_text: str):
        self.name = PREFIX + name
        self.help = help_text
        self.samples: list[tuple[dict, float]] = []

    def add(self, labels: dict, value) -> None:
        self.samples.append((labels, value))

    def text(self, base: dict) -> str:
        lines = [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} gauge"]
        for labels, value in self.samples:
            merged = {**base, **{k: v for k, v in labels.items() if not _missing(v)}}
            inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in merged.items())
            lines.append(f"{self.name}{{{inner}}} {_number(value)}")
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# From records: vectorized selections and medians
# ---------------------------------------------------------------------------------------

def _is(series: pd.Series, value) -> np.ndarray:
    return (series == value).to_numpy(dtype=bool, na_value=False)


def _floats(series: pd.Series) -> np.ndarray:
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _scale(units: pd.Series, table: dict) -> np.ndarray:
    """Per row: the factor from the record's unit to the base unit (NaN: unknown unit)."""
    return pd.Series(units, copy=False).map(table).to_numpy(dtype=np.float64, na_value=np.nan)


def _node_codes(df: pd.DataFrame) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(names, src codes, dst codes) over one shared list of names; -1: none."""
    src, dst = df["src"], df["dst"]
    if isinstance(src.dtype, pd.CategoricalDtype) and isinstance(dst.dtype, pd.CategoricalDtype) \
            and src.cat.categories.equals(dst.cat.categories):
        return list(src.cat.categories), src.cat.codes.to_numpy(np.int64), dst.cat.codes.to_numpy(np.int64)
    s = pd.Categorical(src.astype(object))
    d = pd.Categorical(dst.astype(object))
    names = sorted(set(map(str, s.categories)) | set(map(str, d.categories)))
    s = pd.Categorical(src.astype(object), categories=names)
    d = pd.Categorical(dst.astype(object), categories=names)
    return names, s.codes.astype(np.int64), d.codes.astype(np.int64)


def _p2p(records: pd.DataFrame, suite: str, metric: str, size: float | None, names_codes) -> pd.DataFrame:
    """A pairwise suite's `metric` between two nodes on a rail at `size` (None: the largest measured):
    one value per (rail, s, d), the median over burn-in iterations, in the base unit."""
    _, s, d = names_codes
    rail = _floats(records["rail"])
    sizes = _floats(records["size"])
    mask = (_is(records["suite"], suite) & _is(records["metric"], metric) & ~np.isnan(rail)
            & (s >= 0) & (d >= 0) & (s != d))
    if not mask.any():
        return pd.DataFrame({"rail": [], "s": [], "d": [], "value": []})
    if size is None or not (mask & (sizes == size)).any():
        size = np.nanmax(sizes[mask]) if size is None else np.nanmin(sizes[mask])
    mask &= sizes == size
    idx = np.flatnonzero(mask)
    table = catalog.base_factors(catalog.metric(suite, metric).quantity)  # the catalog says what it measures
    value = _floats(records["value"])[idx] * _scale(records["unit"].take(idx), table)
    p = pd.DataFrame({"rail": rail[idx].astype(np.int64), "s": s[idx], "d": d[idx], "value": value,
                      "iteration": records["iteration"].to_numpy()[idx]})
    p = p[~np.isnan(p["value"].to_numpy())]
    if len(p) and p["iteration"].nunique() > 1:
        p = p.groupby(["rail", "s", "d"], sort=False)["value"].median().reset_index()
    p = p[["rail", "s", "d", "value"]].reset_index(drop=True)
    p.attrs["size"] = float(size)
    return p


def _per_nic(p: pd.DataFrame) -> pd.DataFrame:
    """Median per (node, rail) over every link of the NIC, as source and as destination."""
    node = np.concatenate([p["s"].to_numpy(), p["d"].to_numpy()])
    rail = np.concatenate([p["rail"].to_numpy(), p["rail"].to_numpy()])
    value = np.concatenate([p["value"].to_numpy(), p["value"].to_numpy()])
    both = pd.DataFrame({"node": node, "rail": rail, "value": value})
    return both.groupby(["node", "rail"])["value"].median().reset_index()


def _size_label(size) -> str | None:
    return None if _missing(size) else str(int(size))


def _p2p_families(records: pd.DataFrame, latency_size, fams: dict) -> None:
    codes = _node_codes(records)
    names = codes[0]
    for suite, metric, key in EXPORTED:
        timed = catalog.metric(suite, metric).quantity == "seconds"  # a latency: at the latency size
        p = _p2p(records, suite, metric, latency_size if timed else None, codes)
        if p.empty:
            continue
        label = _size_label(p.attrs.get("size"))
        nic = fams[f"nic_{key}"]
        for row in _per_nic(p).itertuples(index=False):
            nic.add({"node": names[row.node], "rail": int(row.rail), "size_bytes": label}, row.value)
        rail = fams[f"rail_{key}"]
        for r, v in p.groupby("rail")["value"].median().items():
            rail.add({"rail": int(r), "size_bytes": label}, v)


def _collectives(records: pd.DataFrame, fam: _Family) -> None:
    mask = np.zeros(len(records), dtype=bool)
    for suite, metric in catalog.communicator_panels():  # the collectives' headline: busbw
        mask |= _is(records["suite"], suite) & _is(records["metric"], metric)
    if not mask.any():
        return
    idx = np.flatnonzero(mask)
    c = pd.DataFrame({
        "op": records["op"].take(idx).astype(object).fillna("").to_numpy(),
        "scope": records["scope"].take(idx).astype(object).fillna("").to_numpy(),
        "rail": _floats(records["rail"])[idx],
        "size": _floats(records["size"])[idx],
        "value": _floats(records["value"])[idx] * _scale(records["unit"].take(idx), BANDWIDTH_BYTES)})
    c = c[~np.isnan(c["value"].to_numpy()) & ~np.isnan(c["size"].to_numpy())]
    if c.empty:
        return
    c["rail"] = np.where(c["scope"] == "rail", c["rail"], -1)
    c = c[c["size"] == c.groupby(["op", "scope", "rail"])["size"].transform("max")]
    for (op, scope, rail, size), v in c.groupby(["op", "scope", "rail", "size"])["value"].median().items():
        fam.add({"op": op or None, "scope": scope or None, "rail": None if rail < 0 else int(rail),
                 "size_bytes": _size_label(size)}, v)


def _counters(records: pd.DataFrame, fam: _Family) -> None:
    mask = np.zeros(len(records), dtype=bool)
    for suite in catalog.suite_names(ports=True):
        mask |= _is(records["suite"], suite)
    if not mask.any():
        return
    idx = np.flatnonzero(mask)
    from ..host.counter_kinds import kind_of
    c = records.take(idx)
    metric = c["metric"].astype(object)
    kinds = {m: kind_of(m) for m in metric.dropna().unique() if isinstance(m, str)}  # few distinct names
    kind = metric.map(kinds)
    value = _floats(c["value"])
    keep = kind.isin(ERROR_KINDS).to_numpy(bool) & _is(c["unit"], "count") & (value > 0)
    if not keep.any():
        return
    c, kind = c[keep], kind[keep]
    def field(name):
        return c[name].astype(object).to_numpy() if name in c.columns else np.full(len(c), None, dtype=object)
    port = field("port")
    t = pd.DataFrame({"node": c["src"].astype(object).to_numpy(), "rail": _floats(c["rail"]),
                      "device": field("device"), "port": [None if _missing(p) else str(int(p)) for p in port],
                      "counter": c["metric"].astype(object).to_numpy(), "kind": kind.to_numpy(),
                      "value": value[keep]})
    keys = ["node", "rail", "device", "port", "counter", "kind"]
    worst = t.groupby(keys, dropna=False, sort=True)["value"].max()
    for (node, rail, device, port_n, counter, kind_name), v in worst.items():
        fam.add({"node": node, "rail": None if _missing(rail) else int(rail), "device": device,
                 "port": port_n, "counter": counter, "kind": kind_name}, v)


def _timestamp(text) -> float | None:
    if not text or not isinstance(text, str):
        return None
    try:
        t = pd.Timestamp(text)
    except (ValueError, TypeError):
        return None
    if t is pd.NaT:
        return None
    if t.tzinfo is None:
        t = t.tz_localize("UTC")
    return t.timestamp()


# ---------------------------------------------------------------------------------------
# The file
# ---------------------------------------------------------------------------------------

def _exported() -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    """(suite, metric, family key) of every pairwise metric the catalog exports, and the HELP of its NIC
    and rail families: acceptance_{nic,rail}_<export>_{bytes_per_second,seconds}."""
    out, helps = [], {}
    for suite, name in catalog.with_role("export"):
        m = catalog.metric(suite, name)
        key = f"{m.export}_{m.quantity}"
        at = "the latency size" if m.quantity == "seconds" else "the largest measured size"
        out.append((suite, name, key))
        helps[f"nic_{key}"] = f"Median {m.label} of a NIC over its partners and both directions at {at}."
        helps[f"rail_{key}"] = f"Median {m.label} of the links of a rail plane at {at}."
    return out, helps


EXPORTED, _EXPORTED_HELP = _exported()

_HELP = {
    "run_info": "Acceptance run: 1, with its verdict (pass, warn, fail) as a label.",
    "run_complete": "1 when every rank finished the run, 0 when it was incomplete (hang, crash, lost rank).",
    "run_exit_code": "Exit code of the run: 0 passed, 1 a check failed, 2 usage error, 3 incomplete.",
    "run_start_timestamp_seconds": "Start of the run, Unix time.",
    "run_end_timestamp_seconds": "End of the run, Unix time.",
    "run_records": "Measurement records analyzed.",
    "run_iterations": "Burn-in iterations in the records (1 without burn-in).",
    "findings": "Findings of the run by severity and scope.",
    "finding": f"One series per finding (value: how many findings share these labels); at most {FINDINGS_MAX}.",
    "transient_findings": "Suspects that did not reproduce when measured again (never a fail, never drained), "
                          "per rail: the fabric's congestion signal.",
    **_EXPORTED_HELP,
    "collective_busbw_bytes_per_second": "Median collective bus bandwidth at the largest size, per operation "
                                         "and communicator (world, rail, node: median over nodes).",
    "port_error_increase": "Largest rise of a port error or discard counter in one measurement window "
                           "(non-zero only).",
    "node_drain_suggested": "1 for a node the run suggests draining (see drain.txt).",
}


_HISTORY_HELP = {
    "history_findings": "Findings of the night's history check (acceptance history check) by kind and severity.",
    "history_finding": "One series per drift or intermittent finding of the night's history check (value: how "
                       f"many share these labels); at most {FINDINGS_MAX}.",
}


def _history(check: dict, fams: dict) -> None:
    findings = [f for f in check.get("findings") or [] if isinstance(f, dict)]
    counts = {(kind, sev): 0 for kind in HISTORY_KINDS for sev in SEVERITIES}
    for f in findings:
        key = (f.get("kind"), f.get("severity"))
        counts[key] = counts.get(key, 0) + 1
    for (kind, sev), n in counts.items():
        fams["history_findings"].add({"kind": kind, "severity": sev}, n)
    shown: dict[tuple, int] = {}
    for f in [f for f in findings if f.get("kind") in SHOWN_KINDS][:FINDINGS_MAX]:
        rail = f.get("rail")
        labels = (("kind", f.get("kind")), ("severity", f.get("severity")), ("subject", f.get("subject")),
                  ("scope", f.get("scope")), ("node", f.get("node")),
                  ("rail", None if _missing(rail) else int(rail)), ("peer", f.get("peer")),
                  ("metric", f.get("metric")))
        shown[labels] = shown.get(labels, 0) + 1
    for labels, n in shown.items():
        fams["history_finding"].add(dict(labels), n)


def render(analysis, history: dict | None = None) -> str:
    """The exposition text of an analysis.Analysis (node_exporter textfile format). history: the run's
    history check (RUN_DIR/history.json, acceptance.history.checked.read_check), or None."""
    run = analysis.run or {}
    base = {"run_id": str(run.get("run_id") or ""), "profile": str(getattr(analysis.profile, "name", "") or "")}
    fams = {key: _Family(key, text) for key, text in _HELP.items()}
    records = analysis.records

    fams["run_info"].add({"verdict": analysis.verdict}, 1)
    if isinstance(run.get("complete"), bool):
        fams["run_complete"].add({}, int(run["complete"]))
    if isinstance(run.get("exit_code"), int) and not isinstance(run.get("exit_code"), bool):
        fams["run_exit_code"].add({}, run["exit_code"])
    for key in ("start", "end"):
        ts = _timestamp(run.get(key))
        if ts is not None:
            fams[f"run_{key}_timestamp_seconds"].add({}, ts)
    fams["run_records"].add({}, len(records))
    if len(records):
        fams["run_iterations"].add({}, int(pd.Series(records["iteration"]).nunique()))

    # A transient (a suspect that did not reproduce) is no fail or warning: counted apart, per rail.
    standing = [f for f in analysis.findings if not digest.is_transient(f)]
    counts = {(sev, scope): 0 for sev in SEVERITIES for scope in SCOPES}
    for f in standing:
        key = (f.get("severity"), f.get("scope"))
        counts[key] = counts.get(key, 0) + 1
    for (sev, scope), n in counts.items():
        fams["findings"].add({"severity": sev, "scope": scope}, n)
    transient = digest.counts(analysis.findings, (run.get("topology") or {}).get("rails") or ())["transient"]
    for rail, n in transient.items():
        fams["transient_findings"].add({"rail": rail}, n)
    shown: dict[tuple, int] = {}
    for f in standing[:FINDINGS_MAX]:
        labels = (("severity", f.get("severity")), ("scope", f.get("scope")), ("kind", f.get("kind")),
                  ("node", f.get("node")), ("rail", None if f.get("rail") is None else int(f["rail"])),
                  ("peer", f.get("peer")), ("switch", f.get("switch")), ("metric", f.get("metric")),
                  ("size_bytes", _size_label(f.get("size"))))
        shown[labels] = shown.get(labels, 0) + 1   # same labels twice would be a duplicate series
    for labels, n in shown.items():
        fams["finding"].add(dict(labels), n)

    if len(records):
        latency_size = None
        try:
            latency_size = float(analysis.profile.get("latency.size"))
        except (AttributeError, KeyError, TypeError, ValueError):
            pass
        _p2p_families(records, latency_size, fams)
        _collectives(records, fams["collective_busbw_bytes_per_second"])
        _counters(records, fams["port_error_increase"])
    for node in dict.fromkeys(d.node for d in analysis.drains):
        fams["node_drain_suggested"].add({"node": node}, 1)
    if history is not None:
        fams.update({key: _Family(key, text) for key, text in _HISTORY_HELP.items()})
        _history(history, fams)

    head = [f"# acceptance run {escape_label(base['run_id'])}: verdict {analysis.verdict}"]
    if len(analysis.findings) > FINDINGS_MAX:
        head.append(f"# {len(analysis.findings) - FINDINGS_MAX} more findings are counted in "
                    f"{PREFIX}findings but not listed in {PREFIX}finding (see findings.json)")
    return "\n".join(head) + "\n" + "".join(f.text(base) for f in fams.values() if f.samples)


def path_problem(path) -> str | None:
    """Why `path` cannot take the file (None: it can), checked before a long analysis."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder; give a file in it, e.g. {path / 'acceptance.prom'}"
    folder = path.parent
    if not folder.is_dir():
        return f"folder {folder} does not exist (point node_exporter's --collector.textfile.directory at it)"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write in {folder} (permission denied)"
    return None


def write(analysis, path, history: dict | None = None) -> Path:
    """Write render(analysis, history) to `path` atomically: a temporary file in the same folder (not named
    *.prom, so node_exporter skips it), flushed to disk, then renamed over `path`."""
    path = Path(path)
    text = render(analysis, history)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # mkstemp makes it 0600; node_exporter often runs as another user
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
