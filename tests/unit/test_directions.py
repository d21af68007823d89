"""Each direction of a NIC judged apart (outliers.nic_outliers: "tx" sending, "rx" receiving) with its
allowance for the comparisons made, and the latency tail held to the fleet on each NIC where the
profile states no number for it (outliers.fleet_tail) (issue 41)."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic  # noqa: E402

from acceptance.analysis import analyze  # noqa: E402
from acceptance.analysis.outliers import FLEET_TAILS, nic_outliers, power  # noqa: E402
from acceptance.rules.profile import load_profile  # noqa: E402

# A hardware profile: rdma_write and perftest latency p99 not gated (a100-hdr200 states p50 only), its
# 8 MiB floor (180 Gbit/s) under anything the synthetic noise reaches.
HARDWARE = "a100-hdr200"


def where(findings):
    return [(f["severity"], f["scope"], f["node"], f["rail"], f.get("direction")) for f in findings]


def _run(tmp_path, nodes=64, rails=2, partners=12, **kw):
    return synthetic.make_run_sampled(tmp_path / "run", nodes=nodes, rails=rails, partners=partners,
                                      sizes=(8388608,), noise=0.01, tail=3, seed=5, **kw)


# ---- one direction ---------------------------------------------------------------------------------

def test_a_nic_slow_sending_only_is_found_and_drained(tmp_path):
    # Its better direction is healthy on every link: the link rule sees nothing; its sending, 0.7x to
    # every partner, fails (the half rate is not reached: the many-comparisons test fails it).
    a = analyze(_run(tmp_path, latency=False, slow_tx=("node17", 1, 0.7)))
    assert where(a.findings) == [("fail", "nic", "node17", 1, "tx")]
    assert "sending, not receiving" in a.findings[0]["message"] and "drain node17" in a.findings[0]["message"]
    assert [d.node for d in a.drains] == ["node17"]
    # its evidence is its sending: every line is a pair-direction from it
    lines = [e for e in a.findings[0]["evidence"] if " -> " in e]
    assert lines and all(e.startswith("node17 -> ") for e in lines)


def test_a_nic_slow_receiving_on_its_own_leaf_too_is_its_nic(tmp_path):
    # With the tree known and partners on its own leaf slow too, it is the NIC (analysis.cables leaves it)
    leaves = 8
    run = _run(tmp_path, latency=False, leaves=leaves, inside=2, slow_rx=("node20", 0, 0.7))
    tree = synthetic.TwoLevel(synthetic.node_names(64), leaves, 8).fabric(routes=None)
    a = analyze(run, topology=tree)
    assert where(a.findings) == [("fail", "nic", "node20", 0, "rx")]
    assert "receiving, not sending" in a.findings[0]["message"]


def test_the_directions_are_judged_on_a_bandwidth_only():
    # a latency here is half a round trip: one value for both directions, judged on its links
    rng = np.random.default_rng(0)
    pairs = _pairs(rng, 64, 2, 8, metric="latency_p50", nominal=1.5, unit="us")
    pairs.loc[pairs["s"] == 7, "value"] *= 2.0     # node 7's "sending" latency only
    got = nic_outliers(pairs, load_profile(synthetic.SYNTHETIC_PROFILE))
    assert set(got["direction"]) <= {"both"}


# ---- many comparisons: in memory, at scale ------------------------------------------------------

def _pairs(rng, nodes, rails, partners, metric="bandwidth", nominal=368.0, unit="Gbit/s", size=8388608.0):
    """One value per pair-direction of a screening schedule (synthetic.sampled_pairs), Student-t (3 dof)
    noise of 1%, as pair_values gives them."""
    rows = []
    for rail, p in enumerate(synthetic.sampled_pairs(nodes, rails, partners, rng)):
        s = np.concatenate([p[:, 0], p[:, 1]])
        d = np.concatenate([p[:, 1], p[:, 0]])
        rows.append(pd.DataFrame({"rail": rail, "s": s, "d": d}))
    x = pd.concat(rows, ignore_index=True)
    x["value"] = nominal * synthetic.heavy_noise(rng, 0.01, 3.0, len(x))
    return x.assign(metric=metric, size=size, unit=unit)[["metric", "size", "rail", "s", "d", "value", "unit"]]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_clean_fleet_at_1024_x_8_has_no_slow_direction(seed):
    # 1,024 x 8 x 16 partners: 131,072 pair-directions, 16,384 (NIC, direction) comparisons beside the
    # 8,192 NICs. Bonferroni over them keeps a healthy fleet under analysis.false_findings.
    pairs = _pairs(np.random.default_rng(seed), 1024, 8, 16)
    assert nic_outliers(pairs, load_profile(synthetic.SYNTHETIC_PROFILE)).empty


def test_one_slow_direction_is_found_at_1024_x_8():
    rng = np.random.default_rng(3)
    pairs = _pairs(rng, 1024, 8, 16)
    mine = (pairs["rail"] == 5) & (pairs["d"] == 700)
    pairs.loc[mine, "value"] *= 0.85
    profile = load_profile(synthetic.SYNTHETIC_PROFILE)
    got = nic_outliers(pairs, profile)
    assert [(r.rail, r.node, r.direction, bool(r.fail)) for r in got.itertuples()] == [(5, 700, "rx", False)]
    rules = {p["rule"]: p for p in power(pairs, profile)}
    # what a PASS rules out, per direction: a NIC a few percent slow one way
    assert {"nic", "nic-direction", "link", "pair-direction"} <= set(rules)
    assert rules["nic-direction"]["comparisons"] == 2 * rules["nic"]["comparisons"]
    assert 0.1 <= rules["nic-direction"]["detectable"] < 0.15


# ---- the latency tail, where the profile states no number ----------------------------------------

def test_the_fleet_tail_is_the_one_way_write_latency_p99():
    assert FLEET_TAILS["rdma_write"] == ("latency_p99",) and FLEET_TAILS["perftest"] == ("latency_p99",)
    assert FLEET_TAILS["gpudirect"] == ()     # a round trip, post to completion


def test_a_nic_whose_p99_is_twice_its_partners_fails_on_a_hardware_profile(tmp_path):
    run = _run(tmp_path, profile=HARDWARE, slow_tail=("node09", 1, 2.0))
    a = analyze(run)
    assert where(a.findings) == [("fail", "nic", "node09", 1, None)]
    f = a.findings[0]
    assert f["metric"] == "latency_p99" and f["value"] == pytest.approx(2 * f["expected"], rel=0.1)
    assert [d.node for d in a.drains] == ["node09"]
    # healthy, the same run is quiet: the tail rule allows for its comparisons
    assert analyze(_run(tmp_path / "clean", profile=HARDWARE)).findings == []


def test_perftest_write_latency_tail_is_judged_on_its_nics(tmp_path):
    # ib_write_lat's records carry their pair and rail: node09's p99 twice its partners' on rail 1, the
    # harness's own latency healthy
    run = _run(tmp_path, profile=HARDWARE)
    slow = synthetic.make_run_sampled(tmp_path / "slow", nodes=64, rails=2, partners=12, sizes=(8388608,),
                                      noise=0.01, tail=3, seed=5, profile=HARDWARE, slow_tail=("node09", 1, 2.0))
    path = run / "results.jsonl"
    lines = path.read_text().splitlines()
    for line in (slow / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["metric"] in ("latency_p50", "latency_p99"):
            r.update(suite="perftest", engine="perftest", samples=100000,
                     test=f"suites/test_perftest.py::test_perftest_crosscheck[rail{r['rail']}]")
            lines.append(json.dumps(r))
    path.write_text("\n".join(lines) + "\n")
    a = analyze(run)
    assert where(a.findings) == [("fail", "nic", "node09", 1, None)]
    assert a.findings[0]["suite"] == "perftest" and a.findings[0]["message"].startswith("perftest: ")
