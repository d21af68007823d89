"""Comparing one measured value with its bound: the record's threshold and verdict."""

from __future__ import annotations


def judge(value: float, bound: float | None, higher_is_better: bool) -> str:
    """'info' without a bound, else 'pass' or 'fail'."""
    if bound is None:
        return "info"
    ok = value >= bound if higher_is_better else value <= bound
    return "pass" if ok else "fail"
