"""perftest as processes: a server and a client per pair (locally or over an MPI pair), their
ports, timeouts, and what their runs say."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .command import DEFAULT_TCP_PORT, Spec, find_tools, supports_json, where_searched
from .parse import CLOCK_FAILED, CLOCK_PROBLEM, BwResult, LatResult, PerftestError, PerftestParseError

LISTEN_TIMEOUT_S = 20.0        # a server that has not opened its TCP port by then has failed
SETTLE_S = 1.0                 # when /proc/net/tcp cannot tell whether the server listens
SERVER_GRACE_S = 15.0          # after a good client run, the server prints its report and exits
SERVER_GRACE_FAILED_S = 1.0    # after a failed client run, the server is blocked: kill it soon
_TAG = 7311                    # MPI tag of the pair's messages


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


def assess(run: ToolRun, spec: Spec, required: bool) -> tuple[str | None, BwResult | LatResult | None]:
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


def assess_server(run: ToolRun, spec: Spec, client_ok: bool) -> tuple[str | None, BwResult | LatResult | None]:
    """The server's side. After a failed client the server is stopped on purpose: only what it
    said on stderr is worth adding (it may explain the client's failure)."""
    if client_ok:
        return assess(run, spec, required=False)
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
                problem, out.result = assess(out.client, client_spec, required=True)
                out.server = finish_server(server, out.client.ok)
                server_problem, out.server_result = assess_server(out.server, server_spec, out.client.ok)
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
        return assess_server(finish_server(server, client_ok), spec, client_ok)[0]
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
    return assess(run, spec, required=True)


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
