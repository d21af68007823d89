"""An external command with a bound: its output, or a one-line reason why not (never raising)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess

TIMEOUT_S = 5.0  # bound on every external command: a probe must never hang


class ToolError(Exception):
    """The command could not start, or did not finish in time: the reason, one line."""


class ToolMissing(ToolError):
    """The command is not there."""


def run_bounded(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of argv. Its own session, so that past `timeout` it is killed with
    whatever it started (sudo's child, a grandchild holding our pipes): ToolError; ToolMissing when
    argv[0] is not there."""
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, errors="replace", start_new_session=True)
    except FileNotFoundError:
        raise ToolMissing(f"{argv[0]} not found") from None
    except OSError as e:
        raise ToolError(f"{argv[0]}: {e.strerror or e}") from None
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.communicate(timeout=1)
        except subprocess.TimeoutExpired:
            pass  # something escaped the group and holds the pipe; give up on it
        raise ToolError(f"`{shlex.join(argv)}` timed out after {timeout:g} s") from None
    return p.returncode, out, err


def run_command(cmd: list[str], timeout: float | None = None) -> tuple[bool, str]:
    """Run cmd; (True, stdout) on exit 0, else (False, a one-line reason)."""
    timeout = TIMEOUT_S if timeout is None else timeout
    try:
        rc, out, err = run_bounded(cmd, timeout)
    except ToolError as e:
        return False, str(e)
    if rc != 0:
        msg = next((ln.strip() for ln in err.splitlines() if ln.strip()), "")
        return False, f"`{' '.join(cmd)}` exited {rc}" + (f": {msg}" if msg else "")
    return True, out
