"""``posenc plot``'s figures drawn with matplotlib, and rendered to PNG/SVG/PDF bytes: the builders take the data
of :mod:`posenc_cli.plots.data` (and ``posenc eval``'s pass rates and losses) and do no math.

They build the Figure directly (never pyplot), so no backend or display is involved; saving picks Agg, SVG or PDF
by format. matplotlib loads on the first figure.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from posenc_cli.errors import PosencError
from posenc_cli.plots.data import HEATMAP_SIZE, SIDE_BY_SIDE_SIZE, AlibiData, DecayCurve, FrequencyChart, Heatmap
from posenc_cli.units import format_length

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CHART_SIZE = (9.0, 5.5)
DEFAULT_DPI = 150
FORMATS = ("png", "svg", "pdf")


# ---------------------------------------------------------------- figures (matplotlib, no math)


def _new_figure(size: tuple[float, float], dpi: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=size, dpi=dpi)


def _colormap(name: str, bad: str | None = None) -> Any:
    import matplotlib

    try:
        cmap = matplotlib.colormaps[name]
    except KeyError:
        raise PosencError(f"--cmap {name!r} is not a matplotlib colormap (e.g. RdBu, viridis, magma)") from None
    return cmap.with_extremes(bad=bad) if bad else cmap


def check_cmap(name: str) -> None:
    """PosencError unless ``name`` is a matplotlib colormap (imports matplotlib, not pyplot)."""
    _colormap(name)


def _draw_heatmap(ax: Axes, hm: Heatmap, cmap: Any) -> Any:
    n, d = hm.full_shape
    image = ax.imshow(hm.values, cmap=cmap, vmin=hm.vmin, vmax=hm.vmax, aspect="auto", interpolation="nearest",
                      extent=(0, d, n, 0))
    ax.set_xlabel(hm.col_label)
    ax.set_ylabel(hm.row_label)
    title = hm.title + (f"\n{hm.aggregation_note}" if hm.aggregated else "")
    ax.set_title(title, fontsize=10)
    for y, label in hm.hlines:
        if y < n:
            ax.axhline(y, color="black", linestyle="--", linewidth=1.2)
            ax.text(d * 0.99, y, label, ha="right", va="bottom", fontsize=8,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.8, "linewidth": 0})
    return image


def heatmap_figure(heatmaps: Sequence[Heatmap], *, cmap: str = "RdBu", dpi: float = DEFAULT_DPI,
                   title: str | None = None) -> Figure:
    """One heatmap, or several side by side sharing one colorbar; ``title`` is the figure's suptitle."""
    panels = len(heatmaps)
    fig = _new_figure(SIDE_BY_SIDE_SIZE if panels > 1 else HEATMAP_SIZE, dpi)
    cm = _colormap(cmap)
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    top = 0.82 if (title or panels > 1) else 0.88
    fig.subplots_adjust(left=0.11 if panels == 1 else 0.07, right=0.93 if panels == 1 else 0.95, bottom=0.11,
                        top=top, wspace=0.18)
    images = [_draw_heatmap(ax, hm, cm) for ax, hm in zip(axes, heatmaps, strict=True)]
    for ax in axes[1:]:
        ax.set_ylabel("")
    bar = fig.colorbar(images[0], ax=axes, fraction=0.05 if panels == 1 else 0.03, pad=0.02, shrink=1.0,
                       aspect=25)
    bar.set_label(heatmaps[0].value_label)
    if title:
        fig.suptitle(title, fontsize=12)
    return fig


def alibi_figure(data: AlibiData, *, cmap: str = "viridis", dpi: float = DEFAULT_DPI,
                 title: str | None = None) -> Figure:
    """Each head's causal bias matrix as a small multiple (masked future keys grey), slope in each title."""
    from matplotlib.patches import Patch

    heads = data.heads
    ncols = min(heads, 4 if heads <= 8 else math.ceil(math.sqrt(heads)))
    nrows = math.ceil(heads / ncols)
    fig = _new_figure((2.6 * ncols + 1.4, 2.5 * nrows + 1.3), dpi)
    cm = _colormap(cmap, bad="#d0d0d0")
    n = data.seq_len
    vmin = data.vmin
    axes = []
    images = []
    for h in range(heads):
        ax = fig.add_subplot(nrows, ncols, h + 1)
        axes.append(ax)
        images.append(ax.imshow(data.bias[h], cmap=cm, vmin=vmin, vmax=0.0, interpolation="nearest",
                                extent=(-0.5, n - 0.5, n - 0.5, -0.5)))
        ax.set_title(f"head {h + 1}: {data.slope_labels[h]}", fontsize=9)
        ax.tick_params(labelsize=7)
        if h % ncols == 0:
            ax.set_ylabel("query i", fontsize=8)
        if h >= heads - ncols:
            ax.set_xlabel("key j", fontsize=8)
    bottom = 0.6 / (2.5 * nrows + 1.3)
    fig.subplots_adjust(left=0.06, right=0.9, bottom=max(bottom + 0.05, 0.08), top=1 - 1.0 / (2.5 * nrows + 1.3),
                        wspace=0.35, hspace=0.45)
    bar = fig.colorbar(images[0], ax=axes, fraction=0.04, pad=0.03)
    bar.set_label("bias  -m * (i - j)")
    fig.legend(handles=[Patch(facecolor="#d0d0d0", edgecolor="grey", label="masked: j > i (future key, -inf)")],
               loc="lower center", fontsize=9, frameon=False)
    fig.suptitle(title or f"ALiBi causal bias: {heads} heads, {n} positions (official slopes)", fontsize=12)
    return fig


