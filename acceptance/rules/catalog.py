"""Every metric the harness records, declared once, beside its suite's name and engine needs.

A metric's facts live here and nowhere else: its record name(s) and unit, which way is
better, where its bound is in the profile (and how the profile's unit converts to the
record's), whether fleet outliers are sought in it, whether burn-in and baseline comparison
follow it, and how people read its name. acceptance.rules.judge turns a value into threshold and
verdict from these facts (while recording and again in analysis, the same way); the report,
Prometheus export and compare pick their metrics here.

Adding a metric with a bound: its entry below (and its key in the profile schema, marked
bound=True) and the line in its driver that records it through acceptance.rules.judge.record.
docs/records.md lists them for users.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

US = 1e6       # profile durations are seconds, records microseconds
GBIT_TO_GBYTE = 1 / 8  # profile rates are Gbit/s, busbw and intranode records GB/s

# How a metric's bound is found (acceptance.rules.judge):
#   none      informational: no bound; the record keeps the verdict its test wrote
#   sizemap   the profile key is a table by message size (rdma_write.bandwidth_min)
#   scalar    one number (rdma_write.latency_p50_max)
#   zero      must be 0 (errors, mismatches)
#   memlock   at least the key's size, or "unlimited"
#   ranks     equal to topology.rails, or to most nodes' count when that is 0
#   versions  zero mismatches when the key (preflight.same_versions) is on
#   one       must be 1 (a flag that must hold: GPUDirect RDMA in use)
#   counter   by the counter's kind (acceptance.host.counter_kinds.kind_of): errors, discards, pause, CNP
# A metric marked `advisory` warns where its bound is not met, instead of failing.
BOUND_KINDS = ("none", "sizemap", "scalar", "zero", "memlock", "ranks", "versions", "one", "counter")
TIMINGS = (None, "one-way", "round trip")
# What each record unit measures, and its factor to that quantity's base unit: the one table exports
# (Prometheus base units: bytes_per_second, seconds) and anything else converting a unit read from.
QUANTITIES: dict[str, tuple[str, float]] = {
    "Gbit/s": ("bytes_per_second", 1e9 / 8), "Mbit/s": ("bytes_per_second", 1e6 / 8),
    "bit/s": ("bytes_per_second", 1 / 8), "GB/s": ("bytes_per_second", 1e9), "MB/s": ("bytes_per_second", 1e6),
    "B/s": ("bytes_per_second", 1.0), "GiB/s": ("bytes_per_second", float(1 << 30)),
    "MiB/s": ("bytes_per_second", float(1 << 20)), "Mop/s": ("ops_per_second", 1e6),
    "us": ("seconds", 1e-6), "ms": ("seconds", 1e-3), "ns": ("seconds", 1e-9), "s": ("seconds", 1.0),
    "bytes": ("bytes", 1.0), "count": ("count", 1.0), "1/s": ("per_second", 1.0), "bool": ("bool", 1.0),
    "ratio": ("ratio", 1.0), "ppm": ("ratio", 1e-6), "errors/bit": ("ratio", 1.0),
}


def base_factors(quantity: str) -> dict[str, float]:
    """unit -> factor to `quantity`'s base unit, for every unit of that quantity."""
    return {unit: f for unit, (q, f) in QUANTITIES.items() if q == quantity}

# What burn-in and baselines follow of a metric: every record ("each"), or only its largest message
# size ("largest": a sweep's saturated end, where a change means the link, not the message size).
TRENDS = (None, "each", "largest")


