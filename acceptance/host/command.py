"""An external command with a bound: its output, or a one-line reason why not (never raising)."""

from __future__ import annotations

import os
import signal
import subprocess

TIMEOUT_S = 5.0  # bound on every external command: a probe must never hang


def run_command(cmd: list[str], timeout: float | None = None) -> tuple[bool, str]:
    """Run cmd; (True, stdout) on exit 0, else (False, a one-line reason)."""
    timeout = TIMEOUT_S if timeout is None else timeout
    try:
        # Own session so a timeout can kill grandchildren that hold our pipes.
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace",
                             start_new_session=True)
    except OSError as e:
        return False, f"{cmd[0]}: {e.strerror or e}"
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
        return False, f"`{' '.join(cmd)}` timed out after {timeout:g} s"
    if p.returncode != 0:
        msg = next((ln.strip() for ln in err.splitlines() if ln.strip()), "")
        return False, f"`{' '.join(cmd)}` exited {p.returncode}" + (f": {msg}" if msg else "")
    return True, out
