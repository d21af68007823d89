"""The bound kinds are strategy classes (acceptance.rules.bounds), each deciding its verdicts; and
nothing in analysis, history or drivers compares a value with a profile tolerance itself: the
detectors find populations and evidence, and ask the judge."""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from acceptance.rules import bounds, catalog, judge
from acceptance.rules.bounds import FAIL, INFO, PASS, WARN
from acceptance.checks import base as checks_base
from acceptance.checks import memlock as memlock_check
from acceptance.rules.profile import load_profile
from acceptance.rules.schema import SCHEMA

PACKAGE = Path(__file__).resolve().parents[2] / "acceptance"


# ---- the kinds ---------------------------------------------------------------------------------

def test_every_bound_the_catalog_names_has_its_strategy_class():
    assert set(bounds.KINDS) == set(catalog.BOUND_KINDS)
    for name, kind in bounds.KINDS.items():
        assert isinstance(kind, bounds.Absolute) and kind.name == name
    assert {type(k) for k in bounds.KINDS.values()} >= {bounds.SizeMap, bounds.Scalar, bounds.Zero, bounds.One,
                                                        bounds.Versions, bounds.Ranks, bounds.Memlock, bounds.Counter}
    for s in catalog.SUITES.values():
        for m in s.metrics:
            assert bounds.of(m).name == m.bound
    for cls in (bounds.LineRate, bounds.Fleet, bounds.Outlier, bounds.Trend, bounds.Drift):
        assert issubclass(cls, bounds.Kind) and cls.name


def judged(suite, name, values, profile, sizes=None, iterations=None, **when):
    m = catalog.metric(suite, name, **when)
    v = np.array(values, dtype=float)
    s = np.full(len(v), np.nan) if sizes is None else np.array(sizes, dtype=float)
    return bounds.of(m).judge(m, v, s, profile, iterations)


def test_absolute_kinds():
    # scalar: seconds in the profile, microseconds in the record
    b, code, kind = judged("rdma_write", "latency_p50", [4.0, 6.0, np.nan], {"rdma_write.latency_p50_max": 5e-6})
    assert b == pytest.approx([5.0] * 3) and list(code) == [PASS, FAIL, INFO] and list(kind) == ["absolute"] * 3
    assert list(judged("rdma_write", "latency_p50", [4.0], {})[1]) == [INFO]           # unset: no bound
    assert list(judged("rdma_write", "errors", [0, 2], {})[1]) == [PASS, FAIL]          # zero
    assert list(judged("collective", "gdrdma", [1, 0], {})[1]) == [PASS, FAIL]           # one
    # an advisory flag warns instead of failing
    assert list(judged("collective", "gdrdma_sends", [1, 0], {})[1]) == [PASS, WARN]
    name = next(n for s in catalog.SUITES.values() for m in s.metrics if m.bound == "versions" for n in m.names)
    suite = next(s.name for s in catalog.SUITES.values() for m in s.metrics if m.bound == "versions")
    assert list(judged(suite, name, [0, 1], {"preflight.same_versions": True})[1]) == [PASS, FAIL]
    assert list(judged(suite, name, [0, 1], {"preflight.same_versions": False})[1]) == [INFO, INFO]
    assert list(judged("memreg", "memlock_enforced", [1], {})[1]) == [INFO]                # none: no bound


def test_ranks_are_most_nodes_count_unless_the_profile_says():
    suite, m = next((s.name, m) for s in catalog.SUITES.values() for m in s.metrics if m.bound == "ranks")
    values = np.array([8.0, 8.0, 7.0, 4.0, 4.0, 4.0])
    b, code, _ = bounds.of(m).judge(m, values, np.full(6, np.nan), {m.key: 0}, np.array([0, 0, 0, 1, 1, 1]))
    assert list(b) == [8, 8, 8, 4, 4, 4] and list(code) == [PASS, PASS, FAIL, PASS, PASS, PASS]
    assert list(bounds.of(m).judge(m, values, np.full(6, np.nan), {m.key: 4})[1]) == [FAIL] * 3 + [PASS] * 3
    # one value alone cannot be judged against most nodes: judge.record_all judges them together
    assert judge.judge_one(suite, m.name, 3, {m.key: 0})[1] == "info"


def test_memlock_is_a_size_or_unlimited():
    m = next(m for s in catalog.SUITES.values() for m in s.metrics if m.bound == "memlock")
    kind = bounds.of(m)
    v = np.array([np.nan, 1024.0, 64.0])   # null: unlimited
    b, code, how = kind.judge(m, v, np.full(3, np.nan), {m.key: 1024})
    assert list(b) == [1024.0] * 3 and list(code) == [PASS, PASS, FAIL] and list(how) == ["absolute"] * 3
    b, code, _ = kind.judge(m, v, np.full(3, np.nan), {m.key: "unlimited"})
    assert np.isnan(b).all() and list(code) == [PASS, FAIL, FAIL]


