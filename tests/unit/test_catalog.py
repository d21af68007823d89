"""The metric catalog: every bound key of the profile schema bounds exactly one catalog metric, and
back; the one judge gives the same threshold and verdict for one value as for a frame of records."""

import numpy as np
import pandas as pd
import pytest

from acceptance.rules import catalog, judge
from acceptance.rules.profile import load_profile
from acceptance.rules.schema import SCHEMA


def schema_bound_keys() -> set[str]:
    return {f"{section}.{key}" for section, fields in SCHEMA.items() for key, f in fields.items() if f.is_bound}


def test_every_bound_key_bounds_exactly_one_catalog_metric_and_back():
    keys = catalog.bound_keys()
    owned = set(catalog.settings())
    assert owned == schema_bound_keys()            # the schema's bound keys are the catalog's
    assert set(keys) - owned == {"topology.rails", "preflight.same_versions"}  # general settings, also bounds
    for key, users in keys.items():
        assert len(users) == 1, (key, users)
        section, name = key.split(".")
        assert name in SCHEMA[section], key


def test_every_suite_names_its_metrics_once():
    for suite in catalog.SUITES.values():
        names = [n for m in suite.metrics for n in m.names if not m.when]
        assert len(names) == len(set(names)), suite.name
        for m in suite.metrics:
            assert m.unit and m.label, (suite.name, m.names)
            assert (m.key is None) == (m.bound in ("none", "zero", "one")), (suite.name, m.names)


def test_the_operations_drivers_and_engines_use_are_the_catalogs():
    """The pairwise operations' metrics exist in every pairwise suite measuring them, every collective
    has its data definition (collective_data.SPECS), and the drivers' and engines' lists are these."""
    from acceptance.drivers import collective, p2p
    from acceptance.engines.collective_data import SPECS
    from acceptance.engines.contract import OPERATIONS
    names = {n for m in catalog.suite("rdma_write").metrics for n in m.names}
    for op in catalog.PAIR_OPS.values():
        assert {op.errors, f"{op.latency_prefix}latency_p50"} <= names, op
        assert op.bandwidth is None or op.bandwidth in names, op
        assert op.noun  # its data check names what one checked operation is
    assert set(p2p.BANDWIDTH_METHODS) == {o.name for o in catalog.PAIR_OPS.values() if o.bandwidth}
    assert set(SPECS) == set(catalog.COLLECTIVES) == set(collective.OPS) == set(catalog.suite("collective").engine_needs)
    assert set(catalog.COLLECTIVES) <= OPERATIONS


def test_roles_come_from_the_catalog():
    assert set(catalog.with_role("trend")) == {("rdma_write", "bandwidth"), ("rdma_write", "read_bandwidth"),
                                              ("rdma_write", "latency_p50"), ("rdma_write", "latency_p99"),
                                              ("collective", "busbw")}
    assert set(catalog.with_role("outlier")) == {("rdma_write", n) for n in (
        "bandwidth", "read_bandwidth", "latency_p50", "latency_p99", "latency_p999")} | {("gpudirect", "bandwidth")}
    assert [s.name for s in catalog.pairwise()] == ["rdma_write", "gpudirect", "perftest"]
    # every role a pairwise metric has is in a pairwise suite
    for role in ("outlier", "heatmap", "curve", "export"):
        assert {s for s, _ in catalog.with_role(role)} <= {s.name for s in catalog.pairwise()}, role
    assert catalog.direction("rdma_write", "bandwidth") is True and catalog.direction("memreg", "reg_time_user") is False


@pytest.mark.parametrize("suite, name, value, size, when", [
    ("rdma_write", "bandwidth", 0.3, 65536, {}),
    ("rdma_write", "bandwidth", 0.6, 65536, {}),
    ("rdma_write", "latency_p50", 2000.0, 8, {}),
    ("memreg", "reg_time_user", 10.0, 4096, {}),
    ("collective", "busbw", 0.001, 1 << 20, {"op": "alltoall", "comm": "node"}),
    ("collective", "busbw", 0.001, 1 << 20, {"op": "allreduce", "comm": "world"}),
    ("incast", "loaded_latency_p99", 5.0, 8, {}),
    ("rdma_write", "pingpong_latency_p50", 5.0, 8, {}),
])
def test_one_value_and_a_frame_are_judged_alike(suite, name, value, size, when):
    profile = load_profile("local")
    threshold, verdict = judge.one(suite, name, value, profile, size, **when)
    frame = pd.DataFrame({"suite": [suite], "metric": [name], "value": [value], "size": [size],
                          "unit": [catalog.metric(suite, name, **when).unit], "detail": [None], "iteration": [0],
                          "threshold": [np.nan], "op": [when.get("op")],
                          "scope": [when.get("comm", "world")]})
    judged = judge.judge_records(frame, profile)
    thresholds, codes = judged.threshold, judged.verdict
    assert judge.VERDICTS[codes[0]] == verdict
    assert (threshold is None and np.isnan(thresholds[0])) or thresholds[0] == pytest.approx(threshold)


