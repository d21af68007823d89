"""Fault-injecting transports for the mutation tests of the data checks, at the engine boundary.

FaultyComm and FaultyWin wrap a real mpi4py communicator or window; past `onset` calls, every
`every`-th call of the chosen method misbehaves:
  drop   returns at once, as if done (MPI_SUCCESS, nothing moved)
  half   moves the first half of the data only (an atomic: applies the add, returns nothing)
  flip   moves the data with one bit flipped
  stale  moves what the previous call carried (a stale buffer)
Everything else is the real call. The PMPI interposer (tests/data/pmpi_drop.c) does "drop" below
mpi4py, in the MPI library's own symbols.
"""

from __future__ import annotations

import numpy as np

MODES = ("drop", "half", "flip", "stale")


class _Fault:
    def __init__(self, mode: str, every: int = 2, onset: int = 0):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode, self.every, self.onset = mode, every, onset
        self.calls = self.faults = 0

    def now(self) -> bool:
        """Whether this call misbehaves."""
        self.calls += 1
        hit = self.calls > self.onset and (self.calls - self.onset) % self.every == 0
        self.faults += hit
        return hit


def _array(spec) -> np.ndarray:
    """The numpy array of an mpi4py buffer spec ([array, type] or [array, count, type])."""
    return spec[0] if isinstance(spec, (list, tuple)) else spec


class FaultyComm:
    """A communicator whose `method` (Allreduce or Alltoall) misbehaves."""

    def __init__(self, comm, method: str, mode: str, every: int = 2, onset: int = 0):
        self._comm, self._method, self.fault = comm, method, _Fault(mode, every, onset)
        self._last: np.ndarray | None = None
        real = getattr(comm, method)

        def call(send, recv, *args, **kwargs):
            out = _array(recv)
            hit = self.fault.now()
            if hit and self.fault.mode == "drop":
                return None
            before = out.copy()
            real(send, recv, *args, **kwargs)
            result = out.copy()
            if hit:
                flat = out.view(np.uint8).reshape(-1)
                if self.fault.mode == "half":
                    out.reshape(-1)[len(out.reshape(-1)) // 2:] = before.reshape(-1)[len(out.reshape(-1)) // 2:]
                elif self.fault.mode == "flip":
                    flat[len(flat) // 3] ^= 1 << 4
                elif self._last is not None and self._last.shape == out.shape:
                    out[...] = self._last
            self._last = result
            return None

        setattr(self, method, call)

    def __getattr__(self, name):
        return getattr(self._comm, name)


class FaultyWin:
    """An RMA window whose Put, Get or Fetch_and_op misbehaves (origin-side buffers only)."""

    def __init__(self, win, method: str, mode: str, every: int = 2, onset: int = 0):
        self._win, self.fault = win, _Fault(mode, every, onset)
        self._keep: list = []  # buffers an altered call hands to MPI live until the next Flush
        self._last: np.ndarray | None = None
        real = getattr(win, method)

        def fetch(origin, result, rank, *args, **kwargs):
            hit = self.fault.now()
            if hit and self.fault.mode == "drop":
                return None
            if hit and self.fault.mode == "half":  # the add lands, its old value never comes back
                self._keep.append(np.zeros_like(_array(result)))
                return real(origin, [self._keep[-1], result[-1]], rank, *args, **kwargs)
            real(origin, result, rank, *args, **kwargs)
            got = _array(result)
            if hit:
                self._win.Flush(rank)
                flat = got.view(np.uint8).reshape(-1)
                if self.fault.mode == "half":
                    flat[len(flat) // 2:] = 0
                elif self.fault.mode == "flip":
                    flat[0] ^= 1 << 4
                elif self._last is not None:
                    got[...] = self._last
            self._last = got.copy()
            return None

        def call(origin, rank, *args, **kwargs):
            hit = self.fault.now()
            data = _array(origin)
            previous, self._last = self._last, np.array(data, copy=True)
            if not hit:
                return real(origin, rank, *args, **kwargs)
            if self.fault.mode == "drop":
                return None
            if method == "Get":  # the origin buffer is the destination: alter what arrived
                real(origin, rank, *args, **kwargs)
                self._win.Flush(rank)
                flat = data.view(np.uint8).reshape(-1)
                if self.fault.mode == "half":
                    flat[len(flat) // 2:] = previous.view(np.uint8).reshape(-1)[len(flat) // 2:] \
                        if previous is not None and previous.shape == data.shape else 0
                elif self.fault.mode == "flip":
                    flat[len(flat) // 3] ^= 1 << 4
                elif previous is not None and previous.shape == data.shape:
                    data[...] = previous
                return None
            flat = np.array(data, copy=True).view(np.uint8).reshape(-1)
            if self.fault.mode == "half":
                flat = flat[:max(1, len(flat) // 2)]
            elif self.fault.mode == "flip":
                flat[len(flat) // 3] ^= 1 << 4
            elif previous is not None and previous.nbytes == data.nbytes:
                flat = previous.view(np.uint8).reshape(-1).copy()
            self._keep.append(flat)
            spec = [flat, origin[-1]] if isinstance(origin, (list, tuple)) else flat
            return real(spec, rank, *args, **kwargs)

        setattr(self, method, fetch if method == "Fetch_and_op" else call)

    def Flush(self, rank):
        self._win.Flush(rank)
        self._keep.clear()

    def __getattr__(self, name):
        return getattr(self._win, name)
