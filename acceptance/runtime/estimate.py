"""How long a whole acceptance takes, suite by suite, and what "auto" and a time budget make of it.

Every model is here, in closed form (no schedule is enumerated), so `acceptance plan` at 16,000 nodes is
instant, and the pairwise drivers resolve rdma_write.pattern = "auto" from the very same numbers
(resolve_pattern) as the plan and `acceptance run`'s check before it starts.

The assumptions, named once (each a constant below):
- A timed bandwidth iteration costs its wire time at the link rate plus ITER_OVERHEAD_S (post, poll,
  flush); a latency sample costs LATENCY_SAMPLE_S (one round trip and the harness around it).
- Every pair of a round runs at once; with run.rail_mode "concurrent" every rail's rounds run at once
  too (each rank on its own NIC, no slowdown assumed from sharing the host), with "serial" one rail
  after another, so the rails multiply the time.
- Each pair of each pairwise test costs PAIR_SETUP_S to connect (communicator split, queue pairs,
  registration); each data check costs CHECK_OVERHEAD_S plus poisoning and comparing its bytes at
  VERIFY_BYTES_PER_S (acceptance.measure.verify: every iteration up to verify.every_max, else
  verify.samples and the last).
- Screening (screen:K) measures screening_sizes, timing screening_iters at each (the transfer the bound's
  precision needs), and screening_latency_iters (acceptance.runtime.screening), then CONFIRM_ROUNDS rounds
  of confirmation per pairwise test (the suspects of a healthy fleet are few, and their pairs pack into a
  few rounds of disjoint pairs). Write bandwidth walks every scheduled round at the bounded sizes; the
  other pairwise tests and the smallest size walk rdma_write.sample_rounds of them (screening.EVERY_PAIR).
- perftest: each tool run costs PERFTEST_START_S to start (server, TCP handshake) besides its own time;
  ib_write_lat takes latency.iters samples, screening or not, in perftest.rounds of the scheduled rounds
  (acceptance.drivers.perftest).
- Collectives: all-reduce moves 2(N-1)/N of the buffer per rank (ring), all-to-all (N-1)/N, at the
  per-NIC link rate (busbw = the rate of one NIC: each GPU reaches the network through its own NIC);
  inside a node at the profile's node busbw bound, else NVLINK_GBYTES_S. Latency terms: all-reduce
  2 log2(N) steps of COLLECTIVE_STEP_S (a tree or recursive doubling at small sizes), all-to-all one
  message per peer, ALLTOALL_PEER_S each.
- NCCL's setup (the hardware engines): a communicator's init on its first collective, WORLD_SETUP_PER_RANK_S
  per rank up to WORLD_SETUP_MAX_S (NVIDIA/nccl#1156: 2.5 minutes at large scale), the world's its own
  line ("world setup"), each rail's and node's in its all-reduce; and an all-to-all's first call connecting
  every rank to each of its peers (NCCL connects send/recv peers on demand), ALLTOALL_CONNECT_PEER_S a peer
  over the network (NVIDIA/nccl-tests#78: 10 minutes at 240 GPUs), NODE_CONNECT_PEER_S inside a node
  (acceptance.runtime.setup_costs: those figures, their sources, Setup). Where the acceptance does not
  fit, "auto" may time fewer iterations at the sizes without a bound (sweep.max_iters) and leave out the
  all-to-all over the largest communicators (collectives.alltoall_max_ranks: setup_costs.collective_cuts),
  as it shortens perftest and incast (resolve).
- Room for one relaunch (run.attempts > 1: a lost node's work is launched again on the survivors): the
  launch, the world's setup and the longest step (the work in flight), counted in the total
  (Estimate.reserve), so "auto" leaves it free.
- Incast: senders + 1 rounds per rail of incast.duration and INCAST_ROUND_S.
- Intranode: every GPU's copies and every GPU pair's, one at a time, at the profile's floors
  (h2d_min, d2h_min, p2p_min), else PCIE_GBYTES_S / NVLINK_GBYTES_S; all nodes at once.
- Memory registration: REG_CALL_S plus pinning at REG_BYTES_PER_S, per register and deregister.
- The mpi engine (the emulated cluster, local runs) has costs of its own, MPI_* below, measured.
- A profile's [plan] section replaces any of them with its machines' own (an emulator's fitted costs:
  the softroce profile; PLAN_KEYS, costs()).
- Fixed costs: LAUNCH_S to start the ranks, PREFLIGHT_S for the node checks, COUNTER_SNAPSHOT_S per
  port snapshot (before and after each suite file), OUTCOME_PER_RANK_S per test and rank at rank 0
  (the outcome merge).
- Records: every pairwise measurement is records (pair_records), each handled by rank 0 at its test's
  end (RECORD_RANK0_S, one rank 0 for the whole job) and by the analysis after (ANALYSIS_PER_RECORD_S).

Where each figure comes from is SOURCES; a constant not in it is an assumption, and `acceptance plan`
says so (cost_sources).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
import subprocess
from dataclasses import dataclass, field

from ..measure.sweep import sizes as sweep_sizes, sweep_from_profile
from ..rules import catalog
from ..rules.units import format_duration, format_size, parse_duration, parse_rate
from . import schedule as sched
from . import setup_costs as nccl_setup
from .screening import (Transfer, every_round_sizes, screening_iters, screening_latency_iters, screening_sizes,
                        screening_transfer)
from .setup_costs import Setup, collective_cuts, setup_costs

ITER_OVERHEAD_S = 5e-6        # per timed or warmup bandwidth iteration, beyond the wire time
LATENCY_SAMPLE_S = 5e-6       # one latency sample (round trip and harness)
PAIR_SETUP_S = 0.02           # connecting one pair for one test
CHECK_OVERHEAD_S = 20e-6      # one data check's fixed cost
VERIFY_BYTES_PER_S = 5e9      # poisoning and comparing checked bytes (host memory)
CONFIRM_ROUNDS = 3            # confirmation rounds after screening, per pairwise test
PERFTEST_START_S = 1.0        # one ib_write_bw / ib_write_lat run's start
COLLECTIVE_STEP_S = 5e-6      # one step of a collective's latency term
ALLTOALL_PEER_S = 1e-6        # one peer's message in an all-to-all
NVLINK_GBYTES_S = 100.0       # inside a node, when the profile sets no node busbw bound
PCIE_GBYTES_S = 20.0          # host <-> GPU, when the profile sets no floor
INCAST_ROUND_S = 0.2          # one incast round's setup beyond its duration
# What the budget may shorten the suites that run for a fixed time to, before "auto" gives up screening
# rounds: perftest's -D counts whole seconds; an incast round of half a second still loads its receiver
# from every sender at once for hundreds of iterations at line rate.
SHORTEST = {"perftest.duration": 1.0, "incast.duration": 0.5}
REG_CALL_S = 50e-6            # one register or deregister call
REG_BYTES_PER_S = 10e9        # pinning pages
LAUNCH_S = 30.0               # starting the ranks (launcher, MPI init, imports)
PREFLIGHT_S = 20.0            # the node checks (tools run on every node at once)
COUNTER_SNAPSHOT_S = 0.5      # one snapshot of a node's ports
OUTCOME_PER_RANK_S = 20e-6    # rank 0's share of one test's outcome merge, per rank
RECORD_RANK0_S = 10e-6        # rank 0 receiving one record and appending it to results.jsonl
ANALYSIS_PER_RECORD_S = 6.5e-6  # analysis and report, per record
# The switch ports' own counters, walked before and after the run from a host's InfiniBand ports, one
# walk per rail at once (host.switchports): ibqueryerrors queries the ports one after another.
SWITCH_PORT_QUERY_S = 1e-3    # one switch port's PortCounters query (a MAD round trip and its handling)
SWITCH_PORTS_PER_NODE = 3     # a non-blocking two-level tree: a leaf port down, one up, a spine port per node
# Records of one pair-direction (acceptance.drivers.p2p, acceptance.tools.perftest.records): a bandwidth
# sweep one value and the receiver's data check per size; a latency test its p50, p99, p99.9, max and
# the data check (a write's also the ping-pong's four); perftest ib_write_bw's value and ib_write_lat's four.
LATENCY_RECORDS, PINGPONG_RECORDS, PERFTEST_RECORDS = 5, 4, 5
DEFAULT_RATE = 100.0          # Gbit/s, when neither --rate nor the profile's bandwidth_min says
MIN_RATE_GBITS = 10.0         # a bandwidth_min below this is a floor for broken links (emulators), not a rate
TESTS = 38                    # the tests one rank collects from suites/ (outcome merges; test_plan holds it)

# The mpi engine (acceptance.engines.mpi: the emulated cluster and local runs) times every operation
# from Python through mpi4py, and checks its data with numpy, so its fixed costs are far above the
# verbs/nccl ones. Fitted with benchmarks/plan_accuracy.py to local runs (2 and 4 virtual nodes x 2
# rails) and the emulated cluster (4 and 6 nodes x 2 rails) on a shared 2-core machine at load
# average 10-25 (docs/plan.md, "Measured"): the figures of that machine, not of an idle one.
MPI_ITER_S = 2e-3             # one bandwidth iteration (window puts or gets, flush, timing, stalls)
MPI_VERIFY_BYTES_PER_S = 1e8  # filling, poisoning and comparing checked bytes (numpy, from Python)
MPI_LATENCY_SAMPLE_S = 4e-4   # one latency sample
MPI_COLLECTIVE_ITER_S = 5e-4  # one collective iteration's fixed part (the call, its timing)
MPI_COLLECTIVE_STEP_S = 1e-3  # one step of an all-reduce (2 log2(n) of them): ranks share the host's cores
MPI_ALLTOALL_PEER_S = 5e-4    # one peer's message in an all-to-all
MPI_RATE_GBITS = 5.0          # the data's rate when the profile's bound is only a floor and no --rate
MPI_PAIR_SETUP_S = 0.1        # one pair's communicator split and windows, per test
MPI_REG_CALL_S = 1.5e-3       # one window allocation or free (the mpi engine's "registration")
MPI_PREFLIGHT_S = 1.0         # the node checks with nothing to probe
MPI_LAUNCH_S = 10.0           # mpiexec or srun, MPI init, imports, the census, and the analysis after

ENV_BUDGET = "ACCEPTANCE_BUDGET"  # the limit `acceptance run` checked, in seconds, for the ranks' "auto"

_FITTED = ("measured: fitted with benchmarks/plan_accuracy.py to mpi-engine runs on a shared 2-core machine "
           "(docs/plan.md, \"Measured\")")
# Where a figure comes from. Every constant of this module (and of setup_costs) not named here is an
# assumption: no measurement or published figure stands behind it (the hardware's costs: no RDMA device
# or GPU here).
SOURCES = {
    **nccl_setup.SOURCES,
    "RECORD_RANK0_S": "measured: benchmarks/rank0_scale.py, rank 0's phase of 1,024 ranks x 48 records in "
                      "494.55 ms of CPU on the 2-core development machine, before the ranks encoded their own "
                      "records; an upper bound: the staged path measures 42 ms there now (benchmarks/README.md)",
    "ANALYSIS_PER_RECORD_S": "measured: benchmarks/report_scale.py, analysis and report of 4,190,208 records "
                             "in 27.2 s on the 2-core development machine (benchmarks/README.md)",
    **{name: _FITTED for name in ("MPI_ITER_S", "MPI_VERIFY_BYTES_PER_S", "MPI_LATENCY_SAMPLE_S",
                                  "MPI_COLLECTIVE_ITER_S", "MPI_COLLECTIVE_STEP_S", "MPI_ALLTOALL_PEER_S",
                                  "MPI_PAIR_SETUP_S", "MPI_REG_CALL_S", "MPI_PREFLIGHT_S",
                                  "MPI_LAUNCH_S")},
}

# The suites, as the catalog names them (a suite file each, with counter snapshots around it). The plan
# times each suite's tests by name (Estimate.tests), the preflight and counters suites as a whole; the
# tests it gives no time of their own read what the others measured or logged (test_plan holds both
# lists to a collection of suites/).
SUITES = tuple(catalog.SUITES)
SUITE_FILES = len(SUITES)
UNTIMED_TESTS = ("test_low_memlock_limit_is_explained", "test_gpudirect_rdma_used")


# ---- budget ------------------------------------------------------------------------------------

def parse_budget(text: str) -> float:
    """Seconds from "30m", "30min", "1h", "1800s" or a plain number of seconds; ValueError otherwise."""
    raw = str(text).strip()
    raw = re.sub(r"(?<=\d)\s*m$", "min", raw)  # "30m" as operators write it; "ms" stays milliseconds
    try:
        value = parse_duration(raw)
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (write e.g. 30m, 45min, 1h or 1800s)") from None
    if value <= 0:
        raise ValueError(f"must be more than 0, got {text!r}")
    return value


def slurm_time_left(env=None, run=subprocess.run) -> float | None:
    """Seconds left in the Slurm job this runs in (SLURM_JOB_END_TIME, else squeue %L); None outside
    one, for an unlimited job, or when Slurm cannot say."""
    env = os.environ if env is None else env
    end = env.get("SLURM_JOB_END_TIME")
    if end and end.strip().isdigit():
        import time
        return max(0.0, float(end) - time.time())
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = run(["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_slurm_left(out)


def parse_slurm_left(text: str) -> float | None:
    """squeue's %L ("1-02:03:04", "02:03:04", "03:04", "45", "UNLIMITED") in seconds; None if not a time."""
    m = re.fullmatch(r"\s*(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+)\s*", text or "")
    if not m:
        return None
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b) if x is not None] + [int(c)]
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + p
    if days is not None and len(parts) < 3:  # "D-HH" or "D-HH:MM"
        seconds *= 60 ** (3 - len(parts))
    return float(int(days or 0) * 86400 + seconds)


