"""Data and figures for ``posenc plot``: pure functions, no I/O.

Two layers, kept apart so every picture can be checked against posenc's numbers:

* **Data functions** (numpy only) compute what is drawn: :func:`heatmap_data_sinusoidal`,
  :func:`rope_cos_data`, :func:`alibi_data`, :func:`frequency_chart_data`, :func:`decay_bound`. Scaled RoPE
  frequencies come from ``scaling.rope_parameters`` + ``frequencies.compute``, exactly as ``posenc scale
  --explain`` gets them; sinusoidal and ALiBi values from ``encodings``.
* **Figure builders** (:func:`heatmap_figure`, :func:`alibi_figure`, :func:`frequency_figure`,
  :func:`decay_figure`) take those results and return a ``matplotlib.figure.Figure``. They do no math. They build
  the Figure directly (never pyplot), so no backend or display is involved; saving picks Agg, SVG or PDF by format.
  :func:`terminal_heatmap` / :func:`terminal_alibi` draw the same data in the terminal with rich.

Large heatmaps are never materialised: a ``(positions, features)`` matrix is reduced to the output's pixel grid by
exact block means. The mean of ``sin(p*w)`` (or ``cos``) over ``b`` consecutive positions starting at ``a`` has the
closed form ``sin(b*w/2) / (b*sin(w/2)) * sin((a + (b-1)/2) * w)``, so each block costs one evaluation, whatever
the sequence length; feature blocks are averaged in column chunks of bounded size.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from posenc_cli.errors import PosencError
from posenc_cli.rope.encodings import alibi_bias, alibi_slopes, rope_inv_freq, sinusoidal, sinusoidal_inv_freq
from posenc_cli.units import format_length

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from rich.console import RenderableType

    from posenc_cli.rope.frequencies import Frequencies
    from posenc_cli.rope.scaling import ScaleRequest

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Figure sizes in inches; the heatmap pixel grid (see :func:`pixel_grid`) follows from them and the dpi.
HEATMAP_SIZE = (8.0, 5.0)
SIDE_BY_SIDE_SIZE = (13.0, 5.5)
CHART_SIZE = (9.0, 5.5)
#: Fraction of the figure a heatmap's axes cover (width, height), matching the subplot margins used below.
_AXES_FRACTION = (0.72, 0.76)
#: Column chunk for block means: at most this many float64 values are alive at once (32 MiB).
_CHUNK_VALUES = 1 << 22
DEFAULT_DPI = 150
FORMATS = ("png", "svg", "pdf")


# ---------------------------------------------------------------- heatmap data


@dataclass(frozen=True)
class Heatmap:
    """A matrix to draw: ``values`` (rows x cols) standing for a ``full_shape`` matrix.

    When ``values.shape != full_shape`` every cell is the exact mean of its block of the full matrix (blocks from
    :func:`block_edges`). ``hlines`` are (row coordinate, label) marks such as the trained context length.
    """

    values: F64
    full_shape: tuple[int, int]
    title: str
    row_label: str
    col_label: str
    value_label: str
    vmin: float = -1.0
    vmax: float = 1.0
    hlines: tuple[tuple[float, str], ...] = ()

    @property
    def aggregated(self) -> bool:
        return tuple(self.values.shape) != self.full_shape

    @property
    def aggregation_note(self) -> str:
        """'' or 'aggregated to RxC (block means of the N x D matrix)' for titles."""
        if not self.aggregated:
            return ""
        r, c = self.values.shape
        n, d = self.full_shape
        return f"aggregated to {r}x{c} (block means of the {n:,} x {d:,} matrix)"


def pixel_grid(dpi: float, panels: int = 1) -> tuple[int, int]:
    """(rows, cols) of pixels one heatmap panel covers in a saved figure: the grid large inputs reduce to."""
    width, height = SIDE_BY_SIDE_SIZE if panels > 1 else HEATMAP_SIZE
    rows = int(height * dpi * _AXES_FRACTION[1])
    cols = int(width * dpi * _AXES_FRACTION[0] / panels)
    return max(rows, 1), max(cols, 1)


def block_edges(n: int, out: int) -> I64:
    """Edges of ``min(n, out)`` nearly equal blocks covering ``0..n`` (``edges[k]:edges[k+1]`` is block k)."""
    k = max(1, min(n, out))
    edges: I64 = (np.arange(k + 1, dtype=np.int64) * n) // k
    return edges


def trig_block_means(starts: I64, sizes: I64, freqs: F64, kind: str) -> F64:
    """``mean(f(p * w) for p in start .. start+size-1)`` for f = sin or cos, every block x every frequency.

    Closed form (Dirichlet kernel), shape ``(len(starts), len(freqs))``; exact ``f(start * w)`` for size 1.
    """
    trig = np.sin if kind == "sin" else np.cos
    a = starts.astype(np.float64)[:, None]
    w = np.asarray(freqs, dtype=np.float64)[None, :]
    half = w / 2
    sin_half = np.sin(half)
    # w a multiple of 2*pi (never for RoPE's w <= 1): every term equals the first one
    degenerate = np.abs(sin_half) < 1e-12
    # the Dirichlet factor depends on the block size only, and blocks come in one or two sizes
    unique, which = np.unique(sizes, return_inverse=True)
    b = unique.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(degenerate, 1.0, np.sin(b * half) / (b * sin_half))
    out: F64 = trig((a + (sizes.astype(np.float64)[:, None] - 1) / 2) * w)
    out *= factor[which.reshape(-1)]
    if degenerate.any():
        cols = np.flatnonzero(degenerate[0])
        out[:, cols] = trig(a * w[:, cols])
    return out


def _aggregate_columns(
    row_edges: I64, col_edges: I64, columns: Callable[[I64, I64, int, int], F64]
) -> F64:
    """Block means over columns, computed chunk by chunk.

    ``columns(starts, sizes, c0, c1)`` returns the row-block means of full columns ``c0 .. c1-1`` (shape
    ``(rows_out, c1 - c0)``); chunks hold whole column blocks and about :data:`_CHUNK_VALUES` values.
    """
    starts, sizes = row_edges[:-1], np.diff(row_edges)
    rows_out, blocks = starts.size, col_edges.size - 1
    out: F64 = np.empty((rows_out, blocks), dtype=np.float64)
    per_chunk = max(1, _CHUNK_VALUES // rows_out)
    first = 0
    while first < blocks:
        c0 = int(col_edges[first])
        last = int(np.searchsorted(col_edges, c0 + per_chunk, side="right")) - 1
        last = min(max(last, first + 1), blocks)
        c1 = int(col_edges[last])
        values = columns(starts, sizes, c0, c1)
        local = col_edges[first:last] - c0
        sums = np.add.reduceat(values, local, axis=1)
        out[:, first:last] = sums / np.diff(col_edges[first : last + 1])[None, :]
        first = last
    return out


def heatmap_data_sinusoidal(
    max_len: int, d_model: int, max_rows: int, max_cols: int, base: float = 10000.0
) -> Heatmap:
    """The sinusoidal encoding ``PE[pos, i]`` as a heatmap of at most ``max_rows x max_cols`` cells.

    Small inputs give exactly ``encodings.sinusoidal(max_len, d_model, base)``; larger ones its block means,
    computed without building the full matrix (memory ``O(max_rows * max_cols)``).
    """
    row_edges, col_edges = block_edges(max_len, max_rows), block_edges(d_model, max_cols)
    title = f"Sinusoidal positional encoding: {max_len:,} positions x {d_model:,} dims, base {base:g}"
    labels = ("position", "dimension i  (even: sin, odd: cos)", "PE[pos, i]")
    if row_edges.size - 1 == max_len and col_edges.size - 1 == d_model:
        exact: F64 = sinusoidal(max_len, d_model, base).astype(np.float64, copy=False)
        return Heatmap(exact, (max_len, d_model), title, *labels)
    freqs = sinusoidal_inv_freq(d_model, base)  # the frequencies encodings.sinusoidal uses

    def columns(starts: I64, sizes: I64, c0: int, c1: int) -> F64:
        dims = np.arange(c0, c1)
        out: F64 = np.empty((starts.size, dims.size), dtype=np.float64)
        even = dims % 2 == 0
        out[:, even] = trig_block_means(starts, sizes, freqs[dims[even] // 2], "sin")
        out[:, ~even] = trig_block_means(starts, sizes, freqs[dims[~even] // 2], "cos")
        return out

    values = _aggregate_columns(row_edges, col_edges, columns)
    return Heatmap(values, (max_len, d_model), title, *labels)


def cos_heatmap(max_len: int, inv_freq: npt.ArrayLike, max_rows: int, max_cols: int, title: str,
                hlines: tuple[tuple[float, str], ...] = ()) -> Heatmap:
    """``cos(pos * inv_freq[i])`` over positions x pairs (float64 angles), block-averaged past the grid."""
    freqs = np.asarray(inv_freq, dtype=np.float64)
    row_edges, col_edges = block_edges(max_len, max_rows), block_edges(freqs.size, max_cols)

    def columns(starts: I64, sizes: I64, c0: int, c1: int) -> F64:
        if row_edges.size - 1 == max_len:  # one position per row: the plain matrix
            direct: F64 = np.cos(starts.astype(np.float64)[:, None] * freqs[None, c0:c1])
            return direct
        return trig_block_means(starts, sizes, freqs[c0:c1], "cos")

    values = _aggregate_columns(row_edges, col_edges, columns)
    return Heatmap(values, (max_len, freqs.size), title, row_label="position",
                   col_label="pair i  (frequency theta_i)", value_label="cos(pos * theta_i)", hlines=hlines)


def scaled_frequencies(req: ScaleRequest) -> tuple[npt.NDArray[np.float32], Frequencies]:
    """(unscaled inv_freq, ``Frequencies``) for a scaling request, exactly as ``posenc scale --explain``."""
    from posenc_cli.rope.frequencies import for_request

    freqs = for_request(req)
    return freqs.base_inv_freq, freqs


def rope_cos_data(
    max_len: int,
    head_dim: int,
    theta: float,
    max_rows: int,
    max_cols: int,
    *,
    partial_rotary_factor: float = 1.0,
    request: ScaleRequest | None = None,
) -> list[Heatmap]:
    """RoPE's ``cos(pos * theta_i)`` panels: the unscaled one, and with ``request`` the scaled one beside it.

    Unscaled frequencies are ``frequencies.default_inv_freq`` (transformers' float32 values); scaled ones come
    from :func:`scaled_frequencies`. With a request, ``theta``/``head_dim`` are the request's.
    """
    from posenc_cli.rope.frequencies import default_inv_freq
    from posenc_cli.rope.scaling import rope_parameters

    if request is None:
        rotary = int(head_dim * partial_rotary_factor)
        inv = default_inv_freq(theta, rotary)
        title = f"unscaled: theta {theta:g}, rotary dim {rotary}"
        return [cos_heatmap(max_len, inv, max_rows, max_cols, title)]
    original, freqs = scaled_frequencies(request)
    mark: tuple[tuple[float, str], ...] = ((float(request.original_max), f"original context {request.original_max:,}"),)
    if request.target != request.original_max and request.target < max_len:
        mark += ((float(request.target), f"target {request.target:,}"),)
    left = cos_heatmap(max_len, original, max_rows, max_cols,
                       f"unscaled: theta {request.theta:g}, rotary dim {request.rotary_dim}", mark)
    how = f"{request.method} x{request.factor:g}: {request.original_max:,} -> {request.target:,}"
    if request.method == "ntk":
        how += f" (theta {rope_parameters(request)['rope_theta']:,.1f})"
    if freqs.attention_factor != 1.0:
        how += f"; cos/sin x {freqs.attention_factor:.4f} in attention"
    right = cos_heatmap(max_len, freqs.inv_freq, max_rows, max_cols, how, mark)
    return [left, right]


# ---------------------------------------------------------------- ALiBi


@dataclass(frozen=True)
class AlibiData:
    """Causal ALiBi bias per head: ``bias[h]`` is a masked array (future keys masked), ``slopes[h]`` its slope."""

    bias: np.ma.MaskedArray[Any, np.dtype[np.float64]]
    slopes: F64
    slope_labels: list[str]

    @property
    def heads(self) -> int:
        return int(self.slopes.size)

    @property
    def seq_len(self) -> int:
        return int(self.bias.shape[-1])

    @property
    def vmin(self) -> float:
        """The most negative unmasked bias (colour scale bottom; the top is 0 on the diagonal)."""
        return float(self.bias.min())


def alibi_data(heads: int, seq_len: int) -> AlibiData:
    """``encodings.alibi_bias`` (causal) with the ``-inf`` cells masked, and the official slopes."""
    bias = alibi_bias(heads, seq_len, causal=True)
    slopes = alibi_slopes(heads)
    # every official slope is a power of two with an exponent that is a short binary fraction
    labels = [f"m = 2^{round(math.log2(m), 6):g} = {m:.4g}" for m in slopes.tolist()]
    return AlibiData(np.ma.masked_invalid(bias), slopes, labels)


# ---------------------------------------------------------------- frequencies


@dataclass(frozen=True)
class MethodCurve:
    """One method's frequencies: ``wavelengths = 2*pi / inv_freq`` (positions per turn) for every pair."""

    method: str
    inv_freq: npt.NDArray[np.float32]
    wavelengths: F64
    attention_factor: float
    rope_parameters: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FrequencyChart:
    """Wavelength per pair for each method against the unscaled spectrum, plus the bands to shade."""

    unscaled: F64
    curves: list[MethodCurve]
    original_max: int
    target: int
    factor: float
    theta: float
    rotary_dim: int
    yarn_range: tuple[float, float] | None
    llama3_band: tuple[float, float] | None  # (high_freq_wavelen, low_freq_wavelen): the blended wavelengths

    @property
    def pairs(self) -> I64:
        return np.arange(self.unscaled.size, dtype=np.int64)


def frequency_chart_data(requests: Sequence[ScaleRequest]) -> FrequencyChart:
    """Per-method wavelengths from ``scaling`` + ``frequencies.compute`` (at the target length), one model/scale.

    ``requests`` come from ``scaling.make_request`` (one per method, same theta, head dim and lengths).
    """
    from posenc_cli.rope.scaling import rope_parameters

    if not requests:
        raise PosencError("give at least one method")
    first = requests[0]
    curves: list[MethodCurve] = []
    yarn_range = llama3_band = None
    unscaled: F64 | None = None
    for req in requests:
        original, freqs = scaled_frequencies(req)
        if unscaled is None:
            unscaled = 2 * math.pi / original.astype(np.float64)
        curves.append(MethodCurve(req.method, freqs.inv_freq, freqs.wavelengths, freqs.attention_factor,
                                  rope_parameters(req), dict(freqs.details)))
        if req.method == "yarn":
            yarn_range = (float(freqs.details["low"]), float(freqs.details["high"]))
        elif req.method == "llama3":
            llama3_band = (float(freqs.details["high_freq_wavelen"]), float(freqs.details["low_freq_wavelen"]))
    assert unscaled is not None
    return FrequencyChart(unscaled, curves, first.original_max, first.target, first.factor, first.theta,
                          first.rotary_dim, yarn_range, llama3_band)


# ---------------------------------------------------------------- RoFormer long-term decay


@dataclass(frozen=True)
class DecayCurve:
    """RoFormer's relative upper bound ``B(r)`` for ``r = 0 .. max_distance`` at one base."""

    base: float
    head_dim: int
    distances: I64
    bound: F64


def decay_bound(head_dim: int, base: float, max_distance: int, chunk: int = 4096) -> DecayCurve:
    """RoFormer section 3.4.3: ``B(r) = (2/d) * sum_{j=1..d/2} |S_j(r)|``, ``S_j = sum_{i<j} exp(1j*r*theta_i)``.

    ``theta_i = base**(-2i/d)``, ``i = 0 .. d/2-1`` (``encodings.rope_inv_freq``), so ``S_j`` is the partial sum
    of the first ``j`` rotations and ``B(0) = (d/2 + 1) / 2``. Vectorised over distances in chunks.
    """
    theta = rope_inv_freq(head_dim, base)
    distances = np.arange(max_distance + 1, dtype=np.int64)
    bound: F64 = np.empty(distances.size, dtype=np.float64)
    for s in range(0, distances.size, chunk):
        r = distances[s : s + chunk].astype(np.float64)[:, None]
        partial = np.cumsum(np.exp(1j * r * theta[None, :]), axis=1)
        bound[s : s + chunk] = np.abs(partial).sum(axis=1) * (2.0 / head_dim)
    return DecayCurve(float(base), head_dim, distances, bound)


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
    """One eval run's needle pass rates: ``rates[i][j]`` at ``lengths[i]`` and ``depths[j]`` (None: not run)."""

    title: str
    lengths: Sequence[int]
    depths: Sequence[float]
    rates: Sequence[Sequence[float | None]]


def pass_rate_figure(grids: Sequence[PassGrid], *, dpi: float = DEFAULT_DPI, title: str | None = None) -> Figure:
    """Depth x length heatmaps of needle pass rates, one panel per run, each cell printed (red 0 .. green 1)."""
    panels = len(grids)
    fig = _new_figure((max(5.0, 4.2 * panels), 4.4), dpi)
    cm = _colormap("RdYlGn", bad="#d0d0d0")
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    fig.subplots_adjust(left=0.08 if panels > 1 else 0.14, right=0.9, bottom=0.14, top=0.8, wspace=0.12)
    image = None
    for ax, grid in zip(axes, grids, strict=True):
        values = np.array([[np.nan if v is None else v for v in row] for row in grid.rates], dtype=np.float64).T
        image = ax.imshow(values, cmap=cm, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(len(grid.lengths)), [format_length(n) for n in grid.lengths], fontsize=8)
        ax.set_yticks(range(len(grid.depths)), [f"{d:.0%}" for d in grid.depths], fontsize=8)
        ax.set_xlabel("context length (tokens: prompt + answer)")
        ax.set_title(grid.title, fontsize=10)
        for (row, col), value in np.ndenumerate(values):
            if not np.isnan(value):
                ax.text(col, row, f"{value:.2f}".rstrip("0").rstrip(".") if value not in (0, 1) else f"{value:.0f}",
                        ha="center", va="center", fontsize=7)
    axes[0].set_ylabel("needle depth")
    for ax in axes[1:]:
        ax.set_yticklabels([])
    if image is not None:
        bar = fig.colorbar(image, ax=axes, fraction=0.04, pad=0.02)
        bar.set_label("pass rate")
    fig.suptitle(title or "needle retrieval: pass rate by depth and length", fontsize=11)
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


# ---------------------------------------------------------------- terminal (rich, no matplotlib)

_PALETTES: dict[str, tuple[str, ...]] = {
    "RdBu": ("#67001f", "#b2182b", "#d6604d", "#f4a582", "#fddbc7", "#f7f7f7", "#d1e5f0", "#92c5de", "#4393c3",
             "#2166ac", "#053061"),
    "coolwarm": ("#3b4cc0", "#6f92f3", "#aac7fd", "#dddcdc", "#f7b89c", "#e7745b", "#b40426"),
    "viridis": ("#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b",
                "#fde725"),
    "magma": ("#000004", "#1c1044", "#4f127b", "#812581", "#b5367a", "#e55964", "#fb8761", "#fec287", "#fcfdbf"),
    "gray": ("#000000", "#ffffff"),
}
_MASKED_RGB = (110, 110, 110)
HALF_BLOCK = "\u2580"  # upper half block: foreground = top cell, background = bottom cell


def terminal_palette(name: str) -> npt.NDArray[np.float64]:
    """Anchor colours (k x 3, 0-255) of a terminal colormap; ``_r`` reverses it."""
    base = name[:-2] if name.endswith("_r") else name
    anchors = _PALETTES.get(base) or _PALETTES.get(base.lower())
    if anchors is None:
        known = ", ".join(sorted(_PALETTES))
        raise PosencError(f"--cmap {name!r} has no terminal palette; use one of: {known} (or with _r)")
    rgb = np.array([[int(h[i : i + 2], 16) for i in (1, 3, 5)] for h in anchors], dtype=np.float64)
    return rgb[::-1] if name.endswith("_r") else rgb


def _to_rgb(values: npt.ArrayLike, vmin: float, vmax: float, palette: F64) -> npt.NDArray[np.int64]:
    arr = np.ma.filled(np.ma.masked_invalid(np.ma.asarray(values, dtype=np.float64)), np.nan)
    t = np.clip((arr - vmin) / (vmax - vmin if vmax > vmin else 1.0), 0.0, 1.0)
    pos = np.nan_to_num(t) * (palette.shape[0] - 1)
    lo = np.minimum(np.floor(pos).astype(np.int64), palette.shape[0] - 2)
    frac = (pos - lo)[..., None]
    rgb = palette[lo] * (1 - frac) + palette[lo + 1] * frac
    rgb[np.isnan(arr)] = _MASKED_RGB
    out: npt.NDArray[np.int64] = np.rint(rgb).astype(np.int64)
    return out


def _half_blocks(rgb: npt.NDArray[np.int64]) -> Any:
    from rich.color import Color
    from rich.style import Style
    from rich.text import Text

    styles: dict[tuple[int, ...], Style] = {}
    text = Text(no_wrap=True, overflow="crop")
    rows = rgb.shape[0]
    for y in range(0, rows, 2):
        for x in range(rgb.shape[1]):
            top = tuple(int(v) for v in rgb[y, x])
            bottom = tuple(int(v) for v in rgb[y + 1, x]) if y + 1 < rows else ()
            key = top + bottom
            style = styles.get(key)
            if style is None:
                style = Style(color=Color.from_rgb(*top), bgcolor=Color.from_rgb(*bottom) if bottom else None)
                styles[key] = style
            text.append(HALF_BLOCK, style)
        if y + 2 < rows:
            text.append("\n")
    return text


def _scale_bar(vmin: float, vmax: float, palette: F64, width: int = 24) -> Any:
    from rich.text import Text

    rgb = _to_rgb(np.linspace(vmin, vmax, width)[None, :].repeat(2, axis=0), vmin, vmax, palette)
    bar = Text(f"{vmin:.3g} ", no_wrap=True)
    bar.append_text(_half_blocks(rgb))
    bar.append(f" {vmax:.3g}")
    return bar


def terminal_heatmap(heatmaps: Sequence[Heatmap], *, cmap: str = "RdBu", title: str | None = None) -> RenderableType:
    """Heatmaps as coloured half-block cells (two rows per line), side by side; a rich renderable.

    Each panel is drawn at its ``values`` shape: one column per terminal cell, two rows per line.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    palette = terminal_palette(cmap)
    grid = Table.grid(padding=(0, 2))
    cells = []
    for hm in heatmaps:
        n, d = hm.full_shape
        head = Text(hm.title, style="bold")
        axes = Text(f"rows: {hm.row_label} 0..{n - 1} (top to bottom); columns: {hm.col_label} 0..{d - 1}")
        parts: list[Any] = [head, axes]
        if hm.aggregated:
            parts.append(Text(hm.aggregation_note, style="italic"))
        for y, label in hm.hlines:
            if y < n:
                parts.append(Text(f"{label}: line {int(y * hm.values.shape[0] / n) // 2 + 1} of "
                                  f"{(hm.values.shape[0] + 1) // 2}"))
        parts.append(_half_blocks(_to_rgb(hm.values, hm.vmin, hm.vmax, palette)))
        parts.append(Text(f"{hm.value_label}: ", no_wrap=True) + _scale_bar(hm.vmin, hm.vmax, palette))
        grid.add_column(width=hm.values.shape[1])
        cells.append(Group(*parts))
    grid.add_row(*cells)
    return Group(Text(title, style="bold"), grid) if title else grid


def terminal_alibi(data: AlibiData, width: int, *, cmap: str = "viridis", title: str | None = None) -> RenderableType:
    """ALiBi heads as half-block small multiples; masked cells grey. Long sequences are sampled to fit."""
    from rich.columns import Columns
    from rich.console import Group
    from rich.text import Text

    palette = terminal_palette(cmap)
    n = data.seq_len
    cells = max(4, min(n, width - 2))
    idx = np.unique(np.linspace(0, n - 1, cells).round().astype(np.int64))
    vmin = data.vmin
    panels = []
    for h in range(data.heads):
        sub = data.bias[h][np.ix_(idx, idx)]
        label = Text(f"head {h + 1}: {data.slope_labels[h]}", style="bold")
        panels.append(Group(label, _half_blocks(_to_rgb(sub, vmin, 0.0, palette))))
    header = title or f"ALiBi causal bias: {data.heads} heads, {n} positions (official slopes)"
    lines: list[Any] = [Text(header, style="bold"),
                        Text("rows: query i (top to bottom); columns: key j; grey: masked future keys (-inf)")]
    if idx.size < n:
        lines.append(Text(f"sampled {idx.size} of {n} positions per axis", style="italic"))
    lines.append(Columns(panels, padding=(1, 2), width=max(idx.size, 24)))
    lines.append(Text("bias -m*(i-j): ") + _scale_bar(vmin, 0.0, palette))
    return Group(*lines)
