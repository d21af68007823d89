"""What rank 0 says while the suites run: every EVERY_S seconds, the test in hand (k of N, its suite),
its round on rank 0's rail (drivers.p2p.RailPairs reports each), the time elapsed and the time left by
the plan's estimate (`acceptance run` passes it in ENV_ESTIMATE), on rank 0's terminal and in the run
folder's status.json, rewritten whole each time, so that an operator (or a script) can see how far a
long run is without reading its logs. A run that ends removes it; one that dies keeps its last."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from ..rules.units import human_seconds

EVERY_S = 20.0  # a line at least every 30 s
ENV_ESTIMATE = "ACCEPTANCE_ESTIMATE_S"  # the plan's estimate of this launch's pass, in seconds
STATUS_FILE = "status.json"

_round: tuple[int, int, str] | None = None  # (rounds begun, rounds, which) of the test in hand


def round_begun(k: int, total: int, which: str = "round") -> None:
    """Round k (1-based) of `total` of this rank's rail began (rank 0's is the one shown)."""
    global _round
    _round = (k, total, which)


class Status:
    """Rank 0's reporter: a thread that writes the status every EVERY_S seconds until stopped."""

    def __init__(self, folder: Path, out, estimate_s: float | None, every_s: float = EVERY_S):
        self.folder, self.out, self.estimate_s, self.every_s = Path(folder), out, estimate_s, every_s
        self.started = time.monotonic()
        self.test: str | None = None
        self.suite: str | None = None
        self.index, self.tests = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="acceptance-status", daemon=True)

    def start(self, tests: int) -> None:
        self.tests = tests
        self._thread.start()

    def begin(self, test: str, suite: str, index: int) -> None:
        global _round
        self.test, self.suite, self.index = test, suite, index
        _round = None

    def stop(self) -> None:
        """The run ended (every rank agreed on its code): no more lines, and no status.json left behind,
        whose place is the run's own files then (a run that dies keeps its last one: where it was)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        (self.folder / STATUS_FILE).unlink(missing_ok=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.write()
            except OSError:
                pass  # a full or vanished disk must not stop the run; the terminal line is lost too

    def now(self) -> dict:
        elapsed = time.monotonic() - self.started
        current = _round
        return {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "elapsed_s": round(elapsed, 1),
                "test": self.test, "suite": self.suite, "test_index": self.index, "tests": self.tests,
                "round": current[0] if current else None, "rounds": current[1] if current else None,
                "round_kind": current[2] if current else None,
                "left_s": round(max(0.0, self.estimate_s - elapsed), 1) if self.estimate_s is not None else None,
                "estimate_s": self.estimate_s}

    def write(self) -> dict:
        state = self.now()
        tmp = self.folder / f".{STATUS_FILE}.tmp"
        tmp.write_text(json.dumps(state) + "\n")
        os.replace(tmp, self.folder / STATUS_FILE)
        print(f"\nacceptance: {self.line(state)}", file=self.out, flush=True)
        return state

    @staticmethod
    def line(state: dict) -> str:
        parts = [f"{human_seconds(state['elapsed_s'])} elapsed"]
        if state["test"]:
            parts.append(f"test {state['test_index']} of {state['tests']} ({state['suite']}: {state['test']})")
        if state["round"]:
            parts.append(f"{state['round_kind']} {state['round']} of {state['rounds']}")
        if state["estimate_s"] is not None:
            over = state["elapsed_s"] - state["estimate_s"]
            parts.append(f"about {human_seconds(state['left_s'])} left by the plan" if over <= 0
                         else f"{human_seconds(over)} past the plan's estimate")
        return "; ".join(parts)
