"""Memory registration: ibv_reg_mr / ibv_dereg_mr timing and growth, the locked-memory limit, GPU memory
(dma-buf, nvidia_peermem)."""

from __future__ import annotations

import contextlib
import errno
import gc
import mmap
import numpy as np
import os
import resource
import time

from .. import gpumem
from ..memory import allocate
from ..mpi import resident_bytes
from . import binding as pv
from .device import Config, open_context
from .errors import VerbsError


MEMLOCK_ERRNOS = (errno.ENOMEM, errno.EPERM, errno.EAGAIN)


def memlock_limit() -> int:
    """The soft RLIMIT_MEMLOCK in bytes (resource.RLIM_INFINITY when unlimited)."""
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]


def memlock_explanation(error, limit: int) -> str:
    """Why a registration failed with ENOMEM/EPERM, in terms of the locked-memory limit."""
    if limit == resource.RLIM_INFINITY or limit < 0:
        return (f"memory registration failed ({error}); the locked-memory limit (ulimit -l) is already "
                "unlimited, so the pinning failed for another reason: the host is out of memory, or the "
                "device's own limit on registered memory was reached (check dmesg)")
    return (f"memory registration failed ({error}): RDMA registration pins memory, and the locked-memory "
            f"limit (ulimit -l) is currently {limit} bytes ({limit // 1024} KiB as ulimit -l prints it); "
            "set it to unlimited: `ulimit -l unlimited`, '* - memlock unlimited' in "
            "/etc/security/limits.conf, LimitMEMLOCK=infinity for slurmd (systemd) and "
            "PropagateResourceLimits so jobs inherit it")


def register(pd, buf: np.ndarray, access: int):
    """MR over a numpy buffer (kept alive by the caller); VerbsError explaining memlock when pinning fails."""
    try:
        return pv.MR(pd, buf.nbytes, access, address=buf.ctypes.data)
    except pv.PyverbsRDMAError as exc:
        if exc.error_code in MEMLOCK_ERRNOS:
            raise VerbsError(memlock_explanation(exc, memlock_limit())) from exc
        raise VerbsError(f"registering {buf.nbytes} B failed: {exc}") from exc


def check_keys(mr, nbytes: int, remote: bool = True) -> None:
    """A zero key cannot be used; the rkey only matters for an MR a peer accesses (rxe gives an MR
    registered for local access rkey 0, mlx5 a non-zero one)."""
    if not mr.lkey or (remote and not mr.rkey):
        raise VerbsError(f"registration of {nbytes} B returned lkey {mr.lkey:#x}, rkey {mr.rkey:#x}: "
                         f"a zero {'rkey' if mr.lkey else 'lkey'} cannot be used")


REG_ACCESS_NAMES = ("IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ")


def access_flags(*names: str) -> int:
    flags = 0
    for name in names:
        flags |= getattr(pv.e.ibv_access_flags, name)
    return int(flags)


def fresh_pages(nbytes: int) -> np.ndarray:
    """A uint8 array over a new anonymous mapping: page-aligned, and no page touched yet, so that
    registering it faults in and pins every page (malloc would hand back warm memory). The
    mapping goes away with the last reference to the array."""
    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8, count=nbytes)


@contextlib.contextmanager
def gc_off():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def register_times(config: Config, nbytes: int, repeats: int, how: str) -> tuple[np.ndarray, np.ndarray]:
    """(ibv_reg_mr ns, ibv_dereg_mr ns) for `repeats` registrations of nbytes on this rank's device.

    how = "allocate": a fresh anonymous mapping each repeat, so registration faults in and
    pins untouched pages (first touch); how = "create": one warm buffer registered again.
    """
    if how not in ("allocate", "create"):
        raise ValueError(f"how must be 'allocate' or 'create', got {how!r}")
    reg = np.empty(repeats, dtype=np.int64)
    dereg = np.empty(repeats, dtype=np.int64)
    access = access_flags(*REG_ACCESS_NAMES)
    warm = None
    if how == "create":
        warm = allocate(nbytes)
        warm[:] = 0  # touched: only the registration is timed
    now = time.perf_counter_ns
    with open_context(config.device) as ctx, pv.PD(ctx) as pd, gc_off():
        for i in range(repeats):
            buf = fresh_pages(nbytes) if warm is None else warm
            t0 = now()
            mr = register(pd, buf, access)
            t1 = now()
            try:
                check_keys(mr, nbytes)
            finally:
                t2 = now()
                mr.close()
                t3 = now()
            reg[i], dereg[i] = t1 - t0, t3 - t2
            del buf  # unmaps a fresh mapping
    return reg, dereg


