"""The path beyond a node's leaf port: a slow cable named with both ends (given the fabric's routes),
or a node's traffic with other leaves slow while its own leaf's is not (given only the switch tree),
decided before a NIC is blamed for it.

InfiniBand forwards by destination: every switch's forwarding table gives one out-port per
destination, so every flow into a node from another leaf comes down the same spine-to-leaf cable,
and one slow cable slows a node's whole inbound traffic from other leaves (and some of its leaf's
outbound flows). To the NIC rules that node receives slowly. What tells them apart is the node's
paths that share no cable with the slow ones: its pairs on its own leaf (and, for a cable, its
other direction). A NIC is blamed only when those are slow too.

With routes (``fabric.routes``: acceptance.switchtree.routes.Routes, its path(src, dst, rail) a
tuple of directed cables, () inside a leaf, None unknown), the bandwidth pair-directions are voted
onto the cables they cross, as network tomography does (007, NSDI'18: a vote per link over the bad
flows; NetBouncer, NSDI'19: links on healthy paths are cleared): each (metric, size, rail, cable) is
judged on its typical crossing pair-direction (the favourable median: more than half of them at
least that bad) by the NIC rule's test and allowance for the comparisons made (judge.Outlier,
typical_tail), so a cable whose crossing flows are mostly healthy is cleared, and a healthy fleet
stays under analysis.false_findings false cables. A flagged cable and a flagged NIC that carry the
same slow pair-directions are told apart by the rest: the NIC's pair-directions that cross no
flagged cable (its own leaf's, its other direction), and the cable's that do not touch the NIC.
Where nothing measured decides, the cable is reported with the NIC as its alternative, and the NIC
is not blamed. Most of a switch's cables flagged are that switch's: a leaf's (or its uplink's) are
left to analysis.tree, which tells them apart by the pairs inside the leaf; another's (a spine's) is
named here, scope switch.

Without routes, a NIC flagged one way only (outliers.nic_outliers, direction tx or rx) whose
pair-directions that way with other leaves are slow and with its own leaf normal is the path beyond
its leaf port: an uplink-scope finding naming the node, its leaf and the direction, never a drain.
With no pair of its own leaf measured, a NIC slow receiving is the same, with its NIC as the
alternative (its inbound from other leaves may all come down one cable); one slow sending is its
NIC (its outbound flows leave by whichever uplink each destination is routed to: no part beyond
the leaf port carries them alone).

Only the higher-is-better (bandwidth) metrics vote: a latency here is half a round trip, both
directions' paths at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..rules import judge
from ..rules.profile import Profile
from ..switchtree.fabric import Fabric
from . import tree
from .base import MIN_GROUP
from .noise import favourable_median, typical_tail, z_of


@dataclass
class PathFault:
    """A slow part beyond a node's leaf port: kind "cable" (named by the routes), "switch" (a spine most
    of whose cables are slow, by the routes) or "beyond" (a node's traffic with other leaves, one
    direction, without routes)."""

    kind: str
    rail: int
    leaf: str | None                 # the finding's switch: the cable's leaf end, the node's leaf, or the switch
    node: int | None = None          # beyond: the node (its code)
    direction: str | None = None     # beyond: "tx" (from the node) or "rx" (into it)
    cables: list[dict] = field(default_factory=list)   # cable: each slow direction (Finding.uplinks entries)
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # its slow rows of `pairs`
    fail: bool = False
    alternatives: list[dict] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)     # its contrast, in words (the finding's first evidence)
    across: tuple[float, int] = (np.nan, 0)            # the typical ratio of its slow side, and its rows
    within: tuple[float, int] = (np.nan, 0)            # beyond: the same node's own-leaf rows (ratio, rows)
    claims: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (rail, s, d) codes it explains


@dataclass
class Located:
    faults: list[PathFault]
    nics: pd.DataFrame               # nic_outliers' flags less the NICs the faults explain
    rows: np.ndarray                 # over `pairs`: the faults' slow rows


def routes_of(fabric: Fabric | None):
    """The fabric's routes (acceptance.switchtree.routes.Routes), None where it has none."""
    return getattr(fabric, "routes", None) if fabric is not None else None


