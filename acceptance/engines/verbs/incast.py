"""IncastGroup on RC queue pairs: K senders RDMA WRITE into one receiver at once.

The same contract and semantics as the mpi engine's IncastGroup (acceptance.engines.contract):
every rank of the group holds one PairLink (acceptance.engines.verbs.link) to every other rank,
connected over 2-rank communicators split from the group's, so a rank holds n-1 queue pairs. The
link between ranks a and b has, on a's side, a window of one sender's area (size x per bytes,
`per` as the mpi engine computes it): where b writes when a is the receiver. In a round every
sender posts windowed RDMA WRITEs into its own area through its link to the receiver (as
ib_write_bw: at most tx_depth in flight, one completion every cq_mod, each write of an iteration
to its own slot), timed per iteration for about budget_s, with no exchange with the receiver
while it runs (an RDMA WRITE needs no CPU at its target); the receiver meanwhile times signaled
writes of probe_size to its first sender, each posted and polled to its completion: a full round
trip, whose acknowledgement comes back through the receiver's flooded port. The receiver poisons
every area before the round and checks every slot after it (a slot written many times holds its
last write).

A failure on one rank is a failure on all: setting up, the timed part and the check each end with
an exchange over the group (agree()), in which the failing rank re-raises its own error and the
others raise VerbsError naming it, so no rank waits in a collective another left. A sender whose
writes get no completion gives up after wr.SPIN_TIMEOUT_S.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ...measure import timed_capped
from ..contract import IncastRound
from ..memory import fill_pattern, poison, slot_tally
from .device import Config
from .errors import VerbsError
from .link import MAX_SLOTS, PairLink

SENDER_ITERS = 1 << 20   # a sender's iteration cap (8 MiB of int64 times), as the mpi engine's
PROBE_WARMUP = 10        # the receiver's untimed probes before its timed ones, as the mpi engine's


def pairings(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of ranks 0..n-1 exactly once, in rounds of disjoint pairs (the circle method: n-1
    rounds for an even n, n for an odd one, where one rank sits each round out). (a, b): a < b."""
    if n < 2:
        return []
    ranks = list(range(n)) + ([None] if n % 2 else [])
    m = len(ranks)
    rounds = []
    for _ in range(m - 1):
        pairs = [(ranks[i], ranks[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None])
        ranks = [ranks[0], ranks[-1], *ranks[1:-1]]
    return rounds


class IncastGroup:
    """A group of ranks (one per node, on one rail) taking turns as the incast receiver, joined by a
    PairLink between every two of them (links[peer] on each rank)."""

    def __init__(self, comm, size: int, window: int = 1, slot_bytes: int = 0, *, config: Config):
        """size: the largest write (incast size or probe size); window x size over n areas as the mpi
        engine fits them into slot_bytes (at most MAX_SLOTS slots, the writes built ahead)."""
        self.comm = comm
        self.me, self.n = comm.Get_rank(), comm.Get_size()
        self.size = max(int(size), 1)
        self.per = max(1, min(int(window), int(slot_bytes) // (self.size * self.n), MAX_SLOTS))
        self.area = self.size * self.per  # one sender's area: each link's buffers
        self.links: dict[int, PairLink] = {}
        self._pair_comms: list = []
        self._closed = False
        try:
            for pairs in pairings(self.n):
                mine = next(((i, a if b == self.me else b) for i, (a, b) in enumerate(pairs)
                             if self.me in (a, b)), None)
                # One Split per round, collective over the group: a pair's two ranks share a color; a
                # rank sitting the round out gets one of its own (a communicator of 1, freed at once).
                color, peer = mine if mine is not None else (len(pairs), None)
                sub = comm.Split(color, 0 if peer is None or self.me < peer else 1)
                error = None
                if peer is None:
                    sub.Free()
                else:
                    self._pair_comms.append(sub)
                    try:
                        self.links[peer] = PairLink(sub, self.area, 0, "host", config=config)
                    except Exception as exc:  # noqa: BLE001 - raised by agree(), the group told
                        error = exc
                self.agree(error)
        except BaseException:
            self.free()
            raise

    def agree(self, error: BaseException | None) -> None:
        """Collective over the group: re-raise our error, or raise VerbsError naming the ranks that failed."""
        text = None if error is None else f"{type(error).__name__}: {error}"
        gathered = self.comm.allgather(text)
        others = [f"group rank {r} failed: {t}" for r, t in enumerate(gathered) if t and r != self.me]
        if error is not None:
            if others and hasattr(error, "add_note"):
                error.add_note("; ".join(others))
            raise error
        if others:
            raise VerbsError(f"incast group of {self.n} (this is group rank {self.me}): " + "; ".join(others))

    def free(self) -> None:
        """Free every link and its pair communicator."""
        if self._closed:
            return
        self._closed = True
        for link in self.links.values():
            link.free()
        self.links.clear()
        for sub in self._pair_comms:
            sub.Free()
        self._pair_comms.clear()

    def round(self, receiver: int, size: int, window: int, budget_s: float, probe_size: int,
              probe_iters: int, seed: Callable[[int], tuple[int, int, int]]) -> IncastRound:
        """All senders write to `receiver` at once for about budget_s; the receiver probes latency meanwhile.

        Collective over the group. seed(sender) is the (source, destination, iteration) of that
        sender's data pattern; the receiver poisons every area before the round and checks every
        slot after it (untimed). A slot written many times is checked for its last write.
        """
        if self._closed:
            raise VerbsError("the incast group was freed")
        if not 0 <= receiver < self.n:
            raise ValueError(f"receiver {receiver} is not a rank of the group of {self.n}")
        if self.n < 2:
            raise ValueError("an incast needs a group of at least 2 ranks")
        for what, value in (("size", size), ("probe size", probe_size)):
            if not 1 <= value <= self.size:
                raise ValueError(f"{what} {value} B outside 1..{self.size} B (the group's size)")
        senders = [r for r in range(self.n) if r != receiver]
        budget_ns = int(budget_s * 1e9)
        per = max(1, min(self.per, window))
        region = per * size
        times = latency = mismatches = None
        with contextlib.ExitStack() as stack:
            error = None
            try:
                if self.me == receiver:
                    for s in senders:
                        poison(self.links[s].window[:region], *seed(s), 0)
                    # The probe rides the receiver's port while the senders flood it: its completion
                    # comes only when the first sender's acknowledgement gets back through.
                    op = self.links[senders[0]].write_probe(stack, probe_size)
                else:
                    link = self.links[receiver]
                    fill_pattern(link.local_buf[:region], *seed(self.me), 0)
                    op = link.write_window(stack, size, per, window)
            except Exception as exc:  # noqa: BLE001 - raised by agree(), the group told
                error = exc
            self.agree(error)  # everyone starts together: that is the incast
            try:
                if self.me != receiver:
                    times = timed_capped(op, SENDER_ITERS, 1, budget_ns, min_iters=2)
                else:
                    latency = timed_capped(op, probe_iters, PROBE_WARMUP, budget_ns, min_iters=1)
            except Exception as exc:  # noqa: BLE001
                error = exc
            self.agree(error)  # every sender's writes are acknowledged: they are in the receiver's memory
            try:
                if self.me == receiver:
                    mismatches = [(s, slot_tally(self.links[s].window[:region], size, *seed(s), 0))
                                  for s in senders]
            except Exception as exc:  # noqa: BLE001
                error = exc
            self.agree(error)
        return IncastRound(times, latency, mismatches)
