"""Collection that differs by rank (as with an unseeded set): the plugin must refuse to run."""
import os

import pytest

RANK = int(os.environ.get("PMI_RANK", "0"))
EXTRA = [RANK] if RANK >= 2 else []


@pytest.mark.parametrize("case", ["a", "b", *EXTRA])
def test_case(case):
    pass
