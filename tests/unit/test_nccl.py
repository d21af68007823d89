"""The nccl engine where there is no GPU: availability, its data and checks on numpy (the same
functions run on cupy on a GPU), the NCCL_DEBUG=INFO parser and GPUDirect RDMA verdicts,
benchmarks/gpu_check.py's SKIP; and one hardware-gated all-reduce on a real GPU."""

import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from acceptance.engines import mpi, nccl, nccl_log
from acceptance.engines.collective_data import ALLREDUCE, ALLTOALL, Wrong, compare
from acceptance.engines.registry import BUILT, PREFERENCE, select
from acceptance.drivers.gpudirect_paths import rails_for, record_gdr
from acceptance.rules.profile import load_profile
from acceptance.records.results import REQUIRED_KEYS, Recorder, make_record
from acceptance.runtime.topology import RankInfo, Topology

ROOT = Path(__file__).resolve().parents[2]

# ---- NCCL_DEBUG=INFO samples -----------------------------------------------------------
# Written for these tests in the exact shapes NCCL prints (format strings of
# src/transport/{net,p2p,shm}.cc, src/transport/net_ib.cc and src/graph/{topo,paths}.cc);
# host names, pids and addresses are made up.

# Two nodes x 2 GPUs on InfiniBand, GPUDirect RDMA in use. Shape of NCCL 2.19-2.23 output:
# "Channel 00/0 : a[d] -> b[d] [send] via NET/IB/0/GDRDMA" as in NVIDIA/nccl#707 (with the
# 2.19+ "/<connIndex>" and "[nvmlDev]"), "via P2P/CUMEM" as in NVIDIA/nccl#1538 (2.22.3) and its
# "/read" variant (p2p.cc useReadStr),
# a PXN send "NET/IB/1(0)/GDRDMA" (proxy rank in parentheses, net.cc), "Using network IB"
# and "GPU Direct RDMA Enabled for HCA" as in NVIDIA/nccl#1537.
IB_GDR = """\
gpu-a01:41001:41001 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>
gpu-a01:41001:41001 [0] NCCL INFO NET/Plugin: Using internal network plugin.
gpu-a01:41001:41001 [0] NCCL INFO cudaDriverVersion 12040
NCCL version 2.21.5+cuda12.4
gpu-a01:41001:41120 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB ib0:10.0.0.1<0>
gpu-a01:41001:41120 [0] NCCL INFO Using non-device net plugin version 0
gpu-a01:41001:41120 [0] NCCL INFO Using network IB
gpu-a01:41001:41120 [0] NCCL INFO comm 0x55d1c3a0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x9f3e2a61c0b4d711 - Init START
gpu-a01:41001:41120 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
gpu-a01:41001:41120 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_3'
gpu-a01:41001:41120 [0] NCCL INFO Channel 00/02 :    0   1   2   3
gpu-a01:41001:41120 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a01:41001:41120 [0] NCCL INFO Channel 01/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a01:41001:41120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-a01:41001:41120 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-a01:41002:41121 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB ib0:10.0.0.1<0>
gpu-a01:41002:41121 [1] NCCL INFO Using network IB
gpu-a01:41002:41121 [1] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
gpu-a01:41002:41121 [1] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_3'
gpu-a01:41002:41121 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/1/GDRDMA
gpu-a01:41002:41121 [1] NCCL INFO Channel 01/0 : 1[1] -> 2[0] [send] via NET/IB/1(0)/GDRDMA
gpu-a01:41002:41121 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM
gpu-a02:52001:52110 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB ib0:10.0.0.2<0>
gpu-a02:52001:52110 [0] NCCL INFO Using network IB
gpu-a02:52001:52110 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
gpu-a02:52001:52110 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [receive] via NET/IB/0/GDRDMA
gpu-a02:52001:52110 [0] NCCL INFO Channel 01/0 : 1[1] -> 2[0] [receive] via NET/IB/0/GDRDMA/Shared
gpu-a02:52002:52111 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB ib0:10.0.0.2<0>
gpu-a02:52002:52111 [1] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [send] via NET/IB/1/GDRDMA
gpu-a02:52002:52111 [1] NCCL INFO Channel 01/0 : 3[1] -> 0[0] [send] via NET/IB/1/GDRDMA
gpu-a02:52002:52111 [1] NCCL INFO Connected all rings, use ring PXN 1 GDR 1
"""

# RoCE without GPUDirect RDMA: shape of NVIDIA/nccl#1537 (NCCL 2.2x, MOFED 23.10,
# "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB ...", "GPU Direct RDMA Disabled
# for HCA 0 'mlx5_0'"), channel lines without the /GDRDMA suffix, intra-node over SHM
# ("via SHM/direct/direct", shm.cc) as when P2P is off.
ROCE_NO_GDR = """\
roce-07:25668:27396 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB bond0:10.10.10.7<0>
roce-07:25668:27396 [0] NCCL INFO Using non-device net plugin version 0
roce-07:25668:27396 [0] NCCL INFO Using network IB
roce-07:25668:27396 [0] NCCL INFO comm 0x55cc8aa86c70 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1c000 commId 0x65e0bd6ee7449db4 - Init START
roce-07:25668:27396 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
roce-07:25668:27396 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'
roce-07:25668:27396 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0
roce-07:25668:27396 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0
roce-07:25668:27396 [0] NCCL INFO Channel 01/0 : 0[0] -> 2[0] [send] via NET/IB/0
roce-07:25668:27396 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct
roce-07:25669:27401 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB bond0:10.10.10.7<0>
roce-07:25669:27401 [1] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
roce-07:25669:27401 [1] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'
roce-07:25669:27401 [1] NCCL INFO Channel 00/0 : 3[1] -> 1[1] [receive] via NET/IB/1
roce-07:25669:27401 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct
"""

