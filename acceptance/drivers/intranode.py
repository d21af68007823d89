"""GPU copy bandwidth inside one node: host <-> device per GPU, GPU -> GPU for every pair.

What is measured, as nvbandwidth's copy-engine tests (the ones AzNHC gates, see the profiles):
- h2d / d2h, per GPU: cudaMemcpyAsync between pinned host memory and the GPU. The host
  buffer is allocated with this thread bound to the GPU's local CPUs (sysfs local_cpulist),
  as nvbandwidth sets the GPU's NUMA affinity before it allocates host memory, so a GPU on
  the far socket is not measured across the inter-socket link.
- p2p, per ordered pair (src, dst): cudaMemcpyPeerAsync on a stream of the source GPU (a
  push, nvbandwidth's device_to_device_memcpy_write_ce pattern), with peer access enabled
  both ways where cudaDeviceCanAccessPeer allows it. A pair without peer access is still
  measured (the driver stages the copy through host memory) and its record says so.
- p2p_bidir, per unordered pair: both directions at once, each on its source's stream;
  informational (not gated, not part of the outlier test).

Timing: CUDA events on the copying stream around every copy. The warmup copies are
enqueued just before the timed ones on the same stream, so the GPU is still busy with them
while Python enqueues the rest (what nvbandwidth's spin kernel ensures); a timed copy's
events are then copy-engine timestamps, not Python's. A value is bytes / median per-copy
time in GB/s, GB = 1e9 bytes (nvbandwidth and nccl-tests print the same unit).

Outliers: per node and per kind (h2d, d2h, p2p), a GPU or pair below
intranode.outlier_fraction x the node's median of that kind is an outlier (from MIN_GROUP
values up: with two GPUs there is no telling which one is slow). Absolute floors come from
intranode.h2d_min / d2h_min / p2p_min. Records: h2d_bandwidth, d2h_bandwidth and
p2p_bandwidth (rail = GPU index, the source GPU for p2p), p2p_bidir_bandwidth, and one
gpu_bandwidth_outliers count per node and test, whose detail names the outliers, so the
analysis (which re-judges records from the profile alone) still turns them into a finding.

Who measures: on each node the first rank of the node communicator measures every GPU of
the node, step by step (one GPU, or one source GPU's pairs, per step); the node's other
ranks wait for each step at a broadcast, so no two processes copy at once and every rank
shows progress to the hang watchdog after each step.

Device work goes through a copier (CupyCopier wraps the cupy module it is given); all the
bookkeeping here (pairs, GB/s, outliers, records, the census and its decision) is plain
Python and numpy, tested with fake copiers and fake timings.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..engines.memory import POISON, MemoryUnavailable, array_module, expected
from ..spec import judge
from ..measure.verify import Tally

SUITE = "intranode"
UNIT = "GB/s"
ENGINE = "cuda"
KINDS = ("h2d", "d2h", "p2p")               # gated kinds, each with its own outlier test
METRIC = {"h2d": "h2d_bandwidth", "d2h": "d2h_bandwidth", "p2p": "p2p_bandwidth",
          "p2p_bidir": "p2p_bidir_bandwidth"}
LABEL = {"h2d": "H2D", "d2h": "D2H", "p2p": "P2P", "p2p_bidir": "P2P bidirectional"}
OUTLIER_METRIC = "gpu_bandwidth_outliers"
MIN_GROUP = 3               # fewest values of one kind on a node that an outlier test is made on
PEER_ACCESS_ALREADY_ENABLED = 704   # cudaErrorPeerAccessAlreadyEnabled


# ---------------------------------------------------------------------------------------
# Pairs, units, settings
# ---------------------------------------------------------------------------------------

def ordered_pairs(gpus: int) -> list[tuple[int, int]]:
    """Every (src, dst) with src != dst, source-major: (0, 1), (0, 2), ..., (1, 0), ..."""
    return [(s, d) for s in range(gpus) for d in range(gpus) if s != d]


def unordered_pairs(gpus: int) -> list[tuple[int, int]]:
    """Every {a, b} once, as (a, b) with a < b."""
    return [(a, b) for a in range(gpus) for b in range(a + 1, gpus)]


def gbyte_per_s_ms(nbytes: float, ms: float) -> float:
    """GB/s (1e9 bytes) from bytes and milliseconds (CUDA events count milliseconds)."""
    if ms <= 0:
        raise ValueError(f"elapsed time must be > 0 ms, got {ms!r}")
    return nbytes / (ms * 1e6)


@dataclass(frozen=True)
class Settings:
    size: int                           # bytes per copy
    iters: int                          # timed copies per GPU / pair
    warmup: int                         # untimed copies before them
    outlier_fraction: float             # below this x the node's median is an outlier
    bounds: dict = field(default_factory=dict)   # kind -> floor in GB/s (None: not checked)
    profile: object = field(default=None, repr=False, compare=False)  # what acceptance.spec.judge judges by


def settings_from_profile(profile) -> Settings:
    """[intranode] of a profile; each kind's floor in record units, as the catalog converts it."""
    bounds = {}
    for kind in ("h2d", "d2h", "p2p"):
        bounds[kind], _ = judge.one("intranode", METRIC[kind], None, profile)
    return Settings(size=profile.get("intranode.size"), iters=profile.get("intranode.iters"),
                    warmup=profile.get("intranode.warmup"),
                    outlier_fraction=profile.get("intranode.outlier_fraction"), bounds=bounds, profile=profile)


