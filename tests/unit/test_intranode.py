"""The intra-node GPU bandwidth driver without a GPU: pairs, GB/s, outliers, records, the census,
the node lockstep, and CupyCopier against a numpy stand-in for the parts of cupy it calls."""

import ctypes
import dataclasses
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from acceptance.analysis import analyze, evaluate, find, load_records
from acceptance.engines.memory import MemoryUnavailable
from acceptance.drivers import intranode
from acceptance.drivers.intranode import (
    Measurement,
    Probe,
    Settings,
    StepFailed,
    decide,
    gbyte_per_s_ms,
    lockstep,
    ordered_pairs,
    outliers,
    probe,
    record_node,
    settings_from_profile,
    unordered_pairs,
)
from acceptance.engines import cuda_copy
from acceptance.engines.cuda_copy import CupyCopier, bound_to, local_cpus, normalize_pci, parse_cpulist
from acceptance.rules.profile import load_profile
from acceptance.records.results import REQUIRED_KEYS, Recorder, RunFolder

MiB = 2**20
SIZE = 256 * MiB
# Seven healthy GPUs around 55 GB/s and GPU3 at 14.1: the node median is exactly 55.0.
H2D = [55.2, 54.8, 55.0, 14.1, 55.1, 54.9, 55.0, 55.3]


def ms_for(gbs: float, nbytes: int = SIZE) -> float:
    return nbytes / (gbs * 1e6)


def measurement(kind, gpu, gbs, peer=None, iters=5, **kw):
    return Measurement(kind, gpu, SIZE, np.full(iters, ms_for(gbs)), peer=peer, **kw)


