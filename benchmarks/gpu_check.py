"""The harness's GPU code end to end on one NVIDIA GPU: does it work, and what does it measure?

Run:  .venv/bin/python benchmarks/gpu_check.py [--device N] [--size-mib 256] [--iters 10] [--quick]
                                              [--log-dir DIR]

No mpiexec needed (MPI starts as a singleton; the NCCL check runs on MPI.COMM_SELF).
Checks, in order, each printed as one line:

1. engine     acceptance.engines.nccl.available(): what the nccl engine sees.
2. alloc      cupy allocation: a device array whose sum is known; the harness's own
              device buffer (acceptance.engines.memory.allocate(..., "cuda")) filled with
              the verification pattern and verified on the GPU.
3. dmabuf     page-aligned device memory for dma-buf (docs/rdma.md §4): cudaMalloc through
              cupy.cuda.Memory (not the pool, which sub-allocates), size rounded up to
              2 MiB, pointer checked against the 4 KiB host page; then the export attempt:
              cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124) and
              cuMemGetHandleForAddressRange(&fd, ptr, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
              = 1, 0) called through ctypes on libcuda.so.1 (cupy does not wrap that call).
              An unsupported export (proprietary kernel modules, driver < CUDA 11.7) is
              reported, not failed: only a misaligned pointer fails.
4. h2d / d2h  pinned host memory (cupy.cuda.alloc_pinned_memory) <-> device, --size-mib
              per copy, --iters copies each way, every copy timed by a CUDA event pair;
              GB/s = bytes / ns (GB = 1e9, as nccl-tests). The round trip is checked byte
              for byte.
5. d2d        device-to-device copy, same sizes and timing; GB/s counts the bytes copied
              (the memory moves twice that: a read and a write). Checked on the GPU.
6. events     event timing sanity: an event pair around a kernel that spins on the GPU's
              %globaltimer for a known 1, 10 and 50 ms must read that long (within 5 % +
              0.2 ms); and an event pair around a known copy must not read longer than the
              host's own clock around the same copy, nor imply more than 10 TB/s.
7. nccl       a one-rank NCCL all-reduce and all-to-all through acceptance.engines.nccl on
              MPI.COMM_SELF (the engine's own code: exact check, event timing), with algbw
              and busbw (busbw is 0 by definition on one rank: 2(n-1)/n = 0); NCCL's debug
              output captured to a temporary folder first (capture_nccl_debug) and parsed
              back (net_paths): version, network, connections.
8. node-check `acceptance node-check --json --checks pcie,gpudirect,gpus,xid` as Slurm's
              HealthCheckProgram would run it (its own process, a fresh state folder): it must
              answer within node_check.deadline (10 s) plus a second, see the GPUs in sysfs (not
              skip), and read them through NVML (not "could not run"); what it finds (ECC, row
              remapping, throttling, temperature, Xid, PCIe width) is printed, not judged here.

Exit status: 0 when every result is right (bandwidths are printed, not judged), also
when there is no GPU: then it prints "SKIP: <reason>" and exits 0, so it runs anywhere;
1 on a wrong result (data, a count, an event timing that cannot be). The last line is
one JSON object with every number, for machines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

# Run from a checkout without installing: make `acceptance` importable from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acceptance.engines import gpumem
from acceptance.engines import nccl as engine
from acceptance.engines import nccl_log
from acceptance.engines.collective_data import busbw
from acceptance.measure import gbyte_per_s

MIB = 1 << 20
PAGE = 4096
SLEEP_MS = (1, 10, 50)
MAX_COPY_GBPS = 10_000  # 10 TB/s: above any GPU memory today; more means the timing is wrong

SLEEP_KERNEL = r"""
extern "C" __global__ void sleep_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""


class Report:
    """Collects one line and one JSON entry per check; remembers whether any result was wrong."""

    def __init__(self):
        self.data: dict = {}
        self.wrong: list[str] = []

    def line(self, check: str, text: str, /, **values) -> None:
        print(f"{check}: {text}", flush=True)
        self.data.setdefault(check, {}).update(values)

    def fail(self, check: str, why: str, /, **values) -> None:
        self.wrong.append(f"{check}: {why}")
        self.line(check, f"WRONG: {why}", ok=False, error=why, **values)


