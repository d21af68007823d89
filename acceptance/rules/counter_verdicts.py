"""A port counter's change judged: the counters' bounds (Limits, the profile's [counters]), each
change's verdict by the one judge (judge.counter), the problems a suite fails with, the records a
window leaves, and `acceptance counters diff`'s table.

The changes themselves (snapshots, diffs, kinds) are this node's facts: acceptance.host.counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from . import judge
from .bounds import DERIVED
from .schema import SCHEMA
from ..host.counter_kinds import CLASS_OF
from ..host.counters import Delta, DiffResult
from ..records.results import VERDICTS, worst

def _default(key: str):
    """A [counters] key's default, as the profile schema declares it (the only place defaults are set)."""
    field = SCHEMA["counters"][key]
    return None if field.default is None else field.parse(field.default)


@dataclass(frozen=True)
class Limits:
    """The counters' bounds (the profile's [counters]; each default the schema's)."""
    errors_max: int = _default("errors_max")                    # rise an error counter may show in one window
    discards_max: int = _default("discards_max")                # rise of a discard counter above which a port warns
    pause_rate_max: float | None = _default("pause_rate_max")   # pause frames per second; None: recorded only
    cnp_rate_max: float | None = _default("cnp_rate_max")       # CNPs / ECN-marked packets per second
    retransmit_ppm_max: float = _default("retransmit_ppm_max")  # retransmissions per million packets, one window
    pre_fec_ber_max: float = _default("pre_fec_ber_max")        # pre-FEC bit error rate a port fails above
    pre_fec_ber_warn: float | None = _default("pre_fec_ber_warn")  # ... and warns above

    @classmethod
    def from_profile(cls, profile) -> Limits:
        if profile is None:
            return cls()
        return cls(errors_max=profile.get("counters.errors_max"),
                   retransmit_ppm_max=profile.get("counters.retransmit_ppm_max"),
                   pre_fec_ber_max=profile.get("counters.pre_fec_ber_max"),
                   pre_fec_ber_warn=profile.get("counters.pre_fec_ber_warn"),
                   discards_max=profile.get("counters.discards_max"),
                   pause_rate_max=profile.get("counters.pause_rate_max"),
                   cnp_rate_max=profile.get("counters.cnp_rate_max"))

    def keys(self) -> dict:
        """The profile keys these limits stand for (what acceptance.rules.judge.counter reads)."""
        return {"counters.errors_max": self.errors_max, "counters.retransmit_ppm_max": self.retransmit_ppm_max,
                "counters.pre_fec_ber_max": self.pre_fec_ber_max, "counters.pre_fec_ber_warn": self.pre_fec_ber_warn,
                "counters.discards_max": self.discards_max,
                "counters.pause_rate_max": self.pause_rate_max, "counters.cnp_rate_max": self.cnp_rate_max}


def counter_verdict(delta: Delta, limits: Limits) -> str:
    """fail | warn | pass | info for one counter change, by the one judge (acceptance.rules.judge.counter):
    error: fail when it rose by more than errors_max or saturated during the window, warn when it was
    saturated before (its rise cannot be seen), info when it was reset (nothing known), else pass.
    retransmit: as error, per million packets of the port against retransmit_ppm_max; warn when that
    rate is unknown (it rose and the port's packet count is unknown, or it was reset or wrapped).
    pre_fec: fail when its bit error rate is above pre_fec_ber_max, warn above pre_fec_ber_warn or when
    it rose and the bits received are unknown (no rx_bits_phy, and no rate of a port ACTIVE all through).
    discard: warn when it rose by more than discards_max or saturated. pause / cnp: warn when the rate
    exceeds its bound (info without a bound). Every other kind: info; app (an application's own error,
    such as a receive buffer too small) is information by its class, whatever it rose by.
    """
    name, unit, value = judged_as(delta)
    _, code = judge.counter(np.array([name], dtype=object), np.array([unit], dtype=object),
                            np.array([np.nan if value is None else float(value)]),
                            np.array([delta.saturated], dtype=object), limits.keys())
    return VERDICTS[int(code[0])]


