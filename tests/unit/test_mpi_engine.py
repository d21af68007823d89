"""The mpi engine on a real single-process MPI world (two-rank parts run in tests/integration)."""
import numpy as np
import pytest
from mpi4py import MPI

from acceptance.engines import mpi
from acceptance.engines.collective_data import ALLREDUCE, Buffers
from acceptance.engines.registry import decide, local_choices, select
from acceptance.rules.profile import load_profile


def test_register_times_both_kinds():
    for how in ("allocate", "create"):
        reg, dereg = mpi.register_times(1 << 16, 3, how)
        assert reg.dtype == np.int64 and len(reg) == 3 and len(dereg) == 3
        assert (reg > 0).all() and (dereg > 0).all()


def test_registration_growth_is_small_for_a_well_behaved_library():
    growth = mpi.registration_growth(1 << 20, 20)
    assert isinstance(growth, int) and growth < 16 << 20


@pytest.mark.parametrize("op", [mpi.allreduce, mpi.alltoall])
def test_collectives_on_one_rank_are_exact(op):
    res = op(MPI.COMM_SELF, 4096, 5, 1)
    assert res.wrong == 0 and res.first_wrong is None
    assert res.nbytes == 4096 and len(res.times_ns) == 5 and (res.times_ns > 0).all()


def test_exact_check_names_the_first_wrong_element():
    b = Buffers(np, ALLREDUCE, 8, 0, 1)
    b.before(2)
    b.recv[:] = b.expected + 3.0
    b.recv[5] += 1.0
    b.after(2)
    res = mpi.checked(MPI.COMM_SELF, 64, np.ones(3, dtype=np.int64), b.tally)
    assert res.wrong == 1 and res.first_wrong == "iteration 2: rank 0 element 5: expected 9.0, got 10.0"
    assert (res.ops, res.ops_failed, res.missing) == (1, 1, 0)


def test_pair_link_needs_two_ranks():
    with pytest.raises(ValueError, match="2 ranks"):
        mpi.PairLink(MPI.COMM_SELF, 8)


def test_engine_selection_here_falls_back_to_mpi_and_says_why():
    module, why = select("auto")
    assert isinstance(module, mpi.MpiEngine) and why.startswith("mpi engine (")
    assert "passed over: verbs: " in why  # no RDMA device on this machine
    assert isinstance(select("mpi")[0], mpi.MpiEngine)
    module, why = select("verbs")
    assert module is None and why.startswith("no usable engine: verbs: get_device_list() failed")
    module, why = select("nccl", ("allreduce",))
    assert module is None and why.startswith("no usable engine: nccl: cupy not importable")
    module, why = select("ucx")
    assert module is None and "not part of this version" in why


def test_an_engine_without_what_the_suite_needs_is_no_candidate_under_auto():
    # Collectives: the verbs engine is not even considered; asked for by name, it says why not.
    assert [name for name, _, _ in local_choices("auto", ("allreduce", "alltoall"))] == ["nccl", "mpi"]
    assert [name for name, _, _ in local_choices("auto", ("PairLink",))] == ["verbs", "mpi"]
    assert local_choices("mpi", ("NoSuchThing",)) == [("mpi", False, "the mpi engine has no NoSuchThing")]
    assert select("verbs", ("allreduce",))[1] == \
        "no usable engine: verbs: the verbs engine has no allreduce on node(s) this node"


def test_the_job_agrees_on_one_engine_and_names_the_odd_nodes():
    good = [("verbs", True, "1 device(s): mlx5_0"), ("mpi", True, "MPICH")]
    bad = [("verbs", False, "get_device_list() failed"), ("mpi", True, "MPICH")]
    name, why = decide("auto", [("node1", good), ("node1", good), ("node2", bad), ("node2", bad)])
    assert name == "mpi"
    assert why == "mpi engine (MPICH); passed over: verbs: get_device_list() failed on node(s) node2"
    name, why = decide("auto", [("node1", good), ("node2", good)])
    assert (name, why) == ("verbs", "verbs engine (1 device(s): mlx5_0)")
    name, why = decide("verbs", [("node1", good[:1]), ("node2", bad[:1])])
    assert name is None and why == "no usable engine: verbs: get_device_list() failed on node(s) node2"


def test_every_builtin_profile_selects_a_sweep():
    from acceptance.measure import sweep_from_profile
    for name in ("local", "h100-ndr400", "h100-roce400", "h200-ndr400", "a100-hdr200"):
        sweep = sweep_from_profile(load_profile(name))
        assert sweep.sizes[0] == 8


def test_write_latency_is_one_way_half_the_put_and_flush():
    """The catalog declares write latency one-way (Metric.timing): the mpi engine halves its Put +
    Flush round trip, as ib_write_lat halves its ping-pong."""
    from acceptance.engines.contract import Transfer
    from acceptance.rules import catalog
    assert {m.timing for m in catalog.metrics("rdma_write", "latency_p50")} == {"one-way"}
    link = object.__new__(mpi.PairLink)
    link.put_bandwidth = lambda *args, **kwargs: Transfer(np.array([1000, 3001], dtype=np.int64), None)
    assert list(mpi.PairLink.put_latency(link, 8, 2, 0, 0).times_ns) == [500, 1500]