# ---------------------------------------------------------------------------------------
# Measurements and their verdicts
# ---------------------------------------------------------------------------------------

@dataclass
class Measurement:
    kind: str                   # h2d, d2h, p2p, p2p_bidir
    gpu: int                    # the GPU; for p2p the source, for p2p_bidir the lower index
    nbytes: int                 # bytes of one copy (each direction for p2p_bidir)
    times_ms: np.ndarray        # one per timed copy (p2p_bidir: per iteration, both directions)
    peer: int | None = None     # the destination GPU (p2p), the other GPU (p2p_bidir)
    pci: str | None = None      # the GPU's PCI address, for h2d / d2h
    peer_access: bool | None = None
    note: str | None = None     # something the reader of the record should know
    check: Tally | None = None  # the data check of the last timed copy (each direction for p2p_bidir)

    @property
    def moved(self) -> int:
        return 2 * self.nbytes if self.kind == "p2p_bidir" else self.nbytes

    @property
    def value(self) -> float:
        """GB/s from the median timed copy."""
        return gbyte_per_s_ms(self.moved, float(np.median(self.times_ms)))

    @property
    def samples(self) -> int:
        return len(self.times_ms)

    def where(self) -> str:
        """GPU3, GPU0 -> GPU5, GPU0 <-> GPU5."""
        if self.kind == "p2p":
            return f"GPU{self.gpu} -> GPU{self.peer}"
        if self.kind == "p2p_bidir":
            return f"GPU{self.gpu} <-> GPU{self.peer}"
        return f"GPU{self.gpu}"

    def detail(self) -> str:
        text = self.where()
        if self.pci:
            text += f" ({self.pci})"
        if self.peer_access is False:
            text += " (no peer access: staged through host memory)"
        if self.note:
            text += f"; {self.note}"
        return text


@dataclass(frozen=True)
class Outlier:
    measurement: Measurement
    median: float               # the node's median of that kind, GB/s

    def __str__(self) -> str:
        m = self.measurement
        return f"{m.where()} {LABEL[m.kind]} {m.value:.1f} {UNIT} vs node median {self.median:.1f} {UNIT}"


def outliers(measurements: Iterable[Measurement], fraction: float) -> list[Outlier]:
    """Values below fraction x the median of their kind (h2d, d2h, p2p), among one node's."""
    out = []
    by_kind: dict[str, list[Measurement]] = {}
    for m in measurements:
        if m.kind in KINDS:
            by_kind.setdefault(m.kind, []).append(m)
    for kind in KINDS:
        group = by_kind.get(kind, [])
        if len(group) < MIN_GROUP:
            continue
        median = float(np.median([m.value for m in group]))
        out += [Outlier(m, median) for m in group if m.value < fraction * median]
    return out