# ---- rates -------------------------------------------------------------------------------------

def choose_rate(profile, rate: str | None = None) -> tuple[float, str]:
    """(Gbit/s, where it came from): --rate, else the profile's bound at its largest size (from
    MIN_RATE_GBITS up: a lower one only tells a broken link), else DEFAULT_RATE."""
    if rate is not None:
        gbits = parse_rate(rate)
        if gbits <= 0:
            raise ValueError(f"must be above zero, got {rate!r}")
        return gbits, "from --rate"
    bounds = profile.get("rdma_write.bandwidth_min")  # [[bytes, Gbit/s], ...] sorted by size
    if bounds and bounds[-1][1] >= MIN_RATE_GBITS:
        return bounds[-1][1], f"profile {profile.name}'s rdma_write.bandwidth_min at its largest size"
    if bounds and bounds[-1][1] > 0:
        return DEFAULT_RATE, (f"assumed: profile {profile.name}'s rdma_write.bandwidth_min ({bounds[-1][1]:g} Gbit/s) "
                              f"only tells a broken link; give --rate")
    return DEFAULT_RATE, f"assumed: profile {profile.name} sets no rdma_write.bandwidth_min; give --rate"


def _gbytes(profile, key: str, default: float | None) -> float | None:
    """A rate setting (stored Gbit/s; a table by size: its largest entry) in GB/s; default when unset or
    below MIN_RATE_GBITS (a floor for broken hardware, not a rate)."""
    value = profile.get(key)
    if isinstance(value, list):
        value = value[-1][1] if value else None
    return value / 8 if value and value >= MIN_RATE_GBITS else default


