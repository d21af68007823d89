"""Judging records: each record's threshold and verdict against the profile."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..profile import Profile
from .base import _FAIL, _INFO, _PASS, _WARN, VERDICTS, _codes_of, _floats_of
from .load import _derive



@dataclass(frozen=True)
class Rule:
    """How one (suite, metric) is judged: where its bound is and which way is better."""
    suite: str
    metric: str
    bound: str               # sizemap, scalar, zero, busbw, memlock, ranks, versions, recorded, none
    key: str | None          # profile key (dotted)
    higher: bool | None      # True: higher is better; False: lower is better; None: must equal
    scale: float = 1.0       # profile unit -> record unit


_US = 1e6  # profile durations are seconds, records are microseconds
RULES: tuple[Rule, ...] = (
    Rule("rdma_write", "bandwidth", "sizemap", "rdma_write.bandwidth_min", True),
    Rule("rdma_write", "latency_p50", "scalar", "rdma_write.latency_p50_max", False, _US),
    Rule("rdma_write", "latency_p99", "scalar", "rdma_write.latency_p99_max", False, _US),
    Rule("rdma_write", "latency_p999", "scalar", "rdma_write.latency_p999_max", False, _US),
    Rule("rdma_write", "latency_max", "none", None, False),
    *(Rule("rdma_write", f"{op}_latency_{p}", "scalar", f"rdma_write.{op}_latency_{p}_max", False, _US)
      for op in ("read", "atomic") for p in ("p50", "p99")),
    *(Rule("rdma_write", f"{op}_latency_{p}", "none", None, False)
      for op in ("read", "atomic") for p in ("p999", "max")),
    *(Rule("rdma_write", f"pingpong_latency_{p}", "none", None, False) for p in ("p50", "p99", "p999", "max")),
    Rule("rdma_write", "errors", "zero", None, False),
    # profile rates are Gbit/s; busbw records are GB/s
    Rule("gpudirect", "bandwidth", "sizemap", "gpudirect.bandwidth_min", True),
    Rule("gpudirect", "latency_p50", "scalar", "gpudirect.latency_p50_max", False, _US),
    Rule("gpudirect", "latency_p99", "scalar", "gpudirect.latency_p99_max", False, _US),
    *(Rule("gpudirect", f"latency_{p}", "none", None, False) for p in ("p999", "max")),
    Rule("gpudirect", "errors", "zero", None, False),
    Rule("gpudirect", "reg_time", "sizemap", "memreg.reg_time_max", False, _US),
    Rule("gpudirect", "dereg_time", "sizemap", "memreg.dereg_time_max", False, _US),
    Rule("collective", "busbw", "busbw", "collectives.{node}{op}_busbw_min", True, 1 / 8),
    Rule("collective", "algbw", "none", None, True),
    Rule("collective", "errors", "zero", None, False),
    # GPUDirect RDMA per node and rail, from NCCL's log: the suite decides where it is required.
    Rule("collective", "gdrdma", "recorded", None, True),
    Rule("memreg", "reg_time", "sizemap", "memreg.reg_time_max", False, _US),
    Rule("memreg", "reg_time_user", "sizemap", "memreg.reg_time_max", False, _US),
    Rule("memreg", "dereg_time", "sizemap", "memreg.dereg_time_max", False, _US),
    Rule("memreg", "dereg_time_user", "sizemap", "memreg.dereg_time_max", False, _US),
    Rule("memreg", "rss_growth", "scalar", "memreg.leak_max", False),
    Rule("memreg", "memlock_enforced", "none", None, True),
    Rule("preflight", "memlock", "memlock", "preflight.memlock_min", True),
    Rule("preflight", "ranks", "ranks", "topology.rails", None),
    Rule("preflight", "version_mismatches", "versions", "preflight.same_versions", False),
    Rule("preflight", "fabric_version_mismatches", "versions", "preflight.same_versions", False),
    Rule("preflight", "rdma_devices", "scalar", "preflight.rdma_devices", None),
    Rule("preflight", "ports_down", "zero", None, False),
    Rule("preflight", "port_rate", "scalar", "preflight.port_rate", True),
    Rule("preflight", "port_mtu", "scalar", "preflight.mtu", True),
    Rule("preflight", "link_layer_mismatches", "zero", None, False),
    Rule("preflight", "hugepages", "scalar", "preflight.hugepages_min", True),
    Rule("preflight", "gpus", "scalar", "preflight.gpus_per_node", None),
    Rule("preflight", "gpu_nic_far", "zero", None, False),
    Rule("preflight", "gpudirect_missing", "zero", None, False),
    Rule("preflight", "saturated_counters", "zero", None, False),
    Rule("incast", "fairness", "scalar", "incast.fairness_min", True),
    Rule("incast", "aggregate_bandwidth", "scalar", "incast.aggregate_min", True),
    Rule("incast", "bandwidth", "none", None, True),
    Rule("incast", "loaded_latency_p50", "none", None, False),
    Rule("incast", "loaded_latency_p99", "scalar", "incast.latency_p99_max", False, _US),
    Rule("incast", "loaded_latency_p999", "none", None, False),
    Rule("incast", "loaded_latency_max", "none", None, False),
    Rule("incast", "errors", "zero", None, False),
    # intranode: profile rates are Gbit/s, records GB/s (as busbw). A GPU below its node's median
    # is counted by the suite in gpu_bandwidth_outliers (its detail names them): a node finding.
    Rule("intranode", "h2d_bandwidth", "scalar", "intranode.h2d_min", True, 1 / 8),
    Rule("intranode", "d2h_bandwidth", "scalar", "intranode.d2h_min", True, 1 / 8),
    Rule("intranode", "p2p_bandwidth", "scalar", "intranode.p2p_min", True, 1 / 8),
    Rule("intranode", "p2p_bidir_bandwidth", "none", None, True),
    Rule("intranode", "gpu_bandwidth_outliers", "zero", None, False),
)
DIRECTION: dict[tuple[str, str], bool | None] = {(r.suite, r.metric): r.higher for r in RULES}
# Fleet-relative outliers, and what burn-in and baseline comparison look at.
OUTLIER_METRICS = {"bandwidth": True, "latency_p50": False, "latency_p99": False, "latency_p999": False}
TREND_METRICS = {("rdma_write", "bandwidth"), ("rdma_write", "latency_p50"), ("rdma_write", "latency_p99"),
                 ("collective", "busbw")}
_KEYS = ["suite", "metric", "size", "rail", "src", "dst", "op", "scope"]


def _size_bound(size_map, sizes: np.ndarray) -> np.ndarray:
    """Vectorized profile.bound_at: the bound of the last entry at or below each size (NaN: none)."""
    if not size_map:
        return np.full(len(sizes), np.nan)
    starts = np.array([float(s) for s, _ in size_map])
    values = np.array([np.nan if v is None else float(v) for _, v in size_map])
    idx = np.searchsorted(starts, np.nan_to_num(sizes, nan=-1.0), side="right") - 1
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], np.nan)
    return np.where(np.isnan(sizes), np.nan, out)


def _judge(value: np.ndarray, bound: np.ndarray, higher: bool | None) -> np.ndarray:
    out = np.full(len(value), _INFO, dtype=np.int8)
    have = ~np.isnan(value) & ~np.isnan(bound)
    with np.errstate(invalid="ignore"):
        ok = value >= bound if higher is True else value <= bound if higher is False else value == bound
    out[have] = np.where(ok[have], _PASS, _FAIL)
    return out


def evaluate(df: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Every record judged against `profile`: columns threshold (record units) and verdict.

    A record with a value and a bound is judged here; one without (no bound for its metric
    or size, or a null value from a probe that failed) keeps the threshold and verdict its
    test wrote.
    """
    out = df.copy(deep=False)
    if "op" not in out.columns or "scope" not in out.columns:
        out = _derive(out)
    n = len(out)
    value = _floats_of(out["value"]) if n else np.zeros(0)
    size = _floats_of(out["size"]) if n else np.zeros(0)
    threshold = np.full(n, np.nan)
    verdict = np.full(n, _INFO, dtype=np.int8)
    for rule in RULES:
        mask = _codes_of(out["suite"], rule.suite) & _codes_of(out["metric"], rule.metric)
        if not mask.any():
            continue
        idx = np.flatnonzero(mask)
        v, s = value[idx], size[idx]
        if rule.bound == "sizemap":
            b = _size_bound(profile.get(rule.key), s) * rule.scale
            if rule.metric == "bandwidth" and profile.get("analysis.line_rate"):
                floor = profile.get("analysis.line_rate_fraction") * profile.get("analysis.line_rate")
                from_size = profile.get("analysis.line_rate_from_size")
                b = np.where(s >= from_size, np.fmax(b, floor), b)
        elif rule.bound == "scalar":
            bound = profile.get(rule.key)
            b = np.full(len(idx), np.nan if bound is None else float(bound) * rule.scale)
        elif rule.bound == "zero":
            b = np.zeros(len(idx))
        elif rule.bound == "busbw":
            b = np.full(len(idx), np.nan)
            scope_node = _codes_of(out["scope"], "node")[idx]
            for op in ("allreduce", "alltoall"):
                is_op = _codes_of(out["op"], op)[idx]
                for node in (False, True):
                    sel = is_op & (scope_node == node)
                    if sel.any():
                        key = rule.key.format(node="node_" if node else "", op=op)
                        b[sel] = _size_bound(profile.get(key), s[sel]) * rule.scale
        elif rule.bound == "memlock":
            minimum = profile.get(rule.key)
            unlimited = np.isnan(v)  # the suite records null (detail "unlimited") for no limit
            if minimum == "unlimited":
                threshold[idx] = np.nan
                verdict[idx] = np.where(unlimited, _PASS, _FAIL)
            else:
                threshold[idx] = float(minimum)
                verdict[idx] = np.where(unlimited | (v >= float(minimum)), _PASS, _FAIL)
            continue
        elif rule.bound == "ranks":
            rails = profile.get(rule.key)
            if rails:
                b = np.full(len(idx), float(rails))
            else:  # one rail per rank: every node must have as many ranks as most nodes do
                its = out["iteration"].to_numpy()[idx]
                ser = pd.Series(v)
                b = ser.groupby(its).transform(lambda x: x.mode().iloc[0] if x.notna().any() else np.nan)
                b = b.to_numpy(dtype=float)
        elif rule.bound == "recorded":  # the bound the suite wrote (null: nothing required)
            b = _floats_of(out["threshold"])[idx] if "threshold" in out.columns else np.full(len(idx), np.nan)
        elif rule.bound == "versions":
            b = np.full(len(idx), 0.0 if profile.get(rule.key) else np.nan)
        else:
            b = np.full(len(idx), np.nan)
        threshold[idx] = b
        verdict[idx] = _judge(v, b, rule.higher)
    counters = np.flatnonzero(_codes_of(out["suite"], "counters")) if n else np.zeros(0, dtype=np.int64)
    if len(counters):
        _evaluate_counters(out, counters, value, threshold, verdict, profile)
    # Fail closed: where nothing was judged here (no bound for the metric, or no value: a probe that
    # failed), the verdict and threshold the test wrote stand; analysis never turns a failure into info.
    written, written_threshold = _written(out, n)
    unjudged = verdict == _INFO
    verdict = np.where(unjudged, written, verdict).astype(np.int8)
    threshold = np.where(unjudged & np.isnan(threshold), written_threshold, threshold)
    out["threshold"] = threshold
    out["verdict"] = pd.Categorical.from_codes(verdict, categories=VERDICTS)
    out.attrs["evaluated"] = (profile.name, profile.source)
    return out


