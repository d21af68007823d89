"""Words and numbers of findings: how a value, a change and a bound are said (the finding itself is
acceptance.analysis.finding)."""

from __future__ import annotations

import math

from ..rules import catalog
from .evaluate import DIRECTION, OUTLIER_METRICS


def fmt_value(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}".rstrip("0").rstrip(".") if abs(x) >= 10 else f"{x:.3g}"
    return f"{x:.3g}"


def size_text(size) -> str:
    return "" if size is None or (isinstance(size, float) and math.isnan(size)) else f" {int(size)} B"


# What one checked operation of a data-check metric is (the catalog's Metric.nouns).
DATA_NOUNS = catalog.data_nouns()


def _count(x) -> int | None:
    try:
        return None if x is None or math.isnan(float(x)) else int(x)
    except (TypeError, ValueError):
        return None


def data_loss(metric: str, value, ops=None, failed=None, missing=None, size=None, suite: str | None = None,
              op: str | None = None) -> str:
    """A data check's record in words, from its fields: "3 of 40 writes did not arrive; 1 more arrived
    wrong (12 wrong bytes at 4096 B)"; without operation counts, the wrong bytes alone."""
    collective = suite in catalog.suite_names(communicators=True)  # a communicator's: elements of its op
    noun = f"{op or suite} operations" if collective else DATA_NOUNS.get(metric, "operations")
    shown = str(int(value)) if _count(value) is not None and float(value) == int(value) else fmt_value(value)
    what = f"{shown} wrong {'elements' if collective else 'bytes'}{(' at' + size_text(size)) if size_text(size) else ''}"
    ops, failed, missing = _count(ops), _count(failed), _count(missing) or 0
    if not ops or not failed:
        return what
    parts = [f"{missing} of {ops} {noun} did not arrive"] if missing else []
    if failed - missing:
        parts.append(f"{failed - missing}{' more' if missing else f' of {ops} {noun}'} arrived wrong")
    return f"{'; '.join(parts)}: {what}"


METRIC_PRIORITY = catalog.priorities()  # the catalog's Metric.priority


def how_phrase(kind: str, metric: str, value: float, expected: float, unit: str, size, higher: bool | None,
         median_known: bool, how: str | None = None, basis: str | None = None) -> tuple[str, str]:
    """(phrase, detail): ('is 43% slow', '212.0 vs median 371.2 Gbit/s, bandwidth at 4194304 B')."""
    at = f"{metric} at{size_text(size)}" if size_text(size) else metric
    unit = unit or ""
    pct = _pct_worse(value, expected, higher)
    if kind == "drift" and basis == "history":
        return (f"drifted {pct:.0%} worse than its history",
                f"{at}: {fmt_value(expected)} -> {fmt_value(value)} {unit}".rstrip())
    if kind == "drift":
        return (f"drifted {pct:.0%} worse over the burn-in",
                f"{at}: {fmt_value(expected)} -> {fmt_value(value)} {unit}".rstrip())
    if kind == "instability":
        return "is unstable across burn-in iterations", f"{at}: CV {value:.0%} > {expected:.0%}"
    if kind == "regression":
        return (f"regressed {pct:.0%} against the baseline",
                f"{at}: {fmt_value(value)} vs {fmt_value(expected)} {unit}".rstrip())
    if metric in DATA_NOUNS:
        return "corrupts data", data_loss(metric, value, size=size)
    which = "fleet bound" if how == "fleet" else "bound"
    if median_known:
        ref = "vs median"
    else:
        ref = f"< {which}" if higher is not False else f"> {which}"
    why = f" ({basis})" if basis and not median_known else ""
    if higher is False:
        return (f"has {pct:.0%} higher {metric}" if median_known else f"exceeds its {metric} {which} by {pct:.0%}",
                f"{fmt_value(value)} {ref} {fmt_value(expected)} {unit}{why}"
                f"{(' at' + size_text(size)) if size_text(size) else ''}")
    return (f"is {pct:.0%} slow" if median_known else f"is {pct:.0%} below its {metric} {which}",
            f"{fmt_value(value)} {ref} {fmt_value(expected)} {unit}{why}, {at}")


def fleet_basis(how, factor, centre, population, peers, unit) -> str | None:
    """How a fleet-relative bound was derived, in words: "0.5 x 0.061 Gbit/s, the median of the 3 other
    measurements of all pairs"; for too small a population, why there was none (None: not a fleet bound)."""
    if how == "fleet_too_few":
        return f"no fleet bound: {int(population or 0)} comparable measurement(s) of {peers}, too few"
    if how != "fleet":
        return None
    unit = unit if isinstance(unit, str) else ""
    return (f"{factor:g} x {fmt_value(centre)} {unit}, the median of the {int(population) - 1} other measurements "
            f"of {peers}").replace("  ", " ")


def _pct_worse(value: float, expected: float, higher: bool | None) -> float:
    if not expected or not math.isfinite(expected) or not math.isfinite(value):
        return 0.0
    return (expected - value) / expected if higher is not False else (value - expected) / expected


def evidence_line(kind: str, row, names: list[str]) -> str:
    where = f"{names[row.s]} -> {names[row.d]} rail {row.rail}, {row.metric}{size_text(row.size)}"
    unit = row.unit if isinstance(row.unit, str) else ""
    if kind == "drift":
        over = "against its history" if getattr(row, "basis", None) == "history" else "over the burn-in"
        return f"{where}: {fmt_value(row.expected)} -> {fmt_value(row.value)} {unit} ({change_text(row.value, row.expected)}) {over}"
    if kind == "instability":
        return f"{where}: CV {row.value:.0%} across iterations (mean {fmt_value(row.median)} {unit})"
    if kind == "regression":
        return f"{where}: {fmt_value(row.value)} vs baseline {fmt_value(row.expected)} {unit} ({change_text(row.value, row.expected)})"
    if row.metric in DATA_NOUNS:
        return (f"{where}: {data_loss(row.metric, row.value, getattr(row, 'ops', None), getattr(row, 'ops_failed', None), getattr(row, 'ops_missing', None))}"
                " (must be 0)")
    parts = []
    if not math.isnan(row.median):
        parts.append(f"{fmt_value(row.value)} {unit} vs median {fmt_value(row.median)} ({change_text(row.value, row.median)})")
    if not math.isnan(row.bound):
        higher = OUTLIER_METRICS.get(row.metric, DIRECTION.get((catalog.primary(), row.metric), True))
        rel = "<" if higher is not False else ">"
        basis = getattr(row, "basis", None)
        which = "fleet bound" if getattr(row, "how", None) == "fleet" else "bound"
        parts.append((f"{fmt_value(row.value)} {unit} {rel} {which} {fmt_value(row.bound)}" if not parts
                      else f"{which} {fmt_value(row.bound)}") + (f" ({basis})" if isinstance(basis, str) else ""))
    return f"{where}: {'; '.join(parts)}"


def change_text(value: float, reference: float) -> str:
    """Signed relative change of value against reference, as '-43%' or '+70%'."""
    if not reference or not math.isfinite(reference) or not math.isfinite(value):
        return "n/a"
    return f"{value / reference - 1:+.0%}"


def capped(lines: list[str], total: int) -> list[str]:
    return lines + ([f"and {total - len(lines)} more"] if total > len(lines) else [])
