"""perftest's reports parsed: either JSON dialect or the text report, into BwResult / LatResult."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

MIB_PER_S_IN_GBIT = 2**20 * 8 / 1e9  # perftest's default unit ("MB/sec", really MiB/s) in Gbit/s


class PerftestError(Exception):
    """A perftest run failed: the message names the tool and ends with its stderr tail."""

    @property
    def clock_only(self) -> bool:
        """Every side failed only to calibrate its clock: worth one more try."""
        parts = str(self).split("; ")
        return bool(parts) and all(p.endswith(CLOCK_PROBLEM) for p in parts)


# perftest's get_cpu_mhz() samples the TSC against gettimeofday and gives up when the fit is poor
# (a busy or virtual CPU); latencies are then reported as inf.
CLOCK_FAILED = "Correlation coefficient r^2"
CLOCK_PROBLEM = ("could not calibrate its clock (perftest: 'Correlation coefficient r^2 < 0.9', "
                 "the CPU was busy or virtual while it sampled the TSC), so it reported no latency")


class PerftestParseError(PerftestError):
    """A report that is neither perftest's JSON (either dialect) nor its text report."""

    def __init__(self, reason: str, text: str):
        self.reason, self.text = reason, text
        super().__init__(f"{reason}; got: {_excerpt(text)}")


def _excerpt(text: str, limit: int = 400) -> str:
    text = text if isinstance(text, str) else repr(text)
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit // 2]) + " ... " + repr(text[-limit // 2:])


@dataclass(frozen=True)
class BwResult:
    size: int              # bytes per write (MsgSize / #bytes)
    iterations: int        # writes the average covers (with -D: those in the measured window)
    peak_gbps: float       # 0.0 when perftest did not measure it (-D, > 20000 iterations, -N)
    avg_gbps: float        # the number to compare: bytes * 8 / elapsed, 1e9 bit/s
    msg_rate_mpps: float   # million writes per second


@dataclass(frozen=True)
class LatResult:
    size: int
    iterations: int        # -n; the statistics cover iterations - 3 samples
    t_min_us: float
    t_max_us: float        # the 2nd-largest raw sample (perftest drops the largest 2)
    t_typical_us: float    # the median
    t_avg_us: float
    t_stdev_us: float      # sub-microsecond deviations count as 0 (perftest truncates to int)
    p99_us: float
    p999_us: float

    @property
    def samples(self) -> int:
        return max(self.iterations - 3, 0)


_OPEN = re.compile(r'^"?(?P<key>[^":{}]+?)"?\s*:\s*\{$')
_ITEM = re.compile(r'^"?(?P<key>[^":{}]+?)"?\s*:\s*(?P<value>.*?)\s*,?$')


def _scalar(raw: str) -> Any:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return raw[1:-1]
    for kind in (int, float):  # float() also takes perftest's "nan", "-nan", "inf"
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _loads_perftest(text: str) -> dict:
    """perftest's JSON file: standard JSON (>= 6.20) or the older bare-key dialect (<= 6.19)."""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if doc is not None:
        if not isinstance(doc, dict):
            raise PerftestParseError(f"a JSON {type(doc).__name__}, not perftest's report object", text)
        return doc
    # The older dialect, one entry per line: `key: value,` / `key: {` / `},` (keys may be quoted).
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None or lines[first].strip() != "{":
        raise PerftestParseError("not a perftest JSON report: it does not start with '{'", text)
    root: dict = {}
    stack = [root]
    for number, raw in enumerate(lines[first + 1:], first + 2):
        line = raw.strip()
        if not line:
            continue
        if not stack:
            raise PerftestParseError(f"line {number} comes after the closing brace: {line!r}", text)
        if line in ("}", "},"):
            stack.pop()
            continue
        m = _OPEN.match(line)
        if m:
            inner: dict = {}
            stack[-1][m["key"].strip()] = inner
            stack.append(inner)
            continue
        m = _ITEM.match(line)
        if m:
            stack[-1][m["key"].strip()] = _scalar(m["value"])
            continue
        raise PerftestParseError(f"line {number} is neither 'key: value' nor a brace: {line!r}", text)
    if stack:
        raise PerftestParseError("the report ends before its closing brace (a run cut short?)", text)
    return root


