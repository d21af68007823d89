"""Rank CRASH_RANK exits 7 after pytest is done (results agreed, MPI finalized): a crash in teardown."""
import atexit
import os

from mpi4py import MPI

if MPI.COMM_WORLD.Get_rank() == int(os.environ.get("CRASH_RANK", "-1")):
    atexit.register(os._exit, 7)


def test_passes():
    pass
