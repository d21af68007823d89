"""Facts a preflight check compares across ranks and nodes (no pytest here)."""

from __future__ import annotations

import platform
import resource
from collections import Counter
from typing import Mapping

UNLIMITED = "unlimited"


def software_versions() -> dict[str, str]:
    """Versions that must match on every node of one job."""
    import mpi4py
    import pytest
    from mpi4py import MPI

    from .. import __version__
    return {
        "python": platform.python_version(),
        "mpi4py": mpi4py.__version__,
        # Open MPI's string ends in the C string's NUL.
        "mpi_library": MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0].strip(),
        "pytest": pytest.__version__,
        "acceptance": __version__,
    }


def memlock_limit() -> int | str:
    """This process's soft RLIMIT_MEMLOCK in bytes, or "unlimited"."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return UNLIMITED if soft == resource.RLIM_INFINITY else soft


def odd_ones_out(values_by_node: Mapping[str, Mapping[str, str]]) -> list[str]:
    """For each key, the nodes whose value differs from the most common one, as readable lines."""
    return [line for _, line in differing(values_by_node)]


def differing(values_by_node: Mapping[str, Mapping[str, str]]) -> list[tuple[str, str]]:
    """For each key, (node, line) for the nodes whose value differs from the most common one."""
    problems = []
    keys = sorted({k for v in values_by_node.values() for k in v})
    for key in keys:
        seen = Counter(v.get(key) for v in values_by_node.values())
        if len(seen) < 2:
            continue
        common, _ = seen.most_common(1)[0]
        for node, values in values_by_node.items():
            if values.get(key) != common:
                problems.append((node, f"{node}: {key} {values.get(key)!r} differs from {common!r} "
                                       f"on {seen[common]} of {len(values_by_node)} nodes"))
    return problems


def layout_problems(ranks_by_node: Mapping[str, list[int]], rails_by_node: Mapping[str, list[int]],
                    expected_rails: int) -> list[str]:
    """Same number of ranks on every node, and rails 0..R-1 on every node.

    expected_rails 0 means one rail per rank on the node.
    """
    problems = []
    counts = Counter(len(r) for r in ranks_by_node.values())
    common, _ = counts.most_common(1)[0]
    for node, ranks in ranks_by_node.items():
        if len(ranks) != common:
            problems.append(f"{node}: {len(ranks)} ranks, but {common} on the other "
                            f"{counts[common]} of {len(ranks_by_node)} nodes")
    for node, rails in rails_by_node.items():
        want = list(range(expected_rails or len(ranks_by_node[node])))
        if sorted(set(rails)) != want:
            problems.append(f"{node}: rails {sorted(set(rails))}, expected {want}")
        dup = sorted(r for r, n in Counter(rails).items() if n > 1)
        if dup:
            problems.append(f"{node}: more than one rank on rail(s) {dup}")
    return problems
