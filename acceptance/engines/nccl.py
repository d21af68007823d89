"""The `nccl` engine: all-reduce and all-to-all on GPUs through cupy.cuda.nccl.

NcclEngine has the collective interface of the `mpi` engine (NAME, available,
configure, allreduce, alltoall -> mpi.Collective), on cupy device memory through an NCCL
communicator built for the given mpi4py communicator: comm rank 0 calls
ncclGetUniqueId, `comm.bcast` hands the id to every rank, each rank calls
ncclCommInitRank with its comm rank. The NCCL communicator is cached on the
mpi4py communicator (an MPI attribute: freed with it) and destroyed at exit.

What is measured and checked is exactly what the mpi engine measures and
checks (acceptance/engines/mpi.py): the same float64 inputs made of small
integers, the same byte counts (nccl-tests' "size"), the same exact comparison
with zero tolerance, and the same per-iteration slowest rank on comm rank 0
(mpi.slowest, MPI.MAX). All-to-all is nccl-tests' alltoall: one ncclSend and
one ncclRecv per peer (itself included) inside ncclGroupStart/ncclGroupEnd.

Timing: every iteration is bracketed by a pair of CUDA events recorded on the
engine's stream, start event - collective - end event, all enqueued
back-to-back; the elapsed time between the two events (cudaEventElapsedTime,
ms, resolution about 0.5 us) is that iteration's time in ns. The events are
timestamped by the GPU when the stream reaches them, so the host (Python,
the launch calls) is not in the timed path; the host reads the times once,
after the last end event has completed. As on the mpi engine, an iteration
includes waiting for the slowest peer, which is what the MPI.MAX over ranks
then reports.

Data and check functions take an array module `xp` (numpy or cupy), so the
tests run them on numpy where there is no GPU and compare them with mpi.py's.

GPUDirect RDMA detection reads NCCL's own debug output (acceptance.engines.nccl_log): configure()
has NCCL write it to per-process files in the run folder.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mpi4py import MPI

from .collective_data import ALLREDUCE, ALLTOALL, Buffers
from . import nccl_log
from .mpi import Collective, checked
from .registry import register




# ---- availability and device choice ------------------------------------------


def _cupy():
    import cupy

    return cupy


CUPY_HINT = "pip install 'acceptance[gpu]'"


def nccl_version_string(code: int) -> str:
    """NCCL's integer version: 22703 -> "2.27.3"; before 2.9 it was 2804 -> "2.8.4"."""
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def available() -> tuple[bool, str]:
    """(usable, what was found or why not); never raises."""
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ModuleNotFoundError, or CUDA libraries missing/mismatched
        return False, f"cupy not importable: {type(e).__name__}: {e} ({CUPY_HINT})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CUDARuntimeError: no driver, no device
        return False, f"no CUDA device: {e}"
    if count < 1:
        return False, "no CUDA device: cudaGetDeviceCount() returned 0"
    try:
        from cupy.cuda import nccl
    except Exception as e:  # noqa: BLE001 - available() never raises
        return False, f"cupy.cuda.nccl missing: {type(e).__name__}: {e}"
    if not getattr(nccl, "available", True) or not hasattr(nccl, "NcclCommunicator"):
        return False, ("cupy.cuda.nccl is not available: cupy found no NCCL library "
                       "(pip install nvidia-nccl-cu12, or put libnccl.so.2 on the library path)")
    try:
        version = nccl_version_string(nccl.get_version())
    except Exception as e:  # noqa: BLE001 - NcclError, or a broken NCCL library
        return False, f"cupy.cuda.nccl does not answer: {type(e).__name__}: {e}"
    try:
        names = Counter(_device_name(cupy, i) for i in range(count))
        gpus = ", ".join(name if k == 1 else f"{k}x {name}" for name, k in names.items())
    except Exception as e:  # noqa: BLE001 - names are a courtesy; the count is what matters
        gpus = f"(names unreadable: {e})"
    return True, f"NCCL {version}, {count} GPU(s): {gpus}"


def _device_name(cupy, i: int) -> str:
    name = cupy.cuda.runtime.getDeviceProperties(i)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


@dataclass
class Gpu:
    """The CUDA device a process's collectives run on, and the engine's cupy stream there."""

    device: int | None = None   # None: the current device (a script, a test), fixed at first use
    stream: object = None

    def device_id(self, cupy) -> int:
        if self.device is None:
            self.device = cupy.cuda.Device().id
        return self.device

    def stream_of(self, cupy):
        if self.stream is None:
            with cupy.cuda.Device(self.device_id(cupy)):
                self.stream = cupy.cuda.Stream(non_blocking=True)
        return self.stream


def device_for(local_rank: int, device_count: int) -> int:
    """The GPU a rank uses: local_rank % device_count (of the devices CUDA_VISIBLE_DEVICES shows)."""
    if device_count < 1:
        raise ValueError(f"no CUDA device to choose from (device count {device_count})")
    return local_rank % device_count


# ---- communicators ----------------------------------------------------------------

