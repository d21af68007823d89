"""Verdicts and findings: from records to "node07's NIC on rail 3 is 40% slow, drain it".

    results.jsonl --load--> DataFrame --evaluate--> threshold, verdict per record
      --find--> findings (bounds, fleet outliers, localization, other failures, counters,
                burn-in, baseline) --output--> findings.json, drain.txt

One module per step: load, validate (node names), evaluate, outliers (the pairwise view of
every pairwise suite), localize, failures (what is not pairwise), trends (burn-in and
baseline), fleet, wording (how findings read), output, verdict, model (Analysis), detectors (one
function of a shared Context per kind of finding: pairwise, bounds, tests, counters, too few,
burn-in, baseline) and pipeline (analyze(), find(): every detector, in order). Modules share only public names. The method is described for
users in docs/analysis.md.
"""

from .model import Analysis
from .evaluate import DIRECTION, evaluate
from .load import load_records
from .output import drain_lines, write_outputs
from .pipeline import analyze, find
from .trends import compare

__all__ = ["DIRECTION", "Analysis", "analyze", "compare", "drain_lines", "evaluate", "find", "load_records",
           "write_outputs"]
