"""Which engine measures a suite: the profile's run.engine, or for `auto` the best one usable.

`auto` prefers the verbs engine (the NICs themselves) and falls back to mpi; a
suite needs something (its engine_needs in acceptance.rules.catalog, e.g. "PairLink"), and an engine whose
OFFERS (acceptance.engines.contract) lack it is passed over (the verbs engine has no collectives:
they run on mpi). The
choice is agreed over the whole job, so every rank measures with the same engine
and a node without RDMA devices makes the job fall back (named in the reason)
instead of measuring half the pairs one way and half the other.
"""

from __future__ import annotations

import importlib

BUILT = ("verbs", "nccl", "mpi")
PREFERENCE = {"auto": ("verbs", "nccl", "mpi"), "verbs": ("verbs",), "mpi": ("mpi",), "nccl": ("nccl",)}

# name -> engine class, filled by @register as each engine's module is imported (on first use: an
# engine's module may need what another machine lacks, pyverbs or cupy).
ENGINES: dict[str, type] = {}
_made: dict[str, object] = {}  # name -> this process's engine: one per process, holding its set-up


def register(cls: type) -> type:
    """Class decorator: the engine class of its NAME (ReFrame's @register_launcher, for engines)."""
    if cls.NAME in ENGINES and ENGINES[cls.NAME] is not cls:
        raise ValueError(f"engine {cls.NAME!r} registered twice: {ENGINES[cls.NAME]} and {cls}")
    ENGINES[cls.NAME] = cls
    return cls


def engine(name: str):
    """This process's engine `name` (one instance per process), importing its module on first use;
    ImportError when the module does not import, KeyError when it registers no engine of that name."""
    if name not in _made:
        importlib.import_module(f"{__package__}.{name}")
        _made[name] = ENGINES[name]()
    return _made[name]


def _load(name: str, needs: tuple[str, ...]):
    """(engine or None, usable here, why, what it lacks of `needs`). The engine is None when it cannot
    do what the suite needs."""
    if name not in BUILT:
        return None, False, (f"engine {name!r} is not part of this version (built: {', '.join(BUILT)}); "
                             f"set run.engine = \"auto\" in the profile"), []
    try:
        made = engine(name)
    except ImportError as e:
        return None, False, f"the {name} engine does not import: {e}", []
    lacks = [n for n in needs if n not in made.OFFERS]  # what it declares (acceptance.engines.contract)
    if lacks:
        return None, False, f"the {name} engine has no {', '.join(lacks)}", lacks
    ok, detail = made.available()
    return made, ok, detail, []


def probe(name: str) -> tuple[bool, str]:
    """(usable here, what was found or why not) of one built engine, as it says itself (its
    available()): what `acceptance doctor` prints."""
    return _load(name, ())[1:3]


def local_choices(choice: str, needs: tuple[str, ...] = ()) -> list[tuple[str, bool, str]]:
    """(engine, usable here, why) for each engine the choice allows that can do `needs`, best first.

    Under `auto` an engine without what the suite needs is not a candidate at all (the
    verbs engine for collectives); asked for by name, it is one that cannot be used.
    """
    out = []
    for name in PREFERENCE.get(choice, (choice,)):
        _, ok, why, lacks = _load(name, needs)
        if lacks and choice == "auto":
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


def agree(choice: str, needs: tuple[str, ...], comm, node: str):
    """(engine or None, why, engine name). Collective over `comm`: the same answer on every rank."""
    mine = local_choices(choice, needs)
    name, why = decide(choice, comm.allgather((node, mine)))
    return (engine(name) if name else None), why, name


def select(choice: str, needs: tuple[str, ...] = ()):
    """This process alone (no agreement): the engine, or None and the reason."""
    name, why = decide(choice, [("this node", local_choices(choice, needs))])
    return (engine(name) if name else None), why
