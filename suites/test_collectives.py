"""All-reduce and all-to-all over the whole job, over each rail, and inside each node.

busbw per size (nccl-tests' definition) against the profile's bounds; results checked exactly.
On the nccl engine, NCCL's own log then tells whether each rail's network traffic used
GPUDirect RDMA (a `gdrdma` record per node and rail; host staging fails).
"""

import pytest

from acceptance.drivers.collective import sweep_collective
from acceptance.runtime.pytest_plugin import EVERY_RAIL, rail_mode_of, topology_of

pytestmark = pytest.mark.collective
SUITE = "collective"


def pytest_generate_tests(metafunc):
    # The rail communicators run at once (concurrent: [rails], each rank in its own rail's), or one
    # rail after another (serial: [rail0], [rail1], ...).
    if "scope" in metafunc.fixturenames:
        if rail_mode_of(metafunc.config) == "concurrent":
            rails = [pytest.param(("rail", EVERY_RAIL), id=EVERY_RAIL, marks=pytest.mark.rail)]
        else:
            rails = [pytest.param(("rail", r), id=f"rail{r}", marks=pytest.mark.rail)
                     for r in topology_of(metafunc.config).rails]
        metafunc.parametrize("scope", [pytest.param(("world", None), id="world"), *rails,
                                       pytest.param(("node", None), id="node")])


def _communicator(topology, scope):
    """(communicator or None when this rank sits this one out, rail, nodes, reason to skip or None)."""
    kind, rail = scope
    if kind == "world":
        return topology.world, None, topology.nodes, None if topology.world.Get_size() > 1 else "one rank"
    if kind == "node":
        biggest = max(len(topology.ranks_on(n)) for n in topology.nodes)
        return topology.node_comm, None, [topology.node], None if biggest > 1 else "one rank per node"
    rail = topology.rail if rail == EVERY_RAIL else rail
    why = None if len(topology.nodes) > 1 else "one node"
    return (topology.rail_comm if topology.rail == rail else None), rail, topology.nodes, why


def _ranks(topology, scope) -> int:
    """The ranks of the scope's largest communicator: the same on every rank, so all decide alike."""
    kind = scope[0]
    if kind == "world":
        return topology.world.Get_size()
    return max(len(topology.ranks_on(n)) for n in topology.nodes) if kind == "node" else len(topology.nodes)


def _run(op, engine, topology, profile, record, progress, scope):
    comm, rail, nodes, why_not = _communicator(topology, scope)
    if why_not:
        pytest.skip(f"{op} over {scope[0]} needs at least 2 ranks in the communicator: this run has {why_not}")
    most = profile.get("collectives.alltoall_max_ranks")
    if op == "alltoall" and most and _ranks(topology, scope) > most:
        pytest.skip(f"alltoall over {scope[0]} ({_ranks(topology, scope):,} ranks) left out: "
                    f"collectives.alltoall_max_ranks = {most:,} (its first call connects each rank to every peer, "
                    f"longer at this scale than the budget allows; `acceptance plan` says so: docs/plan.md)")
    if comm is None or comm.Get_size() < 2:
        return
    problems = sweep_collective(engine, op, comm, scope[0], rail, nodes, profile,
                                record, progress)
    assert not problems, "\n".join(problems)


def test_allreduce(engine, topology, profile, record, progress, scope):
    _run("allreduce", engine, topology, profile, record, progress, scope)


def test_alltoall(engine, topology, profile, record, progress, scope):
    _run("alltoall", engine, topology, profile, record, progress, scope)


def test_gpudirect_rdma_used(engine, topology, profile, record, run_folder):
    """Runs after the sweeps: NCCL logged every connection it made for them."""
    if "net_paths" not in engine.CAN:
        pytest.skip(f"GPUDirect RDMA use is read from the engine's log of its connections (NCCL's); the "
                    f"collectives ran on the {engine.NAME} engine, which keeps none")
    from acceptance.engines.nccl_log import net_paths
    from acceptance.drivers.gpudirect_paths import rails_for, record_gdr
    topology.world.Barrier()  # every rank's NCCL log is complete
    problems = None
    if topology.rank == 0:
        paths = net_paths(run_folder.path / "logs")
        problems = record_gdr(paths, topology, rails_for(paths, topology, profile.get("topology.nic_rails")), record,
                              profile)
    problems = topology.world.bcast(problems, root=0)
    assert not problems, "network traffic without GPUDirect RDMA:\n" + "\n".join(problems)
