"""Hang watchdog scenarios, chosen by environment: HANG_RANK sleeps in the test; HANG_MODE=barrier
makes the others wait in a Barrier (all stuck) instead of reaching the sync point; HANG_MODE=raise
makes HANG_RANK fail before the Barrier the others wait in (the classic MPI test deadlock);
HANG_MODE=die kills HANG_RANK's process outright. HANG_MODE=elsewhere keeps only the odd ranks
(rank 0 is not one) busy for STEPS steps of 0.5 s each, calling progress(); the others go straight to
the sync point, or with HANG_IDLE=wait wait for them inside the test in pulse.wait. Every rank records
a probe as test_one_rank_sleeps starts, before any of this."""
import os
import time

from mpi4py import MPI
import pytest

from acceptance.runtime import pulse

RANK = MPI.COMM_WORLD.Get_rank()
HANG_RANK = int(os.environ.get("HANG_RANK", "-1"))
MODE = os.environ.get("HANG_MODE", "sleep")


def test_before_the_hang():
    MPI.COMM_WORLD.Barrier()


def test_one_rank_sleeps(record):
    record("probe", RANK, "count")  # measured before the hang: the run keeps it (RunFolder.salvage)
    if RANK == HANG_RANK and MODE == "raise":
        raise RuntimeError(f"rank {RANK} failed before the collective")
    if RANK == HANG_RANK and MODE == "die":
        os.kill(os.getpid(), 9)  # a node's process killed mid-run
    if RANK == HANG_RANK:
        time.sleep(300)
    if MODE == "raise":
        MPI.COMM_WORLD.Barrier()
    if MODE == "barrier":
        MPI.COMM_WORLD.Barrier()


@pytest.mark.hang_timeout(30)
def test_marker_allows_longer():
    if RANK == HANG_RANK and MODE == "marker":
        time.sleep(2)


def test_never_reached():
    pass


def test_progress_restarts_the_deadline(progress):
    # 4 steps of 1 s each under --hang-timeout 2: a hang without progress(), fine with it.
    for _ in range(4 if MODE == "progress" else 0):
        time.sleep(1)
        progress()


def test_busy_elsewhere(progress):
    """A test many times longer than the hang timeout, each step inside it, most ranks idle."""
    if MODE != "elsewhere":
        return
    if RANK % 2 == 1:
        for _ in range(int(os.environ.get("STEPS", "6"))):
            time.sleep(0.5)
            progress()
        if RANK == HANG_RANK:
            time.sleep(300)  # stuck inside one step, while every other rank is idle
    if os.environ.get("HANG_IDLE") == "wait":
        pulse.wait(MPI.COMM_WORLD)
