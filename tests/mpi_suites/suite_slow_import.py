"""HANG_RANK takes 300 s to import this module: a hang while collecting, before any test ran."""
import os
import time

from mpi4py import MPI

if MPI.COMM_WORLD.Get_rank() == int(os.environ.get("HANG_RANK", "-1")):
    time.sleep(300)


def test_never_reached():
    pass