@dataclass(frozen=True)
class Metric:
    names: tuple[str, ...]          # the record `metric` names it covers (reg_time and reg_time_user)
    unit: str                       # the record's unit
    higher: bool | None             # True: higher is better; False: lower is better; None: must equal
    bound: str = "none"
    key: str | None = None          # profile key (dotted); a collective's has {node} and {op}
    scale: float = 1.0              # profile unit -> record unit
    label: str = ""                 # how people read it ("write latency p50")
    outlier: bool = False           # compared with the fleet (point-to-point pairs)
    trend: str | None = None        # followed by burn-in (drift, instability) and baselines: TRENDS
    line_rate: bool = False         # analysis.line_rate floor applies (point-to-point bandwidth)
    # Where a pairwise metric is shown: a source x destination matrix per rail in the report
    # (`heatmap`), a curve against message size per rail (`curve`), and `export`: the stem of its
    # Prometheus families (acceptance_nic_<export>_<unit>, acceptance_rail_<export>_<unit>).
    heatmap: bool = False
    curve: bool = False
    export: str | None = None
    when: tuple[tuple[str, object], ...] = ()  # a collective's (op, comm) this entry's key is for
    # The bound is per NIC of a node: the threshold is the key's value times topology.rails (the NICs a
    # node drives at once; a communicator over every GPU of every node loads all of them).
    per_nic: bool = False
    advisory: bool = False          # outside its bound: warn, not fail
    # A latency's definition, which every engine measures alike (engines.contract.PairLink):
    # "one-way" is half a measured round trip (ib_write_lat, osu_latency); "round trip" is the whole
    # of it (ib_read_lat, ib_atomic_lat, a post-to-completion sample). A bound is for that definition.
    timing: str | None = None
    # Which of a part's findings names it when several metrics find the same part: lower first.
    priority: int = 9
    # A data check's checked operation, one per name ("writes" for errors): "3 of 40 writes did not arrive".
    nouns: tuple[str, ...] = ()
    # A latency percentile's rank (50, 99, 99.9): how many samples it needs before a fleet comparison
    # can single out a link by it (acceptance.measure.stats.samples_needed).
    percentile: float | None = None
    # The report panel that draws it. A pairwise suite's latency ("write latency"): one panel per title
    # and suite, its metrics against message size, or side by side at the one size measured (report
    # "Against size"). A communicator's ("bus bandwidth"): per op and scope against size ("Collectives").
    panel: str = ""
    # Its column in its suite's own report table (the incast table, one row per receiver): "aggregate"
    # (whose record's samples are its senders), "fair" (whose detail names the slowest sender), "p99".
    column: str = ""
    headline: bool = False          # the history's fleet trend (report "History") follows it: one metric
    # A reference tool's figure the report sets beside the same metric of its suite's `checks` suite.
    crosscheck: bool = False
    # A fact of a node's NIC (node, rail: GPUDirect in use) recorded by a communicator's test, not a
    # fact of the communicator: failures group it per node and rail, not per communicator.
    nic_fact: bool = False
    # A port counter kind that counts something going wrong (not traffic, pause frames, waits or
    # congestion notifications): Prometheus exports its rises per port.
    wrong: bool = False
    # What a failed record of it says, with {value} and {bound} as text ("unlimited" where `unlimited`).
    fails: str = ""
    # The profile key the metric owns: setting(acceptance.rules.fields) builds its Field (type, default, help).
    # None where the key is a general setting defined in acceptance.rules.schema (topology.rails).
    setting: Callable[[object], object] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.unit not in QUANTITIES:
            raise ValueError(f"{self.names}: unit {self.unit!r} is not in QUANTITIES (say what it measures there)")
        if self.bound not in BOUND_KINDS:
            raise ValueError(f"{self.names}: bound {self.bound!r} is not one of {BOUND_KINDS}")
        if self.trend not in TRENDS:
            raise ValueError(f"{self.names}: trend {self.trend!r} is not one of {TRENDS}")
        if self.timing not in TIMINGS:
            raise ValueError(f"{self.names}: timing {self.timing!r} is not one of {TIMINGS}")

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def quantity(self) -> str:
        """What it measures ("bytes_per_second", "seconds", ...): its export unit family."""
        return QUANTITIES[self.unit][0]


    @property
    def fleet(self) -> bool:
        """Whether it can be held to a fleet-relative bound (fleet.bounds): a measurement with a
        direction, not a must-equal count or a flag."""
        return self.higher is not None and self.bound in ("none", "sizemap", "scalar") \
            and self.unit not in ("count", "bool")

    @property
    def unlimited(self) -> bool:
        """Whether its bound may be "unlimited" (a missing value or bound then reads so)."""
        return self.bound == "memlock"


