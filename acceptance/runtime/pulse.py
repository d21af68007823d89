"""The job's pulse: one rank's progress keeps every rank's hang deadline alive.

A long test often keeps only some ranks busy (the ranks of the rail being
measured); the others wait, at the sync point or in an idle barrier. The hang
deadline is the job's, not a rank's: a HANG means no rank made progress for
`hang_timeout`. So progress travels:

- up: a rank that calls progress() sends rank 0 a beat (at most one per
  `period`, so a tight loop of steps costs a clock read per step);
- down: rank 0, having seen progress (its own, a beat, a rank arriving at the
  sync point), sends every other rank a keepalive, again at most once per
  period.

Both are drained in the main thread only (progress(), idle waits, the sync
point's poll loop), so no MPI call is made from another thread for them.
Waiting ranks sleep between polls (a growing sleep up to MAX_SLEEP_S), so an
oversubscribed node is not slowed by the harness itself;
ACCEPTANCE_WAIT=spin waits in blocking MPI calls instead (a benchmark's
baseline).
"""

from __future__ import annotations

import os
import time
from typing import Callable

from mpi4py import MPI

_BEAT, _KEEP = 7104, 7105
MIN_SLEEP_S = 0.001
MAX_SLEEP_S = 0.02
# At most this long between beats (and between keepalives): well inside the grace a waiting rank gives rank 0.
MAX_PERIOD_S = 5.0
SPIN = os.environ.get("ACCEPTANCE_WAIT", "sleep") == "spin"


def pause(delay: float) -> float:
    """Sleep `delay` (not when spinning) and return the next, longer delay."""
    if not SPIN:
        time.sleep(delay)
    return min(delay * 2, MAX_SLEEP_S)


class Pulse:
    def __init__(self, comm: MPI.Comm, on_progress: Callable[[], None]):
        """`comm` is private to the harness (the agreement's); on_progress(): the job made progress,
        restart this rank's deadline."""
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.on_progress = on_progress
        self.period = MAX_PERIOD_S
        self._sent = 0.0        # when this rank last sent a beat (or rank 0 keepalives)
        self._seen = 0.0        # rank 0: when it last saw progress
        self._relayed = 0.0     # rank 0: the progress time its last keepalives carried
        self._reqs: list[MPI.Request] = []

    def set_timeout(self, timeout: float) -> None:
        self.period = min(max(timeout / 4, 0.05), MAX_PERIOD_S)

    def beat(self) -> None:
        """This rank made progress (main thread)."""
        now = time.monotonic()
        if self.rank == 0:
            self._seen = now
        elif now - self._sent >= self.period:
            self._send(0, _BEAT)
            self._sent = now
        self.pump()

    def seen(self) -> None:
        """Rank 0: progress observed by the caller (a rank arrived at the sync point)."""
        self._seen = time.monotonic()
        self.on_progress()

    def pump(self) -> None:
        """Drain what arrived; rank 0 relays progress to everyone when due (main thread)."""
        if self.size == 1:
            return
        if self._drain(_BEAT if self.rank == 0 else _KEEP):
            if self.rank == 0:
                self._seen = time.monotonic()
            self.on_progress()
        now = time.monotonic()
        if self.rank == 0 and self._seen > self._relayed and now - self._sent >= self.period:
            # One pass over the sends still pending, not one per rank: O(N^2) Tests at thousands of ranks.
            self._reqs = [r for r in self._reqs if not r.Test()]
            self._reqs += [self.comm.isend(None, dest=r, tag=_KEEP) for r in range(1, self.size)]
            self._sent, self._relayed = now, self._seen

    def wait(self, comm: MPI.Comm) -> None:
        """A barrier over `comm` for a rank with nothing to do: sleeps between polls and keeps
        this rank's deadline in step with the job's progress."""
        if SPIN:
            comm.Barrier()
            return
        self.wait_for(comm.Ibarrier())

    def wait_for(self, req: MPI.Request) -> None:
        """Until `req` (a nonblocking collective this rank entered) completes, as wait() does."""
        if SPIN:
            req.Wait()
            return
        delay = MIN_SLEEP_S
        while not req.Test():
            self.pump()
            delay = pause(delay)

    def _send(self, dest: int, tag: int) -> None:
        self._reqs = [r for r in self._reqs if not r.Test()]
        self._reqs.append(self.comm.isend(None, dest=dest, tag=tag))

    def _drain(self, tag: int) -> bool:
        got = False
        while (msg := self.comm.improbe(source=MPI.ANY_SOURCE, tag=tag)) is not None:
            msg.recv()
            got = True
        return got


class _Alone:
    """Outside the collective plugin (a unit test, a benchmark): waiting is a plain barrier."""

    def beat(self) -> None:
        pass

    def pump(self) -> None:
        pass

    def wait(self, comm: MPI.Comm) -> None:
        comm.Barrier()

    def wait_for(self, req: MPI.Request) -> None:
        req.Wait()


_current: Pulse | _Alone = _Alone()


def install(pulse: Pulse) -> None:
    """The plugin's pulse becomes the one idle waits use (one per process)."""
    global _current
    _current = pulse


def wait(comm: MPI.Comm) -> None:
    """An idle rank's barrier over `comm` (see Pulse.wait)."""
    _current.wait(comm)


def wait_for(req: MPI.Request) -> None:
    """An idle rank's wait for a nonblocking collective it entered (see Pulse.wait_for)."""
    _current.wait_for(req)
