"""Profiles: named TOML files of settings and thresholds for one kind of cluster.

A profile is checked against SCHEMA: an unknown key is an error rather than
ignored, because a typo would otherwise silently fall back to a default on a
real acceptance run. Units are parsed once here, so the rest of the harness
sees bytes, seconds and Gbit/s only. This module raises ProfileError; the CLI
and the pytest plugin turn it into exit status 2.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import re
from decimal import Decimal
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DEFAULT_PROFILE = "local"


class ProfileError(Exception):
    """A profile that cannot be used; str() is "file: key: reason"."""

    def __init__(self, file, key: str, reason: str):
        # All three in args so the exception pickles (e.g. sent between MPI ranks).
        super().__init__(str(file), key, reason)
        self.file, self.key, self.reason = str(file), key, reason

    def __str__(self) -> str:
        if self.key:
            return f"{self.file}: {self.key}: {self.reason}"
        return f"{self.file}: {self.reason}"


# --- units -------------------------------------------------------------------
# Arithmetic is done in Decimal so "200Mbit/s" is exactly 0.2 and formatted
# values parse back to the very same float.

_SIZE_UNITS = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_DURATION_UNITS = {"ns": Decimal("1e-9"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"),
                   "ms": Decimal("1e-3"), "s": 1, "min": 60, "h": 3600}


def _rate_units() -> dict:
    """Unit -> Gbit/s: bit/s, b/s and bps forms, decimal and binary bytes/s."""
    units = {}
    for prefix, scale in (("", 1), ("k", 10**3), ("K", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12)):
        for bits in ("bit/s", "b/s", "bps"):
            units[prefix + bits] = Decimal(scale) / 10**9
        units[prefix + "B/s"] = Decimal(scale * 8) / 10**9
    for prefix, power in (("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)):
        units[prefix + "B/s"] = Decimal(2**power * 8) / 10**9
    return units


_RATE_UNITS = _rate_units()
_RATE_ACCEPTED = "bit/s, b/s, bps or B/s with a k/K, M, G or T prefix, or KiB/s, MiB/s, GiB/s, TiB/s"
_NUMBER_UNIT = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(.*?)\s*")


def _did_you_mean(word: str, options) -> str:
    options = list(options)
    same_case = [o for o in options if o.lower() == word.lower()]
    close = same_case or difflib.get_close_matches(word, options, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _scale(text, kind: str, example: str, units: dict, accepted: str, bare=None) -> Decimal:
    """Number times its unit's factor; `bare` is the factor for a number without a unit."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"expected a {kind} like {example!r}, got {text!r}")
    if isinstance(text, str):
        match = _NUMBER_UNIT.fullmatch(text)
        if not match:
            raise ValueError(f"not a {kind}: {text!r} (expected a number and a unit, like {example!r})")
        number, unit = Decimal(match[1]), match[2]
    else:
        number, unit = Decimal(repr(text)), ""
    if not number.is_finite():
        raise ValueError(f"not a {kind}: {text!r}")
    if not unit:
        if bare is None:
            raise ValueError(f"{_show(text)} has no unit: write a {kind} like {example!r} (units: {accepted})")
        return number * bare
    if unit not in units:
        raise ValueError(f"unknown {kind} unit {unit!r} in {text!r} (accepted: {accepted})"
                         + _did_you_mean(unit, units))
    return number * units[unit]


def parse_size(text: str | int, bare: bool = True) -> int:
    """Bytes from "8MiB", "1GB", "512B", or (unless bare is False) a plain number of bytes."""
    value = _scale(text, "size", "8MiB", _SIZE_UNITS, ", ".join(_SIZE_UNITS), bare=1 if bare else None)
    if value != value.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


def parse_rate(text: str) -> float:
    """Gbit/s (decimal) from "400Gbit/s", "48GB/s", "100 Gbps"; a unit is required."""
    return float(_scale(text, "rate", "400Gbit/s", _RATE_UNITS, _RATE_ACCEPTED))


def parse_duration(text: str | int | float, bare: bool = True) -> float:
    """Seconds from "5us", "1.5ms", "300s", "5min", "2h", or (unless bare is False) a plain number of seconds."""
    return float(_scale(text, "duration", "120s", _DURATION_UNITS, "ns, us, ms, s, min, h", bare=1 if bare else None))


def positive_seconds(text: str | int | float) -> float:
    """Seconds > 0 from a duration ("10min") or a plain number of seconds, as the command lines take them."""
    value = parse_duration(text)
    if value <= 0:
        raise ValueError(f"expected a positive duration, got {_show(text)}")
    return value


