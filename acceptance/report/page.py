"""render(analysis, run_dir) -> run_dir/report.html: one self-contained file, no network fetches.

Figures are PNG data URIs, the CSS is inline, there is no JavaScript; jinja2 escapes
every value (autoescape) and refuses undefined names (StrictUndefined).
"""
from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path

import matplotlib
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from . import figures, sections
from .data import prepare, unit_of

TEMPLATES = Path(__file__).resolve().parent / "templates"


def environment() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True,
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def context(analysis, run_dir: str | os.PathLike, history=None) -> dict:
    """Everything the template shows, pre-formatted. history: an open history Store (acceptance.history.store)
    for the History section, or None (no section)."""
    from ..rules.profile import format_profile

    run_dir = Path(run_dir)
    run = analysis.run or {}
    recs = prepare(analysis.records)
    units = unit_of(recs)
    with matplotlib.rc_context(figures.STYLE):
        ctx = {
            "summary": sections.summary(analysis, recs, run_dir),
            "findings": sections.findings(analysis, units, (run.get("topology") or {}).get("rails") or ()),
            "drain_file": sections.drain_file(run_dir),
            "failing": sections.failing_records(recs),
            "fleet": sections.fleet(analysis),
            "heatmaps": sections.heatmaps(recs, run, analysis.findings or []),
            "trees": sections.fabric_trees(analysis, recs, run),
            "sweeps": sections.sweeps(recs),
            "collectives": sections.collectives(recs),
            "burnin": sections.burnin(analysis),
            "deltas": sections.deltas(analysis),
            # (section ids, not suite names: the template's sections "counters" and "incast")
            "port_counters": sections.counters(recs),
            "incast_table": sections.incast(recs, analysis.records.get("samples") if analysis.records is not None else None),
            "crosscheck": sections.crosscheck(recs),
            "env": sections.environment(run),
            "history": sections.history(history, run_dir, run) if history is not None else None,
        }
    try:
        ctx["profile_text"] = format_profile(analysis.profile)
    except Exception as e:  # a report must still come out when the profile object is odd
        ctx["profile_text"] = f"(profile could not be formatted: {e})"
    ctx["generated"] = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return ctx


def render(analysis, run_dir: str | os.PathLike, out: str | os.PathLike | None = None, history=None) -> Path:
    """Write the HTML report (default run_dir/report.html) and return its path. history: an open history
    Store: adds the History section (the store's fleet trend, RUN_DIR/history.json's findings)."""
    started = time.perf_counter()
    run_dir = Path(run_dir)
    path = Path(out) if out is not None else run_dir / "report.html"
    ctx = context(analysis, run_dir, history)
    ctx["render_seconds"] = f"{time.perf_counter() - started:.1f}"
    html = environment().get_template("report.html.j2").render(**ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, path)
    return path
