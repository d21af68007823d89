"""The environment and topology: the run's nodes, ranks, rails, engines and NICs per rail, the
nodes' ranks (the odd ones out first when many), and the nodes grouped by identical software
versions."""
from __future__ import annotations

import pandas as pd

from ...records.naming import compress_ints
from ..data import compress_hosts, fmt_text, natural_key, natural_sorted
from .common import more


# --- 9. environment --------------------------------------------------------------

MAX_NODE_ROWS = 16


def environment(run: dict) -> dict:
    topo = run.get("topology") or {}
    nodes = topo.get("nodes") or {}
    if not isinstance(nodes, dict):
        nodes = {str(n): [] for n in nodes}
    names = natural_sorted(nodes)
    rails = topo.get("rails") or []
    facts = [("nodes", f"{len(names):,}" + (f" ({compress_hosts(names)})" if names else "")),
             ("ranks (world size)", fmt_text(topo.get("world_size"))),
             ("rails", compress_ints(rails) if rails and all(isinstance(r, int) for r in rails) else
              ", ".join(map(str, rails)) or "–")]
    engines = run.get("engines") or {}
    if isinstance(engines, dict):
        for suite, e in sorted(engines.items()):
            if isinstance(e, dict):
                facts.append((f"engine: {suite}", f"{e.get('engine') or 'none usable'}: {e.get('why') or '–'}"))
    ranks = topo.get("ranks") or []
    nics = {}
    for r in ranks if isinstance(ranks, list) and len(ranks) <= 100_000 else []:
        if isinstance(r, dict) and r.get("nic"):
            nics.setdefault(r.get("rail"), set()).add(str(r["nic"]))
    if nics:
        facts.append(("NICs per rail", "; ".join(f"rail {k}: {', '.join(sorted(v))}" for k, v in
                                                 sorted(nics.items(), key=lambda t: natural_key(t[0])))))
    # nodes -> ranks: all of them when few; else the first ones and the odd ones out.
    per_node = {n: list(nodes.get(n) or []) for n in names}
    counts = pd.Series({n: len(v) for n, v in per_node.items()}, dtype=int)
    usual = int(counts.mode().iat[0]) if len(counts) else 0
    odd = [n for n in names if len(per_node[n]) != usual]
    if len(names) <= MAX_NODE_ROWS:
        listed = names
    else:
        listed = list(dict.fromkeys(names[:4] + odd[:MAX_NODE_ROWS]))
    node_rows = [{"node": n, "count": str(len(per_node[n])), "ranks": compress_ints(per_node[n])
                  if all(isinstance(x, int) for x in per_node[n]) else ", ".join(map(str, per_node[n])),
                  "odd": n in odd} for n in listed]
    node_note = ""
    if len(names) > len(listed):
        node_note = (f"{len(names) - len(odd):,} of {len(names):,} nodes have {usual} ranks"
                     + (f"; {len(odd):,} differ (listed first {min(len(odd), MAX_NODE_ROWS)})" if odd else "")
                     + f"; showing {len(listed)} nodes.")
    # software: nodes grouped by identical versions.
    software = run.get("software") or {}
    keys = list(dict.fromkeys(k for v in software.values() if isinstance(v, dict) for k in v))
    groups: dict[tuple, list[str]] = {}
    for node, versions in software.items():
        versions = versions if isinstance(versions, dict) else {}
        groups.setdefault(tuple(str(versions.get(k, "–")) for k in keys), []).append(str(node))
    ordered = sorted(groups.items(), key=lambda t: -len(t[1]))
    sw_rows = [{"count": f"{len(ns):,}", "nodes": compress_hosts(ns), "versions": list(vals), "odd": i > 0}
               for i, (vals, ns) in enumerate(ordered[:20])]
    return {"facts": facts, "node_rows": node_rows, "node_note": node_note,
            "software_keys": keys, "software_rows": sw_rows,
            "software_note": ("identical on every node" if len(groups) == 1 else
                              f"{len(groups)} different version sets; the odd ones out are highlighted"
                              if groups else "no software versions in run.json"),
            "software_more": more(len(ordered), len(sw_rows), "run.json")}