# ---- sweeps ------------------------------------------------------------------------------------

def check_seconds(profile, iters: int, bytes_per_iter: int, verify_bytes_per_s: float = VERIFY_BYTES_PER_S,
                  check_s: float = CHECK_OVERHEAD_S) -> float:
    """The data checks of one size's loop (acceptance.measure.verify.Policy.iterations)."""
    every_max, samples = profile.get("verify.every_max"), profile.get("verify.samples")
    checked = iters if iters * max(bytes_per_iter, 1) <= every_max or iters - 1 <= samples else samples + 1
    compared = min(bytes_per_iter, profile.get("verify.slot_region"))
    return checked * (check_s + 2 * compared / verify_bytes_per_s)


def sweep_direction_seconds(profile, sizes, rate_gbits: float, iter_s: float = ITER_OVERHEAD_S,
                            verify_bytes_per_s: float = VERIFY_BYTES_PER_S, check_s: float = CHECK_OVERHEAD_S,
                            iters_of: dict[int, int] | None = None) -> float:
    """One pair's bandwidth sweep in one direction over `sizes` (sweep.rounds times; capped per size by
    sweep.max_time_per_size), data checks included. iters_of: timed iterations per size where they are not
    the sweep's (screening_iters)."""
    sweep, window = sweep_from_profile(profile), profile.get("sweep.window")
    cap = profile.get("sweep.max_time_per_size")
    total = 0.0
    for size in sizes:
        iters = (iters_of or {}).get(size) or sweep.iters(size, size * window)
        n = iters + sweep.warmup(iters)
        one = n * window * size * 8 / (rate_gbits * 1e9) + n * iter_s
        total += (min(one, cap) if cap else one) + check_seconds(profile, iters, size * window, verify_bytes_per_s, check_s)
    return total * profile.get("sweep.rounds")


def latency_direction_seconds(iters: int, warmup: int, kinds: int = 1, sample_s: float = LATENCY_SAMPLE_S) -> float:
    """`kinds` latency tests (put and ping-pong: 2) of one pair in one direction."""
    return kinds * (iters + warmup) * sample_s


