"""Verdicts and findings: from records to "node07's NIC on rail 3 is 40% slow, drain it".

Pipeline (analyze()):

  results.jsonl --load_records--> DataFrame --evaluate--> threshold, verdict per record
      --find--> findings (absolute bounds, fleet outliers, localization, burn-in, baseline)
      --drain_lines--> scontrol lines;  write_outputs -> findings.json, drain.txt

Everything is vectorized with numpy/pandas: a 1,024-node x 8-rail all-pairs run is
millions of records. Loops only run over things that are few (rails, profile rules,
findings), never over records.

Judging records (evaluate). Every record is re-judged against the profile; the
threshold and verdict the suites wrote are ignored. RULES maps (suite, metric) to a
profile key, a direction and a unit conversion (profile durations are seconds and
records microseconds; profile rates are Gbit/s and collective busbw records GB/s).
With analysis.line_rate set, rdma_write bandwidth from analysis.line_rate_from_size
up must also reach line_rate_fraction x line_rate (the stricter bound applies).

Fleet outliers. Per (metric, size, rail), rdma_write bandwidth (low is bad) and put
latency p50/p99/p99.9 (high is bad) of each node pair (the median over burn-in
iterations) are compared with the pair's peers by a one-sided modified z-score,
M = 0.6745 (x - median) / MAD (Iglewicz and Hoaglin). A pair is an outlier when M is
beyond analysis.outlier_z on the bad side and it is also at least
analysis.outlier_min_deviation away from the median (so a tiny MAD never flags a
healthy link; with MAD = 0 only the deviation counts). Groups of fewer than 3 pairs
are not tested. An outlier is a `fail` when it is at least twice
outlier_min_deviation off the median (20% by default) or also fails a bound, else a
`warn`.

Localization (per rail, on the graph of measured node pairs). A pair is bad when one
of its directions is an outlier or fails a bound (any size, any metric, data errors
included).
  NIC   a node's NIC on a rail is bad when at least analysis.nic_fraction of its
        partners on that rail have a bad link with it, and at least 2 do. NICs are
        peeled greedily, worst fraction first, and the links of a flagged NIC no longer
        count for its partners (so one bad NIC never makes its partners look bad).
        With 2 nodes on a rail a bad link cannot be told from a bad NIC: it is reported
        as a link, and the evidence says so.
  rail  a rail plane is bad when its median is an outlier against the other rails'
        medians (same robust test, per metric and size; needs >= 3 rails), or when at
        least analysis.rail_fraction of its nodes (and at least 2) have a bad NIC on it,
        counting only nodes that do not look bad on most of their other rails. On a rail
        that is slow against the others, pairs slow against the other rails' median are
        evidence too; the plane is confirmed only if, after its bad NICs are peeled, at
        least rail_fraction of its remaining links are still bad (or rail_fraction of its
        nodes have bad NICs): on a small rail one bad NIC can drag the rail's median down,
        and that is a NIC, not the plane. A rail with 2 nodes is one link, never a plane.
  node  a node is bad when its NIC is bad on at least analysis.node_fraction of the
        rails it has (and on at least 2), not counting rails that are bad planes.
  cluster  when every rail (of 2 or more) is a bad plane, one cluster finding.
The most specific explanation wins and explained evidence is not repeated: a rail
explains everything on it, a node everything touching it on every rail, a NIC its
links; remaining bad pairs are link findings (node = source, peer = destination; a link
bad both ways is named with its nodes in sorted order).

Other failures (not point-to-point): collectives over a rail -> rail finding, inside
a node -> node finding, over the world -> cluster finding; memreg and preflight
failures -> node findings (one per node and metric), or one cluster finding when the
same metric fails on at least half of the nodes (and 2 or more): a fleet-wide bound
problem is not a reason to drain every node.

Burn-in (records with several iterations; series of at least 4 iterations) of
rdma_write bandwidth, latency p50 and p99 and collective busbw: drift when the median
of the last quarter of iterations is worse than that of the first quarter by more
than analysis.drift_tolerance; instability when the coefficient of variation across
iterations exceeds analysis.cv_max (not reported for a series that drifts: the drift
is the variation). Both are warnings, localized like outliers.

Baseline (compare): per (suite, metric, size, rail, src, dst, op, scope) the median
now vs the baseline's median, for rdma_write bandwidth, latency p50 and p99 and
collective busbw; change is signed so that negative is worse. A regression is a change
worse than analysis.regression_tolerance: a `warn`, or a `fail` beyond twice it.
Regressions are localized like outliers.

Findings are sorted fail before warn, then rail, node, nic, link, cluster. Besides the
DESIGN.md keys a finding carries `kind` (bound, outlier, drift, instability,
regression), `unit` and `size` (of the headline value).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .measure.stats import samples_needed
from .profile import SCHEMA, Profile, load_profile


@dataclass
class Analysis:
    run: dict                         # run.json as read (at least run_id and profile)
    profile: Profile                  # the profile the records were re-evaluated against
    records: pd.DataFrame             # one row per record; see load_records() for the columns
    findings: list[dict]              # DESIGN.md schema, most severe and most specific first
    drains: list[str]                 # scontrol lines, one per node to drain
    deltas: pd.DataFrame | None = None  # baseline comparison, when a baseline was given
    baseline_id: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """'fail' if any finding fails, else 'warn' if any warns, else 'pass'."""
        severities = {f["severity"] for f in self.findings}
        return "fail" if "fail" in severities else "warn" if "warn" in severities else "pass"


VERDICTS = ["pass", "fail", "warn", "info"]
SCOPE_ORDER = {"rail": 0, "node": 1, "nic": 2, "link": 3, "cluster": 4}
EVIDENCE_MAX = 10
MIN_GROUP = 3          # fewest values a fleet-relative (outlier) comparison is made on
MAD_SCALE = 0.6745     # modified z-score: 0.6745 (x - median) / MAD


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------
#
# json.loads is ~20 us per record on a slow 2-core machine: 80 s for 4 million. The
# harness writes every record with json.dumps in one key order (results.make_record),
# so one compiled regular expression splits such lines into their fields in C; the
# fields are then converted column-wise with numpy. A line in any other shape (other
# key order, other spacing, NaN, odd strings) is parsed with json.loads, written back
# in the canonical shape and goes through the same path, so the result never depends
# on which path a line took.

_S = rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'                 # a JSON string
_SN = rb'(?:"[^"\\\n]*(?:\\.[^"\\\n]*)*"|null)'        # a string or null
_NUM = rb'(?:-?[0-9][0-9.eE+-]*|null)'                 # a number or null
_LIST = rb'\[[^"\]\n]*(?:"[^"\\\n]*(?:\\.[^"\\\n]*)*"[^"\]\n]*)*\]'
# Groups: segments of consecutive keys that take few distinct values (parsed once per
# distinct value), and the fields that vary per record (value, nodes, time).
_CANONICAL = (rb'\{"test": (' + _S + rb', "suite": ' + _S + rb', "metric": ' + _S + rb'), "value": (' + _NUM
              + rb'), "unit": (' + _S + rb', "size": ' + _NUM + rb', "rail": ' + _NUM + rb'), "nodes": \[('
              + _LIST[2:-2] + rb')\], "ranks": ' + _LIST + rb', "engine": (' + _SN + rb', "memory": ' + _SN
              + rb', "iteration": ' + _NUM + rb'), "time": (' + _SN + rb'), "samples": (' + _NUM
              + rb', "threshold": ' + _NUM + rb', "verdict": ' + _SN + rb'(?:, "detail": ' + _SN
              + rb')?)\}\r?\n')
_LINE = re.compile(_CANONICAL + rb'|([^\n]*)\n')
# segment group -> the key its text starts after, and the record keys it holds
_SEGMENTS = {0: ("test", ("test", "suite", "metric")), 2: ("unit", ("unit", "size", "rail")),
             4: ("engine", ("engine", "memory", "iteration")),
             6: ("samples", ("samples", "threshold", "verdict", "detail"))}
_VALUE, _NODES, _TIME, _OTHER = 1, 3, 5, 7
_CHUNK = 16 << 20
_STRING_COLUMNS = ("test", "suite", "metric", "unit", "engine", "memory", "verdict", "detail")
_NUMBER_COLUMNS = ("size", "rail", "iteration", "samples", "threshold")


def _jstr(raw: bytes) -> str:
    """A JSON string body (without quotes) as text."""
    if b"\\" in raw:
        return json.loads(b'"' + raw + b'"')
    return raw.decode("utf-8", "replace")


class _Factorizer:
    """Codes for byte strings across chunks: each chunk is factorized on its own, and the
    distinct values of all chunks once more at the end (no Python loop over values)."""

    def __init__(self):
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []
        self._uniques: np.ndarray | None = None
        self._codes: np.ndarray | None = None

    def add(self, column: np.ndarray) -> None:
        local, uniques = pd.factorize(column)
        self.parts.append((local.astype(np.int32), np.asarray(uniques, dtype=object)))

    def finish(self) -> tuple[np.ndarray, list[bytes]]:
        """(codes of every row added, in order; the distinct values they index)."""
        if not self.parts:
            return np.zeros(0, dtype=np.int64), []
        parts, self.parts = self.parts, []   # free the per-chunk values as soon as possible
        all_uniques = np.concatenate([u for _, u in parts])
        global_of, uniques = pd.factorize(all_uniques)
        del all_uniques
        codes, offset = [], 0
        for local, u in parts:
            codes.append(global_of[offset + local])
            offset += len(u)
        del parts
        return np.concatenate(codes).astype(np.int64), list(uniques)


def _canonical_line(obj) -> bytes:
    """A record parsed by json.loads, written back in the shape the fast path reads."""
    if not isinstance(obj, dict):
        raise TypeError("not a JSON object")

    def num(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        return v if math.isfinite(v) else None

    def text(v):
        return None if v is None else str(v)

    def listing(v):
        return [] if v is None else v if isinstance(v, list) else [v]

    rec = {"test": str(obj.get("test", "")), "suite": str(obj.get("suite", "")),
           "metric": str(obj.get("metric", "")), "value": num(obj.get("value")),
           "unit": str(obj.get("unit") or ""), "size": num(obj.get("size")), "rail": num(obj.get("rail")),
           "nodes": [str(n) for n in listing(obj.get("nodes"))],
           "ranks": [num(r) for r in listing(obj.get("ranks"))],
           "engine": text(obj.get("engine")), "memory": text(obj.get("memory")),
           "iteration": num(obj.get("iteration")), "time": text(obj.get("time")),
           "samples": num(obj.get("samples")), "threshold": num(obj.get("threshold")),
           "verdict": text(obj.get("verdict"))}
    if obj.get("detail") is not None:
        rec["detail"] = str(obj["detail"])
    return json.dumps(rec).encode() + b"\n"


def _parse_chunk(block: bytes, first_line: int, path: Path, last_chunk: bool, facts: dict, out: dict) -> int:
    """Parse the whole lines of `block` into facts/out; returns how many lines it held."""
    matches = _LINE.findall(block)
    if not matches:
        return 0
    cols = np.array(matches, dtype=object)
    lines = np.arange(first_line, first_line + len(matches))
    canonical = cols[:, 0] != b""
    if not canonical.all():
        fixed, fixed_lines = [], []
        for i in np.flatnonzero(~canonical):
            raw = cols[i, _OTHER]
            if not raw.strip():
                continue
            try:
                fixed.append(_canonical_line(json.loads(raw)))
                fixed_lines.append(first_line + i)
            except (ValueError, TypeError, RecursionError) as e:
                if last_chunk and i == len(matches) - 1:
                    out["skipped"] += 1  # a line cut short by a crash: the test in flight is lost
                    continue
                raise ValueError(f"{path}: line {first_line + i + 1}: not a JSON record ({e})") from None
        cols, lines = cols[canonical], lines[canonical]
        if fixed:
            extra = np.array(_LINE.findall(b"".join(fixed)), dtype=object)
            if (extra[:, 0] == b"").any():
                raise ValueError(f"{path}: records could not be read back")  # a bug, not bad input
            cols = np.concatenate([cols, extra])
            lines = np.concatenate([lines, np.array(fixed_lines)])
    if len(cols) == 0:
        return len(matches)
    for group in (*_SEGMENTS, _NODES, _TIME):
        facts[group].add(np.ascontiguousarray(cols[:, group]))
    value = np.asarray(cols[:, _VALUE].tolist(), dtype=bytes)
    value[value == b"null"] = b"nan"
    try:
        out[_VALUE].append(value.astype(np.float64))
    except ValueError:  # the pattern lets through things like 1.2.3 that are not JSON numbers
        for i, raw in enumerate(value):
            try:
                float(raw)
            except ValueError:
                raise ValueError(f"{path}: line {lines[i] + 1}: not a JSON record (value {bytes(raw).decode(errors='replace')!r})") from None
        raise
    out["line"].append(lines)
    return len(matches)


def _segment_fields(raws: list[bytes], lead: str, keys: tuple, path: Path) -> dict[str, list]:
    """Each distinct segment text parsed once: key -> list of values (one per distinct text)."""
    fields = {k: [] for k in keys}
    head = b'{"' + lead.encode() + b'": '
    for raw in raws:
        try:
            obj = json.loads(head + raw + b"}")
        except ValueError as e:
            raise ValueError(f"{path}: not a JSON record: {e}: {(head + raw)[:200]!r}") from None
        for k in keys:
            fields[k].append(obj.get(k))
    return fields


def _categorical(codes: np.ndarray, values: list) -> pd.Categorical:
    """Categorical of values[codes]; None (and codes < 0) -> NaN."""
    strings = np.array([None if v is None else str(v) for v in values] or [None], dtype=object)
    cat = pd.Categorical(strings)
    mapped = cat.codes[codes] if len(codes) else np.zeros(0, dtype=np.int8)
    return pd.Categorical.from_codes(mapped, categories=cat.categories)


def _floats(codes: np.ndarray, values: list) -> np.ndarray:
    table = np.array([v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
                      for v in values] or [np.nan], dtype=np.float64)
    return table[codes] if len(codes) else np.zeros(0)


def _ints(a: np.ndarray) -> pd.arrays.IntegerArray:
    mask = np.isnan(a)
    return pd.arrays.IntegerArray(np.where(mask, 0, a).astype(np.int64), mask)


_SIMPLE_LIST = re.compile(rb'(?m)^(?:(")([^"\\\n]*)"(?:, "([^"\\\n]*)")?|[^\n]*)$')


def _node_lists(raws: list[bytes]):
    """Distinct `nodes` list texts -> (tuples, first node code, second node code, node names)."""
    if not raws:
        return np.empty(0, dtype=object), np.zeros(0, np.int64), np.zeros(0, np.int64), []
    parts = np.array(_SIMPLE_LIST.findall(b"\n".join(raws)), dtype=object).reshape(-1, 3)
    if len(parts) != len(raws):  # cannot happen with the pattern above; stay correct if it does
        parts = np.full((len(raws), 3), b"", dtype=object)
    simple = parts[:, 0] == b'"'
    first = np.where(simple, parts[:, 1], None)
    second = np.where(simple & (parts[:, 2] != b""), parts[:, 2], None)
    lists = [None] * len(raws)
    for i in np.flatnonzero(~simple):
        lists[i] = tuple(str(n) for n in json.loads(b"[" + raws[i] + b"]"))
    names_raw = pd.unique(np.concatenate([first[simple], second[simple & (second != None)]])
                          .astype(object)) if simple.any() else []
    names = {n.decode("utf-8", "replace"): None for n in names_raw}
    for t in lists:
        if t is not None:
            names.update(dict.fromkeys(t))
    node_names = sorted(names)
    index = {n: i for i, n in enumerate(node_names)}
    raw_index = {n: index[n.decode("utf-8", "replace")] for n in names_raw}
    f_code = np.full(len(raws), -1, dtype=np.int64)
    s_code = np.full(len(raws), -1, dtype=np.int64)
    if simple.any():
        f_code[simple] = [raw_index[b] for b in first[simple]]
        has2 = simple & (second != None)
        s_code[has2] = [raw_index[b] for b in second[has2]]
    for i, t in enumerate(lists):
        if t is not None:
            f_code[i] = index[t[0]] if len(t) > 0 else -1
            s_code[i] = index[t[1]] if len(t) > 1 else -1
    names_arr = np.array(node_names + [None], dtype=object)
    one = names_arr[f_code]
    two = names_arr[s_code]
    tuples = np.empty(len(raws), dtype=object)
    pairs = simple & (s_code >= 0)
    singles = simple & (s_code < 0)
    tuples[pairs] = np.fromiter(zip(one[pairs], two[pairs]), dtype=object, count=int(pairs.sum()))
    tuples[singles] = np.fromiter(((n,) for n in one[singles]), dtype=object, count=int(singles.sum()))
    for i, t in enumerate(lists):
        if t is not None:
            tuples[i] = t
    return tuples, f_code, s_code, node_names


def load_records(run_dir) -> pd.DataFrame:
    """results.jsonl of a run folder (or the file itself) as a DataFrame, one row per record.

    Columns: test, suite, metric, unit, engine, memory, verdict, detail (categorical);
    value, threshold (float64; null -> NaN); size, rail, samples (nullable Int64);
    iteration (int64, 0 when absent); time (datetime64 UTC, NaT when absent); nodes
    (tuple of node names); src (nodes[0]) and dst (nodes[1] or NaN), categoricals
    sharing one list of node names; op (allreduce / alltoall, collective records only)
    and scope (world / node / railN from the test id's [...]). `ranks` is not loaded
    (analysis does not use it, and a large run has one distinct list per record).
    Rows are in file order. A truncated last line (a crash mid-write) is skipped and
    counted in df.attrs["skipped_lines"]; any other unreadable line is an error naming it.
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a run folder needs results.jsonl)")
    groups = (*_SEGMENTS, _NODES, _TIME)
    facts = {g: _Factorizer() for g in groups}
    out = {g: [] for g in (_VALUE, "line")}
    out["skipped"] = 0
    line = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(_CHUNK)
            if not block:
                break
            if not block.endswith(b"\n"):
                block += fh.readline()
            last = not block.endswith(b"\n") or not fh.peek(1)
            if not block.endswith(b"\n"):
                block += b"\n"
            line += _parse_chunk(block, line, path, last, facts, out)

    def joined(key, dtype=np.int64):
        return np.concatenate(out[key]) if out[key] else np.zeros(0, dtype=dtype)

    data = {}
    fields = {}
    for group, (lead, keys) in _SEGMENTS.items():
        codes, raws = facts[group].finish()
        parsed = _segment_fields(raws, lead, keys, path)
        for k in keys:
            fields[k] = (codes, parsed[k])
    for name in ("test", "suite", "metric"):
        data[name] = _categorical(*fields[name])
    data["value"] = joined(_VALUE, np.float64)
    data["unit"] = _categorical(*fields["unit"])
    data["size"] = _ints(_floats(*fields["size"]))
    data["rail"] = _ints(_floats(*fields["rail"]))
    list_codes, raws = facts[_NODES].finish()
    tuples, f_code, s_code, node_names = _node_lists(raws)
    data["nodes"] = tuples[list_codes] if len(tuples) else np.empty(0, dtype=object)
    data["engine"] = _categorical(*fields["engine"])
    data["memory"] = _categorical(*fields["memory"])
    iteration = _floats(*fields["iteration"])
    data["iteration"] = np.where(np.isnan(iteration), 0, iteration).astype(np.int64)
    time_codes, raws = facts[_TIME].finish()
    stamps = pd.to_datetime(pd.Index([None if v == b"null" else _jstr(v[1:-1]) for v in raws],
                                     dtype=object), utc=True, format="ISO8601", errors="coerce")
    data["time"] = (pd.DatetimeIndex(stamps).take(time_codes) if len(stamps)
                    else pd.DatetimeIndex([], tz="UTC"))
    data["samples"] = _ints(_floats(*fields["samples"]))
    data["threshold"] = _floats(*fields["threshold"])
    data["verdict"] = _categorical(*fields["verdict"])
    data["detail"] = _categorical(*fields["detail"])
    node_cats = pd.Index(node_names, dtype=object)
    data["src"] = pd.Categorical.from_codes(f_code[list_codes] if len(tuples) else list_codes, categories=node_cats)
    data["dst"] = pd.Categorical.from_codes(s_code[list_codes] if len(tuples) else list_codes, categories=node_cats)
    del fields, list_codes, time_codes, out[_VALUE]
    df = pd.DataFrame(data, copy=False)
    del data
    lines = joined("line")
    if len(lines) and (np.diff(lines) < 0).any():
        df = df.take(np.argsort(lines, kind="stable")).reset_index(drop=True)
    df = _derive(df)
    df.attrs["skipped_lines"] = out["skipped"]
    df.attrs["source"] = str(path)
    return df