def test_the_world_all_reduce_bound_scales_with_the_nics_of_a_node():
    """One NIC's figure for a rail communicator (one NIC per rank); per NIC x topology.rails for the
    world's all-reduce (every NIC of a node at once); the world's all-to-all cannot aggregate NICs."""
    h100 = load_profile("h100-ndr400")
    gib = 1 << 30
    assert judge.one("collective", "busbw", 40.0, h100, gib, op="allreduce", comm="rail") == (
        pytest.approx(41.4), "fail")
    assert judge.one("collective", "busbw", 300.0, h100, gib, op="allreduce", comm="world") == (
        pytest.approx(8 * 37.2), "pass")
    assert judge.one("collective", "busbw", 250.0, h100, gib, op="allreduce", comm="world")[1] == "fail"
    assert judge.one("collective", "busbw", 45.0, h100, gib, op="alltoall", comm="world") == (
        pytest.approx(41.4), "pass")
    frame = pd.DataFrame({"suite": ["collective"] * 3, "metric": ["busbw"] * 3, "value": [250.0, 250.0, 40.0],
                          "size": [gib] * 3, "unit": ["GB/s"] * 3, "detail": [None] * 3, "iteration": [0] * 3,
                          "threshold": [np.nan] * 3, "op": ["allreduce", "alltoall", "allreduce"],
                          "scope": ["world", "world", "rail"]})
    judged = judge.judge_records(frame, h100)
    assert list(judged.threshold) == pytest.approx([8 * 37.2, 41.4, 41.4])
    assert [judge.VERDICTS[c] for c in judged.verdict] == ["fail", "pass", "fail"]


def test_the_line_rate_floor_applies_while_recording_too(tmp_path):
    profile_file = tmp_path / "p.toml"
    profile_file.write_text('extends = "local"\n[analysis]\nline_rate = "400Gbit/s"\n')
    profile = load_profile(profile_file)
    assert judge.one("rdma_write", "bandwidth", 300.0, profile, 8 << 20) == (pytest.approx(360.0), "fail")
    assert judge.one("rdma_write", "bandwidth", 300.0, profile, 4 << 20) == (pytest.approx(0.5), "pass")


def test_record_uses_the_catalog_unit():
    got = []
    threshold, verdict = judge.record(lambda *a, **k: got.append((a, k)), load_profile("local"), "rdma_write",
                                      "bandwidth", 0.1, size=65536, rail=0)
    (args, kwargs), = got
    assert (threshold, verdict) == (pytest.approx(0.5), "fail") and args == ("bandwidth", 0.1, "Gbit/s")
    assert kwargs["threshold"] == pytest.approx(0.5) and kwargs["verdict"] == "fail" and kwargs["size"] == 65536


def test_the_records_doc_lists_every_catalog_metric():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "records.md").read_text()
    for suite in catalog.SUITES.values():
        for m in suite.metrics:
            assert f"| {suite.name} | {', '.join(f'`{n}`' for n in m.names)} |" in text, (suite.name, m.names)


def test_the_docs_the_readme_links_exist():
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    links = set(re.findall(r"\]\((docs/[a-z-]+\.md)\)", readme))
    assert len(links) >= 6
    for link in links:
        assert (root / link).is_file(), link
    cited = set()
    for path in (root / "acceptance").rglob("*.py"):
        cited |= set(re.findall(r"docs/[a-z-]+\.md", path.read_text()))
    for path in (root / "acceptance" / "profiles").glob("*.toml"):
        cited |= set(re.findall(r"docs/[a-z-]+\.md", path.read_text()))
    for link in cited:
        assert (root / link).is_file(), link


def test_every_latency_says_whether_it_is_one_way_or_a_round_trip():
    latencies = [m for s in catalog.SUITES.values() for m in s.metrics if "latency" in m.name]
    assert latencies and all(m.timing in ("one-way", "round trip") and m.unit == "us" for m in latencies), [
        m.names for m in latencies if m.timing is None]
    with pytest.raises(ValueError, match="timing 'both'"):
        catalog.Metric(("x",), "us", False, timing="both")