def _stats(ns: np.ndarray, nbytes: int) -> dict:
    rates = [gbyte_per_s(nbytes, t) for t in ns]
    return {"gbps_mean": gbyte_per_s(nbytes * len(ns), float(ns.sum())), "gbps_median": statistics.median(rates),
            "gbps_min": min(rates), "gbps_max": max(rates), "iters": len(ns), "bytes": nbytes}


def timed_copies(cupy, stream, copy, iters: int) -> np.ndarray:
    """ns per copy from a CUDA event pair around each (one warm-up copy first)."""
    copy()
    stream.synchronize()
    pairs = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(iters)]
    for start, end in pairs:
        start.record(stream)
        copy()
        end.record(stream)
    pairs[-1][1].synchronize()
    return np.array([round(cupy.cuda.get_elapsed_time(s, e) * 1e6) for s, e in pairs], dtype=np.int64)


# ---- checks ----------------------------------------------------------------------


def check_alloc(cupy, rep: Report) -> None:
    from acceptance.engines.memory import allocate, fill_pattern, verify

    n = 1 << 24
    total = int(cupy.arange(n, dtype=cupy.int64).sum())
    if total != n * (n - 1) // 2:
        return rep.fail("alloc", f"sum of arange({n}) on the GPU is {total}, expected {n * (n - 1) // 2}")
    buf = allocate(16 * MIB, "cuda")
    fill_pattern(buf, 0, 1, 0)
    mismatch = verify(buf, 0, 1, 0)
    if mismatch is not None:
        return rep.fail("alloc", f"pattern in memory.allocate(..., 'cuda') buffer: {mismatch}")
    rep.line("alloc", f"cupy arange sum exact; memory.allocate(16 MiB, 'cuda') pattern verified "
                      f"(pointer 0x{buf.data.ptr:x})", ok=True, ptr=buf.data.ptr)


def _alignment(ptr: int) -> int:
    return ptr & -ptr if ptr else 0


def check_dmabuf(cupy, device: int, nbytes: int, rep: Report) -> None:
    """The harness's own GPUDirect buffer path (acceptance.engines.gpumem): allocate, export as dma-buf."""
    try:
        buf = gpumem.device_buffer(nbytes)
    except gpumem.GpuMemError as e:
        return rep.fail("dmabuf", str(e))
    values = {"ptr": buf.ptr, "size": buf.size, "alignment": _alignment(buf.ptr)}
    try:
        supported = gpumem.dmabuf_attribute(device)
        fd = gpumem.export_dmabuf(buf)
    except gpumem.GpuMemError as e:
        return rep.line("dmabuf", f"page-aligned allocation ok (0x{buf.ptr:x}, {buf.size >> 20} MiB); "
                                  f"export unsupported here: {e}", ok=True, exported=False, reason=str(e), **values)
    values.update(attribute_dma_buf_supported=supported)
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")  # "/dmabuf:" or "anon_inode:dmabuf"
    except OSError as e:
        target = f"(unreadable: {e})"
    os.close(fd)
    rep.line("dmabuf", f"page-aligned allocation ok (0x{buf.ptr:x}, alignment {_alignment(buf.ptr)} B, "
                       f"{buf.size >> 20} MiB); exported: fd {fd} -> {target} "
                       f"(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED={supported})",
             ok=True, exported=True, fd_target=target, **values)


