"""The types of a profile's keys (acceptance.rules.schema): each checks and converts what the TOML
says, with its default and help, and prints it back as TOML."""
from __future__ import annotations

import json

from .units import (
    did_you_mean,
    format_duration,
    format_rate,
    format_size,
    parse_duration,
    parse_rate,
    parse_size,
    toml_key,
    toml_text,
)


def _at_least(value, minimum, raw):
    if minimum is not None and value < minimum:
        raise ValueError(f"must be >= {minimum}, got {toml_text(raw)}")
    return value


class Field:
    """One key: its default (as written in TOML), how to check and convert it, how to print it."""

    expected = "a value"
    types: tuple = ()
    is_bound = False  # a metric's bound (see bound() and acceptance.rules.catalog)

    def __init__(self, default, help: str = ""):
        self.default, self.help = default, help

    def parse(self, raw):
        # TOML true is a Python int; a bool is only accepted where asked for.
        if not isinstance(raw, self.types) or (isinstance(raw, bool) and bool not in self.types):
            raise ValueError(f"expected {self.expected}, got {toml_text(raw)}")
        return self.convert(raw)

    def convert(self, raw):
        return raw

    def to_toml(self, value) -> str:
        return json.dumps(value, ensure_ascii=False)  # JSON strings are valid TOML basic strings


class Str(Field):
    expected, types = "a string", (str,)

    def __init__(self, default, choices=None, help=""):
        super().__init__(default, help)
        self.choices = choices

    def convert(self, raw):
        if self.choices and raw not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}, got {toml_text(raw)}"
                             + did_you_mean(raw, self.choices))
        return raw


class StrList(Field):
    """A list of distinct strings, each one of `choices`."""
    expected, types = "a list of strings", (list,)

    def __init__(self, default, choices, help=""):
        super().__init__(default, help)
        self.choices = choices

    def convert(self, raw):
        for item in raw:
            if not isinstance(item, str) or item not in self.choices:
                raise ValueError(f"each must be one of {', '.join(self.choices)}, got {toml_text(item)}"
                                 + (did_you_mean(item, self.choices) if isinstance(item, str) else ""))
        if len(set(raw)) != len(raw):
            raise ValueError(f"names a check twice: {toml_text(raw)}")
        return list(raw)


class Int(Field):
    expected, types = "an integer", (int,)

    def __init__(self, default, min=0, help=""):
        super().__init__(default, help)
        self.min = min

    def convert(self, raw):
        return _at_least(raw, self.min, raw)

    def to_toml(self, value):
        return str(value)


class Float(Field):
    expected, types = "a number", (int, float)

    def __init__(self, default, min=0, help="", below=None):
        super().__init__(default, help)
        self.min, self.below = min, below

    def convert(self, raw):
        value = _at_least(float(raw), self.min, raw)
        if self.below is not None and value >= self.below:
            raise ValueError(f"must be < {self.below}, got {toml_text(raw)}")
        return value

    def to_toml(self, value):
        return repr(float(value))


class Bool(Field):
    expected, types = "true or false", (bool,)

    def to_toml(self, value):
        return "true" if value else "false"


class Size(Field):
    """Bytes (int); with allow_unlimited also the string "unlimited"."""

    types = (str, int)

    def __init__(self, default, allow_unlimited=False, help=""):
        super().__init__(default, help)
        self.allow_unlimited = allow_unlimited
        self.expected = 'a size with its unit, like "8MiB"' + (' or "unlimited"' if allow_unlimited else "")

    def convert(self, raw):
        if self.allow_unlimited and raw == "unlimited":
            return raw
        return _at_least(parse_size(raw, bare=False), 0, raw)

    def to_toml(self, value):
        return json.dumps(value if value == "unlimited" else format_size(value))


class Duration(Field):
    """Seconds (float)."""

    expected, types = 'a duration with its unit, like "120s" or "5us"', (str, int, float)

    def __init__(self, default, min=0, positive=False, help=""):
        super().__init__(default, help)
        self.min, self.positive = min, positive

    def convert(self, raw):
        value = _at_least(parse_duration(raw, bare=False), self.min, raw)
        if self.positive and value <= 0:
            raise ValueError(f"must be more than 0, got {toml_text(raw)}")
        return value

    def to_toml(self, value):
        return json.dumps(format_duration(value), ensure_ascii=False)


class Rate(Field):
    """Gbit/s (float); a unit is required since "400" could be bits or bytes.

    `unit` only sets how it is shown: "GB/s" for collectives, as nccl-tests prints them.
    """

    expected, types = 'a rate like "400Gbit/s" or "48GB/s"', (str,)

    def __init__(self, default, unit="Gbit/s", help=""):
        super().__init__(default, help)
        self.unit = unit

    def convert(self, raw):
        return _at_least(parse_rate(raw), 0, raw)

    def to_toml(self, value):
        return json.dumps(format_rate(value, self.unit))