def test_a_size_map_with_the_line_rate_floor():
    profile = {"rdma_write.bandwidth_min": [[0, 100.0], [1 << 20, 300.0]], "topology.rails": 1,
               "analysis.line_rate": 400.0, "analysis.line_rate_fraction": 0.9,
               "analysis.line_rate_from_size": 1 << 20}
    b, code, kind = judged("rdma_write", "bandwidth", [150.0, 350.0, 370.0], profile, sizes=[4096, 8 << 20, 8 << 20])
    assert list(b) == [100.0, 360.0, 360.0] and list(code) == [PASS, FAIL, PASS]
    assert list(kind) == ["absolute", "line_rate", "line_rate"]
    floor = bounds.LineRate({**profile, "analysis.line_rate": None})
    assert floor.minimum is None and list(floor.floor(np.array([1.0]), np.array([8e6]))[0]) == [1.0]


def test_fleet_relative():
    fleet = bounds.Fleet()
    # a value against factor x a centre: below it (higher is better), above it (lower is better)
    assert list(fleet.outside([10.0, 7.6, 7.4, np.nan], 10.0, 0.75)) == [False, False, True, False]
    assert list(fleet.outside([29.0, 31.0], 10.0, 3.0, higher=False)) == [False, True]
    centre, size = fleet.loo_median(np.array([1.0, 2.0, 3.0, 10.0]), np.zeros(4, dtype=np.int64))
    assert list(centre) == [3.0, 3.0, 2.0, 2.0] and list(size) == [4] * 4
    profile = {"fleet.bounds": [["rdma_write.bandwidth", [[4096, 0.5]]]]}
    assert fleet.factor(profile, "rdma_write", "bandwidth") == [[4096, 0.5]]
    assert fleet.factor(profile, "rdma_write", "errors") is None      # a must-equal count has no fleet
    assert fleet.deferred(profile, "rdma_write", "bandwidth", np.array([8192.0]))
    assert not fleet.deferred(profile, "rdma_write", "bandwidth", np.array([1024.0]))  # below the table


OUTLIER_PROFILE = {"analysis.outlier_min_deviation": 0.1, "analysis.outlier_z": 3.5,
                   "analysis.false_findings": 0.5, "analysis.false_failures": 0.01, "analysis.nic_fail_ratio": 0.5}


def test_outliers_allow_for_many_comparisons_and_fail_at_twice_the_deviation():
    rule = bounds.Outlier(OUTLIER_PROFILE)
    assert (rule.warn.deviation, rule.fail.deviation) == (0.1, 0.2)
    assert rule.levels == (rule.warn, rule.fail) and rule.fail.fails and not rule.warn.fails
    assert rule.warn.each(100) == pytest.approx(0.005)                       # Bonferroni
    assert rule.fail.both_ways(4) == pytest.approx(math.sqrt(0.01 / 4))      # a link: both directions
    worse, g, sigma = np.array([0.15, 0.15, 0.25, 0.05]), np.array([-0.5, -0.1, -0.5, -0.5]), np.full(4, 0.1)
    assert list(rule.beyond(worse, g, 2.0, sigma, rule.warn)) == [True, False, True, False]
    assert list(rule.beyond(worse, g, 2.0, sigma, rule.fail)) == [False, False, True, False]
    assert list(rule.fails(np.array([0.19, 0.2]))) == [False, True]
    # a plane against the others: modified z-score, unless the others agree exactly
    assert list(rule.robust(np.array([0.2, 0.2, 0.05]), np.array([4.0, 1.0, 9.0]), np.array([False, True, False]))) \
        == [True, True, False]
    assert list(rule.halved(np.array([0.5, 0.6]))) == [True, False]
    assert list(rule.suspect(np.array([0.1, 0.0, 0.0]), np.array([1.0, 0.4, 0.9]))) == [True, True, False]
    assert rule.slow_group(0.2, 1.0, 4.0) and not rule.slow_group(0.05, 1.0, 4.0) and not rule.slow_group(0.2, 1.0, 3.0)


def test_trends_and_drift_fail_at_twice_the_tolerance():
    trend = bounds.Trend.of({"analysis.regression_tolerance": 0.05}, "analysis.regression_tolerance")
    assert list(trend.beyond(np.array([0.04, 0.06, np.nan]))) == [False, True, False]
    assert list(trend.fails(np.array([0.09, 0.11]))) == [False, True]
    # a pandas column stays one (trends judge frames)
    assert trend.beyond(pd.Series([0.1])).tolist() == [True]
    drift = bounds.Drift.of({"history.drift_tolerance": 0.05, "history.noise_z": 2.0})
    assert drift.gate(np.zeros(1), np.array([np.nan]))[0] == pytest.approx(0.05)    # no noise: the tolerance
    assert drift.gate(np.array([0.015]), np.array([0.02]))[0] == pytest.approx(math.sqrt(0.05**2 + 0.03**2 + 0.04**2))
    gate = np.full(3, 0.08)
    assert list(drift.drifted(np.array([0.09, 0.09, 0.07]), gate, np.array([0.06, 0.04, 0.06]))) == [True, False, False]
    assert list(drift.fails(np.array([0.09, 0.11]))) == [False, True]