@dataclass(frozen=True)
class Suite:
    name: str                       # the records' `suite`
    engine_needs: tuple[str, ...]   # what its engine must offer (acceptance.engines.registry)
    metrics: tuple[Metric, ...] = field(default=())
    measures: bool = True           # False: facts about nodes and ports (preflight, counters), no fleet bounds
    # Records between two nodes on a rail: analysis compares them with the fleet and localizes them
    # (link, NIC, node, rail plane), as it does every pairwise suite; `finding` starts their findings.
    pairwise: bool = False
    finding: str = ""
    # The reference pairwise suite: burn-in and baseline findings localize on its pairs (else the first
    # pairwise suite's), and the fleet-outlier functions of acceptance.analysis.outliers default to it.
    primary: bool = False
    # Records of a communicator (its `op` and `scope`, src..dst the range of its nodes), not of a pair:
    # failures group them by operation and communicator, the report draws them per op and scope.
    communicators: bool = False
    # Records of a port's counters over a window (node, device, port): findings per port, the report's
    # counter tables, Prometheus's counter-rise family.
    ports: bool = False
    checks: str = ""                # the suite whose same metrics its `crosscheck` metrics are set beside


TIMING_WORDS = {"one-way": "one-way: half a round trip, as ib_write_lat", "round trip": "a full round trip"}


def _latencies(prefix: str, label: str, key_prefix: str | None, timing: str, bounded=("p50", "p99", "p999"),
               outlier=(), trend=(), heatmap=(), export=(), what: str = "", panel: str = "", column=(),
               crosscheck=()):
    """Latency p50, p99, p99.9 and max of one operation, each sample `timing` (Metric.timing);
    `bounded` percentiles have a profile key (a duration, unset by default), `outlier`, `trend`,
    `heatmap`, `export`, `column` and `crosscheck` say which percentiles have those roles (export: the
    family stem is the metric's name, prefixed "write_" for a write; column: named by its percentile);
    `panel`: the report's latency panel that draws all four (Metric.panel)."""
    out = []
    for p, shown in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max")):
        has = key_prefix is not None and p in bounded
        name = f"{prefix}latency_{p}"
        help = f"{what or label + ' latency'} {shown} bound ({TIMING_WORDS[timing]})"
        out.append(Metric((name,), "us", False, "scalar" if has else "none",
                          f"{key_prefix}_{p}_max" if has else None, US, f"{label} latency {shown}".strip(),
                          outlier=p in outlier, trend="each" if p in trend else None, heatmap=p in heatmap,
                          priority={"p50": 1, "p99": 2, "p999": 3}.get(p, 9) if not prefix else 9,
                          export=(f"{prefix or 'write_'}latency_{p}" if p in export else None), timing=timing,
                          percentile={"p50": 50.0, "p99": 99.0, "p999": 99.9}.get(p), panel=panel,
                          column=p if p in column else "", crosscheck=p in crosscheck,
                          setting=_duration(help) if has else None))
    return tuple(out)


def _duration(help: str):
    return lambda f: f.Duration(None, help=help)


def _busbw(op: str, comms: tuple[str, ...]) -> Metric:
    """busbw of one collective over one kind of communicator (the record's op and scope).

    A rail communicator has one NIC per rank, so its bound is one NIC's figure. A world all-reduce
    spreads its inter-node traffic over every NIC of a node at once (NCCL runs a ring per NIC): its
    busbw approaches the node's aggregate, so its bound is per NIC, times topology.rails. An all-to-all
    cannot aggregate NICs (every GPU sends its own share through its own NIC): the world's is held
    to the rail's per-NIC figure.
    """
    name = COLLECTIVES[op][0]
    per_nic = comms == ("world",)
    if comms == ("node",):
        key, where = f"collectives.node_{op}_busbw_min", "inside one node"
    elif per_nic:
        key, where = f"collectives.world_{op}_busbw_min_per_nic", \
            "over every GPU of every node, per NIC of a node (the bound is this times topology.rails)"
    else:
        key, where = f"collectives.{op}_busbw_min", "by size, " + " and ".join(
            {"rail": "rail communicators (one NIC per rank)", "world": "the world communicator"}[c] for c in comms)
    return Metric(("busbw",), "GB/s", True, "sizemap", key, GBIT_TO_GBYTE,
                  f"{op} busbw{' inside a node' if comms == ('node',) else ''}", trend="largest", priority=4,
                  panel="bus bandwidth",
                  when=(("op", op), ("comm", comms)), per_nic=per_nic,
                  setting=lambda f: f.SizeMap(f.Rate("0GB/s", unit="GB/s"), help=f"{name} busbw bound {where}"))