_TEST_PARAM = re.compile(r"\[([^\[\]]*)\]\s*$")
_TEST_FUNC = re.compile(r"::test_([A-Za-z0-9]+)")
_SCOPE = re.compile(r"world|node|rail\d+")


def _derive(df: pd.DataFrame) -> pd.DataFrame:
    """op and scope from the test id (per distinct test id, not per record)."""
    tests = df["test"].astype("category") if df["test"].dtype != "category" else df["test"]
    cats = list(tests.cat.categories)
    scopes, ops = [], []
    for t in cats:
        m = _TEST_PARAM.search(t)
        scopes.append(m[1] if m and _SCOPE.fullmatch(m[1]) else None)
        f = _TEST_FUNC.search(t)
        ops.append(f[1] if f and f[1] in ("allreduce", "alltoall") else None)
    codes = tests.cat.codes.to_numpy()
    suite_coll = (df["suite"] == "collective").to_numpy()

    def cat_of(values, only=None):
        table = pd.Categorical(values)
        c = np.where(codes >= 0, table.codes[np.maximum(codes, 0)] if len(cats) else -1, -1)
        if only is not None:
            c = np.where(only, c, -1)
        return pd.Categorical.from_codes(c, categories=table.categories)

    df["op"] = cat_of(ops, suite_coll)
    df["scope"] = cat_of(scopes)
    return df


