"""Preflight: is the job itself sane before anything is measured?

Memory-lock limit (RDMA registration pins memory), the rank layout (same
ranks per node, every rail on every node), and one software stack across nodes.
"""

import pytest

from acceptance.preflight import (UNLIMITED, layout_problems, memlock_limit, memlock_ok,
                                  odd_ones_out, software_versions)

pytestmark = pytest.mark.preflight


def test_memlock_limit(profile, record):
    minimum = profile.get("preflight.memlock_min")
    limit = memlock_limit()
    ok = memlock_ok(limit, minimum)
    record("memlock", None if limit == UNLIMITED else limit, "bytes",
           threshold=None if minimum == UNLIMITED else minimum,
           verdict="pass" if ok else "fail", detail=UNLIMITED if limit == UNLIMITED else None)
    assert ok, (f"memlock limit (ulimit -l) is {limit} bytes, the profile needs at least {minimum}; "
                f"RDMA memory registration will fail. Set it in /etc/security/limits.conf "
                f"and Slurm's PropagateResourceLimits")


def test_rank_layout(topology, profile, record):
    ranks_by_node = {n: [r.rank for r in topology.ranks_on(n)] for n in topology.nodes}
    rails_by_node = {n: [r.rail for r in topology.ranks_on(n)] for n in topology.nodes}
    problems = layout_problems(ranks_by_node, rails_by_node, profile.get("topology.rails"))
    if topology.rank == 0:
        for node, ranks in ranks_by_node.items():
            record("ranks", len(ranks), "count", nodes=[node], ranks=ranks, rail=None,
                   verdict="fail" if any(p.startswith(f"{node}:") for p in problems) else "pass")
    assert not problems, "rank layout is uneven:\n" + "\n".join(problems)


def test_software_versions_match(topology, profile, record):
    if not profile.get("preflight.same_versions"):
        pytest.skip("profile sets preflight.same_versions = false")
    every = topology.world.allgather((topology.node, software_versions()))
    by_node = dict(every)  # one entry per node: ranks of a node share an install
    per_rank_node = {}
    for node, versions in every:
        if per_rank_node.setdefault(node, versions) != versions:
            by_node[node] = {k: f"{v} (mixed within node)" for k, v in versions.items()}
    problems = odd_ones_out(by_node)
    if topology.rank == 0:
        record("version_mismatches", len(problems), "count", nodes=list(by_node), ranks=[],
               rail=None, threshold=0, verdict="fail" if problems else "pass")
    assert not problems, "software differs between nodes:\n" + "\n".join(problems)