def check_host_copies(cupy, stream, nbytes: int, iters: int, rep: Report) -> None:
    from acceptance.engines.memory import fill_pattern

    rt = cupy.cuda.runtime
    src_mem, back_mem = cupy.cuda.alloc_pinned_memory(nbytes), cupy.cuda.alloc_pinned_memory(nbytes)
    src = np.frombuffer(src_mem, dtype=np.uint8, count=nbytes)
    back = np.frombuffer(back_mem, dtype=np.uint8, count=nbytes)
    fill_pattern(src, 0, 1, 0)  # the harness's verification pattern: every byte depends on its offset
    back[:] = 0
    dev = cupy.empty(nbytes, dtype=cupy.uint8)
    sp, bp, dp, s = src.ctypes.data, back.ctypes.data, dev.data.ptr, stream.ptr
    h2d = timed_copies(cupy, stream, lambda: rt.memcpyAsync(dp, sp, nbytes, rt.memcpyHostToDevice, s), iters)
    d2h = timed_copies(cupy, stream, lambda: rt.memcpyAsync(bp, dp, nbytes, rt.memcpyDeviceToHost, s), iters)
    stream.synchronize()
    if not np.array_equal(src, back):
        first = int(np.flatnonzero(src != back)[0])
        return rep.fail("h2d", f"pinned round trip differs at byte {first}: sent {src[first]}, got {back[first]}")
    for name, ns in (("h2d", h2d), ("d2h", d2h)):
        st = _stats(ns, nbytes)
        rep.line(name, f"pinned {nbytes >> 20} MiB: {st['gbps_mean']:.1f} GB/s mean, median {st['gbps_median']:.1f} "
                       f"[{st['gbps_min']:.1f}..{st['gbps_max']:.1f}] over {len(ns)} copies"
                       + ("; round trip verified" if name == "d2h" else ""), ok=True, **st)


def check_device_copy(cupy, stream, nbytes: int, iters: int, rep: Report) -> None:
    rt = cupy.cuda.runtime
    src = cupy.arange(nbytes // 8, dtype=cupy.int64)
    dst = cupy.zeros_like(src)
    n = src.nbytes
    dp, sp, s = dst.data.ptr, src.data.ptr, stream.ptr
    ns = timed_copies(cupy, stream, lambda: rt.memcpyAsync(dp, sp, n, rt.memcpyDeviceToDevice, s), iters)
    stream.synchronize()
    if not bool(cupy.array_equal(src, dst)):
        return rep.fail("d2d", "device-to-device copy differs from its source")
    st = _stats(ns, n)
    rep.line("d2d", f"{n >> 20} MiB: {st['gbps_mean']:.1f} GB/s mean (bytes copied; memory traffic is twice that), "
                    f"median {st['gbps_median']:.1f} [{st['gbps_min']:.1f}..{st['gbps_max']:.1f}]; verified",
             ok=True, **st)


def check_events(cupy, stream, nbytes: int, rep: Report) -> None:
    # A copy of known size: the event pair must fit inside the host's own clock around it.
    rt = cupy.cuda.runtime
    a = cupy.ones(nbytes, dtype=cupy.uint8)
    b = cupy.empty_like(a)
    stream.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    t0 = time.perf_counter_ns()
    start.record(stream)
    rt.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, rt.memcpyDeviceToDevice, stream.ptr)
    end.record(stream)
    end.synchronize()
    host_ns = time.perf_counter_ns() - t0
    event_ns = cupy.cuda.get_elapsed_time(start, end) * 1e6
    rate = gbyte_per_s(nbytes, event_ns) if event_ns > 0 else float("inf")
    copy = {"copy_event_ns": event_ns, "copy_host_ns": host_ns, "copy_gbps": rate}
    if not 0 < event_ns <= host_ns * 1.01 + 20_000 or rate > MAX_COPY_GBPS:
        return rep.fail("events", f"copy of {nbytes >> 20} MiB: events say {event_ns / 1e3:.1f} us, "
                                  f"host clock {host_ns / 1e3:.1f} us ({rate:.0f} GB/s)", **copy)
    # A kernel that spins for a known time on the GPU's global timer (ns).
    try:
        kernel = cupy.RawKernel(SLEEP_KERNEL, "sleep_ns")
        kernel.kernel  # noqa: B018 - compiles (NVRTC) and loads it now, outside any timing
    except Exception as e:  # noqa: BLE001 - NVRTC missing: the copy check above still ran
        rep.line("events", f"copy check ok ({event_ns / 1e3:.1f} us by events <= {host_ns / 1e3:.1f} us by host); "
                           f"sleep kernel not compiled: {type(e).__name__}: {e}", ok=True, **copy)
        return
    slept = {}
    for ms in SLEEP_MS:
        with stream:
            kernel((1,), (1,), (np.uint64(1_000_000),))  # warm the launch
            start.record(stream)
            kernel((1,), (1,), (np.uint64(ms * 1_000_000),))
            end.record(stream)
        end.synchronize()
        got = cupy.cuda.get_elapsed_time(start, end)
        slept[ms] = got
        if not ms * 0.999 <= got <= ms * 1.05 + 0.2:
            return rep.fail("events", f"a {ms} ms GPU sleep measured {got:.3f} ms by events", **copy,
                            sleep_ms={str(k): v for k, v in slept.items()})
    text = ", ".join(f"{ms} ms -> {got:.3f} ms" for ms, got in slept.items())
    rep.line("events", f"sleep kernel {text}; copy {event_ns / 1e3:.1f} us by events <= {host_ns / 1e3:.1f} us "
                       f"by host", ok=True, sleep_ms={str(k): v for k, v in slept.items()}, **copy)


