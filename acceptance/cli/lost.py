"""Which rank a launcher saw die first, from what the launcher itself prints when it tears a job down.

A rank killed outright (SIGKILL, the OOM killer, a segfault) cannot record anything, and the launcher
stops every other rank at once, so rank 0 may not live to name it. The launchers do:

    srun       srun: error: node4: tasks 6-7: Killed
    Open MPI   prterun noticed that process rank 1 with PID 29718 on node vm exited on
               signal 9 (Killed).                     (mpirun / prterun; the line wraps)
               ... The first process to do so was:
                  Process name: [prterun-vm-32260@1,2]
                  Exit code:    7
    MPICH      =   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
               =   PID 29694 RUNNING AT vm            (Hydra names the process, not the rank:
               =   EXIT CODE: 9                        run.json's "processes" maps it to one)

Hydra names the first process *in rank order* whose status is not 0, and stops the others with
SIGTERM and SIGKILL: after a rank killed by signal 9 it names rank 0 (seen with MPICH 5). Its report
is used only where the status is not 9. Where every rank runs on this machine (the local launcher)
the order is seen directly instead (DeathWatch).

Only the launcher's words are read here; the rank, the node and the exit status become fields.
"""

from __future__ import annotations

import os
import re
import selectors
import socket
import threading
from dataclasses import dataclass

from ..runtime import liveness

SRUN = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (Killed|Terminated|Exited with exit code (\d+))")
OPEN_MPI = re.compile(r"noticed that process rank (\d+) with PID (\d+) on node (\S+) exited on\s+signal (\d+)"
                      r"(?: \(([^)]*)\))?")
# Open MPI 5 names the process [prterun-HOST-PID@JOB,RANK]; Open MPI 4 [[JOB,1],RANK].
OPEN_MPI_EXIT = re.compile(r"The first process to do so was:\s+Process name: \[.*?,(\d+)\]\]?\s+Exit code:\s+(\d+)")
HYDRA = re.compile(r"=\s+(?:RANK (\d+) )?PID (\d+) RUNNING AT (\S+)\s*=\s+(?:EXIT CODE|KILLED BY SIGNAL): (\d+)")
CLEANUP_SIGNAL = 9  # Hydra's to the ranks left
HYDRA_SIGNAL = re.compile(r"EXIT STRING: (.*?) \(signal (\d+)\)")


@dataclass(frozen=True)
class Lost:
    """What a launcher said of the first processes to end."""

    source: str                   # "srun", "Open MPI", "MPICH"
    host: str                     # the host (srun: the node) the launcher named; "" where it named none
    how: str                      # srun's "Killed", "signal 9 (Killed)", "Exited with exit code 1"
    ranks: tuple[int, ...] = ()   # the ranks it named (Hydra names none)
    pid: int | None = None        # the process it named (Hydra)
    exit_code: int | None = None  # where it ended by exiting, not by a signal


def from_line(line: str) -> Lost | None:
    """srun's report, one line each."""
    m = SRUN.search(line)
    if not m:
        return None
    ranks = tuple(r for part in m.group(2).split(",") for r in _task_range(part))
    return Lost("srun", m.group(1), m.group(3), ranks, exit_code=int(m.group(4)) if m.group(4) else None)


def from_text(text: str) -> list[Lost]:
    """Open MPI's and Hydra's reports: blocks of several lines, at the end of the launcher's output."""
    out = [Lost("Open MPI", m.group(3), f"signal {m.group(4)}" + (f" ({m.group(5)})" if m.group(5) else ""),
                (int(m.group(1)),), int(m.group(2)))
           for m in OPEN_MPI.finditer(text)]
    out += [Lost("Open MPI", "", f"Exited with exit code {m.group(2)}", (int(m.group(1)),), exit_code=int(m.group(2)))
            for m in OPEN_MPI_EXIT.finditer(text)]
    signal = HYDRA_SIGNAL.search(text)
    for m in HYDRA.finditer(text):
        rank, code = m.group(1), int(m.group(4))
        if code == CLEANUP_SIGNAL and not rank:
            continue  # perhaps a rank Hydra itself stopped (see above): it names no rank of its own
        # Hydra's "EXIT CODE" of a process that a signal ended is the signal's number; its exit string says so.
        killed = signal is not None and int(signal.group(2)) == code
        out.append(Lost("MPICH", m.group(3), f"signal {code} ({signal.group(1)})" if killed else f"Exited with exit code {code}",
                        (int(rank),) if rank else (), int(m.group(2)), None if killed else code))
    return out