# Shared by memreg and the GPU registration of gpudirect: one bound each.
REG_TIME = Metric(("reg_time", "reg_time_user"), "us", False, "sizemap", "memreg.reg_time_max", US,
                  "registration time p50",
                  setting=lambda f: f.SizeMap(f.Duration("0s"), help="p50 registration time bound by size"))
DEREG_TIME = Metric(("dereg_time", "dereg_time_user"), "us", False, "sizemap", "memreg.dereg_time_max", US,
                    "deregistration time p50",
                    setting=lambda f: f.SizeMap(f.Duration("0s"), help="p50 deregistration time bound by size"))
# Every data check: "errors" (writes, collectives), "read_errors" and "atomic_errors" (what reads and
# fetch-and-adds brought back). The value is wrong bytes (elements for collectives); the record's
# ops / ops_failed / ops_missing count the checked operations (docs/methodology.md "Data integrity").
DATA_ERRORS = Metric(("errors", "read_errors", "atomic_errors"), "count", False, "zero", label="wrong data",
                     priority=5, nouns=("writes", "reads", "atomic fetch-and-adds"))
DATA_ERROR_NAMES = DATA_ERRORS.names


@dataclass(frozen=True)
class PairOp:
    """One point-to-point operation of the pairwise suites (the records' `op`): the names of its metrics,
    which its drivers (acceptance.drivers.p2p) measure and record."""
    name: str
    what: str                       # what the engine does, as messages say it
    latency_prefix: str             # its latency percentiles: <prefix>latency_p50, ...
    errors: str                     # its data check's metric (one of DATA_ERRORS.names)
    bandwidth: str | None = None    # its bandwidth metric, where it has a bandwidth sweep

    @property
    def noun(self) -> str:
        """What one checked operation is called ("writes"): DATA_ERRORS.nouns."""
        return DATA_ERRORS.nouns[DATA_ERRORS.names.index(self.errors)]


PAIR_OPS = {op.name: op for op in (
    PairOp("write", "write", "", "errors", "bandwidth"),
    PairOp("read", "read", "read_", "read_errors", "read_bandwidth"),
    PairOp("atomic", "atomic fetch-and-add", "atomic_", "atomic_errors"),
)}
# The collectives (the records' `op`): how people name each, and the kinds of communicator each busbw
# bound covers (one profile key per group). The collective suite's operations; each has its data
# definition in acceptance.engines.collective_data.SPECS.
COLLECTIVES = {"allreduce": ("all-reduce", (("rail",), ("world",), ("node",))),
               "alltoall": ("all-to-all", (("rail", "world"), ("node",)))}

SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("preflight", (), measures=False, metrics=(
        Metric(("memlock",), "bytes", True, "memlock", "preflight.memlock_min", label="memlock limit",
               fails="memlock limit (ulimit -l) is {value}, the profile needs {bound}",
               setting=lambda f: f.Size("64MiB", allow_unlimited=True, help='minimum locked-memory limit (ulimit -l), or "unlimited"')),
        Metric(("ranks",), "count", None, "ranks", "topology.rails", label="ranks per node",
               fails="{value} ranks, expected {bound}"),
        Metric(("version_mismatches", "fabric_version_mismatches"), "count", False, "versions",
               "preflight.same_versions", label="version mismatches between nodes",
               fails="software versions differ between nodes ({value} mismatches)"),
        Metric(("rdma_devices",), "count", None, "scalar", "preflight.rdma_devices", label="RDMA devices",
               setting=lambda f: f.Int(None, help="RDMA devices (e.g. mlx5_*) every node must have; unset = not checked")),
        Metric(("ports_down",), "count", False, "zero", label="ports not ACTIVE"),
        Metric(("port_rate",), "Gbit/s", True, "scalar", "preflight.port_rate", label="port rate",
               setting=lambda f: f.Rate(None, help='lowest acceptable active port rate, e.g. "400Gbit/s" (sysfs ports/*/rate)')),
        Metric(("port_mtu",), "bytes", True, "scalar", "preflight.mtu", label="port MTU",
               setting=lambda f: f.Int(None, min=256, help="lowest acceptable active MTU in bytes (InfiniBand path MTU, RoCE netdev MTU)")),
        Metric(("link_layer_mismatches",), "count", False, "zero", label="ports on another link layer"),
        Metric(("hugepages",), "bytes", True, "scalar", "preflight.hugepages_min", label="huge pages",
               setting=lambda f: f.Size("0B", help="memory in huge pages every node must have reserved; 0 = not checked")),
        Metric(("gpus",), "count", None, "scalar", "preflight.gpus_per_node", label="GPUs",
               setting=lambda f: f.Int(None, help="GPUs every node must have; unset = not checked")),
        Metric(("gpu_nic_far",), "count", False, "zero", label="GPUs far from their NIC"),
        Metric(("pcie_trained_down",), "count", False, "zero", label="PCIe links below what they can train to"),
        Metric(("roce_qos_problems",), "count", False, "zero",
               label="RoCE ports whose lossless class differs between nodes or is missing"),
        Metric(("gpudirect_missing",), "count", False, "zero", label="GPU nodes without GPUDirect RDMA"),
        Metric(("saturated_counters",), "count", False, "zero", label="saturated error counters"),
    )),
    Suite("memreg", ("register_times", "registration_growth"), (
        REG_TIME, DEREG_TIME,
        Metric(("rss_growth",), "bytes", False, "scalar", "memreg.leak_max", label="memory growth (leak)",
               setting=lambda f: f.Size("16MiB", help="resident memory growth over the leak cycles that counts as a leak")),
        Metric(("memlock_enforced",), "bool", True, label="memlock limit enforced"),
    )),
    Suite("rdma_write", ("PairLink",), pairwise=True, primary=True, metrics=(
        Metric(("bandwidth",), "Gbit/s", True, "sizemap", "rdma_write.bandwidth_min", label="write bandwidth", priority=0,
               outlier=True, trend="largest", line_rate=True, heatmap=True, curve=True, export="write_bandwidth",
               headline=True, setting=lambda f: f.SizeMap(f.Rate("0Gbit/s"), help="one-direction write bandwidth bound by size (Gbit/s)")),
        Metric(("read_bandwidth",), "Gbit/s", True, "sizemap", "rdma_write.read_bandwidth_min", label="read bandwidth",
               outlier=True, trend="largest", line_rate=True, heatmap=True, curve=True, export="read_bandwidth",
               setting=lambda f: f.SizeMap(f.Rate("0Gbit/s"), help="RDMA READ bandwidth bound by size (Gbit/s): "
                                           "the origin reads the target's memory")),
        *_latencies("", "write", "rdma_write.latency", "one-way", outlier=("p50", "p99", "p999"),
                    trend=("p50", "p99"), heatmap=("p99",), export=("p99",), what="RDMA write latency",
                    panel="write latency"),
        *_latencies("read_", "read", "rdma_write.read_latency", "round trip", bounded=("p50", "p99"),
                    what="RDMA read latency", panel="read latency"),
        *_latencies("atomic_", "atomic", "rdma_write.atomic_latency", "round trip", bounded=("p50", "p99"),
                    what="8-byte atomic fetch-and-add latency", panel="atomic latency"),
        *_latencies("pingpong_", "ping-pong", None, "one-way", panel="write latency"),
        DATA_ERRORS,
    )),
    Suite("gpudirect", ("PairLink", "gpu_register_times"), pairwise=True, finding="GPUDirect: ", metrics=(
        Metric(("bandwidth",), "Gbit/s", True, "sizemap", "gpudirect.bandwidth_min", label="GPU write bandwidth",
               outlier=True, heatmap=True, curve=True, export="gpu_write_bandwidth",
               setting=lambda f: f.SizeMap(f.Rate("0Gbit/s"), help="GPU-to-GPU RDMA write bandwidth bound by size (Gbit/s)")),
        *_latencies("", "GPU write", "gpudirect.latency", "round trip", bounded=("p50", "p99"),
                    what="GPU-to-GPU RDMA write latency (post to completion)", panel="GPU write latency"),
        *_latencies("pingpong_", "GPU ping-pong", None, "one-way", panel="GPU write latency"),
        DATA_ERRORS, REG_TIME, DEREG_TIME,
    )),
    Suite("collective", tuple(COLLECTIVES), communicators=True, metrics=(
        *(_busbw(op, comms) for op, (_, groups) in COLLECTIVES.items() for comms in groups),
        Metric(("algbw",), "GB/s", True, label="algbw"),
        DATA_ERRORS,
        # GPUDirect RDMA per node and rail, from NCCL's log (acceptance.drivers.gpudirect_paths): the
        # network receives (NCCL writing into GPU memory) must use it; sends without it (GPU Direct RDMA
        # read off, NCCL's default on PCIe-only platforms) warn; a NIC without traffic is noted.
        Metric(("gdrdma",), "bool", True, "one", label="GPUDirect RDMA in use", nic_fact=True),
        Metric(("gdrdma_sends",), "bool", True, "one", advisory=True, label="GPUDirect RDMA on the sends",
               nic_fact=True),
        Metric(("gdrdma_support",), "bool", True, label="GPUDirect RDMA enabled for an idle NIC", nic_fact=True),
    )),
    Suite("incast", ("IncastGroup",), (
        Metric(("fairness",), "ratio", True, "scalar", "incast.fairness_min", label="incast fairness", column="fair",
               setting=lambda f: f.Float(None, help="slowest / fastest sender bandwidth of one incast; unset = recorded only")),
        Metric(("aggregate_bandwidth",), "Gbit/s", True, "scalar", "incast.aggregate_min",
               label="incast aggregate bandwidth", column="aggregate",
               setting=lambda f: f.Rate(None, help="bandwidth all senders together must deliver to the receiver")),
        Metric(("bandwidth",), "Gbit/s", True, label="incast sender bandwidth"),
        *_latencies("loaded_", "loaded", "incast.latency", "round trip", bounded=("p99",),
                    what="receiver's write latency, post to completion (verbs: a signaled RDMA WRITE; mpi: Put + "
                         "Flush), while the other senders load it,", column=("p99",)),
        DATA_ERRORS,
    )),
    Suite("intranode", (), (
        Metric(("h2d_bandwidth",), "GB/s", True, "scalar", "intranode.h2d_min", GBIT_TO_GBYTE, "host to GPU copy",
               setting=lambda f: f.Rate(None, unit="GB/s", help="pinned host -> GPU copy bandwidth every GPU must reach; unset = not checked")),
        Metric(("d2h_bandwidth",), "GB/s", True, "scalar", "intranode.d2h_min", GBIT_TO_GBYTE, "GPU to host copy",
               setting=lambda f: f.Rate(None, unit="GB/s", help="GPU -> pinned host copy bandwidth every GPU must reach; unset = not checked")),
        Metric(("p2p_bandwidth",), "GB/s", True, "scalar", "intranode.p2p_min", GBIT_TO_GBYTE, "GPU to GPU copy",
               setting=lambda f: f.Rate(None, unit="GB/s", help="GPU -> GPU peer copy bandwidth every ordered pair must reach; unset = not checked")),
        Metric(("p2p_bidir_bandwidth",), "GB/s", True, label="GPU to GPU copy, both ways"),
        Metric(("gpu_bandwidth_outliers",), "count", False, "zero", label="GPUs below their node's median"),
        DATA_ERRORS,
    )),
    Suite("counters", (), measures=False, ports=True, metrics=(
        Metric(("error",), "count", False, "counter", "counters.errors_max", label="error counter rise", wrong=True,
               setting=lambda f: f.Int(0, help="rise an error counter (symbol_error, link_downed, CRC, ...) may show in one window")),
        Metric(("retransmit",), "ppm", False, "counter", "counters.retransmit_ppm_max",
               label="retransmissions per million packets", wrong=True,
               setting=lambda f: f.Float(0.0, help="retransmissions (out_of_sequence, packet_seq_err, local_ack_timeout_err, duplicate_request, ...) per million packets a port moved in one window; 0 = none allowed")),
        Metric(("pre_fec",), "errors/bit", False, "counter", "counters.pre_fec_ber_max",
               label="pre-FEC bit error rate",
               setting=lambda f: f.Float(2.4e-4, help="pre-FEC bit error rate (rx_err_lane_<l>_phy per bit of its lane, rx_corrected_bits_phy per bit of the port, in one window) above which a port fails: IEEE 802.3's limit for PAM4 links with RS(544,514) FEC, past which FEC no longer corrects every frame")),
        Metric(("discard",), "count", False, "counter", "counters.discards_max", label="discard counter rise", wrong=True,
               setting=lambda f: f.Int(0, help="rise of a discard counter above which a port warns")),
        Metric(("pause",), "1/s", False, "counter", "counters.pause_rate_max", label="pause frames per second",
               setting=lambda f: f.Float(None, help="pause frames per second (per counter) above which a port warns; unset = recorded only")),
        Metric(("cnp",), "1/s", False, "counter", "counters.cnp_rate_max", label="congestion notifications per second",
               setting=lambda f: f.Float(None, help="CNP / ECN-marked packets per second above which a port warns; unset = recorded only")),
    )),
    # ib_write_bw / ib_write_lat on the harness's pairs. Write latency is gated here, where a profile
    # says (perftest.latency_*_max): a C loop, not Python's, times each sample (docs/methodology.md §4).
    # The report sets its bandwidth and latency p50 beside rdma_write's (`checks`, Metric.crosscheck), and
    # its latency map stands in for rdma_write's where both ran (a map a suite and the suite it checks
    # both have: the checking suite's, its C loop).
    Suite("perftest", (), pairwise=True, finding="perftest: ", checks="rdma_write", metrics=(
        Metric(("bandwidth",), "Gbit/s", True, label="ib_write_bw average", crosscheck=True),
        *_latencies("", "ib_write_lat", "perftest.latency", "one-way", bounded=("p50", "p99"),
                    what="ib_write_lat write latency", crosscheck=("p50",), heatmap=("p99",)),
        Metric(("latency_avg",), "us", False, label="ib_write_lat average", timing="one-way"),
    )),
)}


def suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise KeyError(f"suite {name!r} is not in the catalog (acceptance.rules.catalog.SUITES)") from None


def metrics(suite_name: str, name: str) -> list[Metric]:
    """The entries of a suite that cover record metric `name` (several for a collective's busbw)."""
    found = SUITES.get(suite_name)
    return [m for m in (found.metrics if found else ()) if name in m.names]


def metric(suite_name: str, name: str, **when) -> Metric | None:
    """The one entry for (suite, record metric) and, for collectives, op= and comm= (world, rail, node)."""
    for m in metrics(suite_name, name):
        if all(v in dict(m.when)[k] if k == "comm" else dict(m.when)[k] == v
               for k, v in when.items() if k in dict(m.when)):
            return m
    return None


def direction(suite_name: str, name: str) -> bool | None:
    found = metrics(suite_name, name)
    return found[0].higher if found else None


def label(suite_name: str, name: str) -> str:
    found = metrics(suite_name, name)
    return found[0].label if found and found[0].label else name


def pairwise() -> list[Suite]:
    """The suites whose records are between two nodes on a rail (analysis compares and localizes them)."""
    return [s for s in SUITES.values() if s.pairwise]


def data_nouns() -> dict[str, str]:
    """Each data check's record name -> what one of its checked operations is (Metric.nouns)."""
    return {n: noun for s in SUITES.values() for m in s.metrics for n, noun in zip(m.names, m.nouns)}


