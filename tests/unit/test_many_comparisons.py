"""Statistics for many comparisons: quiet on a large healthy fleet with heavy-tailed noise, a NIC
judged on its typical partner (power where all partners agree), tail percentiles as information,
and the power each rule reports (acceptance.analysis.outliers, acceptance.analysis.noise)."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic  # noqa: E402

from acceptance.analysis import analyze  # noqa: E402
from acceptance.analysis.noise import binom_sf, favourable_median, t_isf, t_sf, tail_dof, typical_tail, z_of  # noqa: E402

SOFTROCE = str(Path(__file__).resolve().parents[2] / "acceptance" / "rules" / "profiles" / "softroce.toml")


def where(findings):
    return [(f["severity"], f["scope"], f["node"], f["rail"]) for f in findings]


# ---- the noise model ----------------------------------------------------------------------

def test_student_t_tails_and_quantiles():
    assert t_sf(2.0, 3) == pytest.approx(0.069663, rel=1e-4)
    assert t_isf(0.025, 3) == pytest.approx(3.18245, rel=1e-4)
    assert t_isf(0.025, 10) == pytest.approx(2.22814, rel=1e-4)
    assert t_isf(0.025, math.inf) == pytest.approx(1.95996, rel=1e-4)
    # in robust sigmas, a normal threshold at 1e-7 is 5.2; Student-t with 3 dof needs far more
    assert z_of(1e-7, math.inf) == pytest.approx(5.199, rel=1e-3)
    assert z_of(1e-7, 3.0) > 100


@pytest.mark.parametrize("dof", [2.0, 3.0, 5.0])
def test_tail_dof_is_measured_from_the_values(dof):
    z = np.random.default_rng(1).standard_t(dof, 50000)
    assert tail_dof(z) == pytest.approx(dof, rel=0.25)
    assert tail_dof(np.random.default_rng(1).normal(size=50000)) > 30
    assert tail_dof(z[:10], default=3.0) == 3.0  # too few to tell


def test_the_favourable_median_needs_more_than_half():
    values = np.array([0.3, 1.0, 0.3, 0.3, 1.0, 1.0, 0.3, 0.3, 0.3, 1.0])
    groups = np.array([0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    typical, n = favourable_median(values, groups)
    # 1 of 2 bad: the better; 2 of 4 bad: healthy; 3 of 4 bad: bad
    assert list(typical) == [1.0, 1.0, 0.3] and list(n) == [2, 4, 4]
    # P(at least 5 of 8 below) at the per-value probability found
    p = typical_tail(1e-6, 8)
    assert binom_sf(5, 8, p) == pytest.approx(1e-6, rel=1e-3)


# ---- a large healthy fleet -------------------------------------------------------------------

def test_a_large_healthy_fleet_with_heavy_tails_is_quiet(tmp_path):
    # 256 nodes x 4 rails, 8 random partners each, Student-t (3 dof) noise on bandwidth and latency:
    # 16,384 pair-directions x 6 metrics. Per pair and metric at z 3.5 and 10% (the rule before) this
    # gave tens of failing findings; allowing for the comparisons made, none fails.
    run = synthetic.make_run_sampled(tmp_path / "run", nodes=256, rails=4, partners=8, noise=0.02, tail=3, seed=3)
    a = analyze(run)
    assert [f for f in a.findings if f["severity"] == "fail"] == [] and a.drains == []
    assert len(a.findings) <= 1 and a.verdict == "pass"


def test_one_bad_partner_does_not_move_a_nic(tmp_path):
    # node03's link to node07 on rail 1 at half rate: a link, not node03's or node07's NIC
    run = synthetic.make_run_sampled(tmp_path / "run", nodes=64, rails=2, partners=0, noise=0.01, tail=3, seed=2,
                                     slow_link=("node03", "node07", 1, 0.5))
    assert where(analyze(run).findings) == [("fail", "link", "node03", 1)]


def test_a_nic_slow_on_every_partner_of_a_sampled_schedule(tmp_path):
    # 8 partners at 0.85x: no link alone is beyond its threshold, the NIC's typical partner is
    run = synthetic.make_run_sampled(tmp_path / "run", nodes=256, rails=2, partners=8, noise=0.01, tail=3, seed=4,
                                     slow_nic=("node100", 1, 0.85))
    a = analyze(run)
    assert where(a.findings) == [("warn", "nic", "node100", 1)]
    assert "is 15% slow" in a.findings[0]["message"]


# ---- the Soft-RoCE rig: 3 nodes x 2 rails beside a CPU hog ----------------------------------

def _rig(tmp_path, **fault):
    return synthetic.make_run(tmp_path / "rig", nodes=3, rails=2, profile=SOFTROCE, collectives=False, memreg=False,
                              preflight=False, latency=False, bw_noise=0.15, sizes=(65536, 1048576), **fault)


def test_a_nic_at_a_third_of_the_rate_fails_on_the_rig(tmp_path):
    # All 4 of its pair-directions at 0.31x: above the profile's fleet bound (0.3x), far beyond its
    # outlier_min_deviation (3.0: never), yet every partner sees it at a third of the rate.
    a = analyze(_rig(tmp_path, slow_nic=("node02", 1, 0.31)))
    assert where(a.findings) == [("fail", "nic", "node02", 1)] and a.exit_code == 1
    assert "drain node02" in a.findings[0]["message"]


def test_a_healthy_rig_with_one_slow_link_does_not_fail(tmp_path):
    a = analyze(_rig(tmp_path, slow_link=("node01", "node03", 1, 0.45)))
    assert [f for f in a.findings if f["severity"] == "fail"] == [] and a.exit_code == 0


# ---- tail percentiles ------------------------------------------------------------------------

def _slow_tails(run: Path, node: str, rail: int, factor: float) -> None:
    import json
    path = run / "results.jsonl"
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["metric"] == "latency_p999":
            r["samples"] = 1000000   # enough for a p99.9 to single out a link (outliers.PERCENTILE_SAMPLES)
        if r["metric"] in ("latency_p999", "latency_max") and r["rail"] == rail and node in r["nodes"]:
            r["value"] *= factor
        out.append(json.dumps(r) + "\n")
    path.write_text("".join(out))


def test_tail_percentiles_are_information_unless_gated(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=2, collectives=False, memreg=False)
    _slow_tails(run, "node04", 1, 3.0)
    assert analyze(run).findings == []
    gated = tmp_path / "gated.toml"
    gated.write_text(f'extends = "{synthetic.SYNTHETIC_PROFILE}"\n[rdma_write]\nlatency_p999_max = "1s"\n')
    assert where(analyze(run, profile=str(gated)).findings) == [("fail", "nic", "node04", 1)]


# ---- power -----------------------------------------------------------------------------------

def test_power_says_what_a_pass_rules_out(tmp_path):
    small = analyze(synthetic.make_run_sampled(tmp_path / "a", nodes=16, rails=2, partners=0, noise=0.01, tail=3,
                                               latency=False, seed=1)).power
    large = analyze(synthetic.make_run_sampled(tmp_path / "b", nodes=256, rails=2, partners=8, noise=0.05, tail=3,
                                               latency=False, seed=1)).power
    keys = {"rule", "metric", "size", "rail", "population", "comparisons", "noise", "detectable"}
    assert all(keys <= set(p) for p in small + large)
    rules = {(p["rule"], p["size"]) for p in small}
    assert {("link", 8388608), ("nic", 8388608), ("pair-direction", 65536)} <= rules

    def of(power, rule):
        return next(p for p in power if p["rule"] == rule and p["size"] == 8388608)
    # more comparisons and more noise: a larger slowdown goes unnoticed
    assert of(large, "link")["detectable"] > of(small, "link")["detectable"] >= 0.1
    assert of(large, "link")["comparisons"] > of(small, "link")["comparisons"]
    # a NIC of typical partners: never worse than the half rate that always fails it
    assert 0.1 <= of(large, "nic")["detectable"] <= 0.5 and of(large, "nic")["fails"] <= 0.5
    assert of(large, "nic")["noise"] == pytest.approx(0.05, rel=0.2)


def test_a_nic_at_a_third_of_the_fleet_fails_though_each_link_alone_only_warns(tmp_path):
    """Its links were outliers that warn one by one; the NIC's typical partner at 0.3x fails it, and
    the failure reaches the links it is judged through (once, the kept evidence row fails)."""
    from synthetic import make_run_fast
    run = make_run_fast(tmp_path / "run", nodes=80, rails=2, slow_nic=("node07", 1, 0.3))
    a = analyze(run)
    assert [(f["severity"], f["scope"], f["node"], f["rail"]) for f in a.findings] == [("fail", "nic", "node07", 1)]
    assert len(a.drains) == 1 and a.drains[0].node == "node07"