# Older NCCL (2.7-2.11: "Channel 00 : 0[1a000] -> 1[1a000] [receive] via NET/IB/0", busId in
# brackets, no connection index), GDR off because nvidia_peermem is not loaded, "(no module)"
# as in NVIDIA/nccl#899; and the paths.cc distance line of that era,
# "GPU Direct RDMA Disabled for GPU 1a000 / HCA 2 (distance 4 >= 2)".
OLD_NO_MODULE = """\
d0c3f1a2b4e5:5325:5337 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB eth0:172.17.0.2<0>
d0c3f1a2b4e5:5325:5337 [0] NCCL INFO Using network IB
d0c3f1a2b4e5:5325:5337 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
d0c3f1a2b4e5:5325:5337 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 2 'mlx5_2' (no module)
d0c3f1a2b4e5:5325:5337 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 1a000 / HCA 2 (distance 4 >= 2)
d0c3f1a2b4e5:5325:5338 [0] NCCL INFO Channel 00 : 0[1a000] -> 1[1a000] [receive] via NET/IB/2
d0c3f1a2b4e5:5325:5338 [0] NCCL INFO Channel 01 : 0[1a000] -> 1[1a000] [receive] via NET/IB/2
d0c3f1a2b4e5:5325:5338 [0] NCCL INFO Channel 00 : 1[1a000] -> 0[1a000] [send] via NET/IB/2
"""

# A PCIe-only platform: receives use GDRDMA, sends do not (GPU Direct RDMA read is off by
# default there, NCCL_NET_GDR_READ; NVIDIA/nccl#1295). NCCL 2.2x shape as IB_GDR.
SEND_WITHOUT_GDR_READ = """\
pcie-01:7001:7010 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/IB ; OOB ib0:10.1.0.1<0>
pcie-01:7001:7010 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_2'
pcie-01:7001:7010 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
pcie-01:7001:7010 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0
"""

# No usable RDMA device: NCCL 2.4-era shape of Mellanox/nv_peer_memory#56 ("NET/Socket :
# Using [0]ib0:192.168.11.1<0>", a bare "NCCL version 2.4.7+cuda10.0" line, "Ring 00 : 0 -> 1
# [send] via NET/Socket/0" from the 2.4 net.cc format string).
SOCKET_ONLY = """\
head-1:11715:11984 [0] NCCL INFO NET/Socket : Using [0]eth0:192.168.11.1<0>
head-1:11715:11984 [0] NCCL INFO NET/IB : No device found.
NCCL version 2.4.7+cuda10.0
head-1:11715:11984 [0] NCCL INFO Using network Socket
head-1:11715:11984 [0] NCCL INFO Ring 00 : 0 -> 1 [send] via NET/Socket/0
head-1:11715:11984 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/Socket/0
"""


# ---- availability and engine selection -------------------------------------------------


def test_available_here_says_cupy_is_not_importable():
    ok, why = nccl.available()
    assert ok is False
    assert why.startswith("cupy not importable: ") and why.endswith("(pip install 'acceptance[gpu]')")


def _fake_cupy(monkeypatch, count=2, count_error=None, nccl_available=True, version=22703, version_error=None):
    def get_count():
        if count_error:
            raise RuntimeError(count_error)
        return count

    def get_version():
        if version_error:
            raise RuntimeError(version_error)
        return version

    fake_nccl = types.SimpleNamespace(available=nccl_available, NcclCommunicator=object, get_version=get_version)
    runtime = types.SimpleNamespace(getDeviceCount=get_count,
                                    getDeviceProperties=lambda i: {"name": b"NVIDIA H200"})
    cuda = types.ModuleType("cupy.cuda")
    cuda.runtime, cuda.nccl = runtime, fake_nccl
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake_nccl)


@pytest.mark.parametrize("kwargs, expected", [
    ({}, (True, "NCCL 2.27.3, 2 GPU(s): 2x NVIDIA H200")),
    ({"count": 1, "version": 2708}, (True, "NCCL 2.7.8, 1 GPU(s): NVIDIA H200")),
    ({"count_error": "cudaErrorNoDevice: no CUDA-capable device is detected"},
     (False, "no CUDA device: cudaErrorNoDevice: no CUDA-capable device is detected")),
    ({"count": 0}, (False, "no CUDA device: cudaGetDeviceCount() returned 0")),
    ({"nccl_available": False}, (False, "cupy.cuda.nccl is not available: cupy found no NCCL library")),
    ({"version_error": "boom"}, (False, "cupy.cuda.nccl does not answer: RuntimeError: boom")),
])
def test_available_reports_each_reason_and_never_raises(monkeypatch, kwargs, expected):
    _fake_cupy(monkeypatch, **kwargs)
    ok, why = nccl.available()
    assert ok is expected[0] and why.startswith(expected[1]), why


def test_engine_is_built_and_auto_prefers_it_before_mpi():
    assert "nccl" in BUILT and PREFERENCE["auto"] == ("verbs", "nccl", "mpi")
    module, why = select("nccl")
    assert module is None and why.startswith("no usable engine: nccl: cupy not importable")
    module, why = select("auto")
    assert isinstance(module, mpi.MpiEngine) and "nccl: cupy not importable" in why


@pytest.mark.parametrize("local_rank, count, device", [(0, 8, 0), (7, 8, 7), (9, 8, 1), (3, 1, 0)])
def test_each_rank_uses_gpu_local_rank_mod_device_count(local_rank, count, device):
    assert nccl.device_for(local_rank, count) == device


# ---- data, expected results and the exact check: numpy here, cupy on a GPU ---------------


class _CapturingComm:
    """Just enough of an MPI communicator for mpi.allreduce / mpi.alltoall to run as rank
    `rank` of `size`: it records what the engine would send, and `_checked` is captured."""

    def __init__(self, rank, size):
        self.rank, self.size, self.sent = rank, size, None

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Allreduce(self, send, recv, op):
        self.sent = send[0].copy()

    def Alltoall(self, send, recv):
        self.sent = send[0].copy()


@pytest.mark.parametrize("rank, n", [(0, 1), (0, 2), (3, 8), (7, 8), (15, 16)])
@pytest.mark.parametrize("size", [1, 8, 1000, 4096, 1 << 20])
def test_numpy_data_and_expected_results_equal_the_mpi_engines(monkeypatch, rank, n, size):
    # The one verified iteration (the last, 0) sends the base input stamped + 1.
    seen = {}
    monkeypatch.setattr(mpi, "checked", lambda comm, nbytes, times, tally: seen.update(nbytes=nbytes, tally=tally))
    comm = _CapturingComm(rank, n)

    mpi.allreduce(comm, size, 1, 0)
    count = ALLREDUCE.elements(size, n)
    assert ALLREDUCE.nbytes(count, n) == count * 8 == seen["nbytes"]
    assert np.array_equal(ALLREDUCE.send(np, count, rank, n) + 1, comm.sent)
    assert seen["tally"].ops == 1 and seen["tally"].missing == 1  # the capturing comm delivers nothing

    mpi.alltoall(comm, size, 1, 0)
    block = ALLTOALL.elements(size, n)
    assert ALLTOALL.nbytes(block, n) == block * 8 * n == seen["nbytes"]
    assert np.array_equal(ALLTOALL.send(np, block, rank, n) + 1, comm.sent)


