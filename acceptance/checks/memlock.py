"""The memlock check: RLIMIT_MEMLOCK against preflight.memlock_min. The node check reads slurmd's own
limit (what jobs get with PropagateResourceLimitsExcept=MEMLOCK); the preflight suite each rank's."""

from __future__ import annotations

from ..host.preflight import UNLIMITED, memlock_limit
from .base import Context, Outcome, Problem, bound, fails, judged, skip

# The one advice for a short limit: what the node check and the preflight suite both say.
ADVICE = ("RDMA memory registration pins memory and fails beyond it: raise it in /etc/security/limits.conf "
          "(memlock unlimited) and for slurmd (LimitMEMLOCK=infinity in its systemd unit), and let jobs "
          "inherit it (slurm.conf PropagateResourceLimitsExcept=MEMLOCK)")


def short(limit: int, minimum: float) -> str:
    """What is wrong with a limit below the minimum (judge.bound: inf where only unlimited meets it)."""
    needs = "unlimited" if minimum == float("inf") else f"at least {minimum:.0f}"
    return f"RLIMIT_MEMLOCK (ulimit -l) is {limit} bytes, the profile needs {needs}: {ADVICE}"


def too_low(limit: int, profile) -> bool:
    return fails("memlock", None if limit == UNLIMITED else limit, profile)


def check(ctx: Context) -> Outcome:
    minimum = bound("memlock", ctx.profile)
    if not minimum:
        return skip("memlock", "the profile sets no preflight.memlock_min")
    limit = memlock_limit()
    return judged("memlock", [Problem("memlock", short(limit, minimum))] if too_low(limit, ctx.profile) else [],
                  f"RLIMIT_MEMLOCK {limit}")
