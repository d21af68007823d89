"""GPU copies for the intranode suite, through the cupy module it is given (never imported here):
cudaMemcpyAsync / cudaMemcpyPeerAsync timed by CUDA events on the copying stream, each timed copy's
content checked, host buffers allocated bound to the GPU's local CPUs (sysfs local_cpulist)."""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .memory import POISON, expected
from ..measure.verify import Tally


PEER_ACCESS_ALREADY_ENABLED = 704   # cudaErrorPeerAccessAlreadyEnabled


def normalize_pci(bus_id) -> str | None:
    """'0000:3b:00.0' from cudaDeviceGetPCIBusId's '0000:3B:00.0' or NVML's '00000000:3B:00.0'."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode(errors="replace")
    m = re.fullmatch(r"\s*([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*", str(bus_id or "").rstrip("\x00"))
    if not m:
        return None
    return f"{int(m[1], 16):04x}:{m[2].lower()}:{m[3].lower()}.{m[4]}"


def parse_cpulist(text: str) -> set[int]:
    """'0-31,64-95' (sysfs local_cpulist) -> the CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def local_cpus(sysfs: Path, pci: str | None) -> set[int] | None:
    """The CPUs near a PCI device (sysfs bus/pci/devices/<pci>/local_cpulist), None when unknown."""
    if not pci:
        return None
    try:
        return parse_cpulist((Path(sysfs) / "bus" / "pci" / "devices" / pci / "local_cpulist").read_text()) or None
    except (OSError, ValueError):
        return None


@contextmanager
def bound_to(cpus: set[int] | None):
    """Run the block with this thread on `cpus` (first-touch puts memory on their NUMA node);
    yields None when it did, else why not."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield "host buffer not bound to the GPU's CPUs: their list is unknown"
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        yield f"host buffer not bound to the GPU's CPUs: {e}"
        return
    try:
        yield None
    finally:
        os.sched_setaffinity(0, before)


COPY_BLOCK = 1 << 20  # a copy's content repeats a pattern of this many bytes (cheap at 256 MiB)


def content_blocks(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(whole COPY_BLOCK rows of buf, its tail): views, so a block pattern applies by broadcasting."""
    whole = len(buf) // COPY_BLOCK * COPY_BLOCK
    return buf[:whole].reshape(-1, COPY_BLOCK), buf[whole:]


def fill_content(buf: np.ndarray, seed: tuple[int, ...], poisoned: bool = False) -> None:
    """What a checked copy's source holds (or, poisoned, its destination before it): a pattern block of
    the copy's own seed, repeated; generating one block is the cost, repeating it a memory pass."""
    block = expected(min(len(buf), COPY_BLOCK), *seed, POISON if poisoned else 0)
    rows, tail = content_blocks(buf)
    rows[:] = block
    tail[:] = block[:len(tail)]


def check_content(got: np.ndarray, seed: tuple[int, ...]) -> Tally:
    """One copy's check: `got` against fill_content(seed); all poison means it never arrived."""
    block = expected(min(len(got), COPY_BLOCK), *seed, 0)
    rows, tail = content_blocks(got)
    wrong = int(np.count_nonzero(rows != block)) + int(np.count_nonzero(tail != block[:len(tail)]))
    tally = Tally()
    if not wrong:
        tally.ops = 1
        return tally
    want = np.empty_like(got)
    fill_content(want, seed)
    i = int(np.argmax(got != want))
    fill_content(want, seed, poisoned=True)
    missing = bool(np.array_equal(got, want))
    tally.add(0, 1, 1, int(missing), wrong,
              f"first wrong byte at offset {i} of {len(got)}: expected 0x{int(block[i % len(block)]):02x}, "
              f"got 0x{int(got[i]):02x}")
    return tally


