"""A per-rank deadline thread for the test phase in progress.

The main thread may be blocked inside an MPI call (mpi4py releases the GIL
there), so a plain Python thread still runs and can report and abort. Each
armed phase has stages: (seconds after the deadline, callback); a stage fires
only if the phase is still armed when its time comes.
"""

from __future__ import annotations

import faulthandler
import threading
import time
from dataclasses import dataclass
from typing import Callable, TextIO


@dataclass(frozen=True)
class Phase:
    nodeid: str
    when: str          # census, collection, setup, call, teardown, sessionfinish
    timeout: float     # seconds
    deadline: float    # time.monotonic()

    @property
    def label(self) -> str:
        return f"{self.nodeid} ({self.when})"


Stage = tuple[float, Callable[[Phase], None]]

# After the ranks agreed on the exit code, each rank's end (junit.xml, NCCL teardown, MPI_Finalize)
# may take the hang timeout plus this long; `acceptance run` gives its launcher a little more.
END_GRACE_S = 30.0


class Watchdog:
    def __init__(self, stages: list[Stage], backstop_file: TextIO | None = None,
                 backstop_after: Callable[[float], float] | None = None):
        self._stages = sorted(stages, key=lambda s: s[0])
        self._cond = threading.Condition()
        self._phase: Phase | None = None
        self._generation = 0
        # If the GIL is held forever (a C call that never releases it) no
        # Python thread runs; faulthandler's C thread still dumps and exits,
        # backstop_after(timeout) seconds after the phase was (re)armed.
        self._backstop_file = backstop_file
        self._backstop_after = backstop_after
        self._thread = threading.Thread(target=self._run, name="acceptance-watchdog", daemon=True)
        self._thread.start()

    def arm(self, nodeid: str, when: str, timeout: float) -> Phase:
        phase = Phase(nodeid, when, timeout, time.monotonic() + timeout)
        with self._cond:
            self._phase = phase
            self._generation += 1
            self._cond.notify()
        if self._backstop_file is not None and self._backstop_after is not None:
            faulthandler.dump_traceback_later(self._backstop_after(timeout), exit=True,
                                              file=self._backstop_file)
        return phase

    def rearm(self) -> None:
        """Progress: the phase in flight gets a fresh deadline (same timeout)."""
        phase = self._phase
        if phase is not None:
            self.arm(phase.nodeid, phase.when, phase.timeout)

    def disarm(self) -> None:
        with self._cond:
            self._phase = None
            self._generation += 1
            self._cond.notify()
        if self._backstop_file is not None and self._backstop_after is not None:
            faulthandler.cancel_dump_traceback_later()

    @property
    def phase(self) -> Phase | None:
        return self._phase

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._phase is None:
                    self._cond.wait()
                phase, generation = self._phase, self._generation
                pending = list(self._stages)
            while pending:
                after, callback = pending[0]
                with self._cond:
                    while self._generation == generation:
                        remaining = phase.deadline + after - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                    if self._generation != generation:
                        break
                pending.pop(0)
                callback(phase)
            # Each stage fires once per armed phase: wait for the next arm or disarm.
            with self._cond:
                while self._generation == generation:
                    self._cond.wait()
