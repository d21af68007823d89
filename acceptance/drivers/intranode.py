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

Device work goes through a copier (acceptance.engines.cuda_copy.CupyCopier wraps the cupy
module it is given); all the bookkeeping here (pairs, GB/s, outliers, records, the census and
its decision) is plain Python and numpy, tested with fake copiers and fake timings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engines.memory import MemoryUnavailable, array_module
from ..rules import judge
from ..measure.verify import Tally
from ..engines.cuda_copy import CupyCopier


SUITE = "intranode"
UNIT = "GB/s"
ENGINE = "cuda"
KINDS = ("h2d", "d2h", "p2p")               # gated kinds, each with its own outlier test
METRIC = {"h2d": "h2d_bandwidth", "d2h": "d2h_bandwidth", "p2p": "p2p_bandwidth",
          "p2p_bidir": "p2p_bidir_bandwidth"}
LABEL = {"h2d": "H2D", "d2h": "D2H", "p2p": "P2P", "p2p_bidir": "P2P bidirectional"}
OUTLIER_METRIC = "gpu_bandwidth_outliers"
MIN_GROUP = 3               # fewest values of one kind on a node that an outlier test is made on


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
    profile: object = field(default=None, repr=False, compare=False)  # what acceptance.rules.judge judges by


def settings_from_profile(profile) -> Settings:
    """[intranode] of a profile; each kind's floor in record units, as the catalog converts it."""
    bounds = {}
    for kind in ("h2d", "d2h", "p2p"):
        bounds[kind], _ = judge.one("intranode", METRIC[kind], None, profile)
    return Settings(size=profile.get("intranode.size"), iters=profile.get("intranode.iters"),
                    warmup=profile.get("intranode.warmup"),
                    outlier_fraction=profile.get("intranode.outlier_fraction"), bounds=bounds, profile=profile)


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
        below = judge.Fleet.outside([m.value for m in group], median, fraction)  # the judge's rule
        out += [Outlier(m, median) for m, slow in zip(group, below) if slow]
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