def _written(df: pd.DataFrame, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(verdict codes, thresholds) as the records were written; info and NaN where absent."""
    threshold = _floats_of(df["threshold"]) if "threshold" in df.columns and n else np.full(n, np.nan)
    if "verdict" not in df.columns or not n:
        return np.full(n, _INFO, dtype=np.int8), threshold
    given = df["verdict"]
    if not isinstance(given.dtype, pd.CategoricalDtype):
        given = given.astype("category")
    table = np.array([VERDICTS.index(c) if c in VERDICTS else _INFO for c in given.cat.categories] or [_INFO],
                     dtype=np.int8)
    codes = given.cat.codes.to_numpy()
    return np.where(codes >= 0, table[np.maximum(codes, 0)], _INFO).astype(np.int8), threshold


def _evaluate_counters(out: pd.DataFrame, idx: np.ndarray, value: np.ndarray, threshold: np.ndarray,
                       verdict: np.ndarray, profile: Profile) -> None:
    """Port counter deltas (suite counters): error counters fail when they rise, the rest warn.

    The kind of a counter comes from acceptance.counters.kind_of; rate records (unit 1/s)
    are held to the pause or CNP rate bound. A saturated counter has no delta (value null)
    and says so in its detail: one that saturated during the window rose.
    """
    from ..counters import kind_of
    metric = out["metric"].to_numpy()[idx].astype(object)
    unit = out["unit"].to_numpy()[idx].astype(object)
    detail = out["detail"].to_numpy()[idx].astype(object) if "detail" in out.columns else np.full(len(idx), None)
    text = pd.Series(detail, dtype=object).fillna("").astype(str)
    during = text.str.contains("saturated at", regex=False).to_numpy() & text.str.contains(
        "during the window", regex=False).to_numpy()
    before = text.str.contains("saturated before", regex=False).to_numpy()
    bounds = {"error": ("counters.errors_max", _FAIL), "discard": ("counters.discards_max", _WARN)}
    rates = {"pause": "counters.pause_rate_max", "cnp": "counters.cnp_rate_max"}
    for name, u in set(zip(metric, unit)):
        sel = (metric == name) & (unit == u)
        at = idx[sel]
        is_rate = u == "1/s"
        kind = kind_of(name[:-len("_rate")] if is_rate and name.endswith("_rate") else name)
        if is_rate:
            key, severity = rates.get(kind), _WARN
        else:
            key, severity = bounds.get(kind, (None, _INFO))
        bound = profile.get(key) if key else None
        b = np.full(len(at), np.nan if bound is None else float(bound))
        v = _judge(value[at], b, False)
        v[v == _FAIL] = severity
        if not is_rate and kind in bounds:
            v[during[sel]] = severity
            v[before[sel]] = _WARN
        threshold[at] = b
        verdict[at] = v


def _direction(suite: str, metric: str) -> bool | None:
    return DIRECTION.get((suite, metric))