def judged_as(delta: Delta) -> tuple[str, str, float | None]:
    """(metric, unit, value) of the record that carries a counter's verdict."""
    if delta.kind in DERIVED:
        suffix, unit, field = DERIVED[delta.kind]
        return delta.name + suffix, unit, getattr(delta, field)
    return delta.name, "count", delta.delta


def _rate_bound(kind: str, limits: Limits) -> float | None:
    return {"pause": limits.pause_rate_max, "cnp": limits.cnp_rate_max,
            "retransmit": limits.retransmit_ppm_max, "pre_fec": limits.pre_fec_ber_max}.get(kind)


def _count_bound(kind: str, limits: Limits) -> int | None:
    return {"error": limits.errors_max, "discard": limits.discards_max}.get(kind)


def _num(x: float) -> str:
    """4200 -> '4,200'; 0.25 -> '0.25'."""
    if x == int(x) or abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _cap(d: Delta) -> str:
    return f"{2 ** d.width - 1} ({d.width}-bit)" if d.width else "its maximum"


def _clear_hint(d: Delta) -> str:
    return f"clear it (perfquery -R -C {d.device} -P {d.port})"


def problems(deltas: Iterable[Delta], limits: Limits, node: str) -> list[str]:
    """One readable line per failing or warning counter, naming node, device and port."""
    lines = []
    for d in deltas:
        verdict = counter_verdict(d, limits)
        if verdict in ("fail", "warn"):
            lines.append(f"{node} {d.device} port {d.port}: {problem(d, limits, verdict)}")
    return lines


def problem(d: Delta, limits: Limits, verdict: str) -> str:
    """What is wrong with one failing or warning counter change (its port aside)."""
    if d.saturated == "during":
        return (f"{d.name} saturated at {_cap(d)} during the window: it rose, by an "
                f"unknown amount; {_clear_hint(d)}")
    if d.saturated == "before":
        return (f"{d.name} saturated at {_cap(d)} before the window: the rise is unknown; "
                f"{_clear_hint(d)}")
    if d.kind == "error":
        why = ("error counters must not rise" if limits.errors_max == 0
               else f"more than the {limits.errors_max:,} allowed")
        return f"{d.name} rose by {d.delta:,} during the window ({why})"
    if d.kind == "retransmit":
        if d.delta is None:
            return (f"{d.name} was reset or wrapped during the window: how far it rose "
                    f"is unknown")
        if d.ppm is None:
            return (f"{d.name} rose by {d.delta:,} during the window, and the port's packet "
                    f"count is unknown: it cannot be judged against the traffic")
        else:
            return (f"{d.name} rose by {d.delta:,} during the window, {_num(d.ppm)} per million "
                    f"of the port's {d.packets:,} packets (more than the "
                    f"{_num(limits.retransmit_ppm_max)} allowed: lost or late packets)")
    if d.kind == "pre_fec":
        if d.delta is None:
            return f"{d.name} was reset or wrapped during the window: its pre-FEC bit error rate is unknown"
        if d.ber is None:
            return (f"{d.name} rose by {d.delta:,} during the window, and the bits received are unknown "
                    f"({d.note.removeprefix('bits received unknown: ')}): its pre-FEC bit error rate "
                    f"cannot be judged")
        failed = verdict == "fail"
        bound = limits.pre_fec_ber_max if failed else limits.pre_fec_ber_warn
        what = ("past what FEC corrects: frames are lost" if failed
                else "FEC still corrects it; the link has less margin than a healthy one")
        return (f"{d.name}: pre-FEC bit error rate {d.ber:.2g} ({d.delta:,} errors in {d.bits:,} bits, "
                f"{d.note}) > {bound:.2g} ({what}: check the cable, transceiver and switch port)")
    if d.kind == "discard":
        return (f"{d.name} rose by {d.delta:,} during the window "
                f"(more than {limits.discards_max:,}: packets dropped on this port)")
    bound = _rate_bound(d.kind, limits)
    what = ("pause frames: the link partner is back-pressuring this port" if d.kind == "pause"
            else "congestion notifications: ECN marks on this port's flows")
    return f"{d.name} {_num(d.rate)}/s > {_num(bound)}/s ({what})"


# ---- records for the suites ---------------------------------------------------
# Every kind but traffic and the unknown: an application's own errors are recorded too (information).
RECORDED_KINDS = ("error", "retransmit", "pre_fec", "discard", "pause", "pause_duration", "cnp", "wait", "app")