def priorities() -> dict[str, int]:
    """Record metric name -> its priority (Metric.priority; the most urgent where suites differ)."""
    out: dict[str, int] = {}
    for s in SUITES.values():
        for m in s.metrics:
            for n in m.names:
                out[n] = min(out.get(n, 9), m.priority)
    return out


def with_role(role: str) -> list[tuple[str, str]]:
    """(suite, record metric) of every metric with a role: a Metric field that is set ("outlier",
    "trend", "heatmap", "curve", "export", "panel", "column", "headline", "crosscheck", "nic_fact", "wrong")."""
    return [(s.name, n) for s in SUITES.values() for m in s.metrics if getattr(m, role) for n in m.names]


def suite_names(**fields) -> list[str]:
    """The suites whose fields have these values (suite_names(ports=True): the port-counter suites)."""
    return [s.name for s in SUITES.values() if all(getattr(s, k) == v for k, v in fields.items())]


def primary() -> str:
    """The reference pairwise suite (Suite.primary)."""
    (name,) = suite_names(primary=True)
    return name


def headline() -> tuple[str, str]:
    """(suite, record metric) the history's fleet trend follows (Metric.headline)."""
    (found,) = with_role("headline")
    return found


def percentiles() -> dict[str, float]:
    """Record metric name -> its percentile rank (Metric.percentile), for every latency percentile."""
    return {n: m.percentile for s in SUITES.values() for m in s.metrics if m.percentile is not None
            for n in m.names}