class EngineMap(Field):
    """A table of suite = engine name, e.g. { rdma_write = "verbs", collective = "nccl" }."""

    expected, types = "a table of suite = engine", (dict,)
    ENGINES = ("mpi", "verbs", "nccl")

    def convert(self, raw):
        from .catalog import SUITES
        for suite, name in raw.items():
            if suite not in SUITES:
                raise ValueError(f"{suite}: not a suite (suites: {', '.join(SUITES)})")
            if name not in self.ENGINES:
                raise ValueError(f"{suite}: expected one of {', '.join(self.ENGINES)}, got {toml_text(name)}")
        return dict(raw)

    def to_toml(self, value):
        items = ", ".join(f"{toml_key(k)} = {json.dumps(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"


class StrIntMap(Field):
    """A table of name = integer >= 0, e.g. NIC name -> rail."""

    expected, types = "a table of name = integer", (dict,)

    def convert(self, raw):
        for name, number in raw.items():
            if isinstance(number, bool) or not isinstance(number, int):
                raise ValueError(f"{name}: expected an integer, got {toml_text(number)}")
            if number < 0:
                raise ValueError(f"{name}: must be >= 0, got {number}")
        return dict(raw)

    def to_toml(self, value):
        items = ", ".join(f"{toml_key(k)} = {v}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"


def _by_size(raw: dict, value, where: str = "") -> list:
    """{size: v} -> [[bytes, value(size, v)], ...] sorted by size; a bad size is named (after `where`)."""
    pairs = []
    for size, v in raw.items():
        try:
            nbytes = parse_size(size, bare=False)
        except ValueError as e:
            raise ValueError(f"{where}{size!r}: {e}") from None
        pairs.append([nbytes, value(size, v)])
    return sorted(pairs)


class SizeMap(Field):
    """Bounds by message size: { "8B" = ..., "1MiB" = ... }; each applies from its size up to the next.

    Stored as [[bytes, value], ...] sorted by size (JSON-friendly); acceptance.rules.judge.size_bound reads it.
    """

    types = (dict,)

    def __init__(self, inner: Field, default=None, help=""):
        super().__init__({} if default is None else default, help)
        self.inner = inner
        self.expected = f'a table of size = bound, e.g. {{ "8B" = ..., "1MiB" = ... }} with {inner.expected} bounds'

    def convert(self, raw):
        def bound(size, value):
            try:
                return self.inner.parse(value)
            except ValueError as e:
                raise ValueError(f"{size}: {e}") from None
        return _by_size(raw, bound)

    def to_toml(self, value):
        items = ", ".join(f"{json.dumps(format_size(n))} = {self.inner.to_toml(v)}" for n, v in value)
        return f"{{ {items} }}" if items else "{}"


class FactorMap(Field):
    """Fleet-relative bounds: { "suite.metric" = factor }, a key may be a pattern ("rdma_write.latency_p5*").

    A higher-is-better metric's factor is the fraction (0 < f < 1) of its population's centre below
    which a value fails; a lower-is-better metric's is the multiple (f > 1) above which it fails. A
    factor may also be a table by message size ({ "4KiB" = 0.5 }: from 4 KiB up; smaller sizes have
    no fleet bound), as the other bounds by size. Every key must name at least one catalog metric that
    can be judged against the fleet, all of one direction. Stored as [[pattern, factor or
    [[bytes, factor], ...]], ...] in the order written.
    """

    expected, types = 'a table of "suite.metric" = factor, e.g. { "rdma_write.bandwidth" = 0.5 }', (dict,)

    @staticmethod
    def _factor(pattern: str, factor, higher: bool):
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise ValueError(f"{pattern}: expected a number or a table of size = number, got {toml_text(factor)}")
        if higher and not 0 < factor < 1:
            raise ValueError(f"{pattern}: higher is better, so its factor is the fraction of the fleet's "
                             f"centre below which a value fails: more than 0 and less than 1, got {toml_text(factor)}")
        if not higher and not factor > 1:
            raise ValueError(f"{pattern}: lower is better, so its factor is the multiple of the fleet's "
                             f"centre above which a value fails: more than 1, got {toml_text(factor)}")
        return float(factor)

    def convert(self, raw):
        from . import catalog
        known = [f"{s}.{m}" for s, m, _ in catalog.fleet_metrics("*")]
        out = []
        for pattern, factor in raw.items():
            found = catalog.fleet_metrics(pattern)
            if not found:
                raise ValueError(f"{pattern}: names no metric that can be judged against the fleet "
                                 f"(they are: {', '.join(known)})" + did_you_mean(pattern, known))
            directions = {higher for _, _, higher in found}
            if len(directions) > 1:
                raise ValueError(f"{pattern}: matches metrics where higher is better and metrics where lower "
                                 f"is better ({', '.join(f'{s}.{m}' for s, m, _ in found)}); name them apart")
            higher = directions.pop()
            if isinstance(factor, dict):
                out.append([pattern, _by_size(factor, lambda size, f: self._factor(f"{pattern}: {size}", f, higher),
                                              where=f"{pattern}: ")])
            else:
                out.append([pattern, self._factor(pattern, factor, higher)])
        return out

    def to_toml(self, value):
        def one(f):
            if isinstance(f, list):
                return "{ " + ", ".join(f"{json.dumps(format_size(n))} = {v!r}" for n, v in f) + " }"
            return repr(f)
        items = ", ".join(f"{json.dumps(k)} = {one(v)}" for k, v in value)
        return f"{{ {items} }}" if items else "{}"