def test_the_judge_keeps_its_entries():
    """judge_records and judge_one reach the same verdicts through the kinds."""
    profile = {"rdma_write.latency_p50_max": 5e-6, "fleet.bounds": []}
    assert judge.one("rdma_write", "latency_p50", 6.0, profile) == (5.0, "fail")
    df = pd.DataFrame({"suite": ["rdma_write"] * 2, "metric": ["latency_p50"] * 2, "value": [4.0, 6.0],
                       "size": [8.0, 8.0], "unit": ["us"] * 2, "iteration": [0, 0], "op": [None] * 2,
                       "scope": [None] * 2})
    out = judge.judge_records(df, profile)
    assert list(out.verdict) == [PASS, FAIL] and list(out.bound) == ["absolute"] * 2


# ---- no verdict outside the judge ------------------------------------------------------------------
# A comparison (< <= > >=) in analysis, history or drivers fails this test when either side mentions a
# tolerance: a profile key string whose last part ends in tolerance, _fraction, _z or min_deviation; a
# variable named tol, tolerance, gate, fraction or min_dev; or an attribute ending like such a key
# (settings.outlier_fraction). Such a comparison is a verdict: bounds.py's classes make it.

SCANNED = ("analysis", "history", "drivers")
NAMES = {"tol", "tolerance", "gate", "fraction", "min_dev"}
SUFFIX = re.compile(r"(tolerance|_fraction|_z|min_deviation)$")
KEY = re.compile(r"^[a-z_]+\.[a-z_0-9]+$")
# Localization, not a verdict: the share of a part's measured pairs that must be bad to name that
# part (a leaf, an uplink) rather than its pairs one by one. It decides where, never pass or fail.
WHERE_NOT_WHETHER = {("analysis/tree.py", "_frac_ok")}
# Verdicts still made outside the judge, in files this change did not own; each must still be there
# (the test fails once it is gone, so that it leaves this list too).
KNOWN: set = set()


