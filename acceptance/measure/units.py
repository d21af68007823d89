"""Bandwidth units and bus bandwidth, as the reference tools print them (methodology §1, §2)."""
from __future__ import annotations

from collections.abc import Callable


def gbit_per_s(nbytes: float, ns: float) -> float:
    """perftest --report_gbits: 1e9 bit/s (bytes*8 / ns). perftest's default unit is MiB/s instead."""
    return nbytes * 8 / ns


def gbyte_per_s(nbytes: float, ns: float) -> float:
    """nccl-tests GB/s, GB = 1e9 bytes (bytes / ns); 400 Gbit/s = 50 GB/s."""
    return nbytes / ns


# nccl-tests src/<coll>.cu *GetBw and doc/PERFORMANCE.md: busbw = algbw * factor(n), which
# makes results comparable with the per-rank link bandwidth whatever the rank count.
BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def busbw(op: str, algbw: float, nranks: int) -> float:
    """nccl-tests bus bandwidth; same unit as algbw."""
    if op not in BUSBW_FACTOR:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(BUSBW_FACTOR)})")
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return algbw * BUSBW_FACTOR[op](nranks)


def us(ns):
    """Microseconds from nanoseconds; works on numbers and numpy arrays."""
    return ns / 1000
