"""Figures of the report: matplotlib (Agg canvas, no pyplot state), inlined as PNG data URIs.

Each function takes small, already aggregated numpy arrays or frames and returns
``{"uri": "data:image/png;base64,...", "alt": ...}``. Node x node heatmaps are
drawn with imshow for the few nodes where a cell per link can be seen; larger fleets get a
node strip (rails x nodes, one cell per NIC), where a column is the worst of a block of
nodes only above STRIP_BAND x STRIP_BANDS nodes, so one slow NIC among 16,000 stays visible.
"""
from __future__ import annotations

import base64
import io
import math
import warnings
from types import SimpleNamespace

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from ..rules.units import format_size

DPI = 100
STRIP_BAND = 256       # node columns per band of a node strip (bands stacked top to bottom)
STRIP_BANDS = 8        # bands at most; beyond, a column is the worst of a block of nodes
ANNOTATE_MAX = 16      # per-cell values written up to this many nodes (never above ~32)
MAX_TICKS = 32         # tick labels per axis at most
RAIL_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
THRESHOLD_COLOR = "#c62828"

STYLE = {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8,
         "ytick.labelsize": 8, "legend.fontsize": 8, "axes.grid": False}


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_data_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    # No metadata: matplotlib would otherwise stamp its web address into the PNG.
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(fig: Figure, alt: str) -> dict:
    width, height = (int(round(v)) for v in fig.get_size_inches() * DPI)
    return {"uri": to_data_uri(fig), "alt": alt, "width": width, "height": height}


def _rail_color(i: int) -> str:
    return RAIL_COLORS[i % len(RAIL_COLORS)]


def _size_axis(ax, sizes, max_labels: int = 12) -> None:
    """log2 x axis labelled 8B, 1KiB, 1MiB ... (at most max_labels labels)."""
    ax.set_xscale("log", base=2)
    sizes = sorted({int(s) for s in sizes if s and s > 0})
    if not sizes:
        return
    lo, hi = int(math.log2(sizes[0])), int(math.ceil(math.log2(sizes[-1])))
    step = max(1, math.ceil((hi - lo + 1) / max_labels))
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(lo, hi + 1, step)]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_size(int(round(x))) if x >= 1 else ""))
    for label in ax.get_xticklabels():
        label.set_rotation(0)


def _threshold_step(ax, threshold) -> None:
    """The bound by size as a dashed step, its last level drawn half an octave past the last size."""
    if threshold is None or not len(threshold):
        return
    t = threshold.sort_values("size")
    x = np.append(t["size"].to_numpy(float), float(t["size"].iloc[-1]) * 2 ** 0.5)
    y = np.append(t["threshold"].to_numpy(float), float(t["threshold"].iloc[-1]))
    ax.step(x, y, where="post", color=THRESHOLD_COLOR, linestyle="--", linewidth=1.2, label="threshold")


def heatmap(matrix: np.ndarray, failed: np.ndarray, nodes: list[str], *, title: str, unit: str,
            higher_better: bool, alt: str) -> dict:
    """src (rows) x dst (columns) heatmap of a few nodes (the report draws it up to 64); failed cells
    framed in red; grey = not measured."""
    n = len(nodes)
    shown, cells = matrix, n
    annotate = n <= ANNOTATE_MAX
    side = 3.6 if n <= 4 else 4.6 if n <= 12 else 5.6 if n <= 24 else 6.6
    fig = new_figure(side + 1.2, side)
    ax = fig.add_subplot()
    cmap = colormaps["viridis" if higher_better else "viridis_r"].with_extremes(bad="#e6e6e6")
    finite = shown[np.isfinite(shown)]
    # The scale reaches at least half (bandwidth) or twice (latency) the median, so a few
    # percent of noise stays one colour and a slow link stands out.
    if finite.size:
        median = float(np.median(matrix[np.isfinite(matrix)]))
        vmin, vmax = float(finite.min()), float(finite.max())
        if higher_better:
            vmin = min(vmin, 0.5 * median)
        else:
            vmax = max(vmax, 2.0 * median)
    else:
        vmin, vmax = 0.0, 1.0
    if vmin == vmax:
        vmin, vmax = (vmin * 0.9, vmax * 1.1) if vmin else (0.0, 1.0)
    norm = Normalize(vmin=vmin, vmax=vmax)
    image = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, norm=norm, interpolation="nearest",
                      aspect="equal", origin="upper")
    bar = fig.colorbar(image, ax=ax, shrink=0.85, pad=0.02)
    bar.set_label(unit)
    ax.set_title(title)
    ax.set_xlabel("destination node")
    ax.set_ylabel("source node")
    step = max(1, math.ceil(cells / MAX_TICKS))
    ticks = list(range(0, cells, step))
    labels = [nodes[i] for i in ticks]
    ax.set_xticks(ticks, labels, rotation=90 if cells > 4 else 0)
    ax.set_yticks(ticks, labels)
    ax.tick_params(length=2)
    if annotate:
        font = 9 if n <= 4 else 8 if n <= 8 else 6.5
        rgba = cmap(norm(np.nan_to_num(shown, nan=vmin)))
        luminance = rgba[..., 0] * 0.299 + rgba[..., 1] * 0.587 + rgba[..., 2] * 0.114
        for i, j in zip(*np.nonzero(np.isfinite(shown))):
            ax.text(j, i, f"{shown[i, j]:.3g}", ha="center", va="center", fontsize=font,
                    color="black" if luminance[i, j] > 0.5 else "white")
    fail_i, fail_j = np.nonzero(failed)
    if fail_i.size:  # a red frame around the cell
        cell_points = side * 0.75 * 72 / n
        ax.scatter(fail_j, fail_i, marker="s", s=(cell_points * 0.92) ** 2, facecolors="none",
                   edgecolors="#ff1744", linewidths=1.6)
    return _figure(fig, alt)


