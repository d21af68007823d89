"""How `acceptance run` starts its ranks: one class per launcher, registered by name (as ReFrame's
@register_launcher). Each says whether it can run here and the command that starts N ranks.

    local    mpiexec on this machine; ranks grouped into virtual nodes node1..nodeN
    mpirun   your MPI's mpirun, real hosts (the MPI library places the ranks)
    srun     srun over the current Slurm allocation
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

# With srun: each rank's FI_TCP_IFACE becomes this prefix + its local rank (e.g. "rail" -> rail0, rail1).
ENV_RAIL_IFACE = "ACCEPTANCE_RAIL_IFACE_PREFIX"


class LaunchError(Exception):
    """A launcher that cannot run here, with what to do about it (the CLI's usage error, exit 2)."""


class Launcher:
    """Starts nodes x per_node ranks of `python -m mpi4py ...` (a rank that dies aborts the job)."""

    name = ""
    here = False  # every rank runs on this machine

    def check(self) -> None:
        """Raise LaunchError when this launcher cannot run here."""

    def command(self, nodes: int, per_node: int, exclude: tuple[str, ...] = ()) -> tuple[list[str], dict, str]:
        """(argv prefix, environment, what it does in words). `exclude`: nodes to leave out (a relaunch
        after they were lost); LaunchError where this launcher cannot."""
        raise NotImplementedError

    @staticmethod
    def python() -> list[str]:
        return [sys.executable, "-m", "mpi4py"]


LAUNCHERS: dict[str, Launcher] = {}


def register(cls: type[Launcher]) -> type[Launcher]:
    LAUNCHERS[cls.name] = cls()
    return cls


# The local launcher's mpiexec, where it is not the one beside this interpreter (another MPI stack's:
# its library must be the one mpi4py loads, e.g. MPI4PY_LIBMPI for mpi4py's own wheels).
ENV_MPIEXEC = "ACCEPTANCE_MPIEXEC"


def mpiexec() -> str:
    """$ACCEPTANCE_MPIEXEC; else the pip-installed MPI next to this interpreter (mpi4py here was built
    against it); else the system's mpiexec or mpirun."""
    chosen = os.environ.get(ENV_MPIEXEC)
    if chosen:
        found = shutil.which(chosen)
        if not found:
            raise LaunchError(f"{ENV_MPIEXEC}={chosen}: no such executable")
        return found
    here = Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise LaunchError(f"no mpiexec beside {sys.executable} and no mpiexec/mpirun on PATH: `pip install "
                          f"'acceptance[mpich]'`, or load your cluster's MPI module (and build mpi4py against it)")
    return found


def stack_of(mpiexec_path: str) -> str:
    """Which MPI stack an mpiexec belongs to, from its --version: "Open MPI" (also OpenRTE, PRRTE),
    "MPICH" (Hydra: Intel MPI and MVAPICH too), else ""."""
    import subprocess
    try:
        out = subprocess.run([mpiexec_path, "--version"], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if any(word in out for word in ("Open MPI", "OpenRTE", "PRRTE")):
        return "Open MPI"
    return "MPICH" if any(word in out for word in ("HYDRA", "MPICH")) else ""


@register
class Local(Launcher):
    name = "local"
    here = True

    def command(self, nodes, per_node, exclude=()):
        # Imported here: topology imports mpi4py.MPI, which initializes MPI, and commands such
        # as `srun acceptance counters snapshot` must not start MPI in every task.
        from ..host.nics import ENV_DEVICE_MAP
        from ..runtime.topology import ENV_EXCLUDE, ENV_NODES, ENV_RANKS_PER_NODE, virtual_nodes
        env = dict(os.environ)
        env[ENV_NODES], env[ENV_RANKS_PER_NODE] = str(nodes), str(per_node)
        env.pop(ENV_EXCLUDE, None)
        if exclude:
            env[ENV_EXCLUDE] = ",".join(exclude)
        nodes = len(virtual_nodes(nodes, env))
        n = nodes * per_node
        devices = os.environ.get(ENV_DEVICE_MAP)
        exe = mpiexec()
        stack = stack_of(exe)
        extra, notes = [], []
        if stack == "Open MPI":
            # Open MPI gives a machine one slot per core and refuses more ranks ("not enough slots");
            # virtual nodes on one machine are oversubscribed on purpose, and Hydra allows it.
            extra.append("--oversubscribe")
            # Every rank is on this machine, where osc/sm serves one-sided MPI. osc/ucx is queried
            # again for every window and fails without a network device, printing an error each
            # time; on some machines that query takes 200 ms, which memreg would time as registration.
            if "OMPI_MCA_osc" not in env:
                env["OMPI_MCA_osc"] = "^ucx"
                notes.append("osc/ucx off")
            if os.geteuid() == 0:
                # It also refuses root (containers and CI run as root); these are its own switches.
                env["OMPI_ALLOW_RUN_AS_ROOT"] = env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
                notes.append("as root")
        return ([exe, "-n", str(n), *extra, *self.python()], env,
                f"{n} local ranks as {nodes} virtual nodes x {per_node} rails ({stack + ' ' if stack else ''}"
                f"mpiexec{', ' + ', '.join(notes) if notes else ''})"
                + (f", each node's RDMA devices from {ENV_DEVICE_MAP}={devices}" if devices else ""))


@register
class Mpirun(Launcher):
    name = "mpirun"

    def command(self, nodes, per_node, exclude=()):
        from ..runtime.topology import ENV_NODES, ENV_RANKS_PER_NODE
        if exclude:
            raise LaunchError("--launcher mpirun: no relaunch without the lost hosts (the MPI library places "
                              "the ranks); run under Slurm (srun) or name the hosts to your mpirun")
        env = dict(os.environ)
        for var in (ENV_NODES, ENV_RANKS_PER_NODE):
            env.pop(var, None)
        n = nodes * per_node
        mpirun = shutil.which("mpirun") or mpiexec()
        return [mpirun, "-n", str(n), *self.python()], env, f"{n} ranks ({mpirun})"


@register
class Srun(Launcher):
    name = "srun"

    def check(self):
        if not shutil.which("srun"):
            raise LaunchError("--launcher srun: srun is not on PATH")

    def command(self, nodes, per_node, exclude=()):
        env = dict(os.environ)
        # Not --no-kill: a step asked with it outlives a failed node and ignores --kill-on-bad-exit (srun(1)).
        # The job's own --no-kill (the sbatch scripts) keeps the allocation; this step ends with the node,
        # and `acceptance run` starts the next one on the others (srun --exclude).
        srun = ["srun", "--kill-on-bad-exit=1"]
        job_nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or nodes)
        fixed = re.match(r"\d+", os.environ.get("SLURM_NTASKS_PER_NODE") or "")
        if exclude:
            # The allocation's nodes but the lost ones, each with the job's tasks per node.
            per = int(fixed[0]) if fixed else per_node
            left = job_nodes - len(exclude)
            srun += [f"--nodes={left}", f"--ntasks={left * per}", f"--ntasks-per-node={per}",
                     f"--exclude={','.join(exclude)}"]
        elif not fixed and os.environ.get("SLURM_JOB_NUM_NODES"):
            # The job did not fix its tasks per node (an exclusive job of whole nodes): one rank per rail.
            srun += [f"--nodes={job_nodes}", f"--ntasks={job_nodes * per_node}", f"--ntasks-per-node={per_node}"]
        if os.environ.get("ACCEPTANCE_SRUN_MPI"):
            srun.append(f"--mpi={os.environ['ACCEPTANCE_SRUN_MPI']}")
        if os.environ.get(ENV_RAIL_IFACE):
            # Each rank's MPI traffic leaves through its own rail: interface <prefix><local rank>.
            # Set per rank, before MPI starts, so it must happen in the rank's own shell.
            srun += ["/bin/sh", "-c", f'FI_TCP_IFACE="${{{ENV_RAIL_IFACE}}}$SLURM_LOCALID" exec "$0" "$@"']
        return [*srun, *self.python()], env, (f"srun over Slurm job {os.environ.get('SLURM_JOB_ID', '?')}"
                                              + (f", without {', '.join(exclude)}" if exclude else ""))


def resolve(choice: str) -> Launcher:
    """The launcher for --launcher CHOICE: auto is srun inside a Slurm allocation, else local."""
    if choice == "auto":
        choice = "srun" if os.environ.get("SLURM_JOB_ID") and shutil.which("srun") else "local"
    if choice not in LAUNCHERS:
        raise LaunchError(f"--launcher {choice}: not one of auto, {', '.join(LAUNCHERS)}")
    launcher = LAUNCHERS[choice]
    launcher.check()
    return launcher
