"""The report's sections: from an Analysis to small, pre-formatted template contexts.

Each builder returns plain dicts and lists of strings (the template only lays them
out) and caps every table, worst first, so the page stays small at any cluster size.

Which module builds which section: verdict (summary, findings, drain_file, failing_records, fleet),
maps (heatmaps), trees (fabric_trees), measures (sweeps, collectives, counters, incast, crosscheck),
trends (burnin, deltas, history), environment (environment); common holds what several of them use
(the tables' caps, more, where_words, topology_nodes, pairwise).
"""
from __future__ import annotations

from .environment import environment
from .maps import heatmaps
from .measures import collectives, counters, crosscheck, incast, sweeps
from .trees import fabric_trees
from .trends import burnin, deltas, history
from .verdict import drain_file, failing_records, findings, fleet, summary

__all__ = ["summary", "findings", "drain_file", "failing_records", "fleet", "heatmaps", "fabric_trees", "sweeps",
           "collectives", "burnin", "deltas", "counters", "incast", "crosscheck", "environment", "history"]
