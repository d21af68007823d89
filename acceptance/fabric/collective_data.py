"""What the collectives send and must get back, for any array module (numpy for mpi, cupy for nccl).

Inputs are small integer-valued float64s, so every reduction is exact and the check has zero
tolerance; element j of an all-to-all block from src to dst encodes (src, dst, j) exactly.
Byte counts are nccl-tests': `size` bytes per rank for all-reduce, `size` in total per rank
(its own block included) for all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass


def allreduce_count(size: int) -> int:
    """float64 elements per rank: `size` bytes, at least one."""
    return max(size // 8, 1)


def allreduce_send(xp, count: int, rank: int):
    """Small integers (1..13) x (rank + 1): every partial sum is exact in float64."""
    return ((xp.arange(count, dtype=xp.float64) % 13) + 1.0) * (rank + 1)


def allreduce_expected(xp, count: int, nranks: int):
    """The exact sum over ranks of allreduce_send."""
    return ((xp.arange(count, dtype=xp.float64) % 13) + 1.0) * (nranks * (nranks + 1) // 2)


def alltoall_block(size: int, nranks: int) -> int:
    """float64 elements per peer block: each rank sends `size` bytes in total, itself included
    (nccl-tests counts alltoall so; nccl-tests also rounds to 16 B, mpi.alltoall does not, nor this)."""
    return max(size // (8 * nranks), 1)


def _alltoall_blocks(xp, block: int, src, dst):
    index = xp.arange(block, dtype=xp.float64) % 2**20
    # Element j of the block from src to dst encodes (src, dst, j) exactly in a double (< 2**53).
    return xp.concatenate([s * 2.0**33 + d * 2.0**20 + index for s, d in zip(src, dst)])


def alltoall_send(xp, block: int, rank: int, nranks: int):
    return _alltoall_blocks(xp, block, [rank] * nranks, range(nranks))


def alltoall_expected(xp, block: int, rank: int, nranks: int):
    return _alltoall_blocks(xp, block, range(nranks), [rank] * nranks)


@dataclass(frozen=True)
class Wrong:
    count: int            # elements that differ
    index: int | None     # the first of them
    expected: float | None
    got: float | None


def compare(xp, got, expected) -> Wrong:
    """Exact comparison (zero tolerance); on cupy only scalars cross to the host."""
    diff = got != expected
    count = int(xp.count_nonzero(diff))
    if not count:
        return Wrong(0, None, None, None)
    i = int(xp.argmax(diff))
    return Wrong(count, i, float(expected[i]), float(got[i]))