def locate(pairs: pd.DataFrame, nics: pd.DataFrame, names: list[str], fabric: Fabric | None,
           profile: Profile) -> Located:
    """Cables (with routes) and paths beyond a leaf port (without) that explain slow pair-directions,
    and the NIC flags they clear (module docstring)."""
    none = Located([], nics, np.zeros(len(pairs), bool))
    if fabric is None or pairs.empty:
        return none
    from .outliers import family_stats, higher_is_better, nic_rows  # noqa: PLC0415 - outliers imports nothing of this module
    key, med, n, lg, sigma, higher, dof = family_stats(pairs, profile, nic_rows(pairs, nics))
    ok = higher & (n >= MIN_GROUP) & (med > 0) & np.isfinite(lg)
    if not ok.any():
        return none
    # only a bandwidth's flags: a NIC's latency tail is its own, whatever its paths
    by_rate = higher_is_better(nics["metric"].astype(str)) if len(nics) else np.zeros(0, bool)
    ctx = _Context(pairs, key, lg, sigma, dof, ok, names, fabric, profile, _flags(nics[by_rate]))
    faults, cleared = [], set()
    routes = routes_of(fabric)
    routed_rails = set()
    if routes is not None:
        got, gone, routed_rails = _cables(ctx, routes)
        faults += got
        cleared |= gone
    got, gone = _beyond(ctx, skip=routed_rails)
    faults += got
    cleared |= gone
    faults = [f for f in faults if len(f.rows)]
    n_nodes = max(len(names), 1)
    for f in faults:
        f.claims = np.unique((ctx.rail[f.rows] * n_nodes + ctx.s[f.rows]) * n_nodes + ctx.d[f.rows])
    if cleared and len(nics):
        drop = by_rate & np.array([(int(r), int(nd)) in cleared for r, nd in zip(nics["rail"], nics["node"])],
                                  dtype=bool)
        nics = nics.loc[~drop].reset_index(drop=True)
    rows = np.zeros(len(pairs), bool)
    for f in faults:
        rows[f.rows] = True
    return Located(faults, nics, rows)


def _flags(nics: pd.DataFrame) -> dict[tuple[int, int], set[str]]:
    """(rail, node) -> the directions its NIC was flagged in ("both", "tx", "rx"), over every metric,
    and "fail" among them where a flag fails."""
    out: dict[tuple[int, int], set[str]] = {}
    if nics is None or nics.empty:
        return out
    ways = nics["direction"] if "direction" in nics.columns else pd.Series("both", index=nics.index)
    fails = nics["fail"].to_numpy(bool) if "fail" in nics.columns else np.zeros(len(nics), bool)
    for rail, node, way, fail in zip(nics["rail"].to_numpy(np.int64), nics["node"].to_numpy(np.int64), ways, fails):
        got = out.setdefault((int(rail), int(node)), set())
        got.add(str(way))
        if fail:
            got.add("fail")
    return out


@dataclass
class _Context:
    pairs: pd.DataFrame
    fam: np.ndarray          # family code (metric, size, rail) of each row
    lg: np.ndarray           # log ratio to the family's median, negative on the bad side
    sigma: np.ndarray
    dof: np.ndarray
    ok: np.ndarray           # a bandwidth row with a family to judge it against
    names: list[str]
    fabric: Fabric
    profile: Profile
    flags: dict[tuple[int, int], set[str]]

    def __post_init__(self):
        self.s = self.pairs["s"].to_numpy(np.int64)
        self.d = self.pairs["d"].to_numpy(np.int64)
        self.rail = self.pairs["rail"].to_numpy(np.int64)
        self.rule = judge.Outlier(self.profile)

    def slow_rows(self, rows: np.ndarray, typical: float) -> np.ndarray:
        """Those of `rows` as slow as their component must be to be evidence of it (outliers.with_nics'
        measure: at least outlier_min_deviation, or the half rate, and half as slow as it typically is)."""
        enough = max(float(self.rule.enough(True)), (1 - np.exp(typical)) / 2)
        return rows[1 - np.exp(self.lg[rows]) >= enough]


def _slower(off: float, slow: float) -> bool:
    """Whether a typical log ratio `off` sides with the slow one `slow` (< 0) rather than with the fleet
    (0): nearer it than half-way, on a log scale. Where a slowness is, not whether it fails."""
    return off < slow / 2


