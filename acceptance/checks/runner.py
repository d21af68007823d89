"""Every named node check at once, each in its own thread, within the deadline; the verdict."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..rules.profile import Profile
from ..rules.schema import NODE_CHECKS
from . import counters, gpudirect, gpus, memlock, pcie, ports, xid
from .base import Context, CouldNotRun, Outcome, error

DEADLINE_MAX_S = 30.0

CHECKS: dict[str, Callable[[Context], Outcome]] = {
    "ports": ports.check, "counters": counters.check, "pcie": pcie.check, "memlock": memlock.check,
    "gpudirect": gpudirect.check, "gpus": gpus.check, "xid": xid.check,
}
assert tuple(CHECKS) == NODE_CHECKS, "acceptance.rules.schema.NODE_CHECKS names the same checks, in order"


def run_checks(profile: Profile, root: Path, node: str, previous: dict, names: list[str],
               end: float) -> list[Outcome]:
    """Every named check at once, each in its own thread; one still running at `end` (time.monotonic())
    could not run (a wedged driver, a hung command): the node check always answers in time."""
    outcomes: dict[str, Outcome] = {}

    def one(name: str) -> None:
        t0 = time.monotonic()
        try:
            out = CHECKS[name](Context(profile, root, node, previous.get(name) or {}))
        except CouldNotRun as e:
            out = error(name, str(e))
        except Exception as e:  # noqa: BLE001 - a check's own failure is "could not run", never a fail
            out = error(name, f"{type(e).__name__}: {e}")
        out.seconds = time.monotonic() - t0
        outcomes[name] = out

    threads = [threading.Thread(target=one, args=(n,), name=f"node-check {n}", daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    deadline = profile.get("node_check.deadline")
    return [outcomes.get(n) or Outcome(n, "error", note=f"did not finish within the deadline ({deadline:g} s, "
                                                        f"node_check.deadline)", seconds=deadline)
            for n in names]


def verdict(outcomes: list[Outcome]) -> str:
    """fail when a check failed; else error when one could not run; else pass (warnings included)."""
    found = {o.status for o in outcomes}
    return "fail" if "fail" in found else "error" if "error" in found else "pass"
