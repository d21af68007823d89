"""The switch tree of each rail (fabric_trees): what the findings name shaded on it, said in words
for the alt text and the caption, rails drawn alike sharing one figure."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...records.naming import compress_ints
from .. import figures
from ..data import compress_hosts, is_missing
from .common import topology_nodes


# --- 3b. the switch tree of each rail ----------------------------------------------

MAX_TREES = 16         # tree figures at most (one per rail, or per group of rails drawn alike)
NODE_SCOPES = ("nic", "node", "link")


def _mark_of(severity) -> str | None:
    return severity if severity in ("fail", "warn") else None


def _tree_marks(tree, rail, findings) -> tuple[dict, dict]:
    """What the findings on `rail` (None: every finding) shade in `tree`: the marks figures.tree draws,
    and why, in words, per component (for the alt text and the caption)."""
    marks = {"leaves": {}, "spines": {}, "uplinks": {}, "nodes": {}, "plane": None}
    why: dict[tuple, list[str]] = {}
    missing: list[str] = []
    spines = set(tree.spines)
    leaf_of = {n: leaf for leaf, ns in tree.leaves.items() for n in ns}

    def on(r) -> bool:
        return rail is None or r is None or is_missing(r) or int(r) == rail

    def put(kind, key, mark, reason):
        if kind == "plane":
            marks["plane"] = figures.worse_mark(marks["plane"], mark)
        else:
            marks[kind][key] = figures.worse_mark(marks[kind].get(key), mark)
        why.setdefault((kind, key), []).append(reason)

    def switch(name, mark, reason):
        if name in tree.leaves:
            put("leaves", name, mark, reason)
        elif name in spines:
            put("spines", name, mark, reason)
        elif name:
            missing.append(f"switch {name}")

    def uplinks(leaf, cables, mark, reason):
        pairs = [(str(c.get("leaf") or leaf), str(c.get("spine"))) for c in cables or [] if c.get("spine")]
        if not pairs and leaf in tree.leaves:
            pairs = [(u.leaf, u.spine) for u in tree.uplinks_of(leaf)]
        known = {(u.leaf, u.spine) for u in tree.uplinks}
        for pair in pairs:
            if pair in known:
                put("uplinks", pair, mark, reason)
            else:
                missing.append(f"uplink {pair[0]} → {pair[1]}")
        if not pairs and leaf:
            missing.append(f"{leaf}'s uplinks")

    def node(name, mark, reason):
        if name is None or is_missing(name):
            return
        if str(name) not in leaf_of:
            missing.append(f"node {name}")
        else:
            put("nodes", str(name), mark, reason)

    for f in findings:
        mark = _mark_of(f.get("severity"))
        if mark is None:
            continue
        scope = f.get("scope")
        what = f"{mark} {scope} finding"
        if on(f.get("rail")):
            if scope == "switch":
                switch(f.get("switch"), mark, what)
            elif scope == "uplink":
                uplinks(f.get("switch"), f.get("uplinks"), mark, what)
            elif scope in NODE_SCOPES:
                node(f.get("node"), mark, what)
                if scope == "link":
                    node(f.get("peer"), mark, what)
            elif scope in ("rail", "cluster"):
                put("plane", None, mark, what)
        for a in f.get("alternatives") or []:
            if not isinstance(a, dict) or not on(a.get("rail", f.get("rail"))):
                continue
            alt, reason = f"{mark}-alt", f"cannot be told from a {what}"
            if a.get("scope") == "switch":
                switch(a.get("switch"), alt, reason)
            elif a.get("scope") == "uplink":
                uplinks(a.get("switch"), a.get("uplinks"), alt, reason)
            elif a.get("scope") in NODE_SCOPES:
                node(a.get("node"), alt, reason)
            elif a.get("scope") == "rail":
                put("plane", None, alt, reason)
    return marks, {"why": why, "missing": list(dict.fromkeys(missing)), "leaf_of": leaf_of}


def _cable_words(tree, leaf, spine) -> str:
    ports = [f"{u.leaf_port or '?'}–{u.spine_port or '?'}" for u in tree.uplinks
             if u.leaf == leaf and u.spine == spine and (u.leaf_port or u.spine_port)]
    return f"uplink {leaf} → {spine}" + (f" (ports {', '.join(ports[:4])}{', …' if len(ports) > 4 else ''})"
                                         if ports else "")


def _shading_words(tree, marks: dict, why: dict) -> list[str]:
    """Sentences naming what is shaded, strongest first: "Shaded fail: leaf leaf2 (fail switch finding)." """
    items: dict[str, list[str]] = {}
    for kind, label in (("leaves", "leaf"), ("spines", "spine"), ("uplinks", None), ("nodes", "node")):
        for key, mark in marks[kind].items():
            name = _cable_words(tree, *key) if kind == "uplinks" else f"{label} {key}"
            reasons = ", ".join(dict.fromkeys(why.get((kind, key), [])))
            items.setdefault(mark, []).append(f"{name} ({reasons})")
    if marks["plane"]:
        items.setdefault(marks["plane"], []).append(
            f"the whole rail plane ({', '.join(dict.fromkeys(why.get(('plane', None), [])))})")
    heads = {"fail": "Shaded red (fail)", "warn": "Shaded amber (warn)",
             "fail-alt": "Hatched light red, dashed (a fail the measured pairs cannot tell from another "
                         "explanation)",
             "warn-alt": "Hatched light amber, dashed (a warning the measured pairs cannot tell from another "
                         "explanation)"}
    out = []
    for mark in sorted(items, key=lambda m: -figures.MARK_RANK[m]):
        names = items[mark]
        shown = names[:12]
        more = f" and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
        out.append(f"{heads[mark]}: {'; '.join(shown)}{more}.")
    return out


def _tree_rails(analysis, recs: pd.DataFrame, run: dict) -> list[int | None]:
    """The rails to draw a tree for: each rail with its own tree, and, when one tree is shared, every
    rail the run knows (its topology, its records, its findings); [None] when it knows none."""
    trees = analysis.fabric.trees
    own = {int(r) for r in trees if r is not None}
    if None not in trees:
        return sorted(own)
    known = set(own)
    for r in (run.get("topology") or {}).get("rails") or []:
        if isinstance(r, (int, np.integer)) or (isinstance(r, str) and r.isdigit()):
            known.add(int(r))
    if len(recs):
        known.update(int(r) for r in recs["rail"].dropna().unique())
    for f in analysis.findings or []:
        if not is_missing(f.get("rail")):
            known.add(int(f.get("rail")))
    return sorted(known) or [None]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def fabric_trees(analysis, recs: pd.DataFrame, run: dict) -> dict:
    """Each rail's switch tree with what the findings name shaded; rails drawn alike share a figure."""
    fab = getattr(analysis, "fabric", None)
    if fab is None or not fab.trees:
        return {"available": False, "rails": [], "facts": "", "note": ""}
    findings_ = analysis.findings or []
    groups: list[dict] = []
    for rail in _tree_rails(analysis, recs, run):
        tree = fab.tree(rail) if rail is not None else fab.trees.get(None)
        if tree is None:
            continue
        marks, info = _tree_marks(tree, rail, findings_)
        key = repr(sorted((k, sorted(v.items()) if isinstance(v, dict) else v) for k, v in marks.items()))
        for g in groups:
            if g["tree"] is tree and g["key"] == key:
                g["rails"].append(rail)
                break
        else:
            groups.append({"tree": tree, "key": key, "rails": [rail], "marks": marks, "info": info})
    out = []
    for g in groups[:MAX_TREES]:
        tree, marks, info, rails = g["tree"], g["marks"], g["info"], g["rails"]
        if rails == [None]:
            label = "every rail"
        elif len(rails) == 1:
            label = f"rail {rails[0]}"
        else:
            label = f"rails {compress_ints(rails)}"
        nodes = sum(len(v) for v in tree.leaves.values())
        spines = tree.spines
        shape = ((f"{len(spines)} spine{'' if len(spines) == 1 else 's'}, " if spines else "no spines, ")
                 + f"{len(tree.leaves)} lea{'f' if len(tree.leaves) == 1 else 'ves'}, "
                 f"{len(tree.uplinks)} uplink{'' if len(tree.uplinks) == 1 else 's'}, {nodes:,} nodes")
        leaf_keep = (set(marks["leaves"]) | {leaf for leaf, _ in marks["uplinks"]}
                     | {info["leaf_of"][n] for n in marks["nodes"]})
        _, hidden = figures.collapse(list(tree.leaves), leaf_keep, figures.MAX_LEAVES)
        _, hidden_spines = figures.collapse(spines, set(marks["spines"]) | {s for _, s in marks["uplinks"]},
                                            figures.MAX_SPINES)
        words = _shading_words(tree, marks, info["why"])
        if not words:
            words = [f"Nothing shaded: no finding names a switch, uplink or node of {label}."]
        if len(rails) > 1:
            words.insert(0, "The same tree and the same shading on each of these rails.")
        drawn = []
        if hidden:
            drawn.append(f"{hidden} unshaded leaves drawn as one box")
        if hidden_spines:
            drawn.append(f"{hidden_spines} unshaded spines drawn as one box")
        if info["missing"]:
            drawn.append("named by findings but not in this tree: " + ", ".join(info["missing"][:8])
                         + (" …" if len(info["missing"]) > 8 else ""))
        title = f"{label}: switch tree"
        alt = f"{title} ({shape}). " + " ".join(words) + (f" ({'; '.join(drawn)}.)" if drawn else "")
        fig = figures.tree(tree, title=title, marks=marks, alt=alt, summarize=compress_hosts)
        out.append({"label": label, "figure": fig,
                    "caption": f"{shape}. " + " ".join(words) + (f" {_sentence('; '.join(drawn))}." if drawn else "")})
    names = topology_nodes(run)
    unknown = fab.unknown(names) if names else []
    note = ""
    if unknown:
        note = (f"{len(unknown):,} of the run's {len(names):,} nodes are on no leaf of this tree: "
                f"{compress_hosts(unknown)}.")
    if None not in fab.trees:
        ran = {int(r) for r in (run.get("topology") or {}).get("rails") or [] if isinstance(r, (int, np.integer))}
        without = sorted(ran - {int(r) for r in fab.trees})
        if without:
            note += f" No tree for rail{'' if len(without) == 1 else 's'} {compress_ints(without)}."
    if len(groups) > MAX_TREES:
        note += f" {len(groups) - MAX_TREES} more rails' trees not drawn."
    rails_word = "one tree for every rail" if set(fab.trees) == {None} else \
        f"{len([r for r in fab.trees if r is not None])} rail trees"
    facts = f"From {fab.format or 'a topology file'} {fab.source}".rstrip() + f" ({rails_word})."
    return {"available": True, "rails": out, "facts": facts, "note": note.strip()}
