"""Message-size sweeps and how many iterations each size gets.

Sizes grow geometrically like nccl-tests -f (size *= f while size <= max). The
iteration count keeps the bytes moved per size roughly constant (as perftest -D
or OSU's small/large split aim for): many iterations for small messages, where
the timer dominates, few for large ones, so a 64 MiB point does not take minutes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

KEYS = ("min_size", "max_size", "factor", "bytes_per_size", "min_iters", "max_iters", "warmup_fraction")


def sizes(min_size: int, max_size: int, factor: int) -> list[int]:
    """min, min*f, min*f**2, ... while <= max (nccl-tests src/common.cu size loop)."""
    if min_size < 1:
        raise ValueError(f"min_size must be >= 1, got {min_size}")
    if factor < 2:
        raise ValueError(f"factor must be >= 2, got {factor}")
    if min_size > max_size:
        raise ValueError(f"min_size ({min_size} B) is larger than max_size ({max_size} B)")
    out, size = [], min_size
    while size <= max_size:
        out.append(size)
        size *= factor
    return out


@dataclass(frozen=True)
class Sweep:
    sizes: tuple[int, ...]
    bytes_per_size: int      # data one size moves in its timed loop
    min_iters: int
    max_iters: int
    warmup_fraction: float

    def __post_init__(self):
        if not 1 <= self.min_iters <= self.max_iters:
            raise ValueError(f"need 1 <= min_iters <= max_iters, got {self.min_iters} and {self.max_iters}")

    def iters(self, size: int, per_iter_bytes: int | None = None) -> int:
        """Timed iterations for `size`; bandwidth passes per_iter_bytes = size * window."""
        n = self.bytes_per_size // max(1, per_iter_bytes or size)
        return max(self.min_iters, min(self.max_iters, n))

    def warmup(self, iters: int) -> int:
        """Untimed iterations before `iters` timed ones; at least 1 (first-touch, QP setup)."""
        # Fraction of the written decimal: 100 * 0.07 is 7, not 7.000000000000001 -> 8.
        return max(1, math.ceil(iters * Fraction(repr(float(self.warmup_fraction)))))


def sweep_from_profile(profile, section: str = "sweep") -> Sweep:
    """The Sweep described by [section] of an acceptance.rules.profile.Profile."""
    v = {key: profile.get(f"{section}.{key}") for key in KEYS}
    where = getattr(profile, "source", "profile")
    try:
        size_list = sizes(v["min_size"], v["max_size"], v["factor"])
    except ValueError as e:
        raise ValueError(f"{where}: {section}.min_size = {v['min_size']}, {section}.max_size = "
                         f"{v['max_size']}, {section}.factor = {v['factor']}: {e}") from None
    try:
        return Sweep(sizes=tuple(size_list), bytes_per_size=v["bytes_per_size"],
                     min_iters=v["min_iters"], max_iters=v["max_iters"],
                     warmup_fraction=v["warmup_fraction"])
    except ValueError as e:
        raise ValueError(f"{where}: {section}.min_iters = {v['min_iters']}, "
                         f"{section}.max_iters = {v['max_iters']}: {e}") from None
