"""What the collectives send and must get back, for any array module (numpy for mpi, cupy for nccl).

Inputs are small integer-valued float64s, so every reduction is exact and the check has zero
tolerance; element j of an all-to-all block from src to dst encodes (src, dst, j) exactly.
Byte counts are nccl-tests': `size` bytes per rank for all-reduce, `size` in total per rank
(its own block included) for all-to-all. Every verified iteration i gets its own input, the base
input + (i + 1) on every element (exact: the values stay far below 2**53), and its output buffer
holds NaN before it, which no expected element can equal (Buffers). One Spec per collective (SPECS) is all an engine and the
driver need: adding a collective is its Spec, its catalog entry and its engine calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..measure.verify import Tally


def _allreduce_send(xp, count: int, rank: int, nranks: int):
    """Small integers (1..13) x (rank + 1): every partial sum is exact in float64."""
    return ((xp.arange(count, dtype=xp.float64) % 13) + 1.0) * (rank + 1)


def _allreduce_expected(xp, count: int, rank: int, nranks: int):
    """The exact sum over ranks of the inputs."""
    return ((xp.arange(count, dtype=xp.float64) % 13) + 1.0) * (nranks * (nranks + 1) // 2)


def _alltoall_blocks(xp, block: int, src, dst):
    index = xp.arange(block, dtype=xp.float64) % 2**20
    # Element j of the block from src to dst encodes (src, dst, j) exactly in a double (< 2**53).
    return xp.concatenate([s * 2.0**33 + d * 2.0**20 + index for s, d in zip(src, dst)])


def _alltoall_send(xp, block: int, rank: int, nranks: int):
    return _alltoall_blocks(xp, block, [rank] * nranks, range(nranks))


def _alltoall_expected(xp, block: int, rank: int, nranks: int):
    return _alltoall_blocks(xp, block, range(nranks), [rank] * nranks)


@dataclass(frozen=True)
class Spec:
    """One collective as nccl-tests defines it (src/<coll>.cu): how many float64 elements a `size`
    is, the bytes it counts as moved per rank, each rank's input and exact expected output (any
    array module: numpy for mpi, cupy for nccl), and the bus-bandwidth factor that makes busbw
    comparable with a link's bandwidth whatever the rank count (doc/PERFORMANCE.md)."""

    name: str
    elements: Callable[[int, int], int]            # (size, nranks) -> elements (allreduce: the vector; alltoall: a block)
    nbytes: Callable[[int, int], int]              # (elements, nranks) -> bytes per rank
    send: Callable[..., object]                    # (xp, elements, rank, nranks) -> this rank's input
    expected: Callable[..., object]                # (xp, elements, rank, nranks) -> what this rank must get
    busbw_factor: Callable[[int], float]           # nranks -> busbw / algbw
    stamp_factor: Callable[[int], int]             # nranks -> how much an output element moves per unit added to every input


ALLREDUCE = Spec("allreduce", elements=lambda size, n: max(size // 8, 1), nbytes=lambda count, n: count * 8,
                 send=_allreduce_send, expected=_allreduce_expected, busbw_factor=lambda n: 2 * (n - 1) / n,
                 stamp_factor=lambda n: n)
# Each rank sends `size` bytes in total, itself included (nccl-tests counts alltoall so; it also rounds
# to 16 B, which neither engine does).
ALLTOALL = Spec("alltoall", elements=lambda size, n: max(size // (8 * n), 1), nbytes=lambda block, n: block * 8 * n,
                send=_alltoall_send, expected=_alltoall_expected, busbw_factor=lambda n: (n - 1) / n,
                stamp_factor=lambda n: 1)
SPECS = {spec.name: spec for spec in (ALLREDUCE, ALLTOALL)}


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


class Buffers:
    """One rank's buffers for one collective size, and the check of each verified iteration.

    before(i) gives the input its stamp i + 1 and poisons the output with NaN; after(i, last) compares
    the output exactly with the stamped expected result and adds one operation to `tally`. Both run
    outside the timed region (drivers.verify.timed_verified); on cupy they are stream-ordered and
    only scalars cross to the host.
    """

    def __init__(self, xp, spec: Spec, elements: int, rank: int, nranks: int):
        self.xp, self.rank = xp, rank
        self.base = spec.send(xp, elements, rank, nranks)
        self.expected = spec.expected(xp, elements, rank, nranks)
        self.send = self.base.copy()
        self.recv = xp.full(self.expected.shape, xp.nan, dtype=xp.float64)
        self.factor = float(spec.stamp_factor(nranks))
        self.tally = Tally()

    def before(self, i: int) -> None:
        self.xp.add(self.base, float(i + 1), out=self.send)
        self.recv.fill(self.xp.nan)

    def after(self, i: int, last: bool = False) -> None:
        xp = self.xp
        wrong = compare(xp, self.recv, self.expected + self.factor * (i + 1))
        missing = wrong.count == self.recv.size and bool(xp.isnan(self.recv).all())
        first = None
        if wrong.count:
            first = (f"iteration {i}: rank {self.rank} element {wrong.index}: "
                     f"expected {wrong.expected!r}, got {wrong.got!r}")
        self.tally.add(i, 1, int(wrong.count > 0), int(missing), wrong.count, first)


def busbw(op: str, algbw: float, nranks: int) -> float:
    """nccl-tests bus bandwidth of collective `op` (its Spec's factor); same unit as algbw."""
    if op not in SPECS:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(SPECS)})")
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return algbw * SPECS[op].busbw_factor(nranks)