def _detail(d: Delta) -> str:
    text = f"{d.device} port {d.port}"
    if d.saturated == "during":
        text += f"; saturated at {_cap(d)} during the window"
    elif d.saturated == "before":
        text += "; saturated before the window"
    elif d.note:
        text += f"; {d.note}"
    return text


def to_records(deltas: Iterable[Delta], limits: Limits, rail_of: Mapping[str, int | None]) -> list[dict]:
    """Keyword dicts for a suite's `record(**kw)`: one per counter of a recorded kind (not data/other).
    An application's own error (kind app) is recorded with verdict info and no bound.

    The count record carries the count bound and verdict for error and discard counters. Pause and
    CNP counters get a second record, name + "_rate" in 1/s, and retransmit counters one named
    name + "_ppm" (per million packets of the port), which carries the bound and the verdict (their
    count record is info). Each carries the counter's device, port and saturation.
    """
    out = []
    for d in deltas:
        if d.kind not in RECORDED_KINDS:
            continue
        verdict = counter_verdict(d, limits)
        common = {"rail": rail_of.get(d.device), "samples": 1, "detail": _detail(d), "device": d.device,
                  "port": d.port, "saturated": d.saturated}
        rated = d.kind in DERIVED
        out.append({"metric": d.name, "value": d.delta, "unit": "us" if d.kind == "pause_duration" else "count",
                    "threshold": _count_bound(d.kind, limits), "verdict": "info" if rated else verdict, **common})
        if rated:
            metric, unit, value = judged_as(d)
            detail = common["detail"] + (f"; {d.packets:,} packets" if d.packets is not None
                                         else f"; {d.bits:,} bits" if d.bits is not None else "")
            out.append({**common, "metric": metric, "value": value, "unit": unit, "detail": detail,
                        "threshold": _rate_bound(d.kind, limits), "verdict": verdict})
    return out


def verdict_of(deltas: Iterable[Delta], limits: Limits) -> str:
    """fail if any counter fails, else warn if any warns, else pass."""
    found = worst(counter_verdict(d, limits) for d in deltas)
    return "pass" if found == "info" else found


def _shown(d: Delta, verdict: str) -> bool:
    return d.delta != 0 or d.saturated is not None or verdict in ("fail", "warn")


def format_diff(deltas: Iterable[Delta], limits: Limits, node: str) -> str:
    """A table of the counters that moved (or are saturated, or judged fail/warn), each with its kind and
    class (fault, congestion, application, traffic: acceptance.host.counter_kinds.CLASS_OF), then the
    problems."""
    deltas = list(deltas) if not isinstance(deltas, DiffResult) else deltas
    seconds = getattr(deltas, "seconds", None) or (deltas[0].seconds if deltas else 0.0)
    rows = []
    for d in deltas:
        verdict = counter_verdict(d, limits)
        if not _shown(d, verdict):
            continue
        if d.saturated:
            change = f"saturated {d.saturated}"
        elif d.delta is None:
            change = d.note or "unknown"
        else:
            change = f"{d.delta:+,}"
        rate = (f"{_num(d.ppm)} ppm" if d.ppm is not None and d.delta
                else f"BER {d.ber:.2g}" if d.ber is not None and d.delta
                else f"{_num(d.rate)}/s" if d.rate is not None and d.delta else "")
        rows.append((d.device, str(d.port), d.name, d.kind, CLASS_OF[d.kind], change, rate, verdict))
    lines = [f"{node}: port counters over {seconds:,.1f} s"]
    if not rows:
        lines.append("no counter moved")
    else:
        head = ("device", "port", "counter", "kind", "class", "delta", "rate", "verdict")
        widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
        right = {1, 5, 6}
        for r in (head, *rows):
            lines.append("  ".join(c.rjust(w) if i in right else c.ljust(w)
                                   for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    found = problems(deltas, limits, node)
    if found:
        lines += ["", "problems:"] + [f"  {p}" for p in found]
    notes = getattr(deltas, "notes", None)
    if notes:
        lines += ["", "notes:"] + [f"  {n}" for n in notes]
    return "\n".join(lines)