# ---------------------------------------------------------------------------------------
# Judging records
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """How one (suite, metric) is judged: where its bound is and which way is better."""
    suite: str
    metric: str
    bound: str               # sizemap, scalar, zero, busbw, memlock, ranks, versions, recorded, none
    key: str | None          # profile key (dotted)
    higher: bool | None      # True: higher is better; False: lower is better; None: must equal
    scale: float = 1.0       # profile unit -> record unit


_US = 1e6  # profile durations are seconds, records are microseconds
RULES: tuple[Rule, ...] = (
    Rule("rdma_write", "bandwidth", "sizemap", "rdma_write.bandwidth_min", True),
    Rule("rdma_write", "latency_p50", "scalar", "rdma_write.latency_p50_max", False, _US),
    Rule("rdma_write", "latency_p99", "scalar", "rdma_write.latency_p99_max", False, _US),
    Rule("rdma_write", "latency_p999", "scalar", "rdma_write.latency_p999_max", False, _US),
    Rule("rdma_write", "latency_max", "none", None, False),
    *(Rule("rdma_write", f"{op}_latency_{p}", "scalar", f"rdma_write.{op}_latency_{p}_max", False, _US)
      for op in ("read", "atomic") for p in ("p50", "p99")),
    *(Rule("rdma_write", f"{op}_latency_{p}", "none", None, False)
      for op in ("read", "atomic") for p in ("p999", "max")),
    *(Rule("rdma_write", f"pingpong_latency_{p}", "none", None, False) for p in ("p50", "p99", "p999", "max")),
    Rule("rdma_write", "errors", "zero", None, False),
    # profile rates are Gbit/s; busbw records are GB/s
    Rule("gpudirect", "bandwidth", "sizemap", "gpudirect.bandwidth_min", True),
    Rule("gpudirect", "latency_p50", "scalar", "gpudirect.latency_p50_max", False, _US),
    Rule("gpudirect", "latency_p99", "scalar", "gpudirect.latency_p99_max", False, _US),
    *(Rule("gpudirect", f"latency_{p}", "none", None, False) for p in ("p999", "max")),
    Rule("gpudirect", "errors", "zero", None, False),
    Rule("gpudirect", "reg_time", "sizemap", "memreg.reg_time_max", False, _US),
    Rule("gpudirect", "dereg_time", "sizemap", "memreg.dereg_time_max", False, _US),
    Rule("collective", "busbw", "busbw", "collectives.{node}{op}_busbw_min", True, 1 / 8),
    Rule("collective", "algbw", "none", None, True),
    Rule("collective", "errors", "zero", None, False),
    # GPUDirect RDMA per node and rail, from NCCL's log: the suite decides where it is required.
    Rule("collective", "gdrdma", "recorded", None, True),
    Rule("memreg", "reg_time", "sizemap", "memreg.reg_time_max", False, _US),
    Rule("memreg", "reg_time_user", "sizemap", "memreg.reg_time_max", False, _US),
    Rule("memreg", "dereg_time", "sizemap", "memreg.dereg_time_max", False, _US),
    Rule("memreg", "dereg_time_user", "sizemap", "memreg.dereg_time_max", False, _US),
    Rule("memreg", "rss_growth", "scalar", "memreg.leak_max", False),
    Rule("memreg", "memlock_enforced", "none", None, True),
    Rule("preflight", "memlock", "memlock", "preflight.memlock_min", True),
    Rule("preflight", "ranks", "ranks", "topology.rails", None),
    Rule("preflight", "version_mismatches", "versions", "preflight.same_versions", False),
    Rule("preflight", "fabric_version_mismatches", "versions", "preflight.same_versions", False),
    Rule("preflight", "rdma_devices", "scalar", "preflight.rdma_devices", None),
    Rule("preflight", "ports_down", "zero", None, False),
    Rule("preflight", "port_rate", "scalar", "preflight.port_rate", True),
    Rule("preflight", "port_mtu", "scalar", "preflight.mtu", True),
    Rule("preflight", "link_layer_mismatches", "zero", None, False),
    Rule("preflight", "hugepages", "scalar", "preflight.hugepages_min", True),
    Rule("preflight", "gpus", "scalar", "preflight.gpus_per_node", None),
    Rule("preflight", "gpu_nic_far", "zero", None, False),
    Rule("preflight", "gpudirect_missing", "zero", None, False),
    Rule("preflight", "saturated_counters", "zero", None, False),
    Rule("incast", "fairness", "scalar", "incast.fairness_min", True),
    Rule("incast", "aggregate_bandwidth", "scalar", "incast.aggregate_min", True),
    Rule("incast", "bandwidth", "none", None, True),
    Rule("incast", "loaded_latency_p50", "none", None, False),
    Rule("incast", "loaded_latency_p99", "scalar", "incast.latency_p99_max", False, _US),
    Rule("incast", "loaded_latency_p999", "none", None, False),
    Rule("incast", "loaded_latency_max", "none", None, False),
    Rule("incast", "errors", "zero", None, False),
    # intranode: profile rates are Gbit/s, records GB/s (as busbw). A GPU below its node's median
    # is counted by the suite in gpu_bandwidth_outliers (its detail names them): a node finding.
    Rule("intranode", "h2d_bandwidth", "scalar", "intranode.h2d_min", True, 1 / 8),
    Rule("intranode", "d2h_bandwidth", "scalar", "intranode.d2h_min", True, 1 / 8),
    Rule("intranode", "p2p_bandwidth", "scalar", "intranode.p2p_min", True, 1 / 8),
    Rule("intranode", "p2p_bidir_bandwidth", "none", None, True),
    Rule("intranode", "gpu_bandwidth_outliers", "zero", None, False),
)
DIRECTION: dict[tuple[str, str], bool | None] = {(r.suite, r.metric): r.higher for r in RULES}
# Fleet-relative outliers, and what burn-in and baseline comparison look at.
OUTLIER_METRICS = {"bandwidth": True, "latency_p50": False, "latency_p99": False, "latency_p999": False}
TREND_METRICS = {("rdma_write", "bandwidth"), ("rdma_write", "latency_p50"), ("rdma_write", "latency_p99"),
                 ("collective", "busbw")}
_PASS, _FAIL, _WARN, _INFO = range(4)
_KEYS = ["suite", "metric", "size", "rail", "src", "dst", "op", "scope"]


def _codes_of(series: pd.Series, value) -> np.ndarray:
    """Boolean mask series == value, fast for categoricals."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = series.cat.categories
        if value not in cats:
            return np.zeros(len(series), dtype=bool)
        return series.cat.codes.to_numpy() == cats.get_loc(value)
    return (series == value).to_numpy(dtype=bool, na_value=False)


def _floats_of(series: pd.Series) -> np.ndarray:
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _size_bound(size_map, sizes: np.ndarray) -> np.ndarray:
    """Vectorized profile.bound_at: the bound of the last entry at or below each size (NaN: none)."""
    if not size_map:
        return np.full(len(sizes), np.nan)
    starts = np.array([float(s) for s, _ in size_map])
    values = np.array([np.nan if v is None else float(v) for _, v in size_map])
    idx = np.searchsorted(starts, np.nan_to_num(sizes, nan=-1.0), side="right") - 1
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], np.nan)
    return np.where(np.isnan(sizes), np.nan, out)


def _judge(value: np.ndarray, bound: np.ndarray, higher: bool | None) -> np.ndarray:
    out = np.full(len(value), _INFO, dtype=np.int8)
    have = ~np.isnan(value) & ~np.isnan(bound)
    with np.errstate(invalid="ignore"):
        ok = value >= bound if higher is True else value <= bound if higher is False else value == bound
    out[have] = np.where(ok[have], _PASS, _FAIL)
    return out


def evaluate(df: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Every record judged against `profile`: columns threshold (record units) and verdict.

    The file's own threshold and verdict are replaced, never read. Records no rule
    covers (or whose bound is unset for their size) get verdict "info".
    """
    out = df.copy(deep=False)
    if "op" not in out.columns or "scope" not in out.columns:
        out = _derive(out)
    n = len(out)
    value = _floats_of(out["value"]) if n else np.zeros(0)
    size = _floats_of(out["size"]) if n else np.zeros(0)
    threshold = np.full(n, np.nan)
    verdict = np.full(n, _INFO, dtype=np.int8)
    for rule in RULES:
        mask = _codes_of(out["suite"], rule.suite) & _codes_of(out["metric"], rule.metric)
        if not mask.any():
            continue
        idx = np.flatnonzero(mask)
        v, s = value[idx], size[idx]
        if rule.bound == "sizemap":
            b = _size_bound(profile.get(rule.key), s) * rule.scale
            if rule.metric == "bandwidth" and profile.get("analysis.line_rate"):
                floor = profile.get("analysis.line_rate_fraction") * profile.get("analysis.line_rate")
                from_size = profile.get("analysis.line_rate_from_size")
                b = np.where(s >= from_size, np.fmax(b, floor), b)
        elif rule.bound == "scalar":
            bound = profile.get(rule.key)
            b = np.full(len(idx), np.nan if bound is None else float(bound) * rule.scale)
        elif rule.bound == "zero":
            b = np.zeros(len(idx))
        elif rule.bound == "busbw":
            b = np.full(len(idx), np.nan)
            scope_node = _codes_of(out["scope"], "node")[idx]
            for op in ("allreduce", "alltoall"):
                is_op = _codes_of(out["op"], op)[idx]
                for node in (False, True):
                    sel = is_op & (scope_node == node)
                    if sel.any():
                        key = rule.key.format(node="node_" if node else "", op=op)
                        b[sel] = _size_bound(profile.get(key), s[sel]) * rule.scale
        elif rule.bound == "memlock":
            minimum = profile.get(rule.key)
            unlimited = np.isnan(v)  # the suite records null (detail "unlimited") for no limit
            if minimum == "unlimited":
                threshold[idx] = np.nan
                verdict[idx] = np.where(unlimited, _PASS, _FAIL)
            else:
                threshold[idx] = float(minimum)
                verdict[idx] = np.where(unlimited | (v >= float(minimum)), _PASS, _FAIL)
            continue
        elif rule.bound == "ranks":
            rails = profile.get(rule.key)
            if rails:
                b = np.full(len(idx), float(rails))
            else:  # one rail per rank: every node must have as many ranks as most nodes do
                its = out["iteration"].to_numpy()[idx]
                ser = pd.Series(v)
                b = ser.groupby(its).transform(lambda x: x.mode().iloc[0] if x.notna().any() else np.nan)
                b = b.to_numpy(dtype=float)
        elif rule.bound == "recorded":  # the bound the suite wrote (null: nothing required)
            b = _floats_of(out["threshold"])[idx] if "threshold" in out.columns else np.full(len(idx), np.nan)
        elif rule.bound == "versions":
            b = np.full(len(idx), 0.0 if profile.get(rule.key) else np.nan)
        else:
            b = np.full(len(idx), np.nan)
        threshold[idx] = b
        verdict[idx] = _judge(v, b, rule.higher)
    counters = np.flatnonzero(_codes_of(out["suite"], "counters")) if n else np.zeros(0, dtype=np.int64)
    if len(counters):
        _evaluate_counters(out, counters, value, threshold, verdict, profile)
    out["threshold"] = threshold
    out["verdict"] = pd.Categorical.from_codes(verdict, categories=VERDICTS)
    out.attrs["evaluated"] = (profile.name, profile.source)
    return out


