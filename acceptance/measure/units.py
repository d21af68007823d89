"""Bandwidth units, as the reference tools print them (docs/methodology.md §1); bus bandwidth is the collectives' (engines.collective_data.busbw)."""
from __future__ import annotations



def gbit_per_s(nbytes: float, ns: float) -> float:
    """perftest --report_gbits: 1e9 bit/s (bytes*8 / ns). perftest's default unit is MiB/s instead."""
    return nbytes * 8 / ns


def gbyte_per_s(nbytes: float, ns: float) -> float:
    """nccl-tests GB/s, GB = 1e9 bytes (bytes / ns); 400 Gbit/s = 50 GB/s."""
    return nbytes / ns


def us(ns):
    """Microseconds from nanoseconds; works on numbers and numpy arrays."""
    return ns / 1000
