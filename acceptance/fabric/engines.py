"""Which engine measures: the profile's run.engine, or the best one usable here for `auto`."""

from __future__ import annotations

from types import ModuleType

# Engines this version has; verbs (pyverbs) and nccl (cupy) plug in here when built.
BUILT = ("mpi",)


def select(choice: str) -> tuple[ModuleType | None, str]:
    """(engine module, why) — the module is None when the choice cannot run here, with the reason."""
    if choice in ("auto", "mpi"):
        from . import mpi
        ok, detail = mpi.available()
        return (mpi, f"mpi engine ({detail})") if ok else (None, f"mpi engine unavailable: {detail}")
    return None, (f"engine {choice!r} is not part of this version (built: {', '.join(BUILT)}); "
                  f"set run.engine = \"mpi\" or \"auto\" in the profile")
