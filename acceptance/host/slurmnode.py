"""This node in Slurm's lifecycle: its state and reason, a drain and a resume, in our own namespace.

Every drain the harness makes (a failed `acceptance node-check --slurm`, `run --drain`, `report
--drain`) carries the reason "acceptance: <check>: <detail>". A reason that starts "acceptance:" is
ours; any other (an admin's "maintenance", NHC's "NHC: ...", Slurm's own "Not responding") is never
touched: we neither resume that node nor overwrite its reason. That is how LBNL NHC tells its own
drains apart ("NHC: " prefix), and what keeps two health checkers from fighting over a node.

scontrol gets its arguments as an argv list (never a shell), and every reason is cleaned first
(clean_reason): text from a kernel log, a device name or a counter cannot add an argument, end the
reason early or name another node.

Sources: scontrol(1) "update NodeName=... State=DRAIN|RESUME Reason=..." (a drain needs a reason);
`scontrol show node -o` prints one line of Key=Value fields, State= a base state with "+FLAG"s
(IDLE+DRAIN, MIXED+DRAIN, DOWN+DRAIN+NOT_RESPONDING) and Reason= the text followed by
" [user@time]" (Slurm's src/api/node_info.c, slurm_sprint_node_table); a drained node that still runs
jobs is DRAINING (a flag on ALLOCATED / MIXED), an idle one DRAINED, both carry the DRAIN flag. Without
-o the same fields come on lines joined by "\n   " instead of " ", so both forms read the same here.
A DOWN node is someone else's as much as a drained one: Slurm wrote "Not responding", or an admin
took it down; we leave it as it is.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass

from .command import run_command

PREFIX = "acceptance:"
# Slurm keeps a node's reason as a plain string; `sinfo -R` shows it in a 20-character column by
# default and `scontrol show node` on one line. 200 characters say what failed and where, and keep
# the line readable; a reason is cut there (on a word where it can).
REASON_MAX = 200
SCONTROL_TIMEOUT_S = 10.0  # a controller that does not answer must not hold a health check to Slurm's limit

# ANSI escape sequences (CSI, OSC, two-character) go whole, so no "[31m" is left behind.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# What a drain reason keeps: letters, digits, space and . , : _ + - / ( ) [ ] % = @ -- no quote,
# backslash, dollar, backtick, semicolon, pipe, ampersand, redirection, glob or control character,
# so the reason means the same pasted into scontrol, a shell or a log line.
_UNSAFE = re.compile(r"[^A-Za-z0-9 .,:_+\-/()\[\]%=@]+")


def clean_reason(text: str, limit: int | None = None) -> str:
    """`text` made safe for a Slurm drain reason: one line of the characters above, cut to `limit`."""
    limit = REASON_MAX if limit is None else limit
    text = _UNSAFE.sub(" ", _ANSI.sub(" ", text))
    text = " ".join(text.split())
    return text[:max(limit, 0)].rstrip().lstrip("-+ ")


def reason(check: str, detail: str) -> str:
    """ "acceptance: <check>: <detail>", cleaned and cut to REASON_MAX."""
    return clean_reason(f"{PREFIX} {clean_reason(check, 40)}: {detail}")


def is_ours(text: str | None) -> bool:
    return bool(text) and text.startswith(PREFIX)


@dataclass(frozen=True)
class Drain:
    """One node to drain with one reason: the command as an argv list, and as a line to paste."""
    node: str
    reason: str

    @property
    def argv(self) -> list[str]:
        return ["scontrol", "update", f"NodeName={self.node}", "State=DRAIN", f"Reason={self.reason}"]

    @property
    def line(self) -> str:
        # The reason holds no quote, backslash, $ or backtick (clean_reason): safe inside double quotes.
        return f'scontrol update NodeName={shlex.quote(self.node)} State=DRAIN Reason="{self.reason}"'

    def __str__(self) -> str:
        return self.line


def resume_argv(node: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]


class SlurmError(Exception):
    """scontrol could not be run or said no; the message says why."""


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str           # "IDLE+DRAIN", as scontrol prints it
    reason: str | None   # without Slurm's " [user@time]"; None without a reason

    @property
    def flags(self) -> set[str]:
        return set(self.state.upper().split("+"))

    @property
    def drained(self) -> bool:
        """Drained or draining: no new job lands here."""
        return "DRAIN" in self.flags or "DRAINED" in self.flags or "DRAINING" in self.flags

    @property
    def down(self) -> bool:
        """DOWN (Slurm's "Not responding", an admin's State=DOWN): no job lands here either."""
        return "DOWN" in self.flags

    @property
    def ours(self) -> bool:
        return is_ours(self.reason)


# Reason= is the last field but for these optional ones (node_info.c prints them after it); a reason
# may itself hold " Word=", so only these end it.
_AFTER_REASON = r" (?:Comment|Extra|InstanceId|InstanceType|ReservationName)="
_REASON = re.compile(r"\bReason=(.*?)(?=" + _AFTER_REASON + r"|$)")
# " [user@time]" closes the reason's first line; a reason of several lines goes on after it.
_STAMP = re.compile(r" \[[^\[\]@\s]+@[^\[\]]+\](?=\s{2,}|\s*$)")
_STATE = re.compile(r"\bState=(\S+)")


def _record(text: str, name: str) -> str | None:
    """The node's record as `-o` prints it: its own line, or the multi-line form's lines joined back
    (continuation lines are indented; a blank one may sit before Reason= and stays a field break)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"NodeName={name} ")), None)
    if start is None:
        return None
    parts = [lines[start]]
    rest = lines[start + 1:] + [""]
    for ln, nxt in zip(rest, rest[1:]):
        if ln.strip() and ln[:1].isspace():
            parts.append(ln.removeprefix("   "))
        elif not ln.strip() and nxt.strip() and nxt[:1].isspace():
            parts.append("")  # the blank field line before Reason= (24.05), its indent perhaps lost in a paste
        else:
            break
    return " ".join(parts)


