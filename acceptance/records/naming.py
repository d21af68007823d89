"""Node names sorted as people read them: node2 before node10."""

from __future__ import annotations

import re

_DIGITS = re.compile(r"(\d+)")


def natural_key(name) -> tuple:
    # re.split with a group alternates text and digits, starting with text, so keys compare element-wise.
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(str(name)))
