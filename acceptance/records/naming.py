"""Names and numbers as people read them: node2 before node10, ranks 0-3,8."""

from __future__ import annotations

import re
from collections.abc import Iterable

_DIGITS = re.compile(r"(\d+)")


def natural_key(name) -> tuple:
    # re.split with a group alternates text and digits, starting with text, so keys compare element-wise.
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(str(name)))


def compress_ints(values: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8"."""
    nums = sorted({int(v) for v in values})
    if not nums:
        return ""
    ranges, start, prev = [], nums[0], nums[0]
    for k in nums[1:] + [None]:
        if k is not None and k == prev + 1:
            prev = k
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        if k is not None:
            start = prev = k
    return ",".join(ranges)
