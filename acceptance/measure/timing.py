"""Timing loops for Python-driven measurements.

Methodology §4: use perf_counter_ns (integer ns; floats lose ns resolution), keep
GC out of the timed region (as timeit does), preallocate an int64 array and store
only deltas, so Python bookkeeping adds as little as possible to a µs-scale sample.
"""
from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable

import numpy as np


class GcOff:
    """Disable GC for a block and restore the previous state, even on an exception."""

    def __enter__(self):
        self.was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was_enabled:
            gc.enable()


def timed(op: Callable[[], object], iters: int, warmup: int = 0,
          out: np.ndarray | None = None) -> np.ndarray:
    """Per-iteration ns of op(), after `warmup` untimed calls; a view of `out` when given."""
    if iters < 0 or warmup < 0:
        raise ValueError(f"iters and warmup must be >= 0, got iters={iters}, warmup={warmup}")
    if out is None:
        out = np.empty(iters, dtype=np.int64)
    elif out.dtype != np.int64 or out.ndim != 1 or len(out) < iters:
        raise ValueError(f"out must be a 1-D int64 array of length >= {iters}, "
                         f"got {out.dtype} with shape {out.shape}")
    # Item assignment through a memoryview is ~15 ns cheaper than numpy's __setitem__
    # and writes the same memory.
    buf = memoryview(out)
    now = time.perf_counter_ns
    with GcOff():
        for _ in itertools.repeat(None, warmup):
            op()
        for i in range(iters):
            t0 = now()
            op()
            buf[i] = now() - t0
    return out[:iters]


def timed_sequence(ops) -> np.ndarray:
    """Per-iteration ns of ops[0](), ops[1](), ...: one op per sample, each with its own buffers."""
    out = np.empty(len(ops), dtype=np.int64)
    buf = memoryview(out)
    now = time.perf_counter_ns
    with GcOff():
        for i, op in enumerate(ops):
            t0 = now()
            op()
            buf[i] = now() - t0
    return out


def timed_capped(op: Callable[[], object], iters: int, warmup: int, budget_ns: int,
                 min_iters: int = 1) -> np.ndarray:
    """As timed(), but stops once the timed iterations add up to budget_ns (after min_iters).

    perftest's -D idea for one-sided bandwidth: a crippled link costs seconds, not
    hours. Only for loops one rank runs alone (an origin's puts): ranks of a
    collective must all run the same number of iterations.
    """
    if iters < 0 or warmup < 0 or min_iters < 0:
        raise ValueError(f"iters, warmup and min_iters must be >= 0, got {iters}, {warmup}, {min_iters}")
    out = np.empty(iters, dtype=np.int64)
    buf = memoryview(out)
    now = time.perf_counter_ns
    spent = 0
    done = iters
    with GcOff():
        for _ in itertools.repeat(None, warmup):
            op()
        for i in range(iters):
            t0 = now()
            op()
            t = now() - t0
            buf[i] = t
            spent += t
            if spent >= budget_ns and i + 1 >= min_iters:
                done = i + 1
                break
    return out[:done]


def timed_total(op: Callable[[], object], iters: int, warmup: int = 0) -> int:
    """ns for `iters` back-to-back calls of op() under one timer pair.

    Divide by iters for nccl-tests' "time": the mean pipelined time per op
    (src/common.cu BenchTime), not a latency distribution.
    """
    if iters < 0 or warmup < 0:
        raise ValueError(f"iters and warmup must be >= 0, got iters={iters}, warmup={warmup}")
    now = time.perf_counter_ns
    repeat = itertools.repeat
    with GcOff():
        for _ in repeat(None, warmup):
            op()
        t0 = now()
        for _ in repeat(None, iters):
            op()
        return now() - t0