def test_alltoall_blocks_are_what_each_peer_sends():
    n, block = 4, 5
    sent = [ALLTOALL.send(np, block, r, n).reshape(n, block) for r in range(n)]
    for r in range(n):  # what rank r receives from src is src's block for r
        got = np.concatenate([sent[src][r] for src in range(n)])
        assert np.array_equal(got, ALLTOALL.expected(np, block, r, n))


def test_allreduce_expected_is_the_sum_of_every_ranks_input():
    n, count = 6, 100
    total = sum(ALLREDUCE.send(np, count, r, n) for r in range(n))
    assert np.array_equal(total, ALLREDUCE.expected(np, count, 0, n))


def test_an_injected_wrong_element_is_caught_with_its_index():
    expected = ALLREDUCE.expected(np, 512, 0, 4)
    got = expected.copy()
    assert compare(np, got, expected) == Wrong(0, None, None, None)
    got[137] += 1.0
    got[400] = -1.0
    wrong = compare(np, got, expected)
    assert wrong == Wrong(2, 137, float(expected[137]), float(expected[137]) + 1.0)


def test_a_one_ulp_difference_is_wrong_zero_tolerance():
    expected = ALLTOALL.expected(np, 8, 1, 2)
    got = expected.copy()
    got[3] = np.nextafter(got[3], np.inf)
    assert compare(np, got, expected).count == 1


class _FakeEvent:
    clock: typing.ClassVar[list[float]] = [0.0]

    def record(self, stream):
        _FakeEvent.clock[0] += 0.25  # ms between consecutive event records
        self.t = _FakeEvent.clock[0]

    def synchronize(self):
        pass


def test_event_timing_pairs_start_and_end_events_and_converts_ms_to_ns():
    cuda = types.SimpleNamespace(Event=_FakeEvent, get_elapsed_time=lambda s, e: e.t - s.t)
    fake = types.SimpleNamespace(cuda=cuda)
    calls = []
    stream = types.SimpleNamespace(synchronize=lambda: calls.append("sync"))
    times = nccl._event_times(fake, lambda: calls.append("op"), iters=4, warmup=2, stream=stream)
    assert times.dtype == np.int64 and times.tolist() == [250_000] * 4
    assert calls == ["op", "op", "sync", "op", "op", "op", "op"]


# ---- the engine's GPU code path, on a numpy-backed stand-in for cupy and NCCL -------------