def _task_range(part: str) -> range:
    low, _, high = part.partition("-")
    return range(int(low), int(high or low) + 1)


def resolve(lost: Lost, run: dict) -> tuple[list[int], list[str]]:
    """(ranks, nodes) that `lost` names, through run.json: its topology's nodes, and its "processes"
    ([host, pid] of each rank) where the launcher named a process. ([], []) where it cannot tell."""
    ranks = list(lost.ranks)
    if not ranks and lost.pid is not None:
        ranks = [r for r, (host, pid) in enumerate(run.get("processes") or [])
                 if pid == lost.pid and (host == lost.host or host.split(".")[0] == lost.host.split(".")[0])]
    node_of = {r: node for node, rs in ((run.get("topology") or {}).get("nodes") or {}).items() for r in rs}
    if lost.source == "srun":  # srun names the node itself
        return ranks, [lost.host]
    nodes = sorted({node_of[r] for r in ranks if r in node_of})
    return ranks, nodes


class DeathWatch:
    """The rank that ended first, where every rank runs on this machine (the local launcher): each rank
    holds a connection to this process (acceptance.runtime.liveness), which its exit closes before its
    launcher can notice and stop the others. A thread waits on them all, ahead of the ranks where it
    may, and notes the first to close; two at one wake-up leave it unknown."""

    def __init__(self):
        self.first: tuple[int, str] | None = None   # (rank, host)
        self.announced: set[int] = set()   # the ranks whose connection said who they are
        self.ended = threading.Event()     # set once a connection closed (first is then known, or never)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.address = f"@acceptance-{os.getpid()}-{os.urandom(6).hex()}"  # abstract: no file to leave
        self.server.bind("\0" + self.address[1:])
        self.server.listen(1024)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        return {liveness.ENV_LIVENESS: self.address}

    def _wait(self) -> None:
        _ahead()
        ranks: dict[socket.socket, int | None] = {}
        with selectors.DefaultSelector() as sel:
            sel.register(self.server, selectors.EVENT_READ)
            while not self._stop.is_set():
                closed = []
                for key, _ in sel.select(timeout=0.5):
                    if key.fileobj is self.server:
                        conn, _ = self.server.accept()
                        ranks[conn] = None
                        sel.register(conn, selectors.EVENT_READ)
                        continue
                    data = key.fileobj.recv(64)
                    if data:
                        if ranks[key.fileobj] is None:
                            ranks[key.fileobj] = int(data.split(b"\n")[0])
                            self.announced.add(ranks[key.fileobj])
                    else:
                        closed.append(ranks[key.fileobj])
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                if closed:
                    # Two at one wake-up: which rank led is not known.
                    if len(closed) == 1 and closed[0] is not None:
                        self.first = (closed[0], socket.gethostname())
                    self.ended.set()
                    break
        for conn in ranks:
            conn.close()

    def lost(self) -> Lost | None:
        """The first rank to end, as a report (its status is its launcher's to tell), and stop watching."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.server.close()
        if self.first is None:
            return None
        rank, host = self.first
        return Lost("this machine", host, "its process ended while the others ran", (rank,))


def _ahead() -> None:
    """Run this thread ahead of the ranks where allowed (root: real-time; else a lower nice), so that it
    wakes at the first death before the launcher's clean-up reaches the other ranks, however busy the
    machine. A thread's scheduling is its own on Linux."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
        return
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, -10)
    except OSError:
        pass


def first_of(reports: list[Lost], watched: Lost | None) -> Lost | None:
    """The best account of the first rank to end: a launcher's that names a rank (srun, Open MPI),
    else what this machine saw, else Hydra's named process."""
    named = [r for r in reports if r.ranks]
    if named:
        return named[0]
    if watched is not None:
        return watched
    return reports[0] if reports else None
