"""Localization: which link, NIC, node, rail plane or the cluster explains the bad pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..switchtree.fabric import Fabric
from ..rules import judge
from ..rules.profile import Profile
from . import tree
from .base import EVIDENCE_MAX
from .evaluate import OUTLIER_METRICS, TREND_DIRECTIONS
from .finding import make_finding
from .wording import (
    DATA_NOUNS,
    METRIC_PRIORITY,
    capped,
    change_text,
    evidence_line,
    fmt_value,
    how_phrase,
    size_text,
    data_loss,
)



def _peel(mu, mv, bu, bv, n_nodes: int, nic_fraction: float, rounds: int = 100):
    """Bad NICs on one rail: worst fraction of bad partners first; a flagged NIC's links stop counting.

    Returns [(node, bad partners, partners)].
    """
    on_rail = np.unique(np.concatenate([mu, mv]))
    flagged = []
    if len(on_rail) < 3 or len(bu) < 2:
        return flagged
    am, ab = np.ones(len(mu), bool), np.ones(len(bu), bool)
    for k in range(rounds):
        deg = np.bincount(mu[am], minlength=n_nodes) + np.bincount(mv[am], minlength=n_nodes)
        badc = np.bincount(bu[ab], minlength=n_nodes) + np.bincount(bv[ab], minlength=n_nodes)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(deg > 0, badc / np.maximum(deg, 1), 0.0)
        cand = (badc >= 2) & (deg >= 2) & (frac >= nic_fraction)
        if not cand.any():
            break
        top = cand if k == rounds - 1 else cand & (frac >= frac[cand].max() - 1e-9)
        flagged += [(int(n), int(badc[n]), int(deg[n])) for n in np.flatnonzero(top)]
        am &= ~(top[mu] | top[mv])
        ab &= ~(top[bu] | top[bv])
    return flagged


@dataclass
class _Owner:
    scope: str
    node: int | None = None
    rail: int | None = None
    peer: int | None = None
    info: dict = field(default_factory=dict)


def localize(bad: pd.DataFrame, measured: pd.DataFrame, names: list[str], profile: Profile, kind: str,
              planes: pd.DataFrame | None = None, fabric: Fabric | None = None,
              nics: pd.DataFrame | None = None, paths: list | None = None) -> list[dict]:
    """Bad pair evidence on the rails' graphs -> switch, uplink (given the tree), rail, node, NIC,
    link (or cluster) findings. `nics` (rail, node[, direction]): NICs already judged bad on their
    typical partner (outliers.nic_outliers), beside those most of whose links are bad. `paths`: slow
    cables and paths beyond a leaf port (analysis.cables.PathFault), which claim their pair-directions
    first."""
    planes = planes if planes is not None else pd.DataFrame(columns=["rail"])
    if bad.empty and planes.empty:
        return []
    n_nodes = max(len(names), 1)
    ahead, pre = _path_owners(bad, paths or [], n_nodes)
    free = np.flatnonzero(~pre)
    network, claimed_free, explained, nic_alts = _tree_step(bad.iloc[free].reset_index(drop=True), measured, names,
                                                            profile, fabric, n_nodes)
    for c in network:
        c.rows = free[c.rows]
    network = ahead + network
    claimed = pre.copy()
    claimed[free[claimed_free]] = True
    rest = np.flatnonzero(~claimed)
    owners, owner = _endpoint_owners(bad.iloc[rest].reset_index(drop=True), measured[~explained], names,
                                     profile, planes, n_nodes, nic_alts, offset=len(network), nics=nics)
    all_owner = np.full(len(bad), -1, dtype=np.int64)
    for i, c in enumerate(network):
        all_owner[c.rows] = i
    all_owner[rest] = owner
    planes = planes[planes["rail"].isin([o.rail for o in owners if o.scope == "rail"])]
    return _findings_from(bad, all_owner, [c.owner for c in network] + owners, names, profile, kind, planes)


@dataclass
class _Network:
    owner: _Owner
    rows: np.ndarray        # the bad rows it explains


def _path_owners(bad: pd.DataFrame, paths: list, n_nodes: int) -> tuple[list[_Network], np.ndarray]:
    """The path faults (analysis.cables) as uplink-scope owners of the bad rows of their pair-directions
    (any metric), and the rows they claim."""
    claimed = np.zeros(len(bad), bool)
    out: list[_Network] = []
    if not paths or bad.empty:
        return out, claimed
    key = (bad["rail"].to_numpy(np.int64) * n_nodes + bad["s"].to_numpy(np.int64)) * n_nodes \
        + bad["d"].to_numpy(np.int64)
    for f in paths:
        rows = np.flatnonzero(np.isin(key, f.claims) & ~claimed)
        if not len(rows):
            continue
        claimed[rows] = True
        out.append(_Network(_Owner("switch" if f.kind == "switch" else "uplink", node=f.node, rail=f.rail, info={
            "kind": f.kind, "name": f.leaf, "direction": f.direction, "uplinks": list(f.cables),
            "alternatives": list(f.alternatives), "lines": list(f.lines), "across": f.across,
            "within": f.within}), rows))
    return out, claimed


def _tree_step(bad: pd.DataFrame, measured: pd.DataFrame, names: list[str], profile: Profile,
               fabric: Fabric | None, n_nodes: int):
    """Switch, uplink and spine explanations on the rails whose tree is known (analysis.tree).

    Returns (network owners, bad rows they claim, measured pairs they explain, NIC alternatives).
    """
    claimed, explained = np.zeros(len(bad), bool), np.zeros(len(measured), bool)
    network: list[_Network] = []
    nic_alts: dict[tuple[int, int], list[dict]] = {}
    if fabric is None or measured.empty:
        return network, claimed, explained, nic_alts
    m_rail, m_u, m_v = (measured[c].to_numpy() for c in ("rail", "u", "v"))
    b_rail = bad["rail"].to_numpy()
    b_u = np.minimum(bad["s"].to_numpy(), bad["d"].to_numpy())
    b_v = np.maximum(bad["s"].to_numpy(), bad["d"].to_numpy())
    bkey = (b_rail * n_nodes + b_u) * n_nodes + b_v
    shares = judge.Shares(profile)
    for rail in np.unique(m_rail):
        t = fabric.tree(int(rail))
        if t is None or not t.leaves:
            continue
        leaf, leaf_names = tree.leaf_codes(t, names)
        sel = np.flatnonzero(m_rail == rail)
        u, v = m_u[sel], m_v[sel]
        mkey = (int(rail) * n_nodes + u) * n_nodes + v
        is_bad = np.isin(mkey, bkey)
        if not is_bad.any():
            continue
        spine = tree.single_spine(t, leaf_names)
        for c in tree.explain_rail(u, v, is_bad, leaf, leaf_names, spine, int(rail),
                                   shares.switch, shares.nic, n_nodes):
            alts = [a.ref(names) for a in c.alternatives]
            if c.scope == "nic":
                if alts:
                    nic_alts[(int(rail), c.node)] = alts
                continue
            if c.scope == "rail":
                continue
            rows = np.flatnonzero(np.isin(bkey, mkey[c.pair_mask]) & ~claimed)
            if not len(rows):
                continue
            claimed[rows] = True
            explained[sel[c.pair_mask]] = True
            network.append(_Network(_Owner(c.scope if c.scope != "spine" else "switch", rail=int(rail), info={
                "name": c.name, "tier": "spine" if c.scope == "spine" else "leaf", "parts": c.parts,
                "bad": c.bad, "pairs": c.pairs, "alternatives": alts,
                "uplinks": [up.to_json() for up in t.uplinks_of(c.name)] if c.scope == "uplink" else [],
                }), rows))
    return network, claimed, explained, nic_alts


# Long: the owners are found in the localization's order (slow NICs, then rail planes, then the
# owners from the cluster down to a link), each step on the arrays the one before it left; pieces
# would hand those arrays on and hide the order.
def _endpoint_owners(bad: pd.DataFrame, measured: pd.DataFrame, names: list[str], profile: Profile,
                     planes: pd.DataFrame, n_nodes: int, nic_alts: dict, offset: int,
                     nics: pd.DataFrame | None = None):
    """Rail, node, NIC and link owners of the bad rows (owner codes from `offset` on)."""
    rails_measured = np.unique(measured["rail"].to_numpy()) if len(measured) else np.zeros(0, np.int64)
    rails_all = np.union1d(rails_measured, np.unique(bad["rail"].to_numpy()))
    n_rails = int(rails_all.max(initial=-1)) + 1
    has = np.zeros((n_rails, n_nodes), bool)
    has[measured["rail"].to_numpy(), measured["u"].to_numpy()] = True
    has[measured["rail"].to_numpy(), measured["v"].to_numpy()] = True
    nodes_on = has.sum(axis=1)

    s, d, r = bad["s"].to_numpy(), bad["d"].to_numpy(), bad["rail"].to_numpy()
    bu, bv = np.minimum(s, d), np.maximum(s, d)
    ekey = np.unique((r * n_nodes + bu) * n_nodes + bv) if len(bad) else np.zeros(0, np.int64)
    e_rail, e_u, e_v = ekey // (n_nodes * n_nodes), (ekey // n_nodes) % n_nodes, ekey % n_nodes

    nic = np.zeros((n_rails, n_nodes), bool)
    nic_info: dict[tuple[int, int], tuple[int, int]] = {}
    m_rail, m_u, m_v = (measured[c].to_numpy() for c in ("rail", "u", "v"))
    shares = judge.Shares(profile)
    for rail in rails_measured:
        sel, esel = m_rail == rail, e_rail == rail
        for node, badc, deg in _peel(m_u[sel], m_v[sel], e_u[esel], e_v[esel], n_nodes, shares.nic):
            nic[rail, node] = True
            nic_info[(int(rail), node)] = (badc, deg)
    nic_way: dict[tuple[int, int], str | None] = {}
    if nics is not None and len(nics) and "direction" in nics.columns:
        ways: dict[tuple[int, int], set] = {}
        for rail, node, way in zip(nics["rail"].to_numpy(np.int64), nics["node"].to_numpy(np.int64),
                                   nics["direction"].astype(str)):
            ways.setdefault((int(rail), int(node)), set()).add(way)
        # slow one way only: said so; both ways (or each way apart): the NIC
        nic_way = {k: next(iter(v)) if len(v) == 1 and "both" not in v else None for k, v in ways.items()}
    if nics is not None and len(nics) and len(m_rail):
        # judged on their typical partner: counted as the peel counts (partners with a bad link), and,
        # as there, a link to a NIC the peel flagged stops counting: on a small rail a bad NIC is most
        # of each partner's typical value, and one more slow link would condemn a healthy partner too
        peeled = nic.copy()
        deg = np.zeros((n_rails, n_nodes), np.int64)
        badc = np.zeros((n_rails, n_nodes), np.int64)
        for count, rail_, u_, v_ in ((deg, m_rail, m_u, m_v), (badc, e_rail, e_u, e_v)):
            at_u, at_v = ~peeled[rail_, v_], ~peeled[rail_, u_]
            np.add.at(count, (rail_[at_u], u_[at_u]), 1)
            np.add.at(count, (rail_[at_v], v_[at_v]), 1)
        for rail, node in zip(nics["rail"].to_numpy(np.int64), nics["node"].to_numpy(np.int64)):
            # most of its links slow (its slow links may be a switch's or its uplink's: the tree step
            # explained them, and it has none left)
            if rail < n_rails and has[rail, node] and not nic[rail, node] and badc[rail, node] >= 2 \
                    and 2 * badc[rail, node] > deg[rail, node]:
                nic[rail, node] = True
                nic_info[(int(rail), int(node))] = (int(badc[rail, node]), int(deg[rail, node]))

    # rail planes: against the other rails, or by how many of their nodes have a bad NIC
    rail_fraction, node_fraction = shares.rail, shares.node
    bad_rails: dict[int, dict] = {}
    for rail in (int(x) for x in planes["rail"].unique()):
        # A rail slow against the others is a bad plane unless the slowness is one or two NICs'
        # (their links dominate a small rail's median), or the rail is a single link (2 nodes).
        if rail >= n_rails or nodes_on[rail] < 3:
            continue
        sel_m = (m_rail == rail) & ~nic[rail][m_u] & ~nic[rail][m_v]
        sel_b = (e_rail == rail) & ~nic[rail][e_u] & ~nic[rail][e_v]
        remaining = int(sel_m.sum())
        k = int(nic[rail].sum())
        if (remaining and sel_b.sum() / remaining >= rail_fraction) or (
                k >= 2 and k >= rail_fraction * nodes_on[rail]):
            bad_rails[rail] = {"how": "relative"}
    other_cnt = nic.sum(axis=0)[None, :] - nic
    other_tot = has.sum(axis=0)[None, :] - has
    with np.errstate(divide="ignore", invalid="ignore"):
        node_other = np.where(other_tot > 0, other_cnt / np.maximum(other_tot, 1), 0.0)
    for rail in rails_measured:
        incl = has[rail] & (node_other[rail] < node_fraction)
        if not incl.any():
            incl = has[rail]
        k, tot = int((nic[rail] & incl).sum()), int(incl.sum())
        if k >= 2 and tot and k / tot >= rail_fraction and int(rail) not in bad_rails:
            bad_rails[int(rail)] = {"how": "nics", "k": k, "tot": tot}
    rail_bad = np.zeros(n_rails, bool)
    rail_bad[list(bad_rails)] = True
    considered = has & ~rail_bad[:, None]
    cnt, tot = (nic & considered).sum(axis=0), considered.sum(axis=0)
    node_bad = (cnt >= 2) & (tot > 0) & (cnt >= node_fraction * np.maximum(tot, 1))
    cluster = len(rails_measured) >= 2 and all(int(x) in bad_rails for x in rails_measured)

    owners: list[_Owner] = []
    owner = np.full(len(bad), -1, dtype=np.int64)
    if cluster:
        owners.append(_Owner("cluster", info={"rails": len(rails_measured)}))
        owner[:] = 0
    else:
        for rail in sorted(bad_rails):
            owner[(owner < 0) & (r == rail)] = len(owners)
            owners.append(_Owner("rail", rail=rail, info={**bad_rails[rail], "nodes": int(nodes_on[rail])
                                                          if rail < len(nodes_on) else 0}))
        node_id = np.full(n_nodes, -1, dtype=np.int64)
        for node in np.flatnonzero(node_bad):
            node_id[node] = len(owners)
            planes_of = [int(x) for x in np.flatnonzero(has[:, node] & rail_bad)]
            owners.append(_Owner("node", node=int(node), info={"k": int(cnt[node]), "tot": int(tot[node]),
                                                              "planes": planes_of}))
        if len(bad):
            o = np.where(node_id[s] >= 0, node_id[s], node_id[d])
            owner = np.where(owner < 0, o, owner)
        nic_id = np.full((n_rails, n_nodes), -1, dtype=np.int64)
        for (rail, node), (badc, deg) in sorted(nic_info.items()):
            if rail_bad[rail] or node_bad[node]:
                continue  # explained by its rail plane or its node
            nic_id[rail, node] = len(owners)
            owners.append(_Owner("nic", node=node, rail=rail, info={"k": badc, "tot": deg,
                                                                    "alternatives": nic_alts.get((rail, node), []),
                                                                    "direction": nic_way.get((rail, node))}))
        if len(bad):
            o = np.where(nic_id[r, s] >= 0, nic_id[r, s], nic_id[r, d])
            owner = np.where(owner < 0, o, owner)
            # a pair that is evidence only as one of a switch's group or of a slow NIC's links
            # (outliers.against_switches, with_nics) is no link finding by itself: the component, or
            # nothing, explains it
            group = bad["group"].fillna(False).to_numpy(bool) if "group" in bad.columns else np.zeros(len(bad), bool)
            rest = (owner < 0) & ~group
            if rest.any():
                lkey = (r[rest] * n_nodes + bu[rest]) * n_nodes + bv[rest]
                uniq, inv = np.unique(lkey, return_inverse=True)
                base = len(owners)
                for key in uniq:
                    rail, u, v = int(key // (n_nodes * n_nodes)), int((key // n_nodes) % n_nodes), int(key % n_nodes)
                    owners.append(_Owner("link", node=u, rail=rail, peer=v,
                                         info={"tiny": bool(rail < len(nodes_on) and nodes_on[rail] == 2)}))
                owner[rest] = base + inv
    return owners, np.where(owner >= 0, owner + offset, owner)


# Long: one finding per owner, every field computed for all owners at once (headline, evidence,
# counts, wording), top to bottom in the order a finding's fields are built.
def _findings_from(bad: pd.DataFrame, owner: np.ndarray, owners: list[_Owner], names: list[str],
                   profile: Profile, kind: str, planes: pd.DataFrame) -> list[dict]:
    if not owners:
        return []
    b = bad.assign(owner=owner)
    b["prio"] = b["metric"].map(lambda m: METRIC_PRIORITY.get(m, 9)) if len(b) else []
    # headline (metric, size) per owner: the most telling metric, its largest size
    ordered = b.sort_values(["owner", "prio", "size"], ascending=[True, True, False], kind="stable")
    head = ordered.groupby("owner", sort=False).head(1).set_index("owner")[["metric", "size", "unit"]]
    hm = head.reindex(b["owner"])
    at_head = (b["metric"].to_numpy() == hm["metric"].to_numpy()) & (
        (b["size"].to_numpy() == hm["size"].to_numpy()) | (b["size"].isna().to_numpy() & hm["size"].isna().to_numpy()))
    for c in ("how", "basis"):
        if c not in b.columns:
            b[c] = None
    agg = b[at_head].groupby("owner").agg(value=("value", "median"), expected=("expected", "median"),
                                          median=("median", "median"), worse=("worse", "median"),
                                          how=("how", "first"), basis=("basis", "first"))
    grade = b.groupby("owner")["grade"].max()
    if kind == "drift" and len(b):
        # A part drifted beyond twice the tolerance when most of its links did, in some metric: the
        # worst of a NIC's thousand links is noise, a link's own grade is itself.
        grade = b.groupby(["owner", "metric"])["grade"].mean().groupby(level=0).max() > 0.5
    count = b.groupby("owner").size()
    worst = b.sort_values(["owner", "grade", "prio", "worse"], ascending=[True, False, True, False], kind="stable")
    top = worst.groupby("owner", sort=False).head(EVIDENCE_MAX)
    evidence = {o: [evidence_line(kind, row, names) for row in g.itertuples()] for o, g in top.groupby("owner")}
    outlier = judge.Outlier(profile)
    out = []
    for i, who in enumerate(owners):
        lines: list[str] = []
        value = expected = size = metric = unit = how = basis = None
        is_fail = bool(grade.get(i, False)) if kind in ("fleet", "regression", "drift") else False
        median_known = True
        if who.scope == "rail" and who.info.get("how") == "relative" and len(planes):
            pr = planes[planes["rail"] == who.rail].copy()
            pr["prio"] = pr["metric"].astype(str).map(lambda m: METRIC_PRIORITY.get(m, 9))
            pr = pr.sort_values(["prio", "size"], ascending=[True, False])
            h = pr.iloc[0]
            metric, size, unit = str(h["metric"]), h["size"], h["unit"]
            value, expected = float(h["value"]), float(h["median"])
            is_fail = is_fail or bool(outlier.fails(pr["worse"].to_numpy()).any())
            lines += [f"rail {who.rail}, {row.metric}{size_text(row.size)}: median {fmt_value(row.value)} {row.unit} "
                      f"vs {fmt_value(row.median)} across {int(row.n)} rails ({change_text(row.value, row.median)})"
                      for row in pr.head(EVIDENCE_MAX).itertuples()]
        elif i in head.index:
            metric, size, unit = head.loc[i, "metric"], head.loc[i, "size"], head.loc[i, "unit"]
            value, expected = float(agg.loc[i, "value"]), float(agg.loc[i, "expected"])
            median_known = not math.isnan(float(agg.loc[i, "median"]))
        if i in agg.index:
            how, basis = agg.loc[i, "how"], agg.loc[i, "basis"]
        if kind == "instability" and metric is not None:
            expected = judge.Trend.of(profile, "analysis.cv_max").tolerance
        total = len(lines) + int(count.get(i, 0))
        lines += evidence.get(i, [])
        lines = capped(lines[:EVIDENCE_MAX], total)
        higher = OUTLIER_METRICS.get(metric, TREND_DIRECTIONS.get(metric, True)) if metric is not None else True
        phrase, detail = how_phrase(kind, metric or "", value if value is not None else float("nan"),
                              expected if expected is not None else float("nan"),
                              unit if isinstance(unit, str) else "", size, higher, median_known,
                              how if isinstance(how, str) else None, basis if isinstance(basis, str) else None)
        if metric in DATA_NOUNS and "ops" in b.columns:  # a data check: every checked operation of the owner
            rows = b[(b["owner"].to_numpy() == i) & (b["metric"].astype(str).to_numpy() == metric)]
            sizes = rows["size"].dropna().nunique()
            detail = data_loss(metric, rows["value"].sum(), rows["ops"].sum(), rows["ops_failed"].sum(),
                               rows["ops_missing"].sum()) + (f" at {sizes} sizes" if sizes > 1 else size_text(size).replace(" ", " at ", 1))
        node = names[who.node] if who.node is not None else None
        peer = names[who.peer] if who.peer is not None else None
        severity = "fail" if is_fail else "warn"
        if who.scope == "nic":
            way = {"tx": " sending, not receiving", "rx": " receiving, not sending"}.get(who.info.get("direction"), "")
            msg = (f"{node}'s NIC on rail {who.rail} {phrase}{way} (bad links with {who.info['k']} of "
                   f"{who.info['tot']} partners; {detail})")
        elif who.scope == "node":
            msg = f"{node} {phrase} on {who.info['k']} of {who.info['tot']} rails ({detail})"
            if who.info.get("planes"):
                lines.insert(0, f"not counted: rail(s) {', '.join(map(str, who.info['planes']))} (bad rail planes)")
        elif who.scope == "rail":
            if who.info.get("how") == "relative":
                msg = (f"rail {who.rail} plane {phrase} against the other rails ({detail}): "
                       f"check rail {who.rail}'s switches and cabling")
            else:
                msg = (f"rail {who.rail} plane {phrase}: {who.info['k']} of {who.info['tot']} nodes have a bad NIC "
                       f"on it ({detail}): check rail {who.rail}'s switches")
        elif who.scope == "link":
            dirs = b.loc[b["owner"] == i, ["s", "d"]].drop_duplicates() if len(b) else pd.DataFrame()
            if len(dirs) == 1:
                node, peer = names[int(dirs["s"].iloc[0])], names[int(dirs["d"].iloc[0])]
                arrow = "->"
            else:
                arrow = "<->"
            msg = f"link {node} {arrow} {peer} on rail {who.rail} {phrase} ({detail}): check the cable and both ports"
            if who.info.get("tiny"):
                lines.insert(0, f"only 2 nodes on rail {who.rail}: a bad link cannot be told from a bad NIC "
                                f"on either end")
        elif who.info.get("kind") in ("cable", "beyond", "switch"):
            msg = _path_message(who, names, phrase, detail)
            lines = who.info["lines"] + lines
        elif who.scope in ("switch", "uplink"):
            msg = _network_message(who, phrase, detail)
            lines = _network_evidence(who, names) + lines
        else:
            msg = f"every rail plane {phrase} ({detail}): a fabric-wide problem, or bounds that do not fit this fabric"
        alternatives = who.info.get("alternatives") or []
        if who.scope == "nic" and alternatives:
            lines.insert(0, f"{node} is alone on its leaf on rail {who.rail}: its NIC, its cable, the leaf and the "
                            f"leaf's uplink touch the same pairs ({_alt_text(alternatives)})")
        if severity == "fail" and who.scope in ("nic", "node"):
            msg += f": drain {node}"
        out.append(make_finding(severity=severity, scope=who.scope, node=node, rail=who.rail, peer=peer, metric=metric,
                                value=value, expected=expected, evidence=lines, message=msg,
                                kind=kind if kind != "fleet" else ("bound" if not median_known else "outlier"),
                                unit=unit, size=size, bound=how, basis=basis, switch=who.info.get("name"),
                                uplinks=who.info.get("uplinks") or (), alternatives=alternatives,
                                direction=who.info.get("direction")))
    return out


def _path_message(who: _Owner, names: list[str], phrase: str, detail: str) -> str:
    """A slow cable's, a spine's or a path's beyond a leaf port (analysis.cables): a ticket for the
    network team."""
    info, rail = who.info, who.rail
    alts = info.get("alternatives") or []
    if info["kind"] == "switch":
        msg = (f"switch {info['name']} on rail {rail} {phrase} ({detail}): most of its cables carry slow flows, "
               f"its others' paths are normal: check switch {info['name']} and its ports")
    elif info["kind"] == "cable":
        cables = info["uplinks"]
        ends = f"{cables[0]['leaf']} port {cables[0]['leaf_port']} and {cables[0]['spine']} port {cables[0]['spine_port']}"
        what = (f"cable {cables[0]['cable']}" if len(cables) == 1
                else f"cable {cables[0]['leaf']} port {cables[0]['leaf_port']} <-> {cables[0]['spine']} port "
                     f"{cables[0]['spine_port']} (both directions)")
        msg = f"{what} on rail {rail} {phrase} ({detail}): check the cable and its ports, {ends}"
    else:
        node, leaf = names[who.node], info["name"]
        across, within = info["across"], info["within"]
        what = (f"inbound to {node} from other leaves" if info["direction"] == "rx"
                else f"outbound from {node} to other leaves")
        inside = f"within {leaf} {within[0]:.2f}x" if within[1] else f"within {leaf} not measured"
        msg = (f"{what} {across[0]:.2f}x on rail {rail}, {inside} ({detail}): the path beyond {node}'s port on "
               f"{leaf} (its uplinks, a spine, the cable between them): check {leaf}'s uplink cables and ports")
    if alts:
        msg += ", or " + ", ".join(_component(a) for a in alts) + " (no measured pair tells which)"
    return msg + " (a network ticket: no node is at fault)"


def _alt_text(alternatives: list[dict]) -> str:
    return "cannot be told from " + ", ".join(_component(a) for a in alternatives)


def _component(a: dict) -> str:
    if a["scope"] == "uplink":
        return f"{a['switch']}'s uplink"
    if a["scope"] == "switch":
        return f"switch {a['switch']}"
    if a["scope"] == "nic":
        return f"{a['node']}'s NIC"
    return f"rail {a['rail']} plane"


def _network_message(who: _Owner, phrase: str, detail: str) -> str:
    """A switch or uplink finding's message: a ticket for the network team, never a drain."""
    name, rail, info = who.info["name"], who.rail, who.info
    if who.scope == "uplink":
        spines = sorted({u["spine"] for u in info["uplinks"]})
        to = f" to {', '.join(spines)}" if spines else ""
        what = f"leaf {name}'s uplink{to} on rail {rail}"
        check = f"check the cables and ports between {name} and {', '.join(spines) or 'the spines'}"
    elif info["tier"] == "spine":
        what, check = f"spine {name} on rail {rail}", f"check spine {name} and its ports"
    else:
        what, check = f"leaf switch {name} on rail {rail}", f"check switch {name}"
    if info["alternatives"]:  # equals, not a favourite: the measured pairs cannot tell which of them it is
        what += "".join(f", or {_component(a)}" for a in info["alternatives"]) + " (no measured pair tells which)"
        check += ", then the others named"
    return f"{what} {phrase} ({detail}): {check} (a network ticket: no node is at fault)"