def _evaluate_counters(out: pd.DataFrame, idx: np.ndarray, value: np.ndarray, threshold: np.ndarray,
                       verdict: np.ndarray, profile: Profile) -> None:
    """Port counter deltas (suite counters): error counters fail when they rise, the rest warn.

    The kind of a counter comes from acceptance.counters.kind_of; rate records (unit 1/s)
    are held to the pause or CNP rate bound. A saturated counter has no delta (value null)
    and says so in its detail: one that saturated during the window rose.
    """
    from .counters import kind_of
    metric = out["metric"].to_numpy()[idx].astype(object)
    unit = out["unit"].to_numpy()[idx].astype(object)
    detail = out["detail"].to_numpy()[idx].astype(object) if "detail" in out.columns else np.full(len(idx), None)
    text = pd.Series(detail, dtype=object).fillna("").astype(str)
    during = text.str.contains("saturated at", regex=False).to_numpy() & text.str.contains(
        "during the window", regex=False).to_numpy()
    before = text.str.contains("saturated before", regex=False).to_numpy()
    bounds = {"error": ("counters.errors_max", _FAIL), "discard": ("counters.discards_max", _WARN)}
    rates = {"pause": "counters.pause_rate_max", "cnp": "counters.cnp_rate_max"}
    for name, u in set(zip(metric, unit)):
        sel = (metric == name) & (unit == u)
        at = idx[sel]
        is_rate = u == "1/s"
        kind = kind_of(name[:-len("_rate")] if is_rate and name.endswith("_rate") else name)
        if is_rate:
            key, severity = rates.get(kind), _WARN
        else:
            key, severity = bounds.get(kind, (None, _INFO))
        bound = profile.get(key) if key else None
        b = np.full(len(at), np.nan if bound is None else float(bound))
        v = _judge(value[at], b, False)
        v[v == _FAIL] = severity
        if not is_rate and kind in bounds:
            v[during[sel]] = severity
            v[before[sel]] = _WARN
        threshold[at] = b
        verdict[at] = v


def _direction(suite: str, metric: str) -> bool | None:
    return DIRECTION.get((suite, metric))


# ---------------------------------------------------------------------------------------
# Point-to-point view, fleet outliers
# ---------------------------------------------------------------------------------------

def _node_names(df: pd.DataFrame) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(node names, src codes, dst codes) with src and dst coded into the same names (-1: none)."""
    src, dst = df["src"], df["dst"]
    if not isinstance(src.dtype, pd.CategoricalDtype):
        src = src.astype("category")
    if not isinstance(dst.dtype, pd.CategoricalDtype):
        dst = dst.astype("category")
    if not src.cat.categories.equals(dst.cat.categories):
        names = sorted(set(src.cat.categories) | set(dst.cat.categories))
        src, dst = src.cat.set_categories(names), dst.cat.set_categories(names)
    return list(src.cat.categories), src.cat.codes.to_numpy(np.int64), dst.cat.codes.to_numpy(np.int64)


# Samples a latency percentile needs before it can single out a link (acceptance.measure.stats).
PERCENTILE_SAMPLES = {"latency_p50": samples_needed(50.0), "latency_p99": samples_needed(99.0),
                      "latency_p999": samples_needed(99.9)}


def _p2p(ev: pd.DataFrame) -> tuple[pd.DataFrame, list[str], np.ndarray]:
    """rdma_write records between two nodes on a rail, with integer node codes s, d."""
    names, s, d = _node_names(ev)
    rail = _floats_of(ev["rail"])
    mask = (_codes_of(ev["suite"], "rdma_write") & ~np.isnan(rail) & (s >= 0) & (d >= 0) & (s != d))
    idx = np.flatnonzero(mask)
    p = pd.DataFrame({
        "metric": ev["metric"].to_numpy()[idx] if not isinstance(ev["metric"].dtype, pd.CategoricalDtype)
        else ev["metric"].take(idx).to_numpy(),
        "size": _floats_of(ev["size"])[idx], "rail": rail[idx].astype(np.int64), "s": s[idx], "d": d[idx],
        "value": _floats_of(ev["value"])[idx], "iteration": ev["iteration"].to_numpy()[idx],
        "samples": _floats_of(ev["samples"])[idx],
        "fail": _codes_of(ev["verdict"], "fail")[idx], "threshold": ev["threshold"].to_numpy(np.float64)[idx],
        "unit": ev["unit"].take(idx).to_numpy()})
    if isinstance(ev["metric"].dtype, pd.CategoricalDtype):
        p["metric"] = pd.Categorical(p["metric"], categories=ev["metric"].cat.categories)
    return p, names, idx


def _pair_values(p: pd.DataFrame) -> pd.DataFrame:
    """One value per (metric, size, rail, s, d): the median over burn-in iterations."""
    om = p[p["metric"].isin(list(OUTLIER_METRICS))]
    # A percentile from fewer samples than it needs (100/(1-p)) is close to the maximum: one
    # scheduler hiccup. It is still held to its bound, but it is no basis for calling a link an outlier.
    need = om["metric"].astype(str).map(PERCENTILE_SAMPLES).fillna(0).to_numpy(np.float64)
    om = om[~(om["samples"].to_numpy(np.float64) < need)]
    if len(om) and om["iteration"].min() != om["iteration"].max():
        om = (om.groupby(["metric", "size", "rail", "s", "d"], observed=True, sort=False)
              .agg(value=("value", "median"), unit=("unit", "first")).reset_index())
    return om[["metric", "size", "rail", "s", "d", "value", "unit"]].reset_index(drop=True)


def _robust(values: np.ndarray, groups: np.ndarray, higher: np.ndarray, profile: Profile):
    """One-sided modified z-score outliers within groups: (median, n, worse, outlier).

    worse is the signed relative deviation, positive on the bad side.
    """
    ser = pd.Series(values)
    g = ser.groupby(groups)
    med = g.transform("median").to_numpy()
    mad = pd.Series(np.abs(values - med)).groupby(groups).transform("median").to_numpy()
    n = g.transform("size").to_numpy()
    sign = np.where(higher, 1.0, -1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        worse = sign * (med - values) / med
        z = MAD_SCALE * sign * (med - values) / mad
    outlier = ((n >= MIN_GROUP) & (med > 0) & (worse >= profile.get("analysis.outlier_min_deviation"))
               & ((mad == 0) | (z >= profile.get("analysis.outlier_z"))))
    return med, n, worse, outlier


def _higher(metrics) -> np.ndarray:
    return np.array([OUTLIER_METRICS.get(m, True) for m in metrics], dtype=bool)


def _fleet(pairs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Outlier pairs per (metric, size, rail), with the group median."""
    if pairs.empty:
        return pairs.assign(median=[], worse=[])
    key = pairs.groupby(["metric", "size", "rail"], observed=True, sort=False).ngroup().to_numpy()
    metric_codes = pairs["metric"].cat.codes.to_numpy() if isinstance(pairs["metric"].dtype, pd.CategoricalDtype) \
        else pd.factorize(pairs["metric"])[0]
    cats = (pairs["metric"].cat.categories if isinstance(pairs["metric"].dtype, pd.CategoricalDtype)
            else pd.factorize(pairs["metric"])[1])
    higher = _higher(cats)[metric_codes]
    med, _n, worse, outlier = _robust(pairs["value"].to_numpy(), key, higher, profile)
    out = pairs.loc[outlier].copy()
    out["median"] = med[outlier]
    out["worse"] = worse[outlier]
    return out.reset_index(drop=True)


