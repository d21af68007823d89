"""Collective pytest under MPI: every rank runs the same session.

After each test phase every rank's outcome is agreed at rank 0 under a
deadline (acceptance.runtime.sync) and merged (acceptance.runtime.outcomes); the merged
outcome is written back into the report on every rank, so pytest's own runner
decides identically everywhere (run the call phase or not, -x, exit code).
Rank 0 alone prints the terminal report and writes junit.xml; other ranks
write logs/rank-<r>.log. A rank that misses a sync point is named in a HANG
report and the job ends with exit code 3 instead of hanging. The deadline is
the job's: any rank's progress() renews it for every rank (acceptance.runtime.pulse),
so a HANG means no rank made progress for the whole timeout.

Load with `-p acceptance.runtime.pytest_plugin` (suites/conftest.py does it).
docs/pytest-under-mpi.md describes the design for users.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import os
import shlex
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest
from mpi4py import MPI

from . import liveness, outcomes, pulse
from . import overrides
from ..host.identity import merge_identities, node_identity
from ..host.preflight import software_versions
from ..rules import switches
from ..switchtree.fabric import Fabric
from ..rules.profile import Profile, ProfileError, load_profile
from ..rules.units import parse_duration, positive_seconds
from ..records.naming import natural_key
from ..records.results import (
    ENV_ITERATION,
    FAILED_METRIC,
    InputError,
    SCHEMA_VERSION,
    Recorder,
    RunFolder,
    make_record,
    new_run_id,
    utc_now,
)
from . import estimate
from . import resume, status
from .schedule import Pairing, Resume
from .sync import Agreement, Missing, RootLost
from .topology import Topology, TopologyError, local_identity
from .watchdog import END_GRACE_S, Phase, Watchdog

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
# pytest's exit codes -> the harness's contract (docs/pytest-under-mpi.md: 0 pass, 1 fail, 2 usage, 3 incomplete).
_EXIT_MAP = {0: EXIT_OK, 1: EXIT_FAILED, 2: EXIT_INCOMPLETE, 3: EXIT_INCOMPLETE,
             4: EXIT_USAGE, 5: EXIT_USAGE}
# Ranks other than 0 wait this much longer than rank 0 before deciding rank 0 is gone.
GRACE_S = 15.0
# Rank 0's watchdog steps in this long after the deadline when its own main thread is stuck.
ROOT_LATE_S = 1.0
# Startup over thousands of ranks (imports on a shared file system) is slow: never less than this.
CENSUS_MIN_S = 300.0
# How long rank 0 waits for the missing ranks to say where they are stuck; and then, for those still
# silent (a stopped process says nothing, a busy machine's may be late), before calling them silent.
NOTE_WAIT_S = 1.0
SILENT_WAIT_S = 10.0
# Lines of a failure text quoted in a HANG report.
HANG_TEXT_LINES = 12
MARKERS = {
    "preflight": "node and job sanity checks before anything is measured",
    "memreg": "RDMA memory registration",
    "rail": "per-rail fabric checks",
    "p2p": "point-to-point transfers between node pairs",
    "gpudirect": "GPU memory on the NIC path (dma-buf, nvidia_peermem)",
    "collective": "all-reduce / all-to-all collectives",
    "intranode": "NVLink and PCIe paths inside a node",
    "counters": "port counters before and after",
    "congestion": "incast, PFC and ECN behaviour",
    "burnin": "long repeated runs",
    "hang_timeout(seconds)": "this test's hang timeout: how long the job may go without progress (number or duration like '10min')",
}
PLUGIN_NAME = "acceptance-collective"
ENV_RAIL_MODE = "ACCEPTANCE_RAIL_MODE"
RAIL_MODES = ("concurrent", "serial")
# The `rail` parameter of a concurrent run: each rank measures its own rail, every rail at once.
EVERY_RAIL = "rails"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acceptance", "cluster acceptance (collective pytest under MPI)")
    group.addoption("--run-dir", metavar="DIR", default=os.environ.get("ACCEPTANCE_RUN_DIR"),
                    help="run folder for run.json, results.jsonl, junit.xml and logs/ "
                         "(default: a new folder under ./reports/)")
    group.addoption("--profile", metavar="NAME|PATH", default=os.environ.get("ACCEPTANCE_PROFILE"),
                    help="thresholds profile: a built-in name (see `acceptance profiles`) "
                         "or a TOML file (default: local)")
    group.addoption("--topology", metavar="PATH", default=os.environ.get(switches.ENV),
                    help="the cluster's switch tree (Slurm topology.conf or topology.yaml, ibnetdiscover output, "
                         "or a folder of rail<N> ibnetdiscover outputs), kept in run.json so findings can name a "
                         "leaf switch or uplink (default: $ACCEPTANCE_TOPOLOGY, else the profile's "
                         "topology.switches)")
    group.addoption("--routes", metavar="PATH", default=os.environ.get(switches.ROUTES_ENV),
                    help="the fabric's forwarding tables (ibroute or dump_lfts.sh output, ibdiagnet2.fdbs, or a "
                         "folder of them), followed over the tree's ibnetdiscover cabling so findings can name a "
                         "switch-to-switch cable (default: $ACCEPTANCE_ROUTES, else the profile's topology.routes)")
    group.addoption("--rail-mode", choices=RAIL_MODES, default=os.environ.get(ENV_RAIL_MODE) or None,
                    help='"concurrent": every rank drives its own rail, so each round of node pairs runs on all '
                         'rails at once (one test for every rail: test_x[rails]); "serial": one rail after '
                         'another (test_x[rail0], test_x[rail1], ...), to tell a fault that needs full load '
                         "from one that does not (default: $ACCEPTANCE_RAIL_MODE, else the profile's "
                         "run.rail_mode, concurrent)")
    group.addoption("--schedule-seed", metavar="N", type=int, default=None,
                    help="seed of a screening pattern's random pairs (rdma_write.pattern screen:K without a "
                         "switch tree): give a past run's run.json schedule.seed to measure the same pairs "
                         "again (default: derived from the run id)")
    group.addoption("--hang-timeout", metavar="SECONDS", type=positive_seconds, default=None,
                    help="how long the job may go without progress on any rank (progress() or a rank "
                         "arriving at the sync point): then the ranks that did not reach the sync point "
                         "are reported as HANG and the job exits 3 "
                         "(default: the profile's run.hang_timeout; marker hang_timeout overrides)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.getoption("help", False) or config.pluginmanager.has_plugin(PLUGIN_NAME):
        return
    if config.pluginmanager.has_plugin("xdist") and config.getoption("numprocesses", None):
        raise pytest.UsageError("pytest-xdist cannot be combined with MPI ranks; drop -n")
    plugin = CollectivePlugin(config)
    plugin.start()
    config.pluginmanager.register(plugin, PLUGIN_NAME)


@pytest.hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_rank_logs(config: pytest.Config) -> None:
    # trylast: after the terminal plugin has registered the reporter this replaces.
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if plugin is not None and plugin.rank != 0:
        plugin.log_to_file()


def _plugin(request) -> "CollectivePlugin":
    return request.config.pluginmanager.get_plugin(PLUGIN_NAME)


def topology_of(config: pytest.Config) -> Topology:
    """The run's topology, for collection-time decisions (identical on every rank)."""
    return config.pluginmanager.get_plugin(PLUGIN_NAME).topology


