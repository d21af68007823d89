"""A real Slurm cluster on this machine for tests: munged, slurmctld, and one `slurmd -N nodeK` per node.

Every daemon, file and port is private to one folder, so it never touches a
system Slurm. Needs root and Debian's slurm-wlm and munge (make test installs them).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sinfo", "srun", "salloc")


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (slurmd runs jobs as their user)"
    missing = [d for d in DAEMONS if not (shutil.which(d) or Path("/usr/sbin", d).exists())]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing): run `make test` as root"
    return None


def slurm_conf(*, cluster: str, folder: Path, controller: str, port: int, munge_socket: Path,
               mpi_default: str, nodes: str, partition: str, extra: str = "") -> str:
    """A slurm.conf whose every file, socket and port is private to `folder` (shared by emucluster.py).

    `extra`: more slurm.conf lines, appended as given (e.g. emucluster's HealthCheckProgram lines).

    Job ids start at a random number: MPICH names its shared-memory segments after
    the PMI job, and a segment left by a killed rank of an earlier "job 1" of a
    fresh cluster breaks the next job 1's MPI_Init.
    """
    d = folder
    return f"""\
ClusterName={cluster}
FirstJobId={1000 + secrets.randbelow(60_000_000)}
SlurmctldHost={controller}
SlurmctldPort={port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault={mpi_default}
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
{nodes}
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""" + (extra.rstrip("\n") + "\n" if extra.strip() else "")


def _free_ports(count: int) -> list[int]:
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _exe(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class LocalSlurm:
    def __init__(self, folder: Path, nodes: int = 2, cpus: int = 2):
        self.dir = folder
        self.nodes = [f"node{i}" for i in range(1, nodes + 1)]
        self.cpus = cpus
        self.host = socket.gethostname().split(".")[0]
        self.conf = folder / "slurm.conf"
        self.munge_dir = folder / "munge"

    def env(self, base: dict | None = None) -> dict:
        env = {k: v for k, v in (base or os.environ).items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def start(self) -> "LocalSlurm":
        (self.dir / "state").mkdir(parents=True, exist_ok=True)
        (self.dir / "log").mkdir(exist_ok=True)
        self._start_munge()
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        node_lines = "\n".join(
            f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} Port={p}"
            for n, p in zip(self.nodes, node_ports))
        d = self.dir
        self.conf.write_text(slurm_conf(
            cluster="acceptance-test", folder=d, controller=f"{self.host}(127.0.0.1)", port=ctld_port,
            munge_socket=self.munge_dir / "munge.socket.2", mpi_default="none", nodes=node_lines,
            partition="test"))
        env = self.env()
        subprocess.run([_exe("slurmctld")], env=env, check=True, timeout=30)
        for node in self.nodes:
            subprocess.run([_exe("slurmd"), "-N", node], env=env, check=True, timeout=30)
        self._wait_idle()
        return self

    def _start_munge(self) -> None:
        # Everything here runs as root (SlurmUser=root, jobs by root), so munged
        # runs as root too (--force) with a fresh key of its own.
        m = self.munge_dir
        m.mkdir(parents=True, exist_ok=True)
        m.chmod(0o700)
        key = m / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run([_exe("munged"), "--force", f"--key-file={key}", f"--socket={m}/munge.socket.2",
                        f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/seed",
                        "--num-threads=10"],  # a busy machine: the default 2 threads refuse clients
                       check=True, timeout=30)

    def _wait_idle(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        states = ""
        while time.monotonic() < end:
            p = subprocess.run([_exe("sinfo"), "-h", "-N", "-o", "%N %T"], env=self.env(),
                               capture_output=True, text=True, timeout=10)
            states = p.stdout + p.stderr
            idle = {line.split()[0] for line in p.stdout.splitlines() if line.split()[1:] == ["idle"]}
            if idle >= set(self.nodes):
                return
            time.sleep(0.5)
        raise RuntimeError(f"local Slurm nodes not idle after {timeout} s: {states}\nlogs in {self.dir / 'log'}")

    def stop(self) -> None:
        try:
            subprocess.run([_exe("scancel"), "--full", "-u", "root"], env=self.env(), capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass  # the daemons are stopped below either way
        pidfiles = [self.dir / f"slurmd-{n}.pid" for n in self.nodes]
        pidfiles += [self.dir / "slurmctld.pid", self.munge_dir / "munged.pid"]
        for pidfile in pidfiles:
            try:
                pid = int(pidfile.read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                continue
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except OSError:
                    break
                time.sleep(0.05)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