class _Array(np.ndarray):
    """A numpy array with cupy's `.data.ptr` (the device pointer the engine hands to NCCL)."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


class _FakeNccl:
    """One-rank NCCL over host memory: allReduce copies, grouped send/recv to self pair up.

    `fault` makes every second operation misbehave (the mutation tests): "drop" does nothing,
    "half" delivers the first half, "flip" flips one bit, "stale" delivers the previous result."""

    NCCL_FLOAT64, NCCL_SUM = 8, 0
    corrupt_at: int | None = None
    fault: str | None = None
    calls: typing.ClassVar[list] = []

    def __init__(self):
        self.group = None
        self.count = 0
        self.last: bytes | None = None

    def deliver(self, dst: int, src: int, nbytes: int) -> None:
        """memmove, or the fault on every second call."""
        self.count += 1
        previous, self.last = self.last, ctypes.string_at(src, nbytes)
        if self.fault is None or self.count % 2:
            ctypes.memmove(dst, src, nbytes)
        elif self.fault == "half":
            ctypes.memmove(dst, src, nbytes // 2 // 8 * 8)
        elif self.fault == "flip":
            ctypes.memmove(dst, src, nbytes)
            (ctypes.c_uint8 * nbytes).from_address(dst)[nbytes // 3] ^= 1 << 4
        elif self.fault == "stale" and previous is not None and len(previous) == nbytes:
            ctypes.memmove(dst, previous, nbytes)

    def get_unique_id(self):
        return tuple(range(128))

    def get_version(self):
        return 22703

    def groupStart(self):
        self.group = []

    def groupEnd(self):
        sends = {peer: (ptr, count) for kind, ptr, count, peer in self.group if kind == "send"}
        for kind, ptr, count, peer in self.group:
            if kind == "recv":
                src, n = sends[peer]
                assert n == count
                self.deliver(ptr, src, count * 8)
        self.group = None

    def NcclCommunicator(self, n, uid, rank):
        fake = self
        assert (n, rank, len(uid)) == (1, 0, 128)

        class Comm:
            def allReduce(self, send, recv, count, dtype, op, stream):
                assert (dtype, op) == (fake.NCCL_FLOAT64, fake.NCCL_SUM)
                fake.deliver(recv, send, count * 8)
                if fake.corrupt_at is not None:
                    (ctypes.c_double * count).from_address(recv)[fake.corrupt_at] += 1.0
                fake.calls.append(("allReduce", count))

            def send(self, ptr, count, dtype, peer, stream):
                fake.group.append(("send", ptr, count, peer))

            def recv(self, ptr, count, dtype, peer, stream):
                fake.group.append(("recv", ptr, count, peer))

            def destroy(self):
                pass

        return Comm()


def _fake_gpu(monkeypatch):
    fake_nccl = _FakeNccl()
    fake_nccl.calls = []

    class Device:
        def __init__(self, i=0):
            self.id = i

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def use(self):
            pass

        def synchronize(self):
            pass

    class Stream:
        ptr = 0

        def synchronize(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    stream = Stream()
    cuda = types.ModuleType("cupy.cuda")
    cuda.Device, cuda.Stream, cuda.Event, cuda.nccl = Device, lambda non_blocking: stream, _FakeEvent, fake_nccl
    cuda.get_elapsed_time = lambda s, e: e.t - s.t
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    cupy = types.ModuleType("cupy")
    cupy.cuda, cupy.float64 = cuda, np.float64
    cupy.arange = lambda *a, **k: np.arange(*a, **k).view(_Array)
    cupy.empty = lambda *a, **k: np.empty(*a, **k).view(_Array)
    cupy.empty_like = np.empty_like
    cupy.full = lambda *a, **k: np.full(*a, **k).view(_Array)
    cupy.add, cupy.isnan, cupy.nan = np.add, np.isnan, np.nan
    cupy.concatenate = lambda xs: np.concatenate(xs).view(_Array)
    cupy.count_nonzero, cupy.argmax = np.count_nonzero, np.argmax
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake_nccl)
    monkeypatch.setattr(nccl, "_live", [])
    return fake_nccl


@pytest.mark.parametrize("op, size, nbytes", [(nccl.allreduce, 4096, 4096), (nccl.alltoall, 4096, 4096),
                                               (nccl.allreduce, 3, 8), (nccl.alltoall, 1000, 1000)])
def test_engine_code_path_on_a_stand_in_gpu_is_exact(monkeypatch, op, size, nbytes):
    _fake_gpu(monkeypatch)
    comm = MPI.COMM_SELF.Dup()  # a fresh communicator: a fresh (fake) NCCL communicator
    try:
        res = op(comm, size, 4, 1)
        assert res.wrong == 0 and res.first_wrong is None, res.first_wrong
        assert res.nbytes == nbytes and res.times_ns.tolist() == [250_000] * 4
    finally:
        comm.Free()


def test_engine_code_path_reports_a_wrong_element_with_its_index(monkeypatch):
    fake = _fake_gpu(monkeypatch)
    fake.corrupt_at = 5
    comm = MPI.COMM_SELF.Dup()
    try:
        res = nccl.allreduce(comm, 1024, 3, 1)
    finally:
        comm.Free()
    # Only the last iteration (2) is verified by default: its input is stamped + 3.
    assert res.wrong == 1 and res.first_wrong == "iteration 2: rank 0 element 5: expected 9.0, got 10.0"
    assert fake.calls == [("allReduce", 128)] * 4  # 1 warm-up + 3 timed, 128 doubles each


@pytest.mark.parametrize("op", [nccl.allreduce, nccl.alltoall])
@pytest.mark.parametrize("mode", ["drop", "half", "flip", "stale"])
def test_every_fault_of_a_gpu_collective_fails_its_check(monkeypatch, op, mode):
    """Mutation at the engine boundary of the GPU path: the stand-in NCCL drops, halves, flips or
    delivers the previous result of every second operation; every verified iteration is checked."""
    fake = _fake_gpu(monkeypatch)
    fake.fault = mode
    comm = MPI.COMM_SELF.Dup()
    try:
        res = op(comm, 4096, 10, 1, verified=frozenset(range(10)))
    finally:
        comm.Free()
    assert res.ops == 10 and res.ops_failed >= 4 and res.wrong > 0, res
    assert (res.missing > 0) == (mode == "drop")


def test_gpu_check_runs_end_to_end_on_a_stand_in_gpu(monkeypatch, capsys, tmp_path):
    """Every check of benchmarks/gpu_check.py on the numpy stand-in: its code paths, not a GPU's numbers."""
    _fake_gpu(monkeypatch)
    cupy = sys.modules["cupy"]
    rt = cupy.cuda.runtime
    rt.getDeviceProperties = lambda i: {"name": b"Stand-in GPU", "totalGlobalMem": 1 << 34}
    rt.runtimeGetVersion = rt.driverGetVersion = lambda: 12040
    rt.memcpyHostToDevice, rt.memcpyDeviceToHost, rt.memcpyDeviceToDevice = 1, 2, 3
    rt.memcpyAsync = lambda dst, src, n, kind, stream: ctypes.memmove(dst, src, n)

    class Memory:  # cudaMalloc: page-aligned host memory stands in
        def __init__(self, size):
            self.buf = np.empty(size + 4096, dtype=np.uint8)
            self.ptr = self.buf.ctypes.data + (-self.buf.ctypes.data % 4096)

    def raw_kernel(code, name):
        raise RuntimeError("no NVRTC in the stand-in")

    cupy.cuda.Memory = Memory
    cupy.cuda.alloc_pinned_memory = lambda n: bytearray(n)
    cupy.__version__ = "0-stand-in"
    cupy.uint8, cupy.int64, cupy.uint64 = np.uint8, np.int64, np.uint64
    cupy.ones = lambda *a, **k: np.ones(*a, **k).view(_Array)
    cupy.zeros_like, cupy.array_equal = np.zeros_like, np.array_equal
    cupy.get_array_module = lambda *a: cupy
    cupy.RawKernel = raw_kernel
    for var in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):  # restored after the test
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    # The node check runs as its own process: a sysfs tree with the GPU, and NVML's stand-in, for it.
    sys.path.insert(0, str(ROOT / "tests"))
    import fakesysfs
    fakesysfs.gpu(tmp_path / "sys", "0000:19:00.0")
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(tmp_path / "sys"))
    monkeypatch.setenv("ACCEPTANCE_KERNEL_LOG", "echo '[    1.000000] Linux version 6.1.0'")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "data" / "nvml"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FAKE_NVML_GPUS", json.dumps([{"bus": "00000000:19:00.0", "temp": 85}]))
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    monkeypatch.setattr(gpu_check, "engine", nccl)
    try:
        rc = gpu_check.main(["--quick", "--log-dir", str(tmp_path)])
    finally:  # its stand-in NCCL communicator must not outlive the test on MPI.COMM_SELF
        if nccl._keyval is not None and MPI.COMM_SELF.Get_attr(nccl._keyval) is not None:
            MPI.COMM_SELF.Delete_attr(nccl._keyval)
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = out.splitlines()
    for name in ("engine", "device", "alloc", "dmabuf", "h2d", "d2h", "d2d", "events", "nccl_allreduce",
                 "nccl_alltoall", "nccl_log"):
        assert any(line.startswith(f"{name}: ") for line in lines), (name, out)
    assert "gpu_check: OK" in lines
    assert "sleep kernel not compiled" in out and "round trip verified" in out
    data = json.loads(lines[-1])
    assert data["gpu_check"] == "ok" and data["nccl_allreduce"]["busbw"] == 0.0
    assert data["h2d"]["iters"] == 3 and data["h2d"]["bytes"] == 32 << 20
    assert MPI.COMM_SELF.Get_attr(nccl._keyval) is None
    # gpudirect: no nvidia_peermem in the tree, and the subprocess has no cupy to ask about dma-buf
    assert data["node-check"]["statuses"] == {"pcie": "pass", "gpudirect": "error", "gpus": "warn", "xid": "pass"}, data
    assert "gpus: GPU 00000000:19:00.0: 85 C, within 5 C of its slowdown temperature 87 C" in data["node-check"]["problems"]


