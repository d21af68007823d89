"""The heatmaps: up to MATRIX_MAX_NODES nodes, a node x node matrix per rail of each heatmap metric;
beyond, a rails x nodes strip of each NIC's typical link relative to its rail, the worst NICs listed
under it and the NICs and nodes that findings name ringed."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import digest, figures
from ..data import fmt_num, fmt_size, fmt_text, is_missing, natural_sorted
from .common import pairwise, topology_nodes


# --- 3. heatmaps -----------------------------------------------------------------

def _codes(series: pd.Series, nodes: list[str]) -> np.ndarray:
    """Position of each value in nodes (-1 when absent); per category, not per record, when categorical."""
    index = pd.Index(nodes, dtype=object)
    if isinstance(series.dtype, pd.CategoricalDtype):
        table = index.get_indexer(pd.Index(series.cat.categories.astype(object), dtype=object))
        codes = series.cat.codes.to_numpy()
        return np.where(codes >= 0, table[np.maximum(codes, 0)] if len(table) else -1, -1).astype(np.int64)
    return index.get_indexer(pd.Index(series.astype(object), dtype=object)).astype(np.int64)


def _link_matrix(sub: pd.DataFrame, nodes: list[str]):
    """Median over iterations per (src, dst) -> n x n matrix; failed -> n x n bool; plus summary numbers."""
    n = len(nodes)
    s, d = _codes(sub["src"], nodes), _codes(sub["dst"], nodes)
    ok = (s >= 0) & (d >= 0)
    frame = pd.DataFrame({"key": (s * n + d)[ok], "v": sub["value"].to_numpy(float)[ok],
                          "f": (sub["verdict"].to_numpy(object)[ok] == "fail")})
    grouped = frame.groupby("key", sort=False)
    values = grouped["v"].median()
    failed = grouped["f"].max()
    matrix = np.full((n, n), np.nan)
    matrix.flat[values.index.to_numpy()] = values.to_numpy()
    fmask = np.zeros((n, n), dtype=bool)
    fmask.flat[failed.index.to_numpy()] = failed.to_numpy(bool)
    return matrix, fmask, values


def _matrix_caption(values: pd.Series, nodes: list[str], failed: np.ndarray, unit: str,
                    higher_better: bool, iterations: int) -> str:
    n = len(nodes)
    finite = values.dropna()
    if finite.empty:
        return "no values"
    key = int(finite.idxmin() if higher_better else finite.idxmax())
    worst = f"{nodes[key // n]} → {nodes[key % n]} {fmt_num(finite[key], unit)}"
    parts = [f"{len(finite):,} of {n * (n - 1):,} directed links measured",
             f"median {fmt_num(float(finite.median()), unit)}",
             f"worst {worst}"]
    n_failed = int(failed.sum())
    parts.append(f"{n_failed:,} below threshold (red frame)" if higher_better and n_failed else
                 f"{n_failed:,} above threshold (red frame)" if n_failed else "none beyond threshold")
    if iterations > 1:
        parts.append(f"each cell the median of {iterations} iterations")
    return "; ".join(parts)


MATRIX_MAX_NODES = 64  # node x node matrices up to this many nodes; beyond, a cell per link is noise
STRIP_WORST = 10       # the worst NICs listed under a node strip


def _heat_subset(sub: pd.DataFrame, higher: bool) -> tuple[pd.DataFrame, str]:
    """The records a heatmap shows: bandwidth at the largest size; latency at its smallest (the size
    latency is gated at), or at its one size."""
    sizes = sub["size"].dropna()
    if sizes.empty:
        return sub, ""
    size = sizes.max() if higher else sizes.min()
    return sub[sub["size"] == size], f" at {fmt_size(size)}"


def _rail_keys(subs) -> list[float]:
    rails = sorted(set().union(*(set(sub["rail"].dropna().unique()) for sub in subs)))
    return [float(r) for r in rails] + ([np.nan] if any(sub["rail"].isna().any() for sub in subs) else [])


def _matrices(shown, nodes: list[str]) -> list[dict]:
    """Per rail, a node x node matrix of each heatmap metric (the few-node view)."""
    out = []
    for rail in _rail_keys([sub for _, sub, _ in shown]):
        label = f"rail {int(rail)}" if not np.isnan(rail) else "no rail"
        entry = {"label": label, "figures": []}
        for title, sub_all, higher in shown:
            sub = sub_all[sub_all["rail"] == rail] if not np.isnan(rail) else sub_all[sub_all["rail"].isna()]
            if sub.empty:
                entry["figures"].append({"figure": None, "caption": f"{label}: no {title} records."})
                continue
            sub, size_note = _heat_subset(sub, higher)
            unit = fmt_text(sub["unit"].iloc[0])
            matrix, failed, values = _link_matrix(sub, nodes)
            iterations = int(sub["iteration"].nunique())
            fig_title = f"{label}: {title}{size_note}"
            fig = figures.heatmap(matrix, failed, nodes, title=fig_title, unit=unit, higher_better=higher,
                                  alt=f"{fig_title}, source x destination node")
            entry["figures"].append({"figure": fig, "caption": _matrix_caption(values, nodes, failed, unit,
                                                                               higher, iterations)})
        out.append(entry)
    return out


def node_rail_medians(sub: pd.DataFrame, nodes: list[str], rails: list[float]):
    """Each NIC's typical link: per (rail, node), the median over the node's records on that rail (as
    source or destination) of value / the rail's median. Returns (relative: rails x nodes, links:
    rails x nodes record counts, the rails' medians). Whole columns at once: 8 M values at 1,024 x 8
    all-pairs."""
    n, r = len(nodes), len(rails)
    rail_col = sub["rail"].to_numpy(float)
    ri = pd.Index(np.nan_to_num(np.asarray(rails, float), nan=-1.0)).get_indexer(np.nan_to_num(rail_col, nan=-1.0))
    v = sub["value"].to_numpy(float)
    ok = (ri >= 0) & np.isfinite(v)
    medians = pd.Series(v[ok]).groupby(ri[ok]).median().reindex(range(r)).to_numpy(float)
    rel = v / np.where(ri >= 0, medians[np.maximum(ri, 0)], np.nan)
    s, d = _codes(sub["src"], nodes), _codes(sub["dst"], nodes)
    keys = np.concatenate([np.where(ok & (s >= 0), s * r + ri, -1), np.where(ok & (d >= 0), d * r + ri, -1)])
    vals = np.concatenate([rel, rel])
    keep = keys >= 0
    grouped = pd.Series(vals[keep]).groupby(keys[keep]).median()
    flat = np.full(n * r, np.nan)
    flat[grouped.index.to_numpy()] = grouped.to_numpy()
    links = np.bincount(keys[keep], minlength=n * r)
    return flat.reshape(n, r).T, links.reshape(n, r).T, medians


def _finding_marks(findings_: list[dict], nodes: list[str], rails: list[float]) -> np.ndarray:
    """rails x nodes: 2 where a failing NIC or node finding names the cell, 1 for a warning (transients
    are not marks: they did not reproduce)."""
    marks = np.zeros((len(rails), len(nodes)), dtype=int)
    col = {name: i for i, name in enumerate(nodes)}
    row = {rl: i for i, rl in enumerate(rails) if not np.isnan(rl)}
    for f in findings_:
        if digest.is_transient(f) or f.get("scope") not in ("nic", "node") or f.get("node") not in col:
            continue
        level = 2 if f.get("severity") == "fail" else 1
        j = col[f["node"]]
        if f["scope"] == "node" or is_missing(f.get("rail")):
            marks[:, j] = np.maximum(marks[:, j], level)
        elif float(f["rail"]) in row:
            i = row[float(f["rail"])]
            marks[i, j] = max(marks[i, j], level)
    return marks


def _strips(shown, nodes: list[str], findings_: list[dict]) -> list[dict]:
    """Per heatmap metric, one rails x nodes strip of each NIC's typical link, and its worst NICs."""
    rails = _rail_keys([sub for _, sub, _ in shown])
    rail_names = [str(int(rl)) if not np.isnan(rl) else "–" for rl in rails]
    marks = _finding_marks(findings_, nodes, rails)
    out = []
    for title, sub_all, higher in shown:
        sub, size_note = _heat_subset(sub_all, higher)
        unit = fmt_text(sub["unit"].iloc[0])
        rel, links, medians = node_rail_medians(sub, nodes, rails)
        fig_title = f"{title}{size_note}: each NIC's typical link, relative to its rail"
        fig = figures.node_strip(rel, marks, nodes, rail_names, title=fig_title, higher_better=higher,
                                 alt=f"{title}{size_note}, rails x {len(nodes):,} nodes, each cell a NIC's median "
                                     "link relative to its rail's median")
        badness = np.abs(np.log(np.where(rel > 0, rel, np.nan)))
        badness = np.where((rel < 1) if higher else (rel > 1), badness, np.nan)
        order = np.argsort(np.nan_to_num(-badness.ravel(), nan=np.inf), kind="stable")[:STRIP_WORST]
        worst = []
        for flat in order:
            i, j = divmod(int(flat), len(nodes))
            if np.isnan(badness[i, j]):
                break
            worst.append({"node": nodes[j], "rail": rail_names[i], "relative": f"{rel[i, j]:.2f} ×",
                          "value": fmt_num(rel[i, j] * medians[i], unit), "median": fmt_num(medians[i], unit),
                          "links": f"{int(links[i, j]):,}", "mark": ("fail", "warn", "")[2 - marks[i, j]]})
        measured = int((links > 0).sum())
        k = max(1, -(-len(nodes) // (figures.STRIP_BAND * figures.STRIP_BANDS)))
        caption = (f"{len(nodes):,} nodes × {len(rails)} rail{'s' if len(rails) != 1 else ''}, "
                   f"{measured:,} NICs measured; a cell: the median over the NIC's links (as source or "
                   f"destination) of {title}{size_note} / its rail's median"
                   + (f"; a column is the {'lowest' if higher else 'highest'} of {k} nodes" if k > 1 else "")
                   + ". Ringed: a NIC or node finding (red: fail, amber: warning).")
        out.append({"figure": fig, "caption": caption, "worst": worst, "title": f"{title}{size_note}",
                    "lower": "lowest" if higher else "highest"})
    return out


def heatmaps(recs: pd.DataFrame, run: dict, findings_: list[dict] | None = None) -> dict:
    """Up to MATRIX_MAX_NODES nodes: per rail, a node x node matrix of each heatmap metric. Beyond, a
    cell per link is noise (and a sampled pattern leaves most cells empty): per metric, a strip of
    every NIC's typical link relative to its rail, and the worst NICs named."""
    shown, timing = pairwise(recs, "heatmap")
    if not shown:
        return {"available": False, "mode": "none", "rails": [], "strips": [], "nodes": 0,
                "note": "No point-to-point records (the pairwise suites: rdma_write, gpudirect) in this run: "
                        "no heatmaps.", "timing": []}
    nodes = natural_sorted(set(topology_nodes(run)).union(*(set(sub["src"].unique()) | set(sub["dst"].unique())
                                                            for _, sub, _ in shown)))
    if len(nodes) <= MATRIX_MAX_NODES:
        return {"available": True, "mode": "matrix", "rails": _matrices(shown, nodes), "strips": [],
                "nodes": len(nodes), "note": "", "timing": timing}
    return {"available": True, "mode": "strip", "rails": [], "strips": _strips(shown, nodes, findings_ or []),
            "nodes": len(nodes), "note": "", "timing": timing}
