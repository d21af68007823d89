"""This node's kernel log and boot id, as a node check reads them: journalctl's kernel messages with
monotonic stamps, else dmesg, or the command $ACCEPTANCE_KERNEL_LOG names (a stand-in in tests).
What the Xid check finds in them is acceptance.host.xid's."""

from __future__ import annotations

import os
import shlex

from .command import run_command

ENV_KERNEL_LOG = "ACCEPTANCE_KERNEL_LOG"
TIMEOUT = 10.0  # seconds per command; a health check must not hang on a wedged journald
JOURNAL_COMMAND = ("journalctl", "-k", "-o", "short-monotonic", "--no-pager")
DMESG_COMMAND = ("dmesg",)
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class KernelLogError(Exception):
    """The kernel log could not be read; the message says why."""


def _has_log_lines(text: str) -> bool:
    # journalctl run without access to the system journal prints "-- No entries --" and exits 0.
    return any(ln.strip() and not ln.startswith("-- ") for ln in text.splitlines())


def read_kernel_log(timeout: float = TIMEOUT) -> str:
    """This boot's kernel log, with monotonic stamps; KernelLogError with the reason when it cannot
    be had. The command is $ACCEPTANCE_KERNEL_LOG when set (a stand-in in tests; no fallback then:
    it is what was asked for), else `journalctl -k -o short-monotonic --no-pager`, else `dmesg`
    (no journald, or no access to it). Each command runs under `timeout`, so at most twice that."""
    try:
        override = shlex.split(os.environ.get(ENV_KERNEL_LOG, ""))
    except ValueError as e:
        raise KernelLogError(f"{ENV_KERNEL_LOG} is not a command line: {e}") from None
    if override:
        ok, out = run_command(override, timeout=timeout)
        if not ok:
            raise KernelLogError(f"{ENV_KERNEL_LOG}: {out}")
        return out
    reasons = []
    for argv in (JOURNAL_COMMAND, DMESG_COMMAND):
        ok, out = run_command(list(argv), timeout=timeout)
        if ok and _has_log_lines(out):
            return out
        reasons.append(out if not ok else f"`{shlex.join(argv)}` printed no kernel log lines")
    raise KernelLogError("; ".join(reasons))


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """This boot's id, "" when it cannot be read (the cursor then detects a reboot by its clock)."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