def panels() -> list[tuple[str, str, list[str]]]:
    """(suite, panel title, its record metrics in the catalog's order) of each report latency panel
    (Metric.panel) of the pairwise suites."""
    out: dict[tuple[str, str], list[str]] = {}
    for s in pairwise():
        for m in s.metrics:
            if m.panel:
                out.setdefault((s.name, m.panel), []).extend(m.names)
    return [(suite_name, title, names) for (suite_name, title), names in out.items()]


def communicator_panels() -> list[tuple[str, str]]:
    """(suite, record metric) of each communicator suite's panel metric (Metric.panel): drawn per op and
    scope against size (report "Collectives"), exported per op and communicator at the largest size
    (Prometheus acceptance_collective_busbw_bytes_per_second)."""
    return list(dict.fromkeys((s.name, n) for s in SUITES.values() if s.communicators for m in s.metrics
                              if m.panel for n in m.names))


def columns() -> dict[tuple[str, str], str]:
    """(suite, record metric) -> its column in its suite's report table (Metric.column)."""
    return {(s.name, n): m.column for s in SUITES.values() for m in s.metrics if m.column for n in m.names}


def crosschecks() -> list[tuple[str, str, str]]:
    """(suite, record metric, the suite it is set beside) of every cross-check metric (Metric.crosscheck)."""
    return [(s.name, n, s.checks) for s in SUITES.values() if s.checks for m in s.metrics if m.crosscheck
            for n in m.names]


def fleet_metrics(pattern: str) -> list[tuple[str, str, bool]]:
    """(suite, record metric, higher is better) of every metric a fleet.bounds key matches
    ("suite.metric", shell-style wildcards allowed)."""
    from fnmatch import fnmatchcase
    out: dict[tuple[str, str], bool] = {}
    for s in SUITES.values():
        if not s.measures:
            continue
        for m in s.metrics:
            for n in m.names:
                if m.fleet and fnmatchcase(f"{s.name}.{n}", pattern):
                    out.setdefault((s.name, n), bool(m.higher))
    return [(s, n, h) for (s, n), h in out.items()]


def settings() -> dict[str, Callable[[object], object]]:
    """Profile key -> the builder of its Field, for every key a metric owns (acceptance.rules.schema adds them)."""
    out: dict[str, Callable[[object], object]] = {}
    for s in SUITES.values():
        for m in s.metrics:
            if m.setting is not None:
                out.setdefault(m.key, m.setting)
    return out


def bound_keys() -> dict[str, list[tuple[str, Metric]]]:
    """Profile key -> the (suite, metric) entries that use it; collectives' keys spelled out."""
    out: dict[str, list[tuple[str, Metric]]] = {}
    seen: set[int] = set()
    for s in SUITES.values():
        for m in s.metrics:
            if m.key is None or id(m) in seen:
                continue
            seen.add(id(m))
            out.setdefault(m.key, []).append((s.name, m))
    return out