def _pool_columns(values: np.ndarray, k: int, worst) -> np.ndarray:
    """rows x n -> rows x ceil(n / k): each block of k columns as its worst finite value (NaN when none)."""
    rows, n = values.shape
    m = math.ceil(n / k)
    padded = np.full((rows, m * k), np.nan)
    padded[:, :n] = values
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks
        return worst(padded.reshape(rows, m, k), axis=2)


def node_strip(values: np.ndarray, marks: np.ndarray, nodes: list[str], rails: list[str], *, title: str,
               higher_better: bool, alt: str) -> dict:
    """rails (rows) x nodes (columns) of values relative to their rail's median (1.0 = typical), cut
    into bands of STRIP_BAND columns stacked top to bottom, so a node reads as a column through
    every rail, a rail plane as a row, a leaf of consecutive nodes as a block. marks (same shape):
    0 none, 1 warn, 2 fail: an amber or red ring. Grey: no measurement. Above STRIP_BAND x
    STRIP_BANDS nodes a column is the worst of a block of k nodes (the ticks name its first node)."""
    n, r = len(nodes), len(rails)
    k = max(1, math.ceil(n / (STRIP_BAND * STRIP_BANDS)))
    if k > 1:
        values = _pool_columns(values, k, np.nanmin if higher_better else np.nanmax)
        marks = np.nan_to_num(_pool_columns(marks.astype(float), k, np.nanmax)).astype(int)
    cols = values.shape[1]
    width = min(STRIP_BAND, cols)
    bands = math.ceil(cols / width)
    band_h = 0.42 + 0.14 * min(r, 16)
    fig = new_figure(11.6, 0.5 + bands * band_h)
    axes = fig.subplots(bands, 1, squeeze=False)[:, 0]
    cmap = colormaps["viridis" if higher_better else "viridis_r"].with_extremes(bad="#e6e6e6")
    finite = values[np.isfinite(values)]
    # The scale reaches at least half the median (twice for latency), as the matrices' does: noise
    # of a few percent stays one colour, a slow NIC stands out.
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 1.0)
    vmin, vmax = (min(lo, 0.5), max(hi, 1.0)) if higher_better else (min(lo, 1.0), max(hi, 2.0))
    norm = Normalize(vmin=vmin, vmax=vmax)
    ystep = max(1, math.ceil(r / 8))
    image = None
    for b, ax in enumerate(axes):
        block = np.full((r, width), np.nan)
        part = values[:, b * width:(b + 1) * width]
        block[:, :part.shape[1]] = part
        image = ax.imshow(np.ma.masked_invalid(block), cmap=cmap, norm=norm, interpolation="nearest",
                          aspect="auto", origin="upper")
        ax.set_yticks(range(0, r, ystep), rails[::ystep])
        xt = [c for c in range(0, part.shape[1], 32)]
        ax.set_xticks(xt, [nodes[(b * width + c) * k] for c in xt], fontsize=7)
        ax.tick_params(length=2, pad=1)
        ax.set_ylabel("rail", labelpad=1)
        band_marks = marks[:, b * width:(b + 1) * width]
        for level, color in ((1, WARN_COLOR), (2, "#ff1744")):
            yi, xi = np.nonzero(band_marks == level)
            if yi.size:
                ax.scatter(xi, yi, marker="o", s=28, facecolors="none", edgecolors=color, linewidths=1.2,
                           clip_on=False)
    axes[0].set_title(title)
    bar = fig.colorbar(image, ax=list(axes), shrink=0.9, pad=0.01, aspect=30)
    bar.set_label("× the rail's median")
    return _figure(fig, alt)