_live: list = []        # every NCCL communicator this process made, destroyed at exit
_keyval: int | None = None


def capture_nccl_debug(log_dir: str | os.PathLike | None = None, env=os.environ) -> dict[str, str]:
    """Make NCCL log what the harness parses, for this process's communicators.

    Sets NCCL_DEBUG=INFO (TRACE, if set, is kept: it includes INFO), NCCL_DEBUG_SUBSYS to
    include INIT and NET, and, when log_dir is given, NCCL_DEBUG_FILE=<log_dir>/nccl-%h-%p.log
    (NCCL writes one file per process; %h host, %p pid). NCCL reads these variables once per
    process, when it first initializes (in practice the first ncclGetUniqueId /
    ncclCommInitRank), so this must run BEFORE the first communicator is created; after
    that it raises instead of silently doing nothing. Recent NCCL opens the file line-buffered,
    so nccl_log.net_paths() can read it while the processes still run. Returns the variables it set.
    """
    if _live:
        raise RuntimeError("NCCL debug output must be set up before the first NCCL communicator: "
                           "NCCL read NCCL_DEBUG* when that communicator was created")
    return nccl_log.debug_env(log_dir, env)


def _destroy(nc) -> None:
    # At exit or on free there is nothing useful to do with an error; cupy's destroy() is a
    # no-op the second time.
    with contextlib.suppress(Exception):
        nc.destroy()


def _on_free(comm, keyval, nc) -> None:
    _destroy(nc)


@atexit.register
def destroy_all() -> None:
    """Destroy every NCCL communicator of this process; the collective plugin calls it before
    MPI_Finalize (and atexit, before mpi4py's own finalize, catches any other exit)."""
    while _live:
        _destroy(_live.pop())


def _new_nccl_comm(comm: MPI.Comm):
    """ncclGetUniqueId on comm rank 0, comm.bcast, ncclCommInitRank on every rank (collective), on the
    current CUDA device (the collectives make it theirs first)."""
    _cupy()  # a clear error where cupy is missing
    from cupy.cuda import nccl

    uid, error = None, None
    if comm.Get_rank() == 0:
        try:
            uid = nccl.get_unique_id()
        except Exception as e:  # noqa: BLE001 - every rank must hear of it, or the others wait in InitRank
            error = f"ncclGetUniqueId failed on comm rank 0: {type(e).__name__}: {e}"
    uid, error = comm.bcast((uid, error), root=0)
    if error:
        raise RuntimeError(error)
    return nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())  # on the current device


def communicator(comm: MPI.Comm, make: Callable[[MPI.Comm], object] = _new_nccl_comm):
    """The NCCL communicator for `comm`, made on first use (collective then) and cached on it:
    freeing `comm` destroys it, and so does the end of the process."""
    global _keyval
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval(delete_fn=_on_free)
    nc = comm.Get_attr(_keyval)
    if nc is None:
        nc = make(comm)
        comm.Set_attr(_keyval, nc)
        _live.append(nc)
    return nc


# ---- timing -------------------------------------------------------------------------


def _event_times(cupy, op: Callable[[], None], iters: int, warmup: int, stream,
                 buffers: Buffers | None = None, verified: frozenset[int] = frozenset()) -> np.ndarray:
    """Per-iteration ns from a CUDA event pair around each op on `stream` (see the module doc).

    With `buffers`, the iterations in `verified` and the last are poisoned and stamped before their
    start event and checked after their end event, on the same stream: outside the timed pair."""
    if iters < 0 or warmup < 0:
        raise ValueError(f"iters and warmup must be >= 0, got iters={iters}, warmup={warmup}")
    for _ in range(warmup):
        op()
    stream.synchronize()
    starts = [cupy.cuda.Event() for _ in range(iters)]
    ends = [cupy.cuda.Event() for _ in range(iters)]
    for i, (start, end) in enumerate(zip(starts, ends)):
        check = buffers is not None and (i in verified or i == iters - 1)
        if check:
            with stream:
                buffers.before(i)
        start.record(stream)
        op()
        end.record(stream)
        if check:
            with stream:
                buffers.after(i, i == iters - 1)
    if iters:
        ends[-1].synchronize()
    elapsed = cupy.cuda.get_elapsed_time
    return np.array([round(elapsed(s, e) * 1e6) for s, e in zip(starts, ends)], dtype=np.int64)


# ---- collectives ----------------------------------------------------------------------


def _collective(spec, comm: MPI.Comm, size: int, iters: int, warmup: int, verified: frozenset[int],
                gpu: Gpu | None, call: Callable) -> Collective:
    """What both collectives share (nccl-tests' common.cu to their testColl): the inputs of `spec` on
    the GPU, the communicator, CUDA-event timing and the check. call(nc, buffers, stream pointer,
    ranks, elements) returns the timed operation."""
    cupy = _cupy()
    rank, n = comm.Get_rank(), comm.Get_size()
    elements = spec.elements(size, n)
    gpu = gpu or Gpu()  # the engine's; a script's or test's call: the current device, a stream of its own
    stream = gpu.stream_of(cupy)
    with cupy.cuda.Device(gpu.device_id(cupy)):
        nc = communicator(comm)
        b = Buffers(cupy, spec, elements, rank, n)
        cupy.cuda.Device().synchronize()  # inputs are built on the default stream
        times = _event_times(cupy, call(nc, b, stream.ptr, n, elements), iters, warmup, stream, b, verified)
    return checked(comm, spec.nbytes(elements, n), times, b.tally)