def _network_evidence(who: _Owner, names: list[str]) -> list[str]:
    """The counts that tell this component from the pairs it does not touch."""
    info, name, rail = who.info, who.info["name"], who.rail
    (in_bad, in_tot), (x_bad, x_tot) = info["parts"]["inside"], info["parts"]["crossing"]
    o_bad, o_tot = info["parts"].get("other", (0, 0))
    where = "leaves" if info["tier"] == "spine" else name
    crossing = "crossing between leaves" if info["tier"] == "spine" else f"crossing {name}"
    lines = [f"{x_bad} of {x_tot} pairs {crossing} on rail {rail} are bad"]
    inside = f"{in_bad} of {in_tot} pairs inside {where} are bad" if in_tot else f"no pair inside {where} measured"
    if who.scope == "uplink" or info["tier"] == "spine":
        inside = (f"{in_tot - in_bad} of {in_tot} pairs inside {where} are normal" if in_tot
                  else f"no pair inside {where} was measured")
    lines.append(inside)
    if o_tot and info["tier"] != "spine":
        lines.append(f"{o_tot - o_bad} of {o_tot} pairs on rail {rail} not touching {name} are normal")
    if info["alternatives"]:
        lines.append(f"the measured pairs {_alt_text(info['alternatives'])}: they touch the same pairs "
                     "(acceptance plan --topology lists pairs that would decide, where any can)")
    return lines