# ---- the plan's numbers --------------------------------------------------------------------------

@dataclass
class Estimate:
    """Seconds per suite (and the fixed costs), what they assume, and the pattern's shape."""
    nodes: int
    rails: int
    pattern: str
    rail_mode: str
    rate_gbits: float
    rate_from: str
    rounds: int
    suites: dict[str, float] = field(default_factory=dict)
    tests: dict[str, dict[str, float]] = field(default_factory=dict)
    overheads: dict[str, float] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)
    latency_iters: int = 0
    costs: Costs | None = None  # what one operation was figured to cost
    transfer: Transfer | None = None  # screening's transfer at the bounded sizes
    records: int = 0  # of the pairwise tests' scheduled rounds
    # Screening's sample: the rounds the pairwise tests but write bandwidth walk (rounds where not
    # screening), and the sizes write bandwidth measures on every pair (screening.EVERY_PAIR).
    sample_rounds: int = 0
    every_sizes: list[int] = field(default_factory=list)
    # NCCL's setup per communicator scope ("world", "rails", "node"): {"ranks", "init", "connections"} in
    # seconds (connections None: its all-to-all left out, collectives.alltoall_max_ranks)
    setup: dict[str, dict] = field(default_factory=dict)
    longest: tuple[float, str] = (0.0, "")  # the longest stretch between two progress() calls, and what
    # Room for one relaunch (run.attempts > 1): {"launch", "world setup", "longest step"} in seconds; {} none.
    # Not a cost of a run that loses no node, so apart from the overheads, but in the total "auto" fits.
    reserve: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.suites.values()) + sum(self.overheads.values()) + sum(self.reserve.values())


def _pairwise_rounds(profile, nodes: int, pattern: str) -> tuple[int, bool]:
    """(rounds each pairwise test walks, with confirmation; screening or not)."""
    kind, _ = sched.parse_pattern(pattern)
    rounds = sched.round_count(nodes, pattern)
    screening = kind == sched.SCREEN
    return rounds + (CONFIRM_ROUNDS if screening and rounds else 0), screening


@dataclass(frozen=True)
class Costs:
    """An engine's fixed costs (the constants above, COST_CONSTANTS), or a profile's own (its [plan] section)."""
    iter_s: float
    latency_sample_s: float
    collective_iter_s: float
    collective_step_s: float
    alltoall_peer_s: float
    pair_setup_s: float
    verify_bytes_per_s: float
    reg_call_s: float
    preflight_s: float
    launch_s: float
    reg_bytes_per_s: float
    tool_start_s: float
    incast_round_s: float
    snapshot_s: float
    check_s: float
    collective_setup_s: float  # the first world collective's connections (not modelled unless a profile says)
    alltoall_connect_s: float  # one peer's connection on an all-to-all's first call, where a profile states it


# profile key under [plan] -> (Costs field, factor from the profile's unit: seconds, or Gbit/s to bytes/s)
PLAN_KEYS = {"iteration": ("iter_s", 1), "latency_sample": ("latency_sample_s", 1),
             "pair_setup": ("pair_setup_s", 1), "collective_iteration": ("collective_iter_s", 1),
             "collective_step": ("collective_step_s", 1), "alltoall_peer": ("alltoall_peer_s", 1),
             "registration_call": ("reg_call_s", 1), "registration_rate": ("reg_bytes_per_s", 1e9 / 8),
             "tool_start": ("tool_start_s", 1), "incast_round": ("incast_round_s", 1),
             "node_checks": ("preflight_s", 1), "port_snapshot": ("snapshot_s", 1), "launch": ("launch_s", 1),
             "check": ("check_s", 1), "collective_setup": ("collective_setup_s", 1),
             "alltoall_connect": ("alltoall_connect_s", 1)}


# Costs field -> (the hardware's constant, the mpi engine's own or None: the hardware's serves both).
# The hardware's collective iteration has no fixed part of its own (its steps carry it) and no profile
# but the softroce rig's states the world collective's setup: both 0 unless a [plan] sets them. NCCL's
# setup (WORLD_SETUP_*, *_CONNECT_PEER_S) is Setup's (setup_costs), which a [plan]'s alltoall_connect replaces.
COST_CONSTANTS = {
    "iter_s": ("ITER_OVERHEAD_S", "MPI_ITER_S"), "latency_sample_s": ("LATENCY_SAMPLE_S", "MPI_LATENCY_SAMPLE_S"),
    "collective_iter_s": (None, "MPI_COLLECTIVE_ITER_S"),
    "collective_step_s": ("COLLECTIVE_STEP_S", "MPI_COLLECTIVE_STEP_S"),
    "alltoall_peer_s": ("ALLTOALL_PEER_S", "MPI_ALLTOALL_PEER_S"), "pair_setup_s": ("PAIR_SETUP_S", "MPI_PAIR_SETUP_S"),
    "verify_bytes_per_s": ("VERIFY_BYTES_PER_S", "MPI_VERIFY_BYTES_PER_S"),
    "reg_call_s": ("REG_CALL_S", "MPI_REG_CALL_S"),
    "preflight_s": ("PREFLIGHT_S", "MPI_PREFLIGHT_S"), "launch_s": ("LAUNCH_S", "MPI_LAUNCH_S"),
    "reg_bytes_per_s": ("REG_BYTES_PER_S", None), "tool_start_s": ("PERFTEST_START_S", None),
    "incast_round_s": ("INCAST_ROUND_S", None), "snapshot_s": ("COUNTER_SNAPSHOT_S", None),
    "check_s": ("CHECK_OVERHEAD_S", None), "collective_setup_s": (None, None), "alltoall_connect_s": (None, None),
}
# The figures every estimate uses besides an engine's Costs.
OTHER_CONSTANTS = ("CONFIRM_ROUNDS", "OUTCOME_PER_RANK_S", "RECORD_RANK0_S", "ANALYSIS_PER_RECORD_S",
                   "SWITCH_PORT_QUERY_S", "SWITCH_PORTS_PER_NODE")
