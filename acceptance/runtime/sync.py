"""Deadline-guarded agreement among MPI ranks.

Every rank sends a payload to rank 0; rank 0 waits for all of them until a
deadline, merges them and sends one decision back. Unlike a plain gather, a
missed deadline tells rank 0 exactly which ranks did not arrive, which is what
a hang report must name. All traffic runs on a private duplicate of the world
communicator so it never mixes with the traffic of the tests.
"""

from __future__ import annotations

import pickle
import threading
import time
from typing import Any, Callable

from mpi4py import MPI

from .pulse import pause

_UP, _DOWN, _NOTE = 7101, 7102, 7103
_POLL_S = 0.001


class Missing(Exception):
    """Rank 0 gave up waiting: `ranks` never reached the sync point."""

    def __init__(self, label: str, ranks: list[int], arrived: dict[int, Any]):
        super().__init__(f"ranks {ranks} did not reach {label}")
        self.label = label
        self.ranks = ranks
        self.arrived = arrived


class RootLost(Exception):
    """A rank other than 0 got no decision from rank 0 in time."""


class Agreement:
    def __init__(self, world: MPI.Comm):
        self.comm = world.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        # Rank 0 keeps what arrived for the sync point in progress, so a
        # watchdog thread can name the missing ranks while the main thread is
        # still inside a test.
        self._arrived: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._keep: Callable[[int, Any], Any] | None = None  # the agreement in progress's, on rank 0
        self.merging = False  # rank 0: every rank arrived and merge() runs

    def agree(self, payload: Any, merge: Callable[[dict[int, Any]], Any], deadline: Callable[[], float],
              label: str, grace: float = 15.0, poll: Callable[[], None] = lambda: None,
              arrival: Callable[[], None] = lambda: None, keep: Callable[[int, Any], Any] | None = None) -> Any:
        """Return merge({rank: payload}) as computed on rank 0, on every rank.

        deadline() is a time.monotonic() value, asked again on every poll (progress
        elsewhere in the job moves it). Rank 0 raises Missing after it; other ranks wait
        `grace` seconds longer (rank 0 normally aborts the job first) and then raise
        RootLost. poll() runs between polls; arrival() on rank 0 when ranks arrived. keep(rank,
        payload), on rank 0, is what is kept of a payload as it arrives during this call (one that arrived
        before, drained by a watchdog, is kept whole): rank 0 then holds one rank's payload at a time,
        not every rank's until the last one arrives.
        """
        if self.size == 1:
            return merge({0: payload})
        if self.rank != 0:
            req = self.comm.isend(payload, dest=0, tag=_UP)
            decision = self._await_decision(lambda: deadline() + grace, label, poll)
            req.wait()
            return decision
        with self._lock:
            self._keep = keep
            self._arrived[0] = keep(0, payload) if keep else payload  # keep what a watchdog already drained
        try:
            self._collect(deadline, poll, arrival)
        finally:
            with self._lock:
                self._keep = None
        if len(self._arrived) < self.size:
            missing = sorted(set(range(self.size)) - set(self._arrived))
            raise Missing(label, missing, dict(self._arrived))
        self.merging = True
        try:
            decision = merge(self._arrived)
        finally:
            self.merging = False
        with self._lock:
            self._arrived = {}
        # Pickled once, every send sharing the buffer: comm.isend would pickle (and hold until sent)
        # a copy per rank, O(ranks x decision) in rank 0's memory.
        data = pickle.dumps(decision, pickle.HIGHEST_PROTOCOL)
        reqs = [self.comm.Isend([data, MPI.BYTE], dest=r, tag=_DOWN) for r in range(1, self.size)]
        MPI.Request.Waitall(reqs)
        return decision

    def arrived(self, settle: float = 0.5) -> dict[int, Any]:
        """Rank 0: the payloads of the ranks that have reached the sync point in progress.

        Polls for `settle` seconds: a rank whose main thread has not called
        MPI for a while has not driven progress, so messages already sent
        may only show up after a few probes.
        """
        end = time.monotonic() + settle
        while len(self._arrived) < self.size and time.monotonic() < end:
            self._drain()
            time.sleep(_POLL_S)
        return dict(self._arrived)

    def arrived_so_far(self) -> dict[int, Any]:
        """Rank 0: what the main thread has received for the sync point in progress, without MPI."""
        with self._lock:
            return dict(self._arrived)

    def send_note(self, label: str, note: Any) -> None:
        """A rank other than 0 tells rank 0 where it is at the sync point `label`, outside any agreement."""
        if self.rank != 0:
            self.comm.isend((label, note), dest=0, tag=_NOTE)

    def collect_notes(self, wait: float, label: str) -> dict[int, Any]:
        """Rank 0: the notes about `label` that arrive within `wait` seconds, by rank (older
        notes, about a phase that went on after all, are dropped)."""
        notes: dict[int, Any] = {}
        status = MPI.Status()
        end = time.monotonic() + wait
        while len(notes) < self.size - 1 and time.monotonic() < end:
            msg = self.comm.improbe(source=MPI.ANY_SOURCE, tag=_NOTE, status=status)
            if msg is None:
                time.sleep(_POLL_S)
                continue
            about, note = msg.recv()
            if about == label:
                notes[status.Get_source()] = note
        return notes

    def _drain(self) -> bool:
        got = False
        status = MPI.Status()
        with self._lock:
            while True:
                msg = self.comm.improbe(source=MPI.ANY_SOURCE, tag=_UP, status=status)
                if msg is None:
                    return got
                source, payload = status.Get_source(), msg.recv()
                self._arrived[source] = self._keep(source, payload) if self._keep else payload
                got = True

    def _collect(self, deadline: Callable[[], float], poll: Callable[[], None],
                 arrival: Callable[[], None]) -> None:
        delay = _POLL_S
        while len(self._arrived) < self.size:
            if self._drain():
                arrival()
                delay = _POLL_S
                continue
            poll()
            if time.monotonic() >= deadline():
                return
            delay = pause(delay)

    def _await_decision(self, deadline: Callable[[], float], label: str, poll: Callable[[], None]) -> Any:
        delay = _POLL_S
        status = MPI.Status()
        while not self.comm.iprobe(source=0, tag=_DOWN, status=status):
            poll()
            if time.monotonic() >= deadline():
                raise RootLost(f"rank 0 sent no decision for {label}")
            delay = pause(delay)
        data = bytearray(status.Get_count(MPI.BYTE))
        self.comm.Recv([data, MPI.BYTE], source=0, tag=_DOWN)
        return pickle.loads(data)