def check_nccl(nbytes: int, iters: int, log_dir: Path, rep: Report) -> None:
    from mpi4py import MPI

    for op in ("allreduce", "alltoall"):
        res = getattr(engine, op)(MPI.COMM_SELF, nbytes, iters, max(1, iters // 5))
        name = f"nccl_{op}"
        if res.wrong or res.nbytes != nbytes or len(res.times_ns) != iters or (res.times_ns <= 0).any():
            return rep.fail(name, f"{res.wrong} wrong elements (first: {res.first_wrong}), {res.nbytes} B, "
                                  f"{len(res.times_ns)} times, min {int(res.times_ns.min()) if len(res.times_ns) else 0} ns")
        alg = gbyte_per_s(res.nbytes, float(res.times_ns.mean()))
        bus = busbw(op, alg, 1)
        rep.line(name, f"1 rank, {res.nbytes >> 20} MiB: exact; algbw {alg:.1f} GB/s, busbw {bus:.1f} GB/s "
                       f"(one rank moves nothing between ranks), {iters} iterations",
                 ok=True, algbw=alg, busbw=bus, nbytes=res.nbytes, iters=iters,
                 time_ns_mean=float(res.times_ns.mean()))
    paths = nccl_log.net_paths(log_dir)
    files = sorted(p.name for p in log_dir.glob("nccl-*.log"))
    conns = len(paths.connections)
    nics = sorted({n.hca for n in paths.nics() if n.net != "Socket"})
    rep.line("nccl_log", f"{len(files)} file(s) {', '.join(files) or '(none)'}; NCCL {', '.join(paths.versions) or '?'}; "
                         f"network {', '.join(paths.networks()) or '?'}; NICs {', '.join(nics) or 'none'}; "
                         f"{conns} channel connection(s) (none expected on one rank)",
             ok=True, files=files, versions=paths.versions, networks=paths.networks(), nics=nics, connections=conns)


# ---- main ---------------------------------------------------------------------------


def check_node(rep: Report) -> None:
    import subprocess
    with tempfile.TemporaryDirectory(prefix="gpu_check-node-") as state:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "acceptance", "node-check", "--json", "--profile", "local",
                            "--checks", "pcie,gpudirect,gpus,xid", "--state", state],
                           capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
        seconds = time.monotonic() - t0
    try:
        out = json.loads(p.stdout)
    except ValueError:
        rep.fail("node-check", f"exit {p.returncode}, no JSON: {(p.stderr or p.stdout).strip()[-300:]}")
        return
    checks = {c["check"]: c for c in out["checks"]}
    said = "; ".join(f"{c['check']} {c['status']}" + (f" ({c['note']})" if c["note"] else "")
                     for c in out["checks"])
    problems = [f"{c['check']}: {q['part']}: {q['detail']}" for c in out["checks"] for q in c["problems"]]
    values = {"seconds": round(seconds, 2), "verdict": out["verdict"], "statuses": {k: c["status"] for k, c in checks.items()},
              "problems": problems}
    if seconds > 11:
        rep.fail("node-check", f"took {seconds:.1f} s, past its 10 s deadline", **values)
    elif checks["gpus"]["status"] in ("skip", "error"):
        rep.fail("node-check", f"gpus {checks['gpus']['status']}: {checks['gpus']['note']}", **values)
    else:
        rep.line("node-check", f"{out['verdict']} in {seconds:.1f} s: {said}"
                               + (f"; found: {'; '.join(problems)}" if problems else ""), **values)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", type=int, default=0, help="CUDA device (of those CUDA_VISIBLE_DEVICES shows)")
    p.add_argument("--size-mib", type=int, default=256, help="bytes per copy, MiB (default 256)")
    p.add_argument("--iters", type=int, default=10, help="timed copies / collectives per check (default 10)")
    p.add_argument("--quick", action="store_true", help="32 MiB and 3 iterations: a smoke run")
    p.add_argument("--log-dir", type=Path, default=None,
                   help="where NCCL writes its debug files (default: a new temporary folder, kept and printed)")
    args = p.parse_args(argv)
    if args.quick:
        args.size_mib, args.iters = 32, 3
    if args.size_mib < 1 or args.iters < 1:
        p.error("--size-mib and --iters must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rep = Report()
    ok, why = engine.available()
    rep.line("engine", why, usable=ok)
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - no cupy, no driver, no device: all mean "not here"
        reason = f"cupy not importable: {type(e).__name__}: {e}" if "cupy" not in sys.modules else f"no CUDA device: {e}"
        return skip(rep, reason)
    if count < 1:
        return skip(rep, "no CUDA device (device count 0)")
    if not 0 <= args.device < count:
        print(f"gpu_check: --device {args.device} but {count} device(s) visible", file=sys.stderr)
        return 2
    nbytes = args.size_mib * MIB
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="gpu_check-nccl-"))
    engine.capture_nccl_debug(log_dir)  # before the first NCCL communicator, or NCCL ignores it
    try:
        cupy.cuda.Device(args.device).use()
        props = cupy.cuda.runtime.getDeviceProperties(args.device)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        rep.line("device", f"{args.device}: {name}, {props['totalGlobalMem'] / 2**30:.1f} GiB, "
                           f"cupy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, "
                           f"driver {cupy.cuda.runtime.driverGetVersion()}",
                 index=args.device, name=name, total_bytes=int(props["totalGlobalMem"]))
        stream = cupy.cuda.Stream(non_blocking=True)
        check_alloc(cupy, rep)
        check_dmabuf(cupy, args.device, nbytes, rep)
        check_host_copies(cupy, stream, nbytes, args.iters, rep)
        check_device_copy(cupy, stream, nbytes, args.iters, rep)
        check_events(cupy, stream, nbytes, rep)
        if ok:
            check_nccl(min(nbytes, 64 * MIB), args.iters, log_dir, rep)
        else:
            rep.line("nccl", f"not run: {why}", ran=False)
        check_node(rep)
    except Exception as e:  # noqa: BLE001 - an error is a wrong result here, with its traceback
        traceback.print_exc()
        rep.fail("error", f"{type(e).__name__}: {e}")
    status = "WRONG" if rep.wrong else "OK"
    print(f"gpu_check: {status}" + (f" ({'; '.join(rep.wrong)})" if rep.wrong else ""), flush=True)
    print(json.dumps({"gpu_check": status.lower(), "nccl_log_dir": str(log_dir), **rep.data}, default=float))
    return 1 if rep.wrong else 0


def skip(rep: Report, reason: str) -> int:
    print(f"SKIP: {reason}", flush=True)
    print(json.dumps({"gpu_check": "skip", "reason": reason, **rep.data}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
