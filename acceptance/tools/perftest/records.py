"""perftest's numbers as records of suite perftest, beside the harness's own."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .parse import BwResult, LatResult
from ...rules import judge

SUITE = ENGINE = "perftest"


def records_for(bw: BwResult | None, lat: LatResult | None, common: Mapping[str, Any]) -> list[dict]:
    """The fields of one direction's records (metric, value and what else each carries).

    `common` gives rail, nodes ([client = writer, server]) and ranks. The catalog gives unit and
    bound (suite perftest: information, no bound): the harness's own suites carry the verdicts.
    """
    base = {"engine": ENGINE, **common}
    out = []
    if bw is not None:
        peak = (f"peak {bw.peak_gbps:.2f} Gbit/s" if bw.peak_gbps > 0
                else "peak not measured (perftest skips it with -D or over 20000 iterations)")
        out.append({**base, "metric": "bandwidth", "value": bw.avg_gbps, "size": bw.size,
                    "samples": bw.iterations,
                    "detail": f"ib_write_bw average; {peak}, {bw.iterations} iterations, "
                              f"{bw.msg_rate_mpps:.6f} Mpps"})
    if lat is not None:
        m = lat.samples
        spread = f"t_min {lat.t_min_us:.2f} us, t_max {lat.t_max_us:.2f} us, t_stdev {lat.t_stdev_us:.2f} us"
        median = f"ib_write_lat t_typical (median) of {m} samples, each half a ping-pong round trip"
        rows = (("latency_p50", lat.t_typical_us, f"{median}; {spread}"),
                ("latency_p99", lat.p99_us, f"ib_write_lat 99% percentile of {m} samples{_tail_note(m, 0.99)}"),
                ("latency_p999", lat.p999_us,
                 f"ib_write_lat 99.9% percentile of {m} samples{_tail_note(m, 0.999)}"),
                ("latency_avg", lat.t_avg_us, f"ib_write_lat t_avg of {m} samples"))
        for metric, value, detail in rows:
            out.append({**base, "metric": metric, "value": value, "size": lat.size,
                        "samples": m, "detail": detail})
    return out


def record_results(record: Callable, profile, bw: BwResult | None, lat: LatResult | None,
                   common: Mapping[str, Any]) -> None:
    """Record one direction's numbers through the one judge (record: the suite's recorder)."""
    for fields in records_for(bw, lat, common):
        judge.record(record, profile, SUITE, fields.pop("metric"), fields.pop("value"), **fields)


def _tail_note(m: int, p: float) -> str:
    """Why a perftest percentile of m samples is weak, as the harness words it (docs/methodology.md §5:
    n >= 100 / (1 - p)); perftest's index is ceil(p * m) of the m kept, so from m < 1 / (1 - p)
    on it is the largest kept sample, t_max."""
    need = round(100 / (1 - p))
    if m and math.ceil(p * m) >= m:
        return f": too few for it, so it is perftest's t_max (needs -n {need + 3})"
    if m < need:
        return f", fewer than the {need} it needs: read it as a lower bound"
    return ""