def _number(results: dict, key: str, text: str, integer: bool = False) -> float | int:
    value = results[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PerftestParseError(f"{key} is {value!r}, not a number", text)
    if not math.isfinite(value):
        raise PerftestParseError(f"{key} is {value}: perftest produced no valid measurement", text)
    if value < 0:
        raise PerftestParseError(f"{key} is negative ({value}): perftest's timing went wrong", text)
    if integer:
        if value != int(value):
            raise PerftestParseError(f"{key} is {value}, not a whole number", text)
        return int(value)
    return float(value)


_BW_KEYS = ("MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate")
_LAT_KEYS = ("MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev",
             "percentile_99", "percentile_99.9")


def _results(doc: dict, keys: tuple[str, ...], kind: str, text: str) -> dict:
    results = doc.get("results")
    if not isinstance(results, dict):
        raise PerftestParseError("no \"results\" object in the report", text)
    results = {str(k).strip(): v for k, v in results.items()}
    missing = [k for k in keys if k not in results]
    if missing:
        if kind == "bw" and "t_typical" in results:
            why = "this is a latency report (ib_*_lat), not a bandwidth one"
        elif kind == "lat" and "BW_average" in results:
            why = "this is a bandwidth report (ib_*_bw), not a latency one"
        elif kind == "lat" and "tps_average" in results:
            why = "a duration-mode (-D) latency report: it has no percentiles; run ib_write_lat with -n"
        elif {"bw_avg", "msgRate_avg", "avg_lat"} & set(results):
            why = "a reduced report (--output=...): run without --output"
        else:
            why = "missing " + ", ".join(missing) + " in \"results\""
        raise PerftestParseError(why, text)
    return results


def _text_rows(text: str, header: re.Pattern, width: int) -> tuple[re.Match, list[list[str]]] | None:
    """The header match and the numeric rows under it (up to the next dashed line)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = header.search(line)
        if not m:
            continue
        rows = []
        for row in lines[i + 1:]:
            if row.strip().startswith("---"):
                if rows:
                    break
                continue
            tokens = row.split()
            # Other lines are passed over, not taken as the end: stderr interleaved in a pasted report,
            # such as perftest's "Conflicting CPU frequency values detected: ..." amid an -a sweep.
            if len(tokens) >= width and all(_is_number(t) for t in tokens[:width]):
                rows.append(tokens[:width])
        return m, rows
    return None


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


_BW_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[[^\]]+\]\s+MsgRate\[Mpps\]")
_LAT_HEADER = re.compile(r"#bytes\s+#iterations\s+t_min\[usec\]\s+t_max\[usec\]\s+t_typical\[usec\]\s+t_avg\[usec\]"
                         r"\s+t_stdev\[usec\]\s+99% percentile\[usec\]\s+99\.9% percentile\[usec\]")
_LAT_DUR_HEADER = re.compile(r"#bytes\s+#iterations\s+t_avg\[usec\]\s+tps average")
_UNITS = {"Gb/sec": 1.0, "MB/sec": MIB_PER_S_IN_GBIT, "MiB/sec": MIB_PER_S_IN_GBIT}


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise PerftestParseError(f"expected the report as text, got {type(text).__name__}", repr(text))
    if not text.strip():
        raise PerftestParseError("empty report (the tool wrote nothing)", text)
    return text.strip()


def parse_bw(text: str) -> BwResult:
    """An ib_*_bw report: the --out_json file (either dialect) or the text printed on stdout.

    A text report of several sizes (-a) gives its last row, as the JSON file holds only that one.
    """
    body = _check_text(text)
    if body.startswith(("{", "[")):
        r = _results(_loads_perftest(text), _BW_KEYS, "bw", text)
        values = {k: r[k] for k in _BW_KEYS}
        factor = 1.0
    else:
        found = _text_rows(body, _BW_HEADER, 5)
        if found is None:
            if _LAT_HEADER.search(body) or _LAT_DUR_HEADER.search(body):
                raise PerftestParseError("this is a latency report (ib_*_lat), not a bandwidth one", text)
            raise PerftestParseError("no '#bytes #iterations BW peak[...] BW average[...] MsgRate[Mpps]' header: "
                                     "not an ib_*_bw report (did the run fail before reporting?)", text)
        header, rows = found
        unit = header["unit"]
        if unit not in _UNITS:
            raise PerftestParseError(f"unknown bandwidth unit [{unit}]", text)
        if not rows:
            raise PerftestParseError("a bandwidth header but no result row under it", text)
        factor = _UNITS[unit]
        values = dict(zip(_BW_KEYS, (_scalar(t) for t in rows[-1])))
    return BwResult(size=_number(values, "MsgSize", text, integer=True),
                    iterations=_number(values, "n_iterations", text, integer=True),
                    peak_gbps=_number(values, "BW_peak", text) * factor,
                    avg_gbps=_number(values, "BW_average", text) * factor,
                    msg_rate_mpps=_number(values, "MsgRate", text))


def parse_lat(text: str) -> LatResult:
    """An ib_*_lat report (iteration mode): the --out_json file (either dialect) or the stdout text."""
    body = _check_text(text)
    if body.startswith(("{", "[")):
        values = _results(_loads_perftest(text), _LAT_KEYS, "lat", text)
    else:
        found = _text_rows(body, _LAT_HEADER, 9)
        if found is None:
            if _LAT_DUR_HEADER.search(body):
                raise PerftestParseError("a duration-mode (-D) latency report: it has no percentiles; "
                                         "run ib_write_lat with -n", text)
            if _BW_HEADER.search(body):
                raise PerftestParseError("this is a bandwidth report (ib_*_bw), not a latency one", text)
            raise PerftestParseError("no '#bytes #iterations t_min[usec] ... 99.9% percentile[usec]' header: "
                                     "not an ib_*_lat report (did the run fail before reporting?)", text)
        _, rows = found
        if not rows:
            raise PerftestParseError("a latency header but no result row under it", text)
        values = dict(zip(_LAT_KEYS, (_scalar(t) for t in rows[-1])))
    return LatResult(size=_number(values, "MsgSize", text, integer=True),
                     iterations=_number(values, "n_iterations", text, integer=True),
                     t_min_us=_number(values, "t_min", text), t_max_us=_number(values, "t_max", text),
                     t_typical_us=_number(values, "t_typical", text), t_avg_us=_number(values, "t_avg", text),
                     t_stdev_us=_number(values, "t_stdev", text), p99_us=_number(values, "percentile_99", text),
                     p999_us=_number(values, "percentile_99.9", text))
