"""Constants and column helpers shared by the analysis modules."""

from __future__ import annotations

from ..rules.judge import floats, is_value
from ..records.results import VERDICTS as RECORD_VERDICTS


VERDICTS = list(RECORD_VERDICTS)  # category order of the verdict column
INFO = VERDICTS.index("info")
SCOPE_ORDER = {"rail": 0, "switch": 1, "uplink": 2, "node": 3, "nic": 4, "link": 5, "cluster": 6}
EVIDENCE_MAX = 10
MIN_GROUP = 3          # fewest values a fleet-relative (outlier) comparison is made on
MAD_SCALE = 0.6745     # modified z-score: 0.6745 (x - median) / MAD

# Column helpers: the judge's (one implementation).
codes_of, floats_of = is_value, floats
