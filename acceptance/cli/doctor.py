"""What this machine offers: one probe per engine or launcher, never raising.

`acceptance doctor` prints `probe_all()`. The mpi, verbs and nccl lines are the engines' own
available() (acceptance.engines.registry.probe): the reason the doctor prints is the one engine
selection and the suites' skips give.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .common import EXIT_OK
from ..host.command import run_command


@dataclass(frozen=True)
class Availability:
    name: str     # "mpi", "launcher", "slurm", "verbs", "gpu", "nccl"
    usable: bool
    detail: str   # what was found when usable; the concrete reason when not

    def line(self) -> str:
        return f"{self.name}: {'usable' if self.usable else 'unavailable'} \u2014 {self.detail}"


# --- helpers ---------------------------------------------------------------

def first_line(cmd: list[str], timeout: float | None = None, contains: str | None = None) -> str | None:
    """First non-empty stdout line of cmd (the first containing `contains`, if any
    does), whitespace collapsed; None if the command is missing, fails or times out."""
    ok, out = run_command(cmd, timeout)
    lines = [" ".join(ln.split()) for ln in out.splitlines() if ln.strip()] if ok else []
    if not lines:
        return None
    if contains:
        lines = [ln for ln in lines if contains.lower() in ln.lower()] or lines
    return lines[0]


def _never_raises(name: str) -> Callable:
    """A probe that raises anyway reports the exception as its reason."""
    def wrap(fn: Callable[[], Availability]) -> Callable[[], Availability]:
        @functools.wraps(fn)
        def probe() -> Availability:
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - the point is to never raise
                return Availability(name, False, f"probe failed: {type(e).__name__}: {e}")
        return probe
    return wrap


def _import_cupy():
    """(cupy, None) or (None, reason)."""
    try:
        import cupy
    except ModuleNotFoundError as e:
        if e.name == "cupy":
            from ..engines.nccl import CUPY_HINT
            return None, f"cupy not installed ({CUPY_HINT})"
        return None, f"cupy not importable: {e}"
    except Exception as e:  # CUDA libraries missing or mismatched raise various errors
        return None, f"cupy not importable: {type(e).__name__}: {e}"
    return cupy, None


# --- probes ----------------------------------------------------------------

def _engine(name: str) -> Availability:
    """What an engine says of itself (acceptance.engines.registry.probe): the doctor asks, it does not re-probe."""
    from ..engines import registry
    return Availability(name, *registry.probe(name))


@_never_raises("mpi")
def probe_mpi() -> Availability:
    found = _engine("mpi")
    if not found.usable:
        return found
    from mpi4py import MPI
    loaded = transports()
    return Availability("mpi", True, f"{found.detail}; {thread_mode(MPI.Query_thread())}; transport libraries "
                                     f"loaded: {', '.join(loaded) if loaded else 'none (shared memory and TCP only)'}")


# The libraries an MPI stack rides on, as they appear in this process once MPI is initialized: Open MPI
# and HPC-X load UCX (libucp) for their pml, MPICH and Intel MPI libfabric (ch4:ofi), either may load
# verbs or PSM2. A probe of what is loaded, not of what a build could load.
TRANSPORTS = (("libucp.so", "UCX"), ("libfabric.so", "libfabric"), ("libpsm2.so", "PSM2"),
              ("libibverbs.so", "verbs"), ("libnccl.so", "NCCL"))


def transports(maps: str = "/proc/self/maps") -> list[str]:
    """The transport libraries mapped into this process ("UCX (libucp.so.0)"), in TRANSPORTS' order."""
    try:
        names = {Path(line.split()[-1]).name for line in Path(maps).read_text().splitlines()
                 if len(line.split()) >= 6}
    except OSError:
        return []
    out = []
    for stem, what in TRANSPORTS:
        found = sorted(n for n in names if n.startswith(stem))
        if found:
            out.append(f"{what} ({found[0]})")
    return out


_THREAD_LEVELS = {0: "SINGLE", 1: "FUNNELED", 2: "SERIALIZED", 3: "MULTIPLE"}


def thread_mode(provided: int) -> str:
    """Which hang-watchdog mode a thread level gives (docs/pytest-under-mpi.md, "Thread level")."""
    name = f"MPI_THREAD_{_THREAD_LEVELS.get(provided, provided)}"
    if provided >= 3:
        return (f"thread level {name}: the hang watchdog may call MPI (names the ranks that arrived, asks the "
                f"stuck ones where they are, MPI_Abort)")
    return (f"thread level {name} (below MPI_THREAD_MULTIPLE; mpi4py asks for MULTIPLE unless "
            f"MPI4PY_RC_THREAD_LEVEL says otherwise): the hang watchdog makes no MPI call: a HANG report from "
            f"it lists every rank and the job ends by rank 0's exit")


