"""Figures of the report: matplotlib (Agg canvas, no pyplot state), inlined as PNG data URIs.

Each function takes small, already aggregated numpy arrays or frames and returns
``{"uri": "data:image/png;base64,...", "alt": ...}``. Node x node heatmaps are
drawn with imshow; above MAX_CELLS nodes a pixel is the worst value of a block of
nodes, so one bad link among 1,024 nodes stays visible and the image stays small.
"""
from __future__ import annotations

import base64
import io
import math
import warnings

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from ..spec.profile import format_size

DPI = 100
MAX_CELLS = 256        # heatmap cells per axis before block pooling
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


def _pool(matrix: np.ndarray, k: int, worst) -> np.ndarray:
    """Blocks of k x k cells -> their worst finite value (NaN when the block has none)."""
    n = matrix.shape[0]
    m = math.ceil(n / k)
    padded = np.full((m * k, m * k), np.nan)
    padded[:n, :n] = matrix
    blocks = padded.reshape(m, k, m, k).transpose(0, 2, 1, 3).reshape(m, m, k * k)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks
        return worst(blocks, axis=2)


def heatmap(matrix: np.ndarray, failed: np.ndarray, nodes: list[str], *, title: str, unit: str,
            higher_better: bool, alt: str) -> dict:
    """src (rows) x dst (columns) heatmap; failed cells framed in red; grey = not measured."""
    n = len(nodes)
    k = max(1, math.ceil(n / MAX_CELLS))
    if k > 1:
        shown = _pool(matrix, k, np.nanmin if higher_better else np.nanmax)
        fail_shown = _pool(failed.astype(float), k, np.nanmax) > 0
    else:
        shown, fail_shown = matrix, failed
    cells = shown.shape[0]
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
    ax.set_xlabel("destination node" + (f" (a pixel = worst of {k} x {k} nodes)" if k > 1 else ""))
    ax.set_ylabel("source node")
    step = max(1, math.ceil(cells / MAX_TICKS))
    ticks = list(range(0, cells, step))
    labels = [nodes[i * k] for i in ticks]
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
    fail_i, fail_j = np.nonzero(fail_shown)
    if fail_i.size:
        if cells <= 64:  # a red frame around the cell
            cell_points = side * 0.75 * 72 / cells
            ax.scatter(fail_j, fail_i, marker="s", s=(cell_points * 0.92) ** 2, facecolors="none",
                       edgecolors="#ff1744", linewidths=1.6)
        else:  # cells of a pixel or two: a ring that can be seen
            ax.scatter(fail_j, fail_i, marker="o", s=90, facecolors="none", edgecolors="#ff1744", linewidths=1.4,
                       clip_on=False)
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
