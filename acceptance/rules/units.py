"""Units of a profile's values, parsed once so that the rest of the harness sees bytes, seconds and
Gbit/s only, and printed back so that the text parses to the very same value; the hints an error
about a value gives (did_you_mean, toml_text)."""
from __future__ import annotations

import difflib
import json
import re
from decimal import Decimal

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


def did_you_mean(word: str, options) -> str:
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
            raise ValueError(f"{toml_text(text)} has no unit: write a {kind} like {example!r} (units: {accepted})")
        return number * bare
    if unit not in units:
        raise ValueError(f"unknown {kind} unit {unit!r} in {text!r} (accepted: {accepted})"
                         + did_you_mean(unit, units))
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
        raise ValueError(f"expected a positive duration, got {toml_text(text)}")
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


def human_seconds(seconds: float) -> str:
    """Human durations for a person to read (format_duration is what reads back): "0.04 s", "45 s",
    "12 min 5 s", "3 h 12 min", "2 d 4 h"."""
    if seconds < 0.01:
        return "under 0.01 s"
    if seconds < 10:
        return f"{seconds:.2g} s"
    # Round to the smallest unit shown first, so 3599.7 s reads "1 h 0 min", not "59 min 60 s".
    for unit, sub, name, sub_name in ((86400, 3600, "d", "h"), (3600, 60, "h", "min"), (60, 1, "min", "s")):
        whole = round(seconds / sub) * sub
        if whole >= unit:
            return f"{whole // unit} {name} {whole % unit // sub} {sub_name}"
    return f"{round(seconds)} s"


def format_rate(gbits: float, unit: str = "Gbit/s") -> str:
    """Gbit/s as "400Gbit/s", or with unit "GB/s" in bytes ("48GB/s"), exactly."""
    if unit == "GB/s":
        return f"{_plain(Decimal(repr(float(gbits))) / 8)}GB/s"
    return f"{_plain(Decimal(repr(float(gbits))))}Gbit/s"


def toml_key(key: str) -> str:
    """A table key as TOML writes it: bare where it may be, else quoted."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)



def toml_text(raw) -> str:
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