# Stand-ins for a profile's rates where it sets none (_gbytes).
FALLBACKS = {"NVLINK_GBYTES_S": ("intranode.p2p_min", "collectives.node_allreduce_busbw_min",
                                 "collectives.node_alltoall_busbw_min"),
             "PCIE_GBYTES_S": ("intranode.h2d_min", "intranode.d2h_min")}


def _figure(name: str) -> float:
    """A cost constant by name, read when called: this module's, or NCCL's setup's (setup_costs)."""
    return globals()[name] if name in globals() else getattr(nccl_setup, name)


def _constant(field_name: str, mpi: bool) -> str | None:
    hardware, own = COST_CONSTANTS[field_name]
    return own if mpi and own else hardware


def costs(engine: str | None, profile=None) -> Costs:
    """The mpi engine's costs, or (verbs, nccl, anything else) the hardware's, each replaced by the
    profile's [plan] value where it sets one; read when called, so the module's constants are the one
    place the defaults are set."""
    mpi = engine == "mpi"
    base = Costs(**{f: globals()[name] if (name := _constant(f, mpi)) else 0.0 for f in COST_CONSTANTS})
    if profile is None:
        return base
    given = {name: profile.get(f"plan.{key}") * scale for key, (name, scale) in PLAN_KEYS.items()
             if profile.get(f"plan.{key}") is not None}
    return dataclasses.replace(base, **given)


def cost_sources(engine: str | None, profile=None) -> dict[str, dict]:
    """Every cost figure an estimate with these costs uses: {name: {"value", "from"}}, "from" being a
    source (SOURCES), the profile's [plan], or "assumed" (no source)."""
    mpi = engine == "mpi"
    by_field = {name: key for key, (name, _) in PLAN_KEYS.items()}
    out = {}
    for f in COST_CONSTANTS:
        key = by_field.get(f)
        if profile is not None and key and profile.get(f"plan.{key}") is not None:
            out[f"plan.{key}"] = {"value": profile.get(f"plan.{key}"), "from": f"profile {profile.name}'s [plan]"}
        elif name := _constant(f, mpi):
            out[name] = {"value": globals()[name], "from": SOURCES.get(name, "assumed")}
    used = [name for name, keys in FALLBACKS.items()
            if profile is None or any(_gbytes(profile, key, None) is None for key in keys)]
    setup = setup_costs(profile, mpi, costs("mpi" if mpi else engine, profile)) if profile is not None else None
    # NCCL's setup on the hardware engines (Setup), where the profile's [plan] does not state its own.
    nccl = [*(nccl_setup.SETUP_CONSTANTS if setup is None or setup.per_rank_s else ()),
            *(nccl_setup.CONNECT_CONSTANTS if setup is None or setup.net_peer_from is None else ())]
    for name in (*used, *OTHER_CONSTANTS, *nccl):
        out[name] = {"value": _figure(name), "from": SOURCES.get(name, "assumed")}
    return out


def attempts(profile) -> int:
    """run.attempts: launches of one pass at most (1 where the profile's schema has no such key)."""
    try:
        return int(profile.get("run.attempts"))
    except KeyError:
        return 1


