"""What launchers print when they tear a job down, as each prints it (tests/data/launchers: MPICH 5's
Hydra and Open MPI 5's prterun, captured here), read into the rank, node and exit status."""
from pathlib import Path

from acceptance.cli import lost

DATA = Path(__file__).resolve().parents[1] / "data" / "launchers"
RUN = {"topology": {"nodes": {"node1": [0, 1], "node2": [2, 3]}},
       "processes": [["vm", 31535], ["vm", 31536], ["vm", 31537], ["vm", 31538]]}


def test_hydra_names_the_process_and_run_json_names_its_rank():
    (found,) = lost.from_text((DATA / "hydra-segfault.txt").read_text())
    assert (found.source, found.host, found.pid, found.how, found.exit_code) == (
        "MPICH", "vm", 31537, "signal 11 (Segmentation fault)", None)
    assert lost.resolve(found, RUN) == ([2], ["node2"])
    # A PID of another host is not this rank.
    other = {**RUN, "processes": [["vm2", 31537] if p[1] == 31537 else p for p in RUN["processes"]]}
    assert lost.resolve(found, other) == ([], [])


def test_hydra_after_a_sigkill_names_nobody():
    """Hydra names the first process in rank order whose status is not 0 and stops the rest with
    SIGKILL: its PID after a signal 9 may be a rank it stopped itself (rank 0, when rank 3 was killed)."""
    assert lost.from_text((DATA / "hydra-killed.txt").read_text()) == []


def test_this_machine_sees_which_rank_ended_first():
    """Three processes announce themselves as ranks (acceptance.runtime.liveness); rank 1 is killed,
    then the others: the watch names rank 1, and a launcher's named rank would still come first."""
    import os
    import signal
    import subprocess
    import sys
    import time
    watch = lost.DeathWatch()
    code = "import sys, time; from acceptance.runtime import liveness; liveness.announce(int(sys.argv[1])); time.sleep(60)"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r)], env={**os.environ, **watch.env()}) for r in range(3)]
    try:
        # Events, not the clock: every rank announced, then rank 1's end noted, then the rest stopped.
        end = time.monotonic() + 60
        while watch.announced != {0, 1, 2} and time.monotonic() < end:
            time.sleep(0.01)
        assert watch.announced == {0, 1, 2}
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        assert watch.ended.wait(60)
        for p in procs:
            p.kill()
        first = watch.lost()
        assert (first.source, first.ranks) == ("this machine", (1,)), first
        assert lost.first_of([], first) is first
        assert lost.first_of(lost.from_text((DATA / "openmpi-killed.txt").read_text()), first).source == "Open MPI"
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_open_mpi_names_the_rank_of_a_signal_across_its_wrapped_line():
    (found,) = lost.from_text((DATA / "openmpi-killed.txt").read_text())
    assert (found.source, found.host, found.ranks, found.how, found.exit_code) == (
        "Open MPI", "vm", (1,), "signal 9 (Killed)", None)
    assert lost.resolve(found, RUN) == ([1], ["node1"])


def test_open_mpi_names_the_first_rank_to_exit_non_zero():
    (found,) = lost.from_text((DATA / "openmpi-exit7.txt").read_text())
    assert (found.ranks, found.exit_code, found.how) == ((2,), 7, "Exited with exit code 7")
    assert lost.resolve(found, RUN) == ([2], ["node2"])
    # Open MPI 4's process name
    (old,) = lost.from_text("The first process to do so was:\n\n  Process name: [[41525,1],3]\n  Exit code:    1\n")
    assert (old.ranks, old.exit_code) == ((3,), 1)


def test_srun_names_its_tasks_and_node():
    found = lost.from_line("srun: error: node4: tasks 6-7: Killed")
    assert (found.ranks, found.host, found.exit_code) == ((6, 7), "node4", None)
    assert lost.resolve(found, RUN) == ([6, 7], ["node4"])
    assert lost.from_line("srun: error: node2: task 3: Exited with exit code 2").exit_code == 2
    assert lost.from_line("pytest: 3 passed") is None and lost.from_text("3 passed, 1 skipped") == []