def allreduce(comm: MPI.Comm, size: int, iters: int, warmup: int,
              verified: frozenset[int] = frozenset(), gpu: Gpu | None = None) -> Collective:
    """Sum of float64 vectors of `size` bytes on the GPU; inputs are small integers, so the sum is exact."""
    def call(nc, b, sptr, n, count):
        from cupy.cuda import nccl
        sp, rp, dtype, op_sum = b.send.data.ptr, b.recv.data.ptr, nccl.NCCL_FLOAT64, nccl.NCCL_SUM
        return lambda: nc.allReduce(sp, rp, count, dtype, op_sum, sptr)
    return _collective(ALLREDUCE, comm, size, iters, warmup, verified, gpu, call)


def alltoall(comm: MPI.Comm, size: int, iters: int, warmup: int,
             verified: frozenset[int] = frozenset(), gpu: Gpu | None = None) -> Collective:
    """Each rank sends `size` bytes in total (a block per rank, itself included), as nccl-tests
    alltoall: one ncclSend + ncclRecv per peer inside one ncclGroupStart/ncclGroupEnd."""
    def call(nc, b, sptr, n, block):
        from cupy.cuda import nccl
        step = block * 8
        sp, rp, dtype = b.send.data.ptr, b.recv.data.ptr, nccl.NCCL_FLOAT64
        group_start, group_end, nsend, nrecv = nccl.groupStart, nccl.groupEnd, nc.send, nc.recv

        def op():
            group_start()
            for peer in range(n):
                nsend(sp + peer * step, block, dtype, peer, sptr)
                nrecv(rp + peer * step, block, dtype, peer, sptr)
            group_end()
        return op
    return _collective(ALLTOALL, comm, size, iters, warmup, verified, gpu, call)


@register
class NcclEngine:
    """The nccl engine of one process (acceptance.engines.registry): the GPU this rank's collectives
    run on, set by configure(). NCCL communicators are cached per MPI communicator (an attribute of
    it, freed with it) and destroyed at exit: process-wide, as NCCL's own state is."""

    NAME = "nccl"
    # What this engine can do (acceptance.engines.contract.OPERATIONS): the collectives, on GPUs.
    OFFERS = frozenset(("allreduce", "alltoall"))
    CAN = frozenset(("net_paths",))  # NCCL_DEBUG=INFO names each connection's transport (engines.nccl_log)
    available = staticmethod(available)

    def __init__(self):
        self.gpu = Gpu()

    def configure(self, topology, profile, log_dir: str | os.PathLike | None = None) -> None:
        """Pick this rank's GPU: local_rank % device_count, counted among the devices the
        process sees, so CUDA_VISIBLE_DEVICES (Slurm --gpu-bind, a site wrapper) is respected:
        with one visible GPU per rank every rank uses its device 0.

        More ranks on a node than GPUs makes two ranks share a GPU, and NCCL refuses two ranks
        of one communicator on one GPU ("Duplicate GPU detected"): run one rank per GPU.

        log_dir (default: $ACCEPTANCE_RUN_DIR/logs when that is set) turns on NCCL's INFO
        output for this process's communicators, one file per process (capture_nccl_debug).
        """
        cupy = _cupy()
        device = device_for(topology.me.local_rank, cupy.cuda.runtime.getDeviceCount())
        cupy.cuda.Device(device).use()
        self.gpu = Gpu(device)
        if log_dir is None and os.environ.get("ACCEPTANCE_RUN_DIR"):
            log_dir = Path(os.environ["ACCEPTANCE_RUN_DIR"]) / "logs"
        if log_dir is not None and not _live:
            capture_nccl_debug(log_dir)

    def used_device(self) -> str | None:
        """The RDMA device this rank measures through: NCCL picks its own per channel (its log names them)."""
        return None

    def placement(self) -> str | None:
        """Where this rank runs: NCCL sets its own CPU affinity from the GPU's (NCCL_IGNORE_CPU_AFFINITY)."""
        return None

    def allreduce(self, comm: MPI.Comm, size: int, iters: int, warmup: int,
                  verified: frozenset[int] = frozenset()) -> Collective:
        return allreduce(comm, size, iters, warmup, verified, gpu=self.gpu)

    def alltoall(self, comm: MPI.Comm, size: int, iters: int, warmup: int,
                 verified: frozenset[int] = frozenset()) -> Collective:
        return alltoall(comm, size, iters, warmup, verified, gpu=self.gpu)