def recorder_of(config: pytest.Config) -> Recorder:
    """This rank's recorder, for records made outside a test (a module fixture's teardown)."""
    return config.pluginmanager.get_plugin(PLUGIN_NAME).recorder


def rail_mode_of(config: pytest.Config) -> str:
    """"concurrent" or "serial": how this run's per-rail tests measure the rails."""
    return config.pluginmanager.get_plugin(PLUGIN_NAME).rail_mode


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A test asking for `rail` runs once for every rail at once (concurrent: test_x[rails], each rank
    # on its own rail), or once per rail of this run (serial: test_x[rail0], test_x[rail1], ...).
    if "rail" in metafunc.fixturenames:
        if rail_mode_of(metafunc.config) == "concurrent":
            metafunc.parametrize("rail", [EVERY_RAIL], ids=[EVERY_RAIL], indirect=True)
        else:
            rails = topology_of(metafunc.config).rails
            metafunc.parametrize("rail", rails, ids=[f"rail{r}" for r in rails], indirect=True)


@pytest.fixture
def rail(request, topology) -> int:
    """The rail this rank measures in this test: its own rail when every rail runs at once
    (concurrent), else the test's rail (serial; ranks on other rails sit it out)."""
    return topology.rail if request.param == EVERY_RAIL else request.param


@pytest.fixture(scope="session")
def topology(request) -> Topology:
    """The rank -> node -> rail map and this rank's world, node and rail communicators."""
    return _plugin(request).topology


@pytest.fixture(scope="session")
def profile(request) -> Profile:
    """The thresholds profile of this run."""
    return _plugin(request).profile


@pytest.fixture(scope="session")
def run_folder(request) -> RunFolder:
    """The run folder (run.json, results.jsonl, logs/) of this run."""
    return _plugin(request).folder


@pytest.fixture
def progress(request):
    """progress(): this rank is still making progress; the job's hang deadline restarts from now.

    A long test that loops (rounds of pairs, sizes of a sweep) calls it once per
    step, so the hang timeout bounds one step instead of the whole test, for every
    rank: ranks idle meanwhile (at the sync point, in pulse.wait) wait on.
    """
    return _plugin(request).progress


@pytest.fixture
def record(request):
    """record(metric, value, unit, **fields): add a results.jsonl record for this test.

    Fields default to this rank's node, rank and rail; the suite is the
    module's SUITE attribute or its file name without `test_`.
    """
    return _plugin(request).recorder.bind(request.node.nodeid, _suite_of(request.node))


class CollectivePlugin:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()
        self.sync = Agreement(self.world)
        # The watchdog thread may call MPI (name who arrived, ask where ranks are, abort) only
        # where the library allows calls from any thread; otherwise it keeps out of MPI.
        self.thread_mpi = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
        self.pulse = pulse.Pulse(self.sync.comm, self._job_progress)
        pulse.install(self.pulse)
        self.labels: dict[int, str] = {r: str(r) for r in range(self.size)}
        self.topology: Topology | None = None
        self.profile: Profile | None = None
        self.fabric: Fabric | None = None
        self.folder: RunFolder | None = None
        self.rail_mode = "concurrent"
        self.recorder: Recorder | None = None
        self.watchdog: Watchdog | None = None
        self.forced_exit: int | None = None
        self.iteration = int(os.environ.get(ENV_ITERATION, "0"))
        self._hang_lock = threading.Lock()
        self._items: list[pytest.Item] = []
        # A relaunch after a lost node (acceptance.cli.attempts): resume.json, read by rank 0 and shared.
        self.resume: dict | None = None
        self.status: status.Status | None = None
        self._logfile = None
        # pytest's capture replaces fds 1 and 2 during tests; a HANG report
        # written from the watchdog thread must still reach the terminal.
        self._stderr = os.fdopen(os.dup(2), "w", buffering=1)
        if self.rank != 0:
            # Only rank 0 writes junit.xml (and other shared report files).
            config.option.xmlpath = None
            if hasattr(config.option, "report_log"):
                config.option.report_log = None

    # ---- startup -------------------------------------------------------
    def start(self) -> None:
        try:
            self.profile = load_profile(self.config.getoption("profile"))
        except ProfileError as e:
            self._exit(EXIT_USAGE, f"profile error: {e}")
        try:
            self.fabric = switches.fabric_for(self.profile, self.config.getoption("topology") or "",
                                              self.config.getoption("routes") or "")
        except InputError as e:
            self._exit(EXIT_USAGE, f"topology error: {e}")
        self.default_timeout = self.config.getoption("hang_timeout") or self.profile.get("run.hang_timeout")
        self.rail_mode = self.config.getoption("rail_mode") or self.profile.get("run.rail_mode")
        if self.rail_mode not in RAIL_MODES:
            self._exit(EXIT_USAGE, f"${ENV_RAIL_MODE}: must be one of {', '.join(RAIL_MODES)}, got {self.rail_mode!r}")
        census_timeout = max(self.default_timeout, CENSUS_MIN_S)
        self.watchdog = self._make_watchdog()
        self._arm("session", "census", census_timeout)
        liveness.announce(self.rank)
        me = {"host": MPI.Get_processor_name(), "pid": os.getpid(), "versions": software_versions()}
        run_dir = None
        if self.rank == 0:
            # Before the census: a hang at start-up still leaves run.json and junit.xml behind.
            self.folder = self._make_folder()
            run_dir = str(self.folder.path)
            if not self.folder.run_json.exists():  # (a later burn-in iteration keeps the run's)
                self.folder.write_run({"run_id": self.folder.run_id, "schema": SCHEMA_VERSION,
                                       "start": utc_now(), "end": None,
                                       "command": self._command(), "complete": False, "exit_code": None})
        census = self._agree({"me": me, "run_dir": run_dir},
                             lambda got: {"run_dir": got[0]["run_dir"],
                                          "ranks": [got[r]["me"] for r in sorted(got)]},
                             "session", "census")
        self.folder = RunFolder(census["run_dir"])
        try:
            ident = local_identity(self.world, self.profile.get("topology.nic_rails"))
        except TopologyError as e:
            self._exit(EXIT_USAGE, f"topology error: {e}")
        self.topology = Topology(self.world, self.world.allgather(ident))
        self.labels = {r.rank: f"{r.rank}@{r.node}" for r in self.topology.ranks}
        # Still under the census watchdog: every rank takes part, whatever its files say.
        physical = self.world.gather(self._physical_identity(ident), root=0)
        self.watchdog.disarm()
        self.recorder = Recorder(self.rank, self.topology.node, self.topology.rail, self.iteration,
                                 spill=self.folder.spill(self.rank))
        if os.environ.get(resume.ENV_RESUME):
            self.resume = self.world.bcast(resume.read(os.environ[resume.ENV_RESUME]) if self.rank == 0 else None)
        self.topology.pairing, self.schedule = self._pairing(self.folder.run_id)
        self.topology.rail_mode = self.rail_mode
        if self.rank == 0:
            self._write_run_start(census["ranks"],
                                  merge_identities([(r.node, p) for r, p in zip(self.topology.ranks, physical)]))

    def _pairing(self, run_id: str) -> tuple[Pairing, dict]:
        """The run's node pairing (every rank computes the same): rdma_write.pattern with "auto" resolved
        against the budget `acceptance run` checked (which may shorten perftest and incast: self.profile
        becomes the profile the tests get and run.json keeps); a screening draw's seed (--schedule-seed, else one
        derived from the run id, kept in run.json "schedule" so a run can be repeated); each rail's leaves
        where the switch tree is known. Exits 2 on a pattern that cannot be used."""
        requested = self.profile.get("rdma_write.pattern")
        # A relaunch keeps the first launch's plan: its nodes decide the pattern, and its schedule is walked.
        nodes = len({n for members in self.resume["planned"].values() for n in members}) if self.resume \
            else len(self.topology.nodes)
        try:
            pattern, self.profile, gave_up = estimate.pattern_for_ranks(self.profile, nodes, len(self.topology.rails),
                                                                        self.rail_mode)
        except ValueError as e:
            self._exit(EXIT_USAGE, f"rdma_write.pattern {requested!r}: {e}")
        seed = self.config.getoption("schedule_seed")
        if seed is None:
            seed = int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16)
        leaves = ({rail: {n: leaf for leaf, ns in tree.leaves.items() for n in ns}
                   for rail, tree in self.fabric.trees.items()} if self.fabric else {})
        resume = Resume(self.resume["planned"], frozenset(self.resume["lost"])) if self.resume else None
        pairing = Pairing(pattern, seed, leaves, resume)
        return pairing, pairing.to_json(nodes, requested, gave_up)

    @staticmethod
    def _physical_identity(me) -> dict:
        """This rank's node_identity; a fact never takes a rank out of the collective."""
        try:
            return node_identity(me.node, {me.rail: me.nic})
        except Exception as e:  # noqa: BLE001 - recorded in run.json instead
            return {"serial": None, "nics": {}, "error": str(e)}

    def _make_folder(self) -> RunFolder:
        opt = self.config.getoption("run_dir")
        folder = RunFolder(opt) if opt else RunFolder.create(Path.cwd() / "reports", new_run_id())
        folder.ensure()
        folder.results.touch()  # a run whose checks all skip still has (empty) results to analyze
        if self.config.option.xmlpath is None:
            self.config.option.xmlpath = str(folder.junit)
        return folder

    def _write_run_start(self, census: list[dict], identity: dict[str, dict]) -> None:
        software: dict[str, dict] = {}
        for info, c in zip(self.topology.ranks, census):
            software.setdefault(info.node, c["versions"])
        if self.resume:  # a relaunch: this launch's ranks; the run's start, plan and earlier launches stay
            self.folder.update_run(topology=self.topology.to_json(), processes=[[c["host"], c["pid"]] for c in census],
                                   complete=False, end=None, exit_code=None, missing_ranks=[])
            return
        if self.iteration > 0 and self.folder.read_run().get("iterations"):
            # A later burn-in iteration: the run started with iteration 0.
            self.folder.update_run(iterations=self.iteration + 1, complete=False, end=None, exit_code=None)
            return
        self.folder.write_run({
            "run_id": self.folder.run_id,
            "schema": SCHEMA_VERSION,
            "iterations": 1,
            "start": utc_now(),
            "end": None,
            "command": self._command(),
            "launcher": _launcher(),
            "profile": self.profile.to_json(),
            "topology": self.topology.to_json(),
            "rail_mode": self.rail_mode,
            "schedule": self.schedule,
            **({"fabric": self.fabric.to_json(),
                "fabric_unknown": self.fabric.unknown(self.topology.nodes)} if self.fabric else {}),
            "software": software,
            "identity": identity,
            # Each rank's [host, pid]: a launcher that names a dead process, not its rank (Hydra), is
            # mapped to the rank and node through it (acceptance.cli.lost).
            "processes": [[c["host"], c["pid"]] for c in census],
            "complete": False,
            "exit_code": None,
            "missing_ranks": [],
            "overrides": overrides.in_effect(),
        })

    def _command(self) -> str:
        return os.environ.get("ACCEPTANCE_COMMAND") or shlex.join(["pytest", *self.config.invocation_params.args])

    def log_to_file(self) -> None:
        """Ranks other than 0 keep a full terminal report, but in their own log file."""
        from _pytest.terminal import TerminalReporter
        self._logfile = open(self.folder.log(self.rank), "w", buffering=1)
        old = self.config.pluginmanager.getplugin("terminalreporter")
        if old is not None:
            self.config.pluginmanager.unregister(old)
        self.config.pluginmanager.register(TerminalReporter(self.config, self._logfile), "terminalreporter")

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        t = self.topology
        return [f"acceptance: {self.size} ranks on {len(t.nodes)} nodes, rails {t.rails}, "
                f"profile {self.profile.name}, rails {self.rail_mode}, hang timeout {self.default_timeout:g} s",
                f"pairs: {self.schedule['pattern']}, {self.schedule['rounds']} rounds per rail"
                + (f" (seed {self.schedule['seed']}{', tree-aware' if self.schedule['tree_aware'] else ''})"
                   if t.pairing.screening() else "")
                + (f"; {self.schedule['requested']}: " + "; ".join(self.schedule["gave_up"])
                   if self.schedule.get("gave_up") else ""),
                f"run folder: {self.folder.path}", *self._fabric_header()]

    def _fabric_header(self) -> list[str]:
        if self.fabric is None:
            return []
        unknown = self.fabric.unknown(self.topology.nodes)
        line = f"switch tree: {self.fabric.format} {self.fabric.source}"
        return [line + (f"; not in it (no switch finding can name their leaf): {', '.join(unknown)}"
                        if unknown else "")]

    # ---- collection ------------------------------------------------------
    def pytest_collectreport(self, report) -> None:
        # A suite file that does not import (syntax error, missing module) is a usage error, not a hang.
        if report.failed:
            self.forced_exit = EXIT_USAGE

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if self.resume:
            resume.leave_out_landed(config, items, self.resume)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._items = list(session.items)
        if self.rank == 0 and self.folder is not None:  # what rank 0 says every status.EVERY_S seconds
            estimate = os.environ.get(status.ENV_ESTIMATE)
            self.status = status.Status(self.folder.path, self._stderr, float(estimate) if estimate else None)
            self.status.start(len(self._items))
        ids = [item.nodeid for item in session.items]
        digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
        self._arm("session", "collection", self.default_timeout)
        groups = self._agree((digest, len(ids)), _group, "session", "collection")
        if len(groups) == 1:
            self.watchdog.disarm()
            return
        # Second round: one rank per distinct collection sends its ids, so the message can show a diff.
        speakers = {ranks[0] for ranks in groups.values()}
        lists = self._agree(ids if self.rank in speakers else None,
                            lambda got: {r: got[r] for r in speakers}, "session", "collection diff")
        self._exit(EXIT_USAGE, outcomes.collection_message(groups, lists, self.labels))

    # ---- each test phase -------------------------------------------------
    def _timeout(self, item: pytest.Item) -> float:
        marker = item.get_closest_marker("hang_timeout")
        if marker is None:
            return self.default_timeout
        if not marker.args:
            raise pytest.UsageError(f"{item.nodeid}: hang_timeout marker needs a value, e.g. hang_timeout(600)")
        try:
            return parse_duration(marker.args[0])
        except ValueError as e:
            raise pytest.UsageError(f"{item.nodeid}: hang_timeout({marker.args[0]!r}): {e}") from None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        if self.resume and self.topology is not None:
            self.topology.pairing = resume.pairing_for(item.nodeid, self.topology.pairing, self.resume)
        if self.status is not None:
            self.status.begin(item.nodeid, _suite_of(item), self._items.index(item) + 1)
        self._arm(item.nodeid, "setup", self._timeout(item))
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item):
        self._arm(item.nodeid, "call", self._timeout(item))
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):
        self._arm(item.nodeid, "teardown", self._timeout(item))
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        rep = yield
        mine = outcomes.phase_summary(rep.outcome, rep.when, hasattr(rep, "wasxfail"), _report_text(rep))
        records = self.recorder.take_lines() if rep.when == "teardown" else ""

        def merge(got: dict) -> dict:
            if rep.when == "teardown":
                self.folder.land_staged(got[rank][1] for rank in sorted(got))  # and what came before keep did
                self.folder.mark_landed(item.nodeid, self.iteration)
            summaries = {rank: got[rank][0] for rank in got}
            decision = outcomes.merge(summaries, self.labels)
            if decision["outcome"] == "failed":  # the failure reaches findings.json, whatever recorded
                self.folder.append_records([self._failed_record(item, rep.when, decision, summaries)])
            return decision

        keep = self._stage if rep.when == "teardown" and self.rank == 0 else None
        if keep:  # a sync point that never completed left its stage (a lost rank; a relaunch)
            self.folder.drop_staged()
        decision = self._agree((mine, records), merge, item.nodeid, rep.when, keep)
        if rep.when == "teardown":
            self.recorder.landed()  # rank 0 wrote them before the ranks agreed
        self.watchdog.disarm()
        if decision["longrepr"] is not None:
            rep.outcome = "failed"
            rep.longrepr = decision["longrepr"]
            if hasattr(rep, "wasxfail"):
                del rep.wasxfail
            failed = ("failed_ranks", " ".join(self.labels[r] for r in decision["ranks"]))
            item.user_properties.append(failed)
            if rep.when == "teardown":
                rep.user_properties.append(failed)
        return rep

    def _failed_record(self, item: pytest.Item, when: str, decision: dict, summaries: dict) -> dict:
        """A record of suite <the test's>, metric test_failed: the failing ranks and their nodes, and
        what went wrong, so that analysis turns a failure its records do not explain into a finding."""
        ranks = decision["ranks"]
        nodes = sorted({self.topology.ranks[r].node for r in ranks}, key=natural_key)
        rails = {self.topology.ranks[r].rail for r in ranks}
        return make_record(test=item.nodeid, suite=_suite_of(item), metric=FAILED_METRIC, value=None, unit="", nodes=nodes,
                           ranks=ranks, rail=rails.pop() if len(rails) == 1 else None, iteration=self.iteration,
                           samples=0, verdict="fail", file=getattr(item.getparent(pytest.Module), "nodeid", None),
                           detail=f"{when}: {outcomes.failure_headline(decision, summaries)}")

    # ---- the end ---------------------------------------------------------
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus):
        # Outermost: inside, rank 0 prints the summary and writes junit.xml, under the deadline too.
        self._arm("session", "sessionfinish", self.default_timeout)
        result = yield
        mine = self.forced_exit if self.forced_exit is not None else _EXIT_MAP.get(int(session.exitstatus), EXIT_INCOMPLETE)
        code = self._agree(mine, lambda got: max(got.values()), "session", "sessionfinish")
        self.watchdog.disarm()
        if int(session.exitstatus) == 5 and self.rank == 0:
            self._say("acceptance: no tests were selected (check the paths and the -m / -k expression)")
        if self.rank == 0:
            self.folder.update_run(end=utc_now(), complete=code != EXIT_INCOMPLETE, exit_code=code)
            if self.status is not None:
                self.status.stop()
        session.exitstatus = code
        return result

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._logfile is not None:
            self._logfile.close()
        if self.recorder is not None:
            self.recorder.close()  # its spill file is gone unless a test's records never landed
        # Every rank agreed on the exit code: finalize now so `python -m mpi4py`
        # does not turn a non-zero exit (failed tests) into an MPI_Abort. NCCL's
        # communicators go first (they use MPI's), and neither may hang the job's end.
        with _bounded(f"rank {self.labels[self.rank]}: NCCL teardown and MPI_Finalize",
                      self.default_timeout + END_GRACE_S, self._stderr):
            nccl = sys.modules.get("acceptance.engines.nccl")
            if nccl is not None:
                nccl.destroy_all()
            if MPI.Is_initialized() and not MPI.Is_finalized():
                MPI.Finalize()

    # ---- agreement and hangs ----------------------------------------------
    def _arm(self, nodeid: str, when: str, timeout: float) -> None:
        self.pulse.set_timeout(timeout)
        self.watchdog.arm(nodeid, when, timeout)

    def progress(self) -> None:
        """This rank made progress: its deadline restarts, and (through rank 0) everyone's."""
        self.watchdog.rearm()
        self.pulse.beat()

    def _job_progress(self) -> None:
        self.watchdog.rearm()

    def _stage(self, rank: int, payload: tuple) -> tuple:  # rank 0: a teardown payload as it arrives
        return payload[0], self.folder.stage_lines([payload[1]])  # its summary kept, its records staged

    def _agree(self, payload, merge, nodeid: str, when: str, keep=None):
        """Agree under the armed phase's deadline (every caller arms the watchdog first); the
        deadline moves with the job's progress while this rank waits."""
        phase = self.watchdog.phase
        try:
            return self.sync.agree(payload, merge, lambda: (self.watchdog.phase or phase).deadline, phase.label,
                                   grace=GRACE_S, poll=self.pulse.pump, arrival=self.pulse.seen, keep=keep)
        except Missing as m:
            self._hang(nodeid, when, m.ranks, phase.timeout, m.arrived)
        except RootLost:
            self._root_lost(phase)

    def _make_watchdog(self) -> Watchdog:
        # Rank 0 reports hangs. Another rank's watchdog only leaves its stack in its log (and tells
        # rank 0 where it is): it cannot tell a stuck job from a job busy elsewhere, and a lost
        # rank 0 is noticed at the sync point. The faulthandler backstop (exit without Python,
        # for a GIL never released) comes later there: rank 0 should have reported first.
        if self.rank == 0:
            return Watchdog([(ROOT_LATE_S, self._root_deadline)], backstop_file=self._stderr,
                            backstop_after=lambda t: t + GRACE_S + 30.0)
        return Watchdog([(0.0, self._dump_stack)], backstop_file=self._stderr,
                        backstop_after=lambda t: 2 * t + GRACE_S + 60.0)

    def _root_deadline(self, phase: Phase) -> None:
        """Rank 0's own main thread did not reach the sync point: report who else is missing too."""
        if self._hang_lock.locked() or self.sync.merging:
            return  # already reporting; or every rank arrived and the main thread merges (not a hang)
        arrived = self.sync.arrived() if self.thread_mpi else self.sync.arrived_so_far()
        arrived.pop(0, None)
        missing = sorted(set(range(self.size)) - set(arrived))
        if self.folder is not None:
            with open(self.folder.log(0), "a") as log:
                self._dump_stack(phase, log)
        self._hang(phase.nodeid, phase.when, missing, phase.timeout, arrived)

    def _dump_stack(self, phase: Phase, out=None) -> None:
        out = out or self._logfile or self._stderr
        print(f"[rank {self.labels[self.rank]}] no progress for {phase.timeout:g} s at {phase.label}; "
              f"stack of every thread:", file=out, flush=True)
        faulthandler.dump_traceback(file=out, all_threads=True)
        # Tell rank 0 where this rank's main thread is, so the HANG report can
        # set the odd rank out (sleeping, computing) apart from those waiting in MPI.
        if self.thread_mpi:
            self.sync.send_note(phase.label, _main_thread_location())

    def _root_lost(self, phase: Phase) -> None:
        with self._hang_lock:
            self._say(f"HANG: rank {self.labels[0]} did not answer at {phase.label} within "
                      f"{phase.timeout + GRACE_S:g} s; rank {self.labels[self.rank]} aborts the job")
            if self.rank == 1 and self.folder is not None:
                self.folder.update_run(end=utc_now(), complete=False, exit_code=EXIT_INCOMPLETE,
                                       missing_ranks=[0])
            self._abort()

    def _hang(self, nodeid: str, when: str, missing: list[int], timeout: float, arrived: dict) -> None:
        """Rank 0: report the ranks that did not arrive, write junit.xml and run.json, abort with 3."""
        if not self._hang_lock.acquire(blocking=False):
            while True:  # the other thread is reporting and will abort the job
                time.sleep(60)
        message = (f"HANG: {outcomes.describe(missing, self.labels)} did not reach {nodeid} ({when}) "
                   f"within {timeout:g} s")
        capman = self.config.pluginmanager.getplugin("capturemanager")
        try:
            if capman is not None:
                capman.suspend_global_capture(in_=True)
        except Exception:
            pass  # reporting matters more than tidy capture state; we abort next
        mpi_ok = self.thread_mpi or threading.current_thread() is threading.main_thread()
        notes = self.sync.collect_notes(NOTE_WAIT_S, f"{nodeid} ({when})") if mpi_ok else {}
        if self.rank in missing:
            notes[self.rank] = _main_thread_location()
        silent = [r for r in missing if r not in notes]
        if silent and mpi_ok:
            notes.update(self.sync.collect_notes(SILENT_WAIT_S, f"{nodeid} ({when})"))
            silent = [r for r in missing if r not in notes]
        for rank in notes:
            if rank not in missing:
                notes[rank] = "the sync point (arrived in time)"
        where = [f"  {outcomes.describe(ranks, self.labels)} at {place}"
                 for place, ranks in _group(notes).items()]
        if silent and mpi_ok:  # analysis.lost: silent ranks all on one node make that node the hung one
            where.append(f"  {outcomes.describe(silent, self.labels)} said nothing (stopped, or stuck without "
                         f"releasing the interpreter)")
        if not mpi_ok:
            where.append("  (MPI thread level below MPI_THREAD_MULTIPLE: the watchdog thread made no MPI call, so "
                         "ranks waiting at the sync point are listed too; each rank's stack is in its log)")
        report = "\n".join([message, *where, *self._failures_before(arrived)])
        self._say("\n" + report)
        try:
            self._log_hang_report(nodeid, when, report)
        finally:
            if self.folder is not None:
                self.folder.update_run(end=utc_now(), complete=False, exit_code=EXIT_INCOMPLETE,
                                       missing_ranks=missing, hang=report, **({"silent_ranks": silent} if mpi_ok else {}))
            self._say(f"\nacceptance: run folder {self.folder.path if self.folder else '(none)'}; "
                      f"stacks of every rank in logs/rank-<r>.log")
            self._abort(mpi_ok)

    def _failures_before(self, arrived: dict) -> list[str]:
        """Ranks that arrived having failed: often why the others wait in a collective for them."""
        by_text: dict[str, list[int]] = {}
        for rank in sorted(arrived):
            payload = arrived[rank]
            summary = payload[0] if isinstance(payload, tuple) and isinstance(payload[0], dict) else None
            if summary and summary.get("outcome") == "failed":
                by_text.setdefault(summary["text"], []).append(rank)
        lines = []
        for text, ranks in by_text.items():
            lines.append(f"  {outcomes.describe(ranks, self.labels)} arrived having failed "
                         f"(the others may be waiting for them in a collective):")
            lines += ["    " + line for line in text.rstrip().splitlines()[-HANG_TEXT_LINES:]]
        return lines

    def _abort(self, mpi_ok: bool = True) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        if mpi_ok:
            self.world.Abort(EXIT_INCOMPLETE)
        # Otherwise (a watchdog thread below MPI_THREAD_MULTIPLE) the exit itself ends the job: the
        # launcher tears down the other ranks, and any that wait on at a sync point see rank 0 gone.
        # Under srun (PMI) MPI_Abort can return while Slurm tears the step down.
        os._exit(EXIT_INCOMPLETE)

    def _log_hang_report(self, nodeid: str, when: str, message: str) -> None:
        """A failed report for the test in flight, so terminal and junit.xml show the hang."""
        from _pytest.junitxml import xml_key
        from _pytest.reports import TestReport
        item = next((i for i in self._items if i.nodeid == nodeid), None)
        location = item.location if item is not None else (nodeid, None, nodeid)
        reports = [TestReport(nodeid, location, {}, "failed", message, when,
                              user_properties=[("hang", message)])]
        if when != "teardown":  # junit.xml finalizes a test case on its teardown report
            reports.append(TestReport(nodeid, location, {}, "passed", None, "teardown",
                                      user_properties=[("hang", message)]))
        for rep in reports:
            self.config.hook.pytest_runtest_logreport(report=rep)
        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            xml.pytest_sessionfinish()
        elif self.folder is not None and self.config.option.xmlpath:
            _write_junit_hang(Path(self.config.option.xmlpath), nodeid, when, message)

    def _say(self, text: str) -> None:
        print(text, file=self._stderr, flush=True)

    def _exit(self, code: int, message: str):
        self.forced_exit = code
        if self.watchdog is not None:
            self.watchdog.disarm()
        pytest.exit(message, returncode=code)