def sweep(stats, *, title: str, ylabel: str, logy: bool, threshold=None, alt: str) -> dict:
    """Median over links per rail against message size, with a min-max band.

    stats: DataFrame with rail, size, median, min, max. threshold: DataFrame size, threshold (or None).
    """
    fig = new_figure(10.8, 4.0)
    ax = fig.add_subplot()
    rails = sorted(stats["rail"].unique(), key=lambda r: (np.isnan(r), r))
    for i, rail in enumerate(rails):
        s = stats[stats["rail"] == rail].sort_values("size") if not np.isnan(rail) else \
            stats[stats["rail"].isna()].sort_values("size")
        color = _rail_color(i)
        label = f"rail {int(rail)}" if not np.isnan(rail) else "no rail"
        ax.plot(s["size"], s["median"], marker="o", markersize=3, color=color, label=label + " median")
        ax.fill_between(s["size"], s["min"], s["max"], color=color, alpha=0.18, linewidth=0)
    _threshold_step(ax, threshold)
    _size_axis(ax, stats["size"])
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6)
    ax.legend(loc="best", frameon=False, ncols=2 if len(rails) > 4 else 1)
    return _figure(fig, alt)


def latency_points(stats, *, title: str, ylabel: str, alt: str) -> dict:
    """Latency percentiles at one message size: per rail the median over links, bars to min and max.

    stats: DataFrame with rail, metric (ordered as the categories to show), median, min, max.
    """
    metrics = list(dict.fromkeys(stats["metric"]))
    rails = sorted(stats["rail"].dropna().unique())
    fig = new_figure(10.8, 3.8)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(rails))
    for i, rail in enumerate(rails):
        s = stats[stats["rail"] == rail].set_index("metric").reindex(metrics)
        x = np.arange(len(metrics)) + (i - (len(rails) - 1) / 2) * width
        med = s["median"].to_numpy(float)
        err = np.vstack([med - s["min"].to_numpy(float), s["max"].to_numpy(float) - med])
        ax.errorbar(x, med, yerr=np.where(np.isfinite(err), err, 0), fmt="o", markersize=4, capsize=3,
                    color=_rail_color(i), label=f"rail {int(rail)}")
    ax.set_xticks(np.arange(len(metrics)), [m.replace(" ", "\n", 1) for m in metrics])
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", color="#dddddd", linewidth=0.6)
    ax.legend(loc="best", frameon=False)
    return _figure(fig, alt)


def collectives(panels: list[dict], *, alt: str) -> dict:
    """Grid op (rows) x scope (columns) of busbw against size.

    panels: {op, scope, lines: [{label, size, median, min (or None), max (or None)}], threshold: frame | None, unit}
    """
    ops = list(dict.fromkeys(p["op"] for p in panels))
    scopes = list(dict.fromkeys(p["scope"] for p in panels))
    fig = new_figure(3.4 * len(scopes) + 0.6, 2.9 * len(ops) + 0.3)
    axes = fig.subplots(len(ops), len(scopes), squeeze=False)
    used = set()
    for p in panels:
        ax = axes[ops.index(p["op"])][scopes.index(p["scope"])]
        used.add((ops.index(p["op"]), scopes.index(p["scope"])))
        sizes = []
        for i, line in enumerate(p["lines"]):
            color = _rail_color(i)
            ax.plot(line["size"], line["median"], marker="o", markersize=2.5, color=color, label=line["label"],
                    linewidth=1.2)
            if line.get("min") is not None:
                ax.fill_between(line["size"], line["min"], line["max"], color=color, alpha=0.18, linewidth=0)
            sizes.extend(line["size"])
        _threshold_step(ax, p.get("threshold"))
        _size_axis(ax, sizes, max_labels=6)
        ax.set_yscale("log")
        ax.set_title(f"{p['op']} — {p['scope']}")
        ax.set_ylabel(f"busbw ({p['unit']})")
        ax.grid(True, color="#dddddd", linewidth=0.6)
        ax.legend(loc="lower right", frameon=False, fontsize=7)
    for r in range(len(ops)):
        for c in range(len(scopes)):
            if (r, c) not in used:
                axes[r][c].set_axis_off()
    return _figure(fig, alt)


