# Every suite runs collectively: one pytest session per MPI rank, outcomes agreed at rank 0.
import pytest

from acceptance.rules import catalog
from acceptance.engines.registry import agree
from acceptance.runtime.portwatch import PortWatch
from acceptance.runtime.pytest_plugin import recorder_of

pytest_plugins = ["acceptance.runtime.pytest_plugin"]


@pytest.fixture(scope="module")
def engine(request, topology, profile, run_folder):
    """The engine that measures this suite: run.engine, or for `auto` the best one every rank can use.

    What a suite's engine must offer is in the catalog (acceptance.rules.catalog); the choice, why, and the device each rank
    measures through are written to run.json ("engines") by rank 0; a suite without a usable
    engine skips with the reason (fails, when the profile's run.engines names the engine its bounds are
    written for), and one whose engine fails to set up on any rank errors on all.
    """
    module = request.module
    suite = getattr(module, "SUITE", None) or module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    required = profile.get("run.engines").get(suite)  # the engine this suite's bounds are written for
    chosen, why, name = agree(required or profile.get("run.engine"), catalog.suite(suite).engine_needs,
                              topology.world, topology.node)
    error = None
    if chosen is not None:
        try:
            # The run's log folder: NCCL's own log there says whether each rail's traffic used GPUDirect RDMA.
            chosen.configure(topology, profile, log_dir=run_folder.path / "logs")
        except Exception as e:  # noqa: BLE001 - every rank hears of it, so none waits in a collective
            error = f"{topology.label(topology.rank)}: {type(e).__name__}: {e}"
    # Which device each rank measures through (the verbs engine's rail NIC) and where it runs, for run.json.
    ready = chosen is not None and not error
    every = topology.world.gather((error, chosen.used_device() if ready else None,
                                   chosen.placement() if ready else None), root=0)
    errors = topology.world.bcast([e for e, _, _ in every if e] if topology.rank == 0 else None, root=0)
    if topology.rank == 0:
        engines = dict(run_folder.read_run().get("engines") or {})
        engines[suite] = {"engine": name, "why": why}
        for key, k in (("devices", 1), ("placement", 2)):
            found = {topology.label(r): got[k] for r, got in enumerate(every) if got[k]}
            if found:
                engines[suite][key] = found
        run_folder.update_run(engines=engines)
    if chosen is None and required:
        pytest.fail(f"profile {profile.name}'s bounds for {suite} are written for the {required} engine "
                    f"(run.engines), which cannot run here: {why}; no other engine measures it", pytrace=False)
    if chosen is None:
        pytest.skip(why)
    if errors:
        raise RuntimeError(f"the {name} engine could not be set up:\n" + "\n".join(errors))
    return chosen


@pytest.fixture(scope="module", autouse=True)
def port_counters(request, topology, profile):
    """Every RDMA port of each node, snapshotted before and after each suite (by the node's first rank).

    The deltas become records of suite `counters` (their test is the suite file); the
    analysis turns a rising error counter into a finding naming node, device, port and rail,
    and the suite fails too (at the teardown of its last test). Nodes without RDMA ports, and
    profiles with counters.enabled = false, record nothing.
    """
    watch = PortWatch.for_node(topology, profile)
    before = watch.snapshot() if watch else None
    yield
    if watch:
        failing = watch.record(before, watch.snapshot(),
                               recorder_of(request.config).bind(request.node.nodeid, "counters"))
        assert not failing, f"port error counters rose during {request.node.nodeid}:\n" + "\n".join(failing)
