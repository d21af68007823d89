"""What every node check shares: its answer (Outcome, one Problem per part), its input (Context), and the
judge's preflight bounds that the node check and the preflight suite both ask.

A check that cannot see what it must judge (a tool missing, a file unreadable, an NVML error other than
"not supported") raises CouldNotRun or lists the part in Outcome.unchecked: "could not run" is never a
failure, so it never drains a node (docs/node-check.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..rules import judge
from ..rules.profile import Profile

STATUSES = ("pass", "warn", "skip", "error", "fail")


class CouldNotRun(Exception):
    """The check cannot judge this node: why, for the operator (a tool, a file, an API's error)."""


@dataclass(frozen=True)
class Problem:
    part: str                 # "mlx5_1 port 1 (rail 1)", "GPU 0000:18:00.0", "rail1"
    detail: str               # what is wrong with it, and by how much
    severity: str = "fail"    # fail | warn
    action: str = "drain"     # what the node needs (Xid's catalog: drain, reset_gpu, reboot, rma)


@dataclass
class Outcome:
    check: str
    status: str                                   # STATUSES
    problems: list[Problem] = field(default_factory=list)
    note: str = ""                                # skip / error: why; pass: what was seen
    seconds: float = 0.0
    state: dict | None = None                     # kept for the next check; None: keep the old one
    unchecked: list[str] = field(default_factory=list)  # parts it could not judge, each with why

    def could_not(self) -> list[str]:
        """Why it could not run, or which parts it could not judge: one line each."""
        if self.unchecked:
            return list(self.unchecked)
        return [self.note] if self.status == "error" else []

    def to_json(self) -> dict:
        return {"check": self.check, "status": self.status, "note": self.note, "seconds": round(self.seconds, 3),
                "problems": [asdict(p) for p in self.problems], "unchecked": list(self.unchecked)}


@dataclass(frozen=True)
class Context:
    profile: Profile
    root: Path               # sysfs root
    node: str
    previous: dict           # this check's state from the last run ({} the first time)


def judged(check: str, problems: list[Problem], note: str = "", state: dict | None = None,
           unchecked: list[str] | None = None) -> Outcome:
    """fail on a failing problem; else error ("could not run") when a part could not be judged; else
    warn on a warning; else pass."""
    unchecked = list(unchecked or [])
    status = ("fail" if any(p.severity == "fail" for p in problems)
              else "error" if unchecked else "warn" if problems else "pass")
    return Outcome(check, status, problems, note, state=state, unchecked=unchecked)


def skip(check: str, why: str, state: dict | None = None) -> Outcome:
    return Outcome(check, "skip", note=why, state=state)


def error(check: str, why: str) -> Outcome:
    return Outcome(check, "error", note=why)


# ---- a node's values judged: shared with the preflight suite (acceptance.drivers.preflight) ------

def fails(name: str, value, profile: Profile) -> bool:
    """Whether the judge fails this preflight value against the profile (the preflight suite's bound;
    a bound the profile leaves unset fails nothing)."""
    return judge.judge_one("preflight", name, value, profile, peers=False)[1] == "fail"


def bound(name: str, profile: Profile):
    """What the profile holds this preflight value to (judge.bound): a number, inf for a minimum only
    "unlimited" meets, None where it sets none."""
    return judge.bound("preflight", name, profile)


RDMA_KEYS = ("preflight.rdma_devices", "preflight.port_rate", "preflight.mtu", "preflight.link_layer")


def required(profile: Profile, *keys: str) -> str | None:
    """"preflight.port_rate = 400 Gbit/s" for the first of `keys` the profile sets, else None: why a
    node without the data fails instead of skipping."""
    for key in keys:
        value = profile.get(key)
        if value is not None:
            return f"{key} = {value:g}" if isinstance(value, float) else f"{key} = {value}"
    return None