def burnin(panels: list[dict], *, alt: str) -> dict:
    """Per metric: median and worst link per iteration. panels: {title, unit, iteration, median, worst, worst_label}"""
    cols = 1 if len(panels) == 1 else 2 if len(panels) in (2, 4) else 3
    rows = math.ceil(len(panels) / cols)
    fig = new_figure({1: 6.0, 2: 9.0, 3: 11.0}[cols], 2.7 * rows + 0.2)
    axes = fig.subplots(rows, cols, squeeze=False)
    for idx, p in enumerate(panels):
        ax = axes[idx // cols][idx % cols]
        same = np.allclose(p["median"], p["worst"], equal_nan=True)
        ax.plot(p["iteration"], p["median"], marker="o", markersize=3, color="#1f77b4",
                label="value" if same else "median")
        if not same:
            ax.plot(p["iteration"], p["worst"], marker="v", markersize=3, color="#d62728", label=p["worst_label"])
        ax.set_ylim(bottom=0)
        ax.set_title(p["title"])
        ax.set_xlabel("iteration")
        ax.set_ylabel(p["unit"])
        ax.grid(True, color="#dddddd", linewidth=0.6)
        ax.legend(loc="best", frameon=False)
        if len(p["iteration"]) <= 20:
            ax.set_xticks(list(p["iteration"]))
    for idx in range(len(panels), rows * cols):
        axes[idx // cols][idx % cols].set_axis_off()
    return _figure(fig, alt)


# --- history: the store's nights ----------------------------------------------------

PINNED_COLOR = "#1d2127"
WARN_POINT = "#f2a900"
FLAG_OFF = "#b9c3cf"


def _night_ticks(ax, dates: list[str], max_labels: int = 10) -> None:
    step = max(1, math.ceil(len(dates) / max_labels))
    ticks = list(range(0, len(dates), step))
    if len(dates) - 1 not in ticks:
        ticks.append(len(dates) - 1)  # tonight is always labelled
        if len(ticks) > 2 and ticks[-1] - ticks[-2] < step / 2:
            del ticks[-2]
    ax.set_xticks(ticks, [dates[i][5:] if len(dates[i]) >= 10 else dates[i] for i in ticks], rotation=0)


def fleet_trend(dates: list[str], lines: list[dict], *, pinned: int | None, tonight: int | None, unit: str,
                title: str, alt: str) -> dict:
    """The store's nights, oldest first: one line per rail plane and the fleet (lines: {label, values, fleet}),
    the pinned night marked with a dashed line, tonight the last point (a ring)."""
    fig = new_figure(7.5, 2.7)
    ax = fig.add_subplot()
    x = np.arange(len(dates))
    for i, line in enumerate(lines):
        v = np.asarray(line["values"], dtype=float)
        if line.get("fleet"):
            ax.plot(x, v, color=PINNED_COLOR, linewidth=2.2, marker="o", markersize=3.5, label=line["label"],
                    zorder=4)
        else:
            ax.plot(x, v, color=_rail_color(i), linewidth=1.1, marker="o", markersize=2.5, label=line["label"])
        if tonight is not None and np.isfinite(v[tonight]):
            ax.plot([tonight], [v[tonight]], "o", markersize=8, mfc="none", mec=THRESHOLD_COLOR, mew=1.4, zorder=5)
    if pinned is not None:
        ax.axvline(pinned, color=PINNED_COLOR, linestyle="--", linewidth=0.9)
        ax.annotate("pinned", (pinned, 0.0), xycoords=("data", "axes fraction"), xytext=(3, 3),
                    textcoords="offset points", fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(unit)
    ax.grid(True, color="#dddddd", linewidth=0.6)
    _night_ticks(ax, dates)
    ax.set_xlim(-0.5, max(len(dates) - 0.5, 0.5))
    ax.legend(loc="best", frameon=False, ncol=min(5, len(lines)))
    return _figure(fig, alt)


def sparkline(values, *, pinned, tonight, flags: bool = False, severity: str = "fail", alt: str) -> dict:
    """One component's series, small and without axes: a point per night, oldest first; the pinned night a
    square, tonight (last) a dot in the finding's colour. flags: 0 / 1 per night (a finding that night),
    drawn as a strip of bars (red: a finding)."""
    v = np.asarray([np.nan if x is None else x for x in values], dtype=float)
    pinned, tonight = np.asarray(pinned, dtype=bool), np.asarray(tonight, dtype=bool)
    fig = Figure(figsize=(2.4, 0.55), dpi=DPI)  # no layout engine: one axes, placed by hand
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.03, 0.12, 0.94, 0.76))
    ax.set_axis_off()
    x = np.arange(len(v))
    mark = THRESHOLD_COLOR if severity == "fail" else WARN_POINT
    if flags:
        on = np.nan_to_num(v) >= 0.5
        ax.bar(x, np.where(on, 1.0, 0.3), width=0.72, color=np.where(on, THRESHOLD_COLOR, FLAG_OFF),
               edgecolor=np.where(pinned, PINNED_COLOR, "none"), linewidth=1.0)
        ax.set_ylim(0, 1.05)
    else:
        ax.plot(x, v, color="#1f77b4", linewidth=1.2)
        ax.plot(x, v, "o", markersize=2, color="#1f77b4")
        ax.plot(x[pinned], v[pinned], "s", markersize=5, mfc="none", mec=PINNED_COLOR, mew=1.0)
        ax.plot(x[tonight], v[tonight], "o", markersize=4.5, color=mark)
        finite = v[np.isfinite(v)]
        if len(finite):
            lo, hi = float(finite.min()), float(finite.max())
            pad = (hi - lo) * 0.15 or abs(hi) * 0.02 or 1.0
            ax.set_ylim(lo - pad, hi + pad)
    ax.set_xlim(-0.6, max(len(v) - 0.4, 0.6))
    return _figure(fig, alt)


# --- the switch tree of a rail -----------------------------------------------------

MAX_LEAVES = 32        # leaves drawn at most; the rest as "+N leaves" (a shaded leaf is always drawn)
MAX_SPINES = 32        # the same for spines
NODES_LISTED = 16      # nodes drawn one by one when no drawn leaf has more
WARN_COLOR = "#f2a900"
# How a component is shaded: a finding names it (fail, warn), or names it only among the explanations
# the measured pairs cannot tell apart (fail-alt, warn-alt: lighter, hatched or dashed).
MARKS = {
    "fail": {"face": THRESHOLD_COLOR, "edge": "#7f1414", "text": "white", "hatch": None, "line": THRESHOLD_COLOR,
             "style": "-", "label": "fail"},
    "warn": {"face": WARN_COLOR, "edge": "#8a5300", "text": "black", "hatch": None, "line": WARN_COLOR,
             "style": "-", "label": "warn"},
    "fail-alt": {"face": "#f6b8b8", "edge": THRESHOLD_COLOR, "text": "black", "hatch": "////", "line": "#e57373",
                 "style": (0, (4, 2)), "label": "fail, cannot be told apart"},
    "warn-alt": {"face": "#ffe3a3", "edge": "#b07a00", "text": "black", "hatch": "////", "line": "#f5c451",
                 "style": (0, (4, 2)), "label": "warn, cannot be told apart"},
}
MARK_RANK = {"warn-alt": 1, "fail-alt": 2, "warn": 3, "fail": 4}
_PLAIN = {"face": "#e8eef7", "edge": "#5f6670", "text": "#1d2127", "hatch": None}
_UPLINK_COLOR = "#a3a9b1"


def worse_mark(a: str | None, b: str | None) -> str | None:
    """The stronger of two marks (a finding over an alternative, fail over warn)."""
    return max((m for m in (a, b) if m), key=MARK_RANK.get, default=None)


def collapse(names: list[str], keep, limit: int) -> tuple[list[str], int]:
    """At most `limit` names in their order, every one in `keep` among them: (drawn, how many left out)."""
    names = list(names)
    if len(names) <= limit:
        return names, 0
    keep = set(keep) & set(names)
    room = max(0, limit - len(keep))
    chosen = set(keep)
    for n in names:
        if room <= 0:
            break
        if n not in chosen:
            chosen.add(n)
            room -= 1
    drawn = [n for n in names if n in chosen]
    return drawn, len(names) - len(drawn)


def _fit(text: str, width_in: float, font: float) -> str:
    """`text` cut in the middle ("ib-l…r0-17") to about what fits in width_in inches at `font` points."""
    chars = max(4, int(width_in * 72 / (0.6 * font)))
    if len(text) <= chars:
        return text
    head = (chars - 1) // 2
    return text[:head] + "…" + text[len(text) - (chars - 1 - head):]


def _hosts(summarize, nodes, chars: int) -> str:
    """A hostlist of `nodes` in about `chars` characters: whole ranges, then "…" for the rest."""
    text = summarize(nodes, 100_000)
    if len(text) <= chars:
        return text
    cut = text[:max(1, chars - 3)]
    if "," in cut[1:]:
        cut = cut[:cut.rindex(",")]  # end at a range or a name
    return cut + (",…]" if cut.count("[") > cut.count("]") else ",…")


def _box(ax, x, y_top, w, h, label, mark, *, font, rotate, dashed=False, zorder=3):
    from matplotlib.patches import FancyBboxPatch

    style = MARKS[mark] if mark else _PLAIN
    patch = FancyBboxPatch((x - w / 2, y_top - h), w, h, boxstyle="round,pad=0,rounding_size=0.04",
                           facecolor=style["face"], edgecolor=style["edge"], hatch=style["hatch"],
                           linewidth=1.6 if mark else 0.8,
                           linestyle="--" if dashed or (mark or "").endswith("-alt") else "-", zorder=zorder)
    ax.add_patch(patch)
    if label:
        text = _fit(label, (h if rotate else w) - 0.06, font)
        ax.text(x, y_top - h / 2, text, ha="center", va="center", fontsize=font, rotation=90 if rotate else 0,
                color=style["text"], zorder=zorder + 1, clip_on=False,
                fontweight="bold" if mark in ("fail", "warn") else "normal",
                bbox=dict(facecolor="white", alpha=0.75, edgecolor="none", pad=0.6) if mark and mark.endswith("-alt")
                else None)


def tree(tree, *, title: str, marks: dict, alt: str, summarize=None) -> dict:
    """One rail's switch tree: spines on top, leaves below, uplinks as lines, each leaf's nodes under it.

    tree: switchtree.fabric.Tree. marks: {"leaves": {leaf: mark}, "spines": {spine: mark}, "uplinks":
    {(leaf, spine): mark}, "nodes": {node: mark}, "plane": mark | None}, a mark one of MARKS.
    summarize(nodes, limit) -> a short hostlist (default data.compress_hosts). Above MAX_LEAVES
    leaves the unshaded ones past the first are one "+N leaves" box; nodes are drawn one by one only
    when no drawn leaf has more than NODES_LISTED, else a count and a compressed hostlist, the marked
    ones named under it.
    """
    if summarize is None:
        from .data import compress_hosts as summarize

    lay = _tree_layout(tree, marks, summarize)
    fig = Figure(figsize=(lay.width, lay.height), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, lay.width)
    ax.set_ylim(0, lay.height)
    ax.set_axis_off()
    _tree_heading(ax, lay, title)
    counts = _tree_uplinks(ax, tree, lay)
    _tree_spines(ax, lay)
    _tree_leaves(ax, tree, lay)
    _tree_footing(ax, tree, lay, counts)
    return _figure(fig, alt)


def _tree_layout(tree, marks: dict, summarize) -> SimpleNamespace:
    """Where each part of `tree` goes, in inches from the bottom left: the leaves and spines drawn (the
    others counted in one box), their slots and boxes, what is written under each leaf, the figure's size."""
    leaf_marks, spine_marks = marks.get("leaves") or {}, marks.get("spines") or {}
    link_marks, node_marks = marks.get("uplinks") or {}, marks.get("nodes") or {}
    all_leaves = list(tree.leaves)
    marked_leaves = set(leaf_marks) | {leaf for leaf, _ in link_marks} | \
        {leaf for leaf, ns in tree.leaves.items() if any(n in node_marks for n in ns)}
    leaves, hidden_leaves = collapse(all_leaves, marked_leaves, MAX_LEAVES)
    all_spines = sorted({u.spine for u in tree.uplinks})
    spines, hidden_spines = collapse(all_spines, set(spine_marks) | {s for _, s in link_marks}, MAX_SPINES)
    leaf_slots = len(leaves) + (1 if hidden_leaves else 0)
    spine_slots = len(spines) + (1 if hidden_spines else 0)

    margin = 0.3
    width = min(12.0, max(6.5, 2 * margin + 1.15 * max(leaf_slots, spine_slots, 1)))
    usable = width - 2 * margin
    slot = usable / max(1, leaf_slots)
    spine_slot = usable / max(1, spine_slots)
    wide = slot >= 0.8
    spine_wide = spine_slot >= 0.8
    leaf_w, spine_w = min(1.1, slot * 0.86), min(1.2, spine_slot * 0.86)
    leaf_h = 0.34 if wide else 0.95
    spine_h = (0.34 if spine_wide else 0.95) if spine_slots else 0.0
    gap = (1.0 if leaf_slots <= 16 else 1.3) if spine_slots else 0.0
    per_leaf = max((len(tree.leaves[leaf]) for leaf in leaves), default=0)
    listed = wide and per_leaf <= NODES_LISTED
    row = 0.19
    hosts_lines, nodes_h = _leaf_hosts(tree, leaves, node_marks, summarize, slot=slot, wide=wide, listed=listed,
                                       per_leaf=per_leaf, row=row)
    top_band = 0.55
    height = top_band + spine_h + gap + leaf_h + 0.1 + nodes_h + 0.2
    spine_top = height - top_band
    leaf_top = spine_top - spine_h - gap
    return SimpleNamespace(
        leaf_marks=leaf_marks, spine_marks=spine_marks, link_marks=link_marks, node_marks=node_marks,
        plane=marks.get("plane"), all_leaves=all_leaves, leaves=leaves, hidden_leaves=hidden_leaves, spines=spines,
        hidden_spines=hidden_spines, margin=margin, width=width, height=height, slot=slot, spine_slot=spine_slot,
        wide=wide, spine_wide=spine_wide, leaf_w=leaf_w, spine_w=spine_w, leaf_h=leaf_h, spine_h=spine_h,
        listed=listed, row=row, hosts_lines=hosts_lines, spine_top=spine_top, leaf_top=leaf_top,
        node_top=leaf_top - leaf_h - 0.1,
        leaf_x={leaf: margin + (i + 0.5) * slot for i, leaf in enumerate(leaves)},
        spine_x={s: margin + (i + 0.5) * spine_slot for i, s in enumerate(spines)})


def _leaf_hosts(tree, leaves, node_marks, summarize, *, slot, wide, listed, per_leaf, row) -> tuple[dict, float]:
    """What is written under each drawn leaf, and the height it takes: nothing when its nodes are drawn
    one by one (listed); else a hostlist, wrapped under a wide leaf or upright under a narrow one."""
    hosts_lines: dict[str, list[str]] = {}
    if listed:
        nodes_h = 0.1 + row * max(1, per_leaf)
    elif wide:
        import textwrap
        chars = max(8, int((slot - 0.08) * 72 / (0.6 * 7)))
        for leaf in leaves:
            text = _hosts(summarize, tree.leaves[leaf], 3 * chars)
            hosts_lines[leaf] = textwrap.wrap(text.replace(",", ", "), chars, break_long_words=True)[:3]
        marked_rows = max((min(5, sum(n in node_marks for n in tree.leaves[leaf])) for leaf in leaves), default=0)
        nodes_h = 0.1 + 0.16 * (1 + max((len(v) for v in hosts_lines.values()), default=1) + marked_rows)
    else:  # narrow: text turned upright under each leaf, the marked nodes in a second column
        narrow_chars = 34
        for leaf in leaves:
            members = tree.leaves[leaf]
            marked = [n for n in members if n in node_marks]
            hosts_lines[leaf] = [f"{len(members):,}: " + _hosts(summarize, members, narrow_chars - 6)]
            if marked:
                hosts_lines[leaf].append(_hosts(summarize, marked, narrow_chars))
        longest = max((len(t) for v in hosts_lines.values() for t in v), default=8)
        nodes_h = 0.2 + longest * 0.6 * 6.5 / 72
    return hosts_lines, nodes_h


def _tree_heading(ax, lay: SimpleNamespace, title: str) -> None:
    """The title (and whether the rail plane is flagged), and a legend of the marks used."""
    from matplotlib.patches import Patch

    used = {m for m in [lay.plane, *lay.leaf_marks.values(), *lay.spine_marks.values(), *lay.link_marks.values(),
                        *lay.node_marks.values()] if m}
    ax.text(lay.margin, lay.height - 0.27, title + (" — rail plane flagged" if lay.plane else ""), ha="left",
            va="center", fontsize=10, fontweight="bold", color="#1d2127")
    if used:
        handles = [Patch(facecolor=MARKS[m]["face"], edgecolor=MARKS[m]["edge"], hatch=MARKS[m]["hatch"],
                         linestyle="--" if m.endswith("-alt") else "-", label=MARKS[m]["label"])
                   for m in sorted(used, key=lambda m: -MARK_RANK[m])]
        ax.legend(handles=handles, loc="center right", bbox_to_anchor=(lay.width - 0.15, lay.height - 0.27),
                  bbox_transform=ax.transData, ncols=len(handles), frameon=False, fontsize=7.5,
                  handlelength=1.4, columnspacing=1.0)


def _tree_uplinks(ax, tree, lay: SimpleNamespace) -> set[int]:
    """The uplinks between the drawn leaves and spines; returns the cable counts of their lines."""
    from matplotlib.collections import LineCollection

    leaves, spines, leaf_x, spine_x = lay.leaves, lay.spines, lay.leaf_x, lay.spine_x
    # uplinks: one line per leaf-spine pair (parallel cables counted), fanned across both boxes
    cables: dict[tuple[str, str], int] = {}
    for u in tree.uplinks:
        if u.leaf in leaf_x and u.spine in spine_x:
            cables[(u.leaf, u.spine)] = cables.get((u.leaf, u.spine), 0) + 1
    plain, shaded = [], []
    n_leaf, n_spine = max(1, len(leaves) - 1), max(1, len(spines) - 1)
    for (leaf, spine), count in cables.items():
        li, si = leaves.index(leaf), spines.index(spine)
        x0 = leaf_x[leaf] + lay.leaf_w * 0.7 * ((si / n_spine) - 0.5 if len(spines) > 1 else 0)
        x1 = spine_x[spine] + lay.spine_w * 0.7 * ((li / n_leaf) - 0.5 if len(leaves) > 1 else 0)
        seg = ((x0, lay.leaf_top), (x1, lay.spine_top - lay.spine_h))
        mark = lay.link_marks.get((leaf, spine))
        (shaded if mark else plain).append((seg, mark, count))
    if plain:
        ax.add_collection(LineCollection([s for s, _, _ in plain], colors=_UPLINK_COLOR,
                                         linewidths=0.9 if len(plain) <= 64 else 0.5, zorder=1))
    for seg, mark, _count in sorted(shaded, key=lambda t: MARK_RANK[t[1]]):
        style = MARKS[mark]
        ax.plot(*zip(*seg), color=style["line"], linewidth=3.0 if mark in ("fail", "warn") else 2.4,
                linestyle=style["style"], zorder=2, solid_capstyle="round")
    counts = set(cables.values())
    if len(counts) > 1 and len(cables) <= 24:  # parallel cables, where the count differs between lines
        for seg, mark, count in plain + shaded:
            if count > 1:
                (x0, y0), (x1, y1) = seg
                ax.text(x0 + 0.3 * (x1 - x0), y0 + 0.3 * (y1 - y0), f"×{count}", fontsize=6.5, ha="center",
                        va="center", color="#3c4043", zorder=4,
                        bbox=dict(facecolor="white", edgecolor="none", pad=0.3, alpha=0.85))
    return counts


def _tree_spines(ax, lay: SimpleNamespace) -> None:
    for s in lay.spines:
        _box(ax, lay.spine_x[s], lay.spine_top, lay.spine_w, lay.spine_h, s, lay.spine_marks.get(s),
             font=7.5 if lay.spine_wide else 7, rotate=not lay.spine_wide)
    if lay.hidden_spines:
        _box(ax, lay.margin + (len(lay.spines) + 0.5) * lay.spine_slot, lay.spine_top, lay.spine_w, lay.spine_h,
             f"+{lay.hidden_spines} spines", None, font=7, rotate=not lay.spine_wide, dashed=True)


def _tree_leaves(ax, tree, lay: SimpleNamespace) -> None:
    """Each drawn leaf's box and its nodes under it: one box each (listed), else a hostlist."""
    for leaf in lay.leaves:
        x, members = lay.leaf_x[leaf], tree.leaves[leaf]
        _box(ax, x, lay.leaf_top, lay.leaf_w, lay.leaf_h, leaf, lay.leaf_marks.get(leaf),
             font=7.5 if lay.wide else 7, rotate=not lay.wide)
        marked = [n for n in members if n in lay.node_marks]
        if lay.listed:
            for j, n in enumerate(members):
                mark = lay.node_marks.get(n)
                _box(ax, x, lay.node_top - j * lay.row, lay.leaf_w * 0.9, lay.row * 0.82, n, mark, font=6.5,
                     rotate=False, zorder=3)
        elif lay.wide:
            _wide_leaf_nodes(ax, lay, x, members, marked, lay.hosts_lines.get(leaf, []))
        else:
            _narrow_leaf_nodes(ax, lay, x, marked, lay.hosts_lines.get(leaf, []))


def _wide_leaf_nodes(ax, lay: SimpleNamespace, x: float, members: list[str], marked: list[str],
                     lines: list[str]) -> None:
    """Under a wide leaf: its node count, its hostlist, and its marked nodes (past 5, the first 4 and a count)."""
    node_marks = lay.node_marks
    y = lay.node_top - 0.02
    ax.text(x, y, f"{len(members):,} node{'' if len(members) == 1 else 's'}", ha="center", va="top",
            fontsize=7.5, fontweight="bold", color="#1d2127")
    for line in lines:
        y -= 0.16
        ax.text(x, y, line, ha="center", va="top", fontsize=7, color="#5f6670")
    shown_marked = marked if len(marked) <= 5 else marked[:4]
    for n in shown_marked:
        y -= 0.16
        ax.text(x, y, _fit(n, lay.slot - 0.1, 7), ha="center", va="top", fontsize=7, fontweight="bold",
                color=MARKS[node_marks[n]]["edge"] if node_marks[n] != "fail" else THRESHOLD_COLOR)
    if len(marked) > len(shown_marked):
        y -= 0.16
        ax.text(x, y, f"+{len(marked) - len(shown_marked)} more marked", ha="center", va="top",
                fontsize=7, color=THRESHOLD_COLOR)


def _narrow_leaf_nodes(ax, lay: SimpleNamespace, x: float, marked: list[str], lines: list[str]) -> None:
    # narrow: upright text hanging from the leaf; the marked nodes in a second column
    if lines:
        ax.text(x - (0.07 if marked else 0), lay.node_top, lines[0], rotation=90, ha="right", va="center",
                rotation_mode="anchor", fontsize=6.5, color="#3c4043")
    if marked and len(lines) > 1:
        worst = None
        for n in marked:
            worst = worse_mark(worst, lay.node_marks[n])
        ax.text(x + 0.08, lay.node_top, lines[1], rotation=90, ha="right", va="center", rotation_mode="anchor",
                fontsize=6.5, fontweight="bold",
                color=THRESHOLD_COLOR if worst.startswith("fail") else MARKS["warn"]["edge"])


def _tree_footing(ax, tree, lay: SimpleNamespace, counts: set[int]) -> None:
    """The "+N leaves" box, the cables per line when every line has the same count, the plane's frame."""
    from matplotlib.patches import Rectangle

    if lay.hidden_leaves:
        hidden_nodes = sum(len(tree.leaves[leaf]) for leaf in lay.all_leaves if leaf not in lay.leaf_x)
        _box(ax, lay.margin + (len(lay.leaves) + 0.5) * lay.slot, lay.leaf_top, lay.leaf_w, lay.leaf_h,
             f"+{lay.hidden_leaves} leaves ({hidden_nodes:,} nodes)" if lay.wide else f"+{lay.hidden_leaves} leaves",
             None, font=7, rotate=not lay.wide, dashed=True)
    if len(counts) == 1 and counts != {1}:
        ax.text(lay.margin, 0.12, f"each line: {next(iter(counts))} cables", fontsize=7, color="#5f6670",
                ha="left", va="bottom")
    if lay.plane:
        style = MARKS[lay.plane]
        ax.add_patch(Rectangle((0.06, 0.06), lay.width - 0.12, lay.height - 0.55, fill=False,
                               edgecolor=style["line"], linewidth=2.2,
                               linestyle="--" if lay.plane.endswith("-alt") else "-", zorder=0))
