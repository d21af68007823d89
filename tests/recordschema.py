"""Every record a test's run folder holds, checked against docs/record.schema.json (the published
contract), by tests/conftest.py after each test and over every run folder left when a session ends."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "record.schema.json"
# A benchmark's run of millions of records is checked by its first lines: the same writer made them all.
MAX_LINES = 50_000


@lru_cache(maxsize=1)
def validator():
    from jsonschema import Draft202012Validator
    schema = json.loads(SCHEMA.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def problems(results: Path) -> list[str]:
    """'file:line: why' for each record of `results` that breaks the schema (a line cut short at the
    end of the file, a crash mid-write, is not a record)."""
    out = []
    v = validator()
    with open(results, encoding="utf-8", errors="replace") as fh:
        lines = fh.readlines()
    for i, line in enumerate(lines[:MAX_LINES], 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            if i == len(lines) and not line.endswith("\n"):
                continue
            out.append(f"{results}:{i}: not JSON ({e})")
            continue
        for err in v.iter_errors(rec):
            where = "/".join(str(p) for p in err.absolute_path) or "(record)"
            out.append(f"{results}:{i}: {where}: {err.message}")
        if len(out) > 20:
            break
    return out


def folders_problems(root: Path, seen: set, skip: set = frozenset()) -> list[str]:
    """problems() of every results.jsonl under root not yet in `seen`, nor under a folder in `skip`."""
    out = []
    for results in sorted(root.rglob("results.jsonl")):
        if any(str(results).startswith(s + "/") for s in skip):
            continue
        try:
            key = (str(results), results.stat().st_mtime_ns, results.stat().st_size)
        except OSError:
            continue
        if key in seen:
            continue
        seen.add(key)
        out += problems(results)
    return out