def medians(measurements: Iterable[Measurement]) -> dict[str, float]:
    """The node's median per kind, where there are enough values for an outlier test."""
    by_kind: dict[str, list[float]] = {}
    for m in measurements:
        if m.kind in KINDS:
            by_kind.setdefault(m.kind, []).append(m.value)
    return {k: float(np.median(v)) for k, v in by_kind.items() if len(v) >= MIN_GROUP}


def record_node(measurements: Sequence[Measurement], settings: Settings, node: str, ranks: list[int],
                record: Callable, test_kinds: Sequence[str]) -> list[str]:
    """Record one node's measurements and its outlier count; returns the problems, node-prefixed.

    A record's threshold is the profile's floor for its kind (verdict fail below it, pass
    above, info without one); a GPU below outlier_fraction x its node's median is counted,
    and named, by the outlier record, so one slow GPU is one failure. `test_kinds` are the
    kinds this test covers (the outlier count names them even when it is zero).
    """
    problems = []
    floor = {k: settings.outlier_fraction * med for k, med in medians(measurements).items()}
    found = outliers(measurements, settings.outlier_fraction)
    flagged = {id(o.measurement): o for o in found}
    common = {"size": settings.size, "nodes": [node], "ranks": list(ranks), "engine": ENGINE, "memory": "cuda"}
    profile = settings.profile
    for m in measurements:
        value = m.value
        bound, verdict = judge.record(record, profile, SUITE, METRIC[m.kind], value, rail=m.gpu, samples=m.samples,
                                      detail=m.detail(), **common)
        if m.check is not None:  # the copy's own data check: must be exact (docs/methodology.md §7)
            what = f"{LABEL[m.kind]} copies"
            _, checked = judge.record(record, profile, SUITE, "errors", m.check.wrong, rail=m.gpu, samples=m.samples,
                                      detail=f"{m.where()}: {m.check.summary(what) or f'{m.check.ops} checked, exact'}",
                                      **m.check.fields(), **common)
            if checked == "fail":
                problems.append(f"{node}: {m.where()} {LABEL[m.kind]}: {m.check.summary(what)}")
        if verdict == "fail":
            problems.append(f"{node}: {m.where()} {LABEL[m.kind]} {value:.1f} {UNIT} < bound {bound:g} {UNIT}")
        if id(m) in flagged:
            problems.append(f"{node}: outlier: {flagged[id(m)]} (below {settings.outlier_fraction:g} x the median)")
    compared = sum(1 for m in measurements if m.kind in test_kinds and m.kind in floor)
    what = "/".join(LABEL[k] for k in test_kinds)
    detail = "; ".join(str(o) for o in found) if found else (
        f"no {what} value below {settings.outlier_fraction:g} x the node median" if compared
        else f"no outlier test: fewer than {MIN_GROUP} {what} values on the node")
    judge.record(record, profile, SUITE, OUTLIER_METRIC, len(found), rail=None, samples=compared, detail=detail,
                 **{**common, "size": None})
    return problems


# ---------------------------------------------------------------------------------------
# Which nodes have GPUs: the census and what the suite does with it
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    gpus: int                   # CUDA devices this process sees
    why: str | None = None      # why none, when none
    visible: str | None = None  # $CUDA_VISIBLE_DEVICES


