import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# `pytest --cpu-hog` (or ACCEPTANCE_TEST_HOG=1): the rig and emulated-cluster tests run with one busy
# process per core beside them, so the machine runs them at about half its speed. Their verdicts must
# not change: nothing they judge may depend on how fast this machine is.
HOG_MARKERS = ("softroce", "e2e")
# A hog ends with the test worker that started it (it is then another process's child), or after
# `seconds`: a run stopped with Ctrl-C once left two busy for the next hour.
HOG = ("import os, time\nend = time.monotonic() + {seconds}\n"
       "while time.monotonic() < end and os.getppid() == {parent}:\n    pass\n")


def pytest_addoption(parser):
    parser.addoption("--cpu-hog", action="store_true", default=bool(os.environ.get("ACCEPTANCE_TEST_HOG")),
                     help="run the Soft-RoCE rig and emulated-cluster tests beside one busy process per core")


# Under pytest-xdist (`make test` runs `-n 3`) the emulation tests run on one worker, one module after
# another: the Slurm tests share /etc/slurm and /etc/acceptance/site.env while an emulated cluster is up,
# the rig's tests share one guest, and each emulation needs the cores to itself more than the unit
# tests do (the Soft-RoCE guest beside an emulated cluster slowed both 2-3x and stood healthy links
# 8x apart). The embedded default run's tests share one run (test_default_run.py's module fixture),
# so they go to one worker too. Every other test is a unit of its own, spread over the other workers.
XDIST_GROUPS = {"tests/e2e/": "emulation", "tests/cluster/": "emulation", "tests/integration/test_srun.py": "emulation",
                "tests/integration/test_default_run.py": "default_run",
                "tests/integration/test_report_browser.py": "default_run"}


# The emulation worker's modules are `make test`'s longest path (the guest, then the cluster); the
# other workers run their tests at a lower priority, so they fill the cores the emulations leave
# instead of slowing them down (the unit tests have the slack).
UNIT_NICE = 5


def _group(nodeid: str) -> str | None:
    return next((g for prefix, g in XDIST_GROUPS.items() if nodeid.startswith(prefix)), None)


def pytest_runtest_setup(item):
    if os.environ.get("PYTEST_XDIST_WORKER") and _group(item.nodeid) != "emulation":
        if os.getpriority(os.PRIO_PROCESS, 0) < UNIT_NICE:
            os.setpriority(os.PRIO_PROCESS, 0, UNIT_NICE)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid) or nodeid

    return Groups(config, log)


@pytest.fixture(scope="module", autouse=True)
def cpu_hog(request):
    """One busy process per core for the duration of a rig or emulated-cluster test module (whose
    guest or cluster is shared by its tests), when asked."""
    if not request.config.getoption("--cpu-hog") or not any(
            request.node.get_closest_marker(m) for m in HOG_MARKERS):
        yield None
        return
    # Each hog also stops by itself when this process dies without its teardown, and after an hour.
    hogs = [subprocess.Popen([sys.executable, "-c", HOG.format(seconds=3600, parent=os.getpid())], stdin=subprocess.DEVNULL)
            for _ in range(os.cpu_count() or 1)]
    try:
        yield hogs
    finally:
        for h in hogs:
            h.kill()
            h.wait()

_CHECKED: set = set()  # (results.jsonl, mtime, size) already held to the record schema
_ODD: set = set()      # tmp_path folders of odd_records tests


@pytest.fixture(autouse=True)
def records_match_the_schema(request):
    """After each test that used tmp_path: every record it left there matches docs/record.schema.json."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    if request.node.get_closest_marker("odd_records"):
        _ODD.add(str(request.getfixturevalue("tmp_path")))
        yield
        return
    tmp = request.getfixturevalue("tmp_path")  # set up before this fixture's teardown runs, torn down after
    yield
    import recordschema
    bad = recordschema.folders_problems(tmp, _CHECKED)
    assert not bad, "records that break docs/record.schema.json:\n" + "\n".join(bad[:20])


def pytest_sessionfinish(session, exitstatus):
    """Run folders of module-wide rigs (tmp_path_factory) too: every results.jsonl under the basetemp."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or (session.config.getoption("numprocesses", None)
                           and not hasattr(session.config, "workerinput")):
        return  # the xdist controller: each worker checks its own
    import recordschema
    try:
        base = factory.getbasetemp()
    except (OSError, ValueError):
        return
    bad = recordschema.folders_problems(base, _CHECKED, skip=_ODD)
    if bad:
        session.config.get_terminal_writer().line("records that break docs/record.schema.json:\n" + "\n".join(bad[:20]),
                                                   red=True)
        session.exitstatus = 1


# Small suites that the integration tests run under mpiexec; never collected directly.
collect_ignore = ["mpi_suites"]

ROOT = Path(__file__).resolve().parents[1]
SUITES = Path(__file__).resolve().parent / "mpi_suites"
BIN = Path(sys.executable).parent


@dataclass
class Run:
    rc: int
    out: str
    seconds: float
    folder: Path

    def run_json(self) -> dict:
        import json
        return json.loads((self.folder / "run.json").read_text())


def run_env(extra: dict | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ACCEPTANCE_", "PMI", "PYTEST_"))}
    env["PYTHONHASHSEED"] = "0"
    env.update(extra or {})
    return env


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """`acceptance run` with nothing given: the embedded default (2 virtual nodes x 2 rails), run once for
    the tests that read it (test_default_run.py, and the browser test's report): one xdist group."""
    cwd = tmp_path_factory.mktemp("default")
    p = subprocess.run([str(Path(sys.executable).parent / "acceptance"), "run"], cwd=cwd, env=run_env(None),
                       capture_output=True, text=True, timeout=420)
    assert p.returncode == 0, p.stdout + p.stderr
    p.cwd = cwd
    return p


@pytest.fixture
def mpi_pytest(tmp_path):
    """Run a tests/mpi_suites file under `mpiexec -n N python -m mpi4py -m pytest` with the plugin."""
    def run(suite: str, *args: str, n: int = 4, nodes: int | None = 2, env: dict | None = None,
            timeout: float = 120, launcher: bool = True) -> Run:
        folder = tmp_path / "run"
        extra = dict(env or {})
        if nodes and launcher:
            extra.update(ACCEPTANCE_VIRTUAL_NODES=str(nodes), ACCEPTANCE_RANKS_PER_NODE=str(n // nodes))
        cmd = [sys.executable, "-m", "mpi4py", "-m", "pytest", "-p", "acceptance.runtime.pytest_plugin",
               "-p", "no:cacheprovider", f"--confcutdir={SUITES}", "--run-dir", str(folder),
               str(SUITES / suite), *args]
        if launcher:
            cmd = [str(BIN / "mpiexec"), "-n", str(n), *cmd]
        start = time.monotonic()
        p = subprocess.run(cmd, cwd=tmp_path, env=run_env(extra), capture_output=True, text=True, timeout=timeout)
        return Run(p.returncode, p.stdout + p.stderr, time.monotonic() - start, folder)
    return run


@pytest.fixture
def acceptance_cli(tmp_path):
    """Run the `acceptance` console script in a scratch folder. The bound is for a run that never ends:
    the longest runs here take 140 s on this machine with the cores to share, and must pass at half
    its speed (beside the Soft-RoCE guest, which holds a core while it measures)."""
    def run(*args: str, env: dict | None = None, timeout: float = 420) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "acceptance"), *args], cwd=tmp_path, env=run_env(env),
                              capture_output=True, text=True, timeout=timeout)
    return run
