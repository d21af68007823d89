"""Which engine measures a suite: the profile's run.engine, or for `auto` the best one usable.

`auto` prefers the verbs engine (the NICs themselves) and falls back to mpi; a
suite needs something (its engine_needs in acceptance.spec.catalog, e.g. "PairLink"), and an engine whose
OFFERS (acceptance.engines.contract) lack it is passed over (the verbs engine has no collectives:
they run on mpi). The
choice is agreed over the whole job, so every rank measures with the same engine
and a node without RDMA devices makes the job fall back (named in the reason)
instead of measuring half the pairs one way and half the other.
"""

from __future__ import annotations

import importlib
from types import ModuleType

BUILT = ("verbs", "nccl", "mpi")
PREFERENCE = {"auto": ("verbs", "nccl", "mpi"), "verbs": ("verbs",), "mpi": ("mpi",), "nccl": ("nccl",)}


def _load(name: str, needs: tuple[str, ...]) -> tuple[ModuleType | None, bool, str]:
    """(module or None, usable here, why). The module is None when it cannot do what the suite needs."""
    if name not in BUILT:
        return None, False, (f"engine {name!r} is not part of this version (built: {', '.join(BUILT)}); "
                             f"set run.engine = \"auto\" in the profile")
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ImportError as e:
        return None, False, f"the {name} engine does not import: {e}"
    lacks = [n for n in needs if n not in module.OFFERS]  # what it declares (acceptance.engines.contract)
    if lacks:
        return None, False, f"the {name} engine has no {', '.join(lacks)}"
    ok, detail = module.available()
    return module, ok, detail


def probe(name: str) -> tuple[bool, str]:
    """(usable here, what was found or why not) of one built engine, as it says itself (its
    available()): what `acceptance doctor` prints."""
    return _load(name, ())[1:]


def local_choices(choice: str, needs: tuple[str, ...] = ()) -> list[tuple[str, bool, str]]:
    """(engine, usable here, why) for each engine the choice allows that can do `needs`, best first.

    Under `auto` an engine without what the suite needs is not a candidate at all (the
    verbs engine for collectives); asked for by name, it is one that cannot be used.
    """
    out = []
    for name in PREFERENCE.get(choice, (choice,)):
        module, ok, why = _load(name, needs)
        if module is None and choice == "auto" and why.startswith(f"the {name} engine has no "):
            continue
        out.append((name, ok, why))
    return out


def decide(choice: str, per_rank: list[tuple[str, list[tuple[str, bool, str]]]]) -> tuple[str | None, str]:
    """The engine every rank can use, and why: per_rank is [(node, local_choices(...))] of every rank."""
    passed_over = []
    names = [name for name, _, _ in per_rank[0][1]] if per_rank else []
    for name in names:
        bad: dict[str, list[str]] = {}
        detail = ""
        for node, choices in per_rank:
            _, ok, why = next(c for c in choices if c[0] == name)
            if ok:
                detail = detail or why
            elif node not in bad.setdefault(why, []):
                bad[why].append(node)
        if not bad:
            reason = f"{name} engine ({detail})"
            if passed_over:
                reason += "; passed over: " + "; ".join(passed_over)
            return name, reason
        nodes_why = "; ".join(f"{why} on {_nodes(nodes)}" for why, nodes in bad.items())
        passed_over.append(f"{name}: {nodes_why}")
    return None, "no usable engine: " + ("; ".join(passed_over) or f"none of {choice!r} can run this suite")


def _nodes(nodes: list[str]) -> str:
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    return f"node(s) {shown}"


def agree(choice: str, needs: tuple[str, ...], comm, node: str) -> tuple[ModuleType | None, str, str | None]:
    """(engine module or None, why, engine name). Collective over `comm`: the same answer on every rank."""
    mine = local_choices(choice, needs)
    name, why = decide(choice, comm.allgather((node, mine)))
    module = importlib.import_module(f"{__package__}.{name}") if name else None
    return module, why, name


def select(choice: str, needs: tuple[str, ...] = ()) -> tuple[ModuleType | None, str]:
    """This process alone (no agreement): the engine module, or None and the reason."""
    name, why = decide(choice, [("this node", local_choices(choice, needs))])
    return (importlib.import_module(f"{__package__}.{name}") if name else None), why