def parse_show_node(text: str, name: str) -> NodeState:
    """The node's state and reason from `scontrol show node -o NAME`'s one line (or the multi-line
    form, pasted). SlurmError when it has none, or when it is cut short before the reason of a node
    that must have one (drained or down): whose hold it is cannot be told then."""
    line = _record(text, name)
    if line is None:
        raise SlurmError(f"`scontrol show node -o {name}` printed no line for {name}: {text.strip()[:200]!r}")
    state = _STATE.search(line)
    if state is None:
        raise SlurmError(f"`scontrol show node -o {name}` printed no State=: {line[:200]!r}")
    why = _REASON.search(line)
    if why is None:
        node = NodeState(name, state.group(1), None)
        # Slurm refuses a drain or down without a reason and prints Reason= after CfgTRES=, which every
        # node has: a held node with neither was cut short.
        if (node.drained or node.down) and "CfgTRES=" not in line:
            raise SlurmError(f"`scontrol show node {name}` ends before its Reason= (no CfgTRES= either: cut "
                             f"short?): State={node.state}, but whose hold it is cannot be read")
        return node
    text_reason = " ".join(_STAMP.sub("", why.group(1), count=1).split())
    return NodeState(name, state.group(1), None if text_reason in ("", "(null)", "none") else text_reason)


def _scontrol(args: list[str]) -> str:
    """Run a Slurm client command (scontrol, sinfo) under a bound; SlurmError with why not."""
    if shutil.which(args[0]) is None:
        raise SlurmError(f"{args[0]} is not on PATH")
    ok, out = run_command(args, SCONTROL_TIMEOUT_S)
    if not ok:
        raise SlurmError(out)
    return out


def read_state(node: str) -> NodeState:
    return parse_show_node(_scontrol(["scontrol", "show", "node", "-o", node]), node)


def drain(d: Drain) -> None:
    _scontrol(d.argv)


def resume(node: str) -> None:
    _scontrol(resume_argv(node))


def parse_sinfo_nodes(text: str) -> dict[str, tuple[str, str | None]]:
    """node -> (state, reason) from `sinfo -h -N -o %N|%T|%E` (a node in two partitions is listed twice)."""
    out = {}
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3 and parts[0]:
            reason = parts[2].strip()
            out[parts[0]] = (parts[1].strip().rstrip("*~#!%$@^-"), None if reason in ("", "none") else reason)
    return out


def drained_for(check: str) -> tuple[int, int]:
    """(nodes drained with our reason for `check`, nodes in the cluster): one sinfo call."""
    nodes = parse_sinfo_nodes(_scontrol(["sinfo", "-h", "-N", "-o", "%N|%T|%E"]))
    prefix = f"{PREFIX} {check}:"
    return sum(1 for state, why in nodes.values() if why and why.startswith(prefix)), len(nodes)


def apply_drain(d: Drain) -> tuple[str, str]:
    """Drain d.node unless someone else drained it: ("drained" | "left" | "failed", what happened).

    A node drained or down with a reason not ours keeps it (an admin's maintenance, another checker's
    finding, Slurm's "Not responding"): we never overwrite it. Ours is replaced when the reason changed."""
    try:
        now = read_state(d.node)
        if now.drained and not now.ours:
            return "left", f"{d.node} is already drained by someone else ({now.reason or 'no reason'}); left as it is"
        if now.down and not now.ours:
            return "left", (f"{d.node} is {now.state}, held by someone else ({now.reason or 'no reason'}); "
                            f"left as it is")
        if now.drained and now.reason == d.reason:
            return "drained", f"{d.node} is already drained with this reason"
        drain(d)
    except SlurmError as e:
        return "failed", f"could not drain {d.node}: {e}"
    return "drained", f"drained {d.node}: {d.reason}"


def apply_resume(node: str, now: NodeState) -> tuple[str, str]:
    """Resume `node` when its current drain (`now`) is ours: ("resumed" | "left" | "failed", what happened)."""
    if not now.drained:
        return "left", f"{node} is not drained" + (f" ({now.state}: not ours to resume)" if now.down else "")
    if not now.ours:
        return "left", f"{node} is drained by someone else ({now.reason or 'no reason'}); never resumed by acceptance"
    try:
        resume(node)
    except SlurmError as e:
        return "failed", f"could not resume {node}: {e}"
    return "resumed", f"resumed {node} (was: {now.reason})"