def settings(**bounds):
    """[intranode] of a profile with these floors (GB/s) over the local profile, as the suite builds it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.toml"
        path.write_text('extends = "local"\n[intranode]\n' + "".join(f'{k}_min = "{v}GB/s"\n' for k, v in bounds.items()
                                                                        if v is not None))
        profile = load_profile(str(path))
    return dataclasses.replace(settings_from_profile(profile), size=SIZE, iters=5, warmup=1, outlier_fraction=0.75)


def recorder(node="node7", rank=0):
    rec = Recorder(rank, node, 0)
    return rec, rec.bind("suites/test_intranode.py::test_host_device_bandwidth", "intranode")


# ---- pairs, units, medians --------------------------------------------------------------

def test_pairs():
    assert ordered_pairs(3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert len(ordered_pairs(8)) == 56 and len(set(ordered_pairs(8))) == 56
    assert unordered_pairs(3) == [(0, 1), (0, 2), (1, 2)] and len(unordered_pairs(8)) == 28
    assert ordered_pairs(1) == [] and unordered_pairs(1) == []


def test_bandwidth_from_bytes_and_event_ms():
    # 256 MiB in 4.88 ms is 55.0 GB/s (GB = 1e9 B)
    assert gbyte_per_s_ms(SIZE, 4.880644) == pytest.approx(55.0, rel=1e-6)
    assert gbyte_per_s_ms(1e9, 1000.0) == 1.0
    with pytest.raises(ValueError, match="> 0 ms"):
        gbyte_per_s_ms(SIZE, 0.0)


def test_value_is_from_the_median_copy():
    m = Measurement("h2d", 0, SIZE, np.array([ms_for(50), ms_for(50), ms_for(50) * 40]))
    assert m.value == pytest.approx(50.0) and m.samples == 3
    both = Measurement("p2p_bidir", 0, SIZE, np.full(3, ms_for(700)), peer=1)
    assert both.value == pytest.approx(1400.0)   # both directions' bytes in the same time
    assert both.where() == "GPU0 <-> GPU1"


# ---- outliers -----------------------------------------------------------------------------

def test_one_slow_gpu_among_eight_is_the_only_outlier():
    ms = [measurement("h2d", g, v, pci=f"0000:{0x18 + g:02x}:00.0") for g, v in enumerate(H2D)]
    ms += [measurement("d2h", g, 53.0 + g * 0.1) for g in range(8)]
    found = outliers(ms, 0.75)
    assert [(o.measurement.kind, o.measurement.gpu) for o in found] == [("h2d", 3)]
    assert str(found[0]) == "GPU3 H2D 14.1 GB/s vs node median 55.0 GB/s"
    assert found[0].median == pytest.approx(55.0)


def test_p2p_outlier_names_the_pair():
    ms = [measurement("p2p", s, 20.0 if (s, d) == (0, 2) else 376.0, peer=d) for s, d in ordered_pairs(4)]
    found = outliers(ms, 0.75)
    assert [str(o) for o in found] == ["GPU0 -> GPU2 P2P 20.0 GB/s vs node median 376.0 GB/s"]


def test_no_outlier_test_below_three_values():
    assert outliers([measurement("h2d", 0, 55.0), measurement("h2d", 1, 5.0)], 0.75) == []


# ---- records --------------------------------------------------------------------------------

def test_records_carry_the_outlier_verdict_and_pass_make_record():
    ms = [measurement("h2d", g, v, pci=f"0000:{0x18 + g:02x}:00.0") for g, v in enumerate(H2D)]
    rec, record = recorder()
    problems = record_node(ms, settings(h2d=None), "node7", [0], record, ("h2d", "d2h"))
    records = rec.take()
    assert all(set(REQUIRED_KEYS) <= set(r) for r in records)   # built by results.make_record
    h2d = [r for r in records if r["metric"] == "h2d_bandwidth"]
    assert [r["rail"] for r in h2d] == list(range(8))
    assert all(r["unit"] == "GB/s" and r["nodes"] == ["node7"] and r["suite"] == "intranode"
               and r["memory"] == "cuda" and r["size"] == SIZE and r["samples"] == 5 for r in h2d)
    assert h2d[3]["detail"] == "GPU3 (0000:1b:00.0)" and h2d[3]["value"] == pytest.approx(14.1)
    # No floor in the profile: the bandwidth records are information; the outlier count fails, once.
    assert [r["verdict"] for r in h2d] == ["info"] * 8 and all(r["threshold"] is None for r in h2d)
    count = next(r for r in records if r["metric"] == "gpu_bandwidth_outliers")
    assert count["value"] == 1 and count["verdict"] == "fail" and count["threshold"] == 0
    assert count["detail"] == "GPU3 H2D 14.1 GB/s vs node median 55.0 GB/s" and count["rail"] is None
    assert problems == ["node7: outlier: GPU3 H2D 14.1 GB/s vs node median 55.0 GB/s (below 0.75 x the median)"]


def test_absolute_floor_and_outlier_floor():
    ms = [measurement("h2d", g, v) for g, v in enumerate(H2D)]
    rec, record = recorder()
    problems = record_node(ms, settings(h2d=48.0), "node7", [0], record, ("h2d", "d2h"))
    h2d = [r for r in rec.take() if r["metric"] == "h2d_bandwidth"]
    assert all(r["threshold"] == 48.0 for r in h2d)          # the profile's floor
    assert "node7: GPU3 H2D 14.1 GB/s < bound 48 GB/s" in problems and len(problems) == 2
    # A floor above every GPU: all eight fail it, and GPU3 is still the node's only outlier.
    problems = record_node(ms, settings(h2d=100.0), "node7", [0], record, ("h2d", "d2h"))
    assert len(problems) == 9 and [p for p in problems if "outlier" in p] == [
        "node7: outlier: GPU3 H2D 14.1 GB/s vs node median 55.0 GB/s (below 0.75 x the median)"]


def test_clean_node_and_too_few_gpus():
    rec, record = recorder()
    assert record_node([measurement("h2d", g, 55.0) for g in range(4)], settings(), "n", [0], record, ("h2d",)) == []
    count = next(r for r in rec.take() if r["metric"] == "gpu_bandwidth_outliers")
    assert count["value"] == 0 and count["verdict"] == "pass" and count["samples"] == 4
    assert count["detail"] == "no H2D value below 0.75 x the node median"
    record_node([measurement("h2d", 0, 55.0)], settings(), "n", [0], record, ("h2d",))
    rs = rec.take()
    assert next(r for r in rs if r["metric"] == "h2d_bandwidth")["verdict"] == "info"
    assert "no outlier test: fewer than 3 H2D values" in rs[-1]["detail"]


def test_p2p_records_and_no_peer_access():
    ms = [measurement("p2p", s, 376.0, peer=d, peer_access=(s, d) != (1, 0)) for s, d in ordered_pairs(3)]
    ms.append(measurement("p2p_bidir", 0, 700.0, peer=1, peer_access=True))
    rec, record = recorder()
    record_node(ms, settings(p2p=335.0), "node1", [0], record, ("p2p",))
    rs = rec.take()
    p2p = {r["detail"]: r for r in rs if r["metric"] == "p2p_bandwidth"}
    assert set(p2p) == {"GPU0 -> GPU1", "GPU0 -> GPU2", "GPU1 -> GPU0 (no peer access: staged through host memory)",
                        "GPU1 -> GPU2", "GPU2 -> GPU0", "GPU2 -> GPU1"}
    assert p2p["GPU2 -> GPU1"]["rail"] == 2 and all(r["threshold"] == 335.0 for r in p2p.values())
    bidir = next(r for r in rs if r["metric"] == "p2p_bidir_bandwidth")
    assert bidir["detail"] == "GPU0 <-> GPU1" and bidir["verdict"] == "info" and bidir["value"] == pytest.approx(1400)


def test_settings_from_profiles():
    local = settings_from_profile(load_profile("local"))
    assert (local.size, local.iters, local.warmup, local.outlier_fraction) == (SIZE, 20, 3, 0.75)
    assert local.bounds == {"h2d": None, "d2h": None, "p2p": None}
    h100 = settings_from_profile(load_profile("h100-ndr400"))
    assert h100.size == 512 * MiB
    assert h100.bounds == pytest.approx({"h2d": 48.0, "d2h": 48.0, "p2p": 335.0})   # GB/s, not Gbit/s
    a100 = settings_from_profile(load_profile("a100-hdr200"))
    assert a100.bounds == pytest.approx({"h2d": 21.0, "d2h": 21.0, "p2p": 235.0})


# ---- analysis: the outlier survives re-judging ---------------------------------------------

def _run_folder(tmp_path, profile):
    folder = RunFolder.create(tmp_path, "run")
    folder.write_run({"run_id": "run", "profile": profile})
    for node, values in (("node1", [55.0 + g * 0.1 for g in range(8)]), ("node7", H2D)):
        rec, record = recorder(node)
        record_node([measurement("h2d", g, v) for g, v in enumerate(values)], settings_from_profile(
            load_profile(profile)), node, [0], record, ("h2d", "d2h"))
        folder.append_records(rec.take())
    return folder.path


def test_analysis_gives_a_node_finding_for_the_outlier(tmp_path):
    a = analyze(_run_folder(tmp_path, "local"))
    assert [(f["scope"], f["node"], f["metric"], f["severity"]) for f in a.findings] == [
        ("node", "node7", "gpu_bandwidth_outliers", "fail")]
    f = a.findings[0]
    assert f["value"] == 1 and f["expected"] == 0
    assert any("GPU3 H2D 14.1 GB/s vs node median 55.0 GB/s" in line for line in f["evidence"])
    assert f["message"].startswith("node7: intranode gpu_bandwidth_outliers 1 count > bound 0 count")
    assert any(d.line.startswith("scontrol update NodeName=node7 State=DRAIN") for d in a.drains)
    # Re-judged from the profile alone (local has no floors): the bandwidth records are info.
    ev = a.records
    assert set(ev.loc[ev["metric"] == "h2d_bandwidth", "verdict"]) == {"info"}


def test_analysis_applies_the_floor_in_gb_per_s(tmp_path):
    run = _run_folder(tmp_path, "h100-ndr400")
    df = evaluate(load_records(run), load_profile("h100-ndr400"))
    h2d = df[df["metric"] == "h2d_bandwidth"]
    assert list(h2d["threshold"]) == pytest.approx([48.0] * 16)    # "48GB/s" = 384 Gbit/s, x 1/8
    assert list(h2d.loc[h2d["verdict"] == "fail", "rail"]) == [3]
    findings = find(df, load_profile("h100-ndr400"))
    assert {(f["scope"], f["node"], f["metric"]) for f in findings} == {
        ("node", "node7", "gpu_bandwidth_outliers"), ("node", "node7", "h2d_bandwidth")}
    bound = next(f for f in findings if f["metric"] == "h2d_bandwidth")
    assert bound["expected"] == pytest.approx(48.0) and "GPU3" in " ".join(bound["evidence"])


# ---- which nodes have GPUs --------------------------------------------------------------------

def test_probe_says_why_there_is_no_gpu():
    def no_cupy(memory):
        try:
            raise ModuleNotFoundError("No module named 'cupy'", name="cupy")
        except ModuleNotFoundError as e:
            raise MemoryUnavailable("cupy not installed (pip install 'acceptance[gpu]')") from e

    def no_device(memory):
        raise MemoryUnavailable("cupy imports but no CUDA device: device count is 0")

    assert probe(no_cupy).why == "cupy not importable: No module named 'cupy' (pip install 'acceptance[gpu]')"
    assert probe(no_cupy).gpus == 0
    assert probe(no_device) == Probe(0, "cupy imports but no CUDA device: device count is 0",
                                     os.environ.get("CUDA_VISIBLE_DEVICES"))
    fake = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=lambda: 8)))
    assert probe(lambda memory: fake).gpus == 8


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed here")
def test_probe_here_without_cupy():
    assert probe().why.startswith("cupy not importable: No module named 'cupy'")


def test_decide():
    none = Probe(0, "cupy not importable: No module named 'cupy'")
    d = decide({"node1": none, "node2": none}, pairs=False)
    assert d.skip == "no CUDA device on any node: cupy not importable: No module named 'cupy'" and not d.problems
    other = Probe(0, "cupy imports but no CUDA device: device count is 0")
    assert decide({"node1": none, "node2": other}, pairs=True).skip == (
        "no CUDA device on any node: node1: cupy not importable: No module named 'cupy'; "
        "node2: cupy imports but no CUDA device: device count is 0")
    d = decide({"node1": Probe(8), "node2": none, "node3": Probe(8)}, pairs=False)
    assert d.skip is None and d.problems == (
        "CUDA devices on node1, node3 but none on node2: cupy not importable: No module named 'cupy'",)
    d = decide({"node1": Probe(8), "node2": Probe(1, visible="0")}, pairs=False, gpus_per_node=8)
    assert len(d.problems) == 1 and d.problems[0].startswith(
        "node2: the measuring rank sees 1 CUDA devices (CUDA_VISIBLE_DEVICES=0), the profile expects 8")
    assert decide({"node1": Probe(1), "node2": Probe(1)}, pairs=True).skip == (
        "one CUDA device per node: no GPU pair to measure")
    assert decide({"node1": Probe(1), "node2": Probe(1)}, pairs=False) == intranode.Decision(None, ())
    assert decide({"node1": Probe(8)}, pairs=True, gpus_per_node=8) == intranode.Decision(None, ())


# ---- the node lockstep ------------------------------------------------------------------------

class FakeComm:
    """rank 0 of a node communicator, or another rank that hears `heard` from rank 0."""

    def __init__(self, rank=0, heard=None):
        self.rank, self.heard, self.sent = rank, heard, []

    def Get_rank(self):
        return self.rank

    def bcast(self, obj, root=0):
        if self.rank == root:
            self.sent.append(obj)
            return obj
        return self.heard


def test_lockstep_leader_works_everyone_shows_progress():
    ticks = []
    comm = FakeComm(0)
    assert lockstep(comm, [0, 1, 2], lambda s: [s * 10], lambda: ticks.append(1)) == [0, 10, 20]
    assert comm.sent == [None, None, None] and len(ticks) == 3
    other = FakeComm(1)
    assert lockstep(other, [0, 1, 2], lambda s: pytest.fail("only rank 0 works"), lambda: ticks.append(1)) == []
    assert len(ticks) == 6


def test_lockstep_error_ends_the_wait_everywhere():
    def boom(step):
        if step == 1:
            raise RuntimeError("cudaErrorIllegalAddress")
        return [step]

    leader = FakeComm(0)
    with pytest.raises(RuntimeError, match="IllegalAddress"):
        lockstep(leader, [0, 1, 2], boom)
    assert leader.sent == [None, "RuntimeError: cudaErrorIllegalAddress"]   # step 2 never starts
    with pytest.raises(StepFailed, match="IllegalAddress"):
        lockstep(FakeComm(1, heard="RuntimeError: cudaErrorIllegalAddress"), [0, 1, 2], boom)


class FakeCopier:
    """GB/s per GPU and pair; times are what a copy of that size takes at that rate."""

    last_check = None  # moves no bytes, so checks none

    def __init__(self, gpus=8, h2d=None, slow_pairs=(), no_access=()):
        self.gpus, self.h2d = gpus, h2d or [55.0] * gpus
        self.slow_pairs, self.no_access = set(slow_pairs), set(no_access)
        self.calls, self.closed = [], False

    def pci_bus_id(self, gpu):
        return f"0000:{0x18 + gpu:02x}:00.0"

    def enable_peer(self, src, dst):
        return (src, dst) not in self.no_access

    def host_device(self, gpu, kind, nbytes, iters, warmup):
        self.calls.append((kind, gpu))
        rate = self.h2d[gpu] if kind == "h2d" else 52.0
        return np.full(iters, ms_for(rate, nbytes)), None

    def peer(self, src, dst, nbytes, iters, warmup):
        self.calls.append(("p2p", src, dst))
        return np.full(iters, ms_for(20.0 if (src, dst) in self.slow_pairs else 376.0, nbytes))

    def peer_bidir(self, x, y, nbytes, iters, warmup):
        self.calls.append(("p2p_bidir", x, y))
        return np.full(iters, ms_for(700.0, 2 * nbytes))

    def close(self):
        self.closed = True


def topology(rank=0, node="node7"):
    return SimpleNamespace(node_comm=FakeComm(rank), node=node, rank=rank)


def test_run_host_on_the_measuring_rank():
    copier = FakeCopier(h2d=H2D)
    rec, record = recorder()
    problems = intranode.run("host", topology(), {"node7": Probe(8)}, settings(), record,
                             make_copier=lambda node: copier)
    assert copier.calls == [(k, g) for g in range(8) for k in ("h2d", "d2h")] and copier.closed
    assert problems == ["node7: outlier: GPU3 H2D 14.1 GB/s vs node median 55.0 GB/s (below 0.75 x the median)"]
    records = rec.take()
    assert sorted({r["metric"] for r in records}) == ["d2h_bandwidth", "gpu_bandwidth_outliers", "h2d_bandwidth"]
    assert all(r["ranks"] == [0] for r in records)


def test_run_peer_every_ordered_pair_and_each_unordered_pair_once():
    copier = FakeCopier(gpus=4, slow_pairs={(2, 1)})
    rec, record = recorder()
    problems = intranode.run("peer", topology(), {"node7": Probe(4)}, settings(), record,
                             make_copier=lambda node: copier)
    assert [c[1:] for c in copier.calls if c[0] == "p2p"] == ordered_pairs(4)
    assert [c[1:] for c in copier.calls if c[0] == "p2p_bidir"] == unordered_pairs(4)
    slow = "node7: outlier: GPU2 -> GPU1 P2P 20.0 GB/s vs node median 376.0 GB/s (below 0.75 x the median)"
    assert problems == [slow]
    metrics = [r["metric"] for r in rec.take()]
    assert metrics.count("p2p_bandwidth") == 12 and metrics.count("p2p_bidir_bandwidth") == 6


def test_run_other_ranks_only_wait():
    rec, record = recorder(rank=1)
    out = intranode.run("host", topology(rank=1), {"node7": Probe(2)}, settings(), record,
                        make_copier=lambda node: pytest.fail("only the node's first rank makes a copier"))
    assert out == [] and rec.take() == []
    # A single-GPU node has no pair: nothing to do, no copier.
    assert intranode.run("peer", topology(), {"node7": Probe(1)}, settings(), record,
                         make_copier=lambda node: pytest.fail("no pair, no copier")) == []


# ---- the cupy side, against a stand-in ------------------------------------------------------

class FakeCuda:
    """The slice of cupy that CupyCopier calls, on numpy, with a clock per stream.

    Memory is real (numpy buffers) so copies move bytes; each copy advances its stream's
    clock by nbytes / rate. It checks what CUDA requires: an event is recorded on a stream
    of its own device, timing events only, peer copies name the devices their pointers are on.
    """

    def __init__(self, gpus=2, can_peer=lambda s, d: True):
        self.RATES = {"h2d": 50e9, "d2h": 45e9, "p2p": 400e9}
        self.gpus, self.can_peer = gpus, can_peer
        self.fault, self.peer_copies = None, 0  # every second peer copy: "drop", "half" or "flip"
        self.current = 0
        self.owner = {}          # pointer -> device (or "host")
        self.keep = []
        self.streams = {}
        self.enabled = set()
        cuda = self

        class Error(Exception):
            def __init__(self, status):
                super().__init__(f"CUDA error {status}")
                self.status = status

        class Device:
            def __init__(self, i):
                self.id, self._stack = int(i), []

            def __enter__(self):
                self._stack.append(cuda.current)
                cuda.current = self.id
                return self

            def __exit__(self, *exc):
                cuda.current = self._stack.pop()

            @property
            def pci_bus_id(self):
                return f"0000:{0x18 + self.id:02X}:00.0"

        class Stream:
            def __init__(self, non_blocking=False):
                self.device, self.clock = cuda.current, 0.0
                self.ptr = 1000 + len(cuda.streams)
                cuda.streams[self.ptr] = self

            def wait_event(self, event):
                self.clock = max(self.clock, event.t)

            def synchronize(self):
                pass

        class Event:
            def __init__(self, block=False, disable_timing=False, interprocess=False):
                self.device, self.timing, self.t = cuda.current, not disable_timing, None

            def record(self, stream=None):
                assert stream.device == self.device, "event recorded on another device's stream"
                self.t = stream.clock

        class PinnedMemory:
            def __init__(self, size, flags=0):
                self.buf = np.zeros(size, np.uint8)
                self.ptr = self.buf.ctypes.data
                cuda.owner[self.ptr] = "host"
                cuda.keep.append(self.buf)

        def alloc(size):
            buf = np.zeros(size, np.uint8)
            cuda.owner[buf.ctypes.data] = cuda.current
            cuda.keep.append(buf)
            return SimpleNamespace(ptr=buf.ctypes.data, buf=buf)

        def elapsed(a, b):
            assert a.timing and b.timing and a.device == b.device
            return (b.t - a.t) * 1e3

        def memcpy_async(dst, src, size, kind, stream):
            s = cuda.streams[stream]
            want = ("host", s.device) if kind == 1 else (s.device, "host")
            assert (cuda.owner[src], cuda.owner[dst]) == want, "host/device copy on a wrong pointer or stream"
            ctypes.memmove(dst, src, size)
            s.clock += size / cuda.RATES["h2d" if kind == 1 else "d2h"]

        def memcpy_peer_async(dst, dst_device, src, src_device, size, stream):
            assert cuda.owner[dst] == dst_device and cuda.owner[src] == src_device, "peer copy names the wrong device"
            cuda.peer_copies += 1
            if cuda.fault is None or cuda.peer_copies % 2:
                ctypes.memmove(dst, src, size)
            elif cuda.fault == "half":
                ctypes.memmove(dst, src, size // 2)
            elif cuda.fault == "flip":
                ctypes.memmove(dst, src, size)
                (ctypes.c_uint8 * size).from_address(dst)[size // 3] ^= 1 << 4
            # "drop": nothing moves
            cuda.streams[stream].clock += size / cuda.RATES["p2p"]

        def enable_peer(peer):
            if (cuda.current, peer) in cuda.enabled:
                raise Error(cuda_copy.PEER_ACCESS_ALREADY_ENABLED)
            assert cuda.can_peer(cuda.current, peer)
            cuda.enabled.add((cuda.current, peer))

        runtime = SimpleNamespace(
            getDeviceCount=lambda: cuda.gpus, deviceCanAccessPeer=lambda s, d: int(cuda.can_peer(s, d)),
            deviceEnablePeerAccess=enable_peer, memcpyAsync=memcpy_async, memcpyPeerAsync=memcpy_peer_async,
            memcpyHostToDevice=1, memcpyDeviceToHost=2, hostAllocPortable=1)
        self.cuda = SimpleNamespace(runtime=runtime, Device=Device, Stream=Stream, Event=Event,
                                    PinnedMemory=PinnedMemory, alloc=alloc, get_elapsed_time=elapsed)
        self.freed = False
        self.get_default_memory_pool = lambda: SimpleNamespace(free_all_blocks=lambda: setattr(self, "freed", True))


def test_cupy_copier_host_device_and_peer_on_a_stand_in(tmp_path):
    cp = FakeCuda(gpus=2)
    copier = CupyCopier(cp, tmp_path)
    assert copier.device_count() == 2 and copier.pci_bus_id(1) == "0000:19:00.0"
    times, note = copier.host_device(1, "h2d", MiB, iters=4, warmup=2)
    assert len(times) == 4 and gbyte_per_s_ms(MiB, float(np.median(times))) == pytest.approx(50.0)
    assert (copier.last_check.ops, copier.last_check.failed) == (1, 0)
    assert note.startswith("host buffer not bound to the GPU's CPUs")   # no local_cpulist in tmp_path
    times, _ = copier.host_device(0, "d2h", MiB, iters=3, warmup=0)
    assert gbyte_per_s_ms(MiB, float(np.median(times))) == pytest.approx(45.0)
    assert copier.enable_peer(0, 1) and copier.enable_peer(1, 0)
    cp.enabled.clear()
    copier._peer.clear()
    cp.enabled.add((0, 1))
    assert copier.enable_peer(0, 1)               # cudaErrorPeerAccessAlreadyEnabled is fine
    times = copier.peer(0, 1, MiB, iters=3, warmup=1)
    assert gbyte_per_s_ms(MiB, float(np.median(times))) == pytest.approx(400.0)
    assert (copier.last_check.ops, copier.last_check.failed) == (1, 0)  # the last copy arrived exactly
    both = copier.peer_bidir(0, 1, MiB, iters=3, warmup=1)
    assert len(both) == 3 and gbyte_per_s_ms(2 * MiB, float(np.median(both))) == pytest.approx(800.0)
    assert (copier.last_check.ops, copier.last_check.failed) == (2, 0)
    assert cp.current == 0
    copier.close()
    assert cp.freed


@pytest.mark.parametrize("fault", ["drop", "half", "flip"])
def test_a_faulty_peer_copy_fails_its_check_and_its_record(tmp_path, fault):
    cp = FakeCuda(gpus=2)
    cp.fault = fault  # every second peer copy: the last of 2 timed copies
    copier = CupyCopier(cp, tmp_path)
    copier.peer(0, 1, MiB, iters=2, warmup=0)
    check = copier.last_check
    assert check.ops == 1 and check.failed == 1 and check.wrong > 0 and check.missing == (fault == "drop")
    rec, record = recorder()
    measured = intranode.Measurement("p2p", 0, MiB, np.full(3, 0.01), peer=1, check=check)
    problems = record_node([measured], settings(), "n", [0], record, ("p2p",))
    errors = [r for r in rec.take() if r["metric"] == "errors"]
    assert len(errors) == 1 and errors[0]["verdict"] == "fail" and errors[0]["ops_failed"] == 1
    assert any("GPU0 -> GPU1 P2P: 1 of 1 P2P copies" in p for p in problems), problems


def test_cupy_copier_through_the_driver(tmp_path):
    cp = FakeCuda(gpus=3, can_peer=lambda s, d: {s, d} != {0, 2})
    small = dataclasses.replace(settings(), size=8 * MiB)  # each copy is checked
    measured = intranode.peers_from(CupyCopier(cp, tmp_path), small, 0, 3)
    p2p = [m for m in measured if m.kind == "p2p"]
    assert [(m.gpu, m.peer, m.peer_access) for m in p2p] == [(0, 1, True), (0, 2, False)]
    assert p2p[1].detail() == "GPU0 -> GPU2 (no peer access: staged through host memory)"
    hd = intranode.host_device(CupyCopier(cp, tmp_path), small, 2)
    assert [(m.kind, m.pci) for m in hd] == [("h2d", "0000:1a:00.0"), ("d2h", "0000:1a:00.0")]


def test_pci_addresses_and_cpu_lists(tmp_path):
    assert normalize_pci("0000:3B:00.0") == "0000:3b:00.0"
    assert normalize_pci("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_pci(b"0000:9B:00.0\x00") == "0000:9b:00.0"
    assert normalize_pci("GPU-1234") is None and normalize_pci(None) is None
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    dev = tmp_path / "bus" / "pci" / "devices" / "0000:3b:00.0"
    dev.mkdir(parents=True)
    (dev / "local_cpulist").write_text("0-31,64-95\n")
    assert local_cpus(tmp_path, "0000:3b:00.0") == set(range(32)) | set(range(64, 96))
    assert local_cpus(tmp_path, "0000:9b:00.0") is None and local_cpus(tmp_path, None) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity here")
def test_bound_to_restores_the_affinity():
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with bound_to(one) as why:
        assert why is None and os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before
    with bound_to(None) as why:
        assert "unknown" in why and os.sched_getaffinity(0) == before


def test_records_are_json():
    rec, record = recorder()
    record_node([measurement("d2h", g, 50.0) for g in range(3)], settings(d2h=40.0), "n", [0], record, ("d2h",))
    for r in rec.take():
        assert json.loads(json.dumps(r)) == r