# colour, line style, width: methods that coincide on some pairs (linear, yarn and llama3 all divide the longest
# wavelengths by the factor) stay visible on top of each other
_METHOD_STYLE: dict[str, tuple[str, str, float]] = {
    "linear": ("tab:blue", "-", 4.0), "ntk": ("tab:orange", "-", 1.6), "dynamic": ("tab:purple", "-", 1.6),
    "yarn": ("tab:green", "-", 2.2), "longrope": ("tab:brown", "-", 1.6), "llama3": ("tab:red", "--", 1.6)}


def frequency_figure(chart: FrequencyChart, *, dpi: float = DEFAULT_DPI, title: str | None = None) -> Figure:
    """Wavelength (log y) per pair: unscaled and each method; context lengths as lines; YaRN/llama3 bands."""
    fig = _new_figure(CHART_SIZE, dpi)
    ax = fig.add_subplot(1, 1, 1)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.1, top=0.88)
    x = chart.pairs
    if chart.yarn_range is not None:
        low, high = chart.yarn_range
        ax.axvspan(low, high, color="tab:green", alpha=0.12, linewidth=0,
                   label=f"YaRN ramp: pairs {low:g}-{high:g}")
    if chart.llama3_band is not None:
        short, long = chart.llama3_band
        ax.axhspan(short, long, color="tab:red", alpha=0.1, linewidth=0,
                   label=f"llama3 blended band: wavelengths {short:,.0f}-{long:,.0f}")
    ax.plot(x, chart.unscaled, color="black", linewidth=2.2, label=f"unscaled (theta {chart.theta:g})", gid="unscaled")
    for curve in chart.curves:
        label = curve.method
        if curve.method == "ntk":
            label += f" (theta {curve.rope_parameters['rope_theta']:,.0f})"
        if curve.attention_factor != 1.0:
            label += f" (attention x{curve.attention_factor:.3f})"
        colour, style, width = _METHOD_STYLE.get(curve.method, ("grey", "-", 1.5))
        ax.plot(x, curve.wavelengths, color=colour, linestyle=style, linewidth=width, label=label,
                gid=f"method:{curve.method}")
    ax.axhline(chart.original_max, color="dimgrey", linestyle="--", linewidth=1,
               label=f"original context {chart.original_max:,}", gid="original_max")
    ax.axhline(chart.target, color="dimgrey", linestyle=":", linewidth=1, label=f"target {chart.target:,}",
               gid="target")
    ax.set_yscale("log")
    ax.set_xlim(0, max(int(x[-1]), 1))
    ax.set_xlabel("pair i")
    ax.set_ylabel("wavelength 2*pi / theta_i  (positions, log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title or f"RoPE wavelengths: rotary dim {chart.rotary_dim}, theta {chart.theta:g}, "
                 f"x{chart.factor:g} ({chart.original_max:,} -> {chart.target:,})", fontsize=11)
    return fig


def decay_figure(curves: Sequence[DecayCurve], *, dpi: float = DEFAULT_DPI, title: str | None = None,
                 log_x: bool = False) -> Figure:
    """RoFormer relative upper bound against relative distance, one line per base."""
    fig = _new_figure(HEATMAP_SIZE, dpi)
    ax = fig.add_subplot(1, 1, 1)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.88)
    for curve in curves:
        ax.plot(curve.distances, curve.bound, linewidth=1.2, label=f"base {curve.base:g}", gid=f"base:{curve.base:g}")
    if log_x:
        ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(0, int(curves[0].distances[-1]))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("relative distance m - n")
    ax.set_ylabel("relative upper bound  (2/d) * sum_j |S_j|")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9)
    ax.set_title(title or f"RoFormer long-term decay: head dim {curves[0].head_dim}", fontsize=11)
    return fig


