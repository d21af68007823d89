"""perftest's ib_write_bw / ib_write_lat as a cross-check of the harness's own numbers.

The same pairs and rails the harness measures, measured again by the tools people
know (docs/methodology.md §2): each pair runs a perftest server on one node and a client on
the other, the client's report is parsed, and the numbers are recorded beside the
harness's own (suite "perftest", engine "perftest", verdict "info").

perftest writes its report twice: as text on stdout and, with `--out_json
--out_json_file=F`, as a file (src/perftest_parameters.c print_full_bw_report /
print_report_lat -> write_test_info_to_file + write_bw_report_to_file /
write_report_lat_to_file). The file comes in two dialects:

  perftest <= 6.19 (e.g. Debian's perftest 4.5+0.17, `--version` 6.06): bare keys, bare
      values, a trailing comma after every entry and brace. Not JSON: json.loads fails.
  perftest >= 6.20 (commit f9e82f7, release 24.01.0-0.38): standard JSON.

Both carry the same keys: {"test_info": {...}, "results": {"MsgSize", "n_iterations",
"BW_peak", "BW_average", "MsgRate"}} for BW tests, and {"MsgSize", "n_iterations", "t_min",
"t_max", "t_typical", "t_avg", "t_stdev", "percentile_99", "percentile_99.9"} for latency
tests. parse_bw / parse_lat accept either dialect and the text report.

Units: the JSON has none. BW values are Gbit/s (1e9 bit/s) because every command here
passes --report_gbits; the text report names its unit in the header ([Gb/sec], or
[MB/sec] / [MiB/sec] = 2^20 B/s, converted). Latencies are microseconds, half a
round trip for write (perftest sorts iters-1 RTT/2 samples, drops the 2 largest and
takes percentile index ceil(p * m) of the m = iters-3 left; t_stdev truncates each
deviation to whole microseconds).

Nothing here imports pytest; the MPI part (run_pair) only uses the communicator it is given.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

ENV_DIR = "ACCEPTANCE_PERFTEST_DIR"
TOOLS = {"bw": "ib_write_bw", "lat": "ib_write_lat"}
SUITE = ENGINE = "perftest"
DEFAULT_TCP_PORT = 18515       # perftest's own default (-p)
LISTEN_TIMEOUT_S = 20.0        # a server that has not opened its TCP port by then has failed
SETTLE_S = 1.0                 # when /proc/net/tcp cannot tell whether the server listens
SERVER_GRACE_S = 15.0          # after a good client run, the server prints its report and exits
SERVER_GRACE_FAILED_S = 1.0    # after a failed client run, the server is blocked: kill it soon
MIB_PER_S_IN_GBIT = 2**20 * 8 / 1e9  # perftest's default unit ("MB/sec", really MiB/s) in Gbit/s
_TAG = 7311                    # MPI tag of the pair's messages


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


# ---- tools -----------------------------------------------------------------------

def find_tools(env: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    """{"ib_write_bw": path or None, "ib_write_lat": path or None}.

    With ACCEPTANCE_PERFTEST_DIR set, only that folder is searched (tests point it at
    stand-ins); otherwise PATH.
    """
    where = env.get(ENV_DIR) or None
    return {tool: shutil.which(tool, path=where) for tool in TOOLS.values()}


def where_searched(env: Mapping[str, str] = os.environ) -> str:
    where = env.get(ENV_DIR)
    return f"{ENV_DIR}={where}" if where else "PATH"


@lru_cache(maxsize=16)
def supports_json(tool: str) -> bool:
    """Whether `tool --help` offers --out_json (perftest >= 6.03, commit 45e574b of 2021; older builds
    print the text report only)."""
    try:
        p = subprocess.run([tool, "--help"], check=False, capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--out_json" in p.stdout + p.stderr


# ---- commands ---------------------------------------------------------------------

def _common_flags(role: str, device: str, ib_port: int, size: int, gid_index: int | None,
                  server_host: str | None, tcp_port: int, json_path: str | os.PathLike | None) -> list[str]:
    if role not in ("server", "client"):
        raise ValueError(f"role must be 'server' or 'client', got {role!r}")
    if role == "client" and not server_host:
        raise ValueError("the client needs the server's host name")
    if role == "server" and server_host:
        raise ValueError("the server takes no host: it listens")
    if size < 1:
        raise ValueError(f"message size must be at least 1 byte, got {size}")
    flags = [
        "-d", device,                # -d/--ib-dev: the rail's RDMA device (mlx5_3)
        "-i", str(ib_port),          # -i/--ib-port: its port (1 on single-port NICs)
        "-s", str(size),             # -s/--size: bytes per write
    ]
    if gid_index is not None and gid_index >= 0:
        flags += ["-x", str(gid_index)]  # -x/--gid-index: RoCE GID (the RoCEv2 one); IB needs none
    flags += [
        "-p", str(tcp_port),         # -p/--port: TCP port of the out-of-band exchange, one per pair
        "-F",                        # -F/--CPU-freq: no failure/warning over cpufreq governors
        "--report_gbits",            # Gbit/s (1e9 bit/s) instead of MiB/s
    ]
    if json_path is not None:
        # --out_json: also write the report as a file; --out_json_file: where (default ./perftest_out.json)
        flags += ["--out_json", f"--out_json_file={json_path}"]
    return flags


def bw_command(role: str, device: str, ib_port: int, size: int, *, gid_index: int | None = None,
               server_host: str | None = None, duration_s: int | None = None, iters: int | None = None,
               tx_depth: int | None = None, tcp_port: int = DEFAULT_TCP_PORT,
               json_path: str | os.PathLike | None = None, extra: Sequence[str] = (),
               tool: str = TOOLS["bw"]) -> list[str]:
    """ib_write_bw argv for one side. The client (the writer) gets the server's host last.

    Exactly one of duration_s (-D: whole seconds; perftest measures the middle D - 2*(D//4)
    seconds and does not measure a peak) or iters (-n, at least 5; peak measured up to 20000).
    """
    if (duration_s is None) == (iters is None):
        raise ValueError("give exactly one of duration_s (-D) or iters (-n)")
    argv = [tool, *_common_flags(role, device, ib_port, size, gid_index, server_host, tcp_port, json_path)]
    if duration_s is not None:
        if int(duration_s) != duration_s or duration_s < 1:
            raise ValueError(f"perftest -D takes whole seconds >= 1, got {duration_s!r}")
        argv += ["-D", str(int(duration_s))]       # -D/--duration: run for this many seconds
    else:
        if iters < 5:
            raise ValueError(f"perftest needs at least 5 iterations, got {iters}")
        argv += ["-n", str(iters)]                  # -n/--iters: this many writes
    if tx_depth is not None:
        argv += ["-t", str(tx_depth)]               # -t/--tx-depth: writes in flight
    argv += list(extra)
    if role == "client":
        argv.append(server_host)
    return argv


def lat_command(role: str, device: str, ib_port: int, size: int, *, iters: int,
                gid_index: int | None = None, server_host: str | None = None,
                tcp_port: int = DEFAULT_TCP_PORT, json_path: str | os.PathLike | None = None,
                extra: Sequence[str] = (), tool: str = TOOLS["lat"]) -> list[str]:
    """ib_write_lat argv for one side: iteration mode (-n), since -D reports no percentiles.

    Both sides write and both measure; p99.9 means something from -n 1e5 on (docs/methodology.md §2).
    """
    if iters < 5:
        raise ValueError(f"perftest needs at least 5 iterations, got {iters}")
    argv = [tool, *_common_flags(role, device, ib_port, size, gid_index, server_host, tcp_port, json_path)]
    argv += ["-n", str(iters)]                      # -n/--iters: ping-pong round trips
    argv += list(extra)
    if role == "client":
        argv.append(server_host)
    return argv


@dataclass(frozen=True)
class Spec:
    """One side's test: what to run on which device. Both sides must agree on kind, size and mode."""
    kind: str                      # "bw" or "lat"
    device: str
    size: int
    ib_port: int = 1
    gid_index: int | None = None
    duration_s: int | None = None  # bw only
    iters: int | None = None
    tx_depth: int | None = None    # bw only
    extra: tuple[str, ...] = ()
    allowance_s: float = 30.0      # beyond the test's own time: connection setup, a slow host ([perftest] timeout)

    def __post_init__(self):
        if self.kind not in TOOLS:
            raise ValueError(f"kind must be one of {sorted(TOOLS)}, got {self.kind!r}")

    @property
    def tool_name(self) -> str:
        return TOOLS[self.kind]

    def command(self, role: str, tool: str, tcp_port: int, json_path, server_host: str | None = None) -> list[str]:
        common = {"gid_index": self.gid_index, "server_host": server_host, "tcp_port": tcp_port,
                  "json_path": json_path, "extra": self.extra, "tool": tool}
        if self.kind == "bw":
            return bw_command(role, self.device, self.ib_port, self.size, duration_s=self.duration_s,
                              iters=self.iters, tx_depth=self.tx_depth, **common)
        return lat_command(role, self.device, self.ib_port, self.size, iters=self.iters, **common)

    def timeout_s(self) -> float:
        """How long the client may take: the test, generously, plus allowance_s (connection setup)."""
        if self.kind == "bw":
            if self.duration_s is not None:
                return self.duration_s + self.allowance_s
            return self.allowance_s + self.iters * self.size / 1e8  # as if the link moved only 0.8 Gbit/s
        return self.allowance_s + self.iters * 1e-4                 # 100 us per round trip

    def parse(self, text: str) -> BwResult | LatResult:
        return parse_bw(text) if self.kind == "bw" else parse_lat(text)


# ---- parsing ----------------------------------------------------------------------

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


# ---- sysfs: the RoCE GID ------------------------------------------------------------



def roce_gid_index(root: str | os.PathLike, device: str, port: int) -> int | None:
    """The RoCEv2 GID the verbs engine would pick (verbs.choose_gid_index), read from sysfs; None if none.

    <root>/class/infiniband/<dev>/ports/<port>/gids/<i> and gid_attrs/types/<i> ("RoCE v2").
    """
    from ..host.sysfs import read_sysfs
    from ..engines.verbs import GID_TYPE_ROCE_V2, GidRow, choose_gid_index, gid_is_zero
    base = Path(root) / "class" / "infiniband" / device / "ports" / str(port)
    try:
        indices = sorted(int(p.name) for p in (base / "gids").iterdir() if p.name.isdigit())
    except OSError:
        return None
    rows = [GidRow(i, (read_sysfs(base / "gids" / str(i)) or "").strip(), GID_TYPE_ROCE_V2) for i in indices
            if read_sysfs(base / "gid_attrs" / "types" / str(i)) == "RoCE v2"]
    rows = [r for r in rows if r.gid and not gid_is_zero(r.gid)]
    return choose_gid_index(rows) if rows else None


def ipv4_of_gid(gid: str) -> str | None:
    """"0000:0000:0000:0000:0000:ffff:c612:0101" -> "198.18.1.1"; None for a GID that is not IPv4-mapped."""
    from ..engines.verbs import IPV4_MAPPED
    if not gid.lower().startswith(IPV4_MAPPED):
        return None
    digits = gid.replace(":", "")[-8:]
    return ".".join(str(int(digits[i:i + 2], 16)) for i in range(0, 8, 2))


def netdev_ipv4(netdev: str) -> str | None:
    """The IPv4 address of a network interface of this host (SIOCGIFADDR), None when it has none."""
    import fcntl
    import struct
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", netdev.encode()[:15]))  # SIOCGIFADDR
    except OSError:
        return None
    return socket.inet_ntoa(raw[20:24])


def rail_address(root: str | os.PathLike, device: str, port: int, gid_index: int | None,
                 netdev: str | None) -> str | None:
    """Where a perftest client reaches this port's server: the IPv4 address of its RoCE GID, else its
    netdev's IPv4 address (IPoIB), else None (then the host name). The rail's own address, since
    the host name is often the management network, or nothing at all."""
    from ..host.sysfs import read_sysfs
    if gid_index is not None:
        gid = read_sysfs(Path(root) / "class" / "infiniband" / device / "ports" / str(port) / "gids" / str(gid_index))
        address = ipv4_of_gid(gid or "")
        if address:
            return address
    return netdev_ipv4(netdev) if netdev else None


# ---- processes -----------------------------------------------------------------------

def port_listening(port: int, proc_net: str | os.PathLike = "/proc/net") -> bool | None:
    """Whether some socket of this network namespace listens on TCP `port`; None if unknown.

    Read from /proc/net/tcp{,6} (state 0A = LISTEN) instead of connecting: perftest's
    server accepts exactly one connection, and a probe would be it.
    """
    seen = False
    for name in ("tcp", "tcp6"):
        try:
            lines = (Path(proc_net) / name).read_text().splitlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and fields[1].rpartition(":")[2] == f"{port:04X}":
                return True
    return False if seen else None


def port_free(port: int) -> bool:
    """Whether a server could bind TCP `port` here (SO_REUSEADDR, as perftest binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def choose_port(candidate: int, tries: int = 32, step: int = 4099) -> int:
    """`candidate`, or the next of a few far-apart ports when something already holds it."""
    for i in range(tries):
        port = 1024 + (candidate - 1024 + i * step) % (65536 - 1024)
        if port_free(port):
            return port
    raise PerftestError(f"no free TCP port for the perftest server (tried {tries} from {candidate})")


@dataclass
class ToolRun:
    """One finished perftest process: what ran, how it ended, what it wrote."""
    role: str
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    json_text: str | None = None
    start_error: str | None = None

    @property
    def tool(self) -> str:
        return Path(self.argv[0]).name if self.argv else "perftest"

    @property
    def ok(self) -> bool:
        return self.start_error is None and not self.timed_out and self.returncode == 0

    def tail(self, lines: int = 12) -> str:
        """The last lines of stderr (perftest's errors), else of stdout."""
        for stream in (self.stderr, self.stdout):
            kept = [line.strip() for line in stream.splitlines() if line.strip()]
            if kept:
                return " | ".join(kept[-lines:])
        return "(no output)"

    def report_text(self) -> str:
        """The report to parse: the JSON file when the tool wrote one, else stdout."""
        return self.json_text if self.json_text and self.json_text.strip() else self.stdout

    def problem(self) -> str | None:
        """None when the run ended well; else what went wrong, with the output's tail."""
        if self.start_error:
            return f"{self.tool} {self.role}: {self.start_error}"
        if self.timed_out:
            return f"{self.tool} {self.role} timed out after {self.seconds:.1f} s (killed): {self.tail()}"
        if self.returncode != 0:
            how = (f"killed by signal {-self.returncode}" if self.returncode is not None and self.returncode < 0
                   else f"exited {self.returncode}")
            return f"{self.tool} {self.role} {how}: {self.tail()}"
        return None


class Child:
    """A perftest process in its own session (so a timeout kills it and anything it started)."""

    def __init__(self, role: str, argv: list[str], workdir: Path, json_path: Path | None):
        self.role, self.argv, self.json_path = role, list(argv), json_path
        self.out_path, self.err_path = workdir / f"{role}.stdout", workdir / f"{role}.stderr"
        self.started = time.monotonic()
        self.start_error = None
        self.proc = None
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            try:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                             cwd=workdir, start_new_session=True)
            except OSError as e:
                self.start_error = f"cannot start {self.argv[0]}: {e.strerror or e}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def wait(self, timeout: float) -> ToolRun:
        """Wait up to `timeout` s; a process still running then is killed (with its children)."""
        timed_out = False
        if self.proc is not None:
            try:
                self.proc.wait(timeout=max(timeout, 0.0))
            except subprocess.TimeoutExpired:
                timed_out = True
                self.kill()
        json_text = None
        if self.json_path is not None:
            json_text = _read_text(self.json_path)
        return ToolRun(role=self.role, argv=self.argv, returncode=None if self.proc is None else self.proc.returncode,
                       stdout=_read_text(self.out_path) or "", stderr=_read_text(self.err_path) or "",
                       seconds=time.monotonic() - self.started, timed_out=timed_out, json_text=json_text,
                       start_error=self.start_error)

    def wait_listening(self, tcp_port: int, timeout: float = LISTEN_TIMEOUT_S, settle_s: float = SETTLE_S,
                       proc_net: str | os.PathLike = "/proc/net") -> str | None:
        """None once the server listens on its TCP port; else why it never will (the server is then killed)."""
        if self.start_error:
            return self.start_error
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                return f"exited {self.proc.returncode} before listening on TCP port {tcp_port}"
            state = port_listening(tcp_port, proc_net)
            if state is None:  # no /proc/net/tcp: give it a moment, then trust that it is still running
                time.sleep(settle_s)
                if self.alive():
                    return None
                continue
            if state:
                return None
            if time.monotonic() > deadline:
                self.kill()
                return f"not listening on TCP port {tcp_port} after {timeout:g} s (killed)"
            time.sleep(0.02)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _tool_path(spec: Spec) -> str:
    path = find_tools().get(spec.tool_name)
    if path is None:
        raise PerftestError(f"{spec.tool_name} not found on {where_searched()}: install perftest")
    return path


def _json_path(tool: str, workdir: Path, role: str) -> Path | None:
    return workdir / f"{role}.json" if supports_json(tool) else None


def start_server(spec: Spec, tcp_port: int, workdir: Path, *, listen_timeout: float = LISTEN_TIMEOUT_S,
                 settle_s: float = SETTLE_S) -> tuple[Child, int, str | None]:
    """Start the server on a free port near `tcp_port`: (child, port, None once listening, else why not)."""
    tool = _tool_path(spec)
    port = choose_port(tcp_port)
    json_path = _json_path(tool, workdir, "server")
    child = Child("server", spec.command("server", tool, port, json_path), workdir, json_path)
    return child, port, child.wait_listening(port, listen_timeout, settle_s)


def run_client(spec: Spec, server_host: str, tcp_port: int, workdir: Path, timeout: float | None = None) -> ToolRun:
    tool = _tool_path(spec)
    json_path = _json_path(tool, workdir, "client")
    child = Child("client", spec.command("client", tool, tcp_port, json_path, server_host), workdir, json_path)
    return child.wait(spec.timeout_s() if timeout is None else timeout)


def finish_server(child: Child, client_ok: bool) -> ToolRun:
    """The server after its client ended: it reports and exits; after a failed client it is killed soon."""
    return child.wait(SERVER_GRACE_S if client_ok else SERVER_GRACE_FAILED_S)


def _judge(run: ToolRun, spec: Spec, required: bool) -> tuple[str | None, BwResult | LatResult | None]:
    """(problem or None, parsed result). The server's report is optional (old tools write none)."""
    problem = run.problem()
    if problem:
        return problem, None
    text = run.report_text()
    if not required and not text.strip():
        return None, None
    try:
        result = spec.parse(text)
    except PerftestParseError as e:
        if CLOCK_FAILED in run.stdout + run.stderr:
            return f"{run.tool} {run.role}: {CLOCK_PROBLEM}", None
        return f"{run.tool} {run.role}: unreadable report: {e}", None
    if result.size != spec.size:
        return f"{run.tool} {run.role}: reported size {result.size} B, asked for {spec.size} B", None
    return None, result


def _judge_server(run: ToolRun, spec: Spec, client_ok: bool) -> tuple[str | None, BwResult | LatResult | None]:
    """The server's side. After a failed client the server is stopped on purpose: only what it
    said on stderr is worth adding (it may explain the client's failure)."""
    if client_ok:
        return _judge(run, spec, required=False)
    said = run.stderr.strip()
    return (f"{run.tool} server said: {run.tail()}" if said else None), None


@dataclass
class PairOutcome:
    client: ToolRun | None = None
    server: ToolRun | None = None
    result: BwResult | LatResult | None = None           # the client's
    server_result: BwResult | LatResult | None = None
    problems: list[str] = field(default_factory=list)


def _failed_start(tool_name: str, server: Child | None, why: str) -> str:
    tail = server.wait(0).tail() if server is not None else "(no output)"
    return f"{tool_name} server: {why}" + ("" if tail == "(no output)" else f": {tail}")


def run_local_pair(server_spec: Spec, client_spec: Spec, *, host: str = "localhost",
                   tcp_port: int = DEFAULT_TCP_PORT, workdir: str | os.PathLike | None = None,
                   listen_timeout: float = LISTEN_TIMEOUT_S, settle_s: float = SETTLE_S) -> PairOutcome:
    """Server and client as child processes of this one (the process part of run_pair, without MPI).

    Raises PerftestError naming what failed, with the tool's stderr tail; returns the outcome otherwise.
    """
    with _workdir(workdir) as wd:
        out = PairOutcome()
        server, port, why = start_server(server_spec, tcp_port, wd / "server", listen_timeout=listen_timeout,
                                         settle_s=settle_s)
        try:
            if why:
                out.problems.append(_failed_start(server_spec.tool_name, server, why))
            else:
                out.client = run_client(client_spec, host, port, wd / "client")
                problem, out.result = _judge(out.client, client_spec, required=True)
                out.server = finish_server(server, out.client.ok)
                server_problem, out.server_result = _judge_server(out.server, server_spec, out.client.ok)
                out.problems += [p for p in (problem, server_problem) if p]
        finally:
            server.kill()
    if out.problems:
        raise PerftestError("; ".join(out.problems))
    return out


class _workdir:
    """A scratch folder with server/ and client/ inside: the given one, or a temporary one removed after."""

    def __init__(self, where: str | os.PathLike | None):
        self.where, self.temp = where, None

    def __enter__(self) -> Path:
        if self.where is None:
            self.temp = tempfile.mkdtemp(prefix="acceptance-perftest-")
        base = Path(self.temp or self.where)
        for sub in ("server", "client"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        return base

    def __exit__(self, *exc) -> None:
        if self.temp:
            shutil.rmtree(self.temp, ignore_errors=True)


def _recv(comm, peer: int, longest_sleep_s: float = 0.01):
    """The peer's next message, waited for without spinning a core: perftest's clock calibration
    (and its numbers) suffer when the ranks beside it busy-poll MPI."""
    sleep = 0.0005
    while not comm.Iprobe(source=peer, tag=_TAG):
        time.sleep(sleep)
        sleep = min(sleep * 2, longest_sleep_s)
    return comm.recv(source=peer, tag=_TAG)


def _server_side(comm, peer: int, spec: Spec, wd: Path, tcp_port: int, listen_timeout: float,
                 settle_s: float) -> str | None:
    server = None
    try:
        try:
            server, port, why = start_server(spec, tcp_port, wd / "server", listen_timeout=listen_timeout,
                                             settle_s=settle_s)
        except Exception as e:  # noqa: BLE001 - no tool, no free port, ...: the client must still hear
            port, why = None, str(e) if isinstance(e, PerftestError) else f"{type(e).__name__}: {e}"
        if why:
            comm.send(("failed", None), dest=peer, tag=_TAG)
            return _failed_start(spec.tool_name, server, why)
        comm.send(("listening", port), dest=peer, tag=_TAG)
        client_ok = _recv(comm, peer)
        return _judge_server(finish_server(server, client_ok), spec, client_ok)[0]
    finally:
        if server is not None:
            server.kill()


def _client_side(comm, peer: int, spec: Spec, wd: Path, server_host: str):
    state, port = _recv(comm, peer)
    if state != "listening":
        return None, None  # the server side names the problem
    try:
        run = run_client(spec, server_host, port, wd / "client")
    except Exception as e:  # noqa: BLE001 - the server waits for this message whatever happened
        comm.send(False, dest=peer, tag=_TAG)
        return (str(e) if isinstance(e, PerftestError) else f"{spec.tool_name} client: {type(e).__name__}: {e}"), None
    comm.send(run.ok, dest=peer, tag=_TAG)
    return _judge(run, spec, required=True)


def run_pair(comm, role_is_server: bool, spec: Spec, server_host: str, *, tcp_port: int = DEFAULT_TCP_PORT,
             workdir: str | os.PathLike | None = None, listen_timeout: float = LISTEN_TIMEOUT_S,
             settle_s: float = SETTLE_S) -> BwResult | LatResult | None:
    """One perftest run over a 2-rank communicator; both ranks call it, one with role_is_server.

    The server rank starts the server and, once it listens, sends the client rank the TCP
    port; the client runs against `server_host` (the server node's host name) with a
    timeout and says how it went; the server is then given a moment to finish, else killed.
    Both ranks then exchange their verdicts, so a failure on either side raises
    PerftestError on both (naming the side, with the tool's stderr tail) and the pair
    stays in step. Returns the client's parsed result at the client, None at the server.
    """
    peer = 1 - comm.Get_rank()
    result = None
    with _workdir(workdir) as wd:
        if role_is_server:
            problem = _server_side(comm, peer, spec, wd, tcp_port, listen_timeout, settle_s)
        else:
            problem, result = _client_side(comm, peer, spec, wd, server_host)
    problems = [p for p in comm.allgather(problem) if p]
    if problems:
        raise PerftestError("; ".join(problems))
    return None if role_is_server else result


# ---- records --------------------------------------------------------------------------

def records_for(bw: BwResult | None, lat: LatResult | None, common: Mapping[str, Any]) -> list[dict]:
    """Keyword arguments of record(...) / results.make_record(test=..., ...) for one direction.

    `common` gives rail, nodes ([client = writer, server]) and ranks. Every record is
    informational (no threshold): the harness's own suites carry the verdicts.
    """
    base = {"suite": SUITE, "engine": ENGINE, "threshold": None, "verdict": "info", **common}
    out = []
    if bw is not None:
        peak = (f"peak {bw.peak_gbps:.2f} Gbit/s" if bw.peak_gbps > 0
                else "peak not measured (perftest skips it with -D or over 20000 iterations)")
        out.append({**base, "metric": "bandwidth", "value": bw.avg_gbps, "unit": "Gbit/s", "size": bw.size,
                    "samples": bw.iterations,
                    "detail": f"ib_write_bw average; {peak}, {bw.iterations} iterations, "
                              f"{bw.msg_rate_mpps:.6f} Mpps"})
    if lat is not None:
        m = lat.samples
        spread = f"t_min {lat.t_min_us:.2f} us, t_max {lat.t_max_us:.2f} us, t_stdev {lat.t_stdev_us:.2f} us"
        median = f"ib_write_lat t_typical (median) of {m} samples, each half a ping-pong round trip"
        rows = (("latency_p50", lat.t_typical_us, f"{median}; {spread}"),
                ("latency_p99", lat.p99_us, f"ib_write_lat 99% percentile of {m} samples{_tail_note(m, 0.99)}"),
                ("latency_p999", lat.p999_us,
                 f"ib_write_lat 99.9% percentile of {m} samples{_tail_note(m, 0.999)}"),
                ("latency_avg", lat.t_avg_us, f"ib_write_lat t_avg of {m} samples"))
        for metric, value, detail in rows:
            out.append({**base, "metric": metric, "value": value, "unit": "us", "size": lat.size,
                        "samples": m, "detail": detail})
    return out


def _tail_note(m: int, p: float) -> str:
    """Why a perftest percentile of m samples is weak, as the harness words it (docs/methodology.md §5:
    n >= 100 / (1 - p)); perftest's index is ceil(p * m) of the m kept, so from m < 1 / (1 - p)
    on it is the largest kept sample, t_max."""
    need = round(100 / (1 - p))
    if m and math.ceil(p * m) >= m:
        return f": too few for it, so it is perftest's t_max (needs -n {need + 3})"
    if m < need:
        return f", fewer than the {need} it needs: read it as a lower bound"
    return ""