def _write_junit_hang(path: Path, nodeid: str, when: str, message: str) -> None:
    """junit.xml for a hang before pytest's junit writer exists (start-up): one failed case."""
    from xml.etree import ElementTree as ET
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="pytest", errors="0", failures="1", skipped="0", tests="1",
                          timestamp=utc_now())
    case = ET.SubElement(suite, "testcase", classname=nodeid, name=when, time="0")
    ET.SubElement(case, "failure", message=message.splitlines()[0]).text = message
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


@contextlib.contextmanager
def _bounded(what: str, seconds: float, out):
    """Run the block; if it has not finished after `seconds`, say so with every thread's stack and
    exit 3 (a Python thread, with faulthandler behind it for a GIL never released)."""
    def overran():
        print(f"acceptance: {what} did not finish within {seconds:g} s; exiting 3", file=out, flush=True)
        faulthandler.dump_traceback(file=out, all_threads=True)
        os._exit(EXIT_INCOMPLETE)
    timer = threading.Timer(seconds, overran)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(seconds + 30.0, exit=True, file=out)
    try:
        yield
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()


def _main_thread_location() -> str:
    """'file.py:12 in test_x: time.sleep(300)' for the innermost frame of the main thread."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return "unknown"
    last = traceback.extract_stack(frame)[-1]
    return f"{last.filename}:{last.lineno} in {last.name}: {(last.line or '').strip()}"


def _suite_of(item) -> str:
    """A test's suite: its module's SUITE, else its file's name without `test_`."""
    module = getattr(item, "module", None)
    return getattr(module, "SUITE", None) or Path(getattr(module, "__file__", item.nodeid)).stem.removeprefix("test_")


def _group(by_rank: dict) -> dict:
    """value -> the ranks that gave it (a collection's digest, a hang note's place)."""
    groups: dict = {}
    for rank in sorted(by_rank):
        groups.setdefault(by_rank[rank], []).append(rank)
    return groups


def _report_text(rep) -> str:
    if rep.passed:
        return ""
    if isinstance(rep.longrepr, tuple):  # a skip: (path, lineno, "Skipped: reason")
        return str(rep.longrepr[2])
    return rep.longreprtext


def _launcher() -> str:
    if "SLURM_STEP_ID" in os.environ or "SLURM_PROCID" in os.environ:
        return "srun"
    if "PMI_RANK" in os.environ or "PMIX_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        return "mpiexec"
    return "none"
