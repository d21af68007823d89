"""Buffers the engines move, and the byte pattern that proves they arrived intact.

One interface for host (numpy) and device (cupy) memory: every function takes
or returns arrays of the module `array_module(memory)` gives, so engines never
branch on where the bytes live.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy

from ..measure.verify import Tally

PAGE = 4096
FLIP_ENV = "ACCEPTANCE_TEST_FLIP_BIT"

_MASK = (1 << 64) - 1
# splitmix64 constants: a full-period odd increment and a finalizer whose every
# output bit depends on every input bit, so nearby seeds/indices look unrelated.
_GAMMA = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


class MemoryUnavailable(Exception):
    """The requested kind of memory cannot be used here; str() says why."""


def array_module(memory: str):
    """numpy for "host", cupy for "cuda" (only if a CUDA device is usable)."""
    if memory == "host":
        return numpy
    if memory != "cuda":
        raise ValueError(f"unknown memory {memory!r}: expected 'host' or 'cuda'")
    try:
        import cupy
    except ModuleNotFoundError as exc:
        if exc.name != "cupy":
            raise MemoryUnavailable(
                f"cupy is installed but cannot import: {exc}"
            ) from exc
        raise MemoryUnavailable(
            "cupy not installed (pip install 'acceptance[gpu]')"
        ) from exc
    except ImportError as exc:  # e.g. CUDA libraries missing or mismatched
        raise MemoryUnavailable(f"cupy is installed but cannot import: {exc}") from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when no driver/device
        raise MemoryUnavailable(f"cupy imports but no CUDA device: {exc}") from exc
    if count < 1:
        raise MemoryUnavailable("cupy imports but no CUDA device: device count is 0")
    return cupy


def allocate(nbytes: int, memory: str = "host"):
    """A 1-D uint8 array of `nbytes` (contents undefined).

    Host memory is page-aligned because MPI windows and verbs MRs register
    whole pages. The result is a view into a slightly larger buffer; the view's
    `.base` holds that buffer, so keeping the view alive keeps the memory alive.
    """
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    xp = array_module(memory)
    if xp is not numpy:
        # cupy pool allocations are already 256-byte aligned.
        return xp.empty(nbytes, dtype=xp.uint8)
    raw = numpy.empty(nbytes + PAGE, dtype=numpy.uint8)
    start = -raw.ctypes.data % PAGE
    # Slice from a non-empty view: numpy resets the pointer of an empty slice
    # to its base's start, which would lose the alignment for nbytes == 0.
    return raw[start : start + nbytes + 1][:nbytes]


def _xp_of(buf):
    # cupy arrays can only exist once cupy is imported, so don't import it here.
    cupy = sys.modules.get("cupy")
    return cupy.get_array_module(buf) if cupy is not None else numpy


def _mix64(z: int) -> int:
    z = (z ^ (z >> 30)) * _M1 & _MASK
    z = (z ^ (z >> 27)) * _M2 & _MASK
    return z ^ (z >> 31)


def _seed(*parts: int) -> int:
    # Chained hashing: (0,1,0) and (1,0,0) get unrelated seeds, not shifted streams.
    s = 0
    for part in parts:
        s = _mix64((s ^ (part & _MASK)) + _GAMMA & _MASK)
    return s


def _pattern(nbytes: int, parts: tuple[int, ...], xp):
    # Word i = mix(seed + i*GAMMA): every byte depends on its index, so data
    # landing at the wrong offset fails verification.
    u64 = xp.uint64
    z = xp.arange((nbytes + 7) // 8, dtype=u64)
    z *= u64(_GAMMA)
    z += u64(_seed(*parts))
    z ^= z >> u64(30)
    z *= u64(_M1)
    z ^= z >> u64(27)
    z *= u64(_M2)
    z ^= z >> u64(31)
    return z.view(xp.uint8)[:nbytes]  # drops the tail of the last word


_BASE: dict = {}  # xp -> ((src, dst, iteration), words): the last base pattern, reused by its batches


def _content(nbytes: int, parts: tuple[int, ...], xp):
    """The pattern of (src, dst, iteration, *more). With `more` (the batches of one measurement, a
    destination's POISON), the base pattern of (src, dst, iteration) XOR one 64-bit key of all the
    parts: every word still depends on its index, every batch and poison differs from every other in
    every word, and a batch costs one pass instead of a new pattern."""
    if len(parts) <= 3:
        return _pattern(nbytes, parts, xp)
    base_parts, words = parts[:3], (nbytes + 7) // 8
    cached = _BASE.get(xp)
    if cached is None or cached[0] != base_parts or len(cached[1]) < words:
        cached = (base_parts, _pattern(words * 8, base_parts, xp).view(xp.uint64))
        _BASE[xp] = cached
    key = xp.uint64(_seed(*parts))
    return (cached[1][:words] ^ key).view(xp.uint8)[:nbytes]


def fill_pattern(buf, src: int, dst: int, iteration: int, *more: int) -> None:
    """Overwrite `buf` (1-D uint8) with the pattern for (src, dst, iteration, *more): `more` tells
    apart the batches of one measurement, and (POISON) the poison of a destination."""
    buf[...] = _content(len(buf), (src, dst, iteration, *more), _xp_of(buf))


def expected(nbytes: int, src: int, dst: int, iteration: int, *more: int, xp=numpy):
    """The bytes fill_pattern writes, as a new uint8 array of module `xp`."""
    return _content(nbytes, (src, dst, iteration, *more), xp).copy()


# The last seed part of a destination's poison: a pattern of another seed, which the data it waits
# for cannot hold (any one slot matching it by chance is a 2**-64 event per word).
POISON = 0x9015_0000


def poison(buf, *seed: int) -> None:
    """Fill a destination with the poison of `seed` before the operation that must overwrite it."""
    fill_pattern(buf, *seed, POISON)


@dataclass(frozen=True)
class SlotCheck:
    """The slots of a verified batch of writes: how many, how many wrong, how many still poisoned."""

    slots: int
    failed: int
    missing: int
    wrong_bytes: int
    first: Mismatch | None
    first_slot: int | None


def check_slots(buf, slot: int, *seed: int) -> SlotCheck:
    """Compare `buf` (whole slots of `slot` bytes, filled by fill_pattern(buf-sized source, *seed))
    exactly; a slot that still holds poison(*seed) never arrived."""
    xp = _xp_of(buf)
    n = len(buf) // slot
    want = _content(n * slot, seed, xp)
    diff = buf[:n * slot] != want
    wrong = int(xp.count_nonzero(diff))
    if wrong == 0:
        return SlotCheck(n, 0, 0, 0, None, None)
    bad = diff.reshape(n, slot).any(axis=1)
    stale = (buf[:n * slot] == _content(n * slot, (*seed, POISON), xp)).reshape(n, slot).all(axis=1)
    offset = int(xp.argmax(diff))
    first = Mismatch(offset % slot, int(want[offset]), int(buf[offset]), wrong, slot)
    return SlotCheck(n, int(xp.count_nonzero(bad)), int(xp.count_nonzero(stale)), wrong, first, offset // slot)


@dataclass(frozen=True)
class Mismatch:
    offset: int  # first wrong byte
    expected: int
    got: int
    wrong_bytes: int  # how many bytes differ in total
    nbytes: int

    def __str__(self) -> str:
        plural = "" if self.wrong_bytes == 1 else "s"
        return (
            f"first wrong byte at offset {self.offset} of {self.nbytes}: "
            f"expected 0x{self.expected:02x}, got 0x{self.got:02x} "
            f"({self.wrong_bytes} wrong byte{plural})"
        )


@dataclass(frozen=True)
class CounterMismatch(Mismatch):
    """An atomic counter that does not hold the number of fetch-and-adds applied to it."""

    value: int = 0
    expected_value: int = 0

    def __str__(self) -> str:
        return (f"atomic counter holds {self.value} after {self.expected_value} fetch-and-adds of 1: "
                f"{'lost' if self.value < self.expected_value else 'extra'} atomic updates")


def check_counter(raw: bytes, expected_value: int) -> CounterMismatch | None:
    """None when the 8 bytes hold expected_value in either byte order (some HCAs apply atomics big-endian)."""
    little, big = int.from_bytes(raw, "little"), int.from_bytes(raw, "big")
    if expected_value in (little, big):
        return None
    want = expected_value.to_bytes(8, "little")
    wrong = [i for i in range(8) if raw[i] != want[i]]
    return CounterMismatch(offset=wrong[0], expected=want[wrong[0]], got=raw[wrong[0]], wrong_bytes=len(wrong),
                           nbytes=8, value=little, expected_value=expected_value)


def slot_tally(buf, slot: int, *seed: int) -> Tally:
    """check_slots() of one verified batch (its seed's last part is the batch) as a Tally. The test
    hook (corrupt_for_test) flips its bit in the batch's first slot."""
    corrupt_for_test(buf[:slot])
    c = check_slots(buf, slot, *seed)
    t = Tally()
    where = f"batch {seed[-1]}, slot {c.first_slot}: {c.first}" if c.first else None
    t.add(seed[-1], c.slots, c.failed, c.missing, c.wrong_bytes, where)
    return t


def fetched_tally(fetched, want) -> Tally:
    """Atomic fetch-and-adds of 1, each into its own slot poisoned with -1: slot t must hold the
    counter before its add, want[t] (an int: want + t). A slot still -1 is an add that never came back."""
    xp = _xp_of(fetched)
    if isinstance(want, int):
        want = xp.arange(want, want + len(fetched), dtype=xp.int64)
    bad = fetched != want
    failed = int(xp.count_nonzero(bad))
    t = Tally()
    if not failed:
        t.ops = len(fetched)
        return t
    i = int(xp.argmax(bad))
    missing = int(xp.count_nonzero(fetched == -1))
    t.add(0, len(fetched), failed, missing, failed * 8,
          f"fetch-and-add {i} returned {int(fetched[i])}, expected {int(want[i])}")
    return t


def counter_tally(raw: bytes, expected_value: int) -> Tally:
    """The target word of the atomics: one check, counted as one operation."""
    m = check_counter(raw, expected_value)
    t = Tally()
    t.add(0, 1, int(m is not None), 0, 0 if m is None else m.wrong_bytes, None if m is None else str(m))
    return t


def verify(buf, src: int, dst: int, iteration: int) -> Mismatch | None:
    """None if `buf` holds exactly the pattern, else where and how it differs."""
    xp = _xp_of(buf)
    nbytes = len(buf)
    want = _pattern(nbytes, (src, dst, iteration), xp)
    diff = buf != want
    wrong = int(xp.count_nonzero(diff))  # on cupy only scalars cross to the host
    if wrong == 0:
        return None
    offset = int(xp.argmax(diff))
    return Mismatch(offset, int(want[offset]), int(buf[offset]), wrong, nbytes)


def flip_bit(buf, offset: int, bit: int = 0) -> None:
    """Flip one bit of byte `offset` in place."""
    if not 0 <= bit <= 7:
        raise ValueError(f"bit must be 0..7, got {bit}")
    if not 0 <= offset < len(buf):
        raise IndexError(f"offset {offset} outside buffer of {len(buf)} bytes")
    buf[offset] ^= numpy.uint8(1 << bit)


def corrupt_for_test(buf) -> bool:
    """Test hook: flip the bit named by $ACCEPTANCE_TEST_FLIP_BIT ("OFFSET" or
    "OFFSET:BIT") if OFFSET lies inside `buf`. Engines call this just before
    verify() so a suite can prove it catches corruption. Returns whether it flipped.
    """
    value = os.environ.get(FLIP_ENV, "").strip()
    if not value:
        return False
    offset_s, colon, bit_s = value.partition(":")
    try:
        offset = int(offset_s)
        bit = int(bit_s) if colon else 0
    except ValueError:
        offset = bit = -1
    if offset < 0 or not 0 <= bit <= 7:
        raise ValueError(
            f"{FLIP_ENV}={value!r}: expected OFFSET or OFFSET:BIT "
            "(OFFSET >= 0, BIT 0..7)"
        )
    if offset >= len(buf):
        return False
    flip_bit(buf, offset, bit)
    return True