def memlock_effect(config: Config, nbytes: int) -> tuple[bool, str]:
    """What a locked-memory limit below nbytes does to registering nbytes: (enforced, what happened).

    The soft RLIMIT_MEMLOCK is lowered to half of nbytes for one registration and restored.
    Enforced: the registration failed with the memlock explanation an operator would see.
    Not enforced: it succeeded anyway, which happens for processes with CAP_IPC_LOCK
    (root) or with a driver that does not charge pinned pages to the limit.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    low = max(nbytes // 2, 4096)
    if hard != resource.RLIM_INFINITY:
        low = min(low, hard)
    buf = fresh_pages(nbytes)
    with open_context(config.device) as ctx, pv.PD(ctx) as pd:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (low, hard))
        try:
            mr = register(pd, buf, access_flags(*REG_ACCESS_NAMES))
        except VerbsError as exc:
            return True, str(exc)
        finally:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))
        mr.close()
    return False, (f"registering {nbytes} B with ulimit -l at {low} B succeeded: this process is not held "
                   "to the limit (CAP_IPC_LOCK, e.g. root); job steps of ordinary users are")


def registration_growth(config: Config, nbytes: int, cycles: int) -> int:
    """Resident memory growth over `cycles` map + register + deregister + unmap cycles: a leak check.

    One cycle first, so the library's one-time setup is not counted.
    """
    access = access_flags(*REG_ACCESS_NAMES)
    with open_context(config.device) as ctx, pv.PD(ctx) as pd:
        def cycle():
            buf = fresh_pages(nbytes)
            register(pd, buf, access).close()

        cycle()
        gc.collect()
        before = resident_bytes()
        for _ in range(cycles):
            cycle()
        gc.collect()
        return resident_bytes() - before



def register_gpu(pd, gpu: gpumem.GpuBuffer, flags: int, device: str):
    """(MR, dma-buf fd or None, IOVA, path) for GPU memory: dma-buf first, whose IOVA is the
    dma-buf offset (0); else the CUDA pointer by address, which needs nvidia_peermem.
    The caller closes the fd after the MR."""
    try:
        fd = gpumem.export_dmabuf(gpu)
    except gpumem.GpuMemError as exc:
        dmabuf_error = exc
    else:
        try:
            return pv.DmaBufMR(pd, gpu.size, flags, dmabuf=fd, offset=0), fd, 0, "dma-buf"
        except pv.PyverbsRDMAError as exc:
            os.close(fd)
            dmabuf_error = exc
    try:
        return pv.MR(pd, gpu.size, flags, address=gpu.ptr), None, gpu.ptr, "nvidia_peermem"
    except pv.PyverbsRDMAError as exc:
        raise VerbsError(f"GPU memory cannot be registered on {device}: dma-buf: {dmabuf_error}; "
                         f"by address (needs nvidia_peermem): {exc}") from exc


def gpu_register_times(config: Config, nbytes: int, repeats: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(registration ns, deregistration ns, path) of GPU memory on this rank's device and current GPU.

    Registration includes the dma-buf export, as a GPUDirect user pays both.
    """
    gpu = gpumem.device_buffer(nbytes)
    reg = np.empty(repeats, dtype=np.int64)
    dereg = np.empty(repeats, dtype=np.int64)
    flags = access_flags(*REG_ACCESS_NAMES)
    path = ""
    now = time.perf_counter_ns
    with open_context(config.device) as ctx, pv.PD(ctx) as pd, gc_off():
        for i in range(repeats):
            t0 = now()
            mr, fd, _, path = register_gpu(pd, gpu, flags, config.device)
            t1 = now()
            try:
                check_keys(mr, gpu.size)
            finally:
                t2 = now()
                mr.close()
                if fd is not None:
                    os.close(fd)
                t3 = now()
            reg[i], dereg[i] = t1 - t0, t3 - t2
    return reg, dereg, path