def probe(load: Callable = array_module) -> Probe:
    """The CUDA devices this process sees, through `load("cuda")` (acceptance.engines.memory.array_module)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        cupy = load("cuda")
    except MemoryUnavailable as e:
        cause = e.__cause__
        if isinstance(cause, ImportError):
            hint = " (pip install 'acceptance[gpu]')" if getattr(cause, "name", None) == "cupy" else ""
            return Probe(0, f"cupy not importable: {cause}{hint}", visible)
        return Probe(0, str(e), visible)
    return Probe(int(cupy.cuda.runtime.getDeviceCount()), None, visible)


def census(world, node_comm, node: str, load: Callable = array_module) -> dict[str, Probe]:
    """node -> what its first rank sees. Collective over `world`; only that rank imports cupy."""
    mine = probe(load) if node_comm.Get_rank() == 0 else None
    return {n: p for n, p in world.allgather((node, mine)) if p is not None}


def _grouped(reasons: dict[str, str]) -> str:
    by_reason: dict[str, list[str]] = {}
    for node, why in reasons.items():
        by_reason.setdefault(why, []).append(node)
    if len(by_reason) == 1:
        return next(iter(by_reason))
    return "; ".join(f"{', '.join(nodes)}: {why}" for why, nodes in by_reason.items())


@dataclass(frozen=True)
class Decision:
    skip: str | None            # skip the test with this reason (every rank decides the same)
    problems: tuple[str, ...]   # fail the test with these (nodes named)


def decide(found: dict[str, Probe], pairs: bool, gpus_per_node: int | None = None) -> Decision:
    """Skip when no node has a CUDA device (or, for pairs, none has two); fail naming the nodes
    when some have GPUs and others not, or when a node's first rank sees fewer than the profile's
    preflight.gpus_per_node (it measures every GPU of its node, so it must see them all)."""
    have = {n: p for n, p in found.items() if p.gpus > 0}
    lack = {n: p.why or "no CUDA device" for n, p in found.items() if p.gpus == 0}
    if not have:
        return Decision(f"no CUDA device on any node: {_grouped(lack)}", ())
    problems = []
    if lack:
        problems.append(f"CUDA devices on {', '.join(have)} but none on {', '.join(lack)}: {_grouped(lack)}")
    if gpus_per_node:
        for n, p in have.items():
            if p.gpus < gpus_per_node:
                vis = f" (CUDA_VISIBLE_DEVICES={p.visible})" if p.visible is not None else ""
                problems.append(f"{n}: the measuring rank sees {p.gpus} CUDA devices{vis}, the profile expects "
                                f"{gpus_per_node} (preflight.gpus_per_node); it measures every GPU of its node, "
                                f"so it must see them all")
    if problems:
        return Decision(None, tuple(problems))
    if pairs and max(p.gpus for p in have.values()) < 2:
        return Decision("one CUDA device per node: no GPU pair to measure", ())
    return Decision(None, ())


# ---------------------------------------------------------------------------------------
# Running on a node: the first rank measures, the others wait step by step
# ---------------------------------------------------------------------------------------

class StepFailed(Exception):
    """The measuring rank of this node failed a step; its own test reports the error."""


def lockstep(comm, steps: Sequence, work: Callable, progress: Callable[[], None] | None = None) -> list:
    """work(step) on comm rank 0 for each step, its results concatenated; every rank of comm
    waits for each step at a broadcast and then calls progress(). An error in a step ends the
    loop on every rank: rank 0 re-raises it, the others raise StepFailed."""
    leader = comm.Get_rank() == 0
    out: list = []
    for step in steps:
        error = None
        if leader:
            try:
                out += work(step)
            except Exception as e:  # noqa: BLE001 - the leader's test reports it; the others must not wait forever
                error = e
        failed = comm.bcast(None if error is None else f"{type(error).__name__}: {error}", root=0)
        if progress:
            progress()
        if error is not None:
            raise error
        if failed is not None:
            raise StepFailed(failed)
    return out


def host_device(copier, settings: Settings, gpu: int) -> list[Measurement]:
    """H2D then D2H of one GPU."""
    pci = copier.pci_bus_id(gpu)
    out = []
    for kind in ("h2d", "d2h"):
        times, note = copier.host_device(gpu, kind, settings.size, settings.iters, settings.warmup)
        out.append(Measurement(kind, gpu, settings.size, np.asarray(times, dtype=float), pci=pci, note=note,
                               check=copier.last_check))
    return out


def peers_from(copier, settings: Settings, src: int, gpus: int, bidirectional: bool = True) -> list[Measurement]:
    """src -> every other GPU, then src <-> every higher GPU at once (each unordered pair once)."""
    out = []
    for dst in range(gpus):
        if dst == src:
            continue
        access = copier.enable_peer(src, dst) & copier.enable_peer(dst, src)
        times = copier.peer(src, dst, settings.size, settings.iters, settings.warmup)
        out.append(Measurement("p2p", src, settings.size, np.asarray(times, dtype=float), peer=dst,
                               peer_access=bool(access), check=copier.last_check))
    if bidirectional:
        for dst in range(src + 1, gpus):
            access = copier.enable_peer(src, dst) & copier.enable_peer(dst, src)
            times = copier.peer_bidir(src, dst, settings.size, settings.iters, settings.warmup)
            out.append(Measurement("p2p_bidir", src, settings.size, np.asarray(times, dtype=float), peer=dst,
                                   peer_access=bool(access), check=copier.last_check))
    return out


def run(part: str, topology, found: dict[str, Probe], settings: Settings, record: Callable,
        progress: Callable[[], None] | None = None, make_copier: Callable | None = None) -> list[str]:
    """Measure `part` ("host" or "peer") on this rank's node; the node's first rank records.

    Collective over topology.node_comm. Returns the problems (outliers, floors) this rank found.
    The copier is made inside the first step, so a failure there ends the wait of the others too.
    """
    if part not in ("host", "peer"):
        raise ValueError(f"unknown part {part!r}: expected 'host' or 'peer'")
    comm = topology.node_comm
    gpus = found[topology.node].gpus
    made: list = []

    def copier():
        if not made:
            made.append((make_copier or default_copier)(topology.node))
        return made[0]

    if part == "host":
        steps, kinds = list(range(gpus)), ("h2d", "d2h")
        def work(g):
            return host_device(copier(), settings, g)
    else:
        steps, kinds = (list(range(gpus)) if gpus >= 2 else []), ("p2p",)
        def work(s):
            return peers_from(copier(), settings, s, gpus)
    try:
        measured = lockstep(comm, steps, work, progress)
    except StepFailed:
        return []  # the measuring rank fails the test with the error
    finally:
        for c in made:
            c.close()
    if comm.Get_rank() != 0 or not measured:
        return []
    return record_node(measured, settings, topology.node, [topology.rank], record, kinds)


def default_copier(node: str):
    """A CupyCopier over cupy, reading GPU NUMA affinity from the node's sysfs."""
    from ..host.sysfs import sysfs_root
    return CupyCopier(array_module("cuda"), sysfs_root(node))


# ---------------------------------------------------------------------------------------
# The device side: cupy, handed in
# ---------------------------------------------------------------------------------------

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


def _blocks(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(whole COPY_BLOCK rows of buf, its tail): views, so a block pattern applies by broadcasting."""
    whole = len(buf) // COPY_BLOCK * COPY_BLOCK
    return buf[:whole].reshape(-1, COPY_BLOCK), buf[whole:]


def fill_content(buf: np.ndarray, seed: tuple[int, ...], poisoned: bool = False) -> None:
    """What a checked copy's source holds (or, poisoned, its destination before it): a pattern block of
    the copy's own seed, repeated; generating one block is the cost, repeating it a memory pass."""
    block = expected(min(len(buf), COPY_BLOCK), *seed, POISON if poisoned else 0)
    rows, tail = _blocks(buf)
    rows[:] = block
    tail[:] = block[:len(tail)]


def check_content(got: np.ndarray, seed: tuple[int, ...]) -> Tally:
    """One copy's check: `got` against fill_content(seed); all poison means it never arrived."""
    block = expected(min(len(got), COPY_BLOCK), *seed, 0)
    rows, tail = _blocks(got)
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
