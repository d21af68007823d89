"""The report's incast table reads the sender count from the record's field, never from its prose."""
import pandas as pd

from acceptance.report import sections


def test_incast_senders_come_from_the_records_samples():
    recs = pd.DataFrame([
        {"suite": "incast", "metric": "aggregate_bandwidth", "src": "node1", "rail": 0, "value": 90.0,
         "threshold": None, "verdict": "pass", "detail": "prose that may change", "samples": 3, "unit": "Gbit/s"},
        {"suite": "incast", "metric": "fairness", "src": "node1", "rail": 0, "value": 0.9, "threshold": None,
         "verdict": "pass", "detail": "slowest node4", "samples": 3, "unit": "ratio"},
    ])
    (row,) = sections.incast(recs.drop(columns="samples"), recs["samples"])["rows"]
    assert row["senders"] == "3" and row["slowest"] == "slowest node4"
