"""Two threads standing in for the two ranks of an mpi4py pair communicator.

PairLink only calls Get_size, Get_rank, allgather, bcast and Barrier on its communicator, so a
pair of threads can play both ranks: the verbs engine's data path runs against a
simulated device (test_verbs.py) or a real one in loopback (test_verbs_device.py).
"""

import threading
from concurrent.futures import ThreadPoolExecutor


class PairShared:
    def __init__(self):
        self.barrier = threading.Barrier(2, timeout=60)
        self.slots = [None, None]


class ThreadComm:
    """The calls PairLink makes on an mpi4py pair communicator, between two threads."""

    def __init__(self, shared, rank):
        self.shared, self.rank = shared, rank

    def Get_size(self):
        return 2

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


THREAD = threading.local()  # .rank: the pair rank the current thread plays


def run_pair(body):
    """body(comm) in two threads as pair ranks 0 and 1; [(result, exception)] per rank."""
    shared = PairShared()

    def as_rank(rank):
        THREAD.rank = rank
        return body(ThreadComm(shared, rank))

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(as_rank, r) for r in (0, 1)]
        return [(f.result(timeout=120) if f.exception(timeout=120) is None else None, f.exception()) for f in futures]