def _typ(g: np.ndarray) -> float:
    """The favourable median of log ratios (more than half at least this bad); NaN for none."""
    if not len(g):
        return np.nan
    return float(np.sort(g)[len(g) // 2])


def _ratio(x: float) -> str:
    return f"{np.exp(x):.2f}x" if np.isfinite(x) else "-"


# ---- with routes: cables ----------------------------------------------------------------------------

# Long: one vectorized pass over the measured pair-directions: the votes onto cables, their clearing
# by healthy paths and the faults share one set of index arrays (pkey, ids, known), which pieces would pass about.
def _cables(ctx: _Context, routes) -> tuple[list[PathFault], set, set]:
    """(cable faults, NICs they clear as (rail, node), rails whose routes were known)."""
    rows = np.flatnonzero(ctx.ok)
    ids: dict = {}                       # (rail, cable) -> id
    cable_of: list = []
    known = np.zeros(len(ctx.pairs), bool)
    rails = set()
    n_nodes = len(ctx.names)
    pkey = (ctx.rail[rows] * n_nodes + ctx.s[rows]) * n_nodes + ctx.d[rows]
    pid, uniq = pd.factorize(pkey)
    paths = []
    for k in uniq:                       # one route look-up per measured pair-direction
        rail, a, b = int(k // (n_nodes * n_nodes)), int((k // n_nodes) % n_nodes), int(k % n_nodes)
        path = routes.path(ctx.names[a], ctx.names[b], rail)
        if path is not None:
            rails.add(rail)
            coded = []
            for c in path:
                i = ids.get((rail, c))
                if i is None:
                    i = ids[(rail, c)] = len(cable_of)
                    cable_of.append(c)
                coded.append(i)
            path = tuple(coded)
        paths.append(path)
    has = np.array([p is not None for p in paths], dtype=bool)
    known[rows] = has[pid]
    lens = np.array([len(p) if p is not None else 0 for p in paths], dtype=np.int64)
    flat = np.array([c for p in paths if p for c in p], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(lens)[:-1]])
    cnt = lens[pid]
    inc_row = np.repeat(rows, cnt)
    offs = np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    inc_cable = flat[np.repeat(start[pid], cnt) + offs] if len(flat) else np.zeros(0, dtype=np.int64)
    if not len(inc_row):
        return [], set(), rails
    n_cables = len(cable_of)
    # each (family, cable): its crossing pair-directions' favourable median
    grp, guniq = pd.factorize(ctx.fam[inc_row].astype(np.int64) * n_cables + inc_cable)
    g = np.nan_to_num(ctx.lg[inc_row], nan=0.0)
    typ, count = favourable_median(g, grp)
    first = pd.Series(inc_row).groupby(grp).first().to_numpy()
    sigma, dof = ctx.sigma[first], np.nan_to_num(ctx.dof[first], nan=3.0)
    tested = count >= 2
    m = max(int(tested.sum()), 1)
    rule = ctx.rule
    combos, inv = np.unique(np.stack([count.astype(np.float64), dof]), axis=1, return_inverse=True)
    inv = inv.ravel()

    def z(level):
        return np.array([z_of(typical_tail(level.each(m), int(k)), float(df)) if k >= 2 else np.inf
                         for k, df in combos.T])[inv]
    worse = 1 - np.exp(typ)
    warn = tested & rule.beyond(worse, typ, z(rule.warn), sigma, rule.warn)
    half = tested & rule.halved(np.exp(typ))
    strong = tested & rule.beyond(worse, typ, z(rule.fail), sigma, rule.fail)
    flagged = np.flatnonzero(warn | half)
    if not len(flagged):
        return [], set(), rails
    fam_of, cab_of = guniq // n_cables, guniq % n_cables
    crossing: dict[int, np.ndarray] = {}          # flagged group -> its rows
    order = np.argsort(grp, kind="stable")
    bounds = np.searchsorted(grp[order], [flagged, flagged + 1])
    for j, (lo, hi) in zip(flagged, bounds.T):
        crossing[int(j)] = inc_row[order[lo:hi]]
    components = _components(ctx, flagged, cab_of, cable_of, fam_of, crossing)
    # rows crossing a flagged cable, per family: a NIC's rows elsewhere are those crossing none of them
    on_flagged = np.zeros(len(ctx.pairs), bool)
    for j in flagged:
        on_flagged[crossing[int(j)]] = True
    faults: dict = {}
    cleared: set = set()
    for kind, name, js in components:
        r = np.unique(np.concatenate([crossing[j] for j in js]))
        rail = int(ctx.rail[r[0]])
        gc = _typ(ctx.lg[r])
        what = "this cable" if kind == "cable" else f"switch {name}"
        status, lines, alternatives = _nics_on(ctx, r, rail, gc, known, on_flagged, what)
        blamed = {nd for nd, st in status.items() if st in ("confirmed", "unknown")}
        rest = r[~(np.isin(ctx.d[r], list(blamed)) | np.isin(ctx.s[r], list(blamed)))]
        if len(rest):
            if not _slower(_typ(ctx.lg[rest]), gc):
                continue              # cleared: its slow flows are the NICs', its others healthy
            alternatives = []         # slow without the NICs too: named, whatever they are
        elif any(st == "confirmed" for st in status.values()):
            continue                  # explained by the NIC
        cleared |= {(rail, nd) for nd, st in status.items() if st in ("cleared", "unknown")}
        if kind == "leaf":
            continue                  # a leaf's uplink or the leaf: the tree localization names it
        slow = ctx.slow_rows(r, gc)
        if kind == "switch":
            key = (rail, "switch", name)
            fault = faults.setdefault(key, PathFault("switch", rail, name))
            n_dirs = len({cab_of[j] for j in js})
            fault.lines.insert(0, f"{len(slow)} of {len(r)} pair-directions through {n_dirs} of its cable directions "
                                  f"on rail {rail} are slow (typically {_ratio(gc)})")
        else:
            cable = cable_of[cab_of[js[0]]]
            ends = _cable_entry(cable, ctx.fabric.tree(rail))
            key = frozenset((rail, x) for x in cable.undirected())
            fault = faults.setdefault(key, PathFault("cable", rail, ends["leaf"]))
            if ends not in fault.cables:
                fault.cables.append(ends)
                fault.lines.insert(len(fault.cables) - 1,
                                   f"{len(slow)} of {len(r)} pair-directions through {ends['cable']} on rail {rail} "
                                   f"are slow (typically {_ratio(gc)})")
        fault.lines += [x for x in lines if x not in fault.lines]
        fault.alternatives += [a for a in alternatives if a not in fault.alternatives]
        fault.rows = np.union1d(fault.rows, slow)
        fault.fail |= bool(any(strong[j] | half[j] for j in js))
        if not np.isfinite(fault.across[0]) or gc < np.log(fault.across[0]):
            fault.across = (float(np.exp(gc)), int(len(r)))
    return list(faults.values()), cleared, rails


def _nics_on(ctx: _Context, r: np.ndarray, rail: int, gc: float, known: np.ndarray, on_flagged: np.ndarray,
             what: str) -> tuple[dict, list, list]:
    """The flagged NICs whose slow way the rows r carry: each "confirmed" (its pair-directions that way
    crossing no flagged cable are slow too), "cleared" (they are normal) or "unknown" (none measured);
    with the lines and alternatives that say so."""
    status, lines, alternatives = {}, [], []
    fam = ctx.fam[r[0]]
    for node in np.unique(np.concatenate([ctx.d[r], ctx.s[r]])):
        ways = ctx.flags.get((rail, int(node)), set()) - {"fail"}
        rx, tx = bool(ways & {"rx", "both"}), bool(ways & {"tx", "both"})
        if not (((ctx.d[r] == node) & rx) | ((ctx.s[r] == node) & tx)).any():
            continue
        off = np.flatnonzero(ctx.ok & known & (ctx.fam == fam) & ~on_flagged
                             & (((ctx.d == node) & rx) | ((ctx.s == node) & tx)))
        name = ctx.names[int(node)]
        way = "into" if rx and not tx else "from" if tx and not rx else "of"
        if not len(off):
            status[int(node)] = "unknown"
            alternatives.append({"scope": "nic", "switch": None, "node": name, "rail": rail})
            lines.append(f"{name}'s NIC cannot be told from {what}: no pair-direction {way} it that crosses no "
                         f"slow cable was measured (a pair inside its leaf would decide)")
        elif _slower(_typ(ctx.lg[off]), gc):
            status[int(node)] = "confirmed"
        else:
            status[int(node)] = "cleared"
            lines.append(f"{name}'s NIC is cleared: {len(off)} of {len(off)} pair-directions {way} it that cross no "
                         f"slow cable (its own leaf's) are normal (typically {_ratio(_typ(ctx.lg[off]))})")
    return status, lines, alternatives


def _components(ctx: _Context, flagged: np.ndarray, cab_of: np.ndarray, cable_of: list, fam_of: np.ndarray,
                crossing: dict) -> list[tuple[str, str | None, list[int]]]:
    """The flagged (family, cable) groups as components: ("cable", None, [j]) each, except where a switch
    has most of its cables flagged (two or more, at least half of those the measured pairs cross):
    ("leaf", leaf, js) for a leaf of the rail's tree (its uplink or the leaf itself, which the tree
    localization names), ("switch", name, js) for another (a spine)."""
    per: dict = {}            # (family, switch) -> its flagged groups
    for j in flagged:
        c = cable_of[cab_of[j]]
        for end in (c.src, c.dst):
            per.setdefault((int(fam_of[j]), end.switch), []).append(int(j))
    total: dict = {}          # switch -> its physical cables the measured pairs cross
    for c in cable_of:
        for end in (c.src, c.dst):
            total.setdefault(end.switch, set()).add(c.undirected())
    busy = {k: js for k, js in per.items()
            if len({cable_of[cab_of[j]].undirected() for j in js}) >= 2
            and 2 * len({cable_of[cab_of[j]].undirected() for j in js}) >= len(total.get(k[1], ()))}
    out, taken = [], set()
    for (fam, switch), js in sorted(busy.items(), key=lambda kv: -len(kv[1])):
        js = [j for j in js if j not in taken]
        if not js:
            continue
        rail = int(ctx.rail[crossing[js[0]][0]])
        t = ctx.fabric.tree(rail)
        out.append(("leaf" if t is not None and switch in t.leaves else "switch", switch, js))
        taken |= set(js)
    out += [("cable", None, [int(j)]) for j in flagged if int(j) not in taken]
    return out


def _cable_entry(cable, t) -> dict:
    """A cable direction as Finding.uplinks has it: {leaf, spine, leaf_port, spine_port} (the leaf:
    the end the tree has as a leaf, else the source), its direction ("up": leaf to spine, "down") and
    its name with both ends."""
    leaves = set(t.leaves) if t is not None else set()
    down = cable.dst.switch in leaves and cable.src.switch not in leaves
    low, high = (cable.dst, cable.src) if down else (cable.src, cable.dst)
    return {"leaf": str(low.switch), "spine": str(high.switch), "leaf_port": str(low.port),
            "spine_port": str(high.port), "direction": "down" if down else "up", "cable": cable.name()}


# ---- without routes: beyond the leaf port ------------------------------------------------------------

def _beyond(ctx: _Context, skip: set) -> tuple[list[PathFault], set]:
    """Per NIC flagged one way only, on a rail whose tree is known and whose routes are not: its
    pair-directions that way with other leaves against those with its own leaf."""
    faults, cleared = [], set()
    for (rail, node), flags in sorted(ctx.flags.items()):
        ways = flags - {"fail"}
        if rail in skip or "both" in ways or len(ways) != 1:
            continue
        t = ctx.fabric.tree(rail)
        if t is None or not t.leaves:
            continue
        leaf, leaf_names = tree.leaf_codes(t, ctx.names)
        if leaf[node] < 0:
            continue
        way = next(iter(ways))
        end, other = (ctx.s, ctx.d) if way == "tx" else (ctx.d, ctx.s)
        mine = np.flatnonzero(ctx.ok & (ctx.rail == rail) & (end == node) & (leaf[other] >= 0))
        if not len(mine):
            continue
        inside = leaf[other[mine]] == leaf[node]
        across, within = mine[~inside], mine[inside]
        ga, gw = _typ(ctx.lg[across]), _typ(ctx.lg[within])
        flagged = _typ(ctx.lg[mine])
        if not len(across) or not _slower(ga, min(flagged, 0.0)):
            continue                   # its slowness is not the other leaves'
        if len(within) and _slower(gw, ga):
            continue                   # slow on its own leaf too: its NIC
        if not len(within) and way == "tx":
            # a node's outbound flows leave its leaf by whichever uplink each destination is routed to:
            # no part beyond the leaf port carries them alone, so unmeasured at home, it is its NIC
            continue
        name, leaf_name = ctx.names[node], leaf_names[leaf[node]]
        what = "into" if way == "rx" else "from"
        lines = [f"{int((ctx.lg[across] < ga / 2).sum())} of {len(across)} pair-directions {what} {name} "
                 f"{'from' if way == 'rx' else 'to'} other leaves on rail {rail} are slow (typically {_ratio(ga)})"]
        alternatives = []
        if len(within):
            lines.append(f"{len(within)} of {len(within)} pair-directions {what} {name} {'from' if way == 'rx' else 'to'} "
                         f"its own leaf {leaf_name} are normal (typically {_ratio(gw)}): not its NIC")
        else:
            alternatives.append({"scope": "nic", "switch": None, "node": name, "rail": rail})
            lines.append(f"no pair-direction {what} {name} {'from' if way == 'rx' else 'to'} its own leaf "
                         f"{leaf_name} was measured: its NIC cannot be told from the path (a pair inside "
                         f"{leaf_name} would decide)")
        rows = ctx.slow_rows(across, ga)
        faults.append(PathFault("beyond", rail, leaf_name, node=node, direction=way, rows=rows, fail="fail" in flags,
                                alternatives=alternatives, lines=lines, across=(float(np.exp(ga)), len(across)),
                                within=(float(np.exp(gw)) if len(within) else np.nan, len(within))))
        cleared.add((rail, node))
    return faults, cleared