def _plain(number: Decimal) -> str:
    return format(number.normalize(), "f")


def format_size(n: int) -> str:
    """Largest unit that divides exactly, so the text parses back to n."""
    for unit in ("TiB", "GiB", "MiB", "KiB", "TB", "GB", "MB", "kB"):
        if n and n % _SIZE_UNITS[unit] == 0:
            return f"{n // _SIZE_UNITS[unit]}{unit}"
    return f"{n}B"


def format_duration(seconds: float) -> str:
    # repr() is the shortest text that reads back as the same float.
    d = Decimal(repr(float(seconds)))
    if not d.is_finite():
        raise ValueError(f"not a duration: {seconds!r}")
    if not d:
        return "0s"
    for unit in ("h", "min"):
        if d % _DURATION_UNITS[unit] == 0:
            return f"{_plain(d / _DURATION_UNITS[unit])}{unit}"
    for unit in ("s", "ms", "us"):
        if abs(d) >= _DURATION_UNITS[unit]:
            return f"{_plain(d / _DURATION_UNITS[unit])}{unit}"
    return f"{_plain(d / _DURATION_UNITS['ns'])}ns"


def format_rate(gbits: float) -> str:
    return f"{_plain(Decimal(repr(float(gbits))))}Gbit/s"


# --- schema ------------------------------------------------------------------

