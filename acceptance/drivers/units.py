"""Bandwidth units and bus bandwidth, as the reference tools print them (docs/methodology.md §1, §2)."""
from __future__ import annotations



def gbit_per_s(nbytes: float, ns: float) -> float:
    """perftest --report_gbits: 1e9 bit/s (bytes*8 / ns). perftest's default unit is MiB/s instead."""
    return nbytes * 8 / ns


def gbyte_per_s(nbytes: float, ns: float) -> float:
    """nccl-tests GB/s, GB = 1e9 bytes (bytes / ns); 400 Gbit/s = 50 GB/s."""
    return nbytes / ns


def busbw(op: str, algbw: float, nranks: int) -> float:
    """nccl-tests bus bandwidth of collective `op` (its Spec's factor); same unit as algbw."""
    from ..engines.collective_data import SPECS
    if op not in SPECS:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(SPECS)})")
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return algbw * SPECS[op].busbw_factor(nranks)


def us(ns):
    """Microseconds from nanoseconds; works on numbers and numpy arrays."""
    return ns / 1000
