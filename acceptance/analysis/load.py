"""Loading results.jsonl into one typed DataFrame, fast (see load_records)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..records.results import SCHEMA_VERSION, InputError




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
              + rb', "threshold": ' + _NUM + rb', "verdict": ' + _SN + rb'(?:, "bound": ' + _SN + rb')?(?:, "detail": ' + _SN
              + rb')?(?:, "ops": ' + _NUM + rb')?(?:, "ops_failed": ' + _NUM + rb')?(?:, "ops_missing": ' + _NUM
              + rb')?(?:, "op": ' + _S + rb')?(?:, "scope": ' + _S + rb')?(?:, "device": ' + _S + rb')?(?:, "port": '
              + _NUM + rb')?(?:, "saturated": ' + _S + rb')?(?:, "phase": ' + _S + rb')?(?:, "file": ' + _S + rb')?)(?:, "start": ' + _S
              + rb')?(?:, "round": ' + _NUM + rb')?\}\r?\n')
_LINE = re.compile(_CANONICAL + rb'|([^\n]*)\n')
# segment group -> the key its text starts after, and the record keys it holds
_SEGMENTS = {0: ("test", ("test", "suite", "metric")), 2: ("unit", ("unit", "size", "rail")),
             4: ("engine", ("engine", "memory", "iteration")),
             6: ("samples", ("samples", "threshold", "verdict", "bound", "detail", "ops", "ops_failed", "ops_missing",
                             "op", "scope", "device", "port", "saturated", "phase", "file"))}
_VALUE, _NODES, _TIME, _OTHER = 1, 3, 5, 7
_CHUNK = 16 << 20


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
    for key in ("bound", "detail"):
        if obj.get(key) is not None:
            rec[key] = str(obj[key])
    for key in ("ops", "ops_failed", "ops_missing"):
        if num(obj.get(key)) is not None:
            rec[key] = num(obj[key])
    for key in ("op", "scope", "device"):
        if obj.get(key) is not None:
            rec[key] = str(obj[key])
    if num(obj.get("port")) is not None:
        rec["port"] = num(obj["port"])
    for key in ("saturated", "phase", "file"):
        if obj.get(key) is not None:
            rec[key] = str(obj[key])
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
                raise InputError(f"{path}: line {first_line + i + 1}: not a JSON record ({e})") from None
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
                raise InputError(f"{path}: line {lines[i] + 1}: not a JSON record "
                                 f"(value {bytes(raw).decode(errors='replace')!r})") from None
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
            raise InputError(f"{path}: not a JSON record: {e}: {(head + raw)[:200]!r}") from None
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


# One or two plain, non-empty names; anything else (an empty name, escapes, three names) goes to json.loads.
_SIMPLE_LIST = re.compile(rb'(?m)^(?:(")([^"\\\n]+)"(?:, "([^"\\\n]+)")?|[^\n]*)$')


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


# Long: the record schema's columns one after another, each converted once for millions of rows,
# in the order docs/records.md lists them.
def load_records(run_dir) -> pd.DataFrame:
    """results.jsonl of a run folder (or the file itself) as a DataFrame, one row per record.

    Columns: test, suite, metric, unit, engine, memory, verdict, bound, detail (categorical);
    value, threshold (float64; null -> NaN); size, rail, samples (nullable Int64);
    iteration (int64, 0 when absent); time (datetime64 UTC, NaT when absent); nodes
    (tuple of node names); src (nodes[0]) and dst (nodes[1] or NaN), categoricals
    sharing one list of node names; op, scope, device, saturated, phase, file (categorical) and port
    (nullable Int64), the record's own fields (derived for schema 1 folders only: run_schema).
    `ranks` and `start` are not loaded
    (analysis does not use them, and a large run has one distinct value per record or pair).
    Rows are in file order. A truncated last line (a crash mid-write) is skipped and
    counted in df.attrs["skipped_lines"]; any other unreadable line is an error naming it.
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.is_file():
        raise InputError(f"{path}: no such file (a run folder needs results.jsonl)")
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
    data["bound"] = _categorical(*fields["bound"])
    data["detail"] = _categorical(*fields["detail"])
    data["ops"] = _ints(_floats(*fields["ops"]))
    data["ops_failed"] = _ints(_floats(*fields["ops_failed"]))
    data["ops_missing"] = _ints(_floats(*fields["ops_missing"]))
    for name in ("op", "scope", "device", "saturated", "phase", "file"):
        data[name] = _categorical(*fields[name])
    data["port"] = _ints(_floats(*fields["port"]))
    node_cats = pd.Index(node_names, dtype=object)
    data["src"] = pd.Categorical.from_codes(f_code[list_codes] if len(tuples) else list_codes, categories=node_cats)
    data["dst"] = pd.Categorical.from_codes(s_code[list_codes] if len(tuples) else list_codes, categories=node_cats)
    del fields, list_codes, time_codes, out[_VALUE]
    df = pd.DataFrame(data, copy=False)
    del data
    lines = joined("line")
    if len(lines) and (np.diff(lines) < 0).any():
        df = df.take(np.argsort(lines, kind="stable")).reset_index(drop=True)
    schema = run_schema(path)
    if schema == 1:
        df = _schema1(df)
    if schema < 3:
        df = _schema2(df)
    df.attrs["schema"] = schema
    df.attrs["skipped_lines"] = out["skipped"]
    df.attrs["source"] = str(path)
    return df


