"""What a profile may say: every section and key (SCHEMA, TOP_LEVEL) with its type, default and help.
A metric's bound is declared with its metric in acceptance.rules.catalog and added here."""
from __future__ import annotations


from . import fields
from .fields import (
    Bool,
    Duration,
    EngineMap,
    FactorMap,
    Field,
    Float,
    Int,
    Rate,
    Size,
    Str,
    StrIntMap,
    StrList,
)


def _add_bounds() -> None:
    """Every metric's bound key, as its catalog entry declares it (type, default, help: built from the
    field types of acceptance.rules.fields)."""
    from . import catalog
    for key, build in catalog.settings().items():
        section, name = key.split(".", 1)
        field = build(fields)
        field.is_bound = True
        SCHEMA.setdefault(section, {})[name] = field


# What `acceptance node-check` can check (acceptance.checks.runner.CHECKS, in this order).
NODE_CHECKS = ("ports", "counters", "pcie", "memlock", "gpudirect", "gpus", "xid")

# Section -> key -> Field. Adding a setting is adding one line here; a metric's bound is declared with
# its metric in acceptance.rules.catalog and added below (_add_bounds).
SCHEMA: dict[str, dict[str, Field]] = {
    "run": {
        "engine": Str("auto", choices=("auto", "mpi", "verbs", "nccl"),
                      help="measurement engine; auto picks the best one available"),
        "engines": EngineMap({}, help='the engine a suite\'s bounds are written for, e.g. { rdma_write = "verbs", '
                                      'collective = "nccl" }: that suite runs on it, or fails naming the nodes '
                                      'where it cannot, and is never measured by another engine'),
        "hang_timeout": Duration("120s", positive=True, help="how long the job may go without progress before a HANG; bounds one step of a test"),
        "nodes": Int(2, min=1, help="virtual nodes when emulating a cluster with local ranks"),
        "ranks_per_node": Int(2, min=1, help="MPI ranks per (virtual) node"),
        "rail_mode": Str("concurrent", choices=("concurrent", "serial"),
                         help='"concurrent": each rank drives its own rail\'s NIC, so a round of node pairs '
                              'runs on every rail at once (the load of a training step); "serial": one rail '
                              'after another, one test per rail (for diagnosis)'),
        "budget": Duration(None, positive=True,
                           help='time the whole acceptance may take, e.g. "30min": `acceptance plan` and '
                                '`acceptance run` exit 2 before starting when the estimate exceeds it, and '
                                'rdma_write.pattern "auto" screens to fit it; unset: no budget'),
        "budget_margin": Float(0.1, below=1, help='the share of the budget "auto" leaves for the estimate\'s own error '
                               "(the plan's models were within 30% of measured suites: docs/plan.md): it "
                               "fills (1 - budget_margin) x the budget, so that a run under a Slurm time limit "
                               "ends before it; 0 fills the budget to the second"),
        "attempts": Int(2, min=1, help="launches of one pass at most: when a node is lost (a rank killed, its "
                                       "node down, a hang of its ranks alone), `acceptance run` names it and "
                                       "launches the work left again on the surviving nodes, in the same run "
                                       "folder and Slurm allocation, up to this many launches in all; 1: never "
                                       "(the run is then INCOMPLETE)"),
        "lost_max": Float(0.2, below=1, help="the share of the nodes that may be lost before `acceptance run` stops "
                                             "relaunching: more lost than this is a fabric or power event, not a "
                                             "node's, and the run ends INCOMPLETE"),
    },
    "topology": {
        "rails": Int(0, help="expected rails per node; 0 = one per rank on the node"),
        "nic_rails": StrIntMap({}, help="NIC name -> rail, e.g. mlx5_0 = 0"),
        "switches": Str(None, help="the cluster's switch tree, for switch and uplink findings: Slurm's topology.conf "
                                   "or topology.yaml, an ibnetdiscover output, or a folder of rail<N> ibnetdiscover "
                                   "outputs (relative to the profile's folder); --topology overrides it"),
        "routes": Str(None, help="the fabric's forwarding tables, for the cables each pair crosses: ibroute or "
                                 "dump_lfts.sh output, OpenSM's opensm-lfts.dump or ibdiagnet2.fdbs, a file or a "
                                 "folder of rail<N> files (relative to the profile's folder), taken with the "
                                 "ibnetdiscover output of topology.switches, which they are followed over"),
    },
    "detect": {
        "gpu_model": Str(None, help='what nvidia-smi calls this profile\'s GPUs (a part of the name, e.g. "H100"); '
                                    '`--profile auto` picks the built-in whose gpu_model and preflight.port_rate '
                                    'match the nodes'),
    },
    "preflight": {
        "same_versions": Bool(True, help="software (Python, MPI) and fabric (firmware, kernel, driver, rdma-core) versions must match across nodes"),
        "link_layer": Str(None, choices=("InfiniBand", "Ethernet"), help="link layer every port must have"),
        "gpu_nic_max_distance": Str("PXB", choices=("PIX", "PXB", "PHB", "NODE", "SYS"),
                                    help="farthest nvidia-smi topo -m distance allowed between a rail's GPU and NIC"),
        "gpudirect": Bool(True, help="GPU nodes must have nvidia_peermem loaded or dma-buf support"),
        "lossless": Bool(False, help="RoCE: the priority the traffic class (verbs.traffic_class, else NCCL_IB_TC) "
                                     "maps to must have PFC, DSCP trust and ECN (notification and reaction) on "
                                     "every port; either way every node's settings must match"),
    },
    "node_check": {
        "checks": StrList(list(NODE_CHECKS), NODE_CHECKS,
                          help="what `acceptance node-check` checks: ports (state, rate, MTU, link layer, as "
                               "[preflight]), counters (port error counters since the last check), pcie (links "
                               "trained down), memlock, gpudirect (nvidia_peermem or dma-buf), gpus (NVML: "
                               "count, ECC, row remapping, throttling, temperature), xid (the kernel log)"),
        "deadline": Duration("10s", positive=True, help="node-check answers within this, whatever hangs (a check "
                             "still running then could not run); at most 30 s, under Slurm's 60 s limit"),
        "resume_after": Int(2, min=1, help="node-check --slurm resumes a node drained with an acceptance: reason "
                            "after this many consecutive passes"),
        "max_drained_fraction": Float(0.1, help="node-check --slurm drains no more nodes for one check once this "
                                      "fraction of the cluster's nodes (at least 2) is drained for it already: "
                                      "so many at once is a shared cause (a profile, a switch, a driver rollout), "
                                      "and the node is left, saying so"),
        "port_netdev": Str(None, help='each rail r\'s port is this network interface instead of an RDMA port, '
                           '"{rail}" standing for r (e.g. "rail{rail}" on the emulated cluster), for topology.rails rails (else run.ranks_per_node)'),
        "gpu_temperature_margin": Float(5.0, help="a GPU within this many degrees C of its own slowdown "
                                        "temperature (NVML) warns; at it, it fails"),
    },
    "sweep": {
        "min_size": Size("8B", help="smallest message of bandwidth and collective sweeps"),
        "max_size": Size("64MiB", help="largest message of the sweeps"),
        "factor": Int(2, min=2, help="each size is the previous one times this"),
        "bytes_per_size": Size("1GiB", help="data one size moves in its timed loop; sets iterations at large sizes"),
        "min_iters": Int(5, min=1, help="timed iterations per size, at least"),
        "max_iters": Int(1000, min=1, help="timed iterations per size, at most"),
        "warmup_fraction": Float(0.1, help="untimed warmup iterations, as a fraction of the timed ones (at least 1)"),
        "window": Int(64, min=1, help="puts in flight per bandwidth iteration, as osu_put_bw"),
        "max_time_per_size": Duration(None, help="caps one size's timed point-to-point loop, so a crippled link costs seconds"),
        "statistic": Str("mean", choices=("mean", "median"),
                         help="a size's time per iteration: the mean (as perftest's BW average and nccl-tests), "
                              "or the median, which a stall of a shared host (an emulator) does not move"),
        "rounds": Int(1, min=1, help="point-to-point bandwidth: each direction's sweep is measured this many times, "
                                     "alternating directions, and each size records its best round; a stall "
                                     "of a shared host rarely hits one size in every round, a slow link does"),
    },
    "verify": {
        "every_max": Size("256MiB", help="a size whose timed loop moves at most this much data has every iteration "
                                         "verified (destination poisoned before, compared after, both untimed)"),
        "samples": Int(8, min=0, help="above every_max: iterations verified besides the last, drawn at random "
                                      "(seeded, the same on every rank)"),
        "slot_region": Size("64MiB", help="memory for the writes of one bandwidth iteration to land in distinct "
                                          "slots, so each write leaves its own mark; above window x size, "
                                          "writes share slots"),
    },
    "latency": {
        "size": Size("8B", help="message size of the latency tests"),
        "iters": Int(10000, min=1, help="timed latency samples; p99 needs 1e4, p99.9 needs 1e5"),
        "warmup": Int(100, help="untimed iterations before the latency samples"),
    },
    "memreg": {
        "min_size": Size("4KiB", help="smallest registered region"),
        "max_size": Size("256MiB", help="largest registered region"),
        "factor": Int(4, min=2, help="each size is the previous one times this"),
        "repeats": Int(10, min=1, help="timed register/deregister pairs per size"),
        "leak_cycles": Int(200, min=1, help="register/deregister cycles of the leak check"),
        "leak_size": Size("4MiB", help="region size of the leak check"),
    },
    "rdma_write": {
        "pattern": Str("all-pairs", help='node pairs per rail: "all-pairs", "sample:K" (K partners per node), '
                                         '"screen:K" (K rounds of disjoint pairs, then confirmation) or "auto" '
                                         '(all-pairs if it fits run.budget, else screen:K with the largest K '
                                         'that fits)'),
        "confirm": Bool(True, help="after the scheduled rounds, measure every suspect pair again alone on its "
                                   "rail, and each of its ends against a partner that measured clean: only "
                                   "what reproduces fails; the rest is reported as transient (congestion)"),
        "sample_rounds": Int(32, min=0, help="screening (screen:K): the scheduled rounds that the pairwise tests "
                                             "other than write bandwidth (read, latency, atomics, GPUDirect) and "
                                             "the sweep's smallest size walk, spread evenly over the schedule "
                                             "(each node meets this many partners there); write bandwidth at the "
                                             "bounded sizes walks every round. 0 = every test every round"),
        "screening_noise": Float(None, help="relative noise (sigma) of one timed bandwidth iteration at a bound's "
                                            "size on this fabric: how many iterations screening times there "
                                            "(docs/plan.md, \"Screening\"); unset: 0.01, an assumption"),
    },
    "gpudirect": {
    },
    "verbs": {
        "port": Int(1, min=1, help="port of each rail's RDMA device"),
        "gid_index": Int(-1, min=-1, help="RoCE GID index; -1 = the first RoCEv2 GID, IPv4-mapped preferred"),
        "traffic_class": Int(None, help="RoCE traffic class (DSCP << 2) of the queue pairs and of perftest (--tclass), "
                             "e.g. 106 for DSCP 26; unset = $NCCL_IB_TC where the job sets it (NCCL's own), else 0"),
        "hop_limit": Int(64, min=2, help="RoCE hop limit; more than 1 so routed RoCE works"),
        "service_level": Int(0, help="InfiniBand service level of the queue pairs"),
        "tx_depth": Int(128, min=1, help="writes in flight per queue pair (perftest -t)"),
        "cq_mod": Int(100, min=1, help="signal one completion every cq_mod writes (perftest -Q)"),
        "timeout": Int(14, help="local ACK timeout exponent: 4.096 us x 2^timeout (perftest default 14)"),
        "retry_count": Int(7, help="transport retries before RETRY_EXC_ERR (perftest default 7)"),
        "rnr_retry": Int(7, help="receiver-not-ready retries; 7 = infinite"),
        "numa_bind": Bool(True, help="run each rank on its NIC's NUMA node, CPUs and memory (the device's "
                          "sysfs numa_node), as perftest advises; false = where the launcher put it"),
    },
    "perftest": {
        "duration": Duration("5s", help="ib_write_bw run time per pair and direction (-D)"),
        "max_size": Size("8MiB", help="ib_write_bw message size: the sweep's largest, at most this"),
        "rounds": Int(16, min=0, help="scheduled rounds the cross-check runs in, spread evenly over the schedule "
                                      "(each node meets this many partners); 0 = every round. Every pair's "
                                      "bandwidth is the screening's own; perftest's numbers beside it need a "
                                      "sample, and every round costs seconds at 1,024 nodes"),
        "timeout": Duration("30s", positive=True, help="how much longer than its own test time (duration, or "
                            "iterations at 100 us) a perftest client may run before it is killed; keep it "
                            "below run.hang_timeout"),
        "required": Bool(False, help="the profile's write-latency bounds are ib_write_lat's (perftest.latency_*): "
                                     "where perftest cannot run, the suite fails instead of skipping"),
    },
    "incast": {
        "senders": Int(4, min=1, help="senders writing to one receiver at once (K), at most the rail's nodes - 1"),
        "size": Size("1MiB", help="message size of the incast writes"),
        "duration": Duration("2s", help="how long each incast round loads its receiver"),
    },
    "counters": {
        "enabled": Bool(True, help="snapshot every RDMA port before and after each suite (nodes without ports record nothing)"),
        "pre_fec_ber_warn": Float(1e-5, help="pre-FEC bit error rate above which a port warns (a tenth of "
                                  "what FEC corrects at most, counters.pre_fec_ber_max, rounded down: "
                                  "a healthy PAM4 link sits orders of magnitude under it)"),
    },
    "collectives": {
        "alltoall_max_ranks": Int(0, min=0, help="the all-to-all runs only over communicators of at most this many "
                                               "ranks (0: every one): its first call connects every rank to each "
                                               "of its peers, which over thousands of ranks takes longer than a "
                                               "maintenance window (docs/plan.md); rdma_write.pattern \"auto\" "
                                               "sets it where the budget needs"),
    },
    "intranode": {
        "size": Size("256MiB", help="bytes of each host <-> device and GPU -> GPU copy"),
        "iters": Int(20, min=1, help="timed copies per GPU direction and per GPU pair; the value is from the median"),
        "warmup": Int(3, help="untimed copies before the timed ones"),
        "outlier_fraction": Float(0.75, help="a GPU or pair below this x its node's median (per H2D, D2H, P2P) is an outlier"),
    },
    "plan": {
        # What one operation costs this profile's machines, for `acceptance plan`, the budget and "auto"
        # (acceptance.runtime.estimate). Unset: the engine's own figures (docs/plan.md, "The models").
        # A rig whose costs are far from them (an emulator) declares its fitted ones here.
        "rate": Rate(None, help="the link rate a bandwidth iteration's wire time is figured at (else --rate, "
                                "rdma_write.bandwidth_min at its largest size, or 100 Gbit/s)"),
        "iteration": Duration(None, help="one bandwidth iteration beyond its wire time (post, poll, flush)"),
        "check": Duration(None, help="one pairwise data check's fixed cost (the pair's sync; poisoning and comparing its bytes aside)"),
        "latency_sample": Duration(None, help="one latency sample (a round trip and the harness around it)"),
        "pair_setup": Duration(None, help="connecting one pair for one pairwise test"),
        "collective_iteration": Duration(None, help="one collective iteration's fixed part"),
        "collective_setup": Duration(None, help="the first world collective's setup (connecting every rank)"),
        "alltoall_connect": Duration(None, help="one peer's connection on an all-to-all's first call (NCCL connects "
                                                "send/recv peers on demand), else NVIDIA/nccl-tests#78's 2.5 s"),
        "collective_step": Duration(None, help="one step of an all-reduce's latency term (2 log2(n) steps)"),
        "alltoall_peer": Duration(None, help="one peer's message in an all-to-all"),
        "registration_call": Duration(None, help="one memory register or deregister call"),
        "registration_rate": Rate(None, help="pinning memory while registering it"),
        "tool_start": Duration(None, help="one perftest tool run's start (server, handshake)"),
        "incast_round": Duration(None, help="one incast round's setup beyond incast.duration"),
        "node_checks": Duration(None, help="the preflight suite's node checks"),
        "port_snapshot": Duration(None, help="one counter snapshot of a node's ports"),
        "launch": Duration(None, help="starting the ranks: launcher, MPI init, imports, the census"),
    },
    "fleet": {
        "bounds": FactorMap({}, help='fleet-relative bounds: "suite.metric" = fraction (higher is better) or '
                                    'multiple (lower is better) of the median of the comparable measurements '
                                    'of this run (docs/analysis.md)'),
        "min_population": Int(3, min=2, help="fewest comparable measurements (the value with its peers) a fleet "
                                             "bound is derived from; fewer: the record warns, never passes"),
        "pairs": Str("all", choices=("all", "rail"), help='population of a point-to-point value: "all" pairs of '
                                                          'every rail, or the pairs of its own "rail"'),
    },
    "analysis": {
        "line_rate": Rate(None, help="port line rate; when set, writes are also held to line_rate_fraction of it"),
        "line_rate_fraction": Float(0.9, help="fraction of line_rate a write must reach from line_rate_from_size up"),
        "line_rate_from_size": Size("8MiB", help="message size from which the line-rate bound applies"),
        "outlier_z": Float(3.5, help="one-sided modified z-score (MAD based) beyond which a value is an outlier; "
                                     "with the switch tree, also the rank-test z a switch's group of pairs must reach"),
        "outlier_min_deviation": Float(0.10, help="an outlier must also be this far from the median (fraction)"),
        "nic_fraction": Float(0.5, help="a node's NIC on a rail is bad when its links to this fraction of partners are"),
        "nic_fail_ratio": Float(0.5, help="a NIC fails when its typical link (the favourable median over its "
                                          "partners, 2 at least) is at this fraction of the fleet's rate or worse "
                                          "(a latency: its inverse multiple), whatever the noise"),
        "false_findings": Float(0.01, help="expected false findings of a healthy run each statistical rule allows: "
                                           "a rule making N comparisons holds each to this / N (Bonferroni)"),
        "false_failures": Float(0.001, help="the same for a failing finding (with twice outlier_min_deviation)"),
        "noise_dof": Float(3.0, help="the lightest tails (Student-t degrees of freedom) the outlier rules assume "
                                     "for healthy noise; a run whose values show heavier tails is judged with its own"),
        "node_fraction": Float(0.5, help="a node is bad when its NICs on this fraction of rails are"),
        "switch_fraction": Float(0.8, help="with the switch tree known: a leaf, its uplink or a spine is bad when "
                                           "this fraction of the pairs through it are (inside and crossing a leaf "
                                           "both, for the leaf)"),
        "rail_fraction": Float(0.5, help="a rail plane is bad when it is slow against the other rails, or this fraction of its nodes are"),
        "drift_tolerance": Float(0.10, help="burn-in: last-quarter median worse than first-quarter median by this fraction"),
        "cv_max": Float(0.10, help="burn-in: coefficient of variation across iterations above this is unstable"),
        "regression_tolerance": Float(0.05, help="baseline: a change for the worse beyond this fraction is a regression"),
    },
    "history": {
        "drift_tolerance": Float(0.05, help="a link worse than its pinned reference or its rolling median by this "
                                            "fraction (beyond its rail's own movement) drifts (a warning); twice "
                                            "it fails once it has held drift_nights in a row"),
        "drift_nights": Int(2, min=1, help="nights in a row a drift must hold before it fails (each earlier "
                                           "one warns): at thousands of links one night's stall is routine; "
                                           "1 fails on the first night"),
        "window": Int(7, min=1, help="K: the rolling median is over the last K accepted nights"),
        "noise_z": Float(3.0, help="the drift tolerance is widened, in quadrature, by this many robust standard "
                                   "deviations (1.4826 MAD) of the comparison's noise: the rail's healthy links "
                                   "between the two nights, and (3+ nights) the link's own night-to-night steps"),
        "intermittent_nights": Int(2, min=2, help="N: findings on N of the last M nights, with a clean night "
                                                  "between, make a component intermittent"),
        "intermittent_window": Int(7, min=2, help="M: the nights the intermittent count looks back over, tonight included"),
        "trend_tolerance": Float(0.05, help="a rail plane's or the fleet's median moved by this fraction against "
                                            "the pinned reference or the rolling median: a fleet trend"),
    },
}
_add_bounds()

# Keys outside any section. `name` and `extends` are not inherited through `extends`.
TOP_LEVEL: dict[str, Field] = {
    "description": Str(""),
    "extends": Str("", help="a built-in profile name or a .toml path relative to this file"),
    "name": Str("", help="profile name; default: the file name without .toml"),
}