@dataclass(frozen=True)
class PassGrid:
    """One eval run's needle pass rates: ``rates[i][j]`` at ``lengths[i]`` and ``depths[j]`` (None: not run); for a
    task run, ``rows`` names the tasks and ``rates[i][j]`` is task j's score at ``lengths[i]`` (0 .. 1)."""

    title: str
    lengths: Sequence[int]
    depths: Sequence[float]
    rates: Sequence[Sequence[float | None]]
    rows: Sequence[str] = ()


def pass_rate_figure(grids: Sequence[PassGrid], *, dpi: float = DEFAULT_DPI, title: str | None = None) -> Figure:
    """Depth x length heatmaps of needle pass rates (task runs: task x length scores), one panel per run, each cell
    printed (red 0 .. green 1)."""
    panels = len(grids)
    tasks = any(grid.rows for grid in grids)
    fig = _new_figure((max(5.0, 4.2 * panels), 4.4 + (0.15 * max(len(g.rows) for g in grids) if tasks else 0)), dpi)
    cm = _colormap("RdYlGn", bad="#d0d0d0")
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    fig.subplots_adjust(left=0.08 if panels > 1 else 0.14, right=0.9, bottom=0.14, top=0.8, wspace=0.12)
    image = None
    for ax, grid in zip(axes, grids, strict=True):
        values = np.array([[np.nan if v is None else v for v in row] for row in grid.rates], dtype=np.float64).T
        image = ax.imshow(values, cmap=cm, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(len(grid.lengths)), [format_length(n) for n in grid.lengths], fontsize=8)
        labels = list(grid.rows) if grid.rows else [f"{d:.0%}" for d in grid.depths]
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("context length (tokens: prompt + answer)")
        ax.set_title(grid.title, fontsize=10)
        for (row, col), value in np.ndenumerate(values):
            if not np.isnan(value):
                ax.text(col, row, f"{value:.2f}".rstrip("0").rstrip(".") if value not in (0, 1) else f"{value:.0f}",
                        ha="center", va="center", fontsize=7)
    if tasks:
        fig.subplots_adjust(left=0.22 if panels == 1 else 0.16)  # task names are wider than depths
    axes[0].set_ylabel("task" if tasks else "needle depth")
    for ax in axes[1:]:
        ax.set_yticklabels([])
    if image is not None:
        bar = fig.colorbar(image, ax=axes, fraction=0.04, pad=0.02)
        bar.set_label("score (share of the values found)" if tasks else "pass rate")
    default = "RULER tasks: score by task and length" if tasks else "needle retrieval: pass rate by depth and length"
    fig.suptitle(title or default, fontsize=11)
    return fig


@dataclass(frozen=True)
class LossCurve:
    """Mean loss per position bin (``starts[i]`` .. ``stops[i]``) of one run."""

    label: str
    starts: Sequence[int]
    stops: Sequence[int]
    loss: Sequence[float]


def loss_figure(curves: Sequence[LossCurve], *, marks: Sequence[tuple[int, str]] = (), dpi: float = DEFAULT_DPI,
                title: str | None = None) -> Figure:
    """Per-position loss against position (log axis), one line per run; ``marks`` are labelled vertical lines."""
    fig = _new_figure(HEATMAP_SIZE, dpi)
    ax = fig.add_subplot(1, 1, 1)
    for curve in curves:
        centres = [math.sqrt(max(a, 1) * b) for a, b in zip(curve.starts, curve.stops, strict=True)]
        ax.plot(centres, curve.loss, marker="o", markersize=3, label=curve.label)
    for x, label in marks:
        ax.axvline(x, color="black", linestyle="--", linewidth=1)
        ax.text(x, ax.get_ylim()[1], f" {label}", va="top", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("position (tokens)")
    ax.set_ylabel("loss per token (nats)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9)
    ax.set_title(title or "per-position loss of the served model", fontsize=11)
    return fig


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    """The figure rendered to PNG/SVG/PDF bytes (nothing touches the disk)."""
    if fmt not in FORMATS:
        raise PosencError(f"format {fmt!r} is not supported; use one of: {', '.join(FORMATS)}")
    buf = io.BytesIO()
    metadata = {"Software": None} if fmt == "png" else None  # no version stamp: same bytes across upgrades
    fig.savefig(buf, format=fmt, dpi=fig.dpi, metadata=metadata)  # the dpi the pixel grid was sized for
    return buf.getvalue()
