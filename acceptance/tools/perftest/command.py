"""Where the perftest tools are, and the command lines (Spec) of a server and a client."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .parse import BwResult, LatResult, parse_bw, parse_lat

DEFAULT_TCP_PORT = 18515       # perftest's own default (-p)
ENV_DIR = "ACCEPTANCE_PERFTEST_DIR"
TOOLS = {"bw": "ib_write_bw", "lat": "ib_write_lat"}


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
