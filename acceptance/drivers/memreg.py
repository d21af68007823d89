"""Memory registration: time to register and deregister by size, and a leak check."""

from __future__ import annotations

from typing import Callable

from ..rules import judge
from ..rules.profile import Profile
from ..measure.stats import percentiles
from ..measure.sweep import sizes
from ..measure.units import us

# (engine "how", metric suffix): memory the transport allocates, and memory we allocated.
KINDS = (("allocate", ""), ("create", "_user"))


def registration(engine, profile: Profile, record: Callable) -> list[str]:
    """p50 registration / deregistration time per size on this rank, against the profile's bounds."""
    problems = []
    repeats = profile.get("memreg.repeats")
    for size in sizes(profile.get("memreg.min_size"), profile.get("memreg.max_size"), profile.get("memreg.factor")):
        for how, suffix in KINDS:
            reg, dereg = engine.register_times(size, repeats, how)
            for metric, times in (("reg_time", reg), ("dereg_time", dereg)):
                stats = percentiles(us(times))
                bound, verdict = judge.record(record, profile, "memreg", metric + suffix, stats.p50, size=size,
                                              engine=engine.NAME, samples=stats.samples,
                                              detail=f"p50; max {stats.max:.1f} us")
                if verdict == "fail":
                    problems.append(f"{metric + suffix} p50 {stats.p50:.1f} us for {size} B "
                                    f"({how}) > bound {bound:g} us")
    return problems


def leak(engine, profile: Profile, record: Callable) -> list[str]:
    """Resident memory growth over many register/deregister cycles."""
    size, cycles, limit = (profile.get(k) for k in ("memreg.leak_size", "memreg.leak_cycles", "memreg.leak_max"))
    growth = engine.registration_growth(size, cycles)
    _, verdict = judge.record(record, profile, "memreg", "rss_growth", growth, size=size, engine=engine.NAME,
                              samples=cycles, detail=f"{cycles} register/deregister cycles of {size} B")
    if verdict == "fail":
        return [f"resident memory grew {growth} B over {cycles} register/deregister cycles of {size} B "
                f"(bound {limit} B): registration leaks"]
    return []