FIELD_COLUMNS = ("op", "scope", "device", "port", "saturated", "phase", "file")


def with_fields(df: pd.DataFrame) -> pd.DataFrame:
    """df with the optional record fields (FIELD_COLUMNS) it lacks as empty columns (a frame built
    by hand rather than by load_records)."""
    missing = [c for c in FIELD_COLUMNS if c not in df.columns]
    if not missing:
        return df
    n = len(df)
    return df.assign(**{c: (pd.array([None] * n, dtype="Int64") if c == "port"
                            else pd.Categorical([None] * n)) for c in missing})


def run_schema(results: Path) -> int:
    """The schema version of the run folder holding `results` (run.json "schema"; 1 where run.json
    has none or there is no run.json: a folder written before the version was kept, or by hand).
    A newer version than this harness reads is refused."""
    run_json = results.parent / "run.json"
    version = 1
    if run_json.is_file():
        try:
            run = json.loads(run_json.read_text())
        except (OSError, ValueError) as e:
            raise InputError(f"{run_json}: not valid JSON: {e}") from None
        if isinstance(run, dict) and run.get("schema") is not None:
            version = run["schema"]
            if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                raise InputError(f"{run_json}: schema must be a version number >= 1, got {version!r}")
    if version > SCHEMA_VERSION:
        raise InputError(f"{run_json}: schema {version} is newer than this harness reads ({SCHEMA_VERSION}): "
                         "upgrade acceptance to analyze it")
    return version


def _schema2(df: pd.DataFrame) -> pd.DataFrame:
    """Schema 2 and before: one gdrdma record per node and rail carried its own bound; a sends-only
    one (warn, no threshold) is gdrdma_sends now, an idle NIC's (info) gdrdma_support."""
    if not len(df) or "gdrdma" not in set(df["metric"].astype(str)):
        return df
    gdr = (df["suite"].astype(str) == "collective") & (df["metric"].astype(str) == "gdrdma")
    verdict = df["verdict"].astype(str)
    metric = df["metric"].astype(object).where(~(gdr & (verdict == "warn")), "gdrdma_sends")
    metric = metric.where(~(gdr & (verdict == "info")), "gdrdma_support")
    return df.assign(metric=pd.Categorical(metric))


# Schema 1 only (docs/records.md "Schema versions"): a collective's op and scope were the test's
# function name and parameter (test_allreduce[rail0]: allreduce over rail 0), a port counter's device,
# port and saturation the start and end of its detail ("mlx5_0 port 1; saturated before the window").
_V1_PARAM = re.compile(r"\[([^\[\]]*)\]\s*$")
_V1_FUNC = re.compile(r"::test_([A-Za-z0-9]+)")
_V1_SCOPE = re.compile(r"(world|node|rail)\d*")
_V1_PORT = re.compile(r"^(\S+) port (\d+)")


def _categories_map(column: pd.Series, fn) -> pd.Categorical:
    """fn applied once per distinct value of a categorical column (None -> NaN)."""
    cats = list(column.cat.categories)
    table = pd.Categorical([fn(c) for c in cats] or [None])
    codes = column.cat.codes.to_numpy()
    mapped = np.where(codes >= 0, table.codes[np.maximum(codes, 0)] if cats else -1, -1)
    return pd.Categorical.from_codes(mapped, categories=table.categories)


def _fill(df: pd.DataFrame, column: str, derived: pd.Categorical, where: np.ndarray) -> None:
    have = df[column].astype(object)
    df[column] = pd.Categorical(np.where(where & have.isna().to_numpy(), np.asarray(derived, dtype=object),
                                         have.to_numpy()))


def _schema1(df: pd.DataFrame) -> pd.DataFrame:
    """The fields schema 1 lacked, derived as it derived them (per distinct test id or detail)."""
    coll = (df["suite"] == "collective").to_numpy()
    if coll.any():
        def op_of(t):
            f = _V1_FUNC.search(t)
            return f[1] if f and f[1] in ("allreduce", "alltoall") else None

        def scope_of(t):
            m = _V1_PARAM.search(t)
            s = _V1_SCOPE.fullmatch(m[1]) if m else None
            return s[1] if s else None
        _fill(df, "op", _categories_map(df["test"], op_of), coll)
        _fill(df, "scope", _categories_map(df["test"], scope_of), coll)
    ctr = (df["suite"] == "counters").to_numpy()
    if ctr.any() and df["detail"].notna().any():
        def port_of(d, i):
            m = _V1_PORT.match(d)
            return m[i] if m else None
        _fill(df, "device", _categories_map(df["detail"], lambda d: port_of(d, 1)), ctr)
        port = np.asarray(_categories_map(df["detail"], lambda d: port_of(d, 2)), dtype=object)
        got = ctr & pd.notna(port) & df["port"].isna().to_numpy()
        ports = df["port"].to_numpy(dtype=np.float64, na_value=np.nan)
        ports[got] = port[got].astype(np.float64)
        df["port"] = _ints(ports)
        sat = _categories_map(df["detail"], lambda d: "during" if "during the window" in d and "saturated at" in d
                              else "before" if "saturated before" in d else None)
        _fill(df, "saturated", sat, ctr)
    return df