class CupyCopier:
    """Copies and CUDA-event timings through the cupy module it is given (never imported here)."""

    HOST = -1  # the host's place in a copy's seed

    def __init__(self, cupy, sysfs: Path | str = "/sys"):
        self.cp = cupy
        self.rt = cupy.cuda.runtime
        self.sysfs = Path(sysfs)
        self._peer: dict[tuple[int, int], bool] = {}
        # The data check of the last copy method's last timed copy: before it (outside its events)
        # the source gets content of its own and the destination poison; after it, the destination
        # is read back and compared (docs/methodology.md §7).
        self.last_check: Tally | None = None

    # -- the data check, through pinned staging memory (host buffers are written directly)

    @classmethod
    def _host(cls, pinned, nbytes: int) -> np.ndarray:
        return cls._host_at(pinned.ptr, nbytes)

    def _put(self, device: int | None, ptr: int, nbytes: int, seed: tuple[int, ...], poisoned: bool) -> None:
        """Write copy_content() to `ptr` (device memory of `device`, or pinned host memory when None),
        synchronously."""
        cuda = self.cp.cuda
        stage = None
        if device is None:
            view = self._host_at(ptr, nbytes)
        else:
            stage = cuda.PinnedMemory(nbytes, getattr(self.rt, "hostAllocPortable", 1))
            view = self._host(stage, nbytes)
        fill_content(view, seed, poisoned)
        if stage is not None:
            with cuda.Device(device):
                s = cuda.Stream(non_blocking=True)
                self.rt.memcpyAsync(ptr, stage.ptr, nbytes, self.rt.memcpyHostToDevice, s.ptr)
                s.synchronize()

    def _get(self, device: int | None, ptr: int, nbytes: int) -> tuple[np.ndarray, object]:
        """(a host view of the `nbytes` at `ptr`, what keeps it alive), as _put."""
        if device is None:
            return self._host_at(ptr, nbytes), None
        cuda = self.cp.cuda
        stage = cuda.PinnedMemory(nbytes, getattr(self.rt, "hostAllocPortable", 1))
        with cuda.Device(device):
            s = cuda.Stream(non_blocking=True)
            self.rt.memcpyAsync(stage.ptr, ptr, nbytes, self.rt.memcpyDeviceToHost, s.ptr)
            s.synchronize()
        return self._host(stage, nbytes), stage

    @staticmethod
    def _host_at(ptr: int, nbytes: int) -> np.ndarray:
        return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))

    def _checked(self, copies: list[tuple[int | None, int, int | None, int]], nbytes: int):
        """(before_last, after_last) for copies [(src device or None, src ptr, dst device or None, dst ptr)]:
        stamp each source and poison each destination; then compare what arrived, into last_check."""
        seeds = [(self.HOST if sd is None else sd, self.HOST if dd is None else dd, nbytes)
                 for sd, _, dd, _ in copies]

        def before() -> None:
            for (sd, sp, dd, dp), seed in zip(copies, seeds):
                self._put(sd, sp, nbytes, seed, poisoned=False)
                self._put(dd, dp, nbytes, seed, poisoned=True)

        def after() -> None:
            tally = Tally()
            for (_, _, dd, dp), seed in zip(copies, seeds):
                got, _keep = self._get(dd, dp, nbytes)
                tally.merge(check_content(got, seed))
            self.last_check = tally

        return before, after

    def device_count(self) -> int:
        return int(self.rt.getDeviceCount())

    def pci_bus_id(self, gpu: int) -> str | None:
        try:
            bus = self.cp.cuda.Device(gpu).pci_bus_id
        except Exception:  # noqa: BLE001 - an older cupy without Device.pci_bus_id
            try:
                bus = self.rt.deviceGetPCIBusId(gpu)
            except Exception:  # noqa: BLE001 - the address is only a label in the record
                return None
        return normalize_pci(bus)

    def enable_peer(self, src: int, dst: int) -> bool:
        """Let src's context access dst's memory; False when the pair has no peer access."""
        key = (src, dst)
        if key not in self._peer:
            ok = bool(self.rt.deviceCanAccessPeer(src, dst))
            if ok:
                with self.cp.cuda.Device(src):
                    try:
                        self.rt.deviceEnablePeerAccess(dst)
                    except Exception as e:
                        if getattr(e, "status", None) != PEER_ACCESS_ALREADY_ENABLED:
                            raise
            self._peer[key] = ok
        return self._peer[key]

    def _timed(self, device: int, enqueue: Callable, iters: int, warmup: int, check=None) -> np.ndarray:
        """ms of each of `iters` enqueue(stream) calls, by events on one stream of `device`. With
        check = (before, after) from _checked(), the last copy is checked: the stream drains, before()
        stamps and poisons, the last copy gets a start event of its own, and after() compares."""
        cuda = self.cp.cuda
        self.last_check = None
        with cuda.Device(device):
            stream = cuda.Stream(non_blocking=True)
            events = [cuda.Event() for _ in range(iters + 1)]
            last_start = cuda.Event() if check and iters else None
            for _ in range(warmup):
                enqueue(stream)
            events[0].record(stream)
            for i in range(iters):
                if last_start is not None and i == iters - 1:
                    stream.synchronize()
                    check[0]()
                    last_start.record(stream)
                enqueue(stream)
                events[i + 1].record(stream)
            stream.synchronize()
            times = [cuda.get_elapsed_time(last_start if last_start is not None and i == iters - 1 else events[i],
                                           events[i + 1]) for i in range(iters)]
        if last_start is not None:
            check[1]()
        return np.array(times)

    def host_device(self, gpu: int, kind: str, nbytes: int, iters: int, warmup: int) -> tuple[np.ndarray, str | None]:
        """(ms per copy, note) of pinned host -> GPU ("h2d") or GPU -> pinned host ("d2h")."""
        cuda, rt = self.cp.cuda, self.rt
        with bound_to(local_cpus(self.sysfs, self.pci_bus_id(gpu))) as note:
            # Not the pinned pool: a pooled block could come from another GPU's NUMA node.
            host = cuda.PinnedMemory(nbytes, getattr(rt, "hostAllocPortable", 1))
        with cuda.Device(gpu):
            dev = cuda.alloc(nbytes)
        if kind == "h2d":
            dst, src, direction = dev.ptr, host.ptr, rt.memcpyHostToDevice
        elif kind == "d2h":
            dst, src, direction = host.ptr, dev.ptr, rt.memcpyDeviceToHost
        else:
            raise ValueError(f"unknown kind {kind!r}: expected 'h2d' or 'd2h'")
        host_dev, dev_dev = None, gpu
        copy = (host_dev, host.ptr, dev_dev, dev.ptr) if kind == "h2d" else (dev_dev, dev.ptr, host_dev, host.ptr)
        try:
            times = self._timed(gpu, lambda s: rt.memcpyAsync(dst, src, nbytes, direction, s.ptr), iters, warmup,
                                self._checked([copy], nbytes))
        finally:
            del dev, host
        return times, note

    def _buffers(self, nbytes: int, *gpus: int) -> list:
        out = []
        for g in gpus:
            with self.cp.cuda.Device(g):
                out.append(self.cp.cuda.alloc(nbytes))
        return out

    def peer(self, src: int, dst: int, nbytes: int, iters: int, warmup: int) -> np.ndarray:
        """ms per cudaMemcpyPeerAsync src -> dst, on a stream of src."""
        rt = self.rt
        a, b = self._buffers(nbytes, src, dst)
        return self._timed(src, lambda s: rt.memcpyPeerAsync(b.ptr, dst, a.ptr, src, nbytes, s.ptr),
                           iters, warmup, self._checked([(src, a.ptr, dst, b.ptr)], nbytes))

    def peer_bidir(self, x: int, y: int, nbytes: int, iters: int, warmup: int) -> np.ndarray:
        """ms per iteration of x -> y and y -> x at once, each on its source's stream: from
        x's stream starting it to both copies done (y's stream waits on x's, and x's on y's).
        A copy may go to a stream of another device; an event is recorded on its own device."""
        cuda, rt = self.cp.cuda, self.rt
        xa, xb, ya, yb = self._buffers(nbytes, x, x, y, y)
        n = warmup + iters
        with cuda.Device(y):
            sy = cuda.Stream(non_blocking=True)
            ydone = [cuda.Event(disable_timing=True) for _ in range(n)]
        with cuda.Device(x):
            sx = cuda.Stream(non_blocking=True)
            go = [cuda.Event(disable_timing=True) for _ in range(n)]
            start = [cuda.Event() for _ in range(n)]
            stop = [cuda.Event() for _ in range(n)]
        check = self._checked([(x, xa.ptr, y, ya.ptr), (y, yb.ptr, x, xb.ptr)], nbytes)
        self.last_check = None
        for i in range(n):
            if i == n - 1 and iters:  # the last iteration is checked, both ways; its start event follows
                sx.synchronize()
                sy.synchronize()
                check[0]()
            with cuda.Device(x):
                start[i].record(sx)
                go[i].record(sx)
                rt.memcpyPeerAsync(ya.ptr, y, xa.ptr, x, nbytes, sx.ptr)
            with cuda.Device(y):
                sy.wait_event(go[i])
                rt.memcpyPeerAsync(xb.ptr, x, yb.ptr, y, nbytes, sy.ptr)
                ydone[i].record(sy)
            with cuda.Device(x):
                sx.wait_event(ydone[i])
                stop[i].record(sx)
        sx.synchronize()
        sy.synchronize()
        if iters:
            check[1]()
        return np.array([cuda.get_elapsed_time(start[i], stop[i]) for i in range(warmup, n)])

    def close(self) -> None:
        """Give back the device memory the copies used."""
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001, S110 - cleanup must not hide the measurement's own outcome
            pass