def _mentions(node: ast.AST) -> list[str]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in NAMES:
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute) and (sub.attr in NAMES or SUFFIX.search(sub.attr)):
            out.append(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and KEY.match(sub.value) \
                and SUFFIX.search(sub.value):
            out.append(sub.value)
    return out


def threshold_comparisons() -> list[tuple[str, str, int, str]]:
    """(file relative to acceptance/, enclosing function, line, source) of each such comparison."""
    found = []
    for top in SCANNED:
        for path in sorted((PACKAGE / top).rglob("*.py")):
            text = path.read_text()
            tree = ast.parse(text)
            where = {}  # node -> its innermost function (ast.walk reaches outer functions first)
            for fn in ast.walk(tree):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for sub in ast.walk(fn):
                        where[id(sub)] = fn.name
            for node in ast.walk(tree):
                if not isinstance(node, ast.Compare):
                    continue
                if not any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
                    continue
                if _mentions(node):
                    rel = str(path.relative_to(PACKAGE))
                    found.append((rel, where.get(id(node), ""), node.lineno, ast.get_source_segment(text, node)))
    return found


def test_the_scan_finds_a_threshold_comparison():
    code = ast.parse('def f(x, profile, tol):\n    return x < -2 * tol or x > profile.get("analysis.drift_tolerance")\n')
    compares = [n for n in ast.walk(code) if isinstance(n, ast.Compare)]
    assert [bool(_mentions(c)) for c in compares] == [True, True]
    assert not _mentions(ast.parse("x < limit * 2").body[0].value)


def test_no_threshold_comparison_outside_the_judge():
    found = threshold_comparisons()
    left = [f for f in found if (f[0], f[1]) not in WHERE_NOT_WHETHER and (f[0], f[3]) not in KNOWN]
    assert left == [], "compare with a tolerance through acceptance.rules.bounds (judge.Outlier, Trend, Drift, " \
        "Fleet):\n" + "\n".join(f"acceptance/{f}:{line} ({fn}): {src}" for f, fn, line, src in left)
    gone = KNOWN - {(f[0], f[3]) for f in found}
    assert not gone, f"no longer there, take them out of KNOWN: {sorted(gone)}"


def test_headroom_fails_at_the_parts_own_limit_and_warns_within_the_margin():
    rule = judge.Headroom(5.0)
    assert [rule.verdict(t, 90) for t in (80, 85, 89, 90, 95)] == [PASS, WARN, WARN, FAIL, FAIL]  # codes, as every kind


# ---- no threshold read outside rules/ -----------------------------------------------------------------
# Whatever a variable is called: a profile's analysis.* key, or a key a catalog metric owns as its bound
# (schema field is_bound), read (`.get("analysis.x")`) outside acceptance/rules is a verdict's input
# outside the judge. The analysis settings are read by the rules' kinds (judge.Outlier, Trend, Shares);
# a bound is asked of the judge (judge.bound: what a message names, whether it is bounded at all). A
# general setting a metric also uses as its bound (topology.rails: how many rails a node has) is a
# setting. The reads still outside are listed, each with why; each must still be there.
KNOWN_BOUND_READS = {
    # The plan's model: the rate it times transfers at is the bound's table at its largest size, and
    # the GPUs it plans for are the ones the profile expects (no value to judge: nothing has run).
    ("runtime/estimate.py", "rdma_write.bandwidth_min"), ("runtime/estimate.py", "preflight.gpus_per_node"),
}


def test_no_analysis_setting_or_bound_is_read_outside_the_rules():
    bound_keys = {f"{section}.{key}" for section, fields in SCHEMA.items() for key, f in fields.items() if f.is_bound}
    analysis, bounds_read = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel.startswith("rules/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                continue
            key = node.args[0].value
            if key.startswith("analysis."):
                analysis.append(f"{rel}:{node.lineno} reads {key}")
            elif key in bound_keys:
                bounds_read.add((rel, key))
    assert analysis == [], "read through judge.Outlier, Trend or Shares instead:\n" + "\n".join(analysis)
    assert bounds_read - KNOWN_BOUND_READS == set(), "a bound read outside the judge"
    assert KNOWN_BOUND_READS - bounds_read == set(), "no longer read there: take them out of KNOWN_BOUND_READS"


# ---- one judge: what the profile states, and a kind added in one place -------------------------------

def test_the_judge_says_what_the_profile_holds_a_value_to_before_any_value_is_seen():
    h100 = load_profile("h100-ndr400")
    assert judge.bound("preflight", "port_rate", h100) == h100.get("preflight.port_rate")
    assert judge.bound("preflight", "port_mtu", load_profile("local")) is None  # unset: nothing fails it
    assert h100.get("preflight.memlock_min") == "unlimited" and judge.bound("preflight", "memlock", h100) == math.inf
    assert judge.bound("preflight", "memlock", _with(h100, "preflight", memlock_min=1 << 30)) == float(1 << 30)
    assert judge.bound("preflight", "memlock", _with(h100, "preflight", memlock_min=0)) is None
    assert "needs unlimited" in memlock_check.short(65536, math.inf)


def _with(profile, section, **values):
    return dataclasses.replace(profile, values={**profile.values, section: {**profile.values[section], **values}})


def test_a_bound_kind_added_in_one_place_is_judged_by_analysis_the_drivers_and_the_node_checks(monkeypatch):
    monkeypatch.setattr(bounds, "KINDS", dict(bounds.KINDS))
    monkeypatch.setattr(catalog, "BOUND_KINDS", catalog.BOUND_KINDS)

    class Halved(bounds.Absolute):
        """A throwaway kind: half the profile's figure."""
        name = "halved"

        def threshold(self, metric, values, sizes, profile, iterations=None):
            return np.full(len(values), profile.get(metric.key) / 2)

    bounds.register(Halved())
    suite = catalog.SUITES["preflight"]
    metrics = tuple(dataclasses.replace(m, bound="halved") if m.names == ("port_rate",) else m for m in suite.metrics)
    monkeypatch.setitem(catalog.SUITES, "preflight", dataclasses.replace(suite, metrics=metrics))
    profile = load_profile("h100-ndr400")  # port_rate 400 Gbit/s: 250 fails it, half of it passes
    # the node checks (and the preflight driver, which asks them)
    assert checks_base.bound("port_rate", profile) == 200.0 and not checks_base.fails("port_rate", 250.0, profile)
    # a driver recording a value
    assert judge.one("preflight", "port_rate", 250.0, profile, peers=False) == (200.0, "pass")
    assert judge.one("preflight", "port_rate", 150.0, profile, peers=False) == (200.0, "fail")
    # analysis, judging a run's records
    df = pd.DataFrame({"suite": ["preflight"] * 2, "metric": ["port_rate"] * 2, "value": [250.0, 150.0],
                       "size": [np.nan] * 2, "unit": ["Gbit/s"] * 2, "iteration": [0, 0], "op": [None] * 2,
                       "scope": [None] * 2})
    out = judge.judge_records(df, profile)
    assert list(out.verdict) == [PASS, FAIL] and list(out.threshold) == [200.0, 200.0]
