"""Which timed iterations are verified, and the tally of what they delivered.

A verified iteration has its destination poisoned before it (a value the expected result can
never hold) and its source given content of its own (a seed per iteration), both outside the
timed region, and is compared exactly after it, also outside. So a dropped operation leaves the
poison, a stale one the previous iteration's content, a half one a poisoned tail. A size whose
timed loop moves little data has every iteration verified; a larger one its last iteration and a
seeded sample of the others (docs/methodology.md "Data integrity").
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .timing import GcOff


@dataclass(frozen=True)
class Policy:
    """[verify] of the profile: every_max bytes per size checked in full, else samples + the last."""

    every_max: int = 256 << 20
    samples: int = 8
    slot_region: int = 64 << 20

    @classmethod
    def from_profile(cls, profile) -> Policy:
        return cls(profile.get("verify.every_max"), profile.get("verify.samples"),
                   profile.get("verify.slot_region"))

    def iterations(self, iters: int, bytes_per_iter: int, seed: int) -> frozenset[int]:
        """The timed iteration indices to verify: all of them when iters x bytes_per_iter is at most
        every_max, else the last one and `samples` others drawn with `seed` (the same on every rank)."""
        if iters <= 0:
            return frozenset()
        if iters * max(bytes_per_iter, 1) <= self.every_max or iters - 1 <= self.samples:
            return frozenset(range(iters))
        rng = np.random.default_rng(seed)
        picked = rng.choice(iters - 1, size=self.samples, replace=False)
        return frozenset(int(i) for i in picked) | {iters - 1}

    def slots(self, size: int, window: int) -> int:
        """Distinct destination slots for the `window` writes of one iteration: every write its own
        place while window x size fits in slot_region, fewer (at least 1) above."""
        return max(1, min(window, self.slot_region // max(size, 1)))


@dataclass
class Tally:
    """Verified operations of one measurement: how many, how many failed, and how badly."""

    ops: int = 0            # operations verified
    failed: int = 0         # of them, not delivered exactly
    missing: int = 0        # of the failed, those whose destination still held the poison (never arrived)
    wrong: int = 0          # wrong bytes (or elements, for collectives) over all verified operations
    first: str | None = None  # the first wrong one, in words
    failed_iterations: list[int] = field(default_factory=list)
    missing_iterations: list[int] = field(default_factory=list)

    def add(self, iteration: int, ops: int, failed: int, missing: int, wrong: int, first: str | None) -> None:
        self.ops += ops
        self.failed += failed
        self.missing += missing
        self.wrong += wrong
        if missing:
            self.missing_iterations.append(iteration)
        if failed:
            self.failed_iterations.append(iteration)
            if self.first is None:
                self.first = first or f"iteration {iteration}"

    def merge(self, other: Tally) -> None:
        self.ops += other.ops
        self.failed += other.failed
        self.missing += other.missing
        self.wrong += other.wrong
        self.failed_iterations += other.failed_iterations
        self.missing_iterations += other.missing_iterations
        if self.first is None:
            self.first = other.first

    def summary(self, what: str, unit: str = "bytes") -> str | None:
        """"3 of 40 writes did not arrive; 1 more arrived wrong: 12289 wrong bytes; first: ..." (None when
        all were exact)."""
        if not self.failed:
            return None
        parts = []
        if self.missing:
            parts.append(f"{self.missing} of {self.ops} {what} did not arrive")
        if self.failed - self.missing:
            more = " more" if self.missing else f" of {self.ops} {what}"
            parts.append(f"{self.failed - self.missing}{more} arrived wrong")
        unit = unit[:-1] if self.wrong == 1 and unit.endswith("s") else unit
        return "; ".join(parts) + f": {self.wrong} wrong {unit}" + (f"; first: {self.first}" if self.first else "")

    def fields(self) -> dict:
        """The record fields that carry the counts (results.OPTIONAL_KEYS)."""
        return {"ops": self.ops, "ops_failed": self.failed, "ops_missing": self.missing}


def timed_verified(op: Callable[[], object], iters: int, warmup: int, verified: frozenset[int],
                   before: Callable[[int], None], after: Callable[[int, bool], None],
                   budget_ns: int | None = None, min_iters: int = 1) -> np.ndarray:
    """Per-iteration ns of op(), as drivers.timing.timed / timed_capped; before(i) and after(i, last)
    run around each verified iteration i, outside its timer.

    With budget_ns the loop stops once the timed iterations add up to it (after min_iters); the
    iteration that ends the loop is always verified (before() runs ahead of it when the budget is
    already spent), so `last` tells the other side of a two-sided check that no more will come.
    """
    out = np.empty(max(iters, 0), dtype=np.int64)
    buf = memoryview(out)
    now = time.perf_counter_ns
    spent, done = 0, iters
    with GcOff():
        for _ in itertools.repeat(None, warmup):
            op()
        for i in range(iters):
            over = budget_ns is not None and spent >= budget_ns and i >= min_iters
            check = i in verified or i == iters - 1 or over
            if check:
                before(i)
            t0 = now()
            op()
            t = now() - t0
            buf[i] = t
            spent += t
            if check:
                last = over or i == iters - 1
                after(i, last)
                if last:
                    done = i + 1
                    break
    return out[:done]


# ---- windowed writes: every write its own slot, checked by the target in batches -------------


@dataclass(frozen=True)
class Slots:
    """Where the writes of a bandwidth loop land: iteration t of a batch writes its `per_iter` slots
    t*per_iter ..., so every write of a batch has its own place and content. A verified batch has
    its slots poisoned before it and compared after it (both untimed); puts beyond per_iter in one
    iteration (window x size above the link's memory) reuse that iteration's slots."""

    size: int
    per_iter: int          # distinct slots one iteration writes (<= window)
    iters_per_batch: int   # iterations of one batch
    window: int

    @classmethod
    def plan(cls, size: int, window: int, iters: int, capacity: int) -> Slots:
        fit = max(1, capacity // max(size, 1))
        per_iter = min(window, fit)
        return cls(size, per_iter, max(1, min(iters, fit // per_iter)), window)

    @property
    def bytes(self) -> int:
        return self.size * self.per_iter * self.iters_per_batch

    def offsets(self, t: int) -> list[int]:
        """Byte offsets of the `window` writes of iteration t of a batch."""
        base = t * self.per_iter
        return [(base + j % self.per_iter) * self.size for j in range(self.window)]

    def batches(self, iters: int) -> int:
        return -(-iters // self.iters_per_batch)


def batched(op_at: Callable[[int], Callable[[], None]], iters: int, warmup: int, slots: Slots,
            verified: frozenset[int], before: Callable[[int], None], after: Callable[[int, int, bool], None],
            budget_ns: int | None = None, min_iters: int = 1) -> np.ndarray:
    """Per-iteration ns of a loop whose iteration t of a batch is op_at(t)(); before(batch) and
    after(batch, slots written, last) run around each verified batch, outside the timers.

    The last batch is always verified. With budget_ns the loop stops once the timed iterations add
    up to it (after min_iters); if that happens inside a batch that is not verified, one more
    iteration runs as a verified batch of its own, so the loop always ends checked.
    """
    ops = [op_at(t) for t in range(slots.iters_per_batch)]
    out = np.empty(max(iters, 0), dtype=np.int64)
    buf = memoryview(out)
    now = time.perf_counter_ns
    spent, i, batch, force = 0, 0, 0, False
    with GcOff():
        for _ in itertools.repeat(None, warmup):
            ops[0]()
        while i < iters:
            first = i
            end = first + 1 if force else min(iters, first + slots.iters_per_batch)
            check = force or batch in verified or end == iters
            if check:
                before(batch)
            cut = False
            while i < end:
                t0 = now()
                ops[i - first]()
                t = now() - t0
                buf[i] = t
                spent += t
                i += 1
                if budget_ns is not None and spent >= budget_ns and i >= min_iters:
                    cut = True
                    break
            if check:
                after(batch, (i - first) * slots.per_iter, cut or i == iters)
                if cut:
                    break
            elif cut:
                force = True
            batch += 1
    return out[:i]


class WriteCheck:
    """The two-sided protocol of a verified windowed-write loop over a pair communicator.

    The origin drives (origin_loop()): before a verified batch it fills its source slots with
    content of their own (fill(batch)) and tells the target, which poisons its slots
    (poison(batch)); after the batch it tells the target how many slots were written, and the
    target compares them (check(batch, slots) -> Tally). A batch's seed part is its number.
    Messages are pickled bcasts and Barriers, all untimed; pause()/resume() bracket them on the
    origin (an MPI engine leaves its access epoch there). An error on the origin is announced
    ("abort"), so the target never waits for a batch that will not come.
    """

    def __init__(self, comm, origin: int, slots: Slots, verified_batches: frozenset[int]):
        self.comm, self.origin, self.slots, self.verified = comm, origin, slots, verified_batches

    @classmethod
    def planned(cls, comm, origin: int, slots: Slots, iters: int, policy: Policy | None,
                seed: tuple[int, ...]) -> WriteCheck:
        """The batches `policy` verifies (default Policy()), drawn from the measurement's seed."""
        return cls(comm, origin, slots, planned_batches(slots, iters, policy, seed))

    def _say(self, msg) -> None:
        self.comm.bcast(msg, root=self.origin)
        self.comm.Barrier()

    def origin_loop(self, op_at: Callable[[int], Callable[[], None]], iters: int, warmup: int,
                    fill: Callable[[int], None], pause: Callable[[], None], resume: Callable[[], None],
                    budget_ns: int | None = None, min_iters: int = 1) -> np.ndarray:
        """Per-iteration ns of the windowed writes; op_at(t) is iteration t (of its batch)'s op."""
        ended = False

        def before(batch: int) -> None:
            pause()
            fill(batch)
            self._say(("start", batch))
            resume()

        def after(batch: int, written: int, last: bool) -> None:
            nonlocal ended
            pause()
            self._say(("end", batch, written, last))
            ended = last
            resume()

        try:
            times = batched(op_at, iters, warmup, self.slots, self.verified, before, after, budget_ns, min_iters)
        except BaseException:
            if not ended:
                self._say(("abort",))
            raise
        if not ended:  # no timed iterations at all
            self._say(("end", -1, 0, True))
        return times

    def target_loop(self, poison: Callable[[int], None], check: Callable[[int, int], Tally]) -> Tally:
        """The target's side: poison and check on the origin's word, until its last batch."""
        tally = Tally()
        while True:
            msg = self.comm.bcast(None, root=self.origin)
            if msg[0] == "start":
                poison(msg[1])
            elif msg[0] == "end" and msg[2]:
                tally.merge(check(msg[1], msg[2]))
            self.comm.Barrier()
            if msg[0] == "abort" or (msg[0] == "end" and msg[3]):
                return tally


def planned_batches(slots: Slots, iters: int, policy: Policy | None, seed: tuple[int, ...]) -> frozenset[int]:
    """The batches `policy` (default Policy()) verifies, drawn with the measurement's seed: the same
    draw on every rank (ints hash alike in every process)."""
    draw = hash(tuple(seed) + (slots.size,)) & 0xFFFF_FFFF
    return (policy or Policy()).iterations(slots.batches(iters), slots.bytes, draw)