def _show(raw) -> str:
    """A raw value as it looks in TOML, for error messages."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, dict):
        return "a table"
    if isinstance(raw, list):
        return "an array"
    if isinstance(raw, str):
        return json.dumps(raw, ensure_ascii=False)
    return str(raw)


def _at_least(value, minimum, raw):
    if minimum is not None and value < minimum:
        raise ValueError(f"must be >= {minimum}, got {_show(raw)}")
    return value


class Field:
    """One key: its default (as written in TOML), how to check and convert it, how to print it."""

    expected = "a value"
    types: tuple = ()
    is_bound = False  # a metric's bound (see bound() and acceptance.rules.catalog)

    def __init__(self, default, help: str = ""):
        self.default, self.help = default, help

    def parse(self, raw):
        # TOML true is a Python int; a bool is only accepted where asked for.
        if not isinstance(raw, self.types) or (isinstance(raw, bool) and bool not in self.types):
            raise ValueError(f"expected {self.expected}, got {_show(raw)}")
        return self.convert(raw)

    def convert(self, raw):
        return raw

    def to_toml(self, value) -> str:
        return json.dumps(value, ensure_ascii=False)  # JSON strings are valid TOML basic strings


class Str(Field):
    expected, types = "a string", (str,)

    def __init__(self, default, choices=None, help=""):
        super().__init__(default, help)
        self.choices = choices

    def convert(self, raw):
        if self.choices and raw not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}, got {_show(raw)}"
                             + _did_you_mean(raw, self.choices))
        return raw


class StrList(Field):
    """A list of distinct strings, each one of `choices`."""
    expected, types = "a list of strings", (list,)

    def __init__(self, default, choices, help=""):
        super().__init__(default, help)
        self.choices = choices

    def convert(self, raw):
        for item in raw:
            if not isinstance(item, str) or item not in self.choices:
                raise ValueError(f"each must be one of {', '.join(self.choices)}, got {_show(item)}"
                                 + (_did_you_mean(item, self.choices) if isinstance(item, str) else ""))
        if len(set(raw)) != len(raw):
            raise ValueError(f"names a check twice: {_show(raw)}")
        return list(raw)


class Int(Field):
    expected, types = "an integer", (int,)

    def __init__(self, default, min=0, help=""):
        super().__init__(default, help)
        self.min = min

    def convert(self, raw):
        return _at_least(raw, self.min, raw)

    def to_toml(self, value):
        return str(value)


class Float(Field):
    expected, types = "a number", (int, float)

    def __init__(self, default, min=0, help="", below=None):
        super().__init__(default, help)
        self.min, self.below = min, below

    def convert(self, raw):
        value = _at_least(float(raw), self.min, raw)
        if self.below is not None and value >= self.below:
            raise ValueError(f"must be < {self.below}, got {_show(raw)}")
        return value

    def to_toml(self, value):
        return repr(float(value))


class Bool(Field):
    expected, types = "true or false", (bool,)

    def to_toml(self, value):
        return "true" if value else "false"


class Size(Field):
    """Bytes (int); with allow_unlimited also the string "unlimited"."""

    types = (str, int)

    def __init__(self, default, allow_unlimited=False, help=""):
        super().__init__(default, help)
        self.allow_unlimited = allow_unlimited
        self.expected = 'a size with its unit, like "8MiB"' + (' or "unlimited"' if allow_unlimited else "")

    def convert(self, raw):
        if self.allow_unlimited and raw == "unlimited":
            return raw
        return _at_least(parse_size(raw, bare=False), 0, raw)

    def to_toml(self, value):
        return json.dumps(value if value == "unlimited" else format_size(value))


class Duration(Field):
    """Seconds (float)."""

    expected, types = 'a duration with its unit, like "120s" or "5us"', (str, int, float)

    def __init__(self, default, min=0, positive=False, help=""):
        super().__init__(default, help)
        self.min, self.positive = min, positive

    def convert(self, raw):
        value = _at_least(parse_duration(raw, bare=False), self.min, raw)
        if self.positive and value <= 0:
            raise ValueError(f"must be more than 0, got {_show(raw)}")
        return value

    def to_toml(self, value):
        return json.dumps(format_duration(value), ensure_ascii=False)


class Rate(Field):
    """Gbit/s (float); a unit is required since "400" could be bits or bytes.

    `unit` only sets how it is shown: "GB/s" for collectives, as nccl-tests prints them.
    """

    expected, types = 'a rate like "400Gbit/s" or "48GB/s"', (str,)

    def __init__(self, default, unit="Gbit/s", help=""):
        super().__init__(default, help)
        self.unit = unit

    def convert(self, raw):
        return _at_least(parse_rate(raw), 0, raw)

    def to_toml(self, value):
        if self.unit == "GB/s":
            return json.dumps(f"{_plain(Decimal(repr(float(value))) / 8)}GB/s")
        return json.dumps(format_rate(value))


class EngineMap(Field):
    """A table of suite = engine name, e.g. { rdma_write = "verbs", collective = "nccl" }."""

    expected, types = "a table of suite = engine", (dict,)
    ENGINES = ("mpi", "verbs", "nccl")

    def convert(self, raw):
        from .catalog import SUITES
        for suite, name in raw.items():
            if suite not in SUITES:
                raise ValueError(f"{suite}: not a suite (suites: {', '.join(SUITES)})")
            if name not in self.ENGINES:
                raise ValueError(f"{suite}: expected one of {', '.join(self.ENGINES)}, got {_show(name)}")
        return dict(raw)

    def to_toml(self, value):
        items = ", ".join(f"{_toml_key(k)} = {json.dumps(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"


class StrIntMap(Field):
    """A table of name = integer >= 0, e.g. NIC name -> rail."""

    expected, types = "a table of name = integer", (dict,)

    def convert(self, raw):
        for name, number in raw.items():
            if isinstance(number, bool) or not isinstance(number, int):
                raise ValueError(f"{name}: expected an integer, got {_show(number)}")
            if number < 0:
                raise ValueError(f"{name}: must be >= 0, got {number}")
        return dict(raw)

    def to_toml(self, value):
        items = ", ".join(f"{_toml_key(k)} = {v}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"


def _by_size(raw: dict, value, where: str = "") -> list:
    """{size: v} -> [[bytes, value(size, v)], ...] sorted by size; a bad size is named (after `where`)."""
    pairs = []
    for size, v in raw.items():
        try:
            nbytes = parse_size(size, bare=False)
        except ValueError as e:
            raise ValueError(f"{where}{size!r}: {e}") from None
        pairs.append([nbytes, value(size, v)])
    return sorted(pairs)


class SizeMap(Field):
    """Bounds by message size: { "8B" = ..., "1MiB" = ... }; each applies from its size up to the next.

    Stored as [[bytes, value], ...] sorted by size (JSON-friendly); acceptance.rules.judge.size_bound reads it.
    """

    types = (dict,)

    def __init__(self, inner: Field, default=None, help=""):
        super().__init__({} if default is None else default, help)
        self.inner = inner
        self.expected = f'a table of size = bound, e.g. {{ "8B" = ..., "1MiB" = ... }} with {inner.expected} bounds'

    def convert(self, raw):
        def bound(size, value):
            try:
                return self.inner.parse(value)
            except ValueError as e:
                raise ValueError(f"{size}: {e}") from None
        return _by_size(raw, bound)

    def to_toml(self, value):
        items = ", ".join(f"{json.dumps(format_size(n))} = {self.inner.to_toml(v)}" for n, v in value)
        return f"{{ {items} }}" if items else "{}"


class FactorMap(Field):
    """Fleet-relative bounds: { "suite.metric" = factor }, a key may be a pattern ("rdma_write.latency_p5*").

    A higher-is-better metric's factor is the fraction (0 < f < 1) of its population's centre below
    which a value fails; a lower-is-better metric's is the multiple (f > 1) above which it fails. A
    factor may also be a table by message size ({ "4KiB" = 0.5 }: from 4 KiB up; smaller sizes have
    no fleet bound), as the other bounds by size. Every key must name at least one catalog metric that
    can be judged against the fleet, all of one direction. Stored as [[pattern, factor or
    [[bytes, factor], ...]], ...] in the order written.
    """

    expected, types = 'a table of "suite.metric" = factor, e.g. { "rdma_write.bandwidth" = 0.5 }', (dict,)

    @staticmethod
    def _factor(pattern: str, factor, higher: bool):
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise ValueError(f"{pattern}: expected a number or a table of size = number, got {_show(factor)}")
        if higher and not 0 < factor < 1:
            raise ValueError(f"{pattern}: higher is better, so its factor is the fraction of the fleet's "
                             f"centre below which a value fails: more than 0 and less than 1, got {_show(factor)}")
        if not higher and not factor > 1:
            raise ValueError(f"{pattern}: lower is better, so its factor is the multiple of the fleet's "
                             f"centre above which a value fails: more than 1, got {_show(factor)}")
        return float(factor)

    def convert(self, raw):
        from . import catalog
        known = [f"{s}.{m}" for s, m, _ in catalog.fleet_metrics("*")]
        out = []
        for pattern, factor in raw.items():
            found = catalog.fleet_metrics(pattern)
            if not found:
                raise ValueError(f"{pattern}: names no metric that can be judged against the fleet "
                                 f"(they are: {', '.join(known)})" + _did_you_mean(pattern, known))
            directions = {higher for _, _, higher in found}
            if len(directions) > 1:
                raise ValueError(f"{pattern}: matches metrics where higher is better and metrics where lower "
                                 f"is better ({', '.join(f'{s}.{m}' for s, m, _ in found)}); name them apart")
            higher = directions.pop()
            if isinstance(factor, dict):
                out.append([pattern, _by_size(factor, lambda size, f: self._factor(f"{pattern}: {size}", f, higher),
                                              where=f"{pattern}: ")])
            else:
                out.append([pattern, self._factor(pattern, factor, higher)])
        return out

    def to_toml(self, value):
        def one(f):
            if isinstance(f, list):
                return "{ " + ", ".join(f"{json.dumps(format_size(n))} = {v!r}" for n, v in f) + " }"
            return repr(f)
        items = ", ".join(f"{json.dumps(k)} = {one(v)}" for k, v in value)
        return f"{{ {items} }}" if items else "{}"


def _add_bounds() -> None:
    """Every metric's bound key, as its catalog entry declares it (type, default, help)."""
    import sys

    from . import catalog
    module = sys.modules[__name__]
    for key, build in catalog.settings().items():
        section, name = key.split(".", 1)
        field = build(module)
        field.is_bound = True
        SCHEMA.setdefault(section, {})[name] = field


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


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