@_never_raises("launcher")
def probe_launcher() -> Availability:
    """The launcher `acceptance run --launcher auto` would pick."""
    notes = []
    if os.environ.get("SLURM_JOB_ID"):
        srun = shutil.which("srun")
        if srun:
            version = first_line([srun, "--version"]) or "version unknown"
            return Availability("launcher", True, f"srun {srun} ({version}) in Slurm job {os.environ['SLURM_JOB_ID']}")
        notes.append("SLURM_JOB_ID is set but srun not on PATH")
    # The local launcher's mpiexec: $ACCEPTANCE_MPIEXEC, else the one next to our interpreter (the
    # mpich wheel, which matches the MPI mpi4py loaded), else PATH's.
    from .launch import LaunchError, mpiexec, stack_of
    try:
        found = mpiexec()
    except LaunchError as e:
        notes.append(str(e))
        return Availability("launcher", False, "; ".join(notes))
    # Hydra's first line is "HYDRA build details:"; Open MPI's first line carries the version.
    version = first_line([found, "--version"], contains="version") or "version unknown"
    detail = f"mpiexec {found} ({stack_of(found) or 'unknown MPI stack'}, {version})"
    return Availability("launcher", True, "; ".join([detail, *notes]))


@_never_raises("slurm")
def probe_slurm() -> Availability:
    tools = {t: shutil.which(t) for t in ("sinfo", "srun", "sbatch")}
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        where = (f"inside allocation {job} (SLURM_NNODES={os.environ.get('SLURM_NNODES', '?')}, "
                 f"SLURM_JOB_NODELIST={os.environ.get('SLURM_JOB_NODELIST', '?')})")
    else:
        where = "not inside a Slurm allocation"
    missing = [t for t, p in tools.items() if not p]
    on_path = f"{', '.join(missing)} not on PATH" if missing else "sinfo, srun, sbatch on PATH"
    if not tools["sinfo"]:
        # Inside a job srun alone is enough to launch; without sinfo we cannot ask the controller.
        return Availability("slurm", bool(job and tools["srun"]), f"{where}; {on_path}")
    # -N: one line per node (and partition); dedupe to count nodes.
    ok, out = run_command([tools["sinfo"], "-h", "-N", "-o", "%N"])
    if not ok:
        return Availability("slurm", False, f"{where}; controller did not answer: {out}")
    nodes = len(set(out.split()))
    return Availability("slurm", True, f"controller answers, sinfo lists {nodes} node(s); {where}; {on_path}")


@_never_raises("verbs")
def probe_verbs() -> Availability:
    return _engine("verbs")


@_never_raises("gpu")
def probe_gpu() -> Availability:
    cupy, reason = _import_cupy()
    if cupy is None:
        return Availability("gpu", False, reason)
    rt = cupy.cuda.runtime
    try:
        count = rt.getDeviceCount()
    except Exception as e:  # CUDARuntimeError: no driver, no device, ...
        return Availability("gpu", False, f"cupy imports but no CUDA device: {e}")
    if count == 0:
        return Availability("gpu", False, "cupy imports but getDeviceCount() returned 0")
    names = Counter()
    for i in range(count):
        n = rt.getDeviceProperties(i)["name"]
        names[n.decode() if isinstance(n, bytes) else str(n)] += 1
    devs = ", ".join(f"{k}\u00d7 {name}" for name, k in names.items())
    cuda = rt.runtimeGetVersion()  # 12040 -> 12.4
    return Availability("gpu", True, f"{devs} (cupy {cupy.__version__}, CUDA runtime {cuda // 1000}.{cuda % 1000 // 10})")


@_never_raises("nccl")
def probe_nccl() -> Availability:
    return _engine("nccl")


@_never_raises("perftest")
def probe_perftest() -> Availability:
    """ib_write_bw / ib_write_lat for the cross-check (usable needs an RDMA device too)."""
    from ..tools import perftest
    tools = perftest.find_tools()
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        return Availability("perftest", False, f"{', '.join(missing)} not on {perftest.where_searched()} "
                                               "(apt install perftest)")
    bw = tools["ib_write_bw"]
    try:  # perftest prints "Version: 6.06" and exits 1
        out = subprocess.run([bw, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    found = re.search(r"Version:\s*(\S+)", out)
    version = f"perftest {found.group(1)}" if found else "version unknown"
    json_note = "--out_json" if perftest.supports_json(bw) else "text report only"
    verbs = probe_verbs()
    if not verbs.usable:
        return Availability("perftest", False, f"{bw} ({version}, {json_note}) but {verbs.detail}")
    return Availability("perftest", True, f"{bw} ({version}, {json_note})")


@_never_raises("routes")
def probe_routes() -> Availability:
    """Whether $ACCEPTANCE_PROFILE's topology.routes can be followed (the cables each pair crosses)."""
    from ..rules.switches import routes_known
    return Availability("routes", *routes_known(os.environ["ACCEPTANCE_PROFILE"]))


def probe_all() -> list[Availability]:
    return [probe() for probe in (probe_mpi, probe_launcher, probe_slurm, probe_verbs, probe_perftest, probe_gpu,
                                  probe_nccl, *([probe_routes] if os.environ.get("ACCEPTANCE_PROFILE") else []))]


def format_report(items: Iterable[Availability]) -> str:
    return "\n".join(a.line() for a in items)


if __name__ == "__main__":
    print(format_report(probe_all()))


# ---- the command ----

def add_parser(sub) -> None:
    doctor = sub.add_parser("doctor", help="what this machine offers: MPI, launcher, Slurm, RDMA, GPUs, NCCL")
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    print(format_report(probe_all()))
    return EXIT_OK