def test_configure_picks_local_rank_mod_device_count_and_captures_nccl_debug(monkeypatch, tmp_path):
    _fake_gpu(monkeypatch)
    used = []
    cuda = sys.modules["cupy.cuda"]
    cuda.runtime.getDeviceCount = lambda: 2
    cuda.Device.use = lambda self: used.append(self.id)
    for var in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):  # restored after the test
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    topo = types.SimpleNamespace(me=RankInfo(3, "n1", 3, 3, "h", None))
    engine = nccl.NcclEngine()
    engine.configure(topo, None, log_dir=tmp_path)
    assert used == [1] and engine.gpu.device == 1
    assert os.environ["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl-%h-%p.log")


# ---- communicators --------------------------------------------------------------------


def test_one_nccl_communicator_per_mpi_communicator_destroyed_with_it(monkeypatch):
    monkeypatch.setattr(nccl, "_live", [])
    made = []

    class Fake:
        destroyed = 0

        def destroy(self):
            self.destroyed += 1

    def make(comm):
        made.append(comm.Get_size())
        return Fake()

    dup = MPI.COMM_SELF.Dup()
    first = nccl.communicator(dup, make)
    assert nccl.communicator(dup, make) is first and made == [1]
    other = MPI.COMM_SELF.Dup()
    assert nccl.communicator(other, make) is not first and made == [1, 1]
    dup.Free()
    assert first.destroyed == 1
    nccl.destroy_all()
    assert nccl._live == []
    other.Free()


# ---- NCCL debug capture -----------------------------------------------------------------