# Long: one costing per suite, in the order `acceptance plan` prints them, on the run's shared
# quantities (rounds, rate, costs).
def estimate(profile, nodes: int, rails: int, pattern: str, rail_mode: str = "concurrent",
             rate: str | None = None, engine: str | None = None) -> Estimate:
    """Every suite of the profile on `nodes` x `rails` with a resolved pattern (not "auto").

    engine: "mpi" for the mpi engine's costs (MPI_*; default: the profile's run.engine, so "auto"
    plans with the verbs/nccl costs of the hardware profiles)."""
    mpi = (engine or profile.get("run.engine")) == "mpi"
    c = costs("mpi" if mpi else engine, profile)
    gbits, rate_from = choose_rate(profile, rate)
    if rate is None and profile.get("plan.rate") is not None:
        gbits, rate_from = profile.get("plan.rate"), f"profile {profile.name}'s plan.rate"
    elif mpi and rate is None and rate_from.startswith("assumed"):
        gbits, rate_from = MPI_RATE_GBITS, "assumed: the mpi engine's rate (MPI_RATE_GBITS); give --rate"
    rail_times = rails if rail_mode == "serial" else 1  # concurrent: every rail's rounds at once
    rounds = sched.round_count(nodes, pattern)
    walked, screening = _pairwise_rounds(profile, nodes, pattern)
    all_sizes = list(sweep_from_profile(profile).sizes)
    sizes = screening_sizes(profile) if screening else all_sizes
    lat_iters = screening_latency_iters(profile) if screening else profile.get("latency.iters")
    lat_warm = profile.get("latency.warmup")
    gpus = profile.get("preflight.gpus_per_node") or 0
    est = Estimate(nodes, rails, pattern, rail_mode, gbits, rate_from, rounds, sizes=sizes, latency_iters=lat_iters,
                   costs=c, transfer=screening_transfer(profile, nodes, rails, pattern) if screening else None)

    # Screening's sample (drivers.p2p): the rounds every pairwise test but write bandwidth walks, and
    # where write bandwidth also measures the sizes it does not measure on every pair.
    sample = len(sched.spread(range(rounds), profile.get("rdma_write.sample_rounds"))) if screening else rounds
    sampled = walked - rounds + sample  # with the confirmation's rounds
    every_sizes = every_round_sizes(profile) if screening else sizes
    est.sample_rounds, est.every_sizes = sample, every_sizes

    def per_rounds(per_pair_both_directions: float, walk: int = sampled) -> float:
        return rail_times * walk * (c.pair_setup_s + per_pair_both_directions)

    def latency(kinds: int = 1) -> float:
        return latency_direction_seconds(lat_iters, lat_warm, kinds, c.latency_sample_s)

    def bandwidth(over: list[int]) -> float:
        return sweep_direction_seconds(profile, over, gbits, c.iter_s, c.verify_bytes_per_s, c.check_s,
                                       screening_iters(profile, nodes, rails, pattern) if screening else None)

    bw, rest = bandwidth(sizes), bandwidth([s for s in sizes if s not in every_sizes])
    rdma = {
        "test_write_bandwidth": per_rounds(2 * (bw - rest), walk=walked) + rail_times * sampled * 2 * rest,
        "test_read_bandwidth": per_rounds(2 * bw),
        "test_write_latency": per_rounds(2 * latency(kinds=2)),
        "test_read_latency": per_rounds(2 * latency()),
        "test_atomic_latency": per_rounds(2 * latency()),
    }
    est.tests["rdma_write"] = rdma

    # perftest: the largest sweep size (at most perftest.max_size) for perftest.duration, and ib_write_lat.
    pf_lat = 2 * c.tool_start_s + profile.get("latency.iters") * c.latency_sample_s
    pf_bw = c.tool_start_s + profile.get("perftest.duration")
    pf_rounds = len(sched.spread(range(rounds), profile.get("perftest.rounds")))  # drivers.perftest's sample
    est.tests["perftest"] = {"test_perftest_crosscheck": per_rounds(2 * (pf_bw + pf_lat), walk=pf_rounds)}

    memreg_sizes = sweep_sizes(profile.get("memreg.min_size"), profile.get("memreg.max_size"),
                              profile.get("memreg.factor"))
    reg = sum(2 * (c.reg_call_s + s / c.reg_bytes_per_s) for s in memreg_sizes) * profile.get("memreg.repeats")
    est.tests["memreg"] = {
        "test_registration_time": 2 * reg,  # memory the transport allocates, and our own
        "test_registration_does_not_leak": profile.get("memreg.leak_cycles")
                                           * 2 * (c.reg_call_s + profile.get("memreg.leak_size") / c.reg_bytes_per_s),
    }

    if gpus:
        est.tests["gpudirect"] = {
            "test_gpu_write_bandwidth": per_rounds(2 * bw),
            "test_gpu_write_latency": per_rounds(2 * latency()),
            "test_gpu_registration_time": reg,
        }
        g = gpus
        n_copies = profile.get("intranode.iters") + profile.get("intranode.warmup")
        size = profile.get("intranode.size")
        h2d = _gbytes(profile, "intranode.h2d_min", PCIE_GBYTES_S)
        d2h = _gbytes(profile, "intranode.d2h_min", PCIE_GBYTES_S)
        p2p = _gbytes(profile, "intranode.p2p_min", NVLINK_GBYTES_S)
        est.tests["intranode"] = {
            "test_host_device_bandwidth": g * n_copies * size * (1 / h2d + 1 / d2h) / 1e9,
            # every ordered pair one way, then every unordered pair both ways at once
            "test_gpu_peer_bandwidth": (g * (g - 1) + g * (g - 1) / 2) * n_copies * size / (p2p * 1e9),
        }

    k = max(1, min(profile.get("incast.senders"), nodes - 1))
    est.tests["incast"] = {"test_incast": rail_times * (k + 1) * (profile.get("incast.duration") + c.incast_round_s)}

    setup = setup_costs(profile, mpi, c)
    collective_steps = _collectives(est, profile, nodes, rails, rail_times, gbits, c, setup)

    est.tests["preflight"] = {"node checks": c.preflight_s}
    snapshots = 2 * SUITE_FILES if profile.get("counters.enabled") else 0
    est.tests["counters"] = {"port snapshots": snapshots * c.snapshot_s}

    est.suites = {name: sum(est.tests[name].values()) for name in SUITES if name in est.tests}
    ranks = nodes * max(1, rails)
    pairs = sched.pair_count(nodes, pattern)
    every = 2 * len(every_sizes)  # write bandwidth's value and data check at each size it measures on every pair
    in_sample = pairs * sample // max(rounds, 1)
    est.records = 2 * rails * (pairs * every + in_sample * (pair_records(len(sizes), bool(gpus)) - every)
                               + pairs * pf_rounds // max(rounds, 1) * PERFTEST_RECORDS)
    est.overheads = {"launch": c.launch_s, "outcome merges": TESTS * ranks * OUTCOME_PER_RANK_S,
                     "records at rank 0": est.records * RECORD_RANK0_S,
                     "analysis": est.records * ANALYSIS_PER_RECORD_S}
    if profile.get("preflight.link_layer") == "InfiniBand":
        est.overheads["switch-port walks"] = switch_walk_seconds(nodes)
    if setup.per_rank_s:  # the hardware engines' (a profile's own figure is in the world all-reduce)
        est.overheads["world setup"] = setup.init(ranks)
    # The longest step: one size of a bandwidth sweep in one direction (its progress() comes after each
    # size), a pair of a latency test, or one size of a collective sweep, its first with its setup.
    largest = max(sizes) if sizes else 0
    size_step = (sweep_direction_seconds(profile, [largest], gbits, c.iter_s, c.verify_bytes_per_s, c.check_s,
                                         est.transfer.iterations if est.transfer else None) if largest else 0.0)
    lat_step = 2 * latency_direction_seconds(lat_iters, lat_warm, kinds=2, sample_s=c.latency_sample_s)
    est.longest = max((size_step, f"one size ({format_size(largest)}) of test_write_bandwidth, one direction"),
                      (lat_step, "a pair of test_write_latency: both directions"), collective_steps)
    if attempts(profile) > 1:
        est.reserve = {"launch": c.launch_s, "world setup": est.overheads.get("world setup", c.collective_setup_s),
                       "longest step": est.longest[0]}
    return est


def switch_walk_seconds(nodes: int) -> float:
    """The switch ports' counters read before and after the run (acceptance run walks an InfiniBand
    fabric from its own host: host.switchports), each walk bounded by its timeout."""
    from ..host.switchports import WALK_TIMEOUT
    return 2 * min(WALK_TIMEOUT, nodes * SWITCH_PORTS_PER_NODE * SWITCH_PORT_QUERY_S)


def pair_records(sizes: int, gpus: bool) -> int:
    """Records of one pair-direction on one rail, over every pairwise test: the write and read sweeps and
    latencies (write, read, atomic), and with GPUs GPUDirect's sweep and latency (perftest's are counted on
    its own rounds)."""
    host = 2 * (2 * sizes) + 3 * LATENCY_RECORDS + PINGPONG_RECORDS
    return host + (2 * sizes + LATENCY_RECORDS if gpus else 0)


def _collectives(est: Estimate, profile, nodes: int, rails: int, rail_times: int, gbits: float, c: Costs,
                 setup: Setup) -> tuple[float, str]:
    """All-reduce and all-to-all over the world (nodes x rails ranks), each rail (nodes ranks) and each
    node (rails ranks), every sweep size, with their data checks and NCCL's setup: each communicator's
    init in its all-reduce (the world's is the overhead "world setup"), each all-to-all's connections in
    its first size. Fills est.tests["collective"] and est.setup; returns the longest size (seconds, what).
    An all-to-all over more than collectives.alltoall_max_ranks ranks is left out (0 s)."""
    sweep = sweep_from_profile(profile)
    nic = gbits / 8  # GB/s: busbw of a ring over NICs is one NIC's rate
    node_bw = {"allreduce": _gbytes(profile, "collectives.node_allreduce_busbw_min", NVLINK_GBYTES_S),
               "alltoall": _gbytes(profile, "collectives.node_alltoall_busbw_min", NVLINK_GBYTES_S)}
    limit = profile.get("collectives.alltoall_max_ranks") or 0

    def size_seconds(op: str, n: int, busbw: float) -> list[float]:
        """Each sweep size's time (a step: the driver's progress() comes after each size)."""
        if n < 2:
            return []
        out = []
        for size in sweep.sizes:
            iters = sweep.iters(size)
            if op == "allreduce":
                step = 2 * math.ceil(math.log2(n)) * c.collective_step_s + 2 * (n - 1) / n * size / (busbw * 1e9)
            else:
                moved = max(size, 8 * n)  # a block of at least one float64 per peer (nccl-tests' count)
                step = (n - 1) * c.alltoall_peer_s + (n - 1) / n * moved / (busbw * 1e9)
            out.append((iters + sweep.warmup(iters)) * (step + c.collective_iter_s)
                       + check_seconds(profile, iters, size, c.verify_bytes_per_s))
        return out

    tests: dict[str, float] = {}
    longest = (0.0, "")
    world_init = setup.init(nodes * rails) + c.collective_setup_s  # made by the first world all-reduce
    # (scope, ranks, ranks of one node in it, times one after another)
    scopes = (("world", nodes * rails, rails, 1), ("rails", nodes, 1, rail_times), ("node", rails, rails, 1))
    for op in ("allreduce", "alltoall"):
        for scope, n, local, times in scopes:
            name = f"test_{op}[{scope}]"
            part = est.setup.setdefault(scope, {"ranks": n, "init": 0.0, "connections": 0.0})
            if op == "alltoall" and limit and n > limit and n > 1:
                tests[name], part["connections"] = 0.0, None  # left out: the suite skips it
                continue
            steps = size_seconds(op, n, nic if scope != "node" else node_bw[op])
            if not steps:
                tests[name] = 0.0
                continue
            if op == "allreduce":
                first = world_init if scope == "world" else setup.init(n)
                part["init"] = world_init - c.collective_setup_s if scope == "world" else times * first
                what = "the communicator's setup" if scope != "world" else "the world's setup"
                counted = first if scope != "world" else c.collective_setup_s  # the world's: its own line
            else:
                first = counted = setup.connect(n, local)
                part["connections"] = times * first
                what = f"its connections to {n - 1:,} peers"
            tests[name] = times * (sum(steps) + counted)
            label = f"test_{op}[{scope}]" + (f" ({n:,} ranks)" if scope != "node" else "")
            candidates = [(steps[0] + first, f"the first size ({format_size(sweep.sizes[0])}) of {label}, with {what}"),
                          (max(steps), f"one size ({format_size(sweep.sizes[steps.index(max(steps))])}) of {label}")]
            longest = max(longest, *candidates)
    est.tests["collective"] = tests
    return longest


# ---- auto and the budget -------------------------------------------------------------------------

def resolve_pattern(profile, nodes: int, rails: int, rail_mode: str = "concurrent", budget: float | None = None,
                    rate: str | None = None, pattern: str | None = None) -> tuple[str, list[str]]:
    """(the pattern to run, what was given up). `pattern` (default: rdma_write.pattern) other than "auto"
    comes back as it is. "auto": all-pairs when the whole acceptance fits `budget` seconds (None: no
    budget, so all-pairs), else screen:K with the largest K (2 <= K <= all-pairs' rounds: screen:N-1
    measures every pair, at screening's sizes and transfer) that fits
    (acceptance.runtime.schedule.choose_pattern). Every rank computes the same answer from the same inputs."""
    pattern = pattern or profile.get("rdma_write.pattern")
    if sched.parse_pattern(pattern)[0] != sched.AUTO:
        return pattern, []
    if budget is None:
        return sched.ALL_PAIRS, []
    target = auto_target(profile, budget)

    def fits(p: str) -> bool:
        return estimate(profile, nodes, rails, p, rail_mode, rate).total <= target

    chosen, gave_up = sched.choose_pattern(nodes, fits)
    kind, k = sched.parse_pattern(chosen)
    if kind == sched.SCREEN:
        all_sizes = list(sweep_from_profile(profile).sizes)
        kept = screening_sizes(profile)
        if len(kept) < len(all_sizes):
            gave_up.append(f"the bandwidth sweep's other {len(all_sizes) - len(kept)} sizes in screening: "
                           f"only the smallest and the sizes with bounds ({len(kept)})")
        sweep, window = sweep_from_profile(profile), profile.get("sweep.window")
        for size, iters in screening_transfer(profile, nodes, rails, chosen).iterations.items():
            full = sweep.iters(size, size * window)
            if iters < full:
                gave_up.append(f"bandwidth iterations in screening at {format_size(size)}: {iters} per "
                               f"pair-direction (what seeing a suspect through the noise needs) instead of "
                               f"the sweep's {full}")
        lat = screening_latency_iters(profile)
        if lat < profile.get("latency.iters"):
            gave_up.append(f"latency samples in screening: {lat} per pair-direction (what the gated percentile "
                           f"needs) instead of latency.iters = {profile.get('latency.iters')}")
    return chosen, gave_up


def auto_target(profile, budget: float) -> float:
    """What "auto" fills: the budget less run.budget_margin of it, left for the estimate's own error."""
    return budget * (1 - profile.get("run.budget_margin"))


def shortened(profile) -> tuple[object, list[str]]:
    """(the profile with its fixed-time suites at SHORTEST, one line per key it shortened)."""
    values, cuts = copy.deepcopy(profile.values), []
    for key, floor in SHORTEST.items():
        section, name = key.split(".")
        if values[section][name] > floor:
            cuts.append(f"{key} {format_duration(values[section][name])} -> {format_duration(floor)}")
            values[section][name] = floor
    return dataclasses.replace(profile, values=values), cuts


def resolve(profile, nodes: int, rails: int, rail_mode: str = "concurrent", budget: float | None = None,
            rate: str | None = None, pattern: str | None = None) -> tuple[str, object, list[str]]:
    """(the pattern to run, the profile to run it with, what was given up): resolve_pattern, and where
    "auto" under a budget could not keep all-pairs, the same again with perftest and incast at SHORTEST
    when that buys more screening rounds or makes the acceptance fit (coverage before a longer
    cross-check); and where even that leaves screen:2 over the budget (or a step over run.hang_timeout),
    the collectives shortened (collective_cuts), the first of them in order that fits (none: the one
    nearest to fitting). Every rank computes the same answer from the same inputs."""
    chosen, gave_up = resolve_pattern(profile, nodes, rails, rail_mode, budget, rate, pattern)
    asked = pattern or profile.get("rdma_write.pattern")
    if sched.parse_pattern(asked)[0] != sched.AUTO or budget is None or chosen == sched.ALL_PAIRS:
        return chosen, profile, gave_up
    target = auto_target(profile, budget)

    def score(p: str, prof) -> tuple[bool, float]:
        kind, k = sched.parse_pattern(p)
        return (estimate(prof, nodes, rails, p, rail_mode, rate).total <= target,
                math.inf if kind == sched.ALL_PAIRS else k)

    def fits(p: str, prof) -> bool:
        est = estimate(prof, nodes, rails, p, rail_mode, rate)
        return est.total <= target and est.longest[0] < prof.get("run.hang_timeout")

    best = (chosen, profile, gave_up)
    short, cuts = shortened(profile)
    if cuts:
        again, gave_up_again = resolve_pattern(short, nodes, rails, rail_mode, budget, rate, pattern)
        if score(again, short) > score(chosen, profile):
            best = (again, short, gave_up_again + [f"{cut} (to fit {again})" for cut in cuts])
    if fits(best[0], best[1]):
        return best
    base, base_cuts = (short, cuts) if cuts else (profile, [])
    nearest, least = best, estimate(best[1], nodes, rails, best[0], rail_mode, rate).total
    over = least > target  # else only a step is over the hang timeout: nothing is cut unless that mends it
    engine = base.get("run.engine")
    setup = setup_costs(base, engine == "mpi", costs(engine, base))
    for cut_profile, what in collective_cuts(base, nodes, rails, setup):
        again, gave_up_again = resolve_pattern(cut_profile, nodes, rails, rail_mode, budget, rate, pattern)
        found = (again, cut_profile, gave_up_again + [f"{cut} (to fit {again})" for cut in (*base_cuts, *what)])
        if fits(again, cut_profile):
            return found
        total = estimate(cut_profile, nodes, rails, again, rail_mode, rate).total
        if over and total < least:
            nearest, least = found, total
    return nearest  # none fits: the nearest, so the plan names the least that would make it fit


def ranks_budget(profile, env=None) -> float | None:
    """The limit a rank resolves "auto" against: what `acceptance run` checked and handed down
    ($ACCEPTANCE_BUDGET, seconds), else run.budget; the same on every rank."""
    env = os.environ if env is None else env
    if env.get(ENV_BUDGET):
        return float(env[ENV_BUDGET])
    return profile.get("run.budget")


def pattern_for_ranks(profile, nodes: int, rails: int, rail_mode: str, env=None) -> tuple[str, object, list[str]]:
    """What the ranks run: rdma_write.pattern with "auto" resolved as `acceptance run` planned it, and the
    profile with the durations it chose (resolve; nodes: the rail's members; rails: the run's rails)."""
    return resolve(profile, nodes, rails, rail_mode, ranks_budget(profile, env))


def budget_of(profile, flag: str | None = None) -> tuple[float | None, str]:
    """(seconds or None, where from): --budget, else run.budget, else none."""
    if flag is not None:
        try:
            return parse_budget(flag), "--budget"
        except ValueError as e:
            raise ValueError(f"--budget: {e}") from None
    value = profile.get("run.budget")
    return (value, f"profile {profile.name}'s run.budget") if value else (None, "no budget")
