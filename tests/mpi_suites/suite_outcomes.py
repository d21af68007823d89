"""Outcome merging: run under mpiexec -n 4 by tests/integration/test_plugin_mpi.py."""
from mpi4py import MPI
import pytest

RANK = MPI.COMM_WORLD.Get_rank()


def test_passes_everywhere(record):
    MPI.COMM_WORLD.Barrier()
    record("probe", RANK * 10, "count")


def test_fails_on_rank1_only():
    assert RANK != 1, "boom on rank 1"


def test_skips_on_rank2_only():
    if RANK == 2:
        pytest.skip("only rank 2 lacks the device")


@pytest.fixture
def fixture_skipping_on_rank3():
    if RANK == 3:
        pytest.skip("fixture skip on rank 3")


def test_fixture_skip_on_rank3(fixture_skipping_on_rank3):
    pass


@pytest.mark.xfail(reason="known everywhere", strict=True)
def test_xfails_everywhere():
    assert False


def test_skips_everywhere():
    pytest.skip("no RDMA devices on any rank")


def test_runs_after_failures():
    MPI.COMM_WORLD.Barrier()