def test_capture_sets_the_debug_variables_before_the_first_communicator(tmp_path, monkeypatch):
    monkeypatch.setattr(nccl, "_live", [])
    env = {}
    changed = nccl.capture_nccl_debug(tmp_path / "logs", env=env)
    assert env == changed == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
                              "NCCL_DEBUG_FILE": str(tmp_path / "logs" / "nccl-%h-%p.log")}
    assert (tmp_path / "logs").is_dir()
    env = {"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "GRAPH,INIT"}
    assert nccl.capture_nccl_debug(env=env) == {"NCCL_DEBUG_SUBSYS": "GRAPH,INIT,NET"}
    monkeypatch.setattr(nccl, "_live", [object()])
    with pytest.raises(RuntimeError, match="before the first NCCL communicator"):
        nccl.capture_nccl_debug(env={})


@pytest.mark.parametrize("current, wanted", [
    ("", "INIT,NET"), ("INIT", "INIT,NET"), ("ALL", "ALL"), ("net,GRAPH", "net,GRAPH,INIT"),
    ("^NET,PROXY", "^PROXY"), ("^INIT,NET", "ALL"),
])
def test_debug_subsystems_gain_init_and_net(current, wanted):
    assert nccl_log.with_subsystems(current, nccl_log.DEBUG_SUBSYS) == wanted


def test_net_paths_reads_every_process_file(tmp_path):
    lines = IB_GDR.splitlines(keepends=True)
    (tmp_path / "nccl-gpu-a01-41001.log").write_text("".join(x for x in lines if ":41001:" in x))
    (tmp_path / "nccl-gpu-a02-52002.log").write_text("".join(x for x in lines if ":52002:" in x))
    # a capture whose lines lack the host:pid:tid prefix gets them from the file name
    (tmp_path / "nccl-gpu-a03-600.log").write_text(
        "[0] NCCL INFO NET/IB : Using [0]mlx5_5:1/IB ; OOB ib0:10.0.0.3<0>\n"
        "[0] NCCL INFO Channel 00/0 : 5[0] -> 4[1] [receive] via NET/IB/0/GDRDMA\n")
    (tmp_path / "rank-0.log").write_text("not NCCL's\n")
    paths = nccl_log.net_paths(tmp_path)
    assert sorted(paths.processes) == [("gpu-a01", 41001), ("gpu-a02", 52002), ("gpu-a03", 600)]
    assert [(n.host, n.hca, n.gdr) for n in paths.nics() if n.connections] == [
        ("gpu-a01", "mlx5_0", True), ("gpu-a02", "mlx5_3", True), ("gpu-a03", "mlx5_5", True)]


# ---- the parser on realistic samples ----------------------------------------------------


def test_parse_ib_with_gdrdma():
    paths = nccl_log.parse_nccl_debug(IB_GDR)
    assert paths.hosts == ["gpu-a01", "gpu-a02"]
    assert paths.versions == ["2.21.5+cuda12.4"]
    assert paths.processes[("gpu-a01", 41001)].version == "2.21.5+cuda12.4"  # the bare line, amid its process's
    assert paths.networks() == ["IB"]
    p = paths.processes[("gpu-a01", 41001)]
    assert p.nics == {"IB": {0: "mlx5_0", 1: "mlx5_3"}} and p.links == {"mlx5_0": "IB", "mlx5_3": "IB"}
    assert p.hca_gdr["mlx5_0"][0] is True
    net = [c for c in paths.connections if c.network]
    assert len(net) == 8 and all(c.gdr for c in net)
    pxn = next(c for c in net if c.proxy is not None)
    assert (pxn.host, pxn.channel, pxn.src, pxn.dst, pxn.direction, pxn.net_dev, pxn.proxy, pxn.hca) == \
        ("gpu-a01", 1, 1, 2, "send", 1, 0, "mlx5_3")
    first = net[0]
    assert (first.cuda_dev, first.channel, first.src, first.dst, first.direction, first.via) == \
        (0, 0, 3, 0, "receive", "NET/IB/0/GDRDMA")
    nics = {(n.host, n.hca): n for n in paths.nics()}
    a01_0 = nics[("gpu-a01", "mlx5_0")]
    assert (a01_0.connections, a01_0.gdr_connections, a01_0.receives, a01_0.gdr, a01_0.gdr_support,
            a01_0.link, a01_0.via) == (2, 2, 2, True, True, "IB", "NET/IB/0")
    assert nics[("gpu-a02", "mlx5_3")].connections == 2
    assert nics[("gpu-a02", "mlx5_3")].gdr_support is None  # that process did not log it
    assert paths.intranode("gpu-a01") == {"P2P/CUMEM": 3}
    assert nccl_log.gdr_problems(paths, {"mlx5_0": 0, "mlx5_3": 1}) == []


def test_parse_roce_without_gdrdma_and_say_why():
    paths = nccl_log.parse_nccl_debug(ROCE_NO_GDR)
    assert paths.processes[("roce-07", 25668)].links == {"mlx5_0": "RoCE", "mlx5_1": "RoCE"}
    nics = {n.hca: n for n in paths.nics()}
    assert (nics["mlx5_0"].connections, nics["mlx5_0"].gdr_connections, nics["mlx5_0"].gdr) == (3, 0, False)
    assert (nics["mlx5_1"].connections, nics["mlx5_1"].gdr_support, nics["mlx5_1"].link) == (1, False, "RoCE")
    assert paths.intranode() == {"SHM": 2}
    problems = nccl_log.gdr_problems(paths, {"mlx5_0": 0, "mlx5_1": 1})
    assert problems == [
        ("rail 0 (mlx5_0): network traffic via NET/IB/0 without GDRDMA: NCCL staged through host memory "
         "(nvidia_peermem not loaded or dma-buf unsupported; NCCL_NET_GDR_LEVEL?) "
         "[NCCL: NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0']"),
        ("rail 1 (mlx5_1): network traffic via NET/IB/1 without GDRDMA: NCCL staged through host memory "
         "(nvidia_peermem not loaded or dma-buf unsupported; NCCL_NET_GDR_LEVEL?) "
         "[NCCL: NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1']"),
    ]


def test_parse_older_format_and_the_example_message():
    paths = nccl_log.parse_nccl_debug(OLD_NO_MODULE)
    (nic,) = [n for n in paths.nics() if n.connections]
    assert (nic.hca, nic.connections, nic.receives, nic.gdr, nic.gdr_support) == ("mlx5_2", 3, 2, False, False)
    assert [c.channel for c in paths.connections] == [0, 1, 0]
    p = paths.processes[("d0c3f1a2b4e5", 5325)]
    assert p.gpu_gdr == [(False, "NET/IB : GPU Direct RDMA Disabled for GPU 1a000 / HCA 2 (distance 4 >= 2)")]
    (problem,) = nccl_log.gdr_problems(paths, {"mlx5_2": 2})
    assert problem.startswith(
        "rail 2 (mlx5_2): network traffic via NET/IB/2 without GDRDMA: NCCL staged through host memory "
        "(nvidia_peermem not loaded or dma-buf unsupported; NCCL_NET_GDR_LEVEL?)")
    assert "GPU Direct RDMA Disabled for HCA 2 'mlx5_2' (no module)" in problem
    assert nccl_log.gdr_problems(paths, {})[0].startswith("rail ? (mlx5_2): ")


def test_sends_without_gdr_read_are_told_apart():
    paths = nccl_log.parse_nccl_debug(SEND_WITHOUT_GDR_READ)
    (problem,) = nccl_log.gdr_problems(paths, {"mlx5_2": 2})
    assert problem.startswith("rail 2 (mlx5_2): sends via NET/IB/0 without GDRDMA (1 of 1): ")
    assert "NCCL_NET_GDR_READ" in problem


def test_socket_transport_is_not_rdma():
    paths = nccl_log.parse_nccl_debug(SOCKET_ONLY)
    assert paths.versions == ["2.4.7+cuda10.0"] and paths.networks() == ["Socket"]
    assert [(c.net, c.net_dev, c.hca, c.direction) for c in paths.connections] == [
        ("Socket", 0, "eth0", "send"), ("Socket", 0, "eth0", "receive")]
    (problem,) = nccl_log.gdr_problems(paths, {})
    assert problem.startswith("rail ? (eth0): network traffic via NET/Socket/0: TCP sockets, not RDMA")


def test_several_hosts_name_the_host_and_plugin_nets_map_to_the_ib_list():
    text = ROCE_NO_GDR + (
        "gpu-z9:900:901 [2] NCCL INFO NET/IB : Using [0]mlx5_4:1/IB ; OOB ib0:10.0.0.9<0>\n"
        "gpu-z9:900:901 [2] NCCL INFO Channel 02/0 : 6[2] -> 7[3] [receive] via NET/IBext_v8/0\n"
        "gpu-z9:900:901 [2] NCCL INFO Channel 03/0 : 6[2] -> 7[3] [receive] via NET/IBext_v8/0/GDRDMA(PCI)\n")
    paths = nccl_log.parse_nccl_debug(text)
    z9 = [c for c in paths.connections if c.host == "gpu-z9"]
    assert [(c.net, c.hca, c.gdr) for c in z9] == [("IBext_v8", "mlx5_4", False), ("IBext_v8", "mlx5_4", True)]
    problems = nccl_log.gdr_problems(paths, {"mlx5_4": 4})
    assert len(problems) == 3
    assert problems[0].startswith("gpu-z9: rail 4 (mlx5_4): network traffic via NET/IBext_v8/0 without GDRDMA")
    assert problems[1].startswith("roce-07: rail ? (mlx5_0): ")


def test_merged_nics_virtual_devices_and_warnings():
    text = (
        "h:1:2 [0] NCCL INFO NET/IB : Using [0]{mlx5_0:1/IB, mlx5_1:1/IB} [1]mlx5_2:1/IB ; OOB ib0:10.0.0.1<0>\n"
        "h:1:2 [0] NCCL INFO NET/IB : Made virtual device [2] name=mlx5_3+mlx5_4 speed=800000 ndevs=2\n"
        "h:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4242> with status=12 opcode=0 len=0\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/2/GDRDMA\n")
    paths = nccl_log.parse_nccl_debug(text)
    p = paths.processes[("h", 1)]
    assert p.nics["IB"] == {0: "mlx5_0+mlx5_1", 1: "mlx5_2", 2: "mlx5_3+mlx5_4"}
    assert paths.connections[0].hca == "mlx5_3+mlx5_4"
    assert p.warnings and "status=12" in p.warnings[0]


def test_plugin_gdr_line_and_a_line_without_any_channel():
    text = ("n1:5:6 [0] NCCL INFO NET/IB : GPU Direct RDMA (nvidia-peermem) enabled for HCA 0 'mlx5_0\n"
            "n1:5:6 [0] NCCL INFO Channel 00/02 :    0   1\n")
    paths = nccl_log.parse_nccl_debug(text)
    assert paths.processes[("n1", 5)].hca_gdr["mlx5_0"][0] is True
    assert paths.connections == []


# ---- the parser on the shapes of real captures (tests/data/nccl/README names them) ------------------

NCCL_DATA = ROOT / "tests" / "data" / "nccl"


def test_mpirun_tag_output_prefix_and_a_net_plugins_gdrdma():
    paths = nccl_log.parse_nccl_debug((NCCL_DATA / "tag-output-ibext-gdrdma.log").read_text())
    assert list(paths.processes) == [("gpu-h07", 311204)]  # "[3] " before NCCL's prefix is mpirun's, not a host
    assert len(paths.connections) == 8 and all(
        (c.host, c.cuda_dev, c.net, c.net_dev, c.gdr) == ("gpu-h07", 3, "IBext_v8", 3, True) for c in paths.connections)
    (nic,) = paths.nics()
    # no NIC list in the capture: the NIC is named by its NCCL index, and all of it used GPUDirect RDMA
    assert (nic.hca, nic.connections, nic.receives, nic.gdr) == ("NET/IBext_v8/3", 8, 4, True)
    assert nccl_log.gdr_problems(paths, {}) == []


def test_an_empty_host_name_is_read_and_staged_traffic_is_named_per_nic(tmp_path):
    text = (NCCL_DATA / "empty-host-ib-no-gdr.log").read_text()
    paths = nccl_log.parse_nccl_debug(text)
    assert list(paths.processes) == [("", 41877)] and len(paths.connections) == 8
    assert not any(c.gdr for c in paths.connections)
    assert nccl_log.gdr_problems(paths, {}) == [
        f"rail ? (NET/IB/{n}): network traffic via NET/IB/{n} without GDRDMA: NCCL staged through host memory "
        f"(nvidia_peermem not loaded or dma-buf unsupported; NCCL_NET_GDR_LEVEL?)" for n in (2, 3)]
    # Where the host is known (the log file's name, the caller), the empty one is that host: the NIC list
    # NCCL logged with its host name and the channels logged without it are one process's.
    nic_list = "gpu-c03:41877:41890 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB " \
               "[3]mlx5_3:1/IB ; OOB ib0:10.0.0.3<0>\n"
    (tmp_path / "nccl-gpu-c03-41877.log").write_text(nic_list + text)
    paths = nccl_log.net_paths(tmp_path)
    assert list(paths.processes) == [("gpu-c03", 41877)]
    assert [(n.host, n.hca, n.connections, n.gdr) for n in paths.nics() if n.connections] == [
        ("gpu-c03", "mlx5_2", 4, False), ("gpu-c03", "mlx5_3", 4, False)]
    # NCCL's own file name carries the same empty host: its pid is still read from it
    (tmp_path / "nccl-gpu-c03-41877.log").rename(tmp_path / "nccl--41877.log")
    assert sorted(nccl_log.net_paths(tmp_path).processes) == [("", 41877), ("gpu-c03", 41877)]


@pytest.mark.parametrize("name, processes", [
    ("init-timings-old.log", [("dgx-b12", 880412)]),
    ("init-timings-new.log", [("b200-n4", 2207311), ("b200-n4", 2207306)]),
])
def test_init_timings_in_either_format_are_passed_over(name, processes):
    """The harness does not read NCCL's init timings; neither format may be taken for anything else."""
    paths = nccl_log.parse_nccl_debug((NCCL_DATA / name).read_text())
    assert list(paths.processes) == processes
    assert paths.connections == [] and paths.versions == [] and paths.networks() == []
    assert all(not p.nics and not p.warnings and not p.hca_gdr for p in paths.processes.values())


def test_an_nccl_tests_table_is_not_read_as_nccl_debug_lines():
    """all_reduce_perf's stdout fed to the NCCL_DEBUG reader: only NCCL's bare version line means anything."""
    paths = nccl_log.parse_nccl_debug((NCCL_DATA / "all_reduce_perf-256-ranks-partial.txt").read_text(),
                                      default_host="gpu-a01")
    assert paths.versions == ["2.8.3+cuda11.0"] and list(paths.processes) == [("gpu-a01", None)]
    assert paths.connections == [] and paths.processes[("gpu-a01", None)].warnings == []


# ---- records -----------------------------------------------------------------------------


def _topology(hosts_rails):
    ranks = [RankInfo(i, node, local, local, host, None)
             for i, (node, host, local) in enumerate(hosts_rails)]
    return Topology(MPI.COMM_SELF, ranks)


PROFILE = load_profile("local")


def _recorder():
    rec = Recorder(rank=0, node="gpu-a01", rail=None)
    return rec, rec.bind("suites/test_collectives.py::test_allreduce[world]", "collective")


def test_record_gdr_one_record_per_rail_per_node_that_make_record_accepts():
    topo = _topology([("node1", "gpu-a01.cluster", 0), ("node1", "gpu-a01.cluster", 1),
                      ("node2", "gpu-a02", 0), ("node2", "gpu-a02", 1)])
    paths = nccl_log.parse_nccl_debug(IB_GDR)
    rails = rails_for(paths, topo)
    assert rails == {"mlx5_0": 0, "mlx5_3": 1}  # as many NICs as rails: i-th NIC, i-th rail
    rec, record = _recorder()
    assert record_gdr(paths, topo, rails, record, PROFILE) == []
    records = [r for r in rec.take() if r["metric"] == "gdrdma"]
    assert [(r["nodes"], r["rail"], r["value"], r["verdict"]) for r in records] == [
        (["node1"], 0, 1, "pass"), (["node1"], 1, 1, "pass"), (["node2"], 0, 1, "pass"), (["node2"], 1, 1, "pass")]
    for r in records:
        assert set(REQUIRED_KEYS) <= set(r)
        assert (r["suite"], r["metric"], r["unit"], r["engine"], r["memory"]) == \
            ("collective", "gdrdma", "bool", "nccl", "cuda")
        fields = {k: v for k, v in r.items() if k not in ("time",)}
        assert make_record(**fields)["value"] == r["value"]
    assert records[0]["ranks"] == [0] and records[0]["samples"] == 2 and records[0]["threshold"] == 1
    assert "mlx5_0 (NET/IB/0): 2/2 network channel connections with GDRDMA (2/2 receives)" in records[0]["detail"]


def test_record_gdr_fails_a_staged_rail_and_informs_on_an_idle_one():
    topo = _topology([("roce-07", "roce-07", 0), ("roce-07", "roce-07", 1)])
    paths = nccl_log.parse_nccl_debug(ROCE_NO_GDR + SEND_WITHOUT_GDR_READ)
    rails = {"mlx5_0": 0, "mlx5_1": 1, "mlx5_2": 2}
    rec, record = _recorder()
    problems = record_gdr(paths, topo, rails, record, PROFILE)
    got = [(r["nodes"][0], r["rail"], r["metric"], r["value"], r["verdict"], r["threshold"]) for r in rec.take()]
    # pcie-01's receives used GPUDirect RDMA, its sends did not (a warning); roce-07 staged through host memory.
    assert got == [("pcie-01", 2, "gdrdma", 1, "pass", 1), ("pcie-01", 2, "gdrdma_sends", 0, "warn", 1),
                   ("roce-07", 0, "gdrdma", 0, "fail", 1), ("roce-07", 1, "gdrdma", 0, "fail", 1)]
    assert [p.split(":")[0] for p in problems] == ["roce-07 rail 0", "roce-07 rail 1"]
    assert "NCCL staged through host memory" in problems[0] and "Disabled for HCA 0 'mlx5_0'" in problems[0]

    idle = ("n1:5:6 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n"
            "n1:5:6 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
            "n1:5:6 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'\n"
            "n1:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    rec, record = _recorder()
    assert record_gdr(nccl_log.parse_nccl_debug(idle), _topology([("n1", "n1", 0), ("n1", "n1", 1)]),
                      {"mlx5_0": 0, "mlx5_1": 1}, record, PROFILE) == []
    assert [(r["rail"], r["metric"], r["value"], r["verdict"], r["threshold"]) for r in rec.take()] == [
        (0, "gdrdma_support", 1, "info", None), (1, "gdrdma_support", 0, "info", None)]


def test_record_gdr_on_sockets_says_tcp():
    rec, record = _recorder()
    problems = record_gdr(nccl_log.parse_nccl_debug(SOCKET_ONLY), _topology([("head-1", "head-1", 0)]), {}, record,
                          PROFILE)
    (r,) = rec.take()
    assert (r["rail"], r["value"], r["verdict"]) == (None, 0, "fail")
    assert "TCP sockets (NET/Socket), not RDMA" in r["detail"] and problems[0].startswith("head-1 rail ?: eth0")


def test_rails_for_prefers_the_profile_map_then_the_bound_nic():
    paths = nccl_log.parse_nccl_debug(OLD_NO_MODULE)
    topo = Topology(MPI.COMM_SELF, [RankInfo(0, "n", 0, 5, "d0c3f1a2b4e5", "mlx5_2")])
    assert rails_for(paths, topo, {"mlx5_0": 7}) == {"mlx5_0": 7, "mlx5_1": None, "mlx5_2": 5, "mlx5_3": None}


# ---- benchmarks/gpu_check.py and the GPU itself ---------------------------------------------


def test_gpu_check_skips_cleanly_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ACCEPTANCE_", "PMI", "PYTEST_"))}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--quick"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120, check=False)
    if nccl.available()[0]:
        pytest.skip("this machine has a GPU: gpu_check.py runs for real (see the hardware-gated test)")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert any(line.startswith(("SKIP: cupy not importable", "SKIP: no CUDA device")) for line in lines), p.stdout
    assert json.loads(lines[-1])["gpu_check"] == "skip"


_OK, _WHY = nccl.available()


@pytest.mark.skipif(not _OK, reason=_WHY)
def test_one_rank_allreduce_and_alltoall_on_a_gpu():
    for op in (nccl.allreduce, nccl.alltoall):
        res = op(MPI.COMM_SELF, 1 << 20, 5, 1)
        assert res.wrong == 0 and res.first_wrong is None
        assert res.nbytes == 1 << 20 and len(res.times_ns) == 5 and (res.times_ns > 0).all()


def test_a_staged_rail_is_a_finding_naming_the_node(tmp_path):
    """The analysis turns failing gdrdma records into a node finding, with NCCL's evidence."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import synthetic

    from acceptance.analysis import analyze
    topo = _topology([("roce-07", "roce-07", 0), ("roce-07", "roce-07", 1)])
    rec, record = _recorder()
    record_gdr(nccl_log.parse_nccl_debug(ROCE_NO_GDR), topo, {"mlx5_0": 0, "mlx5_1": 1}, record, PROFILE)
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, collectives=False, memreg=False)
    with open(run / "results.jsonl", "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rec.take())
    meta = json.loads((run / "run.json").read_text())
    meta["topology"]["nodes"].append("roce-07")  # the run's own node (analysis refuses nodes it does not know)
    (run / "run.json").write_text(json.dumps(meta))
    found = [f for f in analyze(run).findings if f["metric"] == "gdrdma"]
    assert [(f["severity"], f["scope"], f["node"]) for f in found] == [("fail", "node", "roce-07")]
    assert "NCCL staged through host memory" in " ".join(found[0]["evidence"])


def test_a_schema_2_gdrdma_record_that_warned_still_warns(tmp_path):
    """Schema 2 wrote one gdrdma record per node and rail with its own bound: a sends-only one (warn,
    no threshold) reads as gdrdma_sends and an idle NIC's (info) as gdrdma_support, so re-analysis of
    such a folder neither fails what warned nor judges what was information."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import synthetic

    from acceptance.analysis import analyze
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, collectives=False, memreg=False)
    common = {"test": "suites/test_collectives.py::test_gpudirect_rdma_used", "suite": "collective", "unit": "bool",
              "size": None, "ranks": [0], "engine": "nccl", "memory": "cuda", "iteration": 0,
              "time": "2026-01-01T00:00:00Z", "samples": 4}
    old = [{**common, "metric": "gdrdma", "value": 0, "nodes": ["node01"], "rail": 0, "threshold": None,
            "verdict": "warn", "detail": "mlx5_0 (NET/IB/0): 2/4 ...; sends only"},
           {**common, "metric": "gdrdma", "value": 0, "nodes": ["node02"], "rail": 1, "threshold": None,
            "verdict": "info", "detail": "mlx5_1: no network traffic in these communicators"},
           {**common, "metric": "gdrdma", "value": 0, "nodes": ["node03"], "rail": 0, "threshold": 1,
            "verdict": "fail", "detail": "mlx5_0 (NET/IB/0): 0/4 ...; NCCL staged through host memory"}]
    with open(run / "results.jsonl", "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in old)
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "schema": 2}))
    a = analyze(run)
    assert [(f["severity"], f["node"], f["metric"]) for f in a.findings if f["metric"].startswith("gdrdma")] == [
        ("fail", "node03", "gdrdma")]
    gdr = a.records[a.records["metric"].astype(str).str.startswith("gdrdma")]
    assert sorted(zip(gdr["src"].astype(str), gdr["metric"].astype(str), gdr["verdict"].astype(str))) == [
        ("node01", "gdrdma_sends", "warn"), ("node02", "gdrdma_support", "info"), ("node03", "gdrdma", "fail")]