def _rail_planes(pairs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Rails whose median (per metric and size) is an outlier against the other rails' medians."""
    cols = ["rail", "metric", "size", "value", "median", "worse", "n", "unit"]
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    med = (pairs.groupby(["metric", "size", "rail"], observed=True, sort=False)
           .agg(value=("value", "median"), unit=("unit", "first")).reset_index())
    key = med.groupby(["metric", "size"], observed=True, sort=False).ngroup().to_numpy()
    center, n, worse, outlier = _robust(med["value"].to_numpy(), key, _higher(med["metric"].astype(str)), profile)
    med["median"], med["worse"], med["n"] = center, worse, n
    return med.loc[outlier, cols].reset_index(drop=True)


def _bad_p2p(p: pd.DataFrame, outliers: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Evidence rows (one per pair, metric and size): outliers and failed bounds."""
    key = ["rail", "s", "d", "metric", "size"]
    failed = p[p["fail"]]
    if len(failed):
        failed = (failed.groupby(key, observed=True, sort=False)
                  .agg(fvalue=("value", "median"), bound=("threshold", "median"), unit=("unit", "first"))
                  .reset_index())
    else:
        failed = pd.DataFrame(columns=[*key, "fvalue", "bound", "unit"])
    o = outliers[[*key, "value", "median", "worse", "unit"]] if len(outliers) else \
        pd.DataFrame(columns=[*key, "value", "median", "worse", "unit"])
    for frame in (o, failed):
        frame["metric"] = frame["metric"].astype(str)
    bad = o.merge(failed, on=key, how="outer", suffixes=("", "_f"))
    if bad.empty:
        return _empty_bad()
    bad["unit"] = bad["unit"].fillna(bad.get("unit_f"))
    bad["value"] = bad["value"].astype(float).fillna(bad["fvalue"].astype(float))
    bad["median"] = bad["median"].astype(float)
    bad["bound"] = bad["bound"].astype(float)
    is_fail = bad["fvalue"].notna().to_numpy()
    higher = _higher(bad["metric"])
    with np.errstate(divide="ignore", invalid="ignore"):
        vs_bound = np.where(higher, 1.0, -1.0) * (bad["bound"] - bad["value"]) / bad["bound"]
    worse = bad["worse"].astype(float).to_numpy()
    worse = np.where(np.isnan(worse), np.where(np.isfinite(vs_bound), vs_bound, 1.0), worse)
    min_dev = profile.get("analysis.outlier_min_deviation")
    bad["worse"] = worse
    bad["grade"] = is_fail | (bad["median"].notna().to_numpy() & (worse >= 2 * min_dev))
    bad["expected"] = bad["median"].fillna(bad["bound"])
    return bad[["rail", "s", "d", "metric", "size", "value", "expected", "median", "bound", "worse", "grade",
                "unit"]].reset_index(drop=True)


def _against_rails(bad: pd.DataFrame, pairs: pd.DataFrame, planes: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """On a rail slow against the others, its pairs that are slow against the other rails' median
    become evidence too (localization then decides: the plane, or a few NICs or links on it)."""
    ref = planes[["rail", "metric", "size", "median"]].astype({"metric": str})
    x = pairs.astype({"metric": str}).merge(ref, on=["rail", "metric", "size"], how="inner")
    higher = _higher(x["metric"])
    with np.errstate(divide="ignore", invalid="ignore"):
        worse = np.where(higher, 1.0, -1.0) * (x["median"] - x["value"]) / x["median"]
    min_dev = profile.get("analysis.outlier_min_deviation")
    x = x[worse >= min_dev].assign(worse=worse[worse >= min_dev])
    if x.empty:
        return bad
    extra = pd.DataFrame({"rail": x["rail"].to_numpy(np.int64), "s": x["s"].to_numpy(np.int64),
                          "d": x["d"].to_numpy(np.int64), "metric": x["metric"].to_numpy(object),
                          "size": x["size"].to_numpy(float), "value": x["value"].to_numpy(float),
                          "expected": x["median"].to_numpy(float), "median": x["median"].to_numpy(float),
                          "bound": np.nan, "worse": x["worse"].to_numpy(float),
                          "grade": x["worse"].to_numpy() >= 2 * min_dev, "unit": x["unit"].to_numpy(object)})
    both = pd.concat([bad, extra], ignore_index=True) if len(bad) else extra
    return both.drop_duplicates(["rail", "s", "d", "metric", "size"], keep="first").reset_index(drop=True)


def _empty_bad() -> pd.DataFrame:
    return pd.DataFrame({"rail": np.zeros(0, np.int64), "s": np.zeros(0, np.int64), "d": np.zeros(0, np.int64),
                         "metric": np.zeros(0, object), "size": np.zeros(0), "value": np.zeros(0),
                         "expected": np.zeros(0), "median": np.zeros(0), "bound": np.zeros(0),
                         "worse": np.zeros(0), "grade": np.zeros(0, bool), "unit": np.zeros(0, object)})


def _measured(p: pd.DataFrame) -> pd.DataFrame:
    """Distinct undirected node pairs per rail that have any point-to-point record."""
    rail, s, d = p["rail"].to_numpy(), p["s"].to_numpy(), p["d"].to_numpy()
    u, v = np.minimum(s, d), np.maximum(s, d)
    n = int(max(s.max(initial=0), d.max(initial=0))) + 1
    key = np.sort(pd.unique((rail * n + u) * n + v))
    return pd.DataFrame({"rail": key // (n * n), "u": (key // n) % n, "v": key % n})


# ---------------------------------------------------------------------------------------
# Localization
# ---------------------------------------------------------------------------------------

def _peel(mu, mv, bu, bv, n_nodes: int, nic_fraction: float, rounds: int = 100):
    """Bad NICs on one rail: worst fraction of bad partners first; a flagged NIC's links stop counting.

    Returns [(node, bad partners, partners)].
    """
    on_rail = np.unique(np.concatenate([mu, mv]))
    flagged = []
    if len(on_rail) < 3 or len(bu) < 2:
        return flagged
    am, ab = np.ones(len(mu), bool), np.ones(len(bu), bool)
    for k in range(rounds):
        deg = np.bincount(mu[am], minlength=n_nodes) + np.bincount(mv[am], minlength=n_nodes)
        badc = np.bincount(bu[ab], minlength=n_nodes) + np.bincount(bv[ab], minlength=n_nodes)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(deg > 0, badc / np.maximum(deg, 1), 0.0)
        cand = (badc >= 2) & (deg >= 2) & (frac >= nic_fraction)
        if not cand.any():
            break
        top = cand if k == rounds - 1 else cand & (frac >= frac[cand].max() - 1e-9)
        flagged += [(int(n), int(badc[n]), int(deg[n])) for n in np.flatnonzero(top)]
        am &= ~(top[mu] | top[mv])
        ab &= ~(top[bu] | top[bv])
    return flagged


@dataclass
class _Owner:
    scope: str
    node: int | None = None
    rail: int | None = None
    peer: int | None = None
    info: dict = field(default_factory=dict)


def _localize(bad: pd.DataFrame, measured: pd.DataFrame, names: list[str], profile: Profile, kind: str,
              planes: pd.DataFrame | None = None) -> list[dict]:
    """Bad pair evidence on the rails' graphs -> rail, node, NIC, link (or cluster) findings."""
    planes = planes if planes is not None else pd.DataFrame(columns=["rail"])
    if bad.empty and planes.empty:
        return []
    n_nodes = max(len(names), 1)
    rails_measured = np.unique(measured["rail"].to_numpy()) if len(measured) else np.zeros(0, np.int64)
    rails_all = np.union1d(rails_measured, np.unique(bad["rail"].to_numpy()))
    n_rails = int(rails_all.max(initial=-1)) + 1
    has = np.zeros((n_rails, n_nodes), bool)
    has[measured["rail"].to_numpy(), measured["u"].to_numpy()] = True
    has[measured["rail"].to_numpy(), measured["v"].to_numpy()] = True
    nodes_on = has.sum(axis=1)

    s, d, r = bad["s"].to_numpy(), bad["d"].to_numpy(), bad["rail"].to_numpy()
    bu, bv = np.minimum(s, d), np.maximum(s, d)
    ekey = np.unique((r * n_nodes + bu) * n_nodes + bv) if len(bad) else np.zeros(0, np.int64)
    e_rail, e_u, e_v = ekey // (n_nodes * n_nodes), (ekey // n_nodes) % n_nodes, ekey % n_nodes

    nic = np.zeros((n_rails, n_nodes), bool)
    nic_info: dict[tuple[int, int], tuple[int, int]] = {}
    m_rail, m_u, m_v = (measured[c].to_numpy() for c in ("rail", "u", "v"))
    for rail in rails_measured:
        sel, esel = m_rail == rail, e_rail == rail
        for node, badc, deg in _peel(m_u[sel], m_v[sel], e_u[esel], e_v[esel], n_nodes,
                                     profile.get("analysis.nic_fraction")):
            nic[rail, node] = True
            nic_info[(int(rail), node)] = (badc, deg)

    # rail planes: against the other rails, or by how many of their nodes have a bad NIC
    rail_fraction, node_fraction = profile.get("analysis.rail_fraction"), profile.get("analysis.node_fraction")
    bad_rails: dict[int, dict] = {}
    for rail in (int(x) for x in planes["rail"].unique()):
        # A rail slow against the others is a bad plane unless the slowness is one or two NICs'
        # (their links dominate a small rail's median), or the rail is a single link (2 nodes).
        if rail >= n_rails or nodes_on[rail] < 3:
            continue
        sel_m = (m_rail == rail) & ~nic[rail][m_u] & ~nic[rail][m_v]
        sel_b = (e_rail == rail) & ~nic[rail][e_u] & ~nic[rail][e_v]
        remaining = int(sel_m.sum())
        k = int(nic[rail].sum())
        if (remaining and sel_b.sum() / remaining >= rail_fraction) or (
                k >= 2 and k >= rail_fraction * nodes_on[rail]):
            bad_rails[rail] = {"how": "relative"}
    planes = planes[planes["rail"].isin(list(bad_rails))]
    other_cnt = nic.sum(axis=0)[None, :] - nic
    other_tot = has.sum(axis=0)[None, :] - has
    with np.errstate(divide="ignore", invalid="ignore"):
        node_other = np.where(other_tot > 0, other_cnt / np.maximum(other_tot, 1), 0.0)
    for rail in rails_measured:
        incl = has[rail] & (node_other[rail] < node_fraction)
        if not incl.any():
            incl = has[rail]
        k, tot = int((nic[rail] & incl).sum()), int(incl.sum())
        if k >= 2 and tot and k / tot >= rail_fraction and int(rail) not in bad_rails:
            bad_rails[int(rail)] = {"how": "nics", "k": k, "tot": tot}
    rail_bad = np.zeros(n_rails, bool)
    rail_bad[list(bad_rails)] = True
    considered = has & ~rail_bad[:, None]
    cnt, tot = (nic & considered).sum(axis=0), considered.sum(axis=0)
    node_bad = (cnt >= 2) & (tot > 0) & (cnt >= node_fraction * np.maximum(tot, 1))
    cluster = len(rails_measured) >= 2 and all(int(x) in bad_rails for x in rails_measured)

    owners: list[_Owner] = []
    owner = np.full(len(bad), -1, dtype=np.int64)
    if cluster:
        owners.append(_Owner("cluster", info={"rails": len(rails_measured)}))
        owner[:] = 0
    else:
        for rail in sorted(bad_rails):
            owner[(owner < 0) & (r == rail)] = len(owners)
            owners.append(_Owner("rail", rail=rail, info={**bad_rails[rail], "nodes": int(nodes_on[rail])
                                                          if rail < len(nodes_on) else 0}))
        node_id = np.full(n_nodes, -1, dtype=np.int64)
        for node in np.flatnonzero(node_bad):
            node_id[node] = len(owners)
            planes_of = [int(x) for x in np.flatnonzero(has[:, node] & rail_bad)]
            owners.append(_Owner("node", node=int(node), info={"k": int(cnt[node]), "tot": int(tot[node]),
                                                              "planes": planes_of}))
        if len(bad):
            o = np.where(node_id[s] >= 0, node_id[s], node_id[d])
            owner = np.where(owner < 0, o, owner)
        nic_id = np.full((n_rails, n_nodes), -1, dtype=np.int64)
        for (rail, node), (badc, deg) in sorted(nic_info.items()):
            if rail_bad[rail] or node_bad[node]:
                continue  # explained by its rail plane or its node
            nic_id[rail, node] = len(owners)
            owners.append(_Owner("nic", node=node, rail=rail, info={"k": badc, "tot": deg}))
        if len(bad):
            o = np.where(nic_id[r, s] >= 0, nic_id[r, s], nic_id[r, d])
            owner = np.where(owner < 0, o, owner)
            rest = owner < 0
            if rest.any():
                lkey = (r[rest] * n_nodes + bu[rest]) * n_nodes + bv[rest]
                uniq, inv = np.unique(lkey, return_inverse=True)
                base = len(owners)
                for key in uniq:
                    rail, u, v = int(key // (n_nodes * n_nodes)), int((key // n_nodes) % n_nodes), int(key % n_nodes)
                    owners.append(_Owner("link", node=u, rail=rail, peer=v,
                                         info={"tiny": bool(rail < len(nodes_on) and nodes_on[rail] == 2)}))
                owner[rest] = base + inv
    return _findings_from(bad, owner, owners, names, profile, kind, planes)


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}".rstrip("0").rstrip(".") if abs(x) >= 10 else f"{x:.3g}"
    return f"{x:.3g}"


def _size_text(size) -> str:
    return "" if size is None or (isinstance(size, float) and math.isnan(size)) else f" {int(size)} B"


_METRIC_PRIORITY = {"bandwidth": 0, "latency_p50": 1, "latency_p99": 2, "latency_p999": 3, "busbw": 4, "errors": 5}


def _how(kind: str, metric: str, value: float, expected: float, unit: str, size, higher: bool | None,
         median_known: bool) -> tuple[str, str]:
    """(phrase, detail): ('is 43% slow', '212.0 vs median 371.2 Gbit/s, bandwidth at 4194304 B')."""
    at = f"{metric} at{_size_text(size)}" if _size_text(size) else metric
    unit = unit or ""
    pct = _pct_worse(value, expected, higher)
    if kind == "drift":
        return (f"drifted {pct:.0%} worse over the burn-in",
                f"{at}: {_fmt(expected)} -> {_fmt(value)} {unit}".rstrip())
    if kind == "instability":
        return "is unstable across burn-in iterations", f"{at}: CV {value:.0%} > {expected:.0%}"
    if kind == "regression":
        return (f"regressed {pct:.0%} against the baseline",
                f"{at}: {_fmt(value)} vs {_fmt(expected)} {unit}".rstrip())
    if metric == "errors":
        return "corrupts data", f"{_fmt(value)} wrong bytes{(' at' + _size_text(size)) if _size_text(size) else ''}"
    if median_known:
        ref = "vs median"
    else:
        ref = "< bound" if higher is not False else "> bound"
    if higher is False:
        return (f"has {pct:.0%} higher {metric}" if median_known else f"exceeds its {metric} bound by {pct:.0%}",
                f"{_fmt(value)} {ref} {_fmt(expected)} {unit}{(' at' + _size_text(size)) if _size_text(size) else ''}")
    return (f"is {pct:.0%} slow" if median_known else f"is {pct:.0%} below its {metric} bound",
            f"{_fmt(value)} {ref} {_fmt(expected)} {unit}, {at}")


def _pct_worse(value: float, expected: float, higher: bool | None) -> float:
    if not expected or not math.isfinite(expected) or not math.isfinite(value):
        return 0.0
    return (expected - value) / expected if higher is not False else (value - expected) / expected


def _evidence_line(kind: str, row, names: list[str]) -> str:
    where = f"{names[row.s]} -> {names[row.d]} rail {row.rail}, {row.metric}{_size_text(row.size)}"
    unit = row.unit if isinstance(row.unit, str) else ""
    if kind == "drift":
        return f"{where}: {_fmt(row.expected)} -> {_fmt(row.value)} {unit} ({_change(row.value, row.expected)}) over the burn-in"
    if kind == "instability":
        return f"{where}: CV {row.value:.0%} across iterations (mean {_fmt(row.median)} {unit})"
    if kind == "regression":
        return f"{where}: {_fmt(row.value)} vs baseline {_fmt(row.expected)} {unit} ({_change(row.value, row.expected)})"
    if row.metric == "errors":
        return f"{where}: {_fmt(row.value)} wrong bytes (must be 0)"
    parts = []
    if not math.isnan(row.median):
        parts.append(f"{_fmt(row.value)} {unit} vs median {_fmt(row.median)} ({_change(row.value, row.median)})")
    if not math.isnan(row.bound):
        higher = OUTLIER_METRICS.get(row.metric, DIRECTION.get(("rdma_write", row.metric), True))
        rel = "<" if higher is not False else ">"
        parts.append(f"{_fmt(row.value)} {unit} {rel} bound {_fmt(row.bound)}" if not parts
                     else f"bound {_fmt(row.bound)}")
    return f"{where}: {'; '.join(parts)}"


def _change(value: float, reference: float) -> str:
    """Signed relative change of value against reference, as '-43%' or '+70%'."""
    if not reference or not math.isfinite(reference) or not math.isfinite(value):
        return "n/a"
    return f"{value / reference - 1:+.0%}"


def _cap(lines: list[str], total: int) -> list[str]:
    return lines + ([f"and {total - len(lines)} more"] if total > len(lines) else [])


def _findings_from(bad: pd.DataFrame, owner: np.ndarray, owners: list[_Owner], names: list[str],
                   profile: Profile, kind: str, planes: pd.DataFrame) -> list[dict]:
    if not owners:
        return []
    b = bad.assign(owner=owner)
    b["prio"] = b["metric"].map(lambda m: _METRIC_PRIORITY.get(m, 9)) if len(b) else []
    # headline (metric, size) per owner: the most telling metric, its largest size
    ordered = b.sort_values(["owner", "prio", "size"], ascending=[True, True, False], kind="stable")
    head = ordered.groupby("owner", sort=False).head(1).set_index("owner")[["metric", "size", "unit"]]
    hm = head.reindex(b["owner"])
    at_head = (b["metric"].to_numpy() == hm["metric"].to_numpy()) & (
        (b["size"].to_numpy() == hm["size"].to_numpy()) | (b["size"].isna().to_numpy() & hm["size"].isna().to_numpy()))
    agg = b[at_head].groupby("owner").agg(value=("value", "median"), expected=("expected", "median"),
                                          median=("median", "median"), worse=("worse", "median"))
    grade = b.groupby("owner")["grade"].max()
    count = b.groupby("owner").size()
    worst = b.sort_values(["owner", "grade", "prio", "worse"], ascending=[True, False, True, False], kind="stable")
    top = worst.groupby("owner", sort=False).head(EVIDENCE_MAX)
    evidence = {o: [_evidence_line(kind, row, names) for row in g.itertuples()] for o, g in top.groupby("owner")}
    min_dev = profile.get("analysis.outlier_min_deviation")
    out = []
    for i, who in enumerate(owners):
        lines: list[str] = []
        value = expected = size = metric = unit = None
        is_fail = bool(grade.get(i, False)) if kind in ("fleet", "regression") else False
        median_known = True
        if who.scope == "rail" and who.info.get("how") == "relative" and len(planes):
            pr = planes[planes["rail"] == who.rail].copy()
            pr["prio"] = pr["metric"].astype(str).map(lambda m: _METRIC_PRIORITY.get(m, 9))
            pr = pr.sort_values(["prio", "size"], ascending=[True, False])
            h = pr.iloc[0]
            metric, size, unit = str(h["metric"]), h["size"], h["unit"]
            value, expected = float(h["value"]), float(h["median"])
            is_fail = is_fail or bool((pr["worse"] >= 2 * min_dev).any())
            lines += [f"rail {who.rail}, {row.metric}{_size_text(row.size)}: median {_fmt(row.value)} {row.unit} "
                      f"vs {_fmt(row.median)} across {int(row.n)} rails ({_change(row.value, row.median)})"
                      for row in pr.head(EVIDENCE_MAX).itertuples()]
        elif i in head.index:
            metric, size, unit = head.loc[i, "metric"], head.loc[i, "size"], head.loc[i, "unit"]
            value, expected = float(agg.loc[i, "value"]), float(agg.loc[i, "expected"])
            median_known = not math.isnan(float(agg.loc[i, "median"]))
        if kind == "instability" and metric is not None:
            expected = profile.get("analysis.cv_max")
        total = len(lines) + int(count.get(i, 0))
        lines += evidence.get(i, [])
        lines = _cap(lines[:EVIDENCE_MAX], total)
        higher = OUTLIER_METRICS.get(metric, _direction("collective", metric) if metric == "busbw" else True) \
            if metric is not None else True
        phrase, detail = _how(kind, metric or "", value if value is not None else float("nan"),
                              expected if expected is not None else float("nan"),
                              unit if isinstance(unit, str) else "", size, higher, median_known)
        node = names[who.node] if who.node is not None else None
        peer = names[who.peer] if who.peer is not None else None
        severity = "fail" if is_fail else "warn"
        if who.scope == "nic":
            msg = (f"{node}'s NIC on rail {who.rail} {phrase} (bad links with {who.info['k']} of "
                   f"{who.info['tot']} partners; {detail})")
        elif who.scope == "node":
            msg = f"{node} {phrase} on {who.info['k']} of {who.info['tot']} rails ({detail})"
            if who.info.get("planes"):
                lines.insert(0, f"not counted: rail(s) {', '.join(map(str, who.info['planes']))} (bad rail planes)")
        elif who.scope == "rail":
            if who.info.get("how") == "relative":
                msg = (f"rail {who.rail} plane {phrase} against the other rails ({detail}): "
                       f"check rail {who.rail}'s switches and cabling")
            else:
                msg = (f"rail {who.rail} plane {phrase}: {who.info['k']} of {who.info['tot']} nodes have a bad NIC "
                       f"on it ({detail}): check rail {who.rail}'s switches")
        elif who.scope == "link":
            dirs = b.loc[b["owner"] == i, ["s", "d"]].drop_duplicates() if len(b) else pd.DataFrame()
            if len(dirs) == 1:
                node, peer = names[int(dirs["s"].iloc[0])], names[int(dirs["d"].iloc[0])]
                arrow = "->"
            else:
                arrow = "<->"
            msg = f"link {node} {arrow} {peer} on rail {who.rail} {phrase} ({detail}): check the cable and both ports"
            if who.info.get("tiny"):
                lines.insert(0, f"only 2 nodes on rail {who.rail}: a bad link cannot be told from a bad NIC "
                                f"on either end")
        else:
            msg = f"every rail plane {phrase} ({detail}): a fabric-wide problem, or bounds that do not fit this fabric"
        if severity == "fail" and who.scope in ("nic", "node"):
            msg += f": drain {node}"
        out.append(_finding(severity, who.scope, node, who.rail, peer, metric, value, expected, lines, msg,
                            kind if kind != "fleet" else ("bound" if not median_known else "outlier"), unit, size))
    return out


def _clean(x):
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


def _finding(severity, scope, node, rail, peer, metric, value, expected, evidence, message, kind, unit=None,
             size=None) -> dict:
    size = _clean(size)
    return {"severity": severity, "scope": scope, "node": node, "rail": None if rail is None else int(rail),
            "peer": peer, "metric": metric, "value": _clean(value), "expected": _clean(expected),
            "evidence": list(evidence), "message": message, "kind": kind,
            "unit": unit if isinstance(unit, str) else None, "size": None if size is None else int(size)}


# ---------------------------------------------------------------------------------------
# Failures that are not point-to-point: collectives, memreg, preflight
# ---------------------------------------------------------------------------------------

def _bound_text(suite: str, metric: str, value, bound, unit: str) -> str:
    higher = _direction(suite, metric)
    unit = unit or ""
    if metric == "memlock":
        have = "unlimited" if value is None or math.isnan(value) else f"{int(value)} B"
        need = "unlimited" if bound is None or math.isnan(bound) else f"{int(bound)} B"
        return f"memlock limit (ulimit -l) is {have}, the profile needs {need}"
    if metric == "errors":
        return f"returned wrong data ({_fmt(value)} wrong elements)"
    if metric == "ranks":
        return f"{_fmt(value)} ranks, expected {_fmt(bound)}"
    if metric == "version_mismatches":
        return f"software versions differ between nodes ({_fmt(value)} mismatches)"
    rel = "<" if higher else ">"
    return f"{metric} {_fmt(value)} {unit} {rel} bound {_fmt(bound)} {unit}".rstrip()


def _other_failures(ev: pd.DataFrame, p2p_idx: np.ndarray) -> list[dict]:
    """Failed bounds that the point-to-point graph does not localize."""
    fail = _codes_of(ev["verdict"], "fail") & ~_codes_of(ev["suite"], "counters")
    fail[p2p_idx] = False
    idx = np.flatnonzero(fail)
    if not len(idx):
        return []
    cols = ["suite", "metric", "value", "unit", "size", "rail", "src", "dst", "op", "scope", "threshold", "detail"]
    f = ev.iloc[idx][[c for c in cols if c in ev.columns]].copy()
    if "detail" not in f.columns:
        f["detail"] = None
    for c in ("suite", "metric", "unit", "src", "dst", "op", "scope", "detail"):
        f[c] = f[c].astype(object).where(f[c].notna(), None)
    f["size"] = _floats_of(f["size"])
    f["rail"] = _floats_of(f["rail"])
    out = []

    def where(row) -> str:
        parts = [row.src or "?"]
        if row.dst:
            parts[0] += f"..{row.dst}" if row.suite == "collective" else f" -> {row.dst}"
        if not math.isnan(row.rail):
            parts.append(f"rail {int(row.rail)}")
        return " ".join(parts) + f", {row.metric}{_size_text(row.size)}"

    def make(scope, g, node=None, rail=None, subject=""):
        g = g.sort_values("size", ascending=False, kind="stable")
        h = g.iloc[0]
        value, bound = float(g["value"].median()) if g["value"].notna().any() else None, \
            float(g["threshold"].median()) if g["threshold"].notna().any() else None
        text = _bound_text(h["suite"], h["metric"], value if value is not None else float("nan"),
                           bound if bound is not None else float("nan"), h["unit"])
        sizes = g["size"].dropna().nunique()
        more = f" at {sizes} sizes" if sizes > 1 else _size_text(h["size"]).replace(" ", " at ", 1)
        lines = [f"{where(row)}: {_bound_text(row.suite, row.metric, row.value, row.threshold, row.unit)}"
                 + (f" ({row.detail})" if isinstance(row.detail, str) else "")
                 for row in g.head(EVIDENCE_MAX).itertuples()]
        msg = f"{subject}: {h['suite']} {text}{more}"
        if scope == "node":
            msg += f": drain {node}"
        out.append(_finding("fail", scope, node, rail, None, h["metric"], value, bound,
                            _cap(lines, len(g)), msg, "bound", h["unit"], h["size"]))

    # GPUDirect use (gdrdma, from NCCL's log) is a property of a node's NIC, not of a communicator.
    per_comm = (f["suite"] == "collective") & (f["metric"] != "gdrdma")
    coll = f[per_comm]
    for (op, scope, metric), g in coll.groupby(["op", "scope", "metric"], dropna=False, sort=True):
        label = f"{op or 'collective'} over {scope or 'an unknown communicator'}"
        if scope == "node":
            for node, gg in g.groupby("src", sort=True):
                make("node", gg, node=node, subject=f"{op or 'collective'} inside {node}")
        elif isinstance(scope, str) and scope.startswith("rail") and scope[4:].isdigit():
            make("rail", g, rail=int(scope[4:]), subject=f"{label} (rail {scope[4:]} plane)")
        else:
            make("cluster", g, subject=label)
    rest = f[~per_comm]
    single = rest[rest["dst"].isna()]
    for (suite, metric), g in single.groupby(["suite", "metric"], sort=True):
        nodes = sorted(set(g["src"].dropna()))
        sel = _codes_of(ev["suite"], suite) & _codes_of(ev["metric"], metric)
        total = ev.loc[sel, "src"].nunique()
        if len(nodes) >= 2 and len(nodes) >= 0.5 * total:
            make("cluster", g, subject=f"{len(nodes)} of {total} nodes")
        else:
            for node, gg in g.groupby("src", sort=True):
                make("node", gg, node=node, subject=node)
    for (suite, metric), g in rest[rest["dst"].notna()].groupby(["suite", "metric"], sort=True):
        make("cluster", g, subject="the job")
    return out


_PORT = re.compile(r"^(\S+) port (\d+)")


def _counter_findings(ev: pd.DataFrame) -> list[dict]:
    """One finding per port whose counters fail or warn (suite counters), naming node, device, port, rail."""
    sel = _codes_of(ev["suite"], "counters") & (_codes_of(ev["verdict"], "fail") | _codes_of(ev["verdict"], "warn"))
    if not sel.any():
        return []
    cols = ["metric", "value", "unit", "rail", "src", "threshold", "verdict", "detail", "test"]
    c = ev.loc[sel, [x for x in cols if x in ev.columns]].copy()
    for col in ("metric", "unit", "src", "verdict", "detail", "test"):
        if col in c.columns:
            c[col] = c[col].astype(object)
    port = c["detail"].fillna("").astype(str).str.extract(_PORT)
    c["device"], c["port"] = port[0].fillna("?"), port[1].fillna("?")
    c["rail"] = _floats_of(c["rail"])
    c["_fail"] = c["verdict"] == "fail"
    out = []
    for (node, device, port_no), g in c.groupby(["src", "device", "port"], sort=True, dropna=False):
        g = g.sort_values(["_fail", "value"], ascending=[False, False], kind="stable", na_position="first")
        h = g.iloc[0]
        severity = "fail" if h["_fail"] else "warn"
        rails = g["rail"].dropna()
        rail = int(rails.iloc[0]) if len(rails) else None
        on = f"{node} {device} port {port_no}" + (f" (rail {rail})" if rail is not None else "")

        def what(row) -> str:
            detail = row.detail if isinstance(row.detail, str) else ""
            if "saturated" in detail:
                return f"{row.metric} {detail.split('; ', 1)[-1]}"
            if row.unit == "1/s":
                return f"{row.metric} {_fmt(row.value)}/s > {_fmt(row.threshold)}/s"
            return f"{row.metric} rose by {_fmt(row.value)} (bound {_fmt(row.threshold)})"

        evidence = [f"{what(row)} during {row.test}" for row in g.head(EVIDENCE_MAX).itertuples()]
        names = list(dict.fromkeys(g["metric"]))
        headline = what(next(g.itertuples()))
        more = f" and {len(names) - 1} more counter(s)" if len(names) > 1 else ""
        advice = ("error counters must not rise: check the cable, transceiver and switch port"
                  if severity == "fail" else "congestion or drops on this port")
        value = None if pd.isna(h["value"]) else float(h["value"])
        bound = None if pd.isna(h["threshold"]) else float(h["threshold"])
        out.append(_finding(severity, "nic", node, rail, None, h["metric"], value, bound,
                            _cap(evidence, len(g)), f"{on}: {headline}{more}; {advice}", "counter", h["unit"]))
    return out


# ---------------------------------------------------------------------------------------
# Burn-in: drift and instability across iterations
# ---------------------------------------------------------------------------------------

def _key_view(ev: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows of TREND_METRICS with the comparison key columns, node codes and a direction."""
    names, s, d = _node_names(ev)
    mask = np.zeros(len(ev), bool)
    for suite, metric in TREND_METRICS:
        mask |= _codes_of(ev["suite"], suite) & _codes_of(ev["metric"], metric)
    idx = np.flatnonzero(mask)
    v = pd.DataFrame({"suite": ev["suite"].take(idx).astype(str).to_numpy(),
                      "metric": ev["metric"].take(idx).astype(str).to_numpy(),
                      "size": _floats_of(ev["size"])[idx], "rail": _floats_of(ev["rail"])[idx],
                      "s": s[idx], "d": d[idx],
                      "op": ev["op"].take(idx).astype(object).fillna("").to_numpy(),
                      "scope": ev["scope"].take(idx).astype(object).fillna("").to_numpy(),
                      "unit": ev["unit"].take(idx).astype(object).to_numpy(),
                      "iteration": ev["iteration"].to_numpy()[idx], "value": _floats_of(ev["value"])[idx]})
    return v, names


_GROUP = ["suite", "metric", "size", "rail", "s", "d", "op", "scope"]


def _burnin(ev: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Per series (a key over iterations) with >= 4 iterations: first/last quarter medians, CV, flags."""
    its = ev["iteration"].to_numpy()
    if len(its) == 0 or its.min() == its.max():
        return pd.DataFrame()
    v, _ = _key_view(ev)
    v = v[~np.isnan(v["value"].to_numpy())]
    if v.empty:
        return pd.DataFrame()
    v = v.fillna({"size": -1.0, "rail": -1.0})
    per = (v.groupby([*_GROUP, "iteration"], sort=True).agg(value=("value", "median"), unit=("unit", "first"))
           .reset_index())
    g = per.groupby(_GROUP, sort=False).ngroup().to_numpy()
    per["g"] = g
    per = per.sort_values(["g", "iteration"], kind="stable")
    grp = per.groupby("g", sort=True)
    rank = grp.cumcount().to_numpy()
    n = grp["value"].transform("size").to_numpy()
    q = np.ceil(n / 4).astype(int)
    val = per["value"].to_numpy()
    first = pd.Series(np.where(rank < q, val, np.nan)).groupby(per["g"].to_numpy()).median()
    last = pd.Series(np.where(rank >= n - q, val, np.nan)).groupby(per["g"].to_numpy()).median()
    stats = grp["value"].agg(["mean", "std", "size"])
    keys = grp[[*_GROUP, "unit"]].first()
    t = keys.assign(n=stats["size"], mean=stats["mean"], std=stats["std"], first=first, last=last)
    t = t[t["n"] >= 4]
    if t.empty:
        return pd.DataFrame()
    higher = np.array([_direction(a, b) is not False for a, b in zip(t["suite"], t["metric"])])
    with np.errstate(divide="ignore", invalid="ignore"):
        worse = np.where(higher, (t["first"] - t["last"]) / t["first"], (t["last"] - t["first"]) / t["first"])
        cv = (t["std"] / t["mean"]).to_numpy()
    t = t.assign(worse=worse, cv=cv)
    t["drift"] = t["worse"] > profile.get("analysis.drift_tolerance")
    t["unstable"] = (t["cv"] > profile.get("analysis.cv_max")) & ~t["drift"]
    t = t[t["drift"] | t["unstable"]].reset_index(drop=True)
    return t.replace({"size": {-1.0: np.nan}, "rail": {-1.0: np.nan}})


def _series_findings(t: pd.DataFrame, kind: str, measured: pd.DataFrame, names: list[str], profile: Profile,
                     severity_of=None) -> list[dict]:
    """Findings from per-series rows (drift, instability, regression): p2p rows are localized,
    collective rows are placed by their communicator."""
    if t is None or t.empty:
        return []
    p2p = (t["suite"] == "rdma_write") & t["rail"].notna() & (t["s"] >= 0) & (t["d"] >= 0)
    out = []
    if p2p.any():
        x = t[p2p]
        bad = pd.DataFrame({"rail": x["rail"].astype(np.int64).to_numpy(), "s": x["s"].to_numpy(),
                            "d": x["d"].to_numpy(), "metric": x["metric"].to_numpy(), "size": x["size"].to_numpy(),
                            "value": x["value"].to_numpy(), "expected": x["expected"].to_numpy(),
                            "median": x["median"].to_numpy(), "bound": np.nan, "worse": x["worse"].to_numpy(),
                            "grade": x["grade"].to_numpy(), "unit": x["unit"].to_numpy()})
        out += _localize(bad, measured, names, profile, kind)
    for row in t[~p2p].itertuples():
        node = names[row.s] if row.s >= 0 else None
        scope_name = row.scope or ""
        if scope_name == "node" and node:
            scope, rail, subject = "node", None, f"{row.op or row.metric} inside {node}"
        elif scope_name.startswith("rail") and scope_name[4:].isdigit():
            scope, rail, node, subject = "rail", int(scope_name[4:]), None, f"{row.op} over rail {scope_name[4:]}"
        else:
            scope, rail, node, subject = "cluster", None, None, f"{row.op or row.suite} over {scope_name or 'the job'}"
        higher = _direction(row.suite, row.metric)
        phrase, detail = _how(kind, row.metric, row.value, row.expected, row.unit, row.size, higher, True)
        severity = "fail" if row.grade else "warn"
        line = f"{subject}, {row.metric}{_size_text(row.size)}: " + (
            f"{_fmt(row.expected)} -> {_fmt(row.value)} {row.unit}" if kind == "drift" else
            f"CV {row.value:.0%}" if kind == "instability" else
            f"{_fmt(row.value)} vs baseline {_fmt(row.expected)} {row.unit}")
        msg = f"{subject} {phrase} ({detail})" + (f": drain {node}" if severity == "fail" and scope == "node" else "")
        out.append(_finding(severity, scope, node, rail, None, row.metric, row.value, row.expected, [line], msg,
                            kind, row.unit, row.size))
    return out


def _burnin_findings(ev: pd.DataFrame, profile: Profile, measured: pd.DataFrame) -> list[dict]:
    t = _burnin(ev, profile)
    if t.empty:
        return []
    names = _node_names(ev)[0]
    out = []
    drift = t[t["drift"]]
    out += _series_findings(drift.assign(value=drift["last"], expected=drift["first"], median=drift["mean"],
                                         grade=False), "drift", measured, names, profile)
    unstable = t[t["unstable"]]
    out += _series_findings(unstable.assign(value=unstable["cv"], expected=profile.get("analysis.cv_max"),
                                            median=unstable["mean"], grade=False, worse=unstable["cv"]),
                            "instability", measured, names, profile)
    return out


# ---------------------------------------------------------------------------------------
# Baseline comparison
# ---------------------------------------------------------------------------------------

def compare(df: pd.DataFrame, baseline_df: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Median now vs median in the baseline, per (suite, metric, size, rail, src, dst, op, scope).

    Only TREND_METRICS (rdma_write bandwidth, latency p50 / p99, collective busbw).
    change is signed so that negative is worse; regression: change < -analysis.regression_tolerance.
    Columns: the key, unit, value (now), baseline, change, regression; size and rail are float (NaN: none).
    """
    cols = [*_KEYS, "unit", "value", "baseline", "change", "regression"]
    (now, now_names), (base, base_names) = _key_view(df), _key_view(baseline_df)
    if now.empty or base.empty:
        return pd.DataFrame({c: [] for c in cols})
    # code both runs' nodes into one list of names
    names = sorted(set(now_names) | set(base_names))
    index = {n: i for i, n in enumerate(names)}
    for frame, own in ((now, now_names), (base, base_names)):
        table = np.array([index[n] for n in own] + [-1], dtype=np.int64)
        frame["s"] = table[frame["s"].to_numpy()]
        frame["d"] = table[frame["d"].to_numpy()]
    a = now.fillna({"size": -1.0, "rail": -1.0}).groupby(_GROUP, sort=False).agg(
        value=("value", "median"), unit=("unit", "first"))
    b = base.fillna({"size": -1.0, "rail": -1.0}).groupby(_GROUP, sort=False)["value"].median().rename("baseline")
    j = a.join(b, how="inner").reset_index()
    higher = np.array([_direction(x, y) is not False for x, y in zip(j["suite"], j["metric"])], dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.where(higher, (j["value"] - j["baseline"]) / j["baseline"],
                          (j["baseline"] - j["value"]) / j["baseline"])
    change = np.where(j["baseline"].to_numpy() != 0, change, np.nan)
    names_arr = np.array(names + [None], dtype=object)
    out = pd.DataFrame({
        "suite": j["suite"], "metric": j["metric"],
        "size": j["size"].replace(-1.0, np.nan), "rail": j["rail"].replace(-1.0, np.nan),
        "src": names_arr[j["s"].to_numpy()], "dst": names_arr[j["d"].to_numpy()],
        "op": j["op"].replace("", None), "scope": j["scope"].replace("", None), "unit": j["unit"],
        "value": j["value"], "baseline": j["baseline"], "change": change})
    out["regression"] = out["change"] < -profile.get("analysis.regression_tolerance")
    return out


def _regression_findings(deltas: pd.DataFrame, profile: Profile, measured: pd.DataFrame,
                         names: list[str]) -> list[dict]:
    if deltas is None or deltas.empty or not deltas["regression"].any():
        return []
    r = deltas[deltas["regression"]].copy()
    index = {n: i for i, n in enumerate(names)}
    r["s"] = [index.get(n, -1) if isinstance(n, str) else -1 for n in r["src"]]
    r["d"] = [index.get(n, -1) if isinstance(n, str) else -1 for n in r["dst"]]
    # a node that is only in the baseline cannot be localized in this run
    r["op"] = r["op"].fillna("")
    r["scope"] = r["scope"].fillna("")
    tol = profile.get("analysis.regression_tolerance")
    r = r.assign(expected=r["baseline"], worse=-r["change"], median=r["baseline"], grade=r["change"] < -2 * tol)
    return _series_findings(r, "regression", measured, names, profile)


# ---------------------------------------------------------------------------------------
# Putting it together
# ---------------------------------------------------------------------------------------

def _sort(findings: list[dict]) -> list[dict]:
    kinds = {"bound": 0, "outlier": 0, "counter": 0, "regression": 1, "drift": 2, "instability": 3}

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
    p, names, p2p_idx = _p2p(ev)
    measured = _measured(p) if len(p) else pd.DataFrame({"rail": [], "u": [], "v": []}, dtype=np.int64)
    pairs = _pair_values(p)
    outliers = _fleet(pairs, profile)
    planes = _rail_planes(pairs, profile) if pairs["rail"].nunique() >= 3 else None
    bad = _bad_p2p(p, outliers, profile)
    if planes is not None and len(planes):
        bad = _against_rails(bad, pairs, planes, profile)
    findings = _localize(bad, measured, names, profile, "fleet", planes)
    findings += _other_failures(ev, p2p_idx)
    findings += _counter_findings(ev)
    findings += _burnin_findings(ev, profile, measured)
    if deltas is not None:
        findings += _regression_findings(deltas, profile, measured, names)
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
            raise FileNotFoundError(f"{path}: no such file (a run folder needs run.json with run_id and profile)")
        return {"run_id": run_dir.name}
    try:
        run = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(run, dict):
        raise ValueError(f"{path}: expected a JSON object")  # noqa: TRY004 (bad input, as above)
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
        raise ValueError(f"{run_dir / 'run.json'}: no profile (give one: a built-in name or a .toml path)")
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
    raise ValueError(f"{run_dir / 'run.json'}: profile must be a name, a path or an object with "
                     f"values, source or name; got {p!r}")


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
    records = evaluate(load_records(run_dir), prof)
    t1 = time.perf_counter()
    deltas = baseline_id = None
    if baseline_dir is not None:
        baseline_dir = Path(baseline_dir)
        baseline_id = _read_run(baseline_dir, required=False).get("run_id")
        deltas = compare(records, load_records(baseline_dir), prof)
    findings = _find(records, prof, deltas)
    extra = {"seconds": {"load": round(t1 - t0, 3), "analyze": round(time.perf_counter() - t1, 3)},
             "skipped_lines": records.attrs.get("skipped_lines", 0)}
    return Analysis(run=run, profile=prof, records=records, findings=findings, drains=drain_lines(findings),
                    deltas=deltas, baseline_id=baseline_id, extra=extra)


_UNSAFE = re.compile(r'["\\$`\x00-\x1f\x7f]+')


def _reason(f: dict) -> str:
    """A short drain reason from a finding: what is bad, by how much."""
    metric = f.get("metric") or "check"
    where = f"NIC rail {f['rail']} " if f.get("scope") == "nic" else ""
    value, expected, unit = f.get("value"), f.get("expected"), f.get("unit") or ""
    kind = f.get("kind")
    if kind == "instability":
        text = f"{metric} unstable"
    elif metric == "memlock":
        text = "memlock limit too low"
    elif value is not None and expected is not None:
        text = f"{metric} {_fmt(value)} vs {_fmt(expected)} {unit}".rstrip()
        if kind == "regression":
            text += " baseline"
    else:
        text = f"{metric} failed"
    reason = _UNSAFE.sub(" ", f"{where}{text}")
    return re.sub(r"\s+", " ", reason).strip()[:120]


def drain_lines(findings: list[dict]) -> list[str]:
    """One scontrol line per node named by a failing node- or NIC-scope finding (first finding wins).

    The node name is shell-quoted when it needs it; the reason is double-quoted and holds no
    double quote, backslash, $, backtick or control character, so the line is safe to paste
    into a shell and to shlex.split().
    """
    reasons: dict[str, str] = {}
    for f in findings:
        node = f.get("node")
        if f.get("severity") == "fail" and f.get("scope") in ("node", "nic") and node:
            reasons.setdefault(str(node), _reason(f))
    return [f'scontrol update NodeName={shlex.quote(node)} State=DRAIN Reason="acceptance: {reason}"'
            for node, reason in reasons.items()]


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
    findings = [{k: _clean(v) for k, v in f.items()} for f in analysis.findings]
    (run_dir / "findings.json").write_text(json.dumps(findings, indent=2, default=_json_default,
                                                      allow_nan=False) + "\n")
    (run_dir / "drain.txt").write_text("".join(line + "\n" for line in analysis.drains))
