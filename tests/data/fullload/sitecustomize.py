"""Test only: a virtual node whose NICs give way when more than one of them moves data at once.

On PYTHONPATH for a local run (`acceptance run --nodes N --ranks-per-node R`); the mpi engine is patched
when it is imported, nothing else. ACCEPTANCE_TEST_COLLAPSE names the node, ACCEPTANCE_TEST_BUSY_DIR
is a folder each rank marks while it holds a pair link (a pair's whole sweep). While two or more of
that node's ranks hold one, every batch of writes from or to the node takes ACCEPTANCE_TEST_COLLAPSE_FACTOR
times (default 100) as long as it did, a wait after its Flush: the node's shared path is saturated under
full load, and untouched with one NIC busy. The slowdown is a ratio, not a fixed delay, so that it means
the same on a fast machine and on a slow, busy one. Virtual node names follow acceptance.runtime.topology.local_identity
(rank // ranks_per_node + 1).
"""

import importlib.abc
import importlib.util
import os
import sys
import time
from pathlib import Path

TARGET = "acceptance.engines.mpi"


def _patch(mpi) -> None:
    node = os.environ["ACCEPTANCE_TEST_COLLAPSE"]
    busy = Path(os.environ["ACCEPTANCE_TEST_BUSY_DIR"])
    per_node = int(os.environ["ACCEPTANCE_RANKS_PER_NODE"])
    factor = float(os.environ.get("ACCEPTANCE_TEST_COLLAPSE_FACTOR", "100"))
    real = mpi.PairLink.put_bandwidth

    def node_of(rank: int) -> str:
        return f"node{rank // per_node + 1}"

    def loaded() -> bool:
        return sum(1 for _ in busy.glob(f"{node}.*")) >= 2

    class Saturated:
        def __init__(self, win):
            self._win = win
            self._since = time.perf_counter()  # the batch's start

        def __getattr__(self, name):
            return getattr(self._win, name)

        def Flush(self, target):  # noqa: N802 - mpi4py's name
            out = self._win.Flush(target)
            took = time.perf_counter() - self._since
            if loaded():
                time.sleep((factor - 1) * took)
            self._since = time.perf_counter()
            return out

    real_init, real_free = mpi.PairLink.__init__, mpi.PairLink.free

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        me = mpi.MPI.COMM_WORLD.Get_rank()
        self._busy = busy / f"{node_of(me)}.{me}"
        self._busy.touch()  # busy while the link exists: a pair's whole sweep

    def free(self):
        self._busy.unlink(missing_ok=True)
        real_free(self)

    def put_bandwidth(self, size, iters, warmup, window, origin, seed, *args, **kwargs):
        win = self.win
        if self.me == origin and node in (node_of(seed[0]), node_of(seed[1])):
            self.win = Saturated(win)
        try:
            return real(self, size, iters, warmup, window, origin, seed, *args, **kwargs)
        finally:
            self.win = win

    mpi.PairLink.__init__, mpi.PairLink.free = init, free
    mpi.PairLink.put_bandwidth = put_bandwidth


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            _patch(module)
        spec.loader.exec_module = patched
        return spec


if os.environ.get("ACCEPTANCE_TEST_COLLAPSE"):
    sys.meta_path.insert(0, _Hook())