# --- loading -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    source: str
    description: str
    values: dict  # section -> key -> parsed value, every SCHEMA key present

    def get(self, dotted: str):
        """profile.get("run.hang_timeout") -> 120.0; KeyError for an unknown key."""
        node = self.values
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(dotted)
            node = node[part]
        return node

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "description": self.description,
                "values": copy.deepcopy(self.values)}


def builtin_dir() -> Path:
    return Path(__file__).resolve().parent / "profiles"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ProfileError(path, "", "no such file") from None
    except OSError as e:
        raise ProfileError(path, "", e.strerror or str(e)) from None
    except UnicodeDecodeError:
        raise ProfileError(path, "", "invalid TOML: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(path, "", f"invalid TOML: {e}") from None


def _parse(field: Field, raw, file, key: str):
    try:
        return field.parse(raw)
    except ValueError as e:
        raise ProfileError(file, key, str(e)) from None


def _unknown_top_level(key: str, raw) -> str:
    if isinstance(raw, dict):
        return f"unknown section (known sections: {', '.join(SCHEMA)})" + _did_you_mean(key, SCHEMA)
    reason = f"unknown key (top-level keys: {', '.join(TOP_LEVEL)}; sections: {', '.join(SCHEMA)})"
    homes = [section for section, fields in SCHEMA.items() if key in fields]
    if homes:  # a setting written above its [section] header
        return reason + f"; did you mean to put it under [{homes[0]}]?"
    return reason + _did_you_mean(key, [*TOP_LEVEL, *SCHEMA])


def _resolve(raw: dict, file) -> tuple[dict, dict]:
    """Check a raw profile; return (top-level values, section values with defaults filled)."""
    top = {}
    for key, value in raw.items():
        if key in TOP_LEVEL:
            top[key] = _parse(TOP_LEVEL[key], value, file, key)
        elif key not in SCHEMA:
            raise ProfileError(file, key, _unknown_top_level(key, value))
        elif not isinstance(value, dict):
            raise ProfileError(file, key, f"expected a table [{key}], got {_show(value)}")
    values = {}
    for section, fields in SCHEMA.items():
        table = raw.get(section, {})
        for key in table:
            if key not in fields:
                raise ProfileError(file, f"{section}.{key}",
                                   f"unknown key (known keys in [{section}]: {', '.join(fields)})"
                                   + _did_you_mean(key, fields))
        values[section] = {key: None if key not in table and field.default is None
                           else _parse(field, table.get(key, field.default), file, f"{section}.{key}")
                           for key, field in fields.items()}
    return top, values


def _merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _is_path(ref: str) -> bool:
    return ref.endswith(".toml") or "/" in ref or os.sep in ref


def _builtin(name: str, file, key: str) -> Path:
    if name not in builtin_names():
        raise ProfileError(file, key, f"no such built-in profile {name!r} (built-in profiles: "
                           f"{', '.join(builtin_names())}; or give the path of a .toml file)")
    return builtin_dir() / f"{name}.toml"


def _load_raw(path: Path, chain: tuple[Path, ...]) -> dict:
    """The file's raw tables merged over those of the profiles it extends."""
    if path in chain:
        cycle = " -> ".join(str(p) for p in (*chain[chain.index(path):], path))
        raise ProfileError(chain[-1], "extends", f"cycle: {cycle}")
    raw = _read(path)
    _resolve(raw, path)  # check each file on its own, so an error names the file it is in
    ref = raw.pop("extends", None)
    if ref is None:
        return raw
    if _is_path(ref):
        parent_path = (path.parent / os.path.expanduser(ref)).resolve()
        if not parent_path.is_file():
            raise ProfileError(path, "extends", f"no such file: {parent_path}")
    else:
        parent_path = _builtin(ref, path, "extends").resolve()
    parent = _load_raw(parent_path, (*chain, path))
    parent.pop("name", None)
    return _merge(parent, raw)


def load_profile(name_or_path: str | os.PathLike | None = None) -> Profile:
    """A built-in name, or a path to a TOML file (an existing file or anything ending in .toml)."""
    ref = DEFAULT_PROFILE if name_or_path is None else name_or_path
    if isinstance(ref, os.PathLike) or os.path.isfile(ref) or _is_path(ref):
        path = Path(ref).expanduser().resolve()
    else:
        path = _builtin(ref, ref, "").resolve()
    top, values = _resolve(_load_raw(path, ()), path)
    return Profile(name=top.get("name") or path.stem, source=str(path),
                   description=top.get("description", ""), values=values)


def format_profile_list() -> str:
    """One line per built-in profile: name and the first line of its description."""
    rows = [(name, load_profile(name).description) for name in builtin_names()]
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join(f"{name:<{width}}  {(desc.splitlines() or [''])[0]}".rstrip() for name, desc in rows)


def format_profile(p: Profile) -> str:
    """The resolved profile as TOML that loads back to the same values."""
    lines = [f"# Profile {p.name!r}, resolved: defaults filled in, `extends` applied.",
             f"# Source: {p.source}"]
    if p.name != Path(p.source).stem:
        lines.append(f"name = {json.dumps(p.name, ensure_ascii=False)}")
    lines.append(f"description = {json.dumps(p.description, ensure_ascii=False)}")
    for section, fields in SCHEMA.items():
        rows = [(f"{key} = {field.to_toml(p.values[section][key])}" if p.values[section][key] is not None
                 else f"# {key} = (not set)", field.help)
                for key, field in fields.items()]
        width = max(len(text) for text, _ in rows)
        lines += ["", f"[{section}]"]
        lines += [f"{text:<{width}}  # {help}" if help else text for text, help in rows]
    return "\n".join(lines)
