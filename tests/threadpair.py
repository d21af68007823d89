"""Threads standing in for the ranks of an mpi4py communicator.

PairLink and the verbs IncastGroup only call Get_size, Get_rank, allgather, bcast, Barrier, Split
and Free on their communicators, so threads can play the ranks: the verbs engine's data path runs
against a simulated device (test_verbs.py, test_verbs_incast.py) or a real one in loopback
(test_verbs_device.py).
"""

import threading
from concurrent.futures import ThreadPoolExecutor


class PairShared:
    """What the n ranks of one communicator share (n = 2: a pair)."""

    def __init__(self, n=2):
        self.n = n
        self.barrier = threading.Barrier(n, timeout=60)
        self.slots = [None] * n
        self.lock = threading.Lock()
        self.children = {}  # (split count, colour) -> PairShared of the communicators Split makes


class ThreadComm:
    """The calls the verbs engine makes on an mpi4py communicator, between threads."""

    def __init__(self, shared, rank):
        self.shared, self.rank, self.splits, self.freed = shared, rank, 0, False

    def Get_size(self):
        return self.shared.n

    def Get_rank(self):
        return self.rank

    def allgather(self, obj):
        self.shared.slots[self.rank] = obj
        self.shared.barrier.wait()
        out = list(self.shared.slots)
        self.shared.barrier.wait()
        return out

    def bcast(self, obj, root=0):
        return self.allgather(obj)[root]

    def Barrier(self):
        self.shared.barrier.wait()

    def Split(self, color, key=0):
        everyone = self.allgather((color, key))
        self.splits += 1
        members = sorted((k, r) for r, (c, k) in enumerate(everyone) if c == color)
        with self.shared.lock:
            shared = self.shared.children.setdefault((self.splits, color), PairShared(len(members)))
        sub = ThreadComm(shared, members.index((key, self.rank)))
        SPLIT.append(sub)
        return sub

    def Free(self):
        self.freed = True


THREAD = threading.local()  # .rank: the rank the current thread plays
SPLIT: list = []  # every communicator Split made: all must be freed


def run_ranks(body, n):
    """body(comm) in n threads as ranks 0..n-1; [(result, exception)] per rank."""
    shared = PairShared(n)

    def as_rank(rank):
        THREAD.rank = rank
        return body(ThreadComm(shared, rank))

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(as_rank, r) for r in range(n)]
        return [(f.result(timeout=120) if f.exception(timeout=120) is None else None, f.exception())
                for f in futures]


def run_pair(body):
    """body(comm) in two threads as pair ranks 0 and 1; [(result, exception)] per rank."""
    return run_ranks(body, 2)
